"""The local learning coefficient (LLC) of a checkpoint, estimated with ``devinterp``.

The LLC (Lau et al. 2023; Hoogland et al. 2024 found developmental stages with it) is
estimated by sampling weights near the checkpoint ``w*`` with stochastic-gradient
Langevin dynamics (SGLD) from the tempered, localised posterior
``exp(-nβ L(w) - γ/2 |w - w*|²)`` and taking ``nβ (E[L(w)] - L(w*))``, with ``L`` the mean
next-token cross-entropy (nats) on a batch of the sampling windows, of the model in eval
mode. The sampling is ``devinterp.slt.llc.llc`` (version 2): this module builds its
dataset from token windows, calls it with the family's settings, and reads its chains'
loss traces; a chain's LLC is taken over the draws after the burn-in (devinterp's own
averages over the burn-in too; without one they are the same).

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
import functools
import logging
import tempfile
from collections.abc import Callable, Iterator
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
        per_chain: ``(chains,)`` each chain's LLC, ``nβ (mean trace after the burn-in -
            init_loss)``.
        loss_trace: ``(chains, steps)`` each chain's mean loss at each SGLD step, nats,
            the burn-in's first.
        init_loss: the checkpoint's loss on the sampling windows, nats (devinterp's
            ``init_loss``: the mean over its initial batches and chains).
        flags: ``(chains,)`` each chain's :data:`FLAGS` entry.
        n_beta: the inverse temperature the LLC is scaled by.
        burnin: the steps of ``loss_trace`` before the draws.
    """

    per_chain: np.ndarray
    loss_trace: np.ndarray
    init_loss: float
    flags: tuple[str, ...]
    n_beta: float
    burnin: int = 0

    @property
    def kept(self) -> np.ndarray:
        """``(chains,)`` bool: the chains that were not flagged."""
        return np.array([f == OK for f in self.flags], dtype=bool)

    def features(self) -> dict[str, float | int | None]:
        """The record's features: the mean and standard deviation over the kept chains
        (``None`` when none or, for the deviation, one was kept), their number, the
        checkpoint's loss and how far the kept chains' estimate still moved between the
        second and the last quarter of the draws (``llc_drift``, in LLC units: near 0 for
        chains that settled; ``None`` with fewer than four draws)."""
        kept = self.kept
        values = self.per_chain[kept]
        draws = self.loss_trace[kept, self.burnin:]
        quarter = draws.shape[1] // 4
        drift = None
        if len(values) and quarter:  # four quarters at least: a step each
            drift = float(self.n_beta * np.mean(draws[:, -quarter:].mean(axis=1)
                                                - draws[:, quarter:2 * quarter].mean(axis=1)))
        return {
            "llc_mean": float(values.mean()) if len(values) else None,
            "llc_std": float(values.std(ddof=1)) if len(values) > 1 else None,
            "llc_chains_kept": int(kept.sum()),
            "llc_init_loss": float(self.init_loss),
            "llc_drift": drift,
        }


