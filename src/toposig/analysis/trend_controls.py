"""Trend controls that survive shared deceleration, with autocorrelation-aware p-values.

Two series that both flatten as training goes on have shrinking first differences
together, so plain first differences correlate even when the series share nothing but
their trend (on the published weight-space seed run, weight norms "pass" them on every
model). This module adds two controls, each a correlation of what is left once the
trend is gone, with a p-value that does not assume independent checkpoints. Both are
validated on simulated runs where the truth is known (``tests/test_trend_controls.py``,
``bench/bench_controls_calibration.py``, :mod:`toposig.analysis.simulate`).

**Trend.** A series' trend is a cubic smoothing spline in ``u = log(1 + step)``, the
minimiser of ``Σ (v_i − f(u_i))² + λ ∫ f''(u)² du`` (a natural cubic spline with a knot at
every checkpoint). By ``λ`` it spans everything from the straight line in log step
(λ → ∞) to interpolation (λ → 0), so it follows any smooth decelerating curve (a power
law, an exponential approach to a plateau, a sigmoid in log step) without a functional
form being chosen; a low-degree polynomial in ``u`` cannot follow an early drop and a late
plateau at once, and its ends swing. ``λ`` is chosen per series by restricted maximum
likelihood, i.e. Wahba's generalised maximum likelihood (GML; Wahba 1985, Ann. Statist.
13:1378; the default of R's mgcv, Wood 2011, JRSS-B 73:3): the spline is the posterior
mean of an integrated-Brownian-motion prior, and λ maximises the marginal likelihood of
the data's penalised components. Why it neither over-fits the fluctuations nor leaves
the trend in: the criterion weighs the residual variance against the log-determinant of
the smoother, so absorbing checkpoint-to-checkpoint scatter into the trend is penalised,
and a systematic misfit inflates the residual variance. Why not generalised
cross-validation (SciPy's criterion, kept as ``smoothing="gcv"``): on 19-point series
GCV's criterion is flat towards interpolation and lands there for 10–35 % of simulated
series (Wahba 1985; Reiss & Ogden 2009, JRSS-B 71:505: GCV's λ is far more variable than
REML's); in the calibration bench it holds its size about as well but finds a real
coupling less often (e.g. 0.79 against 0.89 at coupling 0.6, AR 0.7, 51 checkpoints).
GCV with the usual inflation factor (γ = 1.4) avoids interpolation but oversmooths:
in simulation the two series' shared trend misfit then came out significant in up to
90 % of null runs at 0.3 % noise. When the data are nearly noise-free (Pythia's
ln perplexity) REML drives λ to the grid's lower end; the residuals are then the series'
roughest components, which is still a valid (high-pass) comparison, and the surrogates
below reproduce it. The reported ``edf`` says which case a result is.

The spline's basis and penalty come from :func:`scipy.interpolate.make_smoothing_spline`:
the smoother at λ = 1, ``S₁ = (I + K)⁻¹``, is read off it once per step grid (cached), and
the criterion is then evaluated in closed form from the eigen-decomposition of ``K``
(Demmler–Reinsch) over a log-spaced grid of λ from near-interpolation to near-linear,
refined by a parabola in log λ. SciPy offers only GCV (``lam=None``, available here as
``smoothing="gcv"``; the tests check that the two agree), searched over ``λ ∈ (0, n)`` on
a linear scale at ~15 ms per series; the calibration needs thousands of fits.

**Detrended control** (:func:`detrended_correlation`): the Spearman correlation of the
two series' residuals from their own trends.

**First differences partialled on log step** (:func:`partial_first_differences`): with
``dx_i = x_{i+1} − x_i`` between consecutive checkpoints, ``ū_i = (u_i + u_{i+1}) / 2`` the
midpoint's log step and ``Δu_i = u_{i+1} − u_i``, each series' differences are regressed
on log step as ``dx_i ≈ f(ū_i)·Δu_i`` (a trend's change over an interval is its slope in
log step times the interval's length), ``f`` the same REML smoothing spline (the
penalised least-squares fit of ``dx`` with the penalty on ``f``), and the result is the
Spearman correlation of the residuals ``dx_i − f̂(ū_i)·Δu_i``. With ``covariate="linear"``
it is instead the literal partial correlation on the midpoint's log step: the residuals
of an ordinary least-squares fit of ``dx`` on ``[1, ū]``. The bench shows that this is not
enough (a shared trend's differences are not linear in ``ū``, and a log-spaced grid's
intervals are uneven), so the smooth version is the default.

**p-values.** Residuals of neighbouring checkpoints are serially correlated (the noise's
own autocorrelation, and the smoothing), which makes the usual t-test (n independent
pairs) anti-conservative. The p-value is a surrogate-data test after Ebisuzaki (1997,
"A method to estimate the statistical significance of a correlation when the data are
serially correlated", J. Climate 10:2147): the Fourier phases of x's residuals are
randomised (amplitudes kept, so each surrogate keeps their periodogram and with it their
autocorrelation), each surrogate is passed through x's residual operator ``I − S_x`` (at
x's chosen λ, so the surrogates also carry what the trend fit does to the residuals, e.g.
the near-zero residuals where checkpoints are sparse in log step), correlated with y's
residuals, and ``p = (1 + #{|r*| ≥ |r|}) / (1 + n_surrogates)``, two-sided; where fewer
than ten surrogates are as extreme, the count cannot resolve p (its floor, 0.001 with
999 surrogates, times the number of tests a Holm correction covers would exceed 0.05),
so p comes from a normal tail fitted to the surrogates' Fisher z (:func:`surrogate_p`).
Draws come from ``numpy.random.default_rng(seed)``; a given seed gives the same p.
The same surrogates give each result's 95% interval (:func:`surrogate_interval`):
``tanh(atanh r ± t(n − 3) · s)``, s their root-mean-square Fisher z; and
:func:`raw_surrogate_interval` gives the plain correlation's. :func:`batch_draws` runs a
control on many simulated runs of one grid at once (the calibration and power
simulations of :mod:`toposig.analysis.inference`), :func:`draws` gives one model's
statistic with its surrogates for a pooled test.

**Where they hold, and where not** (``bench/bench_controls_calibration.py``, 400 runs a
cell): both keep their size (rejection rate within the binomial 99 % interval of 0.05)
on the 51-point linear grid for power-law and exponential trends and on the 19-point
Pythia grid for a power-law trend, at noise 0.5–20 % of the trend's drop and AR(1)
coefficients 0–0.7. They do not when the shared trend changes faster than the grid
resolves in log step: an exponential decay in the step, seen on Pythia's log grid, falls
off a cliff within its last four checkpoints, and at 0.5 % noise the detrended control
rejects 8–20 % of null runs and the partialled differences 12–19 % (also at 5 % noise).
Power is modest on 19 checkpoints (coupling 0.6: about 0.4 detrended, 0.2 differences)
and high on 51 (0.89–0.98).
Learning-rate schedules, ARMA noise and Pythia's full 154-revision grid are in
``bench/bench_inference_designs.py``; where a design cannot be calibrated the analysis
says so (:func:`toposig.analysis.inference.design_rule`).

Inputs follow :func:`toposig.analysis.controls._clean`: positions where x, y or the step
is missing (``None``) or non-finite are dropped pairwise, and the checkpoints are taken in
step order. A result is undefined (``r`` and ``p`` ``None``, with a ``reason``) with
fewer than :data:`MIN_POINTS` checkpoints or when a series is constant or has no
variation left after its trend.

Pure functions on arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps
from scipy.interpolate import make_smoothing_spline

MIN_POINTS = 6  # checkpoints with x, y and step all present
N_SURROGATES = 999
SMOOTHING = ("reml", "gcv")
COVARIATES = ("smooth", "linear")
STATISTIC = "spearman"
P_METHOD = ("phase-randomised surrogates of x's residuals passed through x's residual "
            "operator (after Ebisuzaki 1997), two-sided, {n} surrogates; below ten as "
            "extreme, a normal tail fitted to their Fisher z")
_N_LAMBDA = 161  # criterion grid points over the log-λ range
_REL_TOL = 1e-9  # residual range below this fraction of the series' own: nothing left

FloatSeq = Sequence[float | None] | np.ndarray


def log_step_trend(steps: FloatSeq, values: FloatSeq, *, smoothing: str = "reml"
                   ) -> np.ndarray:
    """A series' smooth trend in ``log(1 + step)``: a cubic smoothing spline.

    Args:
        steps: training steps, shape (n,), non-negative, distinct, any order.
        values: the series, shape (n,), any units; no missing values.
        smoothing: how λ is chosen, ``"reml"`` (default) or ``"gcv"``.

    Returns:
        The fitted trend at the given checkpoints, shape (n,), in the units of ``values``
        and in the order given. For fewer than five points (too few for the spline) the
        least-squares line in log step.
    """
    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if s.shape != v.shape or s.ndim != 1:
        raise ValueError("steps and values must be one-dimensional and of the same length")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(v))):
        raise ValueError("steps and values must be finite (drop missing values first)")
    if np.any(s < 0):
        raise ValueError("steps must be non-negative")
    order = np.argsort(s, kind="stable")
    u = np.log1p(s[order])
    if np.any(np.diff(u) <= 0):
        raise ValueError("steps must be distinct")
    _check_choice(smoothing, SMOOTHING, "smoothing")
    ordered = v[order]
    fitted = ordered - _smooth(u, ordered[:, None], smoothing=smoothing)[2][0] @ ordered
    out = np.empty_like(fitted)
    out[order] = fitted
    return out


def paired_series(x: FloatSeq, y: FloatSeq, steps: FloatSeq
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, steps)`` as the controls use them: dropped pairwise where any is missing or
    non-finite, in step order (shape (n,) each).

    Raises:
        ValueError: shapes differ, a step is negative, or two steps are equal."""
    xa, ya, u = _prepare(x, y, steps)
    return xa, ya, np.expm1(u)


