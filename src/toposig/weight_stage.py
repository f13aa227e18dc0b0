"""The weight stage for one checkpoint: its tensors in, a record and the row diagrams out.

The tensors come from whatever the pipeline loaded once for the checkpoint: a model's
``state_dict()`` (Hub revisions and model folders, loaded in float32 so that the stored
values are analysed whatever precision the forward pass later runs in) or a plain
checkpoint file's state dict. :func:`toposig.weights.weight_signatures` does the work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone

import numpy as np

from . import weights
from .checkpoints import Checkpoint
from .config import SCHEMA_VERSION, WeightSettings
from .embedding import CheckpointOutput, checkpoint_fields

logger = logging.getLogger(__name__)


def tensor_shapes(tensors: Mapping) -> dict[str, tuple[int, ...]]:
    """Shapes of the floating-point tensors of a state dict (the candidates for analysis)."""
    return {k: tuple(v.shape) for k, v in tensors.items() if v.is_floating_point()}


def as_arrays(tensors: Mapping, names: list[str]) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, array)`` of each named tensor, converted one at a time.

    Half-precision tensors are widened to float32 (exactly); float32 and float64 arrays
    share the tensor's memory.
    """
    import torch

    for name in names:
        t = tensors[name].detach().cpu()
        if t.dtype not in (torch.float32, torch.float64):
            t = t.float()
        yield name, t.numpy()


def analyse_weights(
    ckpt: Checkpoint,
    tensors: Mapping,
    settings: WeightSettings,
    *,
    loss: float | None = None,
    loss_key: str | None = None,
    num_parameters: int | None = None,
    load_s: float = 0.0,
    device: str | None = None,
) -> CheckpointOutput:
    """Weight-space signatures of one checkpoint as a record and its row diagrams.

    Args:
        ckpt: the checkpoint (for its identity in the record).
        tensors: parameter name -> tensor.
        settings: validated weight settings.
        loss, loss_key: the loss stored with the checkpoint and where it was found.
        num_parameters: the model's parameter count; the floating-point tensors' total
            when ``None``.
        load_s: seconds spent loading the checkpoint (for the record's timings).
        device: a CUDA device for the passes over every weight (``None``: the CPU).

    Raises:
        ValueError: no matrix is selected (the message lists what the checkpoint has).
    """
    t0 = time.perf_counter()
    shapes = tensor_shapes(tensors)
    names = weights.select_matrices(shapes, settings.include, settings.exclude)
    if not names:
        two_d = [k for k, s in shapes.items() if len(s) == 2][:6]
        raise ValueError(
            f"no weight matrix selected among {len(shapes)} tensors (2-D ones: "
            f"{', '.join(two_d) or 'none'}); adjust --weight-include/--weight-exclude"
        )
    sig = weights.weight_signatures(
        as_arrays(tensors, names), max_rows=settings.max_rows,
        maxdim=settings.maxdim, seed=settings.seed, backend=settings.ph_backend,
        device=device,
    )
    t_done = time.perf_counter()
    arrays = {f"{name}:h{q}": d for name, dgms in sig.diagrams.items()
              for q, d in enumerate(dgms)}
    if num_parameters is None:
        num_parameters = int(sum(np.prod(s, dtype=np.int64) for s in shapes.values()))
    record = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "family": "weights",
        **checkpoint_fields(ckpt),
        "checkpoint_loss": loss,
        "checkpoint_loss_key": loss_key,
        "num_parameters": num_parameters,
        "n_matrices": len(sig.matrices),
        "w_max": sig.w_max,
        "ph_backend": sig.backend,
        "device": device or "cpu",
        "features": sig.features,
        "matrices": sig.matrices,
        "settings": settings.to_dict(),
        "timings_s": {"load": load_s, "weights": t_done - t0, "total": load_s + t_done - t0},
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    logger.debug("%s: %d matrices, NP mean %.4f", ckpt.describe(), len(sig.matrices),
                 sig.features["np_mean"])
    return CheckpointOutput(record, arrays)
