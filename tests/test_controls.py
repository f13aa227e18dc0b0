"""Confound controls on synthetic series with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import records_of
from scipy import stats as sps

from toposig.analysis import controls


def shared_trend_walks(n: int = 60, seed: int = 0):
    """Two independent random walks on top of the same linear downward trend."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n) * 100
    trend = -0.05 * np.arange(n)
    a = trend + np.cumsum(rng.normal(scale=0.1, size=n))
    b = trend + np.cumsum(rng.normal(scale=0.1, size=n))
    return steps, a, b


def test_shared_trend_correlates_raw_but_not_in_first_differences():
    steps, a, b = shared_trend_walks()
    raw = sps.spearmanr(a, b).statistic
    assert raw > 0.8
    diff = controls.first_difference_spearman(a, b)
    assert abs(diff["spearman_r"]) < 0.3 and diff["spearman_p"] > 0.05
    assert diff["n"] == len(a) - 1


def test_partial_spearman_removes_a_common_driver():
    rng = np.random.default_rng(1)
    z = np.linspace(0, 5, 80)
    x = z**2 + rng.normal(scale=0.5, size=80)
    y = np.exp(z) + rng.normal(scale=5, size=80)
    assert sps.spearmanr(x, y).statistic > 0.8
    r, p, n = controls.partial_spearman(x, y, z)
    assert n == 80 and abs(r) < 0.3 and p > 0.01


def test_partial_spearman_equals_the_textbook_formula_on_ranks():
    rng = np.random.default_rng(2)
    x, y, z = rng.normal(size=(3, 40))
    y += 0.5 * x
    rxy, rxz, ryz = (sps.spearmanr(a, b).statistic for a, b in ((x, y), (x, z), (y, z)))
    want = (rxy - rxz * ryz) / math.sqrt((1 - rxz**2) * (1 - ryz**2))
    r, p, _ = controls.partial_spearman(x, y, z)
    assert r == pytest.approx(want, abs=1e-12)
    t = want * math.sqrt(37 / (1 - want**2))
    assert p == pytest.approx(2 * sps.t.sf(abs(t), 37))


def test_partial_spearman_with_two_controls_matches_regression_on_ranks():
    rng = np.random.default_rng(4)
    z1, z2 = rng.normal(size=(2, 60))
    x = z1 + z2 + rng.normal(scale=0.5, size=60)
    y = z1 - z2 + rng.normal(scale=0.5, size=60)
    r, p, n = controls.partial_spearman(x, y, z1, z2)
    ranks = [sps.rankdata(v) for v in (x, y, z1, z2)]
    design = np.column_stack([np.ones(60), ranks[2], ranks[3]])
    res = [v - design @ np.linalg.lstsq(design, v, rcond=None)[0] for v in ranks[:2]]
    assert r == pytest.approx(sps.pearsonr(*res).statistic, abs=1e-12)
    assert n == 60 and abs(r) < 0.35


def test_partial_is_undefined_when_the_target_is_monotone_in_step():
    steps = np.arange(20) * 10
    loss = 5 / (1 + steps)  # falls monotonically
    feature = np.random.default_rng(0).normal(size=20)
    assert controls.partial_spearman(feature, loss, np.log1p(steps))[:2] == (None, None)


