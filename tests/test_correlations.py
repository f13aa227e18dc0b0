"""Correlations with model quality and consecutive diagram distances."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import records_of
from scipy import stats as sps

from toposig.analysis import correlations


def test_correlation_matches_scipy_for_large_n():
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    y = np.exp(x + 0.5 * rng.normal(size=30))
    c = correlations.correlation(x, y)
    assert c["n"] == 30 and c["spearman_p_method"] == "t-approximation"
    assert c["spearman_r"] == pytest.approx(sps.spearmanr(x, y).statistic)
    assert c["spearman_p"] == pytest.approx(sps.spearmanr(x, y).pvalue)
    assert c["pearson_r"] == pytest.approx(sps.pearsonr(x, y).statistic)
    assert c["pearson_log_r"] == pytest.approx(sps.pearsonr(x, np.log(y)).statistic)


def test_small_n_uses_exact_permutation_p_values():
    c = correlations.correlation([1, 2, 3], [30, 20, 10])
    assert c["spearman_r"] == pytest.approx(-1.0)
    assert c["spearman_p"] == pytest.approx(1 / 3)  # scipy's t-approximation says 0
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=7), rng.normal(size=7)
    reference = sps.permutation_test(
        (x,), lambda a: sps.spearmanr(a, y).statistic, permutation_type="pairings",
        n_resamples=np.inf,
    ).pvalue
    assert correlations.spearman_exact_p(x, y) == pytest.approx(reference)


def test_perfect_rank_order_beyond_exact_n_is_two_over_n_factorial():
    import math

    c = correlations.correlation(list(range(12)), [float(-v) ** 3 for v in range(12)])
    assert c["spearman_r"] == pytest.approx(-1.0)
    assert c["spearman_p"] == pytest.approx(2 / math.factorial(12))  # not scipy's 0
    assert c["spearman_p_method"] == "exact (perfect rank order)"
    tied = correlations.correlation(list(range(12)), [0, 0, *range(10)])
    assert tied["spearman_p_method"] == "t-approximation"


def test_undefined_correlations_are_none():
    assert correlations.correlation([1, 2], [3, 4])["spearman_r"] is None
    assert correlations.correlation([1, 1, 1, 1], [1, 2, 3, 4])["pearson_r"] is None
    c = correlations.correlation([1, None, 3, 4, float("nan"), 6], [1, 2, 3, 4, 5, 7])
    assert c["n"] == 4 and c["spearman_r"] == pytest.approx(1.0)


def _entries():
    out = []
    for label, offset in (("a", 0.0), ("b", 1.0)):
        for step, ppl in zip((0, 10, 100, 1000), (1000.0, 300.0, 50.0, 20.0), strict=True):
            out.append({"model_label": label, "step": step, "perplexity": ppl + offset,
                        "features": {"h1_total_persistence": 1.0 / ppl, "rankme": 5.0,
                                     "h0_n_features": 199.0}})
    return out


def _records():
    return records_of(_entries())


def test_correlations_with_target_per_model_and_pooled():
    res = correlations.correlations_with_target(list(reversed(_records())))
    assert set(res["per_model"]) == {"b", "a"}
    assert res["per_model"]["a"]["h1_total_persistence"]["spearman_r"] == pytest.approx(-1.0)
    assert res["per_model"]["a"]["rankme"]["spearman_r"] is None  # constant
    assert res["pooled"]["h1_total_persistence"]["n"] == 8
    assert correlations.feature_names(_records()) == [
        "h0_n_features", "h1_total_persistence", "rankme"]


def test_by_model_sorts_steps():
    groups = correlations.by_model(list(reversed(_records())))
    assert [r.step for r in groups["a"]] == [0, 10, 100, 1000]


def test_consecutive_distances():
    d0 = [np.array([[0.0, 1.0], [0.0, np.inf]]), np.array([[0.5, 1.5]])]
    d1 = [np.array([[0.0, 1.0], [0.0, np.inf]]), np.array([[0.5, 2.5]])]
    rows = correlations.consecutive_distances([d0, d0, d1])
    assert rows[0] == {k: 0.0 for k in rows[0]}
    assert rows[1]["h1_wasserstein"] == pytest.approx(1.0)
    assert rows[1]["h0_wasserstein"] == 0.0
    assert set(rows[1]) == {"h0_wasserstein", "h0_wasserstein_persim_l2", "h1_wasserstein",
                            "h1_wasserstein_persim_l2"}


def test_the_exact_spearman_p_equals_scipys_permutation_test_without_ties():
    """The hand-written exact p (all n! orderings, two-sided by |rho|) is kept: with ties
    scipy's two-sided p (twice the smaller one-sided p) is another definition, and it is
    about 400x slower here. Without ties the two agree."""
    from toposig.analysis.correlations import spearman_exact_p

    rng = np.random.default_rng(2)
    for n in (3, 4, 5, 6):
        for _ in range(3):
            x, y = rng.random(n), rng.random(n)
            rx = sps.rankdata(x)

            def rho(yy, axis=-1, rx=rx):
                ry = sps.rankdata(yy, axis=axis)
                return np.array([np.corrcoef(rx, r)[0, 1] for r in np.atleast_2d(ry)])

            want = sps.permutation_test((y,), rho, permutation_type="pairings",
                                        n_resamples=np.inf, vectorized=True).pvalue
            assert spearman_exact_p(x, y) == pytest.approx(want, abs=1e-12), (n, x, y)


def test_a_target_missing_from_some_checkpoints_is_passed_over_with_a_warning(caplog):
    from toposig.analysis.compute import choose_target

    entries = [dict(r, loss=r["perplexity"] / 100) for r in _entries()]
    assert choose_target(records_of(entries)) == "perplexity"
    entries[5]["perplexity"] = None  # one damaged or partial checkpoint
    with caplog.at_level("WARNING"):
        assert choose_target(records_of(entries)) == "loss"
    assert ("correlating with loss, not perplexity: 1 of 8 checkpoints have no perplexity "
            "(the first: b step 10); pass --target perplexity") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert choose_target(records_of([dict(r, perplexity=None) for r in entries])) == "loss"
    assert caplog.text == ""  # no record has it: nothing passed over
