"""The experimental stop-or-scale signal: the current phase, the final-loss forecast and its
jackknife uncertainty, checked against hand computations and known curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toposig.analysis import online, phases, prediction


def test_the_jackknife_of_a_mean_is_the_standard_error_of_the_mean():
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0])
    loo = [float(np.delete(x, i).mean()) for i in range(x.size)]
    assert online.jackknife_se(loo) == pytest.approx(x.std(ddof=1) / math.sqrt(x.size))
    assert online.jackknife_se([1.0, None, 2.0]) is None


def test_jackknife_groups_are_single_points_then_ten_interleaved_groups():
    assert [g.tolist() for g in online.jackknife_groups(4)] == [[0], [1], [2], [3]]
    groups = online.jackknife_groups(25)
    assert len(groups) == 10
    assert sorted(np.concatenate(groups).tolist()) == list(range(25))
    assert groups[3].tolist() == [3, 13, 23]


def three_segments(steps: np.ndarray) -> np.ndarray:
    """A continuous piecewise-linear curve in log(1 + step), bends at steps 16 and 300."""
    x = np.log1p(steps)
    b1, b2 = math.log1p(16), math.log1p(300)
    return 5 - 1.0 * x + 0.8 * np.maximum(0, x - b1) + 0.6 * np.maximum(0, x - b2)


def test_the_phase_is_the_segment_of_the_latest_point():
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 100, 200, 300, 500, 700, 1000], dtype=float)
    phase = online.current_phase(steps, three_segments(steps))
    assert phase.phase == 3
    assert phase.breakpoint_steps == pytest.approx([16, 300])
    assert phase.slopes == pytest.approx([-1.0, -0.2, 0.4])
    fit = phases.piecewise_linear_fit(np.log1p(steps[:9]), three_segments(steps[:9]))
    early = online.current_phase(steps[:9], three_segments(steps[:9]))
    assert early.phase == 1 + sum(b < math.log1p(100) for b in fit["breakpoints"])
    assert online.current_phase(steps[:5], three_segments(steps[:5])) is None  # < 6 points


def test_the_loss_only_forecast_recovers_a_power_law_with_a_small_uncertainty():
    steps = np.array([0, 10, 20, 40, 80, 100, 150, 200, 250, 300], dtype=float)
    loss = 2.0 * np.maximum(steps, 1) ** -0.5 + 1.0
    f = online.forecast_final_loss(steps, loss, {}, final_step=1000)
    assert f.loss_only == pytest.approx(2.0 * 1000 ** -0.5 + 1.0, abs=1e-4)
    assert f.loss_only_se < 1e-3
    assert f.feature is None and f.combined is None
    noisy = loss + np.random.default_rng(0).normal(0, 0.02, loss.size)
    g = online.forecast_final_loss(steps, noisy, {}, final_step=1000)
    assert g.loss_only_se > 10 * f.loss_only_se


def test_the_best_feature_is_the_one_with_the_smallest_backtest_error():
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 100, 200, 300, 400], dtype=float)
    loss = 3.0 * np.maximum(steps, 1) ** -0.3 + 0.5
    features = {"coupled": list(2 * loss), "drift": list(np.log1p(steps) ** 2),
                "flat": [1.0] * steps.size}
    f = online.forecast_final_loss(steps, loss, features, final_step=1000)
    assert set(f.backtest_error) == {"loss_only", "coupled", "drift"}  # flat has no coupling
    assert f.feature == min(("coupled", "drift"), key=f.backtest_error.get)
    half = steps <= 200
    by_hand = (prediction.extrapolate(prediction.fit_loss_power_law(steps[half], loss[half]),
                                      400)
               + prediction.topology_only_prediction(steps[half], loss[half],
                                                     np.array(features["coupled"])[half],
                                                     400, 1.0)) / 2
    assert f.backtest_error["coupled"] == pytest.approx(abs(by_hand - loss[-1]))
    assert f.combined is not None and f.combined_se is not None


def test_the_signal_names_its_scalars_and_says_it_is_experimental():
    steps = np.arange(0, 1100, 100, dtype=float)
    loss = 2.0 * np.maximum(steps, 1) ** -0.4 + 1.0
    signal = online.stop_or_scale(steps, loss, {"np_mean": list(loss / 3)}, 2000,
                                  phase_features=["np_mean", "absent"])
    scalars = signal.scalars()
    assert {"phase", "phase_np_mean", "final_loss_loss_only", "final_loss_loss_only_se",
            "final_loss_combined", "final_loss_combined_se"} <= set(scalars)
    assert "experimental" in signal.caveat
    assert online.stop_or_scale(steps, loss, {}, None).forecast is None
    assert signal.to_dict()["forecast"]["final_step"] == 2000
