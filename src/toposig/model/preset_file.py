"""A preset's JSON file, found and read without torch: what ``--preset`` and ``--seeds``
are checked against before a command loads anything heavy (:func:`read_preset`,
:func:`check_seeds`). :mod:`toposig.model.training` builds the suite from it."""

from __future__ import annotations

import json
from pathlib import Path

from toposig.defaults import PRESETS_DIR, preset_names

__all__ = ["TrainingConfigError", "check_seeds", "read_preset", "shown_name"]

SHOWN_CHARACTERS = 60
"""How much of a long ``--preset`` value a message repeats."""


class TrainingConfigError(ValueError):
    """A suite configuration that cannot be trained; the message says why."""


def shown_name(name: str) -> str:
    """``name`` as a message quotes it: whole, or its start and its length when long."""
    if len(name) <= SHOWN_CHARACTERS:
        return repr(name)
    return f"{name[:SHOWN_CHARACTERS]!r}... ({len(name)} characters)"


def read_preset(name_or_path: str) -> dict:
    """The JSON object of a preset by name or path (:func:`load_suite_config`).

    Raises:
        TrainingConfigError: unknown preset (a name no file has, or one too long for a
            file name), or a file that is no JSON object.
    """
    # a shipped preset's name always means the preset, whatever files the folder holds
    shipped = name_or_path in preset_names()
    path = PRESETS_DIR / f"{name_or_path}.json" if shipped else Path(name_or_path)
    try:
        found = path.is_file()
    except (OSError, ValueError):  # a name too long for the system, a NUL character
        found = False
    if not found:
        raise TrainingConfigError(
            f"unknown preset {shown_name(name_or_path)}; presets: {', '.join(preset_names())} "
            f"(files in {PRESETS_DIR}), or pass a path to a JSON file of one"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise TrainingConfigError(f"--preset {str(path)!r} is not a UTF-8 text file: a preset "
                                  "is a JSON file (see src/toposig/presets/)") from exc
    except json.JSONDecodeError as exc:
        raise TrainingConfigError(f"--preset {str(path)!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise TrainingConfigError(f"--preset {str(path)!r} holds a JSON {type(data).__name__}, "
                                  "not an object of suite settings (see src/toposig/presets/)")
    return data


def check_seeds(seeds: int | None) -> None:
    """Refuse a ``--seeds`` below 1 (:func:`toposig.model.training.with_seeds` says the same).

    Raises:
        TrainingConfigError: naming the value.
    """
    if seeds is not None and seeds < 1:
        raise TrainingConfigError(f"--seeds must be at least 1, got {seeds}")
