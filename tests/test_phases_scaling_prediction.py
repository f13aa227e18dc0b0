"""Training phases, size scaling and early prediction of the final loss."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from toposig.analysis import phases, prediction, scaling

# ---------------------------------------------------------------------------- phases


def _three_segments(x: np.ndarray, b1: float, b2: float) -> np.ndarray:
    """Continuous: slope 2 up to b1, then -1 up to b2, then 0.5; value 1 at x = 0."""
    return 1 + 2 * x - 3 * np.maximum(0, x - b1) + 1.5 * np.maximum(0, x - b2)


def test_piecewise_linear_fit_recovers_breakpoints_and_slopes():
    x = np.linspace(0, 12, 61)  # grid spacing 0.2
    b1, b2 = x[18], x[41]
    rng = np.random.default_rng(0)
    y = _three_segments(x, b1, b2) + rng.normal(scale=0.01, size=x.size)
    fit = phases.piecewise_linear_fit(x, y)
    assert fit["n"] == 61
    assert abs(fit["breakpoints"][0] - b1) <= 0.2 + 1e-9
    assert abs(fit["breakpoints"][1] - b2) <= 0.2 + 1e-9
    assert fit["slopes"] == pytest.approx([2.0, -1.0, 0.5], abs=0.02)
    assert fit["intercept"] == pytest.approx(1.0, abs=0.02)
    assert fit["r2"] > 0.999
    steps = phases.breakpoint_steps(fit)
    assert steps == pytest.approx([math.expm1(b) for b in fit["breakpoints"]])


def test_piecewise_linear_fit_exact_drops_missing_and_rejects_too_few():
    x = np.linspace(0, 6, 31)
    y = list(_three_segments(x, x[10], x[20]))
    y[3], y[25] = None, float("nan")
    fit = phases.piecewise_linear_fit(x, y)
    assert fit["n"] == 29
    assert fit["breakpoints"] == pytest.approx([x[10], x[20]])
    assert fit["slopes"] == pytest.approx([2.0, -1.0, 0.5])
    assert fit["sse"] == pytest.approx(0.0, abs=1e-18)
    with pytest.raises(ValueError, match="need at least 6"):
        phases.piecewise_linear_fit([0, 1, 2, 3, 4], [0, 1, 0, 1, 0])
    with pytest.raises(ValueError, match="need at least 6"):
        phases.piecewise_linear_fit(range(7), [1, None, 2, None, 3, 4, 5])


def test_rate_of_change_phases():
    steps = [0, 1000, 2000, 4000, 8000, 16000, 20000]
    values = [1.0, 1.5, 4.5, 5.0, 5.2, 5.25, 5.26]
    # changes: 0.5, 3.0 (peak, 1000 -> 2000), 0.5, 0.2 (< 0.1 * 3 = 0.3: diminishing), ...
    out = phases.rate_of_change_phases(steps[::-1], values[::-1])  # order does not matter
    assert out["peak_step"] == 2000
    assert out["peak_change"] == pytest.approx(3.0)
    assert out["peak_fraction"] == pytest.approx(0.1)
    assert out["diminishing_step"] == 8000
    assert out["diminishing_fraction"] == pytest.approx(0.4)
    assert out["threshold"] == 0.1
    assert len(out["changes"]) == 6
    assert out["changes"][1] == {"step_from": 1000.0, "step_to": 2000.0,
                                 "change": pytest.approx(3.0)}
    strict = phases.rate_of_change_phases(steps, values, threshold=0.001)
    assert strict["diminishing_step"] is None and strict["diminishing_fraction"] is None
    empty = phases.rate_of_change_phases([5], [1.0])
    assert empty["peak_step"] is None and empty["changes"] == []


# ---------------------------------------------------------------------------- scaling

SIZES = [14e6, 70e6, 160e6, 410e6, 1.0e9]


def test_power_law_fit_recovers_exponent():
    n = np.array(SIZES)
    fit = scaling.power_law_fit(n, 3 * n**0.2)
    assert fit["model"] == "a*N^b" and fit["n"] == 5
    assert fit["b"] == pytest.approx(0.2, abs=1e-6)
    assert fit["a"] == pytest.approx(3.0, rel=1e-6)
    assert fit["c"] == 0.0
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["spearman_r"] == pytest.approx(1.0)
    assert fit["spearman_p"] == pytest.approx(2 / math.factorial(5))  # exact, not t-approx


def test_power_law_fit_with_offset():
    n = np.array(SIZES)
    y = 3 * n**0.2 + 7.0
    plain = scaling.power_law_fit(n, y)
    assert plain["r2"] < 1.0 - 1e-9
    fit = scaling.power_law_fit(n, y, with_offset=True)
    assert fit["model"] == "a*N^b+c"
    assert fit["b"] == pytest.approx(0.2, abs=1e-6)
    assert fit["a"] == pytest.approx(3.0, rel=1e-5)
    assert fit["c"] == pytest.approx(7.0, abs=1e-4)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)


def test_power_law_fit_undefined_and_exact_spearman_p():
    from toposig.analysis.correlations import spearman_exact_p

    few = scaling.power_law_fit([1e6, 1e7], [1.0, 2.0])
    assert few["b"] is None and few["a"] is None and few["r2"] is None and "reason" in few
    neg = scaling.power_law_fit(SIZES[:3], [1.0, -2.0, 3.0])
    assert neg["b"] is None and "non-positive" in neg["reason"]
    y = [2.0, 1.5, 3.0, 2.5, 4.0]
    fit = scaling.power_law_fit(SIZES, y)
    assert fit["spearman_p"] == pytest.approx(spearman_exact_p(np.array(SIZES), np.array(y)))
    assert fit["spearman_r"] == pytest.approx(0.8)
    assert fit["spearman_p"] == pytest.approx(0.1333333, abs=1e-6)  # 16 of 120 orderings


def test_scaling_table():
    n_params = {"s": 14e6, "m": 160e6, "l": 1e9, "x": 2e9}
    final = {m: {"loss": 10 * n**-0.1, "h0_total": 0.5 * n**0.3} for m, n in n_params.items()
             if m != "x"}
    table = scaling.scaling_table(final, n_params, ["loss", "h0_total", "missing"])
    assert table["loss"]["b"] == pytest.approx(-0.1, abs=1e-9)
    assert table["h0_total"]["b"] == pytest.approx(0.3, abs=1e-9)
    assert table["loss"]["models"] == ["s", "m", "l"]
    assert table["missing"]["b"] is None and table["missing"]["n"] == 0


# ---------------------------------------------------------------------------- prediction

STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + list(range(1000, 143001, 1000))


def test_loss_power_law_extrapolates_from_early_checkpoints():
    t = np.array(STEPS, dtype=float)
    loss = np.where(t > 0, 2 * np.maximum(t, 1) ** -0.5 + 1.5, 10.8)
    fit = prediction.fit_loss_power_law(t[t <= 0.3 * t[-1]], loss[t <= 0.3 * t[-1]])
    assert fit["ok"]
    assert fit["b"] == pytest.approx(0.5, abs=1e-4)
    truth = 2 * t[-1] ** -0.5 + 1.5
    assert prediction.extrapolate(fit, t[-1]) == pytest.approx(truth, abs=1e-3)
    pred = prediction.loss_only_prediction(t, loss, t[-1], 0.3)
    assert pred == pytest.approx(truth, abs=1e-3)
    bad = prediction.fit_loss_power_law([0, 1, 2], [5.0, 4.0, 3.0])
    assert not bad["ok"] and bad["a"] is None
    assert prediction.extrapolate(bad, 100) is None


def test_topology_only_and_combined():
    t = np.array(STEPS, dtype=float)
    x = np.log1p(t)
    feature = 0.1 + 0.05 * x           # exactly linear in log-step
    loss = 9.0 - 0.5 * x               # dL = -10 dF
    pred = prediction.topology_only_prediction(t, loss, feature, t[-1], 0.2)
    assert pred == pytest.approx(9.0 - 0.5 * x[-1])
    # two early checkpoints (steps 0 and 1 <= 0.00001 * 143000): undefined
    assert prediction.topology_only_prediction(t, loss, feature, t[-1], 1e-5) is None
    assert prediction.combined_prediction(1.0, 3.0) == 2.0
    assert prediction.combined_prediction(None, 3.0) == 3.0
    assert prediction.combined_prediction(1.0, None) == 1.0
    assert prediction.combined_prediction(None, None) is None


def _synthetic_series(n_models: int = 4) -> dict:
    rng = np.random.default_rng(1)
    t = np.array(STEPS, dtype=float)
    out = {}
    for i in range(n_models):
        a, b, c = 3.0 + i, 0.3 + 0.05 * i, 3.5 - 0.4 * i
        loss = a * np.maximum(t, 1) ** -b + c + rng.normal(scale=0.005, size=t.size)
        loss[0] = 10.8
        feat = 0.2 + 0.03 * (i + 1) * np.log1p(t) + rng.normal(scale=0.002, size=t.size)
        out[f"model{i}"] = {"steps": list(t), "loss": list(loss),
                            "features": {"np_mean": list(feat)}}
    return out


def test_prediction_table_and_ridge_lomo():
    series = _synthetic_series()
    table = prediction.prediction_table(series, fractions=(0.2, 0.5))
    json.dumps(table)
    assert set(table["fractions"]) == {"0.2", "0.5"}
    # four models (three to train on): too few for the ridge, which says so
    assert "needs >= 6 models" in table["ridge_reason"] and "found 4" in table["ridge_reason"]
    for block in table["fractions"].values():
        assert set(block["per_model"]) == set(series)
        for method in prediction.METHODS:
            if method == "ridge":
                assert block["mae"][method] is None and block["n_models"][method] == 0
                assert block["improvement_over_loss_only"][method] is None
                assert block["ridge_alpha"] == {}
                continue
            assert isinstance(block["mae"][method], float)
            assert block["n_models"][method] == 4
        assert block["improvement_over_loss_only"]["loss_only"] == 0.0
        row = block["per_model"]["model0"]["loss_only"]
        assert row["abs_error"] == pytest.approx(
            abs(row["prediction"] - table["true_final_loss"]["model0"]))
    assert table["fractions"]["0.5"]["mae"]["loss_only"] < 0.05
    assert prediction.ridge_lomo({"a": np.ones(3), "b": np.zeros(3)}, {"a": 1.0, "b": 2.0}) == {}
    feats = {f"m{i}": np.array([i, i**2, np.nan if i == 1 else 1.0]) for i in range(4)}
    assert prediction.ridge_lomo(feats, {f"m{i}": float(i) for i in range(4)}) == {}
    ridge = prediction.ridge_lomo(feats, {f"m{i}": float(i) for i in range(4)}, min_train=3)
    assert set(ridge) == set(feats)
    assert all(math.isfinite(v) for v in ridge.values())


def test_ridge_with_enough_models_cross_validates_its_penalty():
    series = _synthetic_series(7)
    table = prediction.prediction_table(series, fractions=(0.3,))
    assert table["ridge_reason"] is None
    assert table["ridge_features"] == ["early_loss", "feature_early", "feature_slope_log_step"]
    block = table["fractions"]["0.3"]
    assert block["n_models"]["ridge"] == 7
    assert set(block["ridge_alpha"]) == set(series)
    assert all(a in prediction.RIDGE_ALPHAS for a in block["ridge_alpha"].values())
    # the final loss is close to linear in the early loss here: the ridge learns it
    assert block["mae"]["ridge"] < 0.2
    # a model missing the feature is imputed, not dropped
    feats = {m: np.array([float(i), np.nan, 0.1 * i]) for i, m in enumerate("abcdefg")}
    out = prediction.ridge_lomo(feats, {m: 2.0 + 0.5 * i for i, m in enumerate("abcdefg")})
    assert set(out) == set(feats) and all(math.isfinite(v) for v in out.values())
    assert out["d"] == pytest.approx(3.5, abs=0.3)


# ------------------------------------------------------- the power law, its stability


def _perturbed(x: np.ndarray, rel: float, seed: int) -> np.ndarray:
    return x * (1 + rel * np.random.default_rng(seed).uniform(-1, 1, x.size))


@pytest.mark.parametrize("fraction", [0.2, 0.5, 1.0])
def test_power_law_fit_is_a_smooth_function_of_the_losses(fraction):
    """Issue 24 §4: a 1e-12 relative change of the losses moves the fit by about its own
    condition number times 1e-12 (the same derivative as a 1e-8 change gives), not by an
    optimiser's stopping point."""
    series = _synthetic_series()
    for d in series.values():
        t, y = np.array(d["steps"]), np.array(d["loss"])
        early = t <= fraction * t[-1]
        t, y = t[early], y[early]
        base = prediction.fit_loss_power_law(t, y)
        assert base["ok"] and base["refined"] and base["reason"] is None
        for rel in (1e-12, 1e-8):
            moved = prediction.fit_loss_power_law(t, _perturbed(y, rel, 3))
            change = {k: abs(moved[k] - base[k]) / abs(base[k]) / rel for k in "abc"}
            if rel == 1e-12:
                small = change
            else:  # linear response: the 1e-12 change is the first-order one
                for k in "abc":
                    assert small[k] == pytest.approx(change[k], rel=0.05, abs=1.0), k
        assert max(small.values()) < 1e3  # parameters within 1e-9 relative
        at = t[-1] * 5
        p0 = prediction.extrapolate(base, at)
        p1 = prediction.extrapolate(prediction.fit_loss_power_law(t, _perturbed(y, 1e-12, 4)),
                                    at)
        assert abs(p1 - p0) / p0 < 1e-10