def trend_fit(steps: np.ndarray, values: np.ndarray, max_edf: float | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each column's smooth trend in log(1 + step) (the REML smoothing spline of
    :func:`log_step_trend`) and its effective degrees of freedom.

    Args:
        steps: shape (n,), increasing.
        values: shape (n, m).
        max_edf: a cap on the fit's effective degrees of freedom (λ raised to meet it).

    Returns:
        ``(trend, edf)``, shapes (n, m) and (m,)."""
    _, edf, ops = _smooth(np.log1p(np.asarray(steps, dtype=np.float64)), values,
                          max_edf=max_edf)
    return values - np.einsum("mij,jm->im", ops, values), edf


def detrended_correlation(x: FloatSeq, y: FloatSeq, steps: FloatSeq, *, seed: int = 0,
                          n_surrogates: int = N_SURROGATES, smoothing: str = "reml") -> dict:
    """Correlation of two series' deviations from their own smooth trends in log step.

    Args:
        x: the feature per checkpoint, shape (n,), ``None``/NaN where missing.
        y: the target (e.g. the loss) per checkpoint, shape (n,).
        steps: the checkpoints' training steps, shape (n,), non-negative and distinct.
        seed: seeds the surrogates.
        n_surrogates: surrogates for the p-value.
        smoothing: how each trend's λ is chosen, ``"reml"`` (default) or ``"gcv"``.

    Returns:
        ``r`` (Spearman ρ of the residuals, the test statistic), ``p`` (two-sided,
        surrogate test), ``pearson_r`` (Pearson r of the residuals), ``statistic``,
        ``p_method``, ``n`` (checkpoints used), ``trend`` (the trend method), ``edf_x`` /
        ``edf_y`` (each trend's effective degrees of freedom ``tr S_λ``, 2 = a line in log
        step, n = interpolation), ``reason`` (``None``, or why ``r`` and ``p`` are
        ``None``).
    """
    _check_choice(smoothing, SMOOTHING, "smoothing")
    xa, ya, u = _prepare(x, y, steps)
    n = xa.size
    trend = f"cubic smoothing spline in log(1 + step), λ by {smoothing.upper()}"
    out = _empty(n, n_surrogates) | {"trend": trend}
    if n < MIN_POINTS:
        return out | {"reason": f"fewer than {MIN_POINTS} checkpoints with x, y and step"}
    if (why := _constant(xa, ya)) is not None:
        return out | {"reason": why}
    values, edf, resid_ops = _operators("detrended", xa[None], ya[None], u, smoothing)
    out |= {"edf_x": float(edf[0, 0]), "edf_y": float(edf[0, 1])}
    return out | _surrogate_test(values[0], resid_ops[0], seed, n_surrogates,
                                 _WHAT["detrended"])


def partial_first_differences(x: FloatSeq, y: FloatSeq, steps: FloatSeq, *, seed: int = 0,
                              n_surrogates: int = N_SURROGATES, covariate: str = "smooth",
                              smoothing: str = "reml") -> dict:
    """Correlation of first differences after regressing each on log step.

    Args:
        x: the feature per checkpoint, shape (n,), ``None``/NaN where missing.
        y: the target per checkpoint, shape (n,).
        steps: the checkpoints' training steps, shape (n,), non-negative and distinct.
            Differences are taken between consecutive checkpoints (in step order) where
            x, y and the step all exist.
        seed: seeds the surrogates.
        n_surrogates: surrogates for the p-value.
        covariate: ``"smooth"`` (default): ``dx_i`` is regressed on ``f(ū_i)·Δu_i``, ``f`` a
            smoothing spline of the midpoint's log step ``ū_i``, ``Δu_i`` the interval's
            length in log step; ``"linear"``: ordinary least squares of ``dx_i`` on
            ``[1, ū_i]``.
        smoothing: how the spline's λ is chosen (``covariate="smooth"`` only).

    Returns:
        As :func:`detrended_correlation`, with ``n`` the number of differences,
        ``covariate`` the regression used and ``edf_*`` its degrees of freedom.
    """
    _check_choice(covariate, COVARIATES, "covariate")
    _check_choice(smoothing, SMOOTHING, "smoothing")
    xa, ya, u = _prepare(x, y, steps)
    n = max(xa.size - 1, 0)
    desc = (f"dx ≈ f(midpoint log(1 + step)) × (interval in log(1 + step)), f a cubic "
            f"smoothing spline, λ by {smoothing.upper()}" if covariate == "smooth"
            else "OLS of dx on [1, midpoint log(1 + step)]")
    out = _empty(n, n_surrogates) | {"covariate": desc}
    if xa.size < MIN_POINTS:
        return out | {"reason": f"fewer than {MIN_POINTS} checkpoints with x, y and step"}
    if (why := _constant(xa, ya)) is not None:
        return out | {"reason": why}
    if covariate == "smooth":
        values, edf, resid_ops = _operators("pfd", xa[None], ya[None], u, smoothing)
        values, resid_ops = values[0], resid_ops[0]
        edf = edf[0]
    else:
        values = np.column_stack([np.diff(xa), np.diff(ya)])
        mid = (u[1:] + u[:-1]) / 2
        design = np.column_stack([np.ones(n), mid])
        op = np.eye(n) - design @ np.linalg.pinv(design)
        resid_ops, edf = np.stack([op, op]), np.array([2.0, 2.0])
    out |= {"edf_x": float(edf[0]), "edf_y": float(edf[1])}
    return out | _surrogate_test(values, resid_ops, seed, n_surrogates, _WHAT["pfd"])


KINDS = ("detrended", "pfd")
_WHAT = {"detrended": "its trend", "pfd": "the log-step regression"}


def _operators(kind: str, x: np.ndarray, y: np.ndarray, u: np.ndarray,
               smoothing: str = "reml") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The series a control correlates and the residual operators of their fits, for
    ``m`` runs at once on one grid.

    Args:
        kind: ``"detrended"`` (the levels, each less its smooth trend in log step) or
            ``"pfd"`` (first differences less ``f(midpoint)·Δu``, ``f`` smooth).
        x, y: shape (m, n), in step order, no missing values.
        u: log(1 + step), shape (n,), increasing.

    Returns:
        ``(values, edf, resid_ops)``: shapes (m, k, 2), (m, 2) and (m, 2, k, k), ``k = n``
        for ``"detrended"`` and ``n − 1`` for ``"pfd"``; the residuals of run ``i``'s x are
        ``resid_ops[i, 0] @ values[i, :, 0]``.
    """
    m = x.shape[0]
    if kind == "detrended":
        values = np.stack([x, y], axis=2)
        knots, scale = u, None
    else:
        values = np.stack([np.diff(x, axis=1), np.diff(y, axis=1)], axis=2)
        knots, scale = (u[1:] + u[:-1]) / 2, np.diff(u)
    k = values.shape[1]
    columns = values.transpose(1, 0, 2).reshape(k, 2 * m)  # run i: columns 2i, 2i + 1
    _, edf, ops = _smooth(knots, columns, scale=scale, smoothing=smoothing)
    return values, edf.reshape(m, 2), ops.reshape(m, 2, k, k)


