"""Weight-space signatures: neural persistence and weight-row homology of weight matrices.

Pure functions on NumPy arrays (definitions: docs/measures.md).

**Neural persistence** (Rieck et al. 2019, reference-implementation semantics). A matrix
``M`` (out × in) is the complete bipartite graph on ``n = out + in`` vertices whose edge
weights are ``w̃ = |Mᵢⱼ| / W_max`` with ``W_max`` the largest ``|w|`` over every matrix
analysed in the checkpoint. Edges enter in decreasing ``w̃``, every vertex is born at 1,
and the zero-dimensional pairs are ``(1, w̃ₑ)`` for the edges ``e`` of a maximum spanning
tree plus the class that never dies, recorded as ``(1, 0)``::

    NP            = (Σₑ (1 − w̃ₑ)² + 1) ** 0.5          (p = 2)
    NP_normalized = NP / sqrt(n − 1)

The seed paper's variant (its equation 1) normalises each matrix by its own maximum
``m``, uses p = 1 and leaves out the never-dying class::

    NP_seed = Σₑ (m − |wₑ|) / (m · (n − 1))

Only the multiset of maximum-spanning-tree weights matters, and it is the same for every
maximum spanning tree, whatever the ties. It is found without sorting all ``out · in``
edges: the edges at least as heavy as the lightest vertex maximum ``τ`` (every vertex
has one) are usually a connected graph of a few per cent of the edges, and when they are,
Kruskal on them alone gives the tree (scipy's compiled Kruskal). Otherwise a dense Prim
over the bipartite graph, O((out + in)²) in vectorised steps, does. No dense edge list of
the whole matrix is ever built. In a GPU run (:func:`weight_signatures` with a torch
``device``) the passes over every entry (``|M|``, the vertex maxima, the candidate
selection, the statistics) run on the device, and only the candidate edges come back to
the CPU for Kruskal; the values are the same.

**Weight-row homology**: the rows of a matrix are points in R^in (at most ``max_rows``,
chosen with a generator seeded by the run's seed and the matrix's name, so a matrix keeps
the same rows at every checkpoint); Vietoris–Rips up to ``maxdim``; the features of
:func:`toposig.features.homology.diagram_features`.

**Weight statistics** (the non-topological baselines): Frobenius norm, standard deviation,
largest and mean absolute entry; and each matrix's heavy-tail metrics and spectral norm
as ``weightwatcher`` computes them (:mod:`toposig.features.heavy_tail`), summarised per
checkpoint as means over the analysed matrices: the mean α and weighted α are what
weightwatcher's ``get_summary()`` reports for the same layers (it fits no α below 8
eigenvalues, and neither mean counts such a matrix); the mean spectral norm and stable
rank count every matrix.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import minimum_spanning_tree

from toposig.features import heavy_tail, homology

logger = logging.getLogger(__name__)

# No name rule any more: which 2-D weights are analysed by default is decided by
# toposig.model.matrices, by module type (a model, or a plain state dict with a config) or
# by tensor structure (a plain state dict without one), never by words in the names.
# Kept empty so that older imports still work; nothing is left out by it.
DEFAULT_EXCLUDE: tuple[str, ...] = ()
# Each matrix's heavy-tail metrics kept in its record entry (its Frobenius norm is there
# already as ``l2_norm``).
MATRIX_HEAVY_TAIL: tuple[str, ...] = tuple(k for k in heavy_tail.HEAVY_TAIL_NAMES
                                           if k != "frobenius_norm")
# checkpoint feature -> the per-matrix value it averages (NaN-skipping: weightwatcher fits
# no alpha to a matrix with fewer than 8 eigenvalues)
HEAVY_TAIL_SUMMARY: dict[str, str] = {
    "weight_alpha_mean": "ww_pl_alpha",
    "weight_alpha_weighted_mean": "ww_weighted_alpha",
    "weight_spectral_norm_mean": "spectral_norm",
    "weight_stable_rank_mean": "stable_rank",
}
NP_NAMES: tuple[str, ...] = ("np", "np_normalized", "np_seed")
"""The neural-persistence values of one matrix (:func:`neural_persistence`)."""

# Above this share of all edges, the threshold candidate set is no saving: use Prim.
_MAX_CANDIDATE_SHARE = 0.25


# --------------------------------------------------------------------- which matrices


def select_matrices(shapes: Mapping[str, Sequence[int]], include: Sequence[str] = (),
                    exclude: Sequence[str] = ()) -> list[str]:
    """Names of the candidate weight matrices, filtered by the user's patterns, in order.

    Candidates are the non-empty 2-D parameters whose name ends in ``weight``. With
    ``include`` patterns, exactly the candidates matching one of them are taken (so an
    embedding can be asked for); without, every candidate is (which of them a checkpoint
    analyses by default is :mod:`toposig.model.matrices`' choice, by module type or
    tensor structure, not this function's). Candidates matching an ``exclude`` pattern
    are then removed. Patterns are regular expressions matched anywhere in the name.

    Args:
        shapes: parameter name -> shape, for every tensor of the checkpoint.
        include, exclude: regular expressions (``--weight-include/--weight-exclude``).
    """
    inc = [re.compile(p) for p in include]
    exc = [re.compile(p) for p in exclude]
    out = []
    for name, shape in shapes.items():
        if len(shape) != 2 or not name.endswith("weight") or min(shape) < 1:
            continue
        if inc and not any(p.search(name) for p in inc):
            continue
        if any(p.search(name) for p in exc):
            continue
        out.append(name)
    return out


# ----------------------------------------------------------------- neural persistence


def max_spanning_tree_weights(abs_weights: np.ndarray) -> np.ndarray:
    """Edge weights of a maximum spanning tree of the complete bipartite graph of a matrix.

    Args:
        abs_weights: (out, in) non-negative edge weights (``|M|``), any float dtype.

    Returns:
        (out + in − 1,) float64 weights of the tree's edges, in decreasing order. The
        multiset is the same for every maximum spanning tree.
    """
    a = np.asarray(abs_weights)
    if a.ndim != 2 or min(a.shape) < 1:
        raise ValueError(f"expected a non-empty 2-D matrix, got shape {a.shape}")
    row_max = a.max(axis=1)
    if not np.isfinite(row_max.max()):  # NaN and inf both reach the maximum
        raise ValueError("matrix holds NaN or infinite entries")
    if min(a.shape) == 1:  # a star: every edge is in the tree
        tree = a.astype(np.float64).ravel()
    else:
        tau = min(row_max.min(), a.max(axis=0).min())
        found = _kruskal_above_threshold(a, tau)
        tree = _dense_prim(a) if found is None else found
    return np.sort(tree)[::-1]


def _kruskal_above_threshold(a: np.ndarray, tau: float) -> np.ndarray | None:
    """Kruskal on the edges at least as heavy as the lightest vertex maximum.

    Kruskal on the whole graph takes edges in decreasing weight; once the edges of weight
    >= τ connect every vertex, no lighter edge joins two components. So when that subgraph
    is connected, its maximum spanning tree is the whole graph's. ``None`` when it is not
    connected, or too large to be worth it.
    """
    m, k = a.shape
    flat = a.ravel()
    idx = np.flatnonzero(flat >= tau)
    if tau <= 0 or idx.size > _MAX_CANDIDATE_SHARE * flat.size:
        return None
    rows, cols = np.divmod(idx, k)
    return _kruskal(rows, cols, flat[idx].astype(np.float64), m, k)


def _kruskal(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, m: int, k: int
             ) -> np.ndarray | None:
    """Maximum spanning tree weights of the bipartite graph on the given edges (all > 0),
    or ``None`` when those edges do not connect the m + k vertices."""
    n = m + k
    # scipy finds a *minimum* spanning tree and drops zero entries: negate (all > 0 here).
    graph = csr_matrix((-weights, (rows, m + cols)), shape=(n, n))
    tree = minimum_spanning_tree(graph)
    if tree.nnz != n - 1:
        return None
    return -tree.data


def max_spanning_tree_weights_torch(abs_weights) -> np.ndarray:
    """:func:`max_spanning_tree_weights` of a torch tensor, on the tensor's device.

    The passes over all out × in entries (vertex maxima, the candidate edges ≥ τ) run
    where the tensor is (a GPU in a GPU run); only the candidates travel to the CPU for
    Kruskal. The rare fallback, dense Prim, runs on a CPU copy.
    """
    a = abs_weights
    if a.ndim != 2 or min(a.shape) < 1:
        raise ValueError(f"expected a non-empty 2-D matrix, got shape {tuple(a.shape)}")
    row_max = a.amax(dim=1)
    if not bool(row_max.max().isfinite()):
        raise ValueError("matrix holds NaN or infinite entries")
    if min(a.shape) == 1:
        return np.sort(a.double().cpu().numpy().ravel())[::-1]
    m, k = a.shape
    tau = float(min(row_max.min(), a.amax(dim=0).min()))
    tree = None
    if tau > 0:
        keep = a >= tau
        if int(keep.sum()) <= _MAX_CANDIDATE_SHARE * a.numel():
            rows, cols = keep.nonzero(as_tuple=True)
            tree = _kruskal(rows.cpu().numpy(), cols.cpu().numpy(),
                            a[rows, cols].double().cpu().numpy(), m, k)
    if tree is None:
        tree = _dense_prim(a.cpu().numpy())
    return np.sort(tree)[::-1]


def _dense_prim(a: np.ndarray) -> np.ndarray:
    """Prim on the complete bipartite graph: one vectorised update per added vertex."""
    m, k = a.shape
    at = np.ascontiguousarray(a.T)
    row_key = np.full(m, -np.inf, dtype=np.float64)  # best edge from the tree to each row
    col_key = a[0].astype(np.float64)  # start from row 0
    row_open = np.ones(m, dtype=bool)
    row_open[0] = False
    col_open = np.ones(k, dtype=bool)
    out = np.empty(m + k - 1, dtype=np.float64)
    for t in range(m + k - 1):
        i = int(row_key.argmax())
        j = int(col_key.argmax())
        if col_key[j] >= row_key[i]:
            out[t] = col_key[j]
            col_key[j] = -np.inf
            col_open[j] = False
            np.maximum(row_key, at[j], out=row_key, where=row_open)
        else:
            out[t] = row_key[i]
            row_key[i] = -np.inf
            row_open[i] = False
            np.maximum(col_key, a[i], out=col_key, where=col_open)
    return out


def neural_persistence(matrix: np.ndarray, w_max: float | None = None) -> dict[str, float]:
    """Neural persistence of one weight matrix (module docstring for the definitions).

    Args:
        matrix: (out, in) weights.
        w_max: the checkpoint's largest ``|w|`` over all analysed matrices; the matrix's
            own maximum when ``None``. A checkpoint whose weights are all zero has every
            ``w̃ = 0`` by convention.

    Returns:
        ``np`` (p = 2, with the never-dying class), ``np_normalized`` (divided by
        sqrt(n − 1)) and ``np_seed`` (the seed paper's variant), n = out + in.
    """
    return _np_of_abs(np.abs(np.asarray(matrix)), w_max)


def _np_of_abs(a: np.ndarray, w_max: float | None) -> dict[str, float]:
    return _np_of_tree(max_spanning_tree_weights(a), float(a.max()), w_max, sum(a.shape))


def _np_of_tree(tree: np.ndarray, own_max: float, w_max: float | None, n: int
                ) -> dict[str, float]:
    """The three NP values from the tree's weights (``n`` = out + in vertices)."""
    w_max = own_max if w_max is None else float(w_max)
    if w_max < own_max:
        raise ValueError(f"w_max {w_max} is below the matrix's largest |w| {own_max}")
    scaled = tree / w_max if w_max > 0 else np.zeros_like(tree)
    value = math.sqrt(float(np.sum((1.0 - scaled) ** 2)) + 1.0)
    own = tree / own_max if own_max > 0 else np.zeros_like(tree)
    return {
        "np": value,
        "np_normalized": value / math.sqrt(n - 1),
        "np_seed": float(np.sum(1.0 - own)) / (n - 1),
    }


# ----------------------------------------------------------------- weight-row homology


def row_sample(n_rows: int, max_rows: int, seed: int, name: str) -> np.ndarray:
    """Sorted indices of at most ``max_rows`` rows, the same for a name at every checkpoint."""
    if n_rows <= max_rows:
        return np.arange(n_rows)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return np.sort(rng.choice(n_rows, size=max_rows, replace=False))


def _statistics(m: np.ndarray, a: np.ndarray) -> tuple[dict[str, float], tuple[float, ...]]:
    """Statistics of ``m`` given ``a = |m|``, and the float64 sums (Σw, Σw², Σ|w|) behind
    them; one pass each, accumulated in float64 without a float64 copy of ``m``."""
    sums = (float(m.sum(dtype=np.float64)),
            float(np.einsum("ij,ij->", m, m, dtype=np.float64)),
            float(a.sum(dtype=np.float64)))
    return _summary(m.size, *sums, float(a.max())), sums


def _summary(n: int, total: float, sum_sq: float, sum_abs: float, max_abs: float
             ) -> dict[str, float]:
    """Frobenius norm, std, max |w| and mean |w| of n weights from their float64 sums."""
    mean = total / n
    return {
        "l2_norm": math.sqrt(sum_sq),
        "std": math.sqrt(max(sum_sq / n - mean * mean, 0.0)),
        "max_abs": max_abs,
        "mean_abs": sum_abs / n,
    }


def _statistics_torch(m, a) -> tuple[dict[str, float], tuple[float, ...]]:
    """:func:`_statistics` of torch tensors, on their device, accumulated in float64."""
    import torch

    sums = (float(m.sum(dtype=torch.float64)),
            float(torch.linalg.vector_norm(m, dtype=torch.float64)) ** 2,
            float(a.sum(dtype=torch.float64)))
    return _summary(m.numel(), *sums, float(a.max())), sums


# ----------------------------------------------------------------- one checkpoint


@dataclass
class WeightSignatures:
    """The weight-space signatures of one checkpoint.

    Attributes:
        features: checkpoint-level features (see :func:`weight_signatures`).
        matrices: one dict per analysed matrix: ``name``, ``shape``, ``n_rows_used``,
            neural persistence values, ``h{q}_*`` row-homology features, statistics,
            heavy-tail metrics (:data:`MATRIX_HEAVY_TAIL`).
        diagrams: matrix name -> its row diagrams ``[H0, H1, ...]``.
        backend: the Vietoris–Rips backend used.
        w_max: the checkpoint's largest ``|w|`` over the analysed matrices.
    """

    features: dict[str, float]
    matrices: list[dict]
    diagrams: dict[str, list[np.ndarray]] = field(default_factory=dict)
    backend: str = ""
    w_max: float = 0.0


def weight_signatures(
    matrices: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]],
    *,
    max_rows: int = 200,
    maxdim: int = 1,
    seed: int = 42,
    backend: str = "auto",
    progress: Callable[[str], None] | None = None,
    device: str | None = None,
    threads: int | None = None,
) -> WeightSignatures:
    """Neural persistence, row homology and statistics of every matrix, and their summary.

    Args:
        matrices: name -> (out, in) array, in the order to report them.
        max_rows: rows per matrix for Vietoris–Rips (a seeded sample when there are more).
        maxdim: highest homology dimension of the row diagrams.
        seed: seeds the row sample.
        backend: Vietoris–Rips backend or ``"auto"``.
        progress: called with each matrix name before its rows' homology is computed.
        device: a torch device (``"cuda"``) to run the passes over every entry on
            (neural persistence's candidate edges, the statistics); ``None``: NumPy on
            the CPU. Row homology always runs on the CPU.
        threads: on the CPU, how many matrices are analysed at once, each with one BLAS
            thread (NumPy's matrix products and eigenvalues release the GIL); ``None``:
            the BLAS thread pool's size now in effect (:func:`blas_threads`: the cores,
            or a Ray worker's share). The values are the same for every count, to the
            bit. A GPU run analyses one matrix at a time.

    Returns:
        :class:`WeightSignatures` whose ``features`` are: ``np_mean``/``np_std``/
        ``np_min``/``np_max`` (normalised neural persistence over matrices),
        ``np_seed_mean``/``np_seed_std``; ``weight_h{q}_total`` (Σ over matrices of the
        rows' H_q total persistence), ``weight_h{q}_count`` (Σ bars) and
        ``weight_h{q}_entropy_mean``; ``weight_l2_norm`` (Frobenius norm of all analysed
        weights together), ``weight_std``, ``weight_max_abs``, ``weight_mean_abs``;
        ``weight_std_over_max_mean`` (mean over matrices of the matrix's standard deviation
        divided by the largest absolute weight of all, the one neural persistence
        scales by: its known confound, Girrbach et al. 2023);
        ``weight_alpha_mean`` (mean over the matrices of weightwatcher's power-law
        exponent α of the ESD, dimensionless, NaN-skipping: no α is fitted below 8
        eigenvalues), ``weight_alpha_weighted_mean`` (mean α · log10 λ_max),
        ``weight_spectral_norm_mean`` (mean σ_max, weight units) and
        ``weight_stable_rank_mean`` (mean ‖W‖_F²/σ_max²). Each matrix's entry holds
        its ``ww_*`` metrics, ``spectral_norm`` and ``stable_rank``
        (:func:`toposig.features.heavy_tail.heavy_tail_features`).

    Raises:
        ValueError: no matrices, or a matrix that is not 2-D and finite.
    """
    items = list(matrices.items() if isinstance(matrices, Mapping) else matrices)
    if not items:
        raise ValueError("no weight matrices to analyse (check --weight-include/--weight-exclude)")
    maxima = [max(float(np.max(m)), -float(np.min(m))) for _, m in items]
    for (name, _), top in zip(items, maxima, strict=True):
        if not math.isfinite(top):
            raise ValueError(f"{name} holds NaN or infinite weights")
    w_max = max(maxima)
    used = homology.resolve_backend(backend)

    named = [(name, np.asarray(m)) for name, m in items]

    def rows_homology(name: str, m: np.ndarray) -> tuple[dict, dict, list[np.ndarray]]:
        if progress is not None:
            progress(name)
        rows = row_sample(m.shape[0], max_rows, seed, name)
        dgms = homology.vietoris_rips(m[rows].astype(np.float64), maxdim=maxdim,
                                      backend=used).diagrams
        head = {"name": name, "shape": list(m.shape), "n_rows_used": int(rows.size)}
        return head, homology.diagrams_features(dgms), dgms

    workers = 1 if device is not None else max(1, min(len(items), threads or blas_threads()))
    # one BLAS thread per matrix: the eigenvalues' last bits depend on the BLAS thread
    # count (LAPACK's blocked reductions), so this keeps them the same at any thread count
    # (not across processor kinds: OpenBLAS picks its kernels by the processor)
    with _blas_controller().limit(limits=1):
        if workers == 1:
            rows_part = [rows_homology(name, m) for name, m in named]
            numeric = [_matrix_statistics(m, w_max, device) for _, m in named]
        else:
            # NumPy's matrix products and eigvalsh release the GIL, so the pool's threads
            # run side by side; the PH libraries are not documented as thread-safe (one
            # deadlocked two threads in a static initialiser), so homology stays here
            with ThreadPoolExecutor(workers, thread_name_prefix="toposig-weights") as pool:
                futures = [pool.submit(_matrix_statistics, m, w_max, device) for _, m in named]
                rows_part = [rows_homology(name, m) for name, m in named]
                numeric = [f.result() for f in futures]
    per_matrix: list[dict] = []
    diagrams: dict[str, list[np.ndarray]] = {}
    sum_sq = sum_abs = total = 0.0
    for (head, rows_features, dgms), (values, sums) in zip(rows_part, numeric, strict=True):
        # each entry's keys in one order: identity, NP, homology, the rest
        per_matrix.append({**head, **{k: values[k] for k in NP_NAMES}, **rows_features,
                           **values})
        diagrams[head["name"]] = dgms
        total += sums[0]  # in the matrices' order, as one loop would add them
        sum_sq += sums[1]
        sum_abs += sums[2]
    count = sum(m.size for _, m in named)
    mean = total / count
    features = _summarise(per_matrix, maxdim)
    features.update({
        "weight_l2_norm": math.sqrt(sum_sq),
        "weight_std": math.sqrt(max(sum_sq / count - mean * mean, 0.0)),
        "weight_max_abs": w_max,
        "weight_mean_abs": sum_abs / count,
        # NP's known confound (Girrbach et al. 2023): the spread of the weights that NP
        # scales by the largest |w|, matrix by matrix
        "weight_std_over_max_mean": float(np.mean([e["std"] / w_max if w_max > 0 else 0.0
                                                   for e in per_matrix])),
    })
    return WeightSignatures(features, per_matrix, diagrams, used, w_max)