def _sse(fit: dict, t: np.ndarray, y: np.ndarray) -> float:
    pos = t > 0
    return float(np.sum((prediction.extrapolate(fit, t[pos]) - y[pos]) ** 2))


def test_power_law_fit_is_the_least_squares_optimum():
    """No point of a fine grid over b (with (a, c) solved exactly for each) and no nearby
    nonlinear least-squares solution does better than the fit."""
    from scipy import optimize

    series = _synthetic_series()
    for d in series.values():
        t, y = np.array(d["steps"]), np.array(d["loss"])
        for fraction in (0.2, 0.5):
            early = (t <= fraction * t[-1]) & (t > 0)
            te, ye = t[early], y[early]
            fit = prediction.fit_loss_power_law(te, ye)
            best = _sse(fit, te, ye)
            u = te / te.max()
            grid = np.geomspace(0.01, 2.0, 2001)
            _, _, sse = prediction._profile(u, ye, float(ye.min()), grid)
            assert best <= sse.min() * (1 + 1e-12)
            a_s = fit["a"] * te.max() ** -fit["b"]
            popt, _ = optimize.curve_fit(lambda x, a, b, c: a * x**-b + c, u, ye,
                                         p0=(a_s, fit["b"], fit["c"]),
                                         bounds=((0, 1e-6, 0), (np.inf, 5, ye.min())))
            other = float(np.sum((popt[0] * u ** -popt[1] + popt[2] - ye) ** 2))
            assert best <= other * (1 + 1e-9)