def chain_flags(per_chain: np.ndarray, loss_trace: np.ndarray, init_loss: float,
                max_rise: float) -> tuple[str, ...]:
    """Each chain's flag (:data:`FLAGS`) from its LLC ``per_chain`` ``(chains,)`` and the
    ``loss_trace`` ``(chains, steps)`` of its draws in nats: diverged (a non-finite loss,
    or the last quarter's mean more than ``max_rise`` nats above ``init_loss``), else
    negative (an LLC below 0), else ok."""
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
    """The arguments of ``devinterp.slt.llc.llc`` for these settings: the initial loss on
    the first ``n_windows // batch`` batches (every window once when ``batch`` divides
    ``n_windows``), the same windows in the same order in every chain, chain ``c`` seeded
    ``seed + c``."""
    return dict(lr=options.lr, n_beta=options.n_beta, num_chains=options.chains,
                num_draws=options.draws, num_burnin_steps=options.burnin,
                batch_size=options.batch, localization=options.localization,
                num_init_loss_batches=max(n_windows // options.batch, 1),
                init_seed=options.seed, device=device)


def eval_next_token_loss(model, input_ids):
    """Devinterp's per-token next-token cross-entropy ``(b, T - 1)``, of the model in eval
    mode (devinterp puts the model and each chain's copy in train mode; with dropout that
    would sample the loss of random sub-networks, not the checkpoint's)."""
    from devinterp.slt.lm_loss import compute_per_token_loss

    model.eval()
    return compute_per_token_loss(model, input_ids)


def eval_answer_loss(model, input_ids):
    """Each window's loss on its last token alone, ``(b, T - 1)``: the cross-entropy (over
    the whole vocabulary) of the window's last token given the tokens before it, of the
    model in eval mode, the same value at every position of its row, so that the mean
    devinterp takes is the mean answer loss, what ``model(ids, labels=...)`` returns with
    every label but the last masked (``-100``; a test shows it): the objective of a task
    trained on its answers alone, such as the grokking suite's ``a b = c``."""
    import torch.nn.functional as F  # noqa: N812

    model.eval()
    logits = model(input_ids=input_ids).logits[:, -2, :]
    loss = F.cross_entropy(logits.float(), input_ids[:, -1], reduction="none")
    return loss[:, None].expand(-1, input_ids.shape[1] - 1)


@contextlib.contextmanager
def _own_randomness_and_quiet_bars() -> Iterator[None]:
    """devinterp seeds Python's, NumPy's and torch's global generators (``set_seed``) and
    shows a progress bar per chain: the generators are given back as they were, and its
    bars (its module's ``trange``) and its informational log lines alone are silenced,
    nothing else of the process's output."""
    import random

    import torch
    from devinterp.slt import sampler

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    bars = getattr(sampler, "trange", None)
    if bars is not None:
        sampler.trange = functools.partial(bars, disable=True)
    chatter = logging.getLogger("devinterp")  # its "sample() total time" at INFO
    level = chatter.level
    chatter.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        chatter.setLevel(level)
        if bars is not None:
            sampler.trange = bars
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])


def sample_llc(model, ids, options: LLCOptions, *, device: str = "cpu",
               loss_fn: Callable | None = None, workdir: str | Path | None = None
               ) -> LLCEstimate:
    """Estimate the LLC of ``model`` at its present weights on the windows ``ids``.

    Each chain's LLC is ``nβ (mean of its loss trace after the burn-in − init_loss)``
    (devinterp's own ``llc_per_chain`` averages over the burn-in too; with no burn-in the
    two are the same).

    Args:
        model: a causal LM (any ``torch.nn.Module`` with ``loss_fn``); devinterp samples
            copies of it, so its weights are left as they are, and so are its mode and
            the process's random generators.
        ids: ``(n, T)`` int64 token windows; ``n`` at least ``options.batch``.
        loss_fn: ``(model, input_ids (b, T)) -> (b, T - 1)`` per-token loss; ``None``:
            next-token cross-entropy on the model's logits in eval mode
            (:func:`eval_next_token_loss`).
        workdir: where devinterp's sample store is written while it runs (a temporary
            folder, removed after); ``None``: the system's temporary folder.

    Raises:
        ValueError: fewer windows than one batch.
    """
    from devinterp.slt.llc import llc

    if len(ids) < options.batch:
        raise ValueError(f"the LLC needs at least one batch of {options.batch} windows, "
                         f"got {len(ids)}")
    modes = [(m, m.training) for m in model.modules()]  # a frozen block's eval kept
    try:
        with tempfile.TemporaryDirectory(prefix="toposig-llc-", dir=workdir) as tmp, \
                _own_randomness_and_quiet_bars():
            result = llc(model, windows_dataset(ids), {},
                         loss_fn=eval_next_token_loss if loss_fn is None else loss_fn,
                         output_path=str(Path(tmp) / "samples.zarr"),
                         **devinterp_kwargs(options, len(ids), device))
            trace = np.asarray(result["loss_trace"].values, dtype=np.float64)
            init_loss = float(result["init_loss"].values)
    finally:
        for module, training in modes:  # devinterp calls model.train() on the model itself
            module.training = training
    with np.errstate(invalid="ignore", over="ignore"):  # a diverged chain's NaN or inf
        per_chain = options.n_beta * (trace[:, options.burnin:].mean(axis=1) - init_loss)
    return LLCEstimate(per_chain, trace, init_loss,
                       chain_flags(per_chain, trace[:, options.burnin:], init_loss,
                                   options.max_rise),
                       float(options.n_beta), options.burnin)
