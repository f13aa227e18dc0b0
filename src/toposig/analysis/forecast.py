"""Forecasting a run's final loss from the checkpoints so far, with an interval, and the
stop rule built on it.

Pure functions on NumPy arrays. Losses are in nats per token (for a quality given as
perplexity, its logarithm). The methods, each a :class:`MethodForecast` with a 95 % interval:

* ``latest``: the latest observed loss (the naive forecast: no further change). Its
  interval is ± 1.96 × the curve's noise (below).
* ``power_law``: ``L(t) = a·t^(−b) + c`` fitted only **after the initial plateau**
  (:func:`plateau_end`) and extrapolated to the final step. Its interval is ± 1.96 ×
  sqrt(jackknife s.e.² + noise²).
* ``power_law_with_plateau``: the same law fitted to every point with step > 0, as the
  project's forecasts did before; kept to show the bias the plateau gives it.
* ``shrunk`` (the default): the mean of ``latest`` and ``power_law``, a forecast
  combination that hedges between "no further gain" and "the power law's gain". Its
  interval is the union of the two methods' intervals: a range of plausible outcomes
  under either hypothesis, not a sampling interval; its coverage is what the backtest
  measures (``toposig backtest``), not an assumption.
* ``topology_combined``: the mean of ``power_law`` and the topology-only prediction
  (:func:`toposig.analysis.prediction.topology_only_prediction`) of one feature (chosen
  by the caller, e.g. by a backtest on the run's own history); its interval is the union
  of ``latest``'s and the forecast ± ``power_law``'s half-width.

The **noise** of a curve is the standard deviation of the post-plateau power-law fit's
residuals (``n − 3`` degrees of freedom); a minibatch loss curve is noisy, an evaluation
loss on fixed texts is smooth.

The plateau: a language model's loss first sits near its initial value (warm-up, or the
flat start of a log-spaced schedule), then falls steeply, then decelerates. A power law
in the step only describes the decelerating part, and fitted through the plateau it is
bent upward at the start and flattens too soon. :func:`plateau_end` finds where the
deceleration starts: the end of the steepest fall per unit of ``log(1 + step)`` on the
curve smoothed by a running median of five points (so one noisy minibatch does not pass
for the steepest fall).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.ndimage import median_filter

from toposig.analysis import prediction
from toposig.defaults import STOP_GAIN

Z95 = 1.959963984540054
METHODS: tuple[str, ...] = ("latest", "power_law", "power_law_with_plateau", "shrunk",
                            "topology_combined")
DEFAULT_METHOD = "shrunk"
SMOOTHING_POINTS = 5
MIN_FIT_POINTS = 5  # the power law has three parameters: keep two degrees of freedom


@dataclass(frozen=True)
class MethodForecast:
    """One method's forecast of the loss at ``final_step`` (nats).

    Attributes:
        method: one of :data:`METHODS`.
        forecast: the forecast loss; ``None`` when the method is undefined here.
        low, high: the 95 % interval (see the module for each method's).
        fit_start_step: the first step the power law was fitted from (``None`` when
            no power law was fitted).
    """

    method: str
    forecast: float | None
    low: float | None
    high: float | None
    fit_start_step: float | None = None


def plateau_end(steps: Sequence[float], losses: Sequence[float]) -> int:
    """Index of the first point after the initial plateau and steep fall (see the module).

    Args:
        steps, losses: ``(n,)`` sorted by step, finite.

    Returns:
        The index the power law is fitted from: the end point of the steepest fall per
        unit of ``log(1 + step)`` of the median-smoothed curve, moved back so that at
        least :data:`MIN_FIT_POINTS` points remain; 0 with fewer than three points or a
        curve that never falls.
    """
    s = np.asarray(steps, dtype=np.float64)
    lo = np.asarray(losses, dtype=np.float64)
    if s.size < 3:
        return 0
    smooth = median_filter(lo, size=SMOOTHING_POINTS, mode="nearest") if s.size >= \
        SMOOTHING_POINTS else lo
    dx = np.diff(np.log1p(s))
    rate = np.where(dx > 0, -np.diff(smooth) / np.where(dx > 0, dx, 1.0), -np.inf)
    if not np.any(rate > 0):
        return 0
    return max(0, min(int(np.argmax(rate)) + 1, s.size - MIN_FIT_POINTS))


def noise_sd(steps: np.ndarray, losses: np.ndarray, fit: dict) -> float:
    """Standard deviation of the power-law fit's residuals (``n − 3`` degrees of freedom;
    0 with three points or fewer, or a failed fit)."""
    if not fit.get("ok") or steps.size <= 3:
        return 0.0
    res = losses - prediction.extrapolate(fit, np.maximum(steps, 1e-300))
    return float(math.sqrt(float(res @ res) / (steps.size - 3)))


JACKKNIFE_GROUPS = 40
"""The most refits the jackknife makes: up to this many points it leaves out one point
at a time; beyond, one of this many interleaved groups of points at a time (the
delete-a-group jackknife, the same estimator of the s.e.), so its cost grows linearly
with the curve's length rather than with its square."""


