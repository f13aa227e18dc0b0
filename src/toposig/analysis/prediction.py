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
  summaries (the last early loss, the feature's last early value and its slope against
  log step) to the final loss, trained on the other models (:func:`ridge_lomo`), with the
  penalty chosen by leave-one-out cross-validation within the training models. Defined
  only with at least :data:`RIDGE_MIN_TRAIN` training models (``RIDGE_MIN_TRAIN + 1``
  models in all); with fewer it predicts nothing and ``prediction_table`` says why.

  Why (issue 24 §4): the vector used to hold the early power-law parameters
  ``log a, b, c`` too. Those are ill-conditioned (``a`` and ``b`` trade off along a
  valley of the fit), and a fixed penalty ``alpha = 1`` on three models (two to train
  on) turned last-bit input changes into 150 % changes of the ridge MAE. The vector now
  holds only summaries that move by about as much as their inputs, the penalty is
  cross-validated over a log grid (:data:`RIDGE_ALPHAS`), and a regression from three
  summaries is not fitted to fewer than five models.

The true final loss is the loss at the model's last checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import optimize

METHODS: tuple[str, ...] = ("loss_only", "topology_only", "combined", "ridge")
RIDGE_FEATURES: tuple[str, ...] = ("early_loss", "feature_early", "feature_slope_log_step")
RIDGE_MIN_TRAIN = 5                         # training models per leave-one-out fit, at least
RIDGE_ALPHAS: tuple[float, ...] = tuple(float(v) for v in np.logspace(-3, 3, 13))
_B_MIN, _B_MAX = 1e-6, 5.0
_B_GRID = np.geomspace(_B_MIN, _B_MAX, 121)


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
    return {"a": None, "b": None, "c": None, "ok": False, "n": n, "refined": False,
            "reason": reason}


