"""The local learning coefficient (LLC) of a checkpoint, estimated with ``devinterp``.

The LLC (Lau et al. 2023; Hoogland et al. 2024 found developmental stages with it) is
estimated by sampling weights near the checkpoint ``w*`` with stochastic-gradient
Langevin dynamics (SGLD) from the tempered, localised posterior
``exp(-nβ L(w) - γ/2 |w - w*|²)`` and taking ``nβ (E[L(w)] - L(w*))``, with ``L`` the mean
next-token cross-entropy (nats) on a batch of the sampling windows. Everything here is
``devinterp.slt.llc.llc`` (version 2): this module builds its dataset from token windows,
calls it with the family's settings, and reads its chains' diagnostics.

A chain is flagged, and left out of the estimate, when

- it **diverged**: a non-finite loss (devinterp stops such a chain and the rest of its
  trace is NaN), or its mean loss over the last quarter of the steps more than
  ``max_rise`` nats above the checkpoint's loss: the sampler left the basin;
- it went **negative**: its LLC is below 0, so it found lower loss than the checkpoint,
  which is then not a local minimum of the sampled loss.

:func:`sample_llc` returns every chain's numbers with its flag (:class:`LLCEstimate`);
:meth:`LLCEstimate.features` is what a record keeps.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

OK, DIVERGED, NEGATIVE = "ok", "diverged", "negative"
FLAGS = (OK, DIVERGED, NEGATIVE)


class LLCOptions(Protocol):
    """What the estimate reads of the family's settings (:mod:`toposig.families.llc`)."""

    @property
    def chains(self) -> int: ...
    @property
    def draws(self) -> int: ...
    @property
    def burnin(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def n_beta(self) -> float: ...
    @property
    def localization(self) -> float: ...
    @property
    def batch(self) -> int: ...
    @property
    def max_rise(self) -> float: ...
    @property
    def seed(self) -> int: ...


@dataclass(frozen=True)
class LLCEstimate:
    """The chains of one LLC estimate.

    Attributes:
        per_chain: ``(chains,)`` each chain's LLC, ``nβ (mean trace - init_loss)``.
        loss_trace: ``(chains, steps)`` each chain's mean loss at each SGLD step, nats.
        init_loss: the checkpoint's loss on the sampling windows, nats (devinterp's
            ``init_loss``: the mean over its initial batches and chains).
        flags: ``(chains,)`` each chain's :data:`FLAGS` entry.
        n_beta: the inverse temperature the LLC is scaled by.
    """

    per_chain: np.ndarray
    loss_trace: np.ndarray
    init_loss: float
    flags: tuple[str, ...]
    n_beta: float

    @property
    def kept(self) -> np.ndarray:
        """``(chains,)`` bool: the chains that were not flagged."""
        return np.array([f == OK for f in self.flags], dtype=bool)

    def features(self) -> dict[str, float | int | None]:
        """The record's features: the mean and standard deviation over the kept chains
        (``None`` when none or, for the deviation, one was kept), their number, the
        checkpoint's loss and how far the kept chains' estimate still moved between the
        second and the last quarter of the steps (``llc_drift``, in LLC units: near 0 for
        chains that settled)."""
        kept = self.kept
        values = self.per_chain[kept]
        quarter = max(self.loss_trace.shape[1] // 4, 1)
        second = self.loss_trace[kept, quarter:2 * quarter].mean(axis=1) if kept.any() else []
        last = self.loss_trace[kept, -quarter:].mean(axis=1) if kept.any() else []
        return {
            "llc_mean": float(values.mean()) if len(values) else None,
            "llc_std": float(values.std(ddof=1)) if len(values) > 1 else None,
            "llc_chains_kept": int(kept.sum()),
            "llc_init_loss": float(self.init_loss),
            "llc_drift": (float(self.n_beta * np.mean(np.asarray(last) - np.asarray(second)))
                          if len(values) else None),
        }


def chain_flags(per_chain: np.ndarray, loss_trace: np.ndarray, init_loss: float,
                max_rise: float) -> tuple[str, ...]:
    """Each chain's flag (:data:`FLAGS`) from its LLC ``per_chain`` ``(chains,)`` and its
    ``loss_trace`` ``(chains, steps)`` in nats: diverged (a non-finite loss, or the last
    quarter's mean more than ``max_rise`` nats above ``init_loss``), else negative (an
    LLC below 0), else ok."""
    quarter = max(loss_trace.shape[1] // 4, 1)
    flags = []
    for value, trace in zip(per_chain, loss_trace, strict=True):
        if not (np.isfinite(trace).all() and np.isfinite(value)) \
                or trace[-quarter:].mean() - init_loss > max_rise:
            flags.append(DIVERGED)
        elif value < 0:
            flags.append(NEGATIVE)
        else:
            flags.append(OK)
    return tuple(flags)


def windows_dataset(ids):
    """The ``datasets.Dataset`` devinterp samples from: one row per window of ``ids``
    ``(n, T)`` int64, its ``input_ids`` as torch tensors."""
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": ids.cpu().tolist()}).with_format("torch")


def devinterp_kwargs(options: LLCOptions, n_windows: int, device: str) -> dict:
    """The arguments of ``devinterp.slt.llc.llc`` for these settings: every window once
    for the initial loss, the same windows in the same order in every chain, chain ``c``
    seeded ``seed + c``."""
    return dict(lr=options.lr, n_beta=options.n_beta, num_chains=options.chains,
                num_draws=options.draws, num_burnin_steps=options.burnin,
                batch_size=options.batch, localization=options.localization,
                num_init_loss_batches=max(n_windows // options.batch, 1),
                init_seed=options.seed, device=device)


def sample_llc(model, ids, options: LLCOptions, *, device: str = "cpu",
               loss_fn: Callable | None = None, workdir: str | Path | None = None
               ) -> LLCEstimate:
    """Estimate the LLC of ``model`` at its present weights on the windows ``ids``.

    Args:
        model: a causal LM (any ``torch.nn.Module`` with ``loss_fn``); devinterp samples
            copies of it, so its weights are left as they are.
        ids: ``(n, T)`` int64 token windows; ``n`` at least ``options.batch``.
        loss_fn: ``(model, input_ids (b, T)) -> (b, T - 1)`` per-token loss; ``None``:
            next-token cross-entropy on the model's logits, devinterp's default.
        workdir: where devinterp's sample store is written while it runs (a temporary
            folder, removed after); ``None``: the system's temporary folder.

    Raises:
        ValueError: fewer windows than one batch.
    """
    from devinterp.slt.llc import llc

    if len(ids) < options.batch:
        raise ValueError(f"the LLC needs at least one batch of {options.batch} windows, "
                         f"got {len(ids)}")
    with tempfile.TemporaryDirectory(prefix="toposig-llc-", dir=workdir) as tmp, \
            warnings.catch_warnings(record=True), \
            contextlib.redirect_stderr(io.StringIO()):  # devinterp's bar per chain
        warnings.simplefilter("always")  # a failed chain's warning: its trace says it
        result = llc(model, windows_dataset(ids), {}, loss_fn=loss_fn,
                     output_path=str(Path(tmp) / "samples.zarr"),
                     **devinterp_kwargs(options, len(ids), device))
        per_chain = np.asarray(result["llc_per_chain"].values, dtype=np.float64)
        trace = np.asarray(result["loss_trace"].values, dtype=np.float64)
        init_loss = float(result["init_loss"].values)
    return LLCEstimate(per_chain, trace, init_loss,
                       chain_flags(per_chain, trace, init_loss, options.max_rise),
                       float(options.n_beta))
