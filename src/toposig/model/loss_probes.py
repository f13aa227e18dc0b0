"""The families that probe the loss at a checkpoint: ``landscape``, ``gradients`` and
``llc``.

Each evaluates the model on a fixed, seeded probe batch: ``n`` windows of ``T`` tokens
cut from the token stream of the analysed texts' source (texts joined by EOS), chosen
by the family's seed among the stream's non-overlapping windows. Windows have no
padding, so every example is the same length and its loss is the plain mean next-token
cross-entropy (nats).

- :func:`analyse_landscape`: top-k Hessian eigenvalues (Lanczos), Hutchinson's trace,
  the loss on a grid in a plane through the checkpoint, and the grid's merge tree
  (:mod:`toposig.model.curvature`, :mod:`toposig.features.landscape`).
- :func:`analyse_gradients`: per-example gradients, projected, and their Vietoris–Rips
  homology (:mod:`toposig.model.gradients`).
- :func:`analyse_llc`: the local learning coefficient, sampled with devinterp's SGLD
  around the checkpoint on the probe windows (:mod:`toposig.model.llc`).

The model comes in float32 with its parameters requiring gradients; nothing here
changes its weights.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np

from toposig.features import landscape
from toposig.model import curvature, gradients, llc
from toposig.model.embedding import check_vocab
from toposig.records import CheckpointOutput, now_iso, record_header
from toposig.sources.checkpoints import Checkpoint, checkpoint_identity
from toposig.sources.loading import CAUSAL, model_kind

logger = logging.getLogger(__name__)


def probe_windows(tokenizer, texts: list[str], n: int, length: int, seed: int):
    """(n, length) int64 token windows: seeded, non-overlapping, in stream order.

    Raises:
        ValueError: the texts hold fewer than ``n`` windows of ``length`` tokens.
    """
    import torch

    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        if eos is not None:
            stream.append(eos)
    available = len(stream) // length
    if available < n:
        raise ValueError(f"the probe texts hold {available} windows of {length} tokens, "
                         f"fewer than the {n} asked for")
    starts = np.sort(np.random.default_rng(seed).choice(available, n, replace=False)) * length
    return torch.tensor([stream[s:s + length] for s in starts], dtype=torch.long)


def answer_windows(tokenizer, texts: list[str], n: int, seed: int):
    """(n, T) int64: ``n`` of the texts drawn with ``seed``, each one window of its own
    tokens, in the texts' order; every text must make the same number ``T >= 2`` of tokens
    (a task's lines, such as ``a b = c``, whose last token is the answer).

    Raises:
        ValueError: fewer than ``n`` texts, or texts of different token counts, or of
            fewer than two tokens.
    """
    import torch

    if len(texts) < n:
        raise ValueError(f"the answer objective takes one window per text: {len(texts)} "
                         f"texts, fewer than the {n} windows asked for")
    chosen = np.sort(np.random.default_rng(seed).choice(len(texts), n, replace=False))
    ids = tokenizer([texts[i] for i in chosen], add_special_tokens=False)["input_ids"]
    lengths = sorted({len(row) for row in ids})
    if len(lengths) != 1 or lengths[0] < 2:
        raise ValueError(f"the answer objective needs texts of one token count of at least "
                         f"2 (a task's lines); these make {lengths} tokens")
    return torch.tensor(ids, dtype=torch.long)


def batch_loss(model, ids):
    """Mean next-token cross-entropy (nats) over every window of ``ids`` (n, T): the loss
    the model itself returns, ``model(ids, labels=ids).loss`` (which shifts the labels
    rather than copying the logits: 1.23x faster a grid point with a 50,304-token head,
    ``bench/bench_loss_probes.py --parts``, 2026-11-29)."""
    return model(ids, labels=ids).loss


def require_causal(model) -> None:
    """Raise ValueError unless ``model`` is a causal LM (the probes score next tokens)."""
    if model_kind(model.config) != CAUSAL:
        raise ValueError(f"{type(model).__name__} is a masked language model: the landscape, "
                         "gradients, llc and heads families read next-token prediction, "
                         "which it does not define")


class ProbeOptions(Protocol):
    """What every loss probe reads of its family's settings
    (:mod:`toposig.families.landscape`, :mod:`toposig.families.gradients`,
    :mod:`toposig.families.llc`)."""

    @property
    def n_windows(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def seed(self) -> int: ...

    def to_dict(self) -> dict: ...


class LandscapeOptions(ProbeOptions, Protocol):
    @property
    def top_k(self) -> int: ...
    @property
    def lanczos_tol(self) -> float: ...
    @property
    def lanczos_maxiter(self) -> int: ...
    @property
    def trace_samples(self) -> int: ...
    @property
    def res(self) -> int: ...
    @property
    def dirs(self) -> str: ...
    @property
    def span(self) -> float: ...


class GradientOptions(ProbeOptions, Protocol):
    @property
    def proj_dim(self) -> int: ...
    @property
    def maxdim(self) -> int: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def ph_backend(self) -> str: ...


class LLCProbeOptions(ProbeOptions, llc.LLCOptions, Protocol):
    """What the LLC reads: the probe windows, the loss sampled on them (``objective``:
    ``"next_token"``, every token of windows cut from the texts' stream, or ``"answer"``,
    each text a window and its last token's loss alone) and the sampler's settings."""

    @property
    def objective(self) -> str: ...


def _common(ckpt: Checkpoint, family: str, model, t0: float, load_s: float) -> dict:
    elapsed = time.perf_counter() - t0
    return {
        **record_header(family, checkpoint_identity(ckpt)),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "finished_at": now_iso(),
        "timings_s": {"load": load_s, family: elapsed, "total": load_s + elapsed},
    }


def analyse_landscape(ckpt: Checkpoint, model, tokenizer, texts: list[str],
                      settings: LandscapeOptions, *, device: str = "cpu",
                      load_s: float = 0.0, family: str = "landscape") -> CheckpointOutput:
    """Curvature and loss-surface topology of one checkpoint.

    Args:
        family: the family whose record it is.
        model: the checkpoint's causal LM, float32, on ``device``.
        tokenizer: its tokenizer; texts: the probe texts.

    Returns:
        A record whose ``features`` hold ``hessian_eig_1`` … ``hessian_eig_k``,
        ``hessian_trace`` and the ``landscape_*`` merge-tree features, and arrays:
        ``grid`` (r, r) losses, ``coords`` (r,) step sizes, ``h0`` the diagram,
        ``minima`` and ``saddles`` the critical points' grid indices.
    """
    import torch
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel

    t0 = time.perf_counter()
    s = settings
    require_causal(model)
    ids = probe_windows(tokenizer, texts, s.n_windows, s.window, s.seed).to(device)
    check_vocab(model, ids)
    model.eval()
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    for p in params:
        p.requires_grad_(True)
    dim = sum(p.numel() for p in params)

    # Double backward needs attention made of plain differentiable ops: the fused
    # attention kernels have no second derivative.
    with sdpa_kernel(SDPBackend.MATH):
        hvp = curvature.loss_hvp(lambda: batch_loss(model, ids), params)
    eig = curvature.top_eigenpairs(hvp, dim, s.top_k, tol=s.lanczos_tol,
                                   maxiter=s.lanczos_maxiter, seed=s.seed)
    trace, trace_se = curvature.hutchinson_trace(hvp, dim, s.trace_samples, seed=s.seed)
    del hvp
    t_curv = time.perf_counter()

    theta = [p.detach() for p in params]
    theta_norm = float(torch.sqrt(sum((t.double() ** 2).sum() for t in theta)))
    if s.dirs == "hessian":
        flat = [landscape.scaled_to(eig.vectors[:, i], theta_norm) for i in range(2)]
        sizes = [t.numel() for t in theta]
        dirs = [[torch.as_tensor(c, dtype=t.dtype, device=t.device).view_as(t)
                 for c, t in zip(np.split(f, np.cumsum(sizes)[:-1]), theta, strict=True)]
                for f in flat]
    else:
        rng = np.random.default_rng(s.seed)
        arrays = [t.cpu().double().numpy() for t in theta]
        dirs = [[torch.as_tensor(d, dtype=t.dtype, device=t.device) for d, t in
                 zip(landscape.filter_normalized_direction(arrays, rng), theta, strict=True)]
                for _ in range(2)]
    coords = landscape.grid_coordinates(s.res, s.span)
    grid = np.empty((s.res, s.res))
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for i, a in enumerate(coords):
            for j, b in enumerate(coords):
                point = {n: t + a * d1 + b * d2 for n, t, d1, d2
                         in zip(names, theta, dirs[0], dirs[1], strict=True)}
                grid[i, j] = float(functional_call(model, (point, buffers), (ids,),
                                                   {"labels": ids}).loss)
    if not np.all(np.isfinite(grid)):
        bad = int((~np.isfinite(grid)).sum())
        raise FloatingPointError(f"{bad} of {grid.size} loss-surface points are not finite: "
                                 f"lower --landscape-span")
    topo = landscape.surface_topology(grid)
    t_grid = time.perf_counter()

    features = {f"hessian_eig_{i + 1}": float(v) for i, v in enumerate(eig.values)}
    features["hessian_trace"] = trace
    features |= topo.features
    record = _common(ckpt, family, model, t0, load_s)
    record |= {
        "features": features,
        "probe_loss": float(grid[s.res // 2, s.res // 2]),
        "hessian_trace_se": trace_se,
        "lanczos": {"n_hvp": eig.n_hvp, "residuals": eig.residuals.tolist(),
                    "converged": eig.converged},
        "trace_samples": s.trace_samples,
        "theta_norm": theta_norm,
        "device": device,
        "settings": s.to_dict(),
    }
    record["timings_s"] |= {"curvature": t_curv - t0, "surface": t_grid - t_curv}
    for p in params:
        p.requires_grad_(False)
    logger.debug("%s: λ1 %.4g, trace %.4g, %d minima", ckpt.describe(), eig.values[0], trace,
                 topo.features["landscape_n_minima"])
    return CheckpointOutput(record, {"grid": grid, "coords": coords, "h0": topo.diagram,
                                     "minima": topo.minima.astype(np.float64),
                                     "saddles": topo.saddles.astype(np.float64)})


def analyse_gradients(ckpt: Checkpoint, model, tokenizer, texts: list[str],
                      settings: GradientOptions, *, device: str = "cpu",
                      load_s: float = 0.0, family: str = "gradients") -> CheckpointOutput:
    """Homology of the per-example gradient cloud of one checkpoint.

    Args:
        family: the family whose record it is.
        model: the checkpoint's causal LM, float32, on ``device``.
        tokenizer: its tokenizer; texts: the probe texts.

    Returns:
        A record whose ``features`` hold ``grad_h{q}_*`` and ``grad_norm_*`` /
        ``grad_cosine_mean`` / ``grad_noise_scale``, and arrays: ``h0``, ``h1`` (the
        diagrams) and ``projected`` (n, proj_dim) gradients.
    """
    t0 = time.perf_counter()
    s = settings
    require_causal(model)
    ids = probe_windows(tokenizer, texts, s.n_windows, s.window, s.seed).to(device)
    check_vocab(model, ids)
    model.eval()
    dim = sum(p.numel() for p in model.parameters())
    proj = gradients.sketch(dim, s.proj_dim, s.seed)
    projected, norms = [], []
    total = np.zeros(dim, dtype=np.float64)  # Σ g_i, for the noise scale
    for g in gradients.per_example_gradients(model, ids, s.chunk_size):
        norms.append(gradients.row_norms(g))
        projected.append(proj.transform(g))
        total += g.sum(axis=0)  # a float32 row at a time into the float64 sum
    cloud = np.concatenate(projected).astype(np.float64)
    t_grad = time.perf_counter()
    features, diagrams, used = gradients.gradient_features(
        cloud, np.concatenate(norms), s.maxdim, s.ph_backend)
    features["grad_noise_scale"] = gradients.noise_scale(np.concatenate(norms),
                                                         total / len(cloud))
    record = _common(ckpt, family, model, t0, load_s)
    record |= {"features": features, "ph_backend": used, "device": device,
               "settings": s.to_dict()}
    record["timings_s"] |= {family: t_grad - t0,
                            "homology": time.perf_counter() - t_grad}
    arrays = {f"h{q}": d for q, d in enumerate(diagrams)} | {"projected": cloud}
    return CheckpointOutput(record, arrays)


def analyse_llc(ckpt: Checkpoint, model, tokenizer, texts: list[str], settings: LLCProbeOptions,
                *, device: str = "cpu", load_s: float = 0.0, family: str = "llc"
                ) -> CheckpointOutput:
    """The local learning coefficient of one checkpoint (:func:`toposig.model.llc.sample_llc`
    on ``settings.n_windows`` probe windows: of ``settings.window`` tokens cut from the
    texts' stream, the mean next-token loss sampled; or, for the ``"answer"`` objective,
    texts drawn whole, their last token's loss sampled, :func:`answer_windows`).

    Returns:
        A record whose ``features`` hold ``llc_*`` (:meth:`~toposig.model.llc.LLCEstimate.features`)
        and whose ``chains`` say each chain's flag and LLC, and arrays ``loss_trace``
        (chains, steps) and ``llc_per_chain`` (chains,).
    """
    t0 = time.perf_counter()
    s = settings
    require_causal(model)
    answer = s.objective == "answer"
    ids = (answer_windows(tokenizer, texts, s.n_windows, s.seed) if answer
           else probe_windows(tokenizer, texts, s.n_windows, s.window, s.seed))
    check_vocab(model, ids)
    estimate = llc.sample_llc(model, ids, s, device=device,
                              loss_fn=llc.eval_answer_loss if answer else None)
    record = _common(ckpt, family, model, t0, load_s)
    chains = [{"flag": f, "llc": float(v) if np.isfinite(v) else None}
              for f, v in zip(estimate.flags, estimate.per_chain, strict=True)]
    record |= {"features": estimate.features(), "chains": chains, "n_beta": estimate.n_beta,
               "device": device, "settings": s.to_dict()}
    arrays = {"loss_trace": estimate.loss_trace, "llc_per_chain": estimate.per_chain}
    return CheckpointOutput(record, arrays)
