"""Training phases of a checkpoint series: piecewise-linear breakpoints and rates of change.

Pure functions on NumPy arrays and lists.

**Piecewise-linear fit.** A feature (or the loss) against ``x = log(1 + step)`` is fitted by
a *continuous* piecewise-linear function with ``n_segments`` segments, by least squares,
with an exhaustive search over breakpoints placed at data ``x`` values. For breakpoints
``b_1 < ... < b_{k-1}`` the model is linear in the hinge basis::

    f(x) = β₀ + β₁·x + Σⱼ γⱼ·max(0, x − bⱼ)

so each candidate is one closed-form least-squares solve, and the fit is continuous by
construction. The slope of segment ``j`` is ``β₁ + γ₁ + ... + γ_{j-1}``. Segment ``j``
holds the points with ``b_{j-1} < x ≤ b_j`` (``b_0 = −∞``, ``b_k = +∞``), and each must
hold at least ``min_points`` of them.

**Rate of change** (the seed paper's phase analysis): the change of a value between
consecutive checkpoints, the step of the largest change, and the first later step where
the change has fallen below a fraction of that peak ("diminishing returns").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

import numpy as np

_CHUNK = 2048  # candidate breakpoint sets solved per batch


def _finite_pairs(x: Sequence[float], y: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` as float arrays with pairs holding a None/NaN/inf dropped, sorted by x."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} != {len(y)})")
    xa = np.array([np.nan if v is None else v for v in x], dtype=np.float64)
    ya = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    order = np.argsort(xa, kind="stable")
    return xa[order], ya[order]


def _design(x: np.ndarray, breaks: np.ndarray) -> np.ndarray:
    """Hinge design matrices, shape ``(m, n, 2 + k)`` for ``m`` breakpoint sets of size k.

    Args:
        x: ``(n,)`` abscissae.
        breaks: ``(m, k)`` breakpoints.
    """
    m = breaks.shape[0]
    ones = np.ones((m, x.size, 1))
    lin = np.broadcast_to(x[None, :, None], (m, x.size, 1))
    hinges = np.maximum(0.0, x[None, :, None] - breaks[:, None, :])
    return np.concatenate([ones, lin, hinges], axis=2)


def piecewise_linear_fit(x: Sequence[float], y: Sequence[float | None], n_segments: int = 3,
                         min_points: int = 2) -> dict:
    """Continuous piecewise-linear least-squares fit of ``y`` against ``x``.

    Exhaustive search over breakpoints at the distinct data ``x`` values: every set of
    ``n_segments − 1`` increasing breakpoints leaving at least ``min_points`` points in
    each segment is solved in closed form (hinge basis, see the module docstring; batched
    normal equations for the search, a stable least-squares solve for the reported fit)
    and the one with the smallest sum of squared residuals is kept (the first in
    lexicographic breakpoint order on ties). The first segment always keeps at least two
    points, since its slope is otherwise undefined. O(n^(n_segments−1)) solves: O(n²)
    for three segments, fine for n up to a few hundred.

    Args:
        x: ``(n,)`` abscissae, typically ``log(1 + step)``.
        y: ``(n,)`` values; pairs with a ``None``, NaN or infinite entry are dropped.
        n_segments: number of linear segments (>= 1).
        min_points: least number of points in each segment (>= 1; the first segment
            needs at least two).

    Returns:
        ``{"breakpoints": [b_1, ...] (x units, n_segments − 1 of them),
        "slopes": [s_1, ...] (y per x unit, n_segments of them), "intercept": value of
        the first segment's line at x = 0, "sse": sum of squared residuals,
        "r2": 1 − sse / total sum of squares (1.0 for a constant y), "n": points used}``.

    Raises:
        ValueError: fewer than ``n_segments * min_points`` usable points (one more when
            ``min_points == 1``), or bad arguments.
    """
    if n_segments < 1 or min_points < 1:
        raise ValueError(f"need n_segments >= 1 and min_points >= 1, got {n_segments}, "
                         f"{min_points}")
    xs, ys = _finite_pairs(x, y)
    n = xs.size
    k = n_segments - 1
    first = max(min_points, 2) if k else min_points
    need = n_segments * min_points + first - min_points
    if n < need:
        raise ValueError(f"piecewise_linear_fit: {n} usable points, need at least {need} "
                         f"({n_segments} segments x {min_points} points)")
    candidates = np.unique(xs)
    n_le = np.searchsorted(xs, candidates, side="right")  # points with x <= candidate
    # A breakpoint set is valid when every segment keeps >= min_points points (the first
    # >= max(min_points, 2)): the counts of points left of each breakpoint, padded with
    # first - min_points and n, differ by >= min_points.
    usable = np.nonzero((n_le >= first) & (n - n_le >= min_points))[0]
    if k == 0:
        idx = np.zeros((1, 0), dtype=np.int64)
    else:
        combos = np.fromiter((i for c in combinations(usable, k) for i in c), dtype=np.int64)
        idx = combos.reshape(-1, k)
    bounds = np.hstack([np.full((idx.shape[0], 1), first - min_points, np.int64), n_le[idx],
                        np.full((idx.shape[0], 1), n, np.int64)])
    idx = idx[np.all(np.diff(bounds, axis=1) >= min_points, axis=1)]
    if idx.shape[0] == 0:
        raise ValueError(f"piecewise_linear_fit: no breakpoint placement leaves {min_points} "
                         f"points in each of {n_segments} segments ({candidates.size} "
                         f"distinct x values among {n} points)")
    best_sse, best_row = math.inf, -1
    for start in range(0, idx.shape[0], _CHUNK):
        design = _design(xs, candidates[idx[start:start + _CHUNK]])
        gram = np.einsum("mnp,mnq->mpq", design, design)
        rhs = np.einsum("mnp,n->mp", design, ys)
        try:
            coef = np.linalg.solve(gram, rhs[..., None])[..., 0]  # (m, 2 + k)
        except np.linalg.LinAlgError:
            coef = np.linalg.pinv(design) @ ys
        resid = ys[None, :] - np.einsum("mnp,mp->mn", design, coef)
        sse = np.einsum("mn,mn->m", resid, resid)
        j = int(np.argmin(np.where(np.isfinite(sse), sse, np.inf)))
        if sse[j] < best_sse:
            best_sse, best_row = float(sse[j]), start + j
    if best_row < 0:
        raise ValueError("piecewise_linear_fit: no candidate fit is finite")
    breakpoints = candidates[idx[best_row]]
    # Report the chosen fit from a stable least-squares solve.
    design = _design(xs, breakpoints[None, :])[0]
    best_coef, *_ = np.linalg.lstsq(design, ys, rcond=None)
    best_sse = float(np.sum((ys - design @ best_coef) ** 2))
    slopes = np.cumsum(best_coef[1:])
    sst = float(np.sum((ys - ys.mean()) ** 2))
    r2 = 1.0 if sst == 0 else 1.0 - best_sse / sst
    return {
        "breakpoints": [float(b) for b in breakpoints],
        "slopes": [float(s) for s in slopes],
        "intercept": float(best_coef[0]),
        "sse": best_sse,
        "r2": float(r2),
        "n": int(n),
    }


def breakpoint_steps(fit: dict) -> list[float]:
    """The fit's breakpoints converted from ``log(1 + step)`` back to steps (``exp(b) − 1``)."""
    return [float(math.expm1(b)) for b in fit["breakpoints"]]


