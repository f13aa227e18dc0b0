"""Inter-layer topology: zigzag persistence of H0 over a model's layers.

The texts' hidden states at each layer ``l`` are a point cloud ``X_l`` (the same ``n``
texts at every layer); ``G_l`` is its symmetric ``k``-nearest-neighbour graph. Following
Gardinazzi et al. (2025, "Persistent topological features in large language models"),
the layers form the zigzag

    G_0 -> G_0 u G_1 <- G_1 -> G_1 u G_2 <- G_2 ... <- G_{L-1}

of ``m = 2L - 1`` graphs (position ``2l`` is layer ``l``, position ``2l + 1`` the union of
layers ``l`` and ``l + 1``; every map an inclusion). Its H0 barcode says how the
clusters of the texts persist from one layer to the next: a bar ``[b, d]`` (positions,
inclusive) is a group of texts that stays one cluster of its own from position ``b`` to
``d``.

How it is computed: for a zigzag module that decomposes into interval modules, the
multiplicity of the bar ``[b, d]`` is the Möbius inversion of its generalized rank
invariant (the rank of the map from the limit to the colimit over ``[b, d]``),

    mult[b, d] = rk[b, d] - rk[b - 1, d] - rk[b, d + 1] + rk[b - 1, d + 1],

with ``rk`` of an interval outside ``0 .. m - 1`` zero (Kim & Mémoli 2021; Dey, Kim &
Mémoli 2022). For H0 of graphs on one vertex set the rank is a count: every vertex ``u``
gives a compatible family (its component at each position), so the map from the limit
onto the colimit, which is H0 of the union of the interval's graphs, is onto, and
``rk[b, d]`` is the number of connected components of that union (counted by SciPy's
``connected_components``). ``tests/test_zigzag.py`` checks this against the limit and
colimit computed by linear algebra on small cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from toposig.features.names import ZIGZAG_NAMES

FEATURE_NAMES = ZIGZAG_NAMES


def knn_graph(cloud: np.ndarray, k: int) -> csr_matrix:
    """The symmetric ``k``-nearest-neighbour graph of ``cloud`` ((n, d) points): ``i`` and
    ``j`` are joined when either is among the other's ``k`` nearest (Euclidean; ties by
    index, scikit-learn's brute-force search). ``k`` is capped at ``n - 1``.

    Returns:
        (n, n) boolean adjacency, symmetric, no self-loops.
    """
    from sklearn.neighbors import NearestNeighbors

    n = cloud.shape[0]
    if n < 2:
        return csr_matrix((n, n), dtype=bool)
    search = NearestNeighbors(n_neighbors=min(k, n - 1), algorithm="brute")
    graph = search.fit(np.asarray(cloud, dtype=np.float64)).kneighbors_graph(
        mode="connectivity")  # each point's k nearest others
    graph = (graph + graph.T).astype(bool)
    graph.setdiag(False)
    graph.eliminate_zeros()
    return graph.tocsr()


def n_components(graphs: list[csr_matrix]) -> int:
    """Connected components of the union of ``graphs`` (one vertex set)."""
    union = graphs[0]
    for g in graphs[1:]:
        union = union + g
    return int(connected_components(union, directed=False)[0])


def union_ranks(graphs: list[csr_matrix]) -> np.ndarray:
    """``rk[lo, hi]``: components of the union of the layer graphs ``lo .. hi``
    (``lo <= hi``; 0 elsewhere), an (L, L) integer array."""
    n_layers = len(graphs)
    rk = np.zeros((n_layers, n_layers), dtype=np.int64)
    for lo in range(n_layers):
        for hi in range(lo, n_layers):
            rk[lo, hi] = n_components(graphs[lo:hi + 1])
    return rk


def zigzag_h0(graphs: list[csr_matrix]) -> np.ndarray:
    """The H0 barcode of the layer zigzag of ``graphs`` (L graphs on one vertex set).

    Returns:
        (n_bars, 2) integer array of ``[birth, death]`` zigzag positions, inclusive
        (``0 .. 2L - 2``; even: a layer, odd: the union of two neighbouring layers),
        sorted by birth then death.
    """
    if not graphs:
        return np.zeros((0, 2), dtype=np.int64)
    sizes = {g.shape for g in graphs}
    if len(sizes) != 1 or next(iter(sizes))[0] != next(iter(sizes))[1]:
        raise ValueError(f"the graphs must be square and share one vertex set, got shapes "
                         f"{sorted(sizes)}")
    layer_rk = union_ranks(graphs)
    m = 2 * len(graphs) - 1

    def rk(b: int, d: int) -> int:  # the interval [b, d] of positions
        if b < 0 or d > m - 1:
            return 0
        return int(layer_rk[b // 2, (d + 1) // 2])

    bars = []
    for b in range(m):
        for d in range(b, m):
            mult = rk(b, d) - rk(b - 1, d) - rk(b, d + 1) + rk(b - 1, d + 1)
            if mult < 0:  # impossible for a module of inclusions of graphs
                raise ArithmeticError(f"negative multiplicity {mult} of [{b}, {d}]")
            bars += [(b, d)] * mult
    return np.array(bars, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class ZigzagSummary:
    """Scalars of an H0 layer-zigzag barcode, in layer units (position ``p`` is layer
    ``p / 2``).

    Attributes:
        n_bars: bars (clusters, each counted over the stretch of layers it persists).
        n_through: bars that persist through every layer (components of the union of all
            layers' graphs).
        mean_span: mean layers a bar spans, ``(death - birth) / 2`` (0: one layer only).
        entropy: persistence entropy of the bars' lengths ``(death - birth + 1) / 2``
            (natural log).
        mean_birth: mean layer at which a bar is born.
        layer_similarity: mean over neighbouring layers ``l, l + 1`` of the Jaccard index
            of the bars alive at each (1: the same clusters persist; 0: none does).
    """

    n_bars: int
    n_through: int
    mean_span: float
    entropy: float
    mean_birth: float
    layer_similarity: float

    def features(self) -> dict[str, float]:
        """As a record keeps them (:data:`FEATURE_NAMES`)."""
        return dict(zip(FEATURE_NAMES, (float(self.n_bars), float(self.n_through),
                                        self.mean_span, self.entropy, self.mean_birth,
                                        self.layer_similarity), strict=True))


def summarize(bars: np.ndarray, n_layers: int) -> ZigzagSummary:
    """The scalars of ``bars`` (from :func:`zigzag_h0` over ``n_layers`` layers)."""
    if n_layers < 1:
        raise ValueError("a zigzag needs at least one layer")
    m = 2 * n_layers - 1
    births, deaths = bars[:, 0], bars[:, 1]
    lengths = (deaths - births + 1) / 2.0
    p = lengths / lengths.sum() if len(bars) else lengths
    sims = []
    for layer in range(n_layers - 1):
        here = (births <= 2 * layer) & (deaths >= 2 * layer)
        there = (births <= 2 * layer + 2) & (deaths >= 2 * layer + 2)
        either = int((here | there).sum())
        sims.append(int((here & there).sum()) / either if either else 1.0)
    return ZigzagSummary(
        n_bars=len(bars),
        n_through=int(((births == 0) & (deaths == m - 1)).sum()),
        mean_span=float(((deaths - births) / 2.0).mean()) if len(bars) else 0.0,
        entropy=float(-(p * np.log(p)).sum()) if len(bars) else 0.0,
        mean_birth=float((births / 2.0).mean()) if len(bars) else 0.0,
        layer_similarity=float(np.mean(sims)) if sims else math.nan)


def knn_overlap(graphs: list[csr_matrix]) -> float:
    """The non-topological counterpart of the zigzag: how much each text's neighbourhood
    persists from one layer to the next, the mean over neighbouring layers ``l, l + 1``
    of the mean over texts of the Jaccard index of the text's neighbours in the two
    layers' graphs (1: every text keeps its neighbours; a text without neighbours in
    either counts 1). NaN for one layer.

    Args:
        graphs: the layers' symmetric k-nearest-neighbour graphs (:func:`knn_graph`),
            (n, n) on one vertex set.
    """
    if len(graphs) < 2:
        return math.nan
    means = []
    for a, b in zip(graphs[:-1], graphs[1:], strict=True):
        a, b = a.astype(bool), b.astype(bool)
        both = np.asarray(a.multiply(b).sum(axis=1)).ravel()
        either = np.asarray((a + b).astype(bool).sum(axis=1)).ravel()
        jaccard = np.divide(both, either, out=np.ones(len(both)), where=either > 0)
        means.append(float(jaccard.mean()))
    return float(np.mean(means))
