"""Trend controls on simulated runs where the truth is known.

Calibration: on runs whose feature and loss share only a decelerating trend plus AR(1)
noise (``coupling = 0``), each new control must come out significant (p < 0.05) in about
5 % of runs, in every cell (2 grids x 3 noise levels x 2 AR coefficients, N = 300 runs
each). Tolerance: a cell's rejection count must lie inside the two-sided binomial
interval for N draws at 0.05 whose level is 99 % for the 12 cells of a control together
(Bonferroni: 1 - 0.01/12 per cell, i.e. 4..29 of 300, a rate of 0.013..0.097), and the
count pooled over the cells inside the 99 % interval for 12 N draws (0.041..0.059), which
catches a small bias common to all cells. The simulations are seeded, so the outcome is
fixed. Power: with a real coupling the controls must find it. Plain first differences
and the raw Spearman must fail the same null, so the calibration test is not vacuous.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from scipy.interpolate import make_smoothing_spline

from toposig.analysis import controls, simulate, trend_controls

N_SIMS = 300  # runs per calibration cell
N_SURR = 199  # surrogates per p-value (p resolution 0.005)
ALPHA = 0.05
NOISES = (0.005, 0.05, 0.2)  # noise sd / trend amplitude; 0.005 ~ Pythia's ln-perplexity
ARS = (0.3, 0.7)
# The Pythia grid with a power-law trend (its loss is a sigmoid in log step); the linear
# grid with an exponential approach to a plateau (seed B's loss falls most by step 100).
GRIDS = {"pythia19": (simulate.PYTHIA_STEPS, "power"),
         "linear51": (simulate.LINEAR_STEPS, "exp")}
CELLS = [(g, noise, ar) for g in GRIDS for noise in NOISES for ar in ARS]
CONTROLS = {"detrended": trend_controls.detrended_correlation,
            "partial_first_differences": trend_controls.partial_first_differences}


def _runs(grid: str, noise: float, ar: float, coupling: float = 0.0, n: int = N_SIMS):
    steps, trend = GRIDS[grid]
    seed = [int(1000 * noise), int(10 * ar), int(10 * coupling), len(steps)]
    rng = np.random.default_rng(seed)
    feature, loss = simulate.simulate_run(steps, rng, noise=noise, ar=ar, coupling=coupling,
                                          trend=trend, size=n)
    return np.asarray(steps, dtype=float), feature, loss


def _rejections(control, steps, feature, loss) -> int:
    out = 0
    for i in range(feature.shape[0]):
        res = control(feature[i], loss[i], steps, seed=i, n_surrogates=N_SURR)
        assert res["p"] is not None, res["reason"]
        out += res["p"] < ALPHA
    return out


@pytest.fixture(scope="module")
def null_runs():
    return {cell: _runs(*cell) for cell in CELLS}


@pytest.mark.parametrize("name", list(CONTROLS))
def test_new_controls_hold_their_size_under_shared_deceleration(name, null_runs):
    lo, hi = sps.binom.interval(1 - 0.01 / len(CELLS), N_SIMS, ALPHA)
    counts = {cell: _rejections(CONTROLS[name], *runs) for cell, runs in null_runs.items()}
    bad = {cell: k / N_SIMS for cell, k in counts.items() if not lo <= k <= hi}
    assert not bad, f"{name}: rejection rate outside [{lo / N_SIMS}, {hi / N_SIMS}]: {bad}"
    total = N_SIMS * len(CELLS)
    plo, phi = sps.binom.interval(0.99, total, ALPHA)
    assert plo <= sum(counts.values()) <= phi, sum(counts.values()) / total


def test_raw_and_plain_first_differences_fail_the_same_null(null_runs):
    """The null is hard: at low noise the old tests reject almost always."""
    for (grid, noise, ar), (_, feature, loss) in null_runs.items():
        if noise > 0.005:
            continue
        pairs = list(zip(feature, loss, strict=True))
        raw = np.mean([sps.spearmanr(f, lo).pvalue < ALPHA for f, lo in pairs])
        diff = np.mean([controls.first_difference_spearman(f, lo)["spearman_p"] < ALPHA
                        for f, lo in pairs])
        assert raw > 0.9 and diff > 0.5, (grid, ar, raw, diff)


@pytest.mark.parametrize("name", list(CONTROLS))
def test_new_controls_find_a_real_coupling(name):
    """Coupling 0.6 between the noises, noise 5 % of the trend, AR 0.7, 51 checkpoints:
    found (p < 0.05, the coupling's sign) in at least 80 % of runs."""
    steps, feature, loss = _runs("linear51", 0.05, 0.7, coupling=0.6)
    found = 0
    for i in range(N_SIMS):
        res = CONTROLS[name](feature[i], loss[i], steps, seed=i, n_surrogates=N_SURR)
        found += res["p"] < ALPHA and res["r"] > 0
    assert found / N_SIMS >= 0.8


def test_linear_partial_on_log_step_is_not_enough():
    """The literal partial (OLS on the midpoint's log step) leaves the shared trend in."""
    steps, feature, loss = _runs("pythia19", 0.005, 0.3, n=50)
    k = sum(trend_controls.partial_first_differences(
        f, lo, steps, seed=i, n_surrogates=N_SURR, covariate="linear")["p"] < ALPHA
        for i, (f, lo) in enumerate(zip(feature, loss, strict=True)))
    assert k / 50 > 0.5


# --- the trend ---------------------------------------------------------------------------

def test_trend_of_an_exact_power_law_is_recovered():
    for grid in (simulate.PYTHIA_STEPS, simulate.LINEAR_STEPS):
        steps = np.asarray(grid, dtype=float)
        values = 2.0 + 3.0 * (1 + steps / 50.0) ** -0.7
        trend = trend_controls.log_step_trend(steps, values)
        assert np.max(np.abs(trend - values)) < 1e-3 * np.ptp(values)


def test_trend_of_a_line_in_log_step_is_the_line():
    steps = np.asarray(simulate.PYTHIA_STEPS, dtype=float)
    values = 5.0 - 0.3 * np.log1p(steps)
    assert np.allclose(trend_controls.log_step_trend(steps, values), values, atol=1e-9)


def test_residuals_of_trend_plus_white_noise_are_the_noise():
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    rng = np.random.default_rng(7)
    noise = 0.05 * rng.standard_normal(steps.size)
    values = simulate.trend_shape(steps, trend="power") + noise
    res = values - trend_controls.log_step_trend(steps, values)
    assert np.corrcoef(res, noise)[0, 1] > 0.9
    assert 0.8 < res.std() / noise.std() < 1.05


def test_trend_is_a_smoothing_spline_from_scipy():
    """The fitted trend is SciPy's smoothing spline at the chosen λ (basis and penalty
    agree), and with ``smoothing="gcv"`` λ agrees with SciPy's own GCV search."""
    steps = np.asarray(simulate.PYTHIA_STEPS, dtype=float)
    u = np.log1p(steps)
    rng = np.random.default_rng(3)
    values = simulate.trend_shape(steps) + 0.05 * rng.standard_normal(steps.size)
    lam, _, ops = trend_controls._smooth(u, values[:, None])
    ours = values - ops[0] @ values
    assert np.allclose(ours, make_smoothing_spline(u, values, lam=lam[0])(u), atol=1e-8)
    gcv = trend_controls.log_step_trend(steps, values, smoothing="gcv")
    assert np.allclose(gcv, make_smoothing_spline(u, values)(u), atol=1e-3 * np.ptp(values))


def test_trend_ignores_input_order():
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    values = simulate.simulate_run(steps, np.random.default_rng(0))[1]
    perm = np.random.default_rng(1).permutation(steps.size)
    assert np.allclose(trend_controls.log_step_trend(steps[perm], values[perm]),
                       trend_controls.log_step_trend(steps, values)[perm])


# --- the controls' records ---------------------------------------------------------------

def _one_run(coupling=0.0, seed=0):
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    f, lo = simulate.simulate_run(steps, np.random.default_rng(seed), noise=0.05, ar=0.3,
                                  coupling=coupling)
    return steps, f, lo


@pytest.mark.parametrize("name", list(CONTROLS))
def test_records_are_deterministic_for_a_seed(name):
    steps, f, lo = _one_run(coupling=0.3)
    a = CONTROLS[name](f, lo, steps, seed=5, n_surrogates=N_SURR)
    b = CONTROLS[name](f, lo, steps, seed=5, n_surrogates=N_SURR)
    assert a == b
    assert set(a) >= {"r", "p", "p_method", "n", "statistic", "pearson_r", "reason"}
    assert a["reason"] is None and -1 <= a["r"] <= 1 and 0 < a["p"] <= 1
    assert "Ebisuzaki" in a["p_method"] and a["statistic"] == "spearman"
    c = CONTROLS[name](f, lo, steps, seed=6, n_surrogates=N_SURR)
    assert c["r"] == a["r"] and abs(c["p"] - a["p"]) < 0.2


@pytest.mark.parametrize("name", list(CONTROLS))
def test_missing_values_are_dropped_pairwise(name):
    steps, f, lo = _one_run(coupling=0.5)
    fx = f.astype(object)
    lx = lo.astype(object)
    sx = steps.astype(object)
    fx[3], lx[10], sx[20] = None, float("nan"), None
    keep = np.ones(steps.size, dtype=bool)
    keep[[3, 10, 20]] = False
    got = CONTROLS[name](list(fx), list(lx), list(sx), seed=1, n_surrogates=N_SURR)
    want = CONTROLS[name](f[keep], lo[keep], steps[keep], seed=1, n_surrogates=N_SURR)
    assert got == want
    assert got["n"] == (48 if name == "detrended" else 47)


@pytest.mark.parametrize("name", list(CONTROLS))
def test_undefined_cases_say_why(name):
    steps, f, lo = _one_run()
    short = CONTROLS[name](f[:5], lo[:5], steps[:5])
    assert short["r"] is None and short["p"] is None and "fewer than" in short["reason"]
    const = CONTROLS[name](np.ones_like(f), lo, steps)
    assert const["r"] is None and const["reason"] == "x is constant"
    line = CONTROLS[name](f, 2.0 - 0.1 * np.log1p(steps), steps)
    assert line["r"] is None and "y has no variation left" in line["reason"]
    with pytest.raises(ValueError):
        CONTROLS[name](f, lo, np.zeros_like(steps))


def test_a_coupling_is_found_with_its_sign():
    steps, f, lo = _one_run(coupling=-0.8, seed=2)
    for control in CONTROLS.values():
        res = control(f, lo, steps, seed=0, n_surrogates=N_SURR)
        assert res["r"] < -0.4 and res["p"] < 0.01


def test_phase_surrogates_keep_the_periodogram():
    rng = np.random.default_rng(0)
    for n in (18, 19):
        a = rng.standard_normal(n)
        surr = trend_controls.phase_surrogates(a, 50, rng)
        assert surr.shape == (50, n)
        assert np.allclose(surr.mean(axis=1), a.mean())
        want = np.abs(np.fft.rfft(a - a.mean()))
        assert np.allclose(np.abs(np.fft.rfft(surr - a.mean(), axis=1)), want)


def test_simulator_shares_only_the_trend_under_the_null():
    steps = np.asarray(simulate.LINEAR_STEPS, dtype=float)
    g = simulate.trend_shape(steps, trend="exp")
    f, lo = simulate.simulate_run(steps, np.random.default_rng(0), noise=0.1, ar=0.5,
                                  trend="exp", size=4000)
    ef = (f - 1.0 + 0.5 * g) / 0.05  # feature noise in units of its sd
    el = (lo - 3.0 - g) / 0.1
    assert abs(np.mean(ef * el)) < 0.02
    assert math.isclose(np.mean(el * el), 1.0, abs_tol=0.03)
    assert math.isclose(np.mean(el[:, 1:] * el[:, :-1]), 0.5, abs_tol=0.03)
    f, lo = simulate.simulate_run(steps, np.random.default_rng(0), noise=0.1, ar=0.5,
                                  trend="exp", coupling=0.6, size=4000)
    ef, el = (f - 1.0 + 0.5 * g) / 0.05, (lo - 3.0 - g) / 0.1
    assert math.isclose(np.mean(ef * el), 0.6, abs_tol=0.03)


def test_a_strong_coupling_gets_a_p_below_the_surrogate_count_floor():
    """With 999 surrogates a count cannot go below 0.001, which a Holm correction over a
    few hundred tests would make unpassable; the fitted tail resolves smaller p."""
    rng = np.random.default_rng(3)
    steps = np.arange(0, 5001, 100, dtype=float)
    f, loss = simulate.simulate_run(steps, rng, noise=0.05, ar=0.3, coupling=0.95)
    res = trend_controls.detrended_correlation(f, loss, steps, seed=0)
    assert res["p"] < 1e-4 and "Fisher z" in res["p_method"]
    r_s = np.tanh(np.random.default_rng(0).normal(0, 0.2, 999))
    z = np.arctanh(r_s)
    exceed = int(np.sum(np.abs(r_s) >= 0.3))
    assert exceed >= trend_controls.TAIL_MIN  # counted while the count resolves it
    assert trend_controls.surrogate_p(0.3, r_s, exceed) == (1 + exceed) / 1000
    tail = trend_controls.surrogate_p(0.9, r_s, 0)
    assert tail == pytest.approx(2 * sps.norm.sf(np.arctanh(0.9) / np.sqrt(np.mean(z * z))))