def _jackknife_se(steps: np.ndarray, losses: np.ndarray, at: float) -> float:
    """Jackknife s.e. of the extrapolation (0 when undefined): leave-one-out up to
    :data:`JACKKNIFE_GROUPS` points, delete-a-group beyond."""
    n = steps.size
    if n < 4:
        return 0.0
    groups = min(n, JACKKNIFE_GROUPS)
    member = np.arange(n) % groups
    vals = []
    for g in range(groups):
        keep = member != g
        p = prediction.extrapolate(prediction.fit_loss_power_law(steps[keep], losses[keep]),
                                   at)
        if p is not None and math.isfinite(p):
            vals.append(p)
    if len(vals) < 3:
        return 0.0
    v = np.asarray(vals)
    return float(math.sqrt((v.size - 1) / v.size * float(np.sum((v - v.mean()) ** 2))))


def forecast_all(steps: Sequence[float], losses: Sequence[float | None], final_step: float,
                 feature: Sequence[float | None] | None = None) -> dict[str, MethodForecast]:
    """Every method's forecast of the loss at ``final_step`` from the points given.

    Args:
        steps, losses: ``(n,)`` the checkpoints so far (losses in nats; None/NaN dropped).
        final_step: the step to forecast at (> every step given).
        feature: ``(n,)`` the values of the feature ``topology_combined`` uses, or None.

    Returns:
        method -> :class:`MethodForecast` (``forecast=None`` where a method is undefined: no
        point, or fewer than three points with step > 0 after the plateau).
    """
    s, lo = prediction.finite_aligned(steps, losses)
    out = {m: MethodForecast(m, None, None, None) for m in METHODS}
    if s.size == 0:
        return out
    latest = float(lo[-1])
    start = plateau_end(s, lo)
    ts, tl = s[start:], lo[start:]
    fit = prediction.fit_loss_power_law(ts, tl)
    pos = ts > 0
    noise = noise_sd(ts[pos], tl[pos], fit)
    out["latest"] = MethodForecast("latest", latest, latest - Z95 * noise, latest + Z95 * noise)
    pl = prediction.extrapolate(fit, final_step)
    if pl is not None and math.isfinite(pl):
        se = _jackknife_se(ts, tl, final_step)
        half = Z95 * math.sqrt(se * se + noise * noise)
        start_step = float(ts[0])
        out["power_law"] = MethodForecast("power_law", pl, pl - half, pl + half, start_step)
        shrunk = (latest + pl) / 2
        lat = out["latest"]
        out["shrunk"] = MethodForecast("shrunk", shrunk, min(lat.low, pl - half),
                                 max(lat.high, pl + half), start_step)
        if feature is not None:
            sf, lf, ff = prediction.finite_aligned(steps, losses, feature)
            after = sf >= start_step
            topo = prediction.topology_only_prediction(sf[after], lf[after], ff[after],
                                                       final_step, fraction=1.0)
            if topo is not None and math.isfinite(topo):
                comb = (pl + topo) / 2
                out["topology_combined"] = MethodForecast(
                    "topology_combined", comb, min(lat.low, comb - half),
                    max(lat.high, comb + half), start_step)
    else:
        # no power law after the plateau: the default falls back to the latest loss
        out["shrunk"] = MethodForecast("shrunk", latest, latest - Z95 * noise, latest + Z95 * noise)
    with_plateau = prediction.extrapolate(prediction.fit_loss_power_law(s, lo), final_step)
    if with_plateau is not None and math.isfinite(with_plateau):
        se = _jackknife_se(s[s > 0], lo[s > 0], final_step)
        half = Z95 * math.sqrt(se * se + noise * noise)
        out["power_law_with_plateau"] = MethodForecast("power_law_with_plateau", with_plateau,
                                                 with_plateau - half, with_plateau + half,
                                                 float(s[s > 0][0]))
    return out


