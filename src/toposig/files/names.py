"""Names that become file and folder names: suite, model and series labels.

Every name that reaches the disk passes through here, so that none can step out of its
folder (``..``, ``/``), hide (a leading ``.``) or overwrite another's files:

- :func:`check_name` refuses a name given as a name (a preset's suite or model name)
  unless it is a plain file name: letters, digits, ``.``, ``_``, ``-``, not starting
  with a dot, at most 100 characters.
- :func:`check_label` also refuses the labels the results folder uses itself
  (:data:`RESERVED_LABELS`: ``all``, whose aggregate is ``data/all_results.json``); every
  label read back from a folder (a record, ``config.json``) passes it before a path is
  built from it.
- :func:`series_labels` turns the models of a run (local paths, Hub ids) into labels
  that are plain file names and unique within the run: the folder's (or repository's)
  own name, with as many parent folders prefixed as it takes to tell two apart
  (``a/run``, ``b/run`` -> ``a-run``, ``b-run``) or to avoid a reserved label
  (``runs/all`` -> ``runs-all``). The same model given twice, or two
  that no prefix tells apart, is refused with both named.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

MAX_LENGTH = 100
QUOTE_CHARS = 40
"""The most characters of an offending value an error message quotes."""


def quoted(value: object) -> str:
    """``repr(value)``, cut to :data:`QUOTE_CHARS` characters with the length of what
    was left out, so that a message never echoes a whole oversized value."""
    text = repr(value)
    if len(text) <= QUOTE_CHARS:
        return text
    return f"{text[:QUOTE_CHARS]}... ({len(text):,} characters)"
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9._-]")


# Labels the results folder itself uses where a model's label goes: data/all_results.json
# sits beside data/<label>_results.json. Compared case-insensitively (macOS and Windows
# file systems do).
RESERVED_LABELS = frozenset({"all"})


class UnsafeNameError(ValueError):
    """A name that cannot be a file name as it is, or labels that collide."""


def check_name(name: object, what: str) -> str:
    """``name`` if it is a plain file name, else raise naming ``what`` and the rule.

    Raises:
        UnsafeNameError: not a string, empty, ``.``/``..``, a leading dot, a path
            separator or any character but letters, digits, ``.``, ``_``, ``-``.
    """
    if not isinstance(name, str) or not _PLAIN.fullmatch(name) or len(name) > MAX_LENGTH:
        raise UnsafeNameError(
            f"{what} {quoted(name)} cannot be a folder name: use letters, digits, '.', '_' and "
            f"'-' only, not starting with '.', at most {MAX_LENGTH} characters")
    return name


def is_reserved(label: str) -> bool:
    """Whether ``label`` is one of :data:`RESERVED_LABELS` (any case)."""
    return label.lower() in RESERVED_LABELS


def check_label(name: object, what: str = "model label") -> str:
    """``name`` if it can label a model's files in a results folder: a plain file name
    (:func:`check_name`) that is not one of the folder's own (:data:`RESERVED_LABELS`).

    Raises:
        UnsafeNameError: naming ``what`` and the rule.
    """
    check_name(name, what)
    if is_reserved(name):
        raise UnsafeNameError(
            f"{what} {name!r} is reserved: the results folder's data/all_results.json "
            "holds every model's entries, and this model's would overwrite it; choose "
            "another name")
    return name


def escape(name: str) -> str:
    """A plain file name made from ``name``: other characters become ``_``, a leading
    dot too, and it is cut to :data:`MAX_LENGTH` characters."""
    out = _UNSAFE_CHAR.sub("_", name)[:MAX_LENGTH]
    if not out or out.startswith("."):
        out = "_" + out[1:] if out else "_"
    return out


def _parts(model: str, is_hub: bool, is_file: bool) -> tuple[str, ...]:
    """The components that identify a model, outermost first: a Hub id's, or the
    resolved path's (a checkpoint file's last one without its suffix)."""
    if is_hub:
        return tuple(p for p in model.split("/") if p)
    path = Path(model).expanduser().resolve()
    parts = tuple(p for p in path.parts if p not in ("/", ""))
    if is_file and parts:
        parts = (*parts[:-1], path.stem)
    return parts or ("_",)


def series_labels(models: Sequence[str], hub: Sequence[bool], files: Sequence[bool]
                  ) -> list[str]:
    """Unique plain-file-name labels for the models of a run, in order.

    Args:
        models: the models as the user gave them (paths or Hub ids).
        hub, files: per model, whether it is a Hub id / a single checkpoint file.

    Raises:
        UnsafeNameError: the same model given twice, or two models no label tells apart;
            the message names both.
    """
    parts = [_parts(m, h, f) for m, h, f in zip(models, hub, files, strict=True)]
    seen: dict[tuple[str, ...], int] = {}
    for i, p in enumerate(parts):
        if p in seen:
            raise UnsafeNameError(f"{models[seen[p]]!r} and {models[i]!r} are the same model; "
                                  "give it once")
        seen[p] = i
    depth = [1] * len(models)
    while True:
        labels = [escape("-".join(p[-d:])) for p, d in zip(parts, depth, strict=True)]
        groups: dict[str, list[int]] = {}
        for i, label in enumerate(labels):
            groups.setdefault(label, []).append(i)
        # a reserved label (a folder named "all") takes its parent's name too, like a clash
        clashes = [g for label, g in groups.items() if len(g) > 1 or is_reserved(label)]
        if not clashes:
            return labels
        for group in clashes:
            deeper = [i for i in group if depth[i] < len(parts[i])]
            if not deeper:
                a = group[0]
                if len(group) == 1:
                    check_label(labels[a], f"the label of {models[a]!r}")
                b = group[1]
                raise UnsafeNameError(
                    f"{models[a]!r} and {models[b]!r} would both be labelled {labels[a]!r}, "
                    "and their results would overwrite each other; rename one folder")
            for i in deeper:
                depth[i] += 1


def folder_name(folder: Path) -> str:
    """A run's default name: the folder's own name, as resolved when it is given as
    ``.``, ``..`` or a path ending in one."""
    return folder.name if folder.name not in ("", ".", "..") else folder.resolve().name
