"""The weight stage for one checkpoint: its tensors in, a record and the row diagrams out.

The matrices come from whatever the pipeline loaded once for the checkpoint, chosen by
:mod:`toposig.model.matrices`: a model's linear layers (Hub revisions and model folders,
loaded in float32 so that the stored values are analysed whatever precision the forward
pass later runs in) or a plain checkpoint file's state dict, by module type through the
config found with it, else by the tensors' structure; the record's ``matrix_rule`` says
which.
:func:`toposig.features.weights.weight_signatures` does the work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np

from toposig.features import weights
from toposig.records import CheckpointOutput, now_iso, record_header
from toposig.sources.checkpoints import Checkpoint, checkpoint_identity

logger = logging.getLogger(__name__)


class WeightOptions(Protocol):
    """What the measurement reads of the weights family's settings
    (:class:`toposig.families.weights.WeightsFamily`)."""

    @property
    def max_rows(self) -> int: ...
    @property
    def maxdim(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def ph_backend(self) -> str: ...

    def to_dict(self) -> dict: ...


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
    matrices: Mapping,
    settings: WeightOptions,
    *,
    family: str = "weights",
    loss: float | None = None,
    loss_key: str | None = None,
    num_parameters: int | None = None,
    load_s: float = 0.0,
    device: str | None = None,
    available: Sequence[str] = (),
) -> CheckpointOutput:
    """Weight-space signatures of one checkpoint as a record and its row diagrams.

    Args:
        ckpt: the checkpoint (for its identity in the record).
        matrices: name -> (out, in) tensor, the matrices chosen by
            :mod:`toposig.model.matrices`, in order.
        settings: validated weight settings.
        family: the family whose record it is.
        loss, loss_key: the loss stored with the checkpoint and where it was found.
        num_parameters: the model's parameter count, each storage once.
        load_s: seconds spent loading the checkpoint (for the record's timings).
        device: a CUDA device for the passes over every weight (``None``: the CPU).
        available: the checkpoint's 2-D tensor names, for the message when nothing is
            chosen.

    Raises:
        ValueError: no matrix is selected (the message lists what the checkpoint has).
    """
    t0 = time.perf_counter()
    names = list(matrices)
    if not names:
        raise ValueError(
            f"no weight matrix selected (2-D tensors of the checkpoint: "
            f"{', '.join(list(available)[:6]) or 'none'}"
            f"{' ...' if len(available) > 6 else ''}); adjust "
            "--weight-include/--weight-exclude"
        )
    sig = weights.weight_signatures(
        as_arrays(matrices, names), max_rows=settings.max_rows,
        maxdim=settings.maxdim, seed=settings.seed, backend=settings.ph_backend,
        device=device,
    )
    t_done = time.perf_counter()
    arrays = {f"{name}:h{q}": d for name, dgms in sig.diagrams.items()
              for q, d in enumerate(dgms)}
    record = {
        **record_header(family, checkpoint_identity(ckpt)),
        "checkpoint_loss": loss,
        "checkpoint_loss_key": loss_key,
        "num_parameters": num_parameters,
        "n_matrices": len(sig.matrices),
        "matrix_rule": getattr(matrices, "rule", None),
        "w_max": sig.w_max,
        "ph_backend": sig.backend,
        "device": device or "cpu",
        "features": sig.features,
        "matrices": sig.matrices,
        "settings": settings.to_dict(),
        "timings_s": {"load": load_s, "weights": t_done - t0, "total": load_s + t_done - t0},
        "finished_at": now_iso(),
    }
    logger.debug("%s: %d matrices, NP mean %.4f", ckpt.describe(), len(sig.matrices),
                 sig.features["np_mean"])
    return CheckpointOutput(record, arrays)