NOISE_WINDOW = 10


def point_noise(losses: np.ndarray) -> float:
    """The point-to-point noise of a loss curve: 1.4826 × the median absolute first
    difference of its last :data:`NOISE_WINDOW` points, / √2 (a robust s.d. of one point
    if the points scattered independently around a flat level). A trend left in the
    differences makes it larger, so the rule that uses it errs towards "continue"; where
    the measurement noise is known (a re-measured noise floor, or 0 for a deterministic
    evaluation), pass it to :func:`decide` instead."""
    d = np.diff(np.asarray(losses, dtype=np.float64)[-NOISE_WINDOW:])
    return float(1.4826 * np.median(np.abs(d)) / math.sqrt(2)) if d.size else 0.0


# --- the stop rule -------------------------------------------------------------------



@dataclass(frozen=True)
class Decision:
    """What the rule says after the latest checkpoint.

    Attributes:
        action: ``continue``, ``stop: plateaued`` or ``stop: getting worse``.
        reason: the rule's numbers, in words.
        gain_high: the largest gain to the planned end the interval allows (the best
            loss so far minus the default forecast's ``low``), nats.
    """

    action: str
    reason: str
    gain_high: float | None


def decide(steps: Sequence[float], losses: Sequence[float | None], final_step: float,
           min_gain: float = STOP_GAIN, noise: float | None = None,
           forecasts: dict[str, MethodForecast] | None = None) -> Decision:
    """The stop rule, in plain words:

    * **stop: getting worse** when the latest loss lies above the best loss so far by
      more than 1.96 × √2 × the curve's noise (the difference of two noisy points) and
      by more than ``min_gain`` (the noise: ``noise`` when given, nats, else
      :func:`point_noise` of the curve): training has started to hurt the measured
      quality;
    * **stop: plateaued** when even the optimistic end of the default forecast's 95 %
      interval gains less than ``min_gain`` nats on the best loss so far by ``final_step``;
    * **continue** otherwise.

    A "scale" advice follows from "plateaued" while the loss is still above where the
    user needs it: a larger model, not more steps. ``forecasts``: :func:`forecast_all` of
    the same points, when the caller has it already.
    """
    s, lo = prediction.finite_aligned(steps, losses)
    if s.size < 3:
        return Decision("continue", "fewer than three checkpoints with a loss", None)
    f = forecast_all(s, lo, final_step) if forecasts is None else forecasts
    noise = point_noise(lo) if noise is None else float(noise)
    best = float(np.min(lo))
    latest = float(lo[-1])
    rise = latest - best
    if rise > max(Z95 * math.sqrt(2) * noise, min_gain):
        return Decision("stop: getting worse",
                        f"the latest loss {latest:.4f} is {rise:.4f} nats above the best so far "
                        f"({best:.4f}), more than 1.96 x sqrt(2) x the noise ({noise:.4f}) and "
                        f"{min_gain} nats", None)
    if f["power_law"].forecast is None:  # the default is then the latest loss alone
        return Decision("continue", "no forecast: too few checkpoints after the initial "
                                    "plateau for the power law", None)
    low = f[DEFAULT_METHOD].low
    gain_high = best - low
    if gain_high < min_gain:
        return Decision("stop: plateaued",
                        f"the forecast gain to step {final_step:g} is at most {gain_high:.4f} "
                        f"nats (95 %), under {min_gain}", gain_high)
    return Decision("continue", f"the forecast gain to step {final_step:g} may reach "
                                f"{gain_high:.4f} nats (95 %)", gain_high)
