"""Inference with the right unit, tried where the truth is known.

- The simulated designs: learning-rate schedules' loss curves, ARMA(1, 1) noise, three grids.
- Pooled over models (a fixed-effect meta-analysis of the within-model detrended and
  partial-first-difference statistics against their own surrogates): on null runs of every
  design (3 grids x 5 trends x 3 noise levels, 3 models pooled), significant (and not ruled
  out by the design rule) in about alpha of runs: over all designs within 0.035-0.065, and
  in every design inside the binomial interval whose level is 99 % for the designs
  together. The same null passes the pooled tests that throw checkpoints together in most
  runs, and without the design rule the pooled detrended test fails on Pythia's 19
  checkpoints: the calibration test can fail.
- Power is reported, and a real coupling is found where the bench says it is.
- Intervals from surrogates cover the true Spearman ρ of AR(1) pairs (AR up to 0.8, 19 and
  51 checkpoints) in at least 92 % of runs; the percentile bootstrap over checkpoints they
  replace does not.
- Each test's own design: a run simulated from a known design gets its null rate, status
  and minimum detectable coupling; a design whose null rate is high is flagged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from toposig.analysis import controls, inference, simulate, trend_controls

ALPHA = 0.05
GRIDS = {"pythia19": simulate.PYTHIA_STEPS, "linear51": simulate.LINEAR_STEPS,
         "pythia154": simulate.PYTHIA_ALL_STEPS}
NOISES = (0.005, 0.05, 0.2)
DESIGNS = [(g, t, n) for g in GRIDS for t in simulate.TRENDS for n in NOISES]
RUNS = 60  # null runs per design; 45 designs x 60 = 2,700 per control


# --- the simulated designs -----------------------------------------------------------------

def test_the_grids_are_the_published_ones():
    assert len(simulate.PYTHIA_STEPS) == 19 and len(simulate.LINEAR_STEPS) == 51
    steps = simulate.PYTHIA_ALL_STEPS
    assert len(steps) == 154 and steps[:3] == (0, 1, 2) and steps[-1] == 143000
    assert len(set(steps)) == 154 and list(steps) == sorted(steps)


def test_schedules_shape_the_loss_curve():
    steps = np.arange(0, 10001, 10, dtype=float)
    total = 10000
    for schedule in simulate.SCHEDULES:
        rate = simulate.learning_rate(steps, schedule, total)
        assert rate[0] == 0 and rate.max() == pytest.approx(1.0, abs=1e-3)
        assert np.argmax(rate) * 10 == pytest.approx(simulate.WARMUP_FRACTION * total, abs=10)
        g = simulate.trend_shape(steps, trend=schedule)
        assert g[0] == 1.0 and np.all(np.diff(g) <= 1e-12) and 0 < g[-1] < 0.2
    cos = simulate.learning_rate(steps, "cosine", total)
    assert cos[-1] == pytest.approx(simulate.COSINE_FLOOR)
    assert simulate.learning_rate(steps, "cosine_anneal", total)[-1] == 0
    assert simulate.learning_rate(steps, "linear_decay", total)[-1] == 0
    # the final anneal lowers the end of the curve below the plain cosine's
    end = steps > 0.9 * total
    drop_anneal = np.ptp(simulate.trend_shape(steps, trend="cosine_anneal")[end])
    drop_cosine = np.ptp(simulate.trend_shape(steps, trend="cosine")[end])
    assert drop_anneal > 1.5 * drop_cosine
    with pytest.raises(ValueError, match="trend must be one of"):
        simulate.trend_shape(steps, trend="constant")


def test_arma11_noise_has_unit_variance_and_its_autocorrelation():
    e = simulate.arma11(np.random.default_rng(0), 40, 0.6, 0.3, size=20000)
    assert e.var() == pytest.approx(1.0, abs=0.03)
    lag1 = (0.6 + 0.3) * (1 + 0.6 * 0.3) / (1 + 2 * 0.6 * 0.3 + 0.09)
    assert np.mean(e[:, 1:] * e[:, :-1]) == pytest.approx(lag1, abs=0.02)
    assert np.mean(e[:, 2:] * e[:, :-2]) == pytest.approx(0.6 * lag1, abs=0.02)
    assert np.mean(e[:, 0] ** 2) == pytest.approx(1.0, abs=0.05)  # stationary from the start
    # ma = 0 draws exactly what the AR(1) simulator drew before ARMA existed
    a = simulate.simulate_run(simulate.LINEAR_STEPS, np.random.default_rng(3), ar=0.4)
    b = simulate.simulate_run(simulate.LINEAR_STEPS, np.random.default_rng(3), ar=0.4, ma=0.0)
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))


# --- pooled over models: calibrated on every design ----------------------------------------

@pytest.fixture(scope="module")
def null_cells():
    return {d: inference.simulate_cell(GRIDS[d[0]], trend=d[1], noise=d[2], ar=0.5, ma=0.3,
                                       n_models=3, runs=RUNS, seed=i)
            for i, d in enumerate(DESIGNS)}


# designs the design rule rules out (docs/analysis.md: "Where the controls hold"): on
# Pythia's 19 checkpoints the partial first differences always, the detrended control
# where its trend fit interpolates (nearly noise-free series)
UNSUPPORTED = {"partial_first_differences": {d for d in DESIGNS if d[0] == "pythia19"},
               "detrended": {d for d in DESIGNS if d[0] == "pythia19" and d[2] == 0.005}}


@pytest.mark.parametrize("control", ["detrended", "partial_first_differences"])
def test_pooled_tests_hold_their_size_on_every_design(control, null_cells):
    """Per design, the pooled test's rejections among the runs where it is defined (not
    ruled out) lie inside the binomial interval; over the designs the rate lies within
    0.035-0.065; and the designs where no pooled test is defined are exactly those the
    docs call unsupported (there, every run says "uncalibrated for this design")."""
    rejected = defined = 0
    bad = {}
    unsupported = set()
    for design, cell in null_cells.items():
        reported = cell[control].pooled.reported()[0]
        n, k = int(np.isfinite(reported).sum()), int(np.nansum(reported))
        if n < RUNS / 2:
            unsupported.add(design)
            continue
        hi = sps.binom.interval(1 - 0.01 / len(DESIGNS), n, ALPHA)[1]
        if k > hi:
            bad[design] = k / n
        rejected, defined = rejected + k, defined + n
    assert not bad, f"{control}: pooled null rate too high: {bad}"
    assert 0.035 <= rejected / defined <= 0.065, rejected / defined
    assert unsupported == UNSUPPORTED[control]


@pytest.mark.parametrize("control", ["detrended", "partial_first_differences"])
def test_within_model_tests_hold_their_size_on_every_design(control, null_cells):
    """Among the runs the design rule does not rule out, per design inside the binomial
    interval over those runs, and over the designs within 0.035-0.065."""
    total_k = total_n = 0
    bad = {}
    for design, cell in null_cells.items():
        within = cell[control].within
        reported = within.reported()[0]
        keep = np.isfinite(reported) & ~within.flagged[0]
        n, k = int(keep.sum()), int(reported[keep].sum())
        if n == 0:
            continue
        if k > sps.binom.interval(1 - 0.01 / len(DESIGNS), n, ALPHA)[1]:
            bad[design] = k / n
        total_k, total_n = total_k + k, total_n + n
    assert not bad, bad
    assert 0.035 <= total_k / total_n <= 0.065, total_k / total_n


def test_the_design_rule_is_what_holds_the_short_grid(null_cells):
    """Without the rule, the pooled detrended test rejects far too often on Pythia's 19
    checkpoints at low noise under a schedule: the calibration test above can fail."""
    rates = []
    for trend in ("exp", "cosine", "cosine_anneal"):
        draws = null_cells[("pythia19", trend, 0.005)]["detrended"]
        within = draws.within
        unruled = inference.Draws(within.couplings, within.r, within.z_s, within.k,
                                  np.zeros_like(within.flagged))
        rates.append(np.nanmean(unruled.reported()[0]))
        assert within.flagged[0].all()  # every such run is ruled out
    assert np.mean(rates) > 0.12, rates


def test_pooling_checkpoints_is_not_a_test():
    """The pooled tests that treat checkpoints of several models as independent (raw,
    partial on log step and size, first differences) reject most null runs."""
    steps = np.asarray(simulate.PYTHIA_STEPS, dtype=float)
    hits = np.zeros(3)
    runs = 40
    for i in range(runs):
        xs, ys, ss, sizes = [], [], [], []
        for m in range(3):
            x, y = simulate.simulate_run(steps, np.random.default_rng([i, m]), noise=0.05,
                                         ar=0.5, ma=0.3, trend="cosine",
                                         loss_amplitude=1 + 0.2 * m)
            xs.append(x)
            ys.append(y)
            ss.append(np.log1p(steps))
            sizes.append(np.full(steps.size, math.log(1e4 * (m + 1))))
        x, y = np.concatenate(xs), np.concatenate(ys)
        hits[0] += sps.spearmanr(x, y).pvalue < ALPHA
        hits[1] += controls.partial_spearman(x, y, np.concatenate(ss),
                                             np.concatenate(sizes))[1] < ALPHA
        diffs = [np.concatenate([np.diff(a) for a in arr]) for arr in (xs, ys)]
        hits[2] += sps.spearmanr(*diffs).pvalue < ALPHA
    assert np.all(hits / runs > 0.5), hits / runs  # 1.0, 0.825, 1.0 when written


def test_pooled_power_beats_one_model_and_a_coupling_is_found():
    cell = inference.simulate_cell(simulate.LINEAR_STEPS, trend="cosine", noise=0.05, ar=0.5,
                                   ma=0.3, n_models=3, runs=60, couplings=(0.5,), seed=11)
    for control, res in cell.items():
        within = np.nanmean(res.within.reported()[1])
        pooled = np.nanmean(res.pooled.reported()[1])
        assert pooled >= 0.8 and pooled >= within, (control, within, pooled)


def test_pooled_test_is_the_weighted_mean_fisher_z():
    rng = np.random.default_rng(0)
    surr = [np.tanh(rng.normal(0, 0.2, 999)), np.tanh(rng.normal(0, 0.3, 999))]
    res = inference.pooled_test([0.5, 0.3], surr, [51, 19])
    z = (48 * math.atanh(0.5) + 16 * math.atanh(0.3)) / 64
    assert res.r == pytest.approx(math.tanh(z)) and res.n_models == 2
    null = (48 * np.arctanh(surr[0]) + 16 * np.arctanh(surr[1])) / 64
    exceed = int(np.sum(np.abs(null) >= abs(z) - 1e-12))
    assert res.p == pytest.approx(trend_controls.tail_p(z, null, exceed))
    assert res.ci_low < res.r < res.ci_high
    assert inference.pooled_test([0.5], surr[:1], [51]) is None  # one model: no pool


def test_batch_draws_are_the_single_calls():
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    x, y = simulate.simulate_run(steps, np.random.default_rng(4), coupling=0.4, size=6)
    for kind, fn in (("detrended", trend_controls.detrended_correlation),
                     ("pfd", trend_controls.partial_first_differences)):
        got = trend_controls.batch_draws(kind, x, y, steps, seeds=range(6), n_surrogates=99)
        for i in range(6):
            one = fn(x[i], y[i], steps, seed=i, n_surrogates=99)
            exceed = int(np.sum(np.abs(got.r_s[i]) >= abs(got.r[i]) - 1e-12))
            assert got.r[i] == one["r"]
            assert trend_controls.surrogate_p(got.r[i], got.r_s[i], exceed) == one["p"]
            assert list(got.edf[i]) == pytest.approx([one["edf_x"], one["edf_y"]])


# --- intervals that respect autocorrelation --------------------------------------------------

@pytest.mark.parametrize("n,phi", [(19, 0.6), (19, 0.8), (51, 0.6), (51, 0.8)])
def test_surrogate_intervals_cover_under_autocorrelation(n, phi):
    """At least 0.92 over the couplings 0, 0.4 and 0.8 together and at least 0.9 at each;
    the percentile bootstrap over checkpoints covers less, and below 0.93."""
    runs = 200
    covered = {"surrogate": 0, "bootstrap": 0}
    for c_index, coupling in enumerate((0.0, 0.4, 0.8)):
        before = covered["surrogate"]
        rng = np.random.default_rng([n, int(10 * phi), c_index])
        e_y = simulate.ar1(rng, n, phi, runs)
        e_x = coupling * e_y + math.sqrt(1 - coupling ** 2) * simulate.ar1(rng, n, phi, runs)
        truth = 6 / math.pi * math.asin(coupling / 2)
        steps = np.arange(n, dtype=float)
        for i in range(runs):
            lo, hi = trend_controls.raw_surrogate_interval(e_x[i], e_y[i], steps, seed=i,
                                                           n_surrogates=199)
            covered["surrogate"] += lo <= truth <= hi
            blo, bhi = controls.bootstrap_spearman_ci(e_x[i], e_y[i], n_resamples=300, seed=i)
            covered["bootstrap"] += blo <= truth <= bhi
        assert (covered["surrogate"] - before) / runs >= 0.9, (coupling, covered)
    rate = {k: v / (3 * runs) for k, v in covered.items()}
    assert rate["surrogate"] >= 0.92, rate
    # what they replace does not hold at this autocorrelation
    assert rate["bootstrap"] < rate["surrogate"] and rate["bootstrap"] < 0.93, rate


def test_detrended_and_pfd_results_carry_their_intervals():
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    x, y = simulate.simulate_run(steps, np.random.default_rng(1), coupling=0.7, noise=0.05)
    for fn in (trend_controls.detrended_correlation, trend_controls.partial_first_differences):
        res = fn(x, y, steps, seed=0, n_surrogates=199)
        assert -1 < res["ci_low"] < res["r"] < res["ci_high"] < 1
        assert res["ci_low"] > 0  # a coupling of 0.7 on 51 checkpoints is resolved


# --- each test's own design ----------------------------------------------------------------

def test_a_design_is_fitted_and_checked():
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    x, y = simulate.simulate_run(steps, np.random.default_rng(2), noise=0.05, ar=0.5,
                                 trend="cosine")
    design = inference.fit_design(x, y, steps)
    assert design.sd_x == pytest.approx(0.025, rel=0.5)  # noise 5 % of the feature's 0.5
    assert design.sd_y == pytest.approx(0.05, rel=0.5)
    assert 0 <= design.ar_x <= inference.MAX_AR
    draws = inference.simulate_design(design, "detrended", seed=0)
    check = inference.design_check(draws, holm_tests=100)
    assert check.status == inference.CALIBRATED and check.null_rate <= 0.1
    assert check.power["0.9"] >= check.power["0.3"]
    assert 0.3 <= check.mdc <= 0.8  # the bench's range on this grid
    assert check.mdc_holm is None or check.mdc_holm >= check.mdc
    again = inference.design_check(inference.simulate_design(design, "detrended", seed=0),
                                   holm_tests=100)
    assert again == check  # seeded


def test_a_design_with_too_many_null_rejections_is_flagged():
    draws = inference.Draws((0.0, 0.5), np.tanh(np.full((2, 100), 3.0)),
                            np.zeros((2, 100, 99)) + 0.1, 51, np.zeros((2, 100), dtype=bool))
    check = inference.design_check(draws)
    assert check.null_rate == 1.0 and check.status == inference.UNCALIBRATED
    assert "simulated null runs" in check.why
    # the null rate counts only the runs the design rule leaves: ruled-out runs, which the
    # analysis reports as uncalibrated, do not dilute it
    flagged = np.zeros((2, 100), dtype=bool)
    flagged[0, :50] = True
    half = inference.design_check(inference.Draws(
        (0.0, 0.5), np.tanh(np.where(np.arange(100) < 50, 0.0, 3.0))[None].repeat(2, 0),
        np.zeros((2, 100, 99)) + 0.1, 51, flagged))
    assert half.null_runs == 50 and half.null_rate == 1.0
    ruled = inference.design_check(inference.Draws(
        (0.0,), np.zeros((1, 10)), np.ones((1, 10, 9)), 19, np.zeros((1, 10), dtype=bool)),
        rule="a reason")
    assert ruled.status == inference.UNCALIBRATED and ruled.why == "a reason"


def test_the_design_rule_reads_the_grid():
    assert not inference.late_training_resolved(simulate.PYTHIA_STEPS)
    assert inference.late_training_resolved(simulate.LINEAR_STEPS)
    assert inference.late_training_resolved(simulate.PYTHIA_ALL_STEPS)
    assert inference.design_rule("pfd", simulate.PYTHIA_STEPS, [3, 3], 18)
    assert inference.design_rule("detrended", simulate.PYTHIA_STEPS, [5, 6], 19) is None
    assert "interpolates" in inference.design_rule("detrended", simulate.PYTHIA_STEPS,
                                                   [18.5, 6], 19)
    assert inference.design_rule("detrended", simulate.LINEAR_STEPS, [51, 51], 51) is None


def test_minimum_detectable_coupling_interpolates():
    assert inference.minimum_detectable((0, 0.3, 0.5), (0.05, 0.6, 1.0)) == pytest.approx(0.4)
    assert inference.minimum_detectable((0, 0.3), (0.05, 0.5)) is None
    assert inference.minimum_detectable((0, 0.3), (0.9, 1.0)) is None  # rejects everything
    assert inference.minimum_detectable((0, 0.3), (0.05, 0.9)) == pytest.approx(
        0.3 * 0.75 / 0.85)