def test_holm_adjustment():
    adj = controls.holm([0.01, 0.04, 0.03, 0.005, None])
    assert adj[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adj[4] is None
    assert controls.holm([0.5, 0.9]) == [1.0, 1.0]  # monotone: never below an earlier one


def test_bootstrap_ci_is_seeded_and_brackets_rho():
    rng = np.random.default_rng(3)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    lo, hi = controls.bootstrap_spearman_ci(x, y, seed=7)
    rho = sps.spearmanr(x, y).statistic
    assert lo < rho < hi and lo > 0 and hi < 1
    assert (lo, hi) == controls.bootstrap_spearman_ci(x, y, seed=7)
    assert (lo, hi) != controls.bootstrap_spearman_ci(x, y, seed=8)
    assert controls.bootstrap_spearman_ci([1, 2, 3, 4, 5], [2, 4, 6, 8, 10]) == (1.0, 1.0)
    assert controls.bootstrap_spearman_ci([1, 2], [3, 4]) == (None, None)


def records_for(models=("a", "b", "c"), n=40, seed=0):
    """Perplexity falls with training; 'driven' follows the loss's own wiggles, 'trend'
    only shares the trend, 'noise' is unrelated."""
    rng = np.random.default_rng(seed)
    recs = []
    for m in models:
        steps = np.arange(n) * 50
        wiggle = rng.normal(scale=0.3, size=n)
        loss = 5 - np.log1p(steps) * 0.5 + wiggle
        trend = -np.log1p(steps) + np.cumsum(rng.normal(scale=0.05, size=n))
        for i, s in enumerate(steps):
            recs.append({"model_label": m, "step": int(s), "perplexity": float(np.exp(loss[i])),
                         "features": {"driven": float(loss[i] + rng.normal(scale=0.05)),
                                      "trend": float(trend[i]),
                                      "noise": float(rng.normal())}})
    return records_of(recs)


def test_controlled_correlations_sort_features_by_what_survives():
    targets = {"driven": "perplexity", "trend": "perplexity", "noise": "perplexity"}
    out = controls.controlled_correlations(records_for(), targets, n_resamples=200, seed=0)
    assert out["n_tests"] == 12  # 3 features x (3 models + pooled)
    summary = out["summary"]
    assert summary["driven"]["all_controls"] == 3
    assert summary["trend"]["significant_raw"] == 3
    assert summary["trend"]["significant_first_differences"] == 0
    assert summary["noise"]["significant_raw"] == 0
    e = out["per_model"]["a"]["driven"]
    assert e["ci_low"] <= e["spearman_r"] <= e["ci_high"]
    assert e["holm_p"] >= e["spearman_p"]
    again = controls.controlled_correlations(records_for(), targets, n_resamples=200, seed=0)
    assert again == out


def test_beyond_baseline_separates_a_norm_proxy_from_a_loss_tracker():
    rng = np.random.default_rng(5)
    recs = []
    for m in ("a", "b", "c"):
        n = 50
        norm = np.cumsum(rng.uniform(0.5, 1.5, size=n))  # grows unevenly
        wiggle = rng.normal(scale=0.3, size=n)  # the loss's own changes
        loss = 60 - norm + wiggle
        for i in range(n):
            recs.append({"model_label": m, "step": i * 100, "loss": float(loss[i]),
                         "features": {"weight_l2_norm": float(norm[i]),
                                      "np_mean": float(norm[i] + rng.normal(scale=0.01)),
                                      "np_max": float(-loss[i] + rng.normal(scale=0.05))}})
    recs = records_of(recs)
    targets = {f: "loss" for f in ("weight_l2_norm", "np_mean", "np_max")}
    out = controls.controlled_correlations(recs, targets, n_resamples=100)
    summary = out["summary"]
    assert summary["np_mean"]["significant_first_differences"] == 3  # the norm's own signal
    assert summary["np_mean"]["significant_beyond_baseline"] == 0  # nothing beyond it
    assert summary["np_max"]["significant_beyond_baseline"] == 3
    assert out["per_model"]["a"]["np_max"]["baseline"] == "weight_l2_norm"
    assert out["per_model"]["a"]["weight_l2_norm"]["significant"]["beyond_baseline"] is None
    assert controls.baseline_of("h1_total_persistence") == "mean_norm"
    assert controls.baseline_of("rankme") is None


def test_the_detrended_controls_tell_a_tracker_from_a_shared_trend():
    targets = {"driven": "perplexity", "trend": "perplexity", "noise": "perplexity"}
    out = controls.controlled_correlations(records_for(), targets, n_resamples=100, seed=0,
                                           n_surrogates=199)
    summary = out["summary"]
    assert summary["driven"]["significant_detrended"] == 3
    assert summary["driven"]["significant_partial_first_differences"] == 3
    assert summary["trend"]["significant_detrended"] == 0
    assert summary["noise"]["significant_detrended"] == 0
    a = out["per_model"]["a"]["driven"]
    assert a["scope"] == "model" and a["detrended_holm_p"] >= a["detrended_p"]
    pooled = out["pooled"]
    # pooled over models by a meta-analysis of the within-model statistics: the tracker
    # is found, the shared trend and the noise are not
    assert pooled["driven"]["detrended_models"] == 3
    assert pooled["driven"]["significant"]["detrended"] is True
    assert pooled["driven"]["detrended_ci_low"] < pooled["driven"]["detrended_r"]
    assert pooled["trend"]["significant"]["detrended"] is False
    assert pooled["noise"]["significant"]["detrended"] is False
    # the pooled raw and trend-level controls are descriptions, not tests
    assert pooled["driven"]["holm_p"] is None and pooled["driven"]["spearman_p"] is not None
    assert pooled["driven"]["significant"]["raw"] is None
    assert pooled["driven"]["ci_low"] is None
    assert pooled["driven"]["calibration"]["raw"].startswith("uncalibrated: checkpoints")
    # Holm runs within each control over its defined tests: 3 features x (3 models +
    # pooled) for the within-model controls, 3 features x 3 models for the others
    assert out["n_tests_by_control"]["detrended"] == 12
    assert out["n_tests_by_control"]["raw"] == 9
    assert out["n_tests_by_control"]["beyond_baseline"] == 0  # no baseline among these
    # every within-model and pooled trend test carries its design's check
    for entry in [*out["per_model"]["a"].values(), *pooled.values()]:
        for control in ("detrended", "partial_first_differences"):
            check = entry["design"][control]
            assert check["status"] == entry["calibration"][control] == "calibrated"
            assert 0 <= check["null_rate"] <= 0.15 and check["null_runs"] > 0
            assert check["holm_tests"] == out["n_tests_by_control"][control]
    # the pooled statistic is the (k - 3)-weighted mean Fisher z of the models' own
    for kind in ("detrended", "pfd"):
        rs = [out["per_model"][m]["driven"][f"{kind}_r"] for m in ("a", "b", "c")]
        assert pooled["driven"][f"{kind}_models"] == 3
        assert pooled["driven"][f"{kind}_r"] == pytest.approx(
            math.tanh(float(np.mean(np.arctanh(rs)))), rel=1e-9)  # equal n: equal weights
    assert pooled["driven"]["design"]["detrended"]["mdc"] <= \
        out["per_model"]["a"]["driven"]["design"]["detrended"]["mdc"]


def test_the_noise_floor_flags_changes_within_the_remeasurement_spread():
    recs = []
    for i in range(10):
        recs.append({"model_label": "a", "step": i * 10, "perplexity": 10.0 - i,
                     "features": {"quiet": 1.0 + 0.001 * i, "loud": float(i)},
                     "features_resampled": {"quiet": {"std": 0.01}, "loud": {"std": 0.01}}})
    recs = records_of(recs)
    assert controls.noise_floor(recs, "quiet") is True
    assert controls.noise_floor(recs, "loud") is False
    assert controls.noise_floor(recs, "absent") is None
    out = controls.controlled_correlations(recs, {"quiet": "perplexity"}, n_resamples=50,
                                           n_surrogates=99)
    e = out["per_model"]["a"]["quiet"]
    assert e["below_noise_floor"] and e["significant"]["above_noise_floor"] is False
    assert out["summary"]["quiet"]["below_noise_floor"] == 1
    assert out["summary"]["quiet"]["all_controls"] == 0  # raw rho is -1, but under the floor


def test_a_feature_must_beat_the_best_baseline_of_its_space():
    rng = np.random.default_rng(7)
    recs = []
    for m in ("a", "b"):
        n = 50
        rank = np.cumsum(rng.uniform(0.5, 1.5, size=n))  # the effective rank's own path
        loss = 60 - rank + rng.normal(scale=0.3, size=n)
        for i in range(n):
            h1 = float(rank[i] + rng.normal(scale=0.01))
            recs.append({"model_label": m, "step": i * 100,
                         "perplexity": float(np.exp(loss[i] / 20)),
                         "features": {"mean_norm": float(rng.normal()),
                                      "rankme": float(rank[i]), "h1_total_persistence": h1}})
    recs = records_of(recs)
    out = controls.controlled_correlations(recs, {"h1_total_persistence": "perplexity"},
                                           n_resamples=50, n_surrogates=49)
    e = out["per_model"]["a"]["h1_total_persistence"]
    # beyond the mean norm it would pass; beyond RankMe, which it only follows, it does not
    assert e["beyond_by_baseline"]["mean_norm"]["p"] < 0.05
    assert e["baseline"] == "rankme" and e["significant"]["beyond_baseline"] is False
    assert set(e["beyond_by_baseline"]) == {"mean_norm", "rankme"}  # no effective_rank_cov
    assert controls.baselines_of("np_mean")[0] == "weight_l2_norm"


def test_the_gradient_cosine_is_tested_beyond_the_noise_scale_that_predicts_it():
    rng = np.random.default_rng(4)
    n = 40
    noise = np.cumsum(rng.normal(size=n))  # the noise scale's own path
    loss = 3 + 0.2 * noise + rng.normal(scale=0.05, size=n)
    own = rng.normal(size=n)  # the loss's own fluctuations, which no feature shares
    recs = records_of([
        {"model_label": "a", "step": i * 10, "perplexity": float(np.exp(loss[i] + 0.3 * own[i])),
         "features": {"grad_noise_scale": float(noise[i]),
                      "grad_cosine_mean": float(-noise[i] + rng.normal(scale=0.2))}}
        for i in range(n)])
    out = controls.controlled_correlations(recs, {"grad_cosine_mean": "perplexity"},
                                           n_resamples=50, n_surrogates=49)
    e = out["per_model"]["a"]["grad_cosine_mean"]
    assert e["baseline"] == "grad_noise_scale" and set(e["beyond_by_baseline"]) == {
        "grad_noise_scale"}
    # it follows the noise scale: nothing is left of it beyond
    assert abs(e["diff_r"]) > 0.5 and e["beyond_p"] > 0.05
    assert e["significant"]["beyond_baseline"] is False


def test_a_baseline_too_sparse_to_test_is_not_the_hardest():
    rng = np.random.default_rng(2)
    recs = []
    for i in range(30):
        loss = 5 - 0.1 * i + rng.normal(scale=0.2)
        features = {"mean_norm": float(rng.normal()), "h1_total_persistence": float(-loss)}
        if i < 2:
            features["rankme"] = 1.0
        recs.append({"model_label": "a", "step": i * 10, "perplexity": float(np.exp(loss)),
                     "features": features})
    recs = records_of(recs)
    out = controls.controlled_correlations(recs, {"h1_total_persistence": "perplexity"},
                                           n_resamples=20, n_surrogates=19)
    e = out["per_model"]["a"]["h1_total_persistence"]
    assert e["beyond_by_baseline"]["rankme"]["p"] is None
    assert e["baseline"] == "mean_norm" and e["beyond_p"] is not None
