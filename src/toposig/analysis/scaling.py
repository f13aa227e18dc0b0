"""Scaling of final-checkpoint signatures with model size: power-law fits.

Pure functions on NumPy arrays and dicts.

``f(N) = a·N^b`` is fitted by least squares in log-log space (``log f = log a + b·log N``),
which needs positive sizes and values. ``f(N) = a·N^b + c`` is fitted by nonlinear least
squares in the original space (``scipy.optimize.curve_fit``), started from the log-log
solution; sizes are divided by their geometric mean inside the fit for conditioning and
``a`` is converted back. The reported ``r2`` is always in the original value space.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sps

from toposig.analysis.correlations import EXACT_SPEARMAN_MAX_N, spearman_exact_p

MIN_POINTS = 3
_KEYS = ("a", "b", "c", "r2", "spearman_r", "spearman_p")


def _none_fit(n: int, reason: str, model: str) -> dict:
    return {k: None for k in _KEYS} | {"n": n, "model": model, "reason": reason}


def _r2(y: np.ndarray, pred: np.ndarray) -> float | None:
    sst = float(np.sum((y - y.mean()) ** 2))
    if sst == 0:
        return None
    return 1.0 - float(np.sum((y - pred) ** 2)) / sst


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float | None, float | None, str | None]:
    """Spearman's rho and two-sided p (exact over all orderings for n <= 8)."""
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None, None
    s = sps.spearmanr(x, y)
    if x.size <= EXACT_SPEARMAN_MAX_N:
        return float(s.statistic), spearman_exact_p(x, y), "exact"
    return float(s.statistic), float(s.pvalue), "t-approximation"


def power_law_fit(n_params: Sequence[float], values: Sequence[float | None],
                  with_offset: bool = False) -> dict:
    """Fit ``f(N) = a·N^b`` (or ``a·N^b + c``) to values against model size.

    Args:
        n_params: ``(n,)`` model sizes (parameter counts), positive.
        values: ``(n,)`` values at those sizes; pairs with a missing or non-finite entry
            are dropped. Must be positive (the log-log fit, also the start of the offset
            fit, takes their logarithm).
        with_offset: fit ``a·N^b + c`` by nonlinear least squares, started from the
            log-log solution; when it does not converge (or ends worse than the log-log
            fit) the no-offset fit is returned with a ``"note"`` saying so.

    Returns:
        ``{"a", "b" (exponent), "c" (0.0 without offset), "r2" (original space; None for
        constant values), "spearman_r", "spearman_p" (exact permutation p for n <= 8),
        "spearman_p_method", "n", "model": "a*N^b" or "a*N^b+c"}``. With fewer than three
        points or non-positive sizes/values the numbers are None and ``"reason"`` says why;
        nothing is raised.
    """
    xa = np.array([np.nan if v is None else v for v in n_params], dtype=np.float64)
    ya = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if xa.shape != ya.shape:
        raise ValueError(f"n_params and values differ in length ({xa.size} != {ya.size})")
    keep = np.isfinite(xa) & np.isfinite(ya)
    x, y = xa[keep], ya[keep]
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    n = int(x.size)
    model = "a*N^b+c" if with_offset else "a*N^b"
    if n < MIN_POINTS:
        return _none_fit(n, f"fewer than {MIN_POINTS} points ({n})", model)
    if np.any(x <= 0):
        return _none_fit(n, "non-positive model sizes (log N undefined)", model)
    if np.any(y <= 0):
        return _none_fit(n, "non-positive values (log-log fit needs positive values)", model)
    if np.ptp(x) == 0:
        return _none_fit(n, "all model sizes equal", model)
    lx, ly = np.log(x), np.log(y)
    b, log_a = np.polyfit(lx, ly, 1)
    a, b, c = math.exp(log_a), float(b), 0.0
    pred = a * x**b
    out_model, note = "a*N^b", None
    if with_offset:
        fitted = _offset_fit(x, y, a, b)
        if fitted is None:
            note = "offset fit did not converge; no-offset fit returned"
        else:
            a2, b2, c2 = fitted
            pred2 = a2 * x**b2 + c2
            if np.sum((y - pred2) ** 2) <= np.sum((y - pred) ** 2) * (1 + 1e-9):
                a, b, c, pred, out_model = a2, b2, c2, pred2, "a*N^b+c"
            else:
                note = "offset fit ended worse than the no-offset fit; no-offset fit returned"
    rho, p, method = _spearman(x, y)
    out = {"a": float(a), "b": float(b), "c": float(c), "r2": _r2(y, pred),
           "spearman_r": rho, "spearman_p": p, "spearman_p_method": method, "n": n,
           "model": out_model}
    if note:
        out["note"] = note
    return out


def _offset_fit(x: np.ndarray, y: np.ndarray, a0: float, b0: float
                ) -> tuple[float, float, float] | None:
    """``a·x^b + c`` by Levenberg–Marquardt from ``(a0, b0, 0)``; None when it fails."""
    ref = math.exp(float(np.mean(np.log(x))))  # geometric mean size
    u = x / ref

    def f(t, a_s, b, c):
        return a_s * t**b + c

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", optimize.OptimizeWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            popt, _ = optimize.curve_fit(f, u, y, p0=(a0 * ref**b0, b0, 0.0), method="lm",
                                         maxfev=20000, ftol=1e-14, xtol=1e-14, gtol=1e-14)
    except (RuntimeError, ValueError, optimize.OptimizeWarning):
        return None
    a_s, b, c = (float(v) for v in popt)
    if not all(math.isfinite(v) for v in (a_s, b, c)):
        return None
    a = a_s / ref**b
    if not math.isfinite(a):
        return None
    return a, b, c


def scaling_table(final: Mapping[str, Mapping[str, float]], n_params: Mapping[str, int],
                  features: Sequence[str], with_offset: bool = False) -> dict[str, dict]:
    """:func:`power_law_fit` of each feature's final value against model size.

    Args:
        final: model -> {feature -> value at the final checkpoint} (may include "loss").
        n_params: model -> parameter count.
        features: names to fit; a model lacking one (or its size) is left out of that fit.
        with_offset: passed to :func:`power_law_fit`.

    Returns:
        feature -> the fit dict, plus ``"models"``: the models used, by increasing size.
    """
    out: dict[str, dict] = {}
    for feat in features:
        models = [m for m in final
                  if m in n_params and final[m].get(feat) is not None
                  and math.isfinite(float(final[m][feat]))]
        models.sort(key=lambda m: n_params[m])
        fit = power_law_fit([n_params[m] for m in models], [final[m][feat] for m in models],
                            with_offset=with_offset)
        out[feat] = fit | {"models": models}
    return out
