"""The stop-or-scale signal, online: what the checkpoints measured so far say about a run
still training. Experimental.

Pure functions on the points measured so far (step, loss, features), with the analysis'
own methods:

* **phase**: the three-segment continuous piecewise-linear fit against ``log(1 + step)``
  (:func:`toposig.analysis.phases.piecewise_linear_fit`, as the phase analysis uses) of
  the loss and of each phase feature; the current phase is the segment of the latest
  point (1 = the first, 3 = the last). Needs six points.
* **final-loss forecast** at ``final_step`` (the run's planned last step): ``default``,
  the backtested default of :mod:`toposig.analysis.forecast` with its 95 % interval (the
  one to act on; ``toposig backtest`` scores it on finished runs), and the stop rule's
  decision (:func:`toposig.analysis.forecast.decide`); ``loss_only``, the power law
  ``a·t^(−b) + c`` fitted to the losses after the initial plateau
  (:func:`toposig.analysis.forecast.plateau_end`), and ``combined``, its mean
  with the topology-only prediction (:func:`~toposig.analysis.prediction.
  topology_only_prediction`) of the *best feature*: the one whose combined forecast,
  made from the first half of the steps so far, came closest to the latest loss (a
  backtest on this run's own history). Each forecast's uncertainty is its jackknife
  standard error over the points so far (leave one out, or with more than ten points
  leave out each of ten interleaved groups, so the cost does not grow with the run).

The offline analysis (REPORT.md) found that averaging with almost any feature's
extrapolation lowers the error of a loss-curve forecast, topological or not, and that
almost no feature-loss association survives the controls within a model: the combined
forecast is a smoother of the loss curve, not evidence that topology foresees the loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from toposig.analysis import forecast, phases, prediction

PHASE_MIN_POINTS = 6  # three segments of two points
# the stop rule's decision as a logged scalar
DECISION_CODES = {"continue": 0, "stop: plateaued": 1, "stop: getting worse": 2}
CAVEAT = ("experimental: the combined forecast averages the loss-curve extrapolation with "
          "one feature's; offline, almost any feature (topological or not) lowered the "
          "error the same way, and almost no feature-loss association survived the "
          "controls within a model (REPORT.md)")


@dataclass(frozen=True)
class Phase:
    """The three-segment fit of one series against ``log(1 + step)``.

    Attributes:
        phase: the segment (1, 2 or 3) that holds the latest point.
        breakpoint_steps: the two breakpoints, in steps.
        slopes: each segment's slope, series units per unit of ``log(1 + step)``.
        r2: the fit's coefficient of determination.
    """

    phase: int
    breakpoint_steps: list[float]
    slopes: list[float]
    r2: float


@dataclass(frozen=True)
class FinalLossForecast:
    """The final loss extrapolated to ``final_step`` (nats per token, the losses' unit).

    Attributes:
        loss_only, loss_only_se: the power-law extrapolation and its jackknife s.e.
        feature: the best feature (see the module), or ``None`` when none qualifies.
        combined, combined_se: the mean of ``loss_only`` and the feature's topology-only
            prediction, and its jackknife s.e.
        backtest_error: feature (and ``"loss_only"``) -> |forecast made from the first
            half of the steps so far − the latest loss|.
        default, default_low, default_high: the backtested default forecast
            (:data:`toposig.analysis.forecast.DEFAULT_METHOD`) and its 95 % interval.
        decision, decision_reason: the stop rule (:func:`toposig.analysis.forecast.
            decide`): ``continue``, ``stop: plateaued`` or ``stop: getting worse``.
    """

    final_step: float
    loss_only: float | None
    loss_only_se: float | None
    feature: str | None = None
    combined: float | None = None
    combined_se: float | None = None
    backtest_error: dict[str, float] = field(default_factory=dict)
    default: float | None = None
    default_low: float | None = None
    default_high: float | None = None
    decision: str | None = None
    decision_reason: str | None = None


@dataclass(frozen=True)
class Signal:
    """What the points so far say: the phase of the loss and of each feature, and the
    forecast of the final loss (``None`` without a planned final step or enough
    points)."""

    step: int | float
    n_points: int
    loss_phase: Phase | None
    feature_phases: dict[str, Phase]
    forecast: FinalLossForecast | None
    caveat: str = CAVEAT

    def scalars(self) -> dict[str, float]:
        """The signal as flat scalars for a trainer's logger (names without a prefix)."""
        out: dict[str, float] = {}
        if self.loss_phase is not None:
            out["phase"] = float(self.loss_phase.phase)
        for name, ph in self.feature_phases.items():
            out[f"phase_{name}"] = float(ph.phase)
        f = self.forecast
        if f is not None:
            for key in ("loss_only", "loss_only_se", "combined", "combined_se", "default",
                        "default_low", "default_high"):
                value = getattr(f, key)
                if value is not None and math.isfinite(value):
                    out[f"final_loss_{key}"] = float(value)
            if f.decision is not None:
                out["stop"] = float(DECISION_CODES[f.decision])
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def current_phase(steps: Sequence[float], values: Sequence[float | None]) -> Phase | None:
    """The three-segment fit of ``values`` against ``log(1 + step)`` and the segment of
    the latest point; ``None`` with fewer than :data:`PHASE_MIN_POINTS` finite points, a
    constant series (no phase to tell) or a negative step."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if len(finite) < PHASE_MIN_POINTS or min(finite) == max(finite) or min(steps) < 0:
        return None  # too few points, a constant series, or no log(1 + step)
    x = [math.log1p(s) for s in steps]
    try:
        fit = phases.piecewise_linear_fit(x, values, n_segments=3)
    except ValueError:
        return None
    last = max(xi for xi, v in zip(x, values, strict=True)
               if v is not None and math.isfinite(v))
    phase = 1 + sum(b < last for b in fit["breakpoints"])
    return Phase(phase, phases.breakpoint_steps(fit), fit["slopes"], fit["r2"])


class _Forecaster:
    """Forecasts with the power-law fits cached by the points they are fitted to (the
    jackknife and the backtest refit the same points many times over)."""

    def __init__(self, final_step: float):
        self.final_step = final_step
        self._fits: dict[tuple, float | None] = {}

    def loss_only(self, s: np.ndarray, lo: np.ndarray, at: float | None = None) -> float | None:
        """The power law fitted after the initial plateau
        (:func:`toposig.analysis.forecast.plateau_end`), extrapolated to ``at``."""
        at = self.final_step if at is None else at
        key = (s.tobytes(), lo.tobytes(), at)
        if key not in self._fits:
            start = forecast.plateau_end(s, lo)
            self._fits[key] = prediction.extrapolate(
                prediction.fit_loss_power_law(s[start:], lo[start:]), at)
        return self._fits[key]

    def combined(self, s: np.ndarray, lo: np.ndarray, fe: np.ndarray,
                 at: float | None = None) -> float | None:
        """The mean of ``loss_only`` and the feature's topology-only prediction (all the
        points count as early)."""
        at = self.final_step if at is None else at
        p_loss = self.loss_only(s, lo, at)
        p_topo = prediction.topology_only_prediction(s, lo, fe, at, fraction=1.0)
        return None if p_loss is None or p_topo is None else (p_loss + p_topo) / 2


JACKKNIFE_GROUPS = 10  # at most this many refits per forecast, however many points


def jackknife_groups(n: int, groups: int = JACKKNIFE_GROUPS) -> list[np.ndarray]:
    """The index sets left out in turn: each point alone when ``n <= groups``, else
    ``groups`` interleaved groups (point i in group i mod groups), so that every group
    spans the whole run and the cost stays bounded as points accumulate."""
    g = min(n, groups)
    return [np.arange(k, n, g) for k in range(g)]


def jackknife_se(values: list[float | None]) -> float | None:
    """Delete-a-group jackknife standard error, ``sqrt((g − 1)/g · Σ(θᵢ − θ̄)²)`` over the
    ``g`` leave-a-group-out values that are defined; ``None`` with fewer than three."""
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    g = v.size
    if g < 3:
        return None
    return float(math.sqrt((g - 1) / g * np.sum((v - v.mean()) ** 2)))


def forecast_final_loss(steps: Sequence[float], losses: Sequence[float | None],
                        features: Mapping[str, Sequence[float | None]],
                        final_step: float) -> FinalLossForecast | None:
    """The final-loss forecast of the module docstring.

    Args:
        steps, losses: ``(n,)`` the points so far (losses in nats; ``None`` allowed).
        features: name -> ``(n,)`` values, the candidates for the best feature.
        final_step: the run's planned last step.

    Returns:
        ``None`` when fewer than three points with ``step > 0`` have a loss.
    """
    s, lo = prediction.finite_aligned(steps, losses)
    if np.sum(s > 0) < 3:
        return None
    f = _Forecaster(final_step)
    loo = [f.loss_only(np.delete(s, i), np.delete(lo, i)) for i in jackknife_groups(s.size)]
    backtest = _backtest(f, steps, losses, features)
    candidates = {name: e for name, e in backtest.items() if name != "loss_only"}
    best = min(candidates, key=candidates.get) if candidates else None
    combined = combined_se = None
    if best is not None:
        s_f, lo_f, fe_f = prediction.finite_aligned(steps, losses, features[best])
        combined = f.combined(s_f, lo_f, fe_f)
        combined_se = jackknife_se([
            f.combined(np.delete(s_f, i), np.delete(lo_f, i), np.delete(fe_f, i))
            for i in jackknife_groups(s_f.size)])
    forecasts = forecast.forecast_all(s, lo, final_step)
    default = forecasts[forecast.DEFAULT_METHOD]
    decision = forecast.decide(s, lo, final_step, forecasts=forecasts)
    return FinalLossForecast(float(final_step), f.loss_only(s, lo), jackknife_se(loo), best,
                    combined, combined_se, backtest, default.forecast, default.low,
                    default.high, decision.action, decision.reason)


def _backtest(f: _Forecaster, steps: Sequence[float], losses: Sequence[float | None],
              features: Mapping[str, Sequence[float | None]]) -> dict[str, float]:
    """|forecast of the latest loss from the points in the first half of the steps so
    far − the latest loss|, for the loss curve alone and combined with each feature."""
    s, lo = prediction.finite_aligned(steps, losses)
    if s.size == 0:
        return {}
    t_last, truth = float(s[-1]), float(lo[-1])
    out: dict[str, float] = {}
    half = s <= t_last / 2
    p_loss = f.loss_only(s[half], lo[half], t_last)
    if p_loss is not None:
        out["loss_only"] = abs(p_loss - truth)
    for name, values in features.items():
        s_f, lo_f, fe_f = prediction.finite_aligned(steps, losses, values)
        if s_f.size == 0 or s_f[-1] != t_last:
            continue
        early = s_f <= t_last / 2
        combined = f.combined(s_f[early], lo_f[early], fe_f[early], t_last)
        if combined is not None and math.isfinite(combined):
            out[name] = abs(combined - truth)
    return out


def stop_or_scale(steps: Sequence[float], losses: Sequence[float | None],
                  features: Mapping[str, Sequence[float | None]],
                  final_step: float | None, *,
                  phase_features: Sequence[str] = (),
                  forecast_features: Sequence[str] | None = None) -> Signal:
    """The signal after the latest measurement.

    Args:
        steps: ``(n,)`` the steps measured so far.
        losses: ``(n,)`` the loss at each (nats; ``None`` where unknown).
        features: name -> ``(n,)`` feature values.
        final_step: the run's planned last step (``None``, or a step before the latest
            one: no forecast).
        phase_features: the features whose current phase is reported.
        forecast_features: the candidates for the best feature (default: every one of
            ``features``).
    """
    names = list(features) if forecast_features is None else [
        f for f in forecast_features if f in features]
    feature_phases = {f: ph for f in phase_features if f in features
                      if (ph := current_phase(steps, features[f])) is not None}
    forecast = None
    if final_step is not None and len(steps) and final_step >= max(steps):
        forecast = forecast_final_loss(steps, losses, {f: features[f] for f in names},
                                       final_step)
    last = max(steps) if len(steps) else 0
    return Signal(int(last) if float(last).is_integer() else float(last), len(steps),
                  current_phase(steps, losses), feature_phases, forecast)