@dataclass(frozen=True)
class BatchDraws:
    """A control on ``m`` runs of one grid.

    Attributes:
        r: Spearman ρ per run, shape (m,); NaN where undefined (no variation left).
        r_s: the surrogates' ρ, shape (m, n_surrogates); NaN where undefined.
        k: the number of points the control correlates (n, or n − 1 for differences).
        edf: the effective degrees of freedom of x's and y's fits, shape (m, 2).
    """

    r: np.ndarray
    r_s: np.ndarray
    k: int
    edf: np.ndarray


def batch_draws(kind: str, x: np.ndarray, y: np.ndarray, steps: FloatSeq, *,
                seeds: Sequence[int] | np.random.Generator,
                n_surrogates: int = N_SURROGATES) -> BatchDraws:
    """A control on ``m`` runs of one grid at once (for simulations): each run's statistic
    and surrogates exactly as :func:`detrended_correlation` / :func:`partial_first_differences`
    (``covariate="smooth"``, REML) compute them with ``seed=seeds[i]``; or, given one
    generator, with every run's surrogate phases drawn from it (faster, the same law).

    Args:
        kind: one of :data:`KINDS`.
        x, y: shape (m, n), in the order of ``steps``; no missing values.
        steps: shape (n,), distinct and non-negative.
        seeds: one per run.
        n_surrogates: surrogates per run.

    Returns:
        :class:`BatchDraws`.
    """
    _check_choice(kind, KINDS, "kind")
    s = np.asarray(steps, dtype=np.float64)
    order = np.argsort(s, kind="stable")
    xa = np.asarray(x, dtype=np.float64)[:, order]
    ya = np.asarray(y, dtype=np.float64)[:, order]
    return _batch(kind, xa, ya, np.log1p(s[order]), seeds, n_surrogates)


