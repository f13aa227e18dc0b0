"""Zigzag persistence of H0 over layers (toposig.features.zigzag), checked against an
independent computation: the limit and colimit of the zigzag of H0 vector spaces built
by linear algebra, Möbius-inverted, on small random graphs; and a barcode worked by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.sparse import csr_matrix

from toposig.features.zigzag import (
    FEATURE_NAMES,
    knn_graph,
    summarize,
    union_ranks,
    zigzag_h0,
)


def graph(n: int, edges: list[tuple[int, int]]) -> csr_matrix:
    a = np.zeros((n, n), dtype=bool)
    for i, j in edges:
        a[i, j] = a[j, i] = True
    return csr_matrix(a)


def components(adjacency: np.ndarray) -> list[int]:
    """Component label of each vertex, by a breadth-first search of our own."""
    n = len(adjacency)
    label = [-1] * n
    count = 0
    for s in range(n):
        if label[s] >= 0:
            continue
        label[s], queue = count, [s]
        while queue:
            u = queue.pop()
            for v in np.flatnonzero(adjacency[u]):
                if label[v] < 0:
                    label[v] = count
                    queue.append(v)
        count += 1
    return label


def brute_force_bars(graphs: list[csr_matrix]) -> list[tuple[int, int]]:
    """The zigzag's H0 barcode from the generalized rank invariant computed by linear
    algebra: for each interval, the rank of the limit -> colimit map of the zigzag of H0
    vector spaces (one basis vector per component), then Möbius inversion."""
    dense = [g.toarray() for g in graphs]
    spaces = []  # per position: component label of each vertex
    for p in range(2 * len(dense) - 1):
        adj = dense[p // 2] if p % 2 == 0 else dense[p // 2] | dense[p // 2 + 1]
        spaces.append(components(adj))
    dims = [max(lab) + 1 for lab in spaces]

    def arrow(src: int, dst: int) -> np.ndarray:  # H0(src) -> H0(dst), induced by inclusion
        f = np.zeros((dims[dst], dims[src]))
        for v, c in enumerate(spaces[src]):
            f[spaces[dst][v], c] = 1.0
        return f

    def rank(b: int, d: int) -> int:
        if b < 0 or d >= len(spaces):
            return 0
        pos = list(range(b, d + 1))
        offs = np.cumsum([0] + [dims[p] for p in pos])
        total = offs[-1]
        rows, rels = [], []
        for i in range(len(pos) - 1):  # arrows point from layers (even) into unions (odd)
            p, q = pos[i], pos[i + 1]
            src, dst, si, di = (p, q, i, i + 1) if p % 2 == 0 else (q, p, i + 1, i)
            f = arrow(src, dst)
            row = np.zeros((dims[dst], total))  # f(v_src) - v_dst = 0 in the limit
            row[:, offs[si]:offs[si + 1]] = f
            row[:, offs[di]:offs[di + 1]] -= np.eye(dims[dst])
            rows.append(row)
            for x in range(dims[src]):  # e_src(x) ~ e_dst(f(x)) in the colimit
                rel = np.zeros(total)
                rel[offs[si] + x] = 1.0
                rel[offs[di]:offs[di + 1]] -= f[:, x]
                rels.append(rel)
        constraints = np.vstack(rows) if rows else np.zeros((0, total))
        _, s, vt = np.linalg.svd(constraints) if rows else (None, np.zeros(0), np.eye(total))
        null = vt[int((s > 1e-9).sum()):].T  # a basis of the limit, columns
        at = np.zeros((total, null.shape[1]))  # each limit element, seen at position b
        at[offs[0]:offs[1]] = null[offs[0]:offs[1]]
        rel = np.array(rels).T if rels else np.zeros((total, 0))
        return (np.linalg.matrix_rank(np.hstack([rel, at])) - np.linalg.matrix_rank(rel)
                if rel.shape[1] else np.linalg.matrix_rank(at))

    m, bars = len(spaces), []
    for b, d in itertools.combinations_with_replacement(range(m), 2):
        mult = rank(b, d) - rank(b - 1, d) - rank(b, d + 1) + rank(b - 1, d + 1)
        assert mult >= 0
        bars += [(b, d)] * mult
    return sorted(bars)


def test_a_barcode_worked_by_hand():
    # four texts; layer 0: {0,1} {2} {3}; layer 1: {0} {1,2} {3}; layer 2: {0,1,2,3}
    g = [graph(4, [(0, 1)]), graph(4, [(1, 2)]), graph(4, [(0, 1), (1, 2), (2, 3)])]
    bars = sorted(map(tuple, zigzag_h0(g)))
    # positions: 0 = L0 (3 components), 1 = L0 u L1 (2), 2 = L1 (3), 3 = L1 u L2 (1),
    # 4 = L2 (1); one class lives throughout, one until L1, one in L0 only, one in L1 only
    assert bars == [(0, 0), (0, 2), (0, 4), (2, 2)]
    assert bars == brute_force_bars(g)
    alive = [sum(b <= p <= d for b, d in bars) for p in range(5)]
    assert alive == [3, 2, 3, 1, 1]


@pytest.mark.parametrize("seed", range(25))
def test_the_barcode_equals_the_linear_algebra_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n, n_layers = int(rng.integers(2, 8)), int(rng.integers(1, 5))
    graphs = []
    for _ in range(n_layers):
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.3]
        graphs.append(graph(n, pairs))
    bars = sorted(map(tuple, zigzag_h0(graphs)))
    assert bars == brute_force_bars(graphs)
    rk = union_ranks(graphs)  # each position's dimension is the bars alive there
    for p in range(2 * n_layers - 1):
        dim = rk[p // 2, p // 2] if p % 2 == 0 else rk[p // 2, p // 2 + 1]
        assert sum(b <= p <= d for b, d in bars) == dim


def test_knn_graph_is_symmetric_without_loops_and_caps_k():
    cloud = np.array([[0.0], [1.0], [3.0], [10.0]])
    g = knn_graph(cloud, 1).toarray()
    assert (g == g.T).all() and not g.diagonal().any()
    assert g[0, 1] and g[1, 2] and g[2, 3] and not g[0, 3]  # 3's nearest is 2
    assert knn_graph(cloud, 10).toarray().sum() == 12  # k capped at n - 1: complete


def test_the_summary_in_layer_units():
    bars = np.array([[0, 0], [0, 2], [0, 4], [2, 2]])
    s = summarize(bars, 3)
    assert s.n_bars == 4 and s.n_through == 1
    assert s.mean_span == pytest.approx((0 + 1 + 2 + 0) / 4)
    assert s.mean_birth == pytest.approx((0 + 0 + 0 + 1) / 4)
    lengths = np.array([0.5, 1.5, 2.5, 0.5])
    p = lengths / lengths.sum()
    assert s.entropy == pytest.approx(-(p * np.log(p)).sum())
    # layers 0/1: alive {[0,0],[0,2],[0,4]} and {[0,2],[0,4],[2,2]}: 2 of 4; 1/2: 1 of 3
    assert s.layer_similarity == pytest.approx((2 / 4 + 1 / 3) / 2)
    assert list(s.features()) == list(FEATURE_NAMES)
    assert math.isnan(summarize(np.array([[0, 0]]), 1).layer_similarity)
