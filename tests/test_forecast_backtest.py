"""The final-loss forecast fitted after the initial plateau, its intervals, the stop rule,
and the backtest on the seed studies' real training curves (the bar of issue 24 §3)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from toposig.analysis import backtest, forecast, prediction
from toposig.cli.backtest import main as backtest_main
from toposig.cli.import_tables import main as import_main

SEEDS = Path(__file__).resolve().parents[1] / "results" / "seeds"


def plateau_then_power_law(steps: np.ndarray) -> np.ndarray:
    """Flat at 10 nats up to step 50, a fall that steepens to step 200, then
    2 + 30·t^-0.5 (continuous)."""
    law = 2 + 30 * np.maximum(steps, 1) ** -0.5
    knee = 200.0
    fall = 10 - (10 - (2 + 30 * knee ** -0.5)) * np.clip(
        (np.log1p(steps) - math.log1p(50)) / (math.log1p(knee) - math.log1p(50)), 0, 1) ** 3
    return np.where(steps < knee, np.where(steps <= 50, 10.0, fall), law)


STEPS = np.array([0, 1, 2, 4, 8, 16, 32, 50, 64, 100, 128, 200, 256, 400, 512, 800, 1000,
                  1500, 2000, 3000, 4000], dtype=float)


def test_the_plateau_end_is_where_the_deceleration_starts():
    loss = plateau_then_power_law(STEPS)
    start = forecast.plateau_end(STEPS, loss)
    assert STEPS[start] == 200  # the end of the steepest fall per log(1 + step)
    flat = np.full(STEPS.size, 3.0)
    assert forecast.plateau_end(STEPS, flat) == 0
    assert forecast.plateau_end(STEPS[:2], flat[:2]) == 0
    # never leaves fewer than MIN_FIT_POINTS points to fit
    assert forecast.plateau_end(STEPS[:9], loss[:9]) <= 9 - forecast.MIN_FIT_POINTS


def test_fitting_after_the_plateau_removes_the_bias_of_fitting_through_it():
    loss = plateau_then_power_law(STEPS)
    early = STEPS <= 1500
    truth = 2 + 30 * 4000 ** -0.5
    f = forecast.forecast_all(STEPS[early], loss[early], 4000)
    assert f["power_law"].forecast == pytest.approx(truth, abs=1e-4)
    assert f["power_law"].fit_start_step == 200
    assert f["power_law"].low <= truth <= f["power_law"].high
    assert abs(f["power_law_with_plateau"].forecast - truth) > 50 * abs(
        f["power_law"].forecast - truth)
    assert f["latest"].forecast == loss[early][-1]
    assert f["shrunk"].forecast == pytest.approx((loss[early][-1] + f["power_law"].forecast) / 2)
    assert f["shrunk"].low <= min(f["latest"].low, f["power_law"].low) + 1e-12
    assert f["topology_combined"].forecast is None  # no feature given
    with_feature = forecast.forecast_all(STEPS[early], loss[early], 4000, loss[early] * 2)
    assert with_feature["topology_combined"].forecast is not None


def test_undefined_forecasts_say_so():
    f = forecast.forecast_all([], [], 100)
    assert all(v.forecast is None for v in f.values())
    g = forecast.forecast_all([0, 10], [5.0, 4.0], 100)
    assert g["latest"].forecast == 4.0 and g["power_law"].forecast is None
    assert g["shrunk"].forecast == 4.0  # falls back to the latest loss


def test_the_stop_rule():
    steps = np.arange(0, 2100, 100, dtype=float)
    falling = 2 + 3 * np.maximum(steps, 1) ** -0.4
    assert forecast.decide(steps, falling, 100000).action == "continue"
    worse = falling.copy()
    worse[-1] += 0.05
    d = forecast.decide(steps, worse, 100000)
    assert d.action == "stop: getting worse" and "above the best so far" in d.reason
    noisy = falling + np.random.default_rng(0).normal(0, 0.05, steps.size)
    noisy[-1] = noisy[:-1].min() + 0.02  # within the noise: no alarm
    assert forecast.decide(steps, noisy, 100000).action != "stop: getting worse"
    assert forecast.decide(steps, noisy, 100000, noise=0.0).action == "stop: getting worse"
    flat = 2 + 1e-4 * np.maximum(steps, 1) ** -0.4
    d = forecast.decide(steps, flat, 2200)
    assert d.action == "stop: plateaued" and d.gain_high < forecast.STOP_GAIN
    assert forecast.decide(steps[:2], falling[:2], 3000).action == "continue"


def test_the_point_noise_of_a_minibatch_curve_is_its_spread():
    rng = np.random.default_rng(1)
    flat = 2 + rng.normal(0, 0.03, 400)
    est = [forecast.point_noise(flat[i:i + forecast.NOISE_WINDOW]) for i in range(0, 400, 10)]
    assert np.median(est) == pytest.approx(0.03, rel=0.25)


def test_the_backtest_scores_every_method_and_the_rule():
    loss = plateau_then_power_law(STEPS)
    series = {"run": backtest.Series(STEPS, loss, {"f": list(loss * 3 + 1)})}
    result = backtest.backtest(series, (0.2, 0.5))
    assert {r["method"] for r in result["rows"]} == set(forecast.METHODS)
    assert all(r["final"] == loss[-1] for r in result["rows"])
    by = {(r["fraction"], r["method"]): r for r in result["rows"]}
    assert by[(0.5, "power_law")]["forecast"] == pytest.approx(loss[-1], abs=1e-3)
    assert by[(0.5, "topology_combined")]["feature"] == "f"
    s = result["summary"]["power_law"]
    assert s["n"] == 2 and s["mae"] == pytest.approx(np.mean(
        [abs(by[(f, "power_law")]["forecast"] - loss[-1]) for f in (0.2, 0.5)]))
    assert result["decision_rates"]["n"] == len(backtest.DECISION_FRACTIONS)


def test_the_default_forecast_beats_the_latest_loss_on_the_seed_studies_runs(
        seed_measurements):
    """Issue 24 §3: over seed A's 3 Pythia curves and seed B's 5 curves at 20, 30 and 50 %
    of training, the default forecast's MAE is no worse than the latest observed loss's,
    and its 95 % intervals hold the final loss in at least 75 % of cases. Read from the
    committed backtest, which tests/test_seed_studies.py regenerates byte for byte."""
    result = json.loads((SEEDS / "data" / "backtest.json").read_text())
    assert {"default_method", "rows", "summary"} <= set(result)
    assert set(result["rows"][0]) >= {"model", "fraction", "method", "forecast", "low",
                                      "high", "final"}
    assert {r["model"] for r in result["rows"]} == {
        "pythia-70m", "pythia-160m", "pythia-410m", "tiny-3k", "small-7k", "med-21k",
        "large-46k", "xl-97k"}
    summary = result["summary"]
    default = summary[result["default_method"]]
    assert default["n"] == summary["latest"]["n"] == 24
    assert default["mae"] <= summary["latest"]["mae"]
    assert default["coverage"] >= 0.75
    assert summary["power_law"]["mae"] < summary["power_law_with_plateau"]["mae"]
    # seed A's quality is perplexity: its loss is ln perplexity
    pythia = [r for r in result["rows"] if r["model"] == "pythia-70m"]
    src = json.loads((seed_measurements / "seed-a-pythia" / "pythia-70m_results.json")
                     .read_text())
    assert pythia[0]["final"] == pytest.approx(math.log(src[-1]["perplexity"]), rel=1e-5)


def test_the_backtest_command_prints_its_table(tmp_path, capsys):
    csv = tmp_path / "t.csv"
    steps = STEPS.astype(int)
    loss = plateau_then_power_law(STEPS)
    csv.write_text("model,step,loss\n" + "".join(f"r,{s},{float(v)!r}\n" for s, v in
                                                   zip(steps, loss, strict=True)))
    assert import_main([str(csv), "--out", str(tmp_path / "f")]) == 0
    out = tmp_path / "b.json"
    assert backtest_main([str(tmp_path / "f"), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "<- default" in printed and "stop rule" in printed
    assert json.loads(out.read_text())["default_method"] == forecast.DEFAULT_METHOD


def test_backtest_refuses_bad_input(tmp_path, capsys):
    assert backtest_main([str(tmp_path / "nothing"), "--json", str(tmp_path / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert backtest_main([str(tmp_path), "--json", str(tmp_path / "x.json"),
                          "--fractions", "0.5,2"]) == 2
    assert "--fractions" in capsys.readouterr().err
    assert prediction.finite_aligned([], [])[0].size == 0


def test_no_forecast_is_no_reason_to_stop():
    d = forecast.decide([0, 1, 2], [5.0, 4.0, 3.0], 1000)
    assert d.action == "continue" and "no forecast" in d.reason
    steps = np.arange(0, 1100, 100, dtype=float)
    loss = 2 + 3 * np.maximum(steps, 1) ** -0.3
    rows = backtest.backtest_decisions("r", backtest.Series(steps, loss, {}), (0.2,))
    assert rows[0].action == "continue"  # three points at 20 %: no power law yet


def test_backtest_refuses_a_folder_twice_and_bad_options(tmp_path, capsys):
    csv = tmp_path / "t.csv"
    loss = plateau_then_power_law(STEPS)
    csv.write_text("model,step,loss\n" + "".join(f"r,{int(s)},{float(v)!r}\n" for s, v in
                                                 zip(STEPS, loss, strict=True)))
    for name in ("x/res", "y/res"):
        assert import_main([str(csv), "--out", str(tmp_path / name)]) == 0
    out = tmp_path / "b.json"
    assert backtest_main([str(tmp_path / "x/res"), str(tmp_path / "y/res"),
                          "--out", str(out)]) == 0
    assert "2 run(s)" in capsys.readouterr().out
    assert {r["model"] for r in json.loads(out.read_text())["rows"]} == {
        f"{tmp_path / 'x/res'}/r", f"{tmp_path / 'y/res'}/r"}
    for argv, message in (([str(tmp_path / "x/res")] * 2, "given twice"),
                          ([str(tmp_path / "x/res"), "--fractions", "0.2,0.2"], "distinct"),
                          ([str(tmp_path / "x/res"), "--min-gain", "nan"], "--min-gain"),
                          ([str(tmp_path / "x/res"), "--noise", "-1"], "--noise")):
        assert backtest_main([*argv, "--json", str(out)]) == 2
        assert message in capsys.readouterr().err


def test_the_jackknife_refits_at_most_40_times_and_keeps_its_estimate(monkeypatch):
    """Issue 36, row 16: the leave-one-out jackknife refit the power law once per point,
    so a backtest grew with the square of the curve's length (5,000 points: 294 s).
    Up to 40 points it is still leave-one-out (the same numbers); beyond, 40 interleaved
    groups, whose s.e. stays within a few per cent of leave-one-out's."""
    rng = np.random.default_rng(1)
    fits = []
    real = prediction.fit_loss_power_law

    def counted(s, lo):
        fits.append(s.size)
        return real(s, lo)

    def leave_one_out(s, lo, at):
        vals = [prediction.extrapolate(real(np.delete(s, i), np.delete(lo, i)), at)
                for i in range(s.size)]
        v = np.asarray([x for x in vals if x is not None and math.isfinite(x)])
        return math.sqrt((v.size - 1) / v.size * float(np.sum((v - v.mean()) ** 2)))

    monkeypatch.setattr(prediction, "fit_loss_power_law", counted)
    for n in (30, 40, 57, 240):  # 57: groups of unequal size
        s = np.linspace(10, 20_000, n)
        lo = 2 + 3 / (1 + s / 100) ** 0.5 + rng.normal(0, 0.01, n)
        fits.clear()
        se = forecast._jackknife_se(s, lo, 40_000.0)
        assert len(fits) == min(n, forecast.JACKKNIFE_GROUPS)
        exact = leave_one_out(s, lo, 40_000.0)
        if n <= forecast.JACKKNIFE_GROUPS:
            assert se == exact
        else:
            assert se == pytest.approx(exact, rel=0.06) and se != exact