def _profile(u: np.ndarray, y: np.ndarray, c_max: float, b: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each exponent in ``b`` (``(k,)``), the exact least-squares ``(a, c)`` of
    ``a·u^(−b) + c`` under ``a >= 0``, ``0 <= c <= c_max``, and its sum of squared errors.

    For fixed b the problem is a strictly convex quadratic in ``(a, c)`` over a box: the
    unconstrained solution when it is feasible, else the best of the box's edges, each a
    one-dimensional least squares clipped to its range. The edge ``a = 0`` is never needed
    (its optimum ``c = c_max``, as ``c_max`` is the smallest loss, lies on the edge
    ``c = c_max``).

    Returns:
        ``a``, ``c``, ``sse``, each ``(k,)``.
    """
    z = u[None, :] ** -b[:, None]
    zm = z.mean(axis=1)
    ym = float(y.mean())
    zc = z - zm[:, None]
    szz = np.einsum("ij,ij->i", zc, zc)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_free = np.einsum("ij,j->i", zc, y - ym) / szz
    c_free = ym - a_free * zm
    zz = np.einsum("ij,ij->i", z, z)
    a_low = np.maximum(z @ y / zz, 0.0)                # edge c = 0
    a_high = np.maximum(z @ (y - c_max) / zz, 0.0)     # edge c = c_max

    def sse(a: np.ndarray, c: np.ndarray | float) -> np.ndarray:
        r = a[:, None] * z + (np.asarray(c, dtype=np.float64).reshape(-1, 1) - y[None, :])
        return np.einsum("ij,ij->i", r, r)

    sse_low, sse_high = sse(a_low, 0.0), sse(a_high, c_max)
    edge_high = sse_high <= sse_low
    a = np.where(edge_high, a_high, a_low)
    c = np.where(edge_high, c_max, 0.0)
    err = np.where(edge_high, sse_high, sse_low)
    free = (szz > 0) & np.isfinite(a_free) & (a_free >= 0) & (c_free >= 0) & (c_free <= c_max)
    if free.any():
        err_free = sse(np.where(free, a_free, 0.0), np.where(free, c_free, 0.0))
        free &= err_free <= err
        a, c, err = (np.where(free, a_free, a), np.where(free, c_free, c),
                     np.where(free, err_free, err))
    return a, c, err


def _profile_slope(u: np.ndarray, log_u: np.ndarray, y: np.ndarray, c_max: float,
                   b: float) -> float:
    """``d SSE / d b`` of the profile at ``b`` (envelope theorem: the partial derivative at
    the optimal ``(a, c)``, whose box does not depend on b): ``2·a·Σ r_i·(−ln u_i)·u_i^(−b)``.
    The same solution as :func:`_profile` for one b, written for a scalar b (it is called
    once per root-finding step)."""
    z = u ** -b
    n = z.size
    zm, ym = z.sum() / n, y.sum() / n
    zc = z - zm
    szz = zc @ zc
    a_free = (zc @ (y - ym)) / szz if szz > 0 else math.nan
    c_free = ym - a_free * zm
    if a_free >= 0 and 0 <= c_free <= c_max:
        a, c = a_free, c_free
        r = a * z + (c - y)
        best = r @ r
    else:
        best, a, c, r = math.inf, 0.0, 0.0, None
    zz = z @ z
    for c_edge in (c_max, 0.0):               # the same order of preference as _profile
        a_edge = max((z @ (y - c_edge)) / zz, 0.0)
        r_edge = a_edge * z + (c_edge - y)
        err = r_edge @ r_edge
        if err < best:
            best, a, c, r = err, a_edge, c_edge, r_edge
    if a == 0 or r is None:
        return 0.0
    return float(-2.0 * a * ((r * z) @ log_u))


def _root_bracket(slope, grid: np.ndarray, k: int) -> tuple[float, float] | float | None:
    """Around grid point ``k`` (the grid's smallest SSE): an interval where the profile's
    slope goes from negative to positive, or the point itself when the slope is zero there
    or the minimum is on a bound (slope pointing out of the box); None when neither the
    neighbours nor a subdivision show such a sign change."""
    g_k = slope(grid[k])
    if g_k == 0:
        return float(grid[k])
    j = k + 1 if g_k < 0 else k - 1
    if j < 0 or j >= grid.size:
        return float(grid[k])                 # b on its bound, the SSE still falls outward
    lo, hi = sorted((k, j))
    g_lo, g_hi = (g_k, slope(grid[j])) if lo == k else (slope(grid[j]), g_k)
    if g_lo < 0 < g_hi:
        return float(grid[lo]), float(grid[hi])
    if g_lo < 0 and g_hi == 0:
        return float(grid[hi])
    if g_lo == 0 and g_hi > 0:
        return float(grid[lo])
    sub = np.geomspace(grid[lo], grid[hi], 17)
    g = [slope(v) for v in sub]
    for i in range(16):
        if g[i] < 0 <= g[i + 1] or g[i] <= 0 < g[i + 1]:
            return float(sub[i]), float(sub[i + 1])
    return None


def fit_loss_power_law(steps: Sequence[float], losses: Sequence[float | None]) -> dict:
    """Least-squares fit of ``L(t) = a·t^(−b) + c`` to a loss curve.

    Uses the checkpoints with ``step > 0`` and a finite loss; steps are divided by the
    largest step inside the fit (``u = t / t_max``) for conditioning. Bounds: ``a >= 0``,
    ``1e-6 <= b <= 5``, ``0 <= c <= min(loss)``.

    Method (a profile over b, chosen so that the result is a smooth function of the input,
    stable across CPUs: an input moved by 1e-12 relative moves the parameters by about the
    problem's own condition number times that, not by an optimiser's stopping point):

    1. For fixed b the best ``(a, c)`` in the box is an exact linear least squares
       (:func:`_profile`), so the fit is a one-dimensional minimisation of the profile
       ``SSE(b)``.
    2. ``SSE(b)`` is evaluated on a geometric grid of b over the bounds; the smallest
       value's neighbours bracket the minimum.
    3. By the envelope theorem ``dSSE/db = 2·a·Σ r_i·(−ln u_i)·u_i^(−b)`` at the optimal
       ``(a, c)``; its sign change in the bracket (negative to positive) is found with
       :func:`scipy.optimize.brentq` to machine precision (``xtol = 1e-300``,
       ``rtol = 4·eps``), and ``(a, c)`` are solved exactly at that b.

    On the bounds: when the profile still falls at ``b = 1e-6`` or at ``b = 5``, b is that
    bound (losses that do not fall with the step end at ``b = 1e-6``, a nearly constant
    curve with ``a + c`` about their mean). ``c = 0`` or ``c = min(loss)`` and ``a = 0``
    are the exact constrained solutions for that b (no clipping of a free solution).
    ``a = 0`` only for constant losses; then the SSE does not depend on b and b is
    ``1e-6``. When no sign change can be bracketed (a profile flat to rounding, or with
    several minima within one grid cell), the grid point is kept with
    ``"refined": False``.

    Args:
        steps: ``(n,)`` training steps.
        losses: ``(n,)`` mean token losses (nats).

    Returns:
        ``{"a" (loss · step^b), "b", "c" (loss), "ok": bool, "n": points used,
        "refined": bool (b located by the slope's root or on a bound), "reason": None}``;
        with fewer than three points or a non-positive loss, ``a = b = c = None``,
        ``ok = False`` and ``"reason"``.
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
    log_u = np.log(u)
    grid = _B_GRID
    with np.errstate(over="ignore", invalid="ignore"):
        a_g, _, sse_g = _profile(u, y, c_max, grid)
        sse_g = np.where(np.isfinite(sse_g), sse_g, np.inf)
        if not np.isfinite(sse_g).any():
            return _failed("fit overflowed", n)
        k = int(np.argmin(sse_g))
        refined = True
        if a_g[k] == 0 or np.ptp(u) == 0:
            b = float(grid[k])                    # flat in b: nothing to refine
        else:
            def slope(v: float) -> float:
                return _profile_slope(u, log_u, y, c_max, float(v))

            try:
                found = _root_bracket(slope, grid, k)
                if found is None:
                    b, refined = float(grid[k]), False
                elif isinstance(found, float):
                    b = found
                else:
                    b = float(optimize.brentq(slope, found[0], found[1], xtol=1e-300,
                                              rtol=4 * np.finfo(float).eps, maxiter=200))
            except (ValueError, RuntimeError):     # a non-finite slope, or no convergence
                b, refined = float(grid[k]), False
        a_arr, c_arr, _ = _profile(u, y, c_max, np.array([b]))
        a_s, c = float(a_arr[0]), float(c_arr[0])
        a = a_s * ref**b
    if not (math.isfinite(a) and math.isfinite(c)):
        return _failed("fit overflowed", n)
    return {"a": float(a), "b": b, "c": c, "ok": True, "n": n, "refined": refined,
            "reason": None}


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
               alphas: Sequence[float] = RIDGE_ALPHAS,
               min_train: int = RIDGE_MIN_TRAIN) -> dict[str, float]:
    """Leave-one-model-out ridge predictions of the final loss.

    For each model (scikit-learn's ``LeaveOneGroupOut``, a group per model), a
    ``SimpleImputer(mean) → StandardScaler → RidgeCV(alphas)`` pipeline is trained on the
    other models' early-feature vectors and final losses and
    predicts the held-out model; RidgeCV picks the penalty by (efficient) leave-one-out
    cross-validation among those training models, so the held-out model never informs
    its own penalty. NaN entries are imputed with the training models' column mean
    (columns that are NaN for every training model become constant and carry no
    weight), so a model whose early feature trend is undefined still gets a prediction.

    Args:
        early_features: model -> ``(d,)`` vector, the same length ``d`` for every model.
        final_loss: model -> true final loss (models without one, or without a finite
            one, are left out).
        alphas: the penalties (on standardised features) cross-validated over.
        min_train: the fewest training models a fit may have.

    Returns:
        model -> predicted final loss; ``{}`` with fewer than ``min_train + 1`` usable
        models (:func:`ridge_reason` says so).
    """
    return _ridge_lomo(early_features, final_loss, alphas, min_train)[0]


def _usable(early_features: Mapping[str, np.ndarray], final_loss: Mapping[str, float]
            ) -> list[str]:
    return [m for m in early_features
            if m in final_loss and final_loss[m] is not None
            and math.isfinite(float(final_loss[m]))]


def ridge_reason(early_features: Mapping[str, np.ndarray], final_loss: Mapping[str, float],
                 min_train: int = RIDGE_MIN_TRAIN) -> str | None:
    """Why :func:`ridge_lomo` predicts nothing; None when it is defined."""
    n = len(_usable(early_features, final_loss))
    if n < min_train + 1:
        return (f"needs >= {min_train + 1} models with a final loss ({min_train} to train "
                f"on per held-out model), found {n}")
    return None


def _ridge_lomo(early_features: Mapping[str, np.ndarray], final_loss: Mapping[str, float],
                alphas: Sequence[float] = RIDGE_ALPHAS, min_train: int = RIDGE_MIN_TRAIN
                ) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`ridge_lomo`'s predictions and, per held-out model, the penalty chosen."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import LeaveOneGroupOut
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    models = _usable(early_features, final_loss)
    if ridge_reason(early_features, final_loss, min_train) is not None:
        return {}, {}
    x = np.vstack([np.asarray(early_features[m], dtype=np.float64).ravel() for m in models])
    y = np.array([float(final_loss[m]) for m in models])
    x[~np.isfinite(x)] = np.nan
    out: dict[str, float] = {}
    chosen: dict[str, float] = {}
    for train, held in LeaveOneGroupOut().split(x, y, groups=models):
        m = models[int(held[0])]
        if np.all(np.isnan(x[train])):
            out[m] = float(np.mean(y[train]))
            continue
        pipe = make_pipeline(SimpleImputer(strategy="mean", keep_empty_features=True),
                             StandardScaler(), RidgeCV(alphas=tuple(alphas)))
        pipe.fit(x[train], y[train])
        out[m] = float(pipe.predict(x[held])[0])
        chosen[m] = float(pipe[-1].alpha_)
    # LeaveOneGroupOut visits the models sorted by name: report them in the study's order
    return ({m: out[m] for m in models if m in out},
            {m: chosen[m] for m in models if m in chosen})


def _ridge_vector(s: np.ndarray, lo: np.ndarray, fe: np.ndarray | None, final_step: float,
                  fraction: float) -> np.ndarray:
    """The early summaries named in :data:`RIDGE_FEATURES` (NaN where undefined)."""
    vec = np.full(len(RIDGE_FEATURES), np.nan)
    early = s <= fraction * final_step
    ok_loss = early & np.isfinite(lo)
    if ok_loss.any():
        vec[0] = lo[ok_loss][-1]
    if fe is not None:
        ok_feat = early & np.isfinite(fe)
        if ok_feat.any():
            vec[1] = fe[ok_feat][-1]
        line = _log_step_line(s[ok_feat], fe[ok_feat])
        if line is not None:
            vec[2] = line[1]
    return vec


def _mae(errors: list[float | None]) -> float | None:
    vals = [e for e in errors if e is not None]
    return float(np.mean(vals)) if vals else None


def prediction_table(series: Mapping[str, Mapping], fractions: Sequence[float] = (0.2, 0.3, 0.5),
                     feature: str = "np_mean", alphas: Sequence[float] = RIDGE_ALPHAS
                     ) -> dict:
    """Final-loss predictions from early checkpoints, per fraction, model and method.

    Args:
        series: model -> ``{"steps": [...], "loss": [...], "features": {name: [...]}}``,
            lists aligned per checkpoint (None allowed). The true final loss is the loss at
            the last checkpoint with a finite loss, and ``final_step`` is the largest step.
        fractions: shares of each model's ``final_step`` that count as early.
        feature: the feature used by ``topology_only`` and in the ridge vectors.
        alphas: the ridge penalties :func:`ridge_lomo` cross-validates over.

    Returns:
        A JSON-serialisable dict::

            {"fractions": {"0.2": {
                "per_model": {model: {method: {"prediction": float|None,
                                               "abs_error": float|None}}},
                "mae": {method: float|None},   # over the models where it is defined
                "n_models": {method: int},
                "improvement_over_loss_only": {method: float|None},
                "ridge_alpha": {model: float}}},   # the penalty chosen per held-out model
             "methods": [...], "ridge_features": [...], "feature": feature,
             "ridge_reason": str|None,   # why ridge predicts nothing (None: defined)
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
        ridge_pred, ridge_alpha = _ridge_lomo(vectors, truth, alphas)
        for m, p in ridge_pred.items():
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
            "ridge_alpha": ridge_alpha,
        }
    return {
        "fractions": out_fr,
        "methods": list(METHODS),
        "ridge_features": list(RIDGE_FEATURES),
        "feature": feature,
        "ridge_reason": ridge_reason({m: np.zeros(0) for m in prepared}, truth),
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
            "leave-one-model-out ridge (mean imputation, standardisation, penalty chosen by "
            "leave-one-out cross-validation within the training models over "
            f"{RIDGE_ALPHAS[0]:g}..{RIDGE_ALPHAS[-1]:g}, {len(RIDGE_ALPHAS)} log-spaced "
            f"values) on {', '.join(RIDGE_FEATURES)}; needs >= {RIDGE_MIN_TRAIN + 1} models "
            f"({RIDGE_MIN_TRAIN} to train on), else no ridge prediction (ridge_reason). The "
            "fitted power-law parameters are not ridge inputs: they are ill-conditioned, "
            "and with them the ridge changed by up to 150% under last-bit input changes "
            "(issue 24 §4). The power law is fitted as a profile over b, the minimum "
            "located by the root of the profile's derivative, so it is a smooth function of "
            "the losses (a change of the losses moves it by the fit's own sensitivity, not by "
            "an optimiser's stopping point). MAE is over the models where a method is "
            "defined (see n_models)."
        ),
    }
