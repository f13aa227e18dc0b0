"""Inference with the right unit: pooled tests over models, each test's calibration on its
own design, and the smallest association it could have found.

**Pooled over models** (:func:`pooled_test`). Checkpoints of one run are autocorrelated
and models are the independent units, so a pooled test is built from each model's own
calibrated statistic, not from the checkpoints thrown together: a fixed-effect
meta-analysis of the within-model detrended (or partial-first-difference) correlations.
The pooled statistic is the weighted mean of the models' Fisher z,
``Z = Σ_m w_m atanh(r_m) / Σ_m w_m`` with ``w_m = k_m − 3`` (k_m the points the control
correlates in model m), and its null distribution comes from the models' own surrogates:
the b-th surrogate value of the pool is ``Z*_b = Σ_m w_m atanh(r*_{m,b}) / Σ_m w_m``, the
models' surrogates drawn independently, as the models are. Because each model's
surrogates carry that model's autocorrelation and trend fit, the pooled null inherits
the within-model tests' calibration, with two models as with more; it tests the global
null that no model's fluctuations track the loss, and the mean direction it reports is
the models' consensus (opposite signs cancel). One thing does not average out: a shared
trend that the smoother leaves a little of in every model biases every model's z the same
way, so the pooled test's excess over α grows with the number of models (in one
reviewer's simulation, 0.06-0.09 with 3 models and 0.09-0.11 with 10, on the designs
where the within-model excess is largest). The pooled test's own design check simulates
the pooled test, and the bench's pooled column shows it for 3 models. The p-value is
:func:`toposig.analysis.trend_controls.tail_p` of ``Z`` against ``Z*`` and the interval
``tanh(Z ± 1.96 s)``, s the root mean square of ``Z*``. What it is not: a random-effects
statement about models not in the study, which would need the between-model spread and
more models than a suite has (the pooled raw, partial, first-difference and
beyond-baseline tests of :mod:`toposig.analysis.controls`, which throw the checkpoints
together, are kept as descriptions and flagged uncalibrated).

**Calibration and power on the run's own design** (:func:`fit_design`,
:func:`simulate_design`, :func:`design_check`). A control calibrated on one grid and trend
may fail on another, so each test is tried on simulations of its own run: both series'
trends are the REML smoothing splines the detrended control fits (in log(1 + step)), with
their flexibility capped at ``max(5, n / 3)`` effective degrees of freedom, and their noise
is Gaussian AR(1) with the residuals' standard deviation (``sqrt(RSS / (n − edf))``) and
lag-one autocorrelation (clipped to [0, 0.9]). The cap is there because REML undersmooths
under autocorrelated noise (Opsomer, Wang & Yang 2001, Statist. Sci. 16:134) and, on
nearly noise-free series (a held-out loss, a feature averaged over many texts), goes all
the way to interpolation: the fit then holds the noise, and a simulation from it would
have none. Even so, the residuals of a smoother have lost the noise's slow part: on runs
simulated with AR 0.5 the fitted lag-one autocorrelation was 0.02-0.27 and the fitted
standard deviation 0.68-0.87 of the true one. The simulations therefore have less
autocorrelated noise than the run: the power they give is optimistic (the true minimum
detectable coupling is larger, 0.50 against 0.45 fitted in one check) and their null
rate can look better than the run's. Read the MDC as a lower bound. Under the null the
two noises are
independent; with a coupling c they are correlated with correlation c (``e_x = c e_y +
sqrt(1 − c²) e_own``), the same shared fluctuation as in
:mod:`toposig.analysis.simulate`. The control is run on :data:`NULL_RUNS` null runs and
:data:`POWER_RUNS` runs at each coupling of :data:`COUPLINGS` (common random numbers across
couplings, seeded), and the result says

- the **null rate**: the share of null runs with p < α (among those the design rule
  does not rule out). A test whose null rate is above
  α with a one-sided binomial p below :data:`CALIBRATION_P` is **uncalibrated for this
  design** and is not reported as significant;
- the **power** at each coupling and the **minimum detectable coupling** (MDC): the
  smallest coupling found with 80 % power, linearly interpolated between the couplings
  tried (``None``: above the largest), at α and at the Holm family's strictest level
  (α / number of tests), so that a null reads "no association above X": X is where the
  test's simulated power reaches 80 %, not a confidence bound.

The simulations use :data:`DESIGN_SURROGATES` surrogates per run, so their p below 0.11
comes from the fitted normal tail, while a real test's (999 surrogates) is counted down
to 0.011: on four 51-point designs the two gave null rates of 0.065-0.075 and
0.058-0.080.

What the simulation cannot see: a feature of the true trend that the spline smoothed
away on the real data is noise to it (it inflates the fitted noise instead), so the check
is a lower bound on the trend's difficulty; the schedule table of
``bench/bench_inference_designs.py`` covers the designs where that matters.

Pure: arrays in, records out; draws from seeded NumPy generators.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from toposig.analysis import simulate, trend_controls
from toposig.defaults import NULL_RUNS
from toposig.records.controlled import DesignCheck

ALPHA = 0.05
POWER = 0.8
POWER_RUNS = 50
COUPLINGS = (0.3, 0.5, 0.7, 0.9)
DESIGN_SURROGATES = 99
CALIBRATION_P = 0.01
MAX_AR = 0.9
MIN_EDF_CAP = 5.0  # the design's trend has at most max(5, n / 3) degrees of freedom
CALIBRATED = "calibrated"
UNCALIBRATED = "uncalibrated for this design"
LATE_FRACTION = 0.75  # "late training": steps above this fraction of the last
LATE_MIN = 3  # checkpoints a grid needs there to resolve a late change of the trend
INTERPOLATES = 1.0  # a fit interpolates when its edf >= points - this
NOT_CALIBRATED_POOLED = ("uncalibrated: checkpoints of several models treated as "
                         "independent units")
NOT_CALIBRATED_TREND = ("uncalibrated: shared trends pass it in simulated null runs "
                        "(bench/bench_controls_calibration.py)")


@dataclass(frozen=True)
class Design:
    """One model's pair of series as the simulations reproduce them.

    Attributes:
        steps: the checkpoints' steps, shape (n,), increasing.
        trend_x, trend_y: the fitted trends, shape (n,), in the series' units.
        sd_x, sd_y: the residual noise's standard deviation, in the series' units.
        ar_x, ar_y: the residual noise's lag-one autocorrelation, in [0, MAX_AR].
    """

    steps: np.ndarray
    trend_x: np.ndarray
    trend_y: np.ndarray
    sd_x: float
    sd_y: float
    ar_x: float
    ar_y: float

    def summary(self) -> dict[str, float]:
        """The fitted noise, for the record: ``sd_x``, ``sd_y`` (in the series' units),
        ``ar_x``, ``ar_y``."""
        return {"sd_x": self.sd_x, "sd_y": self.sd_y, "ar_x": self.ar_x, "ar_y": self.ar_y}

    def simulate(self, couplings: Sequence[float], runs: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``runs`` simulated pairs at each coupling, with the same noise draws for every
        coupling: shapes (len(couplings), runs, n) each (x, y)."""
        n = self.steps.size
        e_y = simulate.ar1(rng, n, self.ar_y, runs)
        e_own = simulate.ar1(rng, n, self.ar_x, runs)
        c = np.asarray(couplings, dtype=np.float64)[:, None, None]
        e_x = c * e_y[None] + np.sqrt(1.0 - c * c) * e_own[None]
        x = self.trend_x + self.sd_x * e_x
        y = np.broadcast_to(self.trend_y + self.sd_y * e_y, x.shape)
        return x, np.array(y)


def late_training_resolved(steps: Sequence[float] | np.ndarray) -> bool:
    """Whether a grid holds at least :data:`LATE_MIN` checkpoints in the last quarter of
    training (steps above :data:`LATE_FRACTION` of the last): a log-spaced grid such as
    Pythia's 19 (one checkpoint there) leaves a learning-rate schedule's anneal, or any
    late change of the trend, to one or two points."""
    s = np.asarray(steps, dtype=np.float64)
    return int(np.sum(s > LATE_FRACTION * s.max())) >= LATE_MIN


def design_rule(kind: str, steps: Sequence[float] | np.ndarray, edf: Sequence[float],
                k: int) -> str | None:
    """Why a control cannot be calibrated on this design, from the simulations of
    ``bench/bench_inference_designs.py`` (``None`` when nothing rules it out): on a grid
    that does not resolve late training (:func:`late_training_resolved`), the partial
    first differences reject too often whatever the noise, and the detrended control
    does once its trend fit interpolates (a nearly noise-free series, ``edf`` of x's or
    y's fit within :data:`INTERPOLATES` of the ``k`` points): its residuals are then the
    series' roughest components, where a shared trend the grid cannot resolve and a
    real coupling look the same (13–24 % of null runs on Pythia's 19 checkpoints with an
    exponential trend or a learning-rate schedule at 0.5 % noise)."""
    if late_training_resolved(steps):
        return None
    if kind == "pfd":
        return (f"fewer than {LATE_MIN} checkpoints in the last quarter of training: first "
                "differences there span the trend's late change")
    if max(edf) >= k - INTERPOLATES:
        return (f"the trend fit interpolates (edf {max(edf):.1f} of {k}) and fewer than "
                f"{LATE_MIN} checkpoints lie in the last quarter of training: a late "
                "change of the shared trend and a coupling look the same")
    return None


def fit_design(x: trend_controls.FloatSeq, y: trend_controls.FloatSeq,
               steps: trend_controls.FloatSeq) -> Design | None:
    """The design of one model's feature ``x`` and target ``y`` (shape (n,) each, missing
    values dropped pairwise): their REML trends in log(1 + step) and residual noise.
    ``None`` with fewer than :data:`toposig.analysis.trend_controls.MIN_POINTS` checkpoints
    or a constant series."""
    xa, ya, s = trend_controls.paired_series(x, y, steps)
    n = xa.size
    if n < trend_controls.MIN_POINTS or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return None
    values = np.column_stack([xa, ya])
    trend, edf = trend_controls.trend_fit(s, values, max_edf=max(MIN_EDF_CAP, n / 3))
    resid = values - trend
    sd = np.sqrt((resid * resid).sum(axis=0) / np.maximum(n - edf, 1.0))
    ar = []
    for j in range(2):
        den = float(resid[:, j] @ resid[:, j])
        lag = float(resid[1:, j] @ resid[:-1, j]) / den if den > 0 else 0.0
        ar.append(min(max(lag, 0.0), MAX_AR))
    return Design(s, trend[:, 0], trend[:, 1], float(sd[0]), float(sd[1]), ar[0], ar[1])


@dataclass(frozen=True)
class Draws:
    """A control's statistic on simulated runs of one design, with its surrogates.

    Attributes:
        couplings: the couplings simulated, the null (0) first, shape (L,).
        r: Spearman ρ per coupling and run, shape (L, R); NaN where undefined.
        z_s: the surrogates' Fisher z, shape (L, R, S).
        k: the number of points the control correlates.
        flagged: whether :func:`design_rule` rules each run's test out, shape (L, R).
    """

    couplings: tuple[float, ...]
    r: np.ndarray
    z_s: np.ndarray
    k: int
    flagged: np.ndarray

    def p_values(self) -> np.ndarray:
        """Two-sided p per coupling and run, shape (L, R), as the real test computes it
        (NaN where undefined)."""
        z = np.arctanh(np.clip(self.r, -1 + 1e-12, 1 - 1e-12))
        return _tail_p(z, self.z_s)

    def reported(self, alpha: float = ALPHA) -> np.ndarray:
        """Whether each run would be reported significant at ``alpha``: p < alpha and not
        ruled out by :func:`design_rule`; NaN where undefined. Shape (L, R)."""
        p = self.p_values()
        out = ((p < alpha) & ~self.flagged).astype(np.float64)
        return np.where(np.isfinite(p), out, np.nan)


def _tail_p(z: np.ndarray, z_s: np.ndarray) -> np.ndarray:
    """:func:`toposig.analysis.trend_controls.tail_p` over arrays: ``z`` (...), ``z_s``
    (..., S)."""
    exceed = np.sum(np.abs(z_s) >= np.abs(z)[..., None] - 1e-12, axis=-1)
    counted = (1 + exceed) / (1 + z_s.shape[-1])
    scale = np.sqrt(np.mean(z_s * z_s, axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = 2 * sps.norm.sf(np.abs(z) / scale)
    tail = np.where(scale > 0, tail, counted)
    out = np.where(exceed >= trend_controls.TAIL_MIN, counted, tail)
    return np.where(np.isfinite(z), out, np.nan)


def simulate_design(design: Design, kind: str, seed: int, *, null_runs: int = NULL_RUNS,
                    power_runs: int = POWER_RUNS, couplings: Sequence[float] = COUPLINGS,
                    n_surrogates: int = DESIGN_SURROGATES) -> Draws:
    """Run control ``kind`` (``"detrended"`` or ``"pfd"``) on simulations of ``design``:
    ``null_runs`` at coupling 0 and ``power_runs`` at each of ``couplings``, the first
    ``power_runs`` null runs' noise reused at every coupling. The same ``seed`` (and
    design) gives the same draws, whichever control is run."""
    rng = np.random.default_rng(seed)
    levels = (0.0, *couplings)
    x, y = design.simulate(levels, max(null_runs, power_runs), rng)
    parts = []
    for j in range(len(levels)):
        runs = null_runs if j == 0 else power_runs
        phases = np.random.default_rng([seed, 1])  # the same surrogates at every coupling
        got = trend_controls.batch_draws(kind, x[j, :runs], y[j, :runs], design.steps,
                                         seeds=phases, n_surrogates=n_surrogates)
        parts.append(_as_draws(kind, design.steps, levels[j], got))
    return _stack(parts)


def _as_draws(kind: str, steps: np.ndarray, coupling: float,
              got: trend_controls.BatchDraws) -> Draws:
    """One coupling's batch as :class:`Draws` of one level, with :func:`design_rule`
    applied to each run."""
    z_s = np.arctanh(np.clip(got.r_s, -1 + 1e-12, 1 - 1e-12))
    flagged = np.array([design_rule(kind, steps, e, got.k) is not None for e in got.edf])
    return Draws((coupling,), got.r[None], z_s[None], got.k, flagged[None])


def _stack(parts: Sequence[Draws]) -> Draws:
    """Levels of possibly different run counts stacked, padded with undefined runs."""
    width = max(d.r.shape[1] for d in parts)
    n_s = parts[0].z_s.shape[2]
    r = np.full((len(parts), width), np.nan)
    z_s = np.full((len(parts), width, n_s), np.nan)
    flagged = np.zeros((len(parts), width), dtype=bool)
    for j, d in enumerate(parts):
        m = d.r.shape[1]
        r[j, :m], z_s[j, :m], flagged[j, :m] = d.r[0], d.z_s[0], d.flagged[0]
    return Draws(tuple(d.couplings[0] for d in parts), r, z_s, parts[0].k, flagged)


def design_check(draws: Draws, *, alpha: float = ALPHA, holm_tests: int = 1,
                 rule: str | None = None) -> DesignCheck:
    """Null rate, calibration status, power and minimum detectable coupling of a test
    from its simulated ``draws``; ``rule`` (:func:`design_rule` on the real data) makes it
    uncalibrated whatever the simulations say."""
    at_alpha = draws.reported(alpha)
    at_holm = draws.reported(alpha / max(holm_tests, 1))
    # power: every run, a run ruled out finding nothing (what a user gets); the null rate:
    # among the runs not ruled out, as the real test is reported only when it is not
    rates = [_rate(row) for row in at_alpha]
    rates_holm = [_rate(row) for row in at_holm]
    null = at_alpha[0][np.isfinite(at_alpha[0]) & ~draws.flagged[0]]
    rates[0] = float(np.mean(null)) if null.size else math.nan
    k = int(np.sum(null))
    why = rule
    if why is None and null.size and sps.binom.sf(k - 1, null.size, alpha) < CALIBRATION_P:
        why = (f"{k} of {null.size} simulated null runs of this design significant at "
               f"{alpha:g} (binomial p < {CALIBRATION_P:g})")
    levels = [float(c) for c in draws.couplings]
    return DesignCheck(
        null_rate=rates[0], null_runs=int(null.size),
        status=UNCALIBRATED if why else CALIBRATED, why=why,
        power={f"{c:g}": v for c, v in zip(levels[1:], rates[1:], strict=True)},
        mdc=minimum_detectable(levels, rates),
        power_holm={f"{c:g}": v for c, v in zip(levels[1:], rates_holm[1:], strict=True)},
        mdc_holm=minimum_detectable(levels, rates_holm), holm_tests=holm_tests)


def _rate(row: np.ndarray) -> float:
    ok = row[np.isfinite(row)]
    return float(np.mean(ok)) if ok.size else math.nan


def minimum_detectable(couplings: Sequence[float], rates: Sequence[float],
                       power: float = POWER) -> float | None:
    """The smallest coupling whose rejection rate reaches ``power``, linearly
    interpolated between the couplings tried (the null first); ``None`` when none does,
    or when the null itself does (a test that rejects everything detects nothing)."""
    if rates and math.isfinite(rates[0]) and rates[0] >= power:
        return None
    prev_c, prev_r = None, None
    for c, r in zip(couplings, rates, strict=True):
        if math.isfinite(r) and r >= power:
            if prev_c is None or prev_r is None or not math.isfinite(prev_r) or r == prev_r:
                return float(c)
            return float(prev_c + (power - prev_r) / (r - prev_r) * (c - prev_c))
        prev_c, prev_r = c, r
    return None


@dataclass(frozen=True)
class PooledResult:
    """A fixed-effect pooled test of per-model control statistics.

    Attributes:
        r: ``tanh`` of the weighted mean Fisher z (the models' consensus correlation).
        p: two-sided, against the combined surrogates.
        ci_low, ci_high: ``tanh(Z ± 1.96 s)``.
        n_models: models combined.
        weights: per model ``k_m − 3``.
    """

    r: float
    p: float
    ci_low: float
    ci_high: float
    n_models: int
    weights: tuple[float, ...]


def pooled_test(rs: Sequence[float], surrogates: Sequence[np.ndarray],
                ks: Sequence[int]) -> PooledResult | None:
    """Combine per-model statistics ``rs`` (Spearman ρ of one control), their surrogates
    (each shape (S,), the same S) and their point counts ``ks`` into one test whose unit is
    the model (module docstring). ``None`` with fewer than two models."""
    if len(rs) < 2:
        return None
    w = np.maximum(np.asarray(ks, dtype=np.float64) - 3.0, 1.0)
    z = np.arctanh(np.clip(np.asarray(rs, dtype=np.float64), -1 + 1e-12, 1 - 1e-12))
    z_s = np.arctanh(np.clip(np.stack(surrogates), -1 + 1e-12, 1 - 1e-12))
    big_z = float(w @ z / w.sum())
    null = w @ z_s / w.sum()
    p = float(_tail_p(np.asarray(big_z), null))
    scale = float(np.sqrt(np.mean(null * null)))
    return PooledResult(math.tanh(big_z), p, math.tanh(big_z - 1.96 * scale),
                        math.tanh(big_z + 1.96 * scale), len(rs), tuple(w.tolist()))


def pooled_draws(draws: Sequence[Draws]) -> Draws:
    """The pooled statistic on simulated runs: model m's run j combined with every other
    model's run j (independent designs, so independent runs), level by level. A model
    whose run is ruled out by :func:`design_rule` (or undefined) is left out of that run's
    pool, as the real pooled test leaves it out; a pool of fewer than two is undefined."""
    w = np.array([max(d.k - 3.0, 1.0) for d in draws])
    z = np.stack([np.arctanh(np.clip(d.r, -1 + 1e-12, 1 - 1e-12)) for d in draws])
    use = np.stack([~d.flagged for d in draws]) & np.isfinite(z)  # (M, L, R)
    weights = w[:, None, None] * use
    total = weights.sum(axis=0)
    z0 = np.where(use, z, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        big_z = (weights * z0).sum(axis=0) / total
        null = np.einsum("mlr,mlrs->lrs", weights,
                         np.nan_to_num(np.stack([d.z_s for d in draws]))) / total[..., None]
    undefined = use.sum(axis=0) < 2
    big_z = np.where(undefined, np.nan, big_z)
    return Draws(draws[0].couplings, np.tanh(big_z), null, int(sum(d.k for d in draws)),
                 np.zeros(big_z.shape, dtype=bool))


@dataclass(frozen=True)
class CellResult:
    """One simulated design's outcome for one control.

    Attributes:
        within: the first model's test on every run.
        pooled: the pooled test over all models on every run.
        couplings: the null (0) first, shape (L,).
    """

    within: Draws
    pooled: Draws
    couplings: tuple[float, ...]


def simulate_cell(steps: Sequence[float], *, trend: str, noise: float, ar: float,
                  ma: float = 0.0, n_models: int = 3, runs: int = 100,
                  couplings: Sequence[float] = (), seed: int = 0,
                  n_surrogates: int = DESIGN_SURROGATES) -> dict[str, CellResult]:
    """Null (and coupled) runs of one design from :mod:`toposig.analysis.simulate`, for each
    of the detrended and partial-first-difference controls, within one model and pooled
    over ``n_models`` models of different sizes (the loss's and the feature's levels and
    amplitudes differ by model; the trend, grid and noise are the design's).

    Args:
        steps: the grid, shape (n,).
        trend, noise, ar, ma: as :func:`toposig.analysis.simulate.simulate_run`.
        n_models: models pooled.
        runs: runs per coupling.
        couplings: couplings besides the null.
        seed: seeds everything.
        n_surrogates: surrogates per run.

    Returns:
        ``{"detrended": CellResult, "partial_first_differences": CellResult}``.
    """
    levels = (0.0, *couplings)
    out: dict[str, list[list[Draws]]] = {kind: [] for kind in trend_controls.KINDS}
    for m in range(n_models):
        x = np.empty((len(levels), runs, len(steps)))
        y = np.empty_like(x)
        for j, c in enumerate(levels):
            # the same noise draws at every coupling (common random numbers)
            rng = np.random.default_rng([seed, m])
            x[j], y[j] = simulate.simulate_run(
                steps, rng, noise=noise, ar=ar, ma=ma, coupling=c, trend=trend,
                loss_level=3.0 - 0.3 * m, loss_amplitude=1.0 + 0.2 * m,
                feature_amplitude=-0.5 * (1.0 + 0.3 * m), size=runs)
        for kind in trend_controls.KINDS:
            out[kind].append(_stack([
                _as_draws(kind, np.asarray(steps, dtype=np.float64), levels[j],
                          trend_controls.batch_draws(
                              kind, x[j], y[j], steps, n_surrogates=n_surrogates,
                              seeds=np.random.default_rng([seed, m, j, 7])))
                for j in range(len(levels))]))
    return {_KIND_CONTROL[kind]: CellResult(models[0], pooled_draws(models), levels)
            for kind, models in out.items()}


_KIND_CONTROL = {"detrended": "detrended", "pfd": "partial_first_differences"}
