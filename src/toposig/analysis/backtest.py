"""Backtesting the final-loss forecasts on finished runs: from the checkpoints up to a
fraction of each run's last step, forecast its final loss with every method of
:mod:`toposig.analysis.forecast`, and score each method by its absolute error and by
whether its 95 % interval holds the final loss. Also scores the stop rule
(:func:`toposig.analysis.forecast.decide`) against what the run then did.

Pure functions: series in, rows and summaries out. Losses in nats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from toposig.analysis import forecast, prediction

FRACTIONS: tuple[float, ...] = (0.2, 0.3, 0.5)
DECISION_FRACTIONS: tuple[float, ...] = (0.2, 0.3, 0.5, 0.75)


@dataclass(frozen=True)
class Series:
    """One finished run: ``steps``, ``loss`` (nats) and feature values per checkpoint
    (``None`` allowed), aligned."""

    steps: Sequence[float]
    loss: Sequence[float | None]
    features: Mapping[str, Sequence[float | None]]


@dataclass(frozen=True)
class Row:
    """One forecast: ``model``, the ``fraction`` of the last step the checkpoints reach,
    the ``method``, its ``forecast`` and 95 % interval ``low``/``high`` and the
    ``final`` loss (nats); ``feature`` is the feature ``topology_combined`` used."""

    model: str
    fraction: float
    method: str
    forecast: float | None
    low: float | None
    high: float | None
    final: float
    feature: str | None = None


def choose_feature(steps: Sequence[float], losses: Sequence[float | None],
                   features: Mapping[str, Sequence[float | None]]) -> str | None:
    """The feature whose ``topology_combined`` forecast, made from the checkpoints in the
    first half of the steps so far, lands closest to the latest loss (a backtest on the
    run's own history; nothing after the cutoff is seen). ``None`` when no feature gives
    a forecast."""
    s, lo = prediction.finite_aligned(steps, losses)
    if s.size == 0:
        return None
    t_last, truth = float(s[-1]), float(lo[-1])
    best, best_err = None, math.inf
    for name in sorted(features):
        s_f, lo_f, fe_f = prediction.finite_aligned(steps, losses, features[name])
        early = s_f <= t_last / 2
        f = forecast.forecast_all(s_f[early], lo_f[early], t_last, fe_f[early])
        value = f["topology_combined"].forecast
        if value is not None and abs(value - truth) < best_err:
            best, best_err = name, abs(value - truth)
    return best


def backtest_series(model: str, series: Series, fractions: Sequence[float] = FRACTIONS,
                    candidates: Sequence[str] | None = None) -> list[Row]:
    """Every method's forecast for one run at each fraction (see the module).

    ``candidates``: the features ``topology_combined`` may choose from (default: all).
    """
    s, lo = prediction.finite_aligned(series.steps, series.loss)
    if s.size < 2:
        return []
    final_step, final = float(s[-1]), float(lo[-1])
    names = [n for n in (candidates if candidates is not None else series.features)
             if n in series.features]
    rows = []
    for fraction in fractions:
        keep = np.asarray(series.steps, dtype=np.float64) <= fraction * final_step
        steps = [v for v, k in zip(series.steps, keep, strict=True) if k]
        losses = [v for v, k in zip(series.loss, keep, strict=True) if k]
        feats = {n: [v for v, k in zip(series.features[n], keep, strict=True) if k]
                 for n in names}
        chosen = choose_feature(steps, losses, feats)
        fs = forecast.forecast_all(steps, losses, final_step,
                                   feats[chosen] if chosen is not None else None)
        for method, f in fs.items():
            rows.append(Row(model, float(fraction), method, f.forecast, f.low, f.high, final,
                            chosen if method == "topology_combined" else None))
    return rows


def summarise(rows: Sequence[Row]) -> dict[str, dict]:
    """Per method: ``n`` forecasts made, ``mae`` (nats), ``coverage`` (share of 95 %
    intervals holding the final loss), ``mean_width`` (nats) and ``above_final`` (share
    of forecasts above the final loss); ``n_missing`` where the method was undefined."""
    out: dict[str, dict] = {}
    for method in forecast.METHODS:
        mine = [r for r in rows if r.method == method]
        done = [r for r in mine if r.forecast is not None]
        if not done:
            out[method] = {"n": 0, "n_missing": len(mine), "mae": None, "coverage": None,
                           "mean_width": None, "above_final": None}
            continue
        err = np.array([r.forecast - r.final for r in done])
        out[method] = {
            "n": len(done), "n_missing": len(mine) - len(done),
            "mae": float(np.mean(np.abs(err))),
            "coverage": float(np.mean([r.low <= r.final <= r.high for r in done])),
            "mean_width": float(np.mean([r.high - r.low for r in done])),
            "above_final": float(np.mean(err > 0)),
        }
    return out


@dataclass(frozen=True)
class DecisionRow:
    """The stop rule at one cutoff of a finished run, and whether the run then bore it
    out: ``actual_gain`` = the best loss up to the cutoff − the final loss (nats);
    ``correct``: a stop where the gain was under ``min_gain``, a continue where it was
    not."""

    model: str
    fraction: float
    action: str
    reason: str
    actual_gain: float
    correct: bool


def backtest_decisions(model: str, series: Series,
                       fractions: Sequence[float] = DECISION_FRACTIONS,
                       min_gain: float = forecast.STOP_GAIN,
                       noise: float | None = None) -> list[DecisionRow]:
    s, lo = prediction.finite_aligned(series.steps, series.loss)
    if s.size < 2:
        return []
    final_step, final = float(s[-1]), float(lo[-1])
    out = []
    for fraction in fractions:
        keep = s <= fraction * final_step
        d = forecast.decide(s[keep], lo[keep], final_step, min_gain, noise)
        gain = float(np.min(lo[keep])) - final if keep.any() else math.nan
        stop = d.action.startswith("stop")
        out.append(DecisionRow(model, float(fraction), d.action, d.reason, gain,
                               bool(stop == (gain < min_gain))))
    return out


def decision_rates(rows: Sequence[DecisionRow]) -> dict:
    """``n``; ``false_stop``: stops where the run went on to gain at least the minimum
    (share of stops); ``missed_stop``: continues where it did not (share of continues);
    ``accuracy``."""
    stops = [r for r in rows if r.action.startswith("stop")]
    conts = [r for r in rows if not r.action.startswith("stop")]
    return {
        "n": len(rows), "n_stop": len(stops), "n_continue": len(conts),
        "false_stop": (sum(not r.correct for r in stops) / len(stops)) if stops else None,
        "missed_stop": (sum(not r.correct for r in conts) / len(conts)) if conts else None,
        "accuracy": (sum(r.correct for r in rows) / len(rows)) if rows else None,
    }


def backtest(series: Mapping[str, Series], fractions: Sequence[float] = FRACTIONS,
             candidates: Sequence[str] | None = None,
             min_gain: float = forecast.STOP_GAIN, noise: float | None = None,
             done: Callable[[str], None] | None = None) -> dict:
    """The whole backtest over several runs, JSON-serialisable::

        {"default_method": ..., "rows": [Row as dict, ...], "summary": {method: {...}},
         "decisions": [DecisionRow as dict], "decision_rates": {...}, "min_gain": ...,
         "fractions": [...], "notes": "..."}

    ``done``: called with each run's name once it is backtested (a progress bar).
    """
    rows: list[Row] = []
    decisions: list[DecisionRow] = []
    for model, ser in series.items():
        rows += backtest_series(model, ser, fractions, candidates)
        decisions += backtest_decisions(model, ser, min_gain=min_gain, noise=noise)
        if done is not None:
            done(model)
    return {
        "default_method": forecast.DEFAULT_METHOD,
        "fractions": [float(f) for f in fractions],
        "rows": [asdict(r) for r in rows],
        "summary": summarise(rows),
        "decisions": [asdict(d) for d in decisions],
        "decision_rates": decision_rates(decisions),
        "min_gain": min_gain,
        "noise": noise,
        "notes": ("Each run's checkpoints with step <= fraction x its last step; final = the "
                  "loss at its last checkpoint (nats). Methods: toposig.analysis.forecast. "
                  "coverage: share of 95% intervals holding the final loss. Decisions: the "
                  "stop rule at each cutoff against the gain the run then made."),
    }
