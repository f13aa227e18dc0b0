"""Neural persistence, weight-row homology and matrix selection against known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toposig.features import heavy_tail, weights


def union_find_np(matrix: np.ndarray, w_max: float | None = None) -> dict[str, float]:
    """The straightforward way, written from the definition: every edge of the bipartite
    graph sorted by decreasing weight, a union-find, a (1, w) pair per merging edge."""
    a = np.abs(np.asarray(matrix, dtype=np.float64))
    m, k = a.shape
    n = m + k
    own = a.max()
    w_max = own if w_max is None else w_max
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    edges = sorted(((a[i, j], i, m + j) for i in range(m) for j in range(k)), reverse=True)
    deaths = []
    for w, u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[ru] = rv
            deaths.append(w)
    assert len(deaths) == n - 1
    d = np.array(deaths)
    scaled = d / w_max if w_max > 0 else np.zeros_like(d)
    value = math.sqrt(float(np.sum((1 - scaled) ** 2)) + 1)
    seed = float(np.sum(1 - (d / own if own > 0 else np.zeros_like(d)))) / (n - 1)
    return {"np": value, "np_normalized": value / math.sqrt(n - 1), "np_seed": seed}


def assert_np_equal(got: dict, want: dict) -> None:
    for key in ("np", "np_normalized", "np_seed"):
        assert got[key] == pytest.approx(want[key], abs=1e-9, rel=0), key


RANDOM_SHAPES = [(7, 5), (5, 7), (30, 12), (64, 64), (3, 40)]


@pytest.mark.parametrize("shape", RANDOM_SHAPES)
def test_np_matches_union_find_on_random_matrices(shape):
    rng = np.random.default_rng(sum(shape))
    m = rng.standard_normal(shape)
    assert_np_equal(weights.neural_persistence(m), union_find_np(m))
    w_max = 2.5 * np.abs(m).max()  # a checkpoint-wide maximum from another matrix
    assert_np_equal(weights.neural_persistence(m, w_max), union_find_np(m, w_max))


@pytest.mark.parametrize("kind", ["ties", "zeros", "zero_rows", "all_zero", "float32",
                                  "heavy_row", "single_row", "single_column", "1x1"])
def test_np_matches_union_find_on_special_matrices(kind):
    rng = np.random.default_rng(1)
    m = {
        "ties": rng.integers(-2, 3, size=(12, 9)).astype(float),  # values in {0, 1, 2}
        "zeros": np.where(rng.random((15, 10)) < 0.6, 0.0, rng.standard_normal((15, 10))),
        "zero_rows": np.vstack([np.zeros((3, 8)), rng.standard_normal((5, 8))]),
        "all_zero": np.zeros((4, 6)),
        "float32": rng.standard_normal((40, 17)).astype(np.float32),
        "heavy_row": np.vstack([100 * np.ones((1, 9)), rng.standard_normal((20, 9))]),
        "single_row": rng.standard_normal((1, 9)),
        "single_column": rng.standard_normal((9, 1)),
        "1x1": np.array([[0.5]]),
    }[kind]
    assert_np_equal(weights.neural_persistence(m), union_find_np(m))


def test_threshold_kruskal_and_dense_prim_agree_with_each_other():
    rng = np.random.default_rng(7)
    a = np.abs(rng.standard_normal((300, 120)))
    fast = weights._kruskal_above_threshold(a, min(a.max(1).min(), a.max(0).min()))
    assert fast is not None  # the usual case: the threshold subgraph is connected
    np.testing.assert_array_equal(np.sort(fast), np.sort(weights._dense_prim(a)))


def test_disconnected_threshold_graph_falls_back_to_prim():
    # Two blocks joined only by light edges: the heavy edges leave two components.
    a = np.full((6, 6), 0.01)
    a[:3, :3] = 1.0
    a[3:, 3:] = 0.9
    a[0, 5] = 0.02
    assert weights._kruskal_above_threshold(a, 0.9) is None
    tree = weights.max_spanning_tree_weights(a)
    assert tree.tolist() == [1.0] * 5 + [0.9] * 5 + [0.02]


def test_np_is_invariant_to_permuting_rows_and_columns():
    rng = np.random.default_rng(3)
    m = rng.standard_normal((50, 23))
    p = m[rng.permutation(50)][:, rng.permutation(23)]
    assert_np_equal(weights.neural_persistence(p), weights.neural_persistence(m))
    assert_np_equal(weights.neural_persistence(m.T), weights.neural_persistence(m))


def test_np_by_hand_2x2():
    # |w| = [[4, 1], [2, 3]]; W_max = 4. Maximum spanning tree: 4, 3, 2 -> w~ = 1, .75, .5.
    m = np.array([[4.0, -1.0], [2.0, -3.0]])
    got = weights.neural_persistence(m)
    value = math.sqrt(0**2 + 0.25**2 + 0.5**2 + 1)  # + the never-dying (1, 0)
    assert got["np"] == pytest.approx(value, abs=1e-12)
    assert got["np_normalized"] == pytest.approx(value / math.sqrt(3), abs=1e-12)
    assert got["np_seed"] == pytest.approx((0 + 0.25 + 0.5) / 3, abs=1e-12)


def test_np_by_hand_2x3():
    # |w| = [[6, 1, 2], [3, 5, 4]]; tree: 6 (r0-c0), 5 (r1-c1), 4 (r1-c2), 3 (r1-c0).
    m = np.array([[6.0, 1.0, -2.0], [3.0, 5.0, 4.0]])
    got = weights.neural_persistence(m, w_max=12.0)  # checkpoint-wide maximum 12
    value = math.sqrt(0.5**2 + (7 / 12) ** 2 + (2 / 3) ** 2 + 0.75**2 + 1)
    assert got["np"] == pytest.approx(value, abs=1e-12)
    assert got["np_normalized"] == pytest.approx(value / 2.0, abs=1e-12)
    assert got["np_seed"] == pytest.approx((0 + 1 / 6 + 2 / 6 + 3 / 6) / 4, abs=1e-12)


def test_np_rejects_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        weights.neural_persistence(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="2-D"):
        weights.neural_persistence(np.ones(3))
    with pytest.raises(ValueError, match="below"):
        weights.neural_persistence(np.array([[2.0, 1.0]]), w_max=1.0)


def test_row_sample_is_seeded_per_name_and_bounded():
    a = weights.row_sample(1000, 200, 42, "layers.0.mlp.weight")
    assert a.size == 200 and np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(a, weights.row_sample(1000, 200, 42, "layers.0.mlp.weight"))
    assert not np.array_equal(a, weights.row_sample(1000, 200, 43, "layers.0.mlp.weight"))
    assert not np.array_equal(a, weights.row_sample(1000, 200, 42, "layers.1.mlp.weight"))
    np.testing.assert_array_equal(weights.row_sample(150, 200, 42, "x"), np.arange(150))


NEOX_SHAPES = {
    "gpt_neox.embed_in.weight": (50304, 64),
    "gpt_neox.layers.0.input_layernorm.weight": (64,),
    "gpt_neox.layers.0.attention.query_key_value.weight": (192, 64),
    "gpt_neox.layers.0.attention.query_key_value.bias": (192,),
    "gpt_neox.layers.0.attention.dense.weight": (64, 64),
    "gpt_neox.layers.0.mlp.dense_h_to_4h.weight": (256, 64),
    "gpt_neox.layers.0.mlp.dense_4h_to_h.weight": (64, 256),
    "gpt_neox.final_layer_norm.weight": (64,),
    "embed_out.weight": (50304, 64),
}
LINEAR = ["gpt_neox.layers.0.attention.query_key_value.weight",
          "gpt_neox.layers.0.attention.dense.weight",
          "gpt_neox.layers.0.mlp.dense_h_to_4h.weight",
          "gpt_neox.layers.0.mlp.dense_4h_to_h.weight"]


def test_candidates_are_the_2d_weights_and_no_name_is_left_out_by_default():
    """No name rule: every 2-D ``*weight`` is a candidate (toposig.model.matrices decides
    by module type or tensor structure which are analysed)."""
    assert weights.DEFAULT_EXCLUDE == ()
    assert weights.select_matrices(NEOX_SHAPES) == [
        "gpt_neox.embed_in.weight", *LINEAR, "embed_out.weight"]
    gpt2 = {"transformer.wte.weight": (50257, 8), "transformer.h.0.ln_1.weight": (8,),
            "transformer.h.0.attn.c_attn.weight": (8, 24), "transformer.h.0.attn.bias": (8, 8),
            "lm_head.weight": (50257, 8)}
    assert weights.select_matrices(gpt2) == ["transformer.wte.weight",
                                             "transformer.h.0.attn.c_attn.weight",
                                             "lm_head.weight"]


def test_include_and_exclude_patterns():
    assert weights.select_matrices(NEOX_SHAPES, include=[r"mlp"]) == LINEAR[2:]
    assert weights.select_matrices(NEOX_SHAPES, exclude=[r"attention", r"embed"]) == LINEAR[2:]
    assert weights.select_matrices(NEOX_SHAPES, include=[r"embed_in", r"dense\.w"]) == [
        "gpt_neox.embed_in.weight", "gpt_neox.layers.0.attention.dense.weight"]
    assert weights.select_matrices(NEOX_SHAPES, include=[r"mlp"], exclude=[r"4h_to"]) == [
        LINEAR[2]]


def test_weight_signatures_summaries():
    rng = np.random.default_rng(0)
    mats = {"a.weight": rng.standard_normal((300, 20)),
            "b.weight": 3 * rng.standard_normal((20, 40)),
            "c.weight": rng.standard_t(2.0, (5, 6))}  # 5 eigenvalues: no alpha fitted
    sig = weights.weight_signatures(mats, max_rows=100, seed=1)
    w_max = max(np.abs(m).max() for m in mats.values())
    assert sig.w_max == w_max == sig.features["weight_max_abs"]
    per = {e["name"]: e for e in sig.matrices}
    assert per["a.weight"]["n_rows_used"] == 100 and per["b.weight"]["n_rows_used"] == 20
    for name, m in mats.items():
        assert per[name]["np_normalized"] == pytest.approx(
            union_find_np(m, w_max)["np_normalized"], abs=1e-9)
        assert per[name]["l2_norm"] == pytest.approx(np.linalg.norm(m))
    values = [per[n]["np_normalized"] for n in mats]
    assert sig.features["np_mean"] == pytest.approx(np.mean(values))
    assert sig.features["np_std"] == pytest.approx(np.std(values))
    assert sig.features["np_min"] == min(values) and sig.features["np_max"] == max(values)
    assert sig.features["weight_h0_total"] == pytest.approx(
        sum(per[n]["h0_total_persistence"] for n in mats))
    everything = np.concatenate([m.ravel() for m in mats.values()])
    assert sig.features["weight_l2_norm"] == pytest.approx(np.linalg.norm(everything))
    assert sig.features["weight_std"] == pytest.approx(everything.std())
    assert sig.features["weight_mean_abs"] == pytest.approx(np.abs(everything).mean())
    assert sig.features["weight_std_over_max_mean"] == pytest.approx(
        np.mean([m.std() / w_max for m in mats.values()]))
    assert len(sig.diagrams["a.weight"]) == 2
    # weightwatcher's metrics per matrix; their means skip the matrix without a fit
    for name, m in mats.items():
        want = heavy_tail.heavy_tail_features(m)
        for key in weights.MATRIX_HEAVY_TAIL:
            assert per[name][key] == pytest.approx(want[key], rel=1e-12, nan_ok=True), key
    assert math.isnan(per["c.weight"]["ww_pl_alpha"])
    assert sig.features["weight_alpha_mean"] == pytest.approx(
        np.mean([per[n]["ww_pl_alpha"] for n in ("a.weight", "b.weight")]), rel=1e-12)
    assert sig.features["weight_alpha_weighted_mean"] == pytest.approx(
        np.mean([per[n]["ww_weighted_alpha"] for n in ("a.weight", "b.weight")]), rel=1e-12)
    assert sig.features["weight_spectral_norm_mean"] == pytest.approx(
        np.mean([np.linalg.norm(m, 2) for m in mats.values()]), rel=1e-12)
    assert sig.features["weight_stable_rank_mean"] == pytest.approx(
        np.mean([np.linalg.norm(m) ** 2 / np.linalg.norm(m, 2) ** 2 for m in mats.values()]),
        rel=1e-12)
    small = weights.weight_signatures({"c.weight": mats["c.weight"]})
    assert math.isnan(small.features["weight_alpha_mean"])
    assert small.features["weight_spectral_norm_mean"] == per["c.weight"]["spectral_norm"]
    with pytest.raises(ValueError, match="no weight matrices"):
        weights.weight_signatures({})


def test_neural_persistence_falls_as_its_confound_rises():
    """Girrbach et al. 2023: NP is all but fixed by the spread of the weights it scales by
    their largest |w|; the ratio is its baseline (a Gaussian matrix with one outlier of
    growing size: the ratio falls and NP rises, rank for rank)."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    base = rng.standard_normal((40, 30))
    ratio, np_mean = [], []
    for outlier in (4.0, 6.0, 10.0, 20.0, 40.0):
        m = base.copy()
        m[0, 0] = outlier
        f = weights.weight_signatures({"w.weight": m}, maxdim=0).features
        ratio.append(f["weight_std_over_max_mean"])
        np_mean.append(f["np_mean"])
    assert spearmanr(ratio, np_mean).statistic == pytest.approx(-1.0)


