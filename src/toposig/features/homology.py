"""Vietoris–Rips persistence, diagram features and diagram distances.

Pure functions on NumPy arrays. Three installed libraries can compute the
Vietoris–Rips diagrams (ripser, giotto-ph, gudhi). Every backend is given the same
float32 distance matrix, so the filtration values they see are identical and so are
their diagrams: a Vietoris–Rips birth or death value is always one entry of that
matrix, never the result of arithmetic. ``backend="auto"`` picks the fastest installed
backend in the order measured by ``bench/bench_ph_backends.py``.

Conventions (definitions: docs/measures.md):

- a diagram is an ``(m, 2)`` float array of (birth, death) pairs in the units of the
  point cloud (Euclidean distance); H0's infinite bar has death ``inf``;
- features use finite bars with positive persistence ``l = death - birth`` only.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from scipy.spatial.distance import pdist, squareform

from toposig.features.names import DIAGRAM_STATISTICS

logger = logging.getLogger(__name__)

Diagram = np.ndarray  # shape (m, 2): birth, death

# Fastest first, as measured by bench/bench_ph_backends.py on 200 x 50 clouds
# (2-core CPU: giotto-ph 14 ms, ripser 34 ms, gudhi 880 ms).
BACKEND_PREFERENCE: tuple[str, ...] = ("giotto-ph", "ripser", "gudhi")
_MODULE_OF_BACKEND = {"ripser": "ripser", "giotto-ph": "gph", "gudhi": "gudhi"}

FEATURE_NAMES: tuple[str, ...] = DIAGRAM_STATISTICS


def available_backends() -> list[str]:
    """Installed Vietoris–Rips backends, fastest first (looked up once per process: a
    library installed while it runs is seen by the next one)."""
    return list(_installed_backends())


@functools.cache
def _installed_backends() -> tuple[str, ...]:
    # find_spec searches sys.path: 0.6 ms a call, and the weight stage resolves the
    # backend once per matrix (2,551 times, 1.6 s, on the seed paper's 255 checkpoints)
    return tuple(b for b in BACKEND_PREFERENCE if importlib.util.find_spec(_MODULE_OF_BACKEND[b]))


def resolve_backend(backend: str) -> str:
    """Map ``"auto"`` to the fastest installed backend; check an explicit name.

    Raises:
        ValueError: unknown name, or the named library is not installed.
    """
    installed = available_backends()
    if backend == "auto":
        if not installed:
            raise ValueError(
                "no Vietoris-Rips backend installed: pip install ripser (or gudhi, giotto-ph)"
            )
        return installed[0]
    if backend not in BACKEND_PREFERENCE:
        raise ValueError(
            f"unknown PH backend {backend!r}; allowed: auto, {', '.join(BACKEND_PREFERENCE)}"
        )
    if backend not in installed:
        raise ValueError(f"PH backend {backend!r} is not installed (installed: {installed})")
    return backend


def distance_matrix(points: np.ndarray) -> np.ndarray:
    """Euclidean distances of ``points`` (n, d), computed in float64, returned as float32 (n, n).

    The float32 rounding is the one every backend would apply internally anyway
    (ripser and giotto-ph filter in float32); doing it once here makes all backends
    see the same filtration.
    """
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2:
        raise ValueError(f"points must be a 2-D array (n, d), got shape {points.shape}")
    if not np.all(np.isfinite(points)):
        raise ValueError("points contain NaN or inf")
    return squareform(pdist(points)).astype(np.float32)


def _ripser(dist: np.ndarray, maxdim: int) -> list[Diagram]:
    """ripser.py's own C++ core (``pyRipser``), called as ``ripser.ripser`` calls it for a
    dense distance matrix with a zero diagonal: the upper triangle, row by row, as
    float32, no threshold, over Z/2, no cocycles. Importing the core alone skips the
    wrapper's import of scikit-learn (about 1.7 s of a process on 2 cores); the diagrams
    are the wrapper's (``tests/test_homology.py`` compares them). Where the core cannot be
    imported (another ripser.py layout), the wrapper is used."""
    try:
        from pyRipser import doRipsFiltrationDM
    except ImportError:  # pragma: no cover - ripser.py has shipped the core since 0.4
        from ripser import ripser

        return list(ripser(dist, maxdim=maxdim, distance_matrix=True)["dgms"])
    upper = np.ascontiguousarray(dist[np.triu_indices(dist.shape[0], 1)], dtype=np.float32)
    found = doRipsFiltrationDM(upper, maxdim, np.inf, 2, False)["births_and_deaths_by_dim"]
    return [np.asarray(d, dtype=np.float64).reshape(-1, 2) for d in found]


def _giotto(dist: np.ndarray, maxdim: int) -> list[Diagram]:
    """giotto-ph's C++ core over Z/2 (``gph.modules.gph_ripser.rips_dm``), called as
    ``gph.ripser_parallel(dist, metric="precomputed", maxdim=maxdim, n_threads=1)`` calls
    it for a dense distance matrix: the upper triangle and the diagonal as float32, the
    enclosing radius (the smallest row maximum) as threshold, one thread, no generators.
    The core is loaded from its own file, so that ``gph/__init__`` and its import of
    scikit-learn (about 1.7 s of a process on 2 cores, once) are not run; the diagrams
    are the wrapper's (``tests/test_homology.py`` compares them). Where the core cannot
    be loaded (another giotto-ph layout), the wrapper is used."""
    core = _giotto_core()
    if core is None:  # pragma: no cover - giotto-ph has shipped gph.modules since 0.2
        from gph import ripser_parallel

        return list(ripser_parallel(dist, metric="precomputed", maxdim=maxdim,
                                    n_threads=1)["dgms"])
    thresh = np.max(dist, axis=1).min()
    found = core.rips_dm(squareform(dist, checks=False).astype(np.float32),
                         np.diagonal(dist).astype(np.float32), 2, maxdim, thresh, 1, False)
    return [np.asarray(d, dtype=np.float64).reshape(-1, 2)
            for d in found.births_and_deaths_by_dim()]


@functools.cache
def _giotto_core():
    """The module ``gph.modules.gph_ripser`` (giotto-ph's compiled core), loaded from its
    file without importing the ``gph`` package; ``None`` where it is not found."""
    import sys
    from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
    from pathlib import Path

    name = "gph.modules.gph_ripser"
    if name in sys.modules:  # gph itself was imported: the same module
        return sys.modules[name]
    spec = importlib.util.find_spec("gph")  # finds the package, does not run it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in EXTENSION_SUFFIXES:
            path = Path(folder) / "modules" / f"gph_ripser{suffix}"
            if path.is_file():
                loader = ExtensionFileLoader(name, str(path))
                module = importlib.util.module_from_spec(
                    importlib.util.spec_from_loader(name, loader))
                loader.exec_module(module)
                return module
    return None


def _gudhi(dist: np.ndarray, maxdim: int) -> list[Diagram]:
    import gudhi

    # gudhi reads the lower triangle of the matrix.
    complex_ = gudhi.RipsComplex(distance_matrix=dist.astype(np.float64))
    tree = complex_.create_simplex_tree(max_dimension=maxdim + 1)
    tree.compute_persistence(homology_coeff_field=2, min_persistence=0.0)
    return [
        np.asarray(tree.persistence_intervals_in_dimension(q), dtype=np.float64).reshape(-1, 2)
        for q in range(maxdim + 1)
    ]


_BACKENDS: dict[str, Callable[[np.ndarray, int], list[Diagram]]] = {
    "ripser": _ripser,
    "giotto-ph": _giotto,
    "gudhi": _gudhi,
}


class Persistence(NamedTuple):
    """What :func:`vietoris_rips` returns: a tuple ``(diagrams, backend)`` (it unpacks as
    one) with named fields.

    Attributes:
        diagrams: ``diagrams[q]``, the (m_q, 2) float64 (birth, death) array of H_q.
        backend: the library that computed them (``ripser``, ``giotto-ph``, ``gudhi``).
    """

    diagrams: list[Diagram]
    backend: str

    def __repr__(self) -> str:
        bars = ", ".join(f"H{q}: {len(d)} bars" for q, d in enumerate(self.diagrams))
        return f"Persistence({bars}; by {self.backend})"


def vietoris_rips(
    points: np.ndarray, maxdim: int = 1, backend: str = "auto"
) -> Persistence:
    """Vietoris–Rips persistence diagrams of a point cloud, over Z/2.

    Args:
        points: (n, d) point cloud.
        maxdim: highest homology dimension (1 gives H0 and H1).
        backend: ``"auto"``, ``"ripser"``, ``"giotto-ph"`` or ``"gudhi"``.

    Returns:
        A :class:`Persistence`, ``(diagrams, backend)``: ``diagrams[q]`` is an (m_q, 2)
        float64 array of (birth, death), sorted, with bars of zero persistence removed;
        the name of the backend that computed them.
    """
    name = resolve_backend(backend)
    dist = distance_matrix(points)
    diagrams = [_clean(d) for d in _BACKENDS[name](dist, maxdim)]
    return Persistence(diagrams, name)


def _clean(diagram: np.ndarray) -> Diagram:
    """Drop zero-length bars and sort by (birth, death) so backends compare equal."""
    d = np.asarray(diagram, dtype=np.float64).reshape(-1, 2)
    d = d[d[:, 1] > d[:, 0]]
    order = np.lexsort((d[:, 1], d[:, 0]))
    return d[order]


def finite_lifetimes(diagram: Diagram) -> np.ndarray:
    """Lifetimes ``death - birth`` (m,) of the finite bars with positive persistence."""
    d = np.asarray(diagram, dtype=np.float64).reshape(-1, 2)
    d = d[np.isfinite(d[:, 1])]
    life = d[:, 1] - d[:, 0]
    return life[life > 0]


def persistence_entropy(lifetimes: np.ndarray) -> float:
    """-Σ pᵢ ln pᵢ with pᵢ = lᵢ / Σl (nats); 0 for no bars."""
    life = np.asarray(lifetimes, dtype=np.float64)
    total = life.sum()
    if life.size == 0 or total <= 0:
        return 0.0
    p = life / total
    return float(-(p * np.log(p)).sum())


def diagram_features(diagram: Diagram) -> dict[str, float]:
    """Summary of one diagram (definitions: docs/measures.md), all in the cloud's distance units.

    ``std_persistence`` is the population standard deviation (ddof=0);
    ``n_significant`` counts bars strictly longer than the median lifetime.
    """
    life = finite_lifetimes(diagram)
    n = life.size
    if n == 0:
        return {name: 0.0 for name in FEATURE_NAMES}
    # The values of life.mean(), life.std(), np.median(life) and persistence_entropy(life)
    # to the bit, in a third of their time (a weight run computes two diagrams per matrix
    # per checkpoint): NumPy's mean divides the same pairwise sum by n; its std sums the
    # squared deviations from that mean pairwise, divides by n and takes the root; its
    # median is the middle entry, or the sum of the two middle ones halved
    # (tests/test_homology.py compares them on thousands of diagrams).
    total = float(life.sum())
    mean = total / n
    deviation = life - mean
    ordered = np.sort(life)
    half = n // 2
    median = ordered[half] if n % 2 else (ordered[half - 1] + ordered[half]) / 2
    p = life / total  # every lifetime is > 0, so total > 0
    return {
        "n_features": float(n),
        "total_persistence": total,
        "mean_persistence": mean,
        "max_persistence": float(ordered[-1]),
        "std_persistence": math.sqrt(float((deviation * deviation).sum()) / n),
        "persistence_entropy": float(-(p * np.log(p)).sum()),
        "n_significant": float(n - np.searchsorted(ordered, median, side="right")),
    }


def diagrams_features(diagrams: Sequence[Diagram]) -> dict[str, float]:
    """Features of every dimension, keyed ``h{q}_{feature}``."""
    out: dict[str, float] = {}
    for q, diagram in enumerate(diagrams):
        for name, value in diagram_features(diagram).items():
            out[f"h{q}_{name}"] = value
    return out


def _finite(diagram: Diagram) -> np.ndarray:
    d = np.asarray(diagram, dtype=np.float64).reshape(-1, 2)
    return d[np.isfinite(d[:, 1]) & (d[:, 1] > d[:, 0])]


def wasserstein(a: Diagram, b: Diagram, internal_p: float = math.inf) -> float:
    """Order-1 Wasserstein distance between the finite parts of two diagrams.

    Computed by Hera (``gudhi.hera``) with relative error ``delta=1e-6`` (Hera's
    default of 0.01 is visibly approximate). ``internal_p`` is the ground metric on
    the plane: ``inf`` (the default, docs/measures.md) or 2, which is what
    ``persim.wasserstein`` computes.
    """
    from gudhi.hera import wasserstein_distance

    return float(
        wasserstein_distance(_finite(a), _finite(b), order=1, internal_p=internal_p, delta=1e-6)
    )


def wasserstein_persim(a: Diagram, b: Diagram) -> float:
    """``persim.wasserstein`` of the finite parts: the seed's distance (L2 ground metric)."""
    import persim

    fa, fb = _finite(a), _finite(b)
    if len(fa) == 0 and len(fb) == 0:
        return 0.0
    return float(persim.wasserstein(fa, fb))


def betti_curve(diagram: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The Betti number at each scale of ``grid``: how many bars have
    ``birth <= t < death`` (an infinite death counts at every scale after its birth;
    zero-length bars never count). The same values as ``gudhi.representations.BettiCurve``
    with ``predefined_grid=grid`` (tested), without its per-call overhead.

    Args:
        diagram: (m, 2) birth, death pairs (rows with NaN, or death < birth, are ignored).
        grid: (k,) scales, in the diagram's units.

    Returns:
        (k,) int64 Betti numbers.
    """
    d = np.asarray(diagram, dtype=np.float64).reshape(-1, 2)
    d = d[~np.isnan(d).any(axis=1) & (d[:, 1] >= d[:, 0])]
    t = np.asarray(grid, dtype=np.float64)
    births, deaths = np.sort(d[:, 0]), np.sort(d[:, 1])
    return (np.searchsorted(births, t, side="right")
            - np.searchsorted(deaths, t, side="right")).astype(np.int64)