def draws(kind: str, x: FloatSeq, y: FloatSeq, steps: FloatSeq, *, seed: int = 0,
          n_surrogates: int = N_SURROGATES) -> tuple[float, np.ndarray, int] | None:
    """One model's control statistic with its surrogates, for a pooled test: ``(r, r_s,
    k)`` as :func:`batch_draws` gives them for one run (inputs as
    :func:`detrended_correlation` takes them, so the same ``seed`` gives the same ``r``
    and p), or ``None`` where the control is undefined."""
    _check_choice(kind, KINDS, "kind")
    xa, ya, u = _prepare(x, y, steps)
    if xa.size < MIN_POINTS or _constant(xa, ya) is not None:
        return None
    got = _batch(kind, xa[None], ya[None], u, [seed], n_surrogates)
    return None if not math.isfinite(got.r[0]) else (float(got.r[0]), got.r_s[0], got.k)


def _batch(kind: str, xa: np.ndarray, ya: np.ndarray, u: np.ndarray,
           seeds: Sequence[int] | np.random.Generator,
           n_surrogates: int) -> BatchDraws:
    """:func:`batch_draws` on ordered series; vectorised over the runs, each run's
    surrogates drawn from its own generator as :func:`phase_surrogates` draws them."""
    values, edf, ops = _operators(kind, xa, ya, u)
    m, k = values.shape[:2]
    rx = np.matmul(ops[:, 0], values[:, :, 0, None])[..., 0]
    ry = np.matmul(ops[:, 1], values[:, :, 1, None])[..., 0]
    ok = ((np.ptp(rx, axis=1) > _REL_TOL * np.ptp(values[:, :, 0], axis=1))
          & (np.ptp(ry, axis=1) > _REL_TOL * np.ptp(values[:, :, 1], axis=1)))
    r = np.full(m, np.nan)
    r_s = np.full((m, n_surrogates), np.nan)
    if not ok.any():
        return BatchDraws(r, r_s, k, edf)
    idx = np.nonzero(ok)[0]
    rx, ry = rx[idx], ry[idx]
    rank_y = sps.rankdata(ry, axis=1)
    r[idx] = _spearman_ranked(sps.rankdata(rx, axis=1), rank_y)
    if isinstance(seeds, np.random.Generator):
        rotations = _phase_factors(k, n_surrogates * idx.size, seeds).reshape(
            idx.size, n_surrogates, -1)
    else:
        rotations = np.stack([_phase_factors(k, n_surrogates,
                                             np.random.default_rng(int(seeds[i])))
                              for i in idx])  # (m', S, k // 2 + 1)
    spec = np.fft.rfft(rx - rx.mean(axis=1, keepdims=True), axis=1)
    surr = np.fft.irfft(spec[:, None, :] * rotations, n=k, axis=2) + rx.mean(axis=1)[:, None, None]
    surr = np.matmul(surr, ops[idx, 0].transpose(0, 2, 1))  # each row through x's I − S
    r_s[idx] = _spearman_ranked(_continuous_ranks(surr), rank_y[:, None, :])
    return BatchDraws(r, r_s, k, edf)