def rate_of_change_phases(steps: Sequence[float], values: Sequence[float | None],
                          threshold: float = 0.1) -> dict:
    """Peak and diminishing-returns points of a value's change between checkpoints.

    Checkpoints are sorted by step (checkpoints with a missing or non-finite value are
    dropped first). ``Δᵢ = values[i] − values[i−1]`` for consecutive checkpoints. The
    peak is the pair with the largest ``|Δ|`` (the first on ties), reported at the later
    step of the pair. The diminishing-returns point is the first later pair whose
    ``|Δ|`` is below ``threshold × |peak Δ|``, also reported at its later step, or None
    when there is none. Fractions are of the final (largest) step; None when it is 0.

    Args:
        steps: ``(n,)`` training steps.
        values: ``(n,)`` values (a feature or the loss), ``None``/NaN allowed.
        threshold: fraction of the peak ``|Δ|`` (0 < threshold).

    Returns:
        ``{"peak_step", "peak_change" (signed Δ, value units), "peak_fraction",
        "diminishing_step", "diminishing_fraction", "threshold", "changes": [{"step_from",
        "step_to", "change"}, ...]}``; with fewer than two usable checkpoints every value
        but ``threshold`` is None and ``changes`` is empty.
    """
    s, v = _finite_pairs(steps, values)
    out: dict = {"peak_step": None, "peak_change": None, "peak_fraction": None,
                 "diminishing_step": None, "diminishing_fraction": None,
                 "threshold": float(threshold), "changes": []}
    if s.size < 2:
        return out
    delta = np.diff(v)
    out["changes"] = [{"step_from": float(a), "step_to": float(b), "change": float(d)}
                      for a, b, d in zip(s[:-1], s[1:], delta, strict=True)]
    final = float(s[-1])
    peak = int(np.argmax(np.abs(delta)))
    out["peak_step"] = float(s[peak + 1])
    out["peak_change"] = float(delta[peak])
    out["peak_fraction"] = out["peak_step"] / final if final != 0 else None
    below = np.nonzero(np.abs(delta[peak + 1:]) < threshold * abs(delta[peak]))[0]
    if below.size:
        out["diminishing_step"] = float(s[peak + 2 + below[0]])
        out["diminishing_fraction"] = out["diminishing_step"] / final if final != 0 else None
    return out
