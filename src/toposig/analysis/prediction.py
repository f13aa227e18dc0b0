"""Predicting a model's final loss from an early fraction of its checkpoints.

Pure functions on NumPy arrays and dicts (the seed paper's table 5, made concrete and
evaluated on held-out models).

Methods, for a model whose last checkpoint is at ``final_step`` and the *early*
checkpoints, those with ``step <= fraction · final_step``:

* **loss_only**: fit ``L(t) = a·t^(−b) + c`` to the early losses (steps > 0) and
  extrapolate it to ``final_step``.
* **topology_only**: the loss at the last early checkpoint plus the loss change implied
  by the extrapolated trend of one topological feature (see
  :func:`topology_only_prediction`).
* **combined**: the mean of the two when both are defined.
* **ridge**: leave-one-model-out ridge regression from a fixed-length vector of early
  summaries (early loss, early power-law parameters, early feature value and slope) to
  the final loss, trained on the other models (:func:`ridge_lomo`).

The true final loss is the loss at the model's last checkpoint.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import optimize

METHODS: tuple[str, ...] = ("loss_only", "topology_only", "combined", "ridge")
RIDGE_FEATURES: tuple[str, ...] = ("early_loss", "log_a", "b", "c", "feature_early",
                                   "feature_slope_log_step")
_B_MIN, _B_MAX = 1e-6, 5.0
_B_GRID = np.geomspace(1e-3, _B_MAX, 80)


def finite_aligned(*seqs: Sequence[float | None]) -> tuple[np.ndarray, ...]:
    """Float arrays with positions holding a None/NaN/inf in any of them dropped,
    sorted by the first."""
    arrs = [np.array([np.nan if v is None else v for v in s], dtype=np.float64) for s in seqs]
    if len({a.size for a in arrs}) > 1:
        raise ValueError(f"sequences differ in length: {[a.size for a in arrs]}")
    keep = np.logical_and.reduce([np.isfinite(a) for a in arrs])
    order = np.argsort(arrs[0][keep], kind="stable")
    return tuple(a[keep][order] for a in arrs)


def _failed(reason: str, n: int) -> dict:
    return {"a": None, "b": None, "c": None, "ok": False, "n": n, "reason": reason}


def _grid_start(u: np.ndarray, y: np.ndarray, c_max: float) -> tuple[float, float, float]:
    """Best ``(a, b, c)`` for ``a·u^(−b) + c`` over a grid of b, with (a, c) by least squares
    for each b and clipped to ``a >= 0``, ``0 <= c <= c_max``."""
    best = (math.inf, 0.0, 1.0, 0.0)
    for b in _B_GRID:
        z = u**-b
        design = np.column_stack([z, np.ones_like(z)])
        (a, c), *_ = np.linalg.lstsq(design, y, rcond=None)
        if not 0 <= c <= c_max:
            c = min(max(c, 0.0), c_max)
            zz = float(z @ z)
            a = float(z @ (y - c)) / zz if zz > 0 else 0.0
        if a < 0:
            a, c = 0.0, min(max(float(np.mean(y)), 0.0), c_max)
        sse = float(np.sum((a * z + c - y) ** 2))
        if sse < best[0]:
            best = (sse, float(a), float(b), float(c))
    return best[1], best[2], best[3]


def fit_loss_power_law(steps: Sequence[float], losses: Sequence[float | None]) -> dict:
    """Least-squares fit of ``L(t) = a·t^(−b) + c`` to a loss curve.

    Uses the checkpoints with ``step > 0`` and a finite loss. Bounds: ``a >= 0``,
    ``0 < b <= 5``, ``0 <= c <= min(loss)``. Steps are divided by the largest step inside
    the fit for conditioning. The start is the best point of a grid over ``b`` (with ``a``
    and ``c`` solved linearly for each ``b``), refined by bounded nonlinear least squares
    (``scipy.optimize.curve_fit``, trust-region reflective); when the refinement fails the
    grid solution is kept (``"refined": False``).

    Args:
        steps: ``(n,)`` training steps.
        losses: ``(n,)`` mean token losses (nats).

    Returns:
        ``{"a" (loss · step^b), "b", "c" (loss), "ok": bool, "n": points used,
        "refined": bool}``; with fewer than three points or a non-positive loss,
        ``a = b = c = None``, ``ok = False`` and ``"reason"``.
    """
    t, y = finite_aligned(steps, losses)
    pos = t > 0
    t, y = t[pos], y[pos]
    n = int(t.size)
    if n < 3:
        return _failed(f"fewer than 3 checkpoints with step > 0 ({n})", n)
    c_max = float(np.min(y))
    if c_max <= 0:
        return _failed("non-positive loss", n)
    ref = float(np.max(t))
    u = t / ref
    a0, b0, c0 = _grid_start(u, y, c_max)
    lower, upper = (0.0, _B_MIN, 0.0), (np.inf, _B_MAX, c_max)
    p0 = (max(a0, 0.0), min(max(b0, _B_MIN), _B_MAX), min(max(c0, 0.0), c_max))

    def f(x, a, b, c):
        return a * x**-b + c

    refined = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            popt, _ = optimize.curve_fit(f, u, y, p0=p0, bounds=(lower, upper), method="trf",
                                         maxfev=20000, ftol=1e-15, xtol=1e-15, gtol=1e-15)
        a_s, b, c = (float(v) for v in popt)
        sse_fit = float(np.sum((f(u, a_s, b, c) - y) ** 2))
        sse_grid = float(np.sum((f(u, *p0) - y) ** 2))
        worse = sse_fit > sse_grid * (1 + 1e-9) + 1e-300
        if not all(math.isfinite(v) for v in (a_s, b, c, sse_fit)) or worse:
            raise RuntimeError("refinement ended worse than its start")
    except (RuntimeError, ValueError):
        (a_s, b, c), refined = p0, False
    a = a_s * ref**b
    if not math.isfinite(a):
        return _failed("fit overflowed", n)
    return {"a": float(a), "b": float(b), "c": float(c), "ok": True, "n": n, "refined": refined}


def extrapolate(fit: Mapping, t: float | np.ndarray) -> float | np.ndarray | None:
    """``a·t^(−b) + c`` of a :func:`fit_loss_power_law` result at step(s) ``t`` (> 0);
    None when the fit is not ok."""
    if not fit.get("ok"):
        return None
    val = fit["a"] * np.asarray(t, dtype=np.float64) ** -fit["b"] + fit["c"]
    return float(val) if np.ndim(val) == 0 else val


def _early(steps: Sequence[float], final_step: float, fraction: float) -> np.ndarray:
    return np.asarray(steps, dtype=np.float64) <= fraction * final_step


def loss_only_prediction(steps: Sequence[float], losses: Sequence[float | None],
                         final_step: float, fraction: float) -> float | None:
    """Final loss predicted by the power law fitted to checkpoints with
    ``step <= fraction · final_step``, evaluated at ``final_step``; None when the fit fails.
    """
    early = _early(steps, final_step, fraction)
    s = [v for v, e in zip(steps, early, strict=True) if e]
    lo = [v for v, e in zip(losses, early, strict=True) if e]
    return extrapolate(fit_loss_power_law(s, lo), final_step)


def _log_step_line(steps: np.ndarray, values: np.ndarray) -> tuple[float, float] | None:
    """Intercept and slope of ``values`` against ``log(1 + step)``; None if undefined."""
    x = np.log1p(steps)
    if x.size < 2 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, values, 1)
    return float(intercept), float(slope)


def topology_only_prediction(steps: Sequence[float], losses: Sequence[float | None],
                             feature: Sequence[float | None], final_step: float,
                             fraction: float) -> float | None:
    """Final loss from the last early loss and the extrapolated trend of one feature.

    Only the early checkpoints (``step <= fraction · final_step``, with finite loss and
    feature) are used, sorted by step, and of those the later half (at least three), so
    that the large changes right after initialisation do not dominate:

    1. *Coupling*: over consecutive early pairs, ``ΔL ≈ k·ΔF`` by least squares through
       the origin, ``k = Σ ΔL·ΔF / Σ ΔF²`` (loss units per feature unit).
    2. *Feature trend*: ``F ≈ p + q·log(1 + step)`` by least squares on the early
       checkpoints; the predicted further feature change is
       ``ΔF̂ = q·(log(1 + final_step) − log(1 + t_last))``, ``t_last`` the last early step.
    3. *Prediction*: ``L̂(final_step) = L(t_last) + k·ΔF̂``.

    The loss curve itself is used only through its last early value and the coupling
    ``k``; the shape of the remaining decrease comes from the feature's log-step trend.

    Args:
        steps, losses, feature: ``(n,)`` per checkpoint (None/NaN allowed).
        final_step: the step to predict at (the model's last checkpoint).
        fraction: share of ``final_step`` that counts as early.

    Returns:
        The predicted loss, or None when undefined: fewer than three early checkpoints,
        or a feature that does not change over them (no coupling can be estimated).
    """
    s, lo, fe = finite_aligned(steps, losses, feature)
    early = s <= fraction * final_step
    s, lo, fe = s[early], lo[early], fe[early]
    if s.size < 3:
        return None
    # Recent dynamics only: the later half of the early pairs (at least two), so the
    # large changes right after initialisation do not set the coupling or the trend.
    keep = max(3, (s.size + 1) // 2 + 1)
    s, lo, fe = s[-keep:], lo[-keep:], fe[-keep:]
    d_loss, d_feat = np.diff(lo), np.diff(fe)
    denom = float(d_feat @ d_feat)
    line = _log_step_line(s, fe)
    if denom == 0 or line is None:
        return None
    k = float(d_loss @ d_feat) / denom
    d_feat_hat = line[1] * (math.log1p(final_step) - math.log1p(s[-1]))
    return float(lo[-1] + k * d_feat_hat)


def combined_prediction(a: float | None, b: float | None) -> float | None:
    """Mean of the two predictions when both are defined, else whichever is, else None."""
    if a is not None and b is not None:
        return (float(a) + float(b)) / 2
    if a is not None:
        return float(a)
    return None if b is None else float(b)


def ridge_lomo(early_features: Mapping[str, np.ndarray], final_loss: Mapping[str, float],
               alpha: float = 1.0) -> dict[str, float]:
    """Leave-one-model-out ridge predictions of the final loss.

    For each model, a ``SimpleImputer(mean) → StandardScaler → Ridge(alpha)`` pipeline is
    trained on the other models' early-feature vectors and final losses and predicts the
    held-out model. NaN entries are imputed with the training models' column mean
    (columns that are NaN for every training model become constant and carry no weight),
    so a model whose early power-law fit failed still gets a prediction.

    Args:
        early_features: model -> ``(d,)`` vector, the same length ``d`` for every model.
        final_loss: model -> true final loss (models without one, or without a finite
            one, are left out).
        alpha: ridge penalty (on standardised features).

    Returns:
        model -> predicted final loss; ``{}`` with fewer than three usable models.
    """
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    models = [m for m in early_features
              if m in final_loss and final_loss[m] is not None
              and math.isfinite(float(final_loss[m]))]
    if len(models) < 3:
        return {}
    x = np.vstack([np.asarray(early_features[m], dtype=np.float64).ravel() for m in models])
    y = np.array([float(final_loss[m]) for m in models])
    x[~np.isfinite(x)] = np.nan
    out: dict[str, float] = {}
    for i, m in enumerate(models):
        train = np.arange(len(models)) != i
        if np.all(np.isnan(x[train])):
            out[m] = float(np.mean(y[train]))
            continue
        pipe = make_pipeline(SimpleImputer(strategy="mean", keep_empty_features=True),
                             StandardScaler(), Ridge(alpha=alpha))
        pipe.fit(x[train], y[train])
        out[m] = float(pipe.predict(x[i:i + 1])[0])
    return out


def _ridge_vector(s: np.ndarray, lo: np.ndarray, fe: np.ndarray | None, final_step: float,
                  fraction: float) -> np.ndarray:
    """The early summaries named in :data:`RIDGE_FEATURES` (NaN where undefined)."""
    vec = np.full(len(RIDGE_FEATURES), np.nan)
    early = s <= fraction * final_step
    ok_loss = early & np.isfinite(lo)
    if ok_loss.any():
        vec[0] = lo[ok_loss][-1]
    fit = fit_loss_power_law(s[ok_loss], lo[ok_loss])
    if fit["ok"]:
        vec[1] = math.log(fit["a"]) if fit["a"] > 0 else np.nan
        vec[2], vec[3] = fit["b"], fit["c"]
    if fe is not None:
        ok_feat = early & np.isfinite(fe)
        if ok_feat.any():
            vec[4] = fe[ok_feat][-1]
        line = _log_step_line(s[ok_feat], fe[ok_feat])
        if line is not None:
            vec[5] = line[1]
    return vec


def _mae(errors: list[float | None]) -> float | None:
    vals = [e for e in errors if e is not None]
    return float(np.mean(vals)) if vals else None


def prediction_table(series: Mapping[str, Mapping], fractions: Sequence[float] = (0.2, 0.3, 0.5),
                     feature: str = "np_mean", alpha: float = 1.0) -> dict:
    """Final-loss predictions from early checkpoints, per fraction, model and method.

    Args:
        series: model -> ``{"steps": [...], "loss": [...], "features": {name: [...]}}``,
            lists aligned per checkpoint (None allowed). The true final loss is the loss at
            the last checkpoint with a finite loss, and ``final_step`` is the largest step.
        fractions: shares of each model's ``final_step`` that count as early.
        feature: the feature used by ``topology_only`` and in the ridge vectors.
        alpha: ridge penalty for :func:`ridge_lomo`.

    Returns:
        A JSON-serialisable dict::

            {"fractions": {"0.2": {
                "per_model": {model: {method: {"prediction": float|None,
                                               "abs_error": float|None}}},
                "mae": {method: float|None},   # over the models where it is defined
                "n_models": {method: int},
                "improvement_over_loss_only": {method: float|None}}},
             "methods": [...], "ridge_features": [...], "feature": feature,
             "true_final_loss": {model: float}, "final_step": {model: float},
             "notes": "..."}

        ``improvement_over_loss_only = (MAE_loss_only − MAE_method) / MAE_loss_only``,
        None when either MAE is undefined or MAE_loss_only is 0.
    """
    prepared: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
    truth: dict[str, float] = {}
    final_steps: dict[str, float] = {}
    for m, d in series.items():
        s = np.array([np.nan if v is None else v for v in d["steps"]], dtype=np.float64)
        lo = np.array([np.nan if v is None else v for v in d["loss"]], dtype=np.float64)
        raw = d.get("features", {}).get(feature)
        fe = None if raw is None else np.array([np.nan if v is None else v for v in raw],
                                               dtype=np.float64)
        keep = np.isfinite(s)
        order = np.argsort(s[keep], kind="stable")
        s, lo = s[keep][order], lo[keep][order]
        fe = None if fe is None else fe[keep][order]
        finite = np.isfinite(lo)
        if not finite.any():
            continue
        prepared[m] = (s, lo, fe)
        truth[m] = float(lo[finite][-1])
        final_steps[m] = float(s[-1])

    out_fr: dict[str, dict] = {}
    for fraction in fractions:
        preds: dict[str, dict[str, float | None]] = {}
        vectors: dict[str, np.ndarray] = {}
        for m, (s, lo, fe) in prepared.items():
            fs = final_steps[m]
            p_loss = loss_only_prediction(s, lo, fs, fraction)
            p_topo = (None if fe is None
                      else topology_only_prediction(s, lo, fe, fs, fraction))
            preds[m] = {"loss_only": p_loss, "topology_only": p_topo,
                        "combined": combined_prediction(p_loss, p_topo), "ridge": None}
            vectors[m] = _ridge_vector(s, lo, fe, fs, fraction)
        for m, p in ridge_lomo(vectors, truth, alpha=alpha).items():
            preds[m]["ridge"] = p
        per_model: dict[str, dict] = {}
        errors: dict[str, list[float | None]] = {k: [] for k in METHODS}
        for m, p in preds.items():
            row = {}
            for method in METHODS:
                value = p[method]
                if value is not None and not math.isfinite(value):
                    value = None
                err = None if value is None else abs(value - truth[m])
                row[method] = {"prediction": value, "abs_error": err}
                errors[method].append(err)
            per_model[m] = row
        mae = {k: _mae(v) for k, v in errors.items()}
        base = mae["loss_only"]
        improvement = {k: (None if base is None or v is None or base == 0
                           else (base - v) / base) for k, v in mae.items()}
        out_fr[str(float(fraction))] = {
            "per_model": per_model, "mae": mae,
            "n_models": {k: sum(e is not None for e in v) for k, v in errors.items()},
            "improvement_over_loss_only": improvement,
        }
    return {
        "fractions": out_fr,
        "methods": list(METHODS),
        "ridge_features": list(RIDGE_FEATURES),
        "feature": feature,
        "true_final_loss": truth,
        "final_step": final_steps,
        "notes": (
            "Early checkpoints: step <= fraction * final_step (each model's own last step). "
            "True final loss: the loss at the last checkpoint. loss_only: L(t) = a*t^-b + c "
            "fitted to early losses (step > 0), evaluated at final_step. topology_only: last "
            "early loss + k * predicted feature change, k from a least-squares fit through "
            "the origin of consecutive early loss changes on feature changes, the feature "
            "change from a linear fit of the feature against log(1+step) on the early "
            "checkpoints extrapolated to final_step. combined: mean of the two. ridge: "
            "leave-one-model-out ridge (mean imputation, standardisation) on "
            f"{', '.join(RIDGE_FEATURES)}; needs >= 3 models. MAE is over the models where "
            "a method is defined (see n_models)."
        ),
    }