def _continuous_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks (1..n) along the last axis of values without ties (surrogates are continuous;
    :func:`scipy.stats.rankdata` gives the same there, at twice the cost)."""
    order = np.argsort(a, axis=-1)
    ranks = np.empty(a.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, np.arange(1.0, a.shape[-1] + 1.0), axis=-1)
    return ranks


def _spearman_ranked(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Pearson correlation along the last axis of ranks ``ra`` and ``rb`` (broadcast)."""
    ra = ra - ra.mean(axis=-1, keepdims=True)
    rb = rb - rb.mean(axis=-1, keepdims=True)
    den = np.sqrt((ra * ra).sum(axis=-1) * (rb * rb).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip((ra * rb).sum(axis=-1) / den, -1.0, 1.0)


def _phase_factors(n: int, n_surrogates: int, rng: np.random.Generator) -> np.ndarray:
    """The unit factors :func:`phase_surrogates` multiplies a spectrum by, shape
    (n_surrogates, n // 2 + 1), drawn from ``rng`` in the same order."""
    phases = np.exp(2j * np.pi * rng.random((n_surrogates, n // 2 + 1)))
    phases[:, 0] = 1.0
    if n % 2 == 0:
        phases[:, -1] = rng.choice([-1.0, 1.0], size=n_surrogates)
    return phases


def phase_surrogates(a: np.ndarray, n_surrogates: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Surrogates of ``a`` with its Fourier amplitudes and random phases (Ebisuzaki 1997).

    Args:
        a: a series, shape (n,).
        n_surrogates: how many.
        rng: the generator the phases come from.

    Returns:
        Shape (n_surrogates, n), each with ``a``'s mean and periodogram (so its circular
        autocorrelation). The zero-frequency term is kept; for even ``n`` the Nyquist
        term, which must stay real, gets a random sign.
    """
    n = a.size
    spec = np.fft.rfft(a - a.mean())
    return np.fft.irfft(spec * _phase_factors(n, n_surrogates, rng), n=n, axis=1) + a.mean()


def _surrogate_test(values: np.ndarray, resid_ops: np.ndarray, seed: int,
                    n_surrogates: int, what: str) -> dict:
    """Spearman ρ of the two columns' residuals, its surrogate p-value and interval.

    ``values`` (n, 2) are x and y (or their differences); ``resid_ops`` (2, n, n) are the
    residual operators ``I − S`` of their fits."""
    draws = _surrogate_draws(values, resid_ops, seed, n_surrogates, what)
    if isinstance(draws, str):
        return {"reason": draws}
    r, pearson, r_s = draws
    exceed = int(np.count_nonzero(np.abs(r_s) >= abs(r) - 1e-12))
    lo, hi = surrogate_interval(r, r_s, values.shape[0])
    return {"r": r, "p": surrogate_p(r, r_s, exceed), "pearson_r": pearson, "ci_low": lo,
            "ci_high": hi, "reason": None}


def _surrogate_draws(values: np.ndarray, resid_ops: np.ndarray, seed: int,
                     n_surrogates: int, what: str) -> tuple[float, float, np.ndarray] | str:
    """``(r, pearson_r, r_s)``: the residuals' Spearman and Pearson correlation and the
    Spearman ρ of each surrogate (shape (n_surrogates,)); or why there is none."""
    rx = resid_ops[0] @ values[:, 0]
    ry = resid_ops[1] @ values[:, 1]
    for name, res, raw in (("x", rx, values[:, 0]), ("y", ry, values[:, 1])):
        if np.ptp(res) <= _REL_TOL * np.ptp(raw):
            return f"{name} has no variation left after {what}"
    r = float(_spearman_rows(rx[None, :], ry)[0])
    pearson = float(np.corrcoef(rx, ry)[0, 1])
    rng = np.random.default_rng(seed)
    surr = phase_surrogates(rx, n_surrogates, rng) @ resid_ops[0].T
    return r, pearson, _spearman_ranked(_continuous_ranks(surr), sps.rankdata(ry))


def surrogate_interval(r: float, r_s: np.ndarray, n: int, level: float = 0.95
                       ) -> tuple[float | None, float | None]:
    """An interval for a correlation of autocorrelated series, from its surrogates:
    ``tanh(atanh r ± t · s)``, ``s`` the root mean square of the surrogates' Fisher z
    (their spread carries the series' own autocorrelation, as the p-value's does) and
    ``t`` the Student quantile with ``n − 3`` degrees of freedom (at least 1): a
    heuristic standard error, the null's spread taken for the estimate's, not an
    inversion of the test (an interval can hold 0 beside a p just below 0.05). On
    simulated stationary AR(1) pairs (AR up to 0.8, 19 and 51 checkpoints, couplings 0 to
    0.8) it covered the true Spearman ρ in 0.910–0.980 of runs at level 0.95
    (``bench/bench_inference_designs.py``; ``tests/test_inference.py`` asserts it), where
    a percentile bootstrap over checkpoints covered 0.695–0.86 at AR 0.6 and 0.8 on 51;
    on trending series its coverage has not been tested.

    Returns ``(low, high)``, or ``(None, None)`` when the surrogates have no spread."""
    z_s = np.arctanh(np.clip(np.asarray(r_s, dtype=np.float64), -1 + 1e-12, 1 - 1e-12))
    scale = float(np.sqrt(np.mean(z_s * z_s))) if z_s.size else 0.0
    if scale == 0 or not math.isfinite(scale):
        return None, None
    z = math.atanh(max(-1 + 1e-12, min(1 - 1e-12, r)))
    half = float(sps.t.ppf(0.5 + level / 2, max(n - 3, 1))) * scale
    return math.tanh(z - half), math.tanh(z + half)


def raw_surrogate_interval(x: FloatSeq, y: FloatSeq, steps: FloatSeq, *, seed: int = 0,
                           n_surrogates: int = N_SURROGATES, level: float = 0.95
                           ) -> tuple[float | None, float | None]:
    """:func:`surrogate_interval` of the plain Spearman ρ of ``x`` and ``y`` (one model's
    checkpoints, dropped pairwise where missing, in step order), from phase-randomised
    surrogates of ``x`` itself: an interval that respects the series' autocorrelation,
    which a bootstrap over checkpoints does not. ``(None, None)`` below
    :data:`MIN_POINTS` checkpoints or for a constant series."""
    xa, ya, _ = _prepare(x, y, steps)
    if xa.size < MIN_POINTS or _constant(xa, ya) is not None:
        return None, None
    r = float(_spearman_rows(xa[None, :], ya)[0])
    r_s = _spearman_rows(phase_surrogates(xa, n_surrogates, np.random.default_rng(seed)), ya)
    return surrogate_interval(r, r_s, xa.size, level)


TAIL_MIN = 10  # below this many surrogates at least as extreme, p comes from a fitted tail


def surrogate_p(r: float, r_s: np.ndarray, exceed: int) -> float:
    """Two-sided p of ``r`` against the surrogates' ``r_s``: the count
    ``(1 + exceed) / (1 + len(r_s))`` while at least :data:`TAIL_MIN` surrogates are as
    extreme; beyond, where a count cannot resolve it (its floor 1/(1 + n) would make a
    correction over many tests unpassable), a normal tail fitted to the surrogates' Fisher
    z: ``2·Φ(−|atanh r| / s)``, s the root mean square of ``atanh r*`` (the null is
    centred at 0)."""
    z = np.arctanh(np.clip(r_s, -1 + 1e-12, 1 - 1e-12))
    return tail_p(math.atanh(min(abs(r), 1 - 1e-12)), z, exceed)


def tail_p(z_obs: float, z_s: np.ndarray, exceed: int) -> float:
    """:func:`surrogate_p` on the Fisher-z scale: ``z_obs`` the statistic, ``z_s`` its
    surrogates (centred at 0), ``exceed`` how many have ``|z*| >= |z_obs|``."""
    if exceed >= TAIL_MIN:
        return (1 + exceed) / (1 + z_s.size)
    scale = float(np.sqrt(np.mean(z_s * z_s)))
    if scale == 0:
        return (1 + exceed) / (1 + z_s.size)
    return float(2 * sps.norm.sf(abs(z_obs) / scale))


def _spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman ρ of each row of ``a`` (m, n) with ``b`` (n,); average ranks for ties."""
    ra = sps.rankdata(a, axis=1)
    rb = sps.rankdata(b)
    ra -= ra.mean(axis=1, keepdims=True)
    rb = rb - rb.mean()
    den = np.sqrt((ra * ra).sum(axis=1) * (rb @ rb))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip((ra @ rb) / den, -1.0, 1.0)


def _check_choice(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, not {value!r}")


def _empty(n: int, n_surrogates: int) -> dict:
    return {"r": None, "p": None, "pearson_r": None, "ci_low": None, "ci_high": None,
            "statistic": STATISTIC,
            "p_method": P_METHOD.format(n=n_surrogates), "n": int(n), "edf_x": None,
            "edf_y": None, "reason": None}


def _constant(xa: np.ndarray, ya: np.ndarray) -> str | None:
    if np.ptp(xa) == 0:
        return "x is constant"
    if np.ptp(ya) == 0:
        return "y is constant"
    return None


def _prepare(x: FloatSeq, y: FloatSeq, steps: FloatSeq
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, y and u = log(1 + step), dropped pairwise where any is missing, in step order."""
    arrs = [np.array([np.nan if v is None else v for v in a], dtype=np.float64)
            for a in (x, y, steps)]
    if not arrs[0].shape == arrs[1].shape == arrs[2].shape or arrs[0].ndim != 1:
        raise ValueError("x, y and steps must be one-dimensional and of the same length")
    keep = np.logical_and.reduce([np.isfinite(a) for a in arrs])
    xa, ya, s = (a[keep] for a in arrs)
    if np.any(s < 0):
        raise ValueError("steps must be non-negative")
    order = np.argsort(s, kind="stable")
    xa, ya, s = xa[order], ya[order], s[order]
    if np.any(np.diff(s) == 0):
        raise ValueError("steps must be distinct (one model's checkpoints)")
    return xa, ya, np.log1p(s)


@lru_cache(maxsize=256)
def _penalty_eigen(u: tuple[float, ...], scale: tuple[float, ...] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending; the two of the null space, the lines, set to 0) and
    eigenvectors of the penalty matrix ``K`` of ``g = scale · f``, ``f`` a natural cubic
    spline with knots ``u``, so that the fit is ``ĝ = (I + λK)⁻¹ v``.

    ``K`` of ``f`` is read off SciPy's smoother at λ = 1, ``S₁ = (I + K)⁻¹``; with a scale
    it is ``C⁻¹ K C⁻¹``, ``C = diag(scale)``."""
    ua = np.asarray(u)
    n = ua.size
    smoother = make_smoothing_spline(ua, np.eye(n), lam=1.0)(ua)
    k = np.linalg.inv(smoother) - np.eye(n)
    if scale is not None:
        c = np.asarray(scale)
        k = k / c[:, None] / c[None, :]
    d, vecs = np.linalg.eigh((k + k.T) / 2)
    d[:2] = 0.0
    return np.clip(d, 0.0, None), vecs


def _smooth(u: np.ndarray, values: np.ndarray, scale: np.ndarray | None = None,
            smoothing: str = "reml", max_edf: float | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit ``values[:, j] ≈ scale · f_j(u)`` for each column by penalised least squares,
    ``min Σ (v_i − scale_i f(u_i))² + λ_j ∫ f''²``, each column with its own λ.

    Args:
        u: knots, shape (n,), strictly increasing; n >= 5, else a line is fit.
        values: shape (n, m).
        scale: per-point multiplier of ``f``, shape (n,), positive; ``None`` for ones.
        smoothing: λ by ``"reml"`` (GML) or ``"gcv"``.
        max_edf: if given, λ is raised where needed so that no fit has more effective
            degrees of freedom than this (at least 2, a line).

    Returns:
        ``(lam, edf, resid_ops)``: λ (m,) (``inf`` for a line), the effective degrees of
        freedom ``tr S_λ`` (m,), and the residual operators ``I − S_λ`` (m, n, n), so that
        the residuals are ``resid_ops[j] @ values[:, j]``.
    """
    n, m = values.shape
    c = np.ones(n) if scale is None else np.asarray(scale, dtype=np.float64)
    if n < 5:
        design = np.column_stack([c, c * u])
        op = np.eye(n) - design @ np.linalg.pinv(design)
        return np.full(m, np.inf), np.full(m, 2.0), np.repeat(op[None], m, axis=0)
    d, vecs = _penalty_eigen(tuple(u.tolist()), None if scale is None else tuple(c.tolist()))
    lam = _select_lambda(d, vecs.T @ values, smoothing)
    if max_edf is not None:
        lam = np.maximum(lam, _lambda_for_edf(d, max(float(max_edf), 2.0 + 1e-9)))
    shrink = 1.0 / (1.0 + lam[:, None] * d[None, :])  # (m, n)
    resid_ops = (vecs[None, :, :] * (1.0 - shrink)[:, None, :]) @ vecs.T  # V diag V^T
    return lam, shrink.sum(axis=1), resid_ops


def _lambda_for_edf(d: np.ndarray, edf: float) -> float:
    """The λ at which ``tr S_λ = Σ 1 / (1 + λ d_k)`` equals ``edf`` (bisection in log λ;
    0 when even interpolation has fewer)."""
    if edf >= d.size:
        return 0.0
    pos = d[d > 0]
    lo, hi = math.log(1e-12 / pos.max()), math.log(1e12 / pos.min())
    for _ in range(200):
        mid = (lo + hi) / 2
        if float(np.sum(1.0 / (1.0 + math.exp(mid) * d))) > edf:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


def _select_lambda(d: np.ndarray, z: np.ndarray, smoothing: str) -> np.ndarray:
    """λ per column minimising the criterion, from the penalty's eigenvalues ``d`` (n,)
    and the data's eigen-coordinates ``z`` (n, m).

    REML (GML, Wahba 1985): ``m·log(Σ_k z_k² λd_k/(1+λd_k) / m) + Σ_k log(1 + 1/(λd_k))``
    over the ``m = n − 2`` penalised components; GCV: ``n·RSS / (n − tr S_λ)²``. Searched
    over a log grid from λ = 10⁻³/max d (near interpolation) to 10³/min d (near a line),
    refined by a parabola through the best grid point and its neighbours."""
    n = d.size
    pos = d > 0
    grid = np.linspace(math.log(1e-3 / d[pos].max()), math.log(1e3 / d[pos].min()), _N_LAMBDA)
    lam = np.exp(grid)
    z2 = z * z
    if smoothing == "reml":
        ld = lam[:, None] * d[None, pos]  # (G, k)
        sigma2 = (ld / (1.0 + ld)) @ z2[pos] / pos.sum()  # (G, m)
        with np.errstate(divide="ignore"):
            crit = pos.sum() * np.log(sigma2) + np.log1p(1.0 / ld).sum(axis=1)[:, None]
    else:
        shrink = 1.0 / (1.0 + lam[:, None] * d[None, :])  # (G, n)
        rss = ((1.0 - shrink) ** 2) @ z2
        crit = n * rss / (n - shrink.sum(axis=1))[:, None] ** 2
    crit = np.where(np.isfinite(crit), crit, np.inf)
    best = np.argmin(crit, axis=0)
    chosen = grid[best].copy()
    inner = (best > 0) & (best < _N_LAMBDA - 1)
    if inner.any():
        cols = np.nonzero(inner)[0]
        b = best[cols]
        c0, c1, c2 = crit[b - 1, cols], crit[b, cols], crit[b + 1, cols]
        h = grid[1] - grid[0]
        den = c0 - 2 * c1 + c2
        with np.errstate(invalid="ignore", divide="ignore"):
            shift = np.where(den > 0, 0.5 * h * (c0 - c2) / den, 0.0)
        chosen[cols] += np.clip(np.nan_to_num(shift), -h, h)
    return np.exp(chosen)