def test_power_law_fit_on_its_bounds():
    t = np.arange(1, 21, dtype=float) * 100
    # rising losses: b on its lower bound, a nearly constant curve at their mean
    y = 2 + 1e-3 * t / t[-1]
    rising = prediction.fit_loss_power_law(t, y)
    assert rising["ok"] and rising["b"] == 1e-6 and rising["c"] == y.min()
    assert rising["a"] * t[-1] ** -1e-6 + rising["c"] == pytest.approx(y.mean(), rel=1e-7)
    # constant losses: a = 0, c the loss
    const = prediction.fit_loss_power_law(t, np.full(t.size, 3.0))
    assert const["a"] == 0.0 and const["c"] == 3.0 and const["b"] == 1e-6
    # a pure power law with no floor: c on 0, exact a and b
    pure = prediction.fit_loss_power_law(t, 50 * t**-0.7)
    # c on its bound 0, up to the optimiser's last rounding (BLAS builds differ: 2e-15 on some)
    assert pure["c"] == pytest.approx(0.0, abs=1e-12) and pure["b"] == pytest.approx(0.7, rel=1e-12)
    assert pure["a"] == pytest.approx(50, rel=1e-12)
    # steeper than the bound b = 5 allows: b on its bound, (a, c) the best for it
    steep = prediction.fit_loss_power_law(t, 2 + 1e6 * (t / 100) ** -8.0)
    assert steep["ok"] and steep["b"] == 5.0 and steep["refined"]
    assert 0 <= steep["c"] <= 2 + 1e6 * 20.0 ** -8.0


def test_ridge_lomo_equals_a_hand_written_leave_one_model_out():
    """LeaveOneGroupOut gives the fits the earlier hand-written split gave, model by model
    and in the study's order (not sklearn's sorted one)."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(9)
    models = ["zeta", "alpha", "mid", "beta", "omega", "gamma", "delta"]
    feats = {m: rng.standard_normal(4) for m in models}
    feats["mid"][1] = np.nan
    final = {m: 2.0 + 0.3 * float(feats[m][0]) + 0.01 * i for i, m in enumerate(models)}
    x = np.vstack([feats[m] for m in models])
    y = np.array([final[m] for m in models])
    want = {}
    for i, m in enumerate(models):
        train = np.arange(len(models)) != i
        pipe = make_pipeline(SimpleImputer(strategy="mean", keep_empty_features=True),
                             StandardScaler(), RidgeCV(alphas=prediction.RIDGE_ALPHAS))
        want[m] = float(pipe.fit(x[train], y[train]).predict(x[i:i + 1])[0])
    got = prediction.ridge_lomo(feats, final)
    assert list(got) == models
    assert got == want
