"""A series' next checkpoint loaded into the model already built for the series.

``from_pretrained`` builds a model from its config and renames the saved tensors to the
module's names at every call (transformers 5: GPT-NeoX's saved ``embed_out.weight`` is
the module's ``lm_head.weight``). For a small model that is 35 to 55 ms a checkpoint, of
which reading the tensors is 2.5 ms: most of the weight stage's loading over a training
run's checkpoints (13.5 s of the seed paper's 255, under a profiler).

When a run only reads the stored weights (no stage runs the model), a checkpoint whose
folder holds the same ``config.json``, byte for byte, and a ``model.safetensors`` with
the same tensors (names, shapes, dtypes) as the series' previous checkpoint is loaded by
copying its tensors into that model, each into the tensor ``transformers`` itself names
for it: its reverse conversion (``revert_weight_conversion``, what ``save_pretrained``
uses), accepted only where it is a plain renaming that covers every tensor of the
model's state dict exactly once. Anything else goes to ``from_pretrained``: another
config, sharded, pickled or adapter weights, remote code, a revision to fetch, a
conversion that is more than a renaming (fused or split tensors), a tensor the file
does not cover (a tied one saved twice, a buffer left out), or a model still in use by
the previous checkpoint. ``tests/test_reload.py`` checks that both ways give the same
tensors, bit for bit, on every architecture of the test matrix.

One model is kept per process (the last series loaded), handed to one checkpoint at a
time: :func:`release` gives it back when that checkpoint's stages are done. A run lets
it go when it ends (``toposig.run.pipeline.execute``); a Ray worker keeps it between its
tasks, for the next checkpoint of the series, until the worker exits.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

SAFETENSORS = "model.safetensors"
CONFIG = "config.json"
# Files beside model.safetensors that make from_pretrained read something else (shards,
# pickled weights it could prefer, an adapter on top): the folder goes the long way.
_OTHER_WEIGHTS = ("model.safetensors.index.json", "pytorch_model.bin",
                  "pytorch_model.bin.index.json", "adapter_config.json",
                  "adapter_model.safetensors", "adapter_model.bin")


@dataclass
class _Template:
    """The model of the last series loaded and how a checkpoint's tensors go into it.

    Attributes:
        key: what a checkpoint must share with it: the dtype and device it was loaded
            in and the bytes of ``config.json`` (which decide the loader class).
        model: the model, or ``None`` where this config's loads go the long way.
        targets: saved tensor name -> the model's tensor it is copied into (together,
            every tensor of its state dict when they were taken: a model moved or cast
            since has other storage, and they are no longer its tensors).
        signature: saved tensor name -> (shape, dtype) in the file it was built from.
        in_use: handed to a checkpoint not yet released.
    """

    key: tuple
    model: object = None
    targets: dict = field(default_factory=dict)
    signature: dict = field(default_factory=dict)
    in_use: bool = False


_lock = threading.Lock()
_template: _Template | None = None


def weights_file(folder: str | Path) -> Path | None:
    """``folder/model.safetensors`` when it is the only weights ``from_pretrained``
    would read there, else ``None``."""
    folder = Path(folder)
    path = folder / SAFETENSORS
    if not path.is_file() or any((folder / n).exists() for n in _OTHER_WEIGHTS):
        return None
    return path


def template_key(folder: str | Path, dtype, device: str) -> tuple | None:
    """What a checkpoint in ``folder`` must share with the series' model to be loaded
    into it; ``None`` when it has no ``config.json`` to compare."""
    try:
        config = (Path(folder) / CONFIG).read_bytes()
    except OSError:
        return None
    return (str(dtype), str(device), config)


def _signature(tensors: dict) -> dict[str, tuple]:
    """name -> (shape, torch dtype) of a loaded safetensors file."""
    return {k: (tuple(v.shape), v.dtype) for k, v in tensors.items()}


def _identity(t) -> tuple:
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _layout(model) -> frozenset:
    return frozenset(_identity(t) for t in model.state_dict().values())


def plain_renaming(model, saved: dict[str, tuple]) -> dict | None:
    """Saved tensor name -> the model's tensor it is loaded into, when ``transformers``'
    reverse conversion of ``model``'s state dict is a plain renaming, the file's
    tensors are names it gives, and they cover every tensor of the state dict exactly
    once (a tied tensor saved under one of its names); else ``None``.

    Args:
        model: a model ``from_pretrained`` loaded from the file.
        saved: the file's tensors: name -> (shape, dtype).
    """
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # another transformers layout: always the long way
        return None
    state = model.state_dict()
    try:
        reverted = revert_weight_conversion(model, dict(state))
    except Exception as exc:  # noqa: BLE001 - a conversion it cannot revert: the long way
        logger.debug("no reverse conversion for %s: %s", type(model).__name__, exc)
        return None
    if not set(saved) <= set(reverted):
        return None  # names it would not give: a legacy or foreign layout
    own = {_identity(t): t for t in state.values()}
    targets: dict = {}
    covered: set[tuple] = set()
    for name in saved:
        tensor = reverted[name]
        ident = _identity(tensor)
        if (ident not in own or ident in covered or tensor.is_meta
                or tuple(tensor.shape) != saved[name][0]):
            return None  # made by a conversion, saved twice, or not loaded
        covered.add(ident)
        targets[name] = own[ident]
    if covered != set(own):
        return None  # a tensor of the state dict (a tied one included) no saved one fills
    return targets


def reload(folder: str | Path, dtype, device: str):
    """The series' model with the tensors of ``folder``'s ``model.safetensors`` copied in,
    or ``None`` when they cannot be (see the module; a file that cannot be read too, so
    that ``from_pretrained`` reports it as it reports any damaged checkpoint; a copy
    that fails, which drops the model): the caller then calls ``from_pretrained`` and
    :func:`remember`. A model of another series, or one still in use, is let go here,
    before ``from_pretrained`` builds the next."""
    import torch
    from safetensors.torch import load_file

    global _template
    path = weights_file(folder)
    key = template_key(folder, dtype, device)
    if path is None or key is None:
        return None
    with _lock:
        t = _template
        if t is None or t.model is None:
            return None
        if t.in_use or t.key != key:
            # another series, or a checkpoint still holds it: let it go now, so that two
            # models are not kept while from_pretrained builds the next one
            _template = None
            return None
        t.in_use = True
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - damaged: from_pretrained will say so its way
        logger.debug("%s not read for reuse: %s", path, exc)
        release(t.model)
        return None
    if (_signature(tensors) != t.signature
            or _layout(t.model) != {_identity(v) for v in t.targets.values()}):
        forget()  # other tensors, or a model moved or cast since: build anew
        return None
    try:
        with torch.no_grad():
            for name, value in tensors.items():
                t.targets[name].copy_(value)
    except Exception as exc:  # noqa: BLE001 - half copied: never hand it out again
        logger.debug("%s: copy failed, loading it anew: %s", path, exc)
        forget()
        return None
    return t.model


def remember(folder: str | Path, model, dtype, device: str) -> None:
    """Keep ``model``, just loaded by ``from_pretrained`` from ``folder``, as its
    series' model, in use until :func:`release`; or remember that this config's loads go
    the long way."""
    global _template
    path = weights_file(folder)
    key = template_key(folder, dtype, device)
    if path is None or key is None:
        return
    with _lock:
        if _template is not None and _template.key == key and _template.model is None:
            return  # known to go the long way
    from safetensors.torch import load_file

    try:
        signature = _signature(load_file(str(path)))
    except Exception as exc:  # noqa: BLE001 - from_pretrained read it: leave it alone
        logger.debug("%s: not read again: %s", path, exc)
        return
    try:
        targets = plain_renaming(model, signature)
    except Exception as exc:  # noqa: BLE001 - a state dict it cannot vouch for
        logger.debug("%s: not kept for reuse: %s", type(model).__name__, exc)
        targets = None
    with _lock:
        _template = (_Template(key, model, targets, signature, in_use=True)
                     if targets is not None else _Template(key))


def release(model) -> None:
    """``model``'s checkpoint is done with it: the series' next checkpoint may have it."""
    with _lock:
        if _template is not None and _template.model is model:
            _template.in_use = False


def forget() -> None:
    """Drop the series' model (tests; a process that wants its memory back)."""
    global _template
    with _lock:
        _template = None
