"""Plain PyTorch checkpoint files: state dicts, the wrappers around them, steps, losses.

A *checkpoint file* is a ``.pt`` / ``.pth`` / ``.bin`` / ``.ckpt`` file written by
``torch.save`` or a ``.safetensors`` file, holding a state dict (parameter name ->
tensor) or a dict that wraps one under ``state_dict`` (PyTorch Lightning),
``model_state_dict`` or ``model`` (most hand-written training loops). A loss saved beside
it (``val_loss``, else ``loss``, else nanoGPT's ``best_val_loss``) is that checkpoint's
quality measure. Names carrying ``torch.compile``'s ``_orig_mod.`` prefix (nanoGPT saves
its compiled model's state dict) are read without it.

Files are untrusted: ``torch.load`` runs with ``weights_only=True``, so a file that needs
arbitrary Python objects to load is refused with the reason instead of executed.

A ``transformers`` config found with the file (:func:`find_config`: the checkpoint's own,
else a ``config.json`` beside it) lets :mod:`toposig.model.matrices` choose the matrices
by module type, as for a model folder.

A folder of such files with the step in each name is a series: the step is the number
after ``step`` in the name (``step_000100.pt``, ``epoch=3-step=100.ckpt``), else the last
number in it (``ckpt-100.pt``), else the step the file records in itself (nanoGPT's
``iter_num``, Lightning's ``global_step``: :func:`stored_step`), so nanoGPT's own
``ckpt.pt``, overwritten at every evaluation, is the checkpoint of its ``iter_num``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toposig.records import ground_truth_problem

logger = logging.getLogger(__name__)

CHECKPOINT_SUFFIXES: tuple[str, ...] = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
WRAPPER_KEYS: tuple[str, ...] = ("state_dict", "model_state_dict", "model")
# nanoGPT saves ``best_val_loss`` as it assigns it: the validation loss of the very
# weights it saves (``always_save_checkpoint`` or not).
LOSS_KEYS: tuple[str, ...] = ("val_loss", "loss", "best_val_loss")
STEP_KEYS: tuple[str, ...] = ("iter_num", "global_step")  # nanoGPT's, Lightning's
COMPILE_PREFIX = "_orig_mod."  # torch.compile's wrapper module, in every saved name
_STEP_WORD_RE = re.compile(r"(?:^|[^a-z])step[=_\-]?(\d+)", re.IGNORECASE)
_LAST_NUMBER_RE = re.compile(r"(\d+)(?!.*\d)")


class CheckpointFileError(ValueError):
    """A checkpoint file cannot be read as weights; the message says why."""


def is_checkpoint_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in CHECKPOINT_SUFFIXES


def step_from_name(name: str, pattern: re.Pattern[str] | None = None) -> int | None:
    """The training step in a checkpoint file's name, or ``None``.

    ``pattern`` (``--revision-pattern``, one group for the step) is tried first on the
    name without its suffix and must match all of it.

    >>> step_from_name("epoch=3-step=100.ckpt"), step_from_name("ckpt-100.pt")
    (100, 100)
    """
    stem = name
    for suffix in CHECKPOINT_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    if pattern is not None and (m := pattern.fullmatch(stem)):
        group = m.group(1)
        if group is None or not (group.isascii() and group.isdigit()):
            raise ValueError(f"--revision-pattern {pattern.pattern!r} matches {stem!r}, but "
                             f"its group captured {group!r}, not a whole number: the group "
                             "must be the step")
        return int(group)
    m = _STEP_WORD_RE.search(stem) or _LAST_NUMBER_RE.search(stem)
    return int(m.group(1)) if m else None


def discover_files(folder: Path, pattern: re.Pattern[str] | None = None
                   ) -> dict[int | None, Path]:
    """Checkpoint files of a folder keyed by step.

    The step is the one in a file's name (:func:`step_from_name`), else the one the file
    records (:func:`stored_step`: nanoGPT's ``iter_num``). A file whose step another file
    already names is left out, as are files with no step at all when others have one
    (with a warning); a single file with no step is keyed ``None``. When a step has both
    a ``.safetensors`` file and a pickled one in their names, the safetensors file is
    taken.

    Raises:
        ValueError: two files of the same step in the same format.
    """
    files = sorted(p for p in folder.iterdir() if is_checkpoint_file(p)
                   and not p.name.startswith((".", "_")))
    by_step: dict[int | None, Path] = {}
    unnumbered = []
    for f in files:
        step = step_from_name(f.name, pattern)
        if step is None:
            unnumbered.append(f)
            continue
        if step in by_step:
            other = by_step[step]
            safe = [p for p in (other, f) if p.suffix.lower() == ".safetensors"]
            if len(safe) != 1:
                raise ValueError(f"{folder} holds two checkpoint files of step {step}: "
                                 f"{other.name} and {f.name}")
            by_step[step] = safe[0]
            continue
        by_step[step] = f
    stepless = []
    for f in unnumbered:
        step = stored_step(f)
        if step is None:
            stepless.append(f)
        elif step in by_step:
            logger.warning("%s: leaving out %s: it records step %d, which %s already is",
                           folder, f.name, step, by_step[step].name)
        else:
            by_step[step] = f
    if not by_step and len(stepless) == 1:
        return {None: stepless[0]}
    if stepless:
        logger.warning("%s: ignoring %d checkpoint file(s) with no step in the name or the "
                       "file: %s", folder, len(stepless),
                       ", ".join(p.name for p in stepless[:5]))
    return by_step


def stored_step(path: str | Path) -> int | None:
    """The training step a checkpoint file records in itself, or ``None``.

    The first of :data:`STEP_KEYS` (nanoGPT's ``iter_num``, Lightning's ``global_step``)
    that holds a whole number >= 0, at the top level of a ``torch.save`` dict or in a
    ``.safetensors`` file's metadata. No tensor is read: the pickle is loaded with its
    storages memory-mapped (``mmap=True``, ``weights_only=True``); a file that cannot be
    read so (an old non-zip format, one that needs code to load, a damaged one) gives
    ``None`` here and its own error when it is loaded.
    """
    path = Path(path)
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
        else:
            import torch

            meta = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # noqa: BLE001 - unreadable here; loading will say why
        logger.debug("%s: no stored step read (%s)", path.name, exc)
        return None
    if not isinstance(meta, Mapping):
        return None
    for key in STEP_KEYS:
        step = _as_step(meta.get(key))
        if step is not None:
            return step
    return None


def _as_step(value) -> int | None:
    """A whole number >= 0 from an int, a one-element integer tensor or a digit string."""
    try:
        import torch

        if isinstance(value, torch.Tensor):
            if value.numel() != 1 or value.is_floating_point() or value.dtype == torch.bool:
                return None
            value = int(value.item())
    except (TypeError, ValueError, RuntimeError):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


@dataclass
class LoadedStateDict:
    """Tensors of a checkpoint file and what else it said.

    Attributes:
        tensors: parameter name -> tensor (CPU).
        loss: the stored loss, or ``None``.
        loss_key: where it was found (``val_loss``, ``loss``, ``best_val_loss``).
        wrapper: the key the state dict was found under, or ``None`` for a bare one.
        config: the ``transformers`` config found with the file (a ``config.json``'s
            contents: a dict with ``model_type``), or ``None`` (:func:`find_config`).
        config_source: where it was found (``"config.json beside the file"``), for the
            record's matrix rule.
    """

    tensors: dict
    loss: float | None = None
    loss_key: str | None = None
    wrapper: str | None = None
    config: dict | None = None
    config_source: str | None = None


def load_checkpoint_file(path: str | Path) -> LoadedStateDict:
    """Read a checkpoint file's state dict (and stored loss) without running its code,
    and the ``transformers`` config found with it (:func:`find_config`).

    Raises:
        CheckpointFileError: unreadable, not a state dict, or it needs more than weights
            to load (``weights_only=True`` refused it).
    """
    path = Path(path)
    loaded = _load(path)
    if loaded.config is None:
        loaded.config, loaded.config_source = find_config(path)
    return loaded


def _load(path: Path) -> LoadedStateDict:
    if path.suffix.lower() == ".safetensors":
        return _load_safetensors(path)
    import pickle

    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "unsupported global" not in str(exc).lower():  # garbage, not a refusal of code
            detail = str(exc).split("WeightsUnpickler error:")[-1].strip().splitlines()[0]
            raise CheckpointFileError(
                f"{path.name} is damaged or not a PyTorch checkpoint (the unpickler stopped: "
                f"{detail})") from exc
        raise CheckpointFileError(
            f"{path.name} needs more than weights to load, and loading it could run code "
            f"from the file, so it was refused (torch.load weights_only=True: "
            f"{str(exc).splitlines()[0]}). Save its state dict instead: "
            "torch.save(model.state_dict(), path), or as .safetensors"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways
        raise CheckpointFileError(f"{path.name} is damaged or not a PyTorch checkpoint "
                                  f"({type(exc).__name__}: {exc})") from exc
    return unwrap_state_dict(obj, path.name)


def unwrap_state_dict(obj, what: str = "checkpoint") -> LoadedStateDict:
    """Find the state dict in a loaded object: bare, or under one of :data:`WRAPPER_KEYS`."""
    if not isinstance(obj, Mapping):
        raise CheckpointFileError(f"{what} holds a {type(obj).__name__}, not a state dict")
    loss, loss_key = _stored_loss(obj)
    config = _as_model_config(obj.get("config"))
    source = "the checkpoint's config entry" if config is not None else None
    for key in WRAPPER_KEYS:
        inner = obj.get(key)
        if isinstance(inner, Mapping) and _tensors_of(inner):
            return LoadedStateDict(strip_compile_prefix(_tensors_of(inner)), loss, loss_key,
                                   key, config, source)
    tensors = strip_compile_prefix(_tensors_of(obj))
    if not tensors:
        raise CheckpointFileError(
            f"{what} holds no tensors: expected a state dict, or one under "
            f"{', '.join(WRAPPER_KEYS)}; its keys are {sorted(map(str, obj))[:8]}"
        )
    return LoadedStateDict(tensors, loss, loss_key, None, config, source)


def find_config(path: str | Path) -> tuple[dict | None, str | None]:
    """The ``transformers`` config of a checkpoint file from the folder it is in: the
    contents of a ``config.json`` beside it, when that is a dict naming a
    ``model_type`` (a Hugging Face model config, not a training loop's own settings).

    Returns:
        ``(config dict, "config.json beside the file")``, or ``(None, None)``.
    """
    import json

    beside = Path(path).parent / "config.json"
    if not beside.is_file():
        return None, None
    try:
        config = _as_model_config(json.loads(beside.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        logger.warning("%s is not readable as a model config: %s", beside, exc)
        return None, None
    return (config, "config.json beside the file") if config is not None else (None, None)


def _as_model_config(value) -> dict | None:
    """``value`` as a config dict when it is one of a ``transformers`` model (a mapping,
    or a JSON string of one, naming a ``model_type``), else ``None``."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, Mapping) and isinstance(value.get("model_type"), str):
        return dict(value)
    return None


def strip_compile_prefix(tensors: dict) -> dict:
    """``tensors`` with :data:`COMPILE_PREFIX` taken off the names that start with it
    (``_orig_mod.transformer.h.0.attn.c_attn.weight`` ->
    ``transformer.h.0.attn.c_attn.weight``), as nanoGPT's ``sample.py`` does, so a
    compiled run's matrices are named as an uncompiled one's. The same tensors (ties
    kept); unchanged when no name has the prefix or taking it off would make two names
    one."""
    if not any(k.startswith(COMPILE_PREFIX) for k in tensors):
        return tensors
    out = {k.removeprefix(COMPILE_PREFIX): v for k, v in tensors.items()}
    return out if len(out) == len(tensors) else tensors


def _tensors_of(mapping: Mapping) -> dict:
    import torch

    return {str(k): v for k, v in mapping.items() if isinstance(v, torch.Tensor)}


def _stored_loss(obj: Mapping) -> tuple[float | None, str | None]:
    for key in LOSS_KEYS:
        value = _as_float(obj.get(key))
        if value is not None:
            return value, key
    return None, None


def _as_float(value) -> float | None:
    try:
        import torch

        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                return None
            value = value.item()
        if isinstance(value, bool) or value is None:
            return None
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _load_safetensors(path: Path) -> LoadedStateDict:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as exc:
        raise CheckpointFileError(f"{path.name} cannot be read as safetensors: {exc}") from exc
    if not tensors:
        raise CheckpointFileError(f"{path.name} holds no tensors")
    loss, key = _stored_loss(meta)
    config = _as_model_config(meta.get("config"))
    return LoadedStateDict(strip_compile_prefix(tensors), loss, key, None, config,
                           "the file's metadata" if config is not None else None)


def trainer_state_loss(folder: str | Path) -> tuple[float | None, str | None]:
    """The loss a model folder's ``trainer_state.json`` records, if any.

    Top-level ``val_loss`` / ``loss`` (what this project's trainer writes), else the last
    ``eval_loss`` (then ``loss``) in the Hugging Face Trainer's ``log_history``.
    """
    return trainer_state_dict_loss(read_trainer_state(folder))


def read_trainer_state(folder: str | Path) -> object:
    """The parsed ``trainer_state.json`` of a model folder, or ``None`` when there is none
    or it cannot be read as JSON (a checkpoint without one is not an error)."""
    import json

    path = Path(folder) / "trainer_state.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


_UNREAD = object()  # a state not read yet: the helpers below read the folder's file


def trainer_state_seed(folder: str | Path, state: object = _UNREAD
                       ) -> tuple[int | None, str | None]:
    """The seed and seed group a model folder's ``trainer_state.json`` names (what this
    project's trainer writes for every member of an ensemble:
    :attr:`toposig.model.training.SuiteConfig.seeds`), or ``(None, None)``: no file, no
    such fields, or values of the wrong kind (a seed is a non-negative integer, a group a
    non-empty string; both or neither). ``state``: the file's contents when the caller
    has read them already (:func:`read_trainer_state`)."""
    state = read_trainer_state(folder) if state is _UNREAD else state
    if not isinstance(state, Mapping):
        return None, None
    seed, group = state.get("seed"), state.get("seed_group")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 \
            and isinstance(group, str) and group:
        return seed, group
    return None, None


def trainer_state_ground_truth(folder: str | Path, state: object = _UNREAD) -> dict | None:
    """The ground truth a model folder's ``trainer_state.json`` states (what this project's
    positive-control tasks write: :mod:`toposig.model.tasks`), as records keep it
    (:data:`toposig.records.GROUND_TRUTH`), or ``None``: no file, no ``ground_truth``, or
    one that is not sound (a warning names the folder and what is wrong). ``state``: as
    for :func:`trainer_state_seed`."""
    state = read_trainer_state(folder) if state is _UNREAD else state
    truth = state.get("ground_truth") if isinstance(state, Mapping) else None
    if truth is None:
        return None
    if problem := ground_truth_problem(truth):
        logger.warning("%s: trainer_state.json's ground_truth is left out: it %s", folder,
                       problem.removeprefix("has "))
        return None
    return dict(truth)


def trainer_state_dict_loss(state) -> tuple[float | None, str | None]:
    """The loss a trainer state records (the contents of a ``trainer_state.json``, or a
    live ``TrainerState``'s fields as a dict): top-level ``val_loss`` / ``loss``, else the
    last ``eval_loss`` (then ``loss``) in ``log_history``; ``(None, None)`` when none."""
    if not isinstance(state, Mapping):
        return None, None
    loss, key = _stored_loss(state)
    if loss is not None:
        return loss, key
    for key in ("eval_loss", "loss"):
        for entry in reversed(state.get("log_history") or []):
            value = _as_float(entry.get(key)) if isinstance(entry, Mapping) else None
            if value is not None:
                return value, f"log_history.{key}"
    return None, None