def test_weight_signatures_are_the_same_to_the_bit_at_any_thread_count():
    """Several matrices at once, each ESD at one BLAS thread: the values do not depend on
    how many threads the run has, although a 300-wide ESD at 2 BLAS threads differs from
    one at 1 thread in its last bits (LAPACK's blocked reduction splits its work)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(4)
    mats = {f"m{i}.weight": rng.standard_normal((350, 300)).astype(np.float32)
            for i in range(3)}
    mats["small.weight"] = rng.standard_normal((12, 40))
    runs = {}
    for outer in (1, 2):
        with threadpool_limits(limits=outer, user_api="blas"):
            assert weights.blas_threads() == outer
            for threads in (None, 1, 2, 3):
                runs[outer, threads] = weights.weight_signatures(mats, max_rows=20,
                                                                 threads=threads)
    first = runs[1, 1]
    for sig in runs.values():
        assert sig.matrices == first.matrices and sig.features == first.features
        assert all(np.array_equal(a, b) for name in mats
                   for a, b in zip(sig.diagrams[name], first.diagrams[name], strict=True))
    with threadpool_limits(limits=1, user_api="blas"):
        one = heavy_tail.esd(mats["m0.weight"])
    with threadpool_limits(limits=2, user_api="blas"):
        two = heavy_tail.esd(mats["m0.weight"])
    if weights.blas_threads() >= 2:  # the bits would differ without the one-thread rule
        assert not np.array_equal(one, two)
    entry = first.matrices[0]
    assert entry["ww_lambda_max"] == heavy_tail.powerlaw_alpha(one)["lambda_max"]


def test_row_homology_of_a_circle_of_rows():
    # Rows on a circle in R^2: one long H1 bar.
    theta = np.linspace(0, 2 * np.pi, 60, endpoint=False)
    m = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    sig = weights.weight_signatures({"circle.weight": m})
    e = sig.matrices[0]
    assert e["h1_n_features"] >= 1
    assert e["h1_max_persistence"] > 1.0  # radius 1: the loop lives from ~0.1 to ~1.7


# ------------------------------------------------- the torch path (what a GPU run uses)

TORCH_CASES = {
    "random": lambda r: r.standard_normal((64, 40)),
    "ties": lambda r: r.integers(-2, 3, size=(12, 9)).astype(float),
    "zeros": lambda r: np.where(r.random((15, 10)) < 0.6, 0.0, r.standard_normal((15, 10))),
    "disconnected": lambda r: np.block([[np.ones((3, 3)), np.full((3, 3), 0.01)],
                                        [np.full((3, 3), 0.01), np.full((3, 3), 0.9)]]),
    "single_row": lambda r: r.standard_normal((1, 9)),
    "float32": lambda r: r.standard_normal((40, 17)).astype(np.float32),
}


@pytest.mark.parametrize("kind", sorted(TORCH_CASES))
def test_torch_tree_equals_the_numpy_tree(kind):
    torch = pytest.importorskip("torch")
    a = np.abs(TORCH_CASES[kind](np.random.default_rng(5)))
    got = weights.max_spanning_tree_weights_torch(torch.from_numpy(a))
    np.testing.assert_array_equal(got, weights.max_spanning_tree_weights(a))


def test_weight_signatures_on_a_torch_device_equal_the_numpy_ones():
    rng = np.random.default_rng(2)
    mats = {"a.weight": rng.standard_normal((30, 20)).astype(np.float32),
            "b.weight": 3 * rng.standard_normal((20, 30)).astype(np.float32)}
    plain = weights.weight_signatures(mats, max_rows=10)
    on_device = weights.weight_signatures(mats, max_rows=10, device="cpu")
    for p, d in zip(plain.matrices, on_device.matrices, strict=True):
        for key in ("np", "np_normalized", "np_seed"):
            assert d[key] == p[key], key  # the same tree weights: exactly equal
        for key in ("l2_norm", "std", "max_abs", "mean_abs", *weights.MATRIX_HEAVY_TAIL):
            assert d[key] == pytest.approx(p[key], rel=1e-12), key
    assert on_device.features == pytest.approx(plain.features, rel=1e-12)