def _matrix_statistics(m: np.ndarray, w_max: float, device: str | None
                       ) -> tuple[dict[str, float], tuple[float, ...]]:
    """One matrix's neural persistence, statistics and heavy-tail metrics (the entries of
    :func:`weight_signatures` but the row homology's), and its float64 sums (Σw, Σw²,
    Σ|w|)."""
    entry: dict[str, float] = {}
    if device is None:
        a = np.abs(m)
        entry.update(_np_of_abs(a, w_max))
        matrix_stats, sums = _statistics(m, a)
        evals = heavy_tail.esd(m)
    else:
        import torch

        t = torch.from_numpy(m).to(device)
        a_t = t.abs()
        entry.update(_np_of_tree(max_spanning_tree_weights_torch(a_t), float(a_t.max()),
                                 w_max, sum(m.shape)))
        matrix_stats, sums = _statistics_torch(t, a_t)
        evals = _esd_torch(t)
        del t, a_t
    entry.update(matrix_stats)
    tail = heavy_tail.esd_features(evals, frobenius=matrix_stats["l2_norm"])
    entry.update({k: tail[k] for k in MATRIX_HEAVY_TAIL})
    return entry, sums


@functools.cache
def _blas_controller():
    """The BLAS libraries loaded now (NumPy's and SciPy's), found once: a threadpoolctl
    ``ThreadpoolController`` selection (0.02 ms to limit, against about 2 ms to find them
    again)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def blas_threads() -> int:
    """The size of the BLAS thread pool now in effect (the largest over the loaded BLAS
    libraries: the machine's cores unless ``OPENBLAS_NUM_THREADS`` or a
    ``threadpoolctl`` limit, such as a Ray worker's share, says otherwise); 1 when no BLAS
    library is found."""
    return max((lib.num_threads for lib in _blas_controller().lib_controllers), default=1)


def _summarise(per_matrix: list[dict], maxdim: int) -> dict[str, float]:
    norm = np.array([e["np_normalized"] for e in per_matrix])
    seed = np.array([e["np_seed"] for e in per_matrix])
    out = {
        "np_mean": float(norm.mean()),
        "np_std": float(norm.std()),
        "np_min": float(norm.min()),
        "np_max": float(norm.max()),
        "np_seed_mean": float(seed.mean()),
        "np_seed_std": float(seed.std()),
    }
    for q in range(maxdim + 1):
        out[f"weight_h{q}_total"] = float(sum(e[f"h{q}_total_persistence"] for e in per_matrix))
        out[f"weight_h{q}_count"] = float(sum(e[f"h{q}_n_features"] for e in per_matrix))
        out[f"weight_h{q}_entropy_mean"] = float(
            np.mean([e[f"h{q}_persistence_entropy"] for e in per_matrix]))
    for name, key in HEAVY_TAIL_SUMMARY.items():
        values = np.array([e[key] for e in per_matrix], dtype=np.float64)
        values = values[~np.isnan(values)]
        out[name] = float(values.mean()) if values.size else math.nan
    return out


def _esd_torch(t) -> np.ndarray:
    """:func:`toposig.features.heavy_tail.esd` of a torch tensor, on its device: the
    eigenvalues of its min(out, in)-square Gram matrix in float64, ascending, clipped at
    0 (the CPU's method, the same values up to rounding)."""
    import torch

    w = t.to(torch.float64)
    gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
    return torch.linalg.eigvalsh(gram).clamp_min(0.0).cpu().numpy()
