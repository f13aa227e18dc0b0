"""Simulated training runs whose truth is known, for calibrating the confound controls.

A run is a pair of series over checkpoints, a feature and a loss, that share only a
decelerating trend in the training step (the same shape, with different amplitudes and
signs) plus AR(1) noise. With ``coupling = 0`` the two noises are independent, so the
only relation between the series is the shared trend: a control that comes out
significant more often than alpha there is confounded by it. With ``coupling != 0`` the
feature's fluctuations really track the loss's (their noises are correlated with
correlation ``coupling``), which a control must still find.

The trend is, for a step ``s`` (``scale`` in steps):

- ``"power"``: ``g(s) = (1 + s / scale) ** -exponent`` (a power-law loss curve);
- ``"exp"``: ``g(s) = exp(-s / scale)`` (an exponential approach to a plateau);
- a learning-rate schedule's loss curve (:data:`SCHEDULES`): ``"cosine"`` (linear warm-up
  over the first 1 % of steps, then a cosine decay to 10 % of the peak rate: Pythia's
  schedule), ``"cosine_anneal"`` (the same cosine over the first 90 %, then a linear
  anneal to 0), ``"linear_decay"`` (warm-up, then linear to 0). After Tissue et al. 2024
  ("Scaling law with learning rate annealing"), the loss falls as a power law in the
  schedule's forward area ``S1(s) = Σ_{t<s} η_t / η_max`` (steps at the peak rate), and a
  decay of the rate lowers it further, with a lag: ``g(s) = (1 + S1(s) / scale) ** -exponent
  · (1 − ANNEAL_GAIN · D(s))``, ``D(s)`` the fraction of the peak rate already shed,
  smoothed by an exponential window of 2 % of training (the optimiser's memory). The
  product form keeps ``g`` positive. On a log-spaced grid the warm-up is a plateau and the
  anneal a cliff within the last checkpoints: the hard cases for a smoother in log step.

All fall from 1 at step 0 towards 0, the first two ever more slowly. The loss is
``loss_level + loss_amplitude * g(s) + noise * |loss_amplitude| * e_loss`` and the feature
``feature_level + feature_amplitude * g(s) ** feature_exponent
+ noise * |feature_amplitude| * e_feature``, where ``e_loss`` and
``e_feature = coupling * e_loss + sqrt(1 - coupling**2) * e_own`` are stationary AR(1)
processes with unit variance and lag-one autocorrelation ``ar`` **in checkpoint index**
(the measurement noise of consecutive checkpoints, whatever their spacing in steps), or,
with ``ma != 0``, ARMA(1, 1) processes ``e_t = ar e_{t-1} + w_t + ma w_{t-1}`` scaled to unit
variance.
``noise`` is therefore the noise's standard deviation as a fraction of the trend's
amplitude (the trend's total drop).

Pure: draws come only from the NumPy ``Generator`` passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.signal import lfilter

# Step grids of the two published seed studies.
PYTHIA_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000, 5000,
                                 10000, 33000, 66000, 100000, 143000)
LINEAR_STEPS: tuple[int, ...] = tuple(range(0, 5001, 100))
# Pythia's full revision list: steps 0, 1, 2, 4, ..., 512, then every 1,000 to 143,000.
PYTHIA_ALL_STEPS: tuple[int, ...] = (0, *(2 ** k for k in range(10)),
                                     *range(1000, 143001, 1000))
SCHEDULES = ("cosine", "cosine_anneal", "linear_decay")
TRENDS = ("power", "exp", *SCHEDULES)
WARMUP_FRACTION = 0.01  # of the last step
COSINE_FLOOR = 0.1  # cosine decays to this fraction of the peak rate (Pythia's)
ANNEAL_START = 0.9  # cosine_anneal: the final linear anneal starts here
ANNEAL_GAIN = 0.5  # the loss's excess falls by this fraction once the rate is fully shed
ANNEAL_MEMORY = 0.02  # the lag of the anneal's effect, a fraction of training


def trend_shape(steps: Sequence[float] | np.ndarray, *, trend: str = "power",
                scale: float | None = None, exponent: float = 0.5) -> np.ndarray:
    """The decelerating trend ``g(step)``, 1 at step 0 and falling towards 0.

    Args:
        steps: training steps, shape (n,), >= 0.
        trend: one of :data:`TRENDS` (see the module docstring).
        scale: the trend's scale in steps (for a schedule, in steps at the peak rate);
            default ``max(steps) / 100`` for ``"power"`` and the schedules and
            ``max(steps) / 10`` for ``"exp"``.
        exponent: the power law's exponent (``"power"`` and the schedules).

    Returns:
        ``g``, shape (n,), dimensionless.
    """
    s = np.asarray(steps, dtype=np.float64)
    if trend not in TRENDS:
        raise ValueError(f"trend must be one of {TRENDS}, not {trend!r}")
    if scale is None:
        scale = float(s.max()) / (10.0 if trend == "exp" else 100.0)
    if scale <= 0:
        raise ValueError("scale must be positive")
    if trend == "power":
        return (1.0 + s / scale) ** -exponent
    if trend == "exp":
        return np.exp(-s / scale)
    return _schedule_trend(s, trend, scale, exponent)


def learning_rate(steps: Sequence[float] | np.ndarray, schedule: str, total: float
                  ) -> np.ndarray:
    """A schedule's learning rate as a fraction of its peak, at ``steps`` (shape (n,)),
    for a run of ``total`` steps: linear warm-up over :data:`WARMUP_FRACTION` of it, then
    ``"cosine"`` (to :data:`COSINE_FLOOR`), ``"cosine_anneal"`` (cosine to the floor at
    :data:`ANNEAL_START`, then linearly to 0) or ``"linear_decay"`` (linearly to 0)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
    s = np.asarray(steps, dtype=np.float64)
    warm = max(WARMUP_FRACTION * total, 1.0)
    end = ANNEAL_START * total if schedule == "cosine_anneal" else total
    frac = np.clip((s - warm) / max(end - warm, 1.0), 0.0, 1.0)
    if schedule == "linear_decay":
        rate = 1.0 - frac
    else:
        rate = COSINE_FLOOR + (1.0 - COSINE_FLOOR) * 0.5 * (1.0 + np.cos(np.pi * frac))
    if schedule == "cosine_anneal":
        tail = np.clip((s - end) / max(total - end, 1.0), 0.0, 1.0)
        rate = np.where(s > end, COSINE_FLOOR * (1.0 - tail), rate)
    return np.where(s < warm, s / warm, rate)


def _schedule_trend(s: np.ndarray, schedule: str, scale: float, exponent: float
                    ) -> np.ndarray:
    """``g`` of a schedule at steps ``s``: computed on every integer step up to the last
    (the forward area and the lagged decay are sums over steps), then read at ``s``."""
    total = float(s.max())
    every = np.arange(int(math.ceil(total)) + 1, dtype=np.float64)
    rate = learning_rate(every, schedule, total)
    area = np.concatenate([[0.0], np.cumsum(rate[:-1])])  # steps at the peak rate before s
    shed = 1.0 - rate / rate.max() if rate.max() > 0 else np.zeros_like(rate)
    shed = np.where(every < WARMUP_FRACTION * total, 0.0, shed)  # warm-up sheds nothing
    memory = max(ANNEAL_MEMORY * total, 1.0)
    decay = math.exp(-1.0 / memory)
    lagged = lfilter([1.0 - decay], [1.0, -decay], shed)
    g = (1.0 + area / scale) ** -exponent * (1.0 - ANNEAL_GAIN * lagged)
    return np.interp(s, every, g)


def ar1(rng: np.random.Generator, n: int, ar: float, size: int | None = None) -> np.ndarray:
    """Stationary Gaussian AR(1) noise with unit variance: ``e_t = ar e_{t-1} +
    sqrt(1 - ar²) w_t``, ``e_0 ~ N(0, 1)``. Shape (n,), or (size, n) when ``size`` is given."""
    if not -1.0 < ar < 1.0:
        raise ValueError("ar must lie in (-1, 1)")
    shape = (n,) if size is None else (size, n)
    w = rng.standard_normal(shape)
    e = np.empty(shape)
    e[..., 0] = w[..., 0]
    innov = np.sqrt(1.0 - ar * ar)
    for t in range(1, n):
        e[..., t] = ar * e[..., t - 1] + innov * w[..., t]
    return e


def arma11(rng: np.random.Generator, n: int, ar: float, ma: float,
           size: int | None = None) -> np.ndarray:
    """Stationary Gaussian ARMA(1, 1) noise with unit variance: ``e_t = ar e_{t-1} + w_t +
    ma w_{t-1}``, divided by its standard deviation ``sqrt((1 + 2 ar ma + ma²) / (1 −
    ar²))``. Started from 0 and run through a burn-in long enough that the start has
    decayed below 1e-6 (``ar**burn``), which is then dropped. Shape (n,), or (size, n)."""
    if not -1.0 < ar < 1.0:
        raise ValueError("ar must lie in (-1, 1)")
    if not -1.0 < ma < 1.0:
        raise ValueError("ma must lie in (-1, 1)")
    burn = 0 if ar == 0 else int(math.ceil(math.log(1e-6) / math.log(abs(ar))))
    shape = (n,) if size is None else (size, n)
    w = rng.standard_normal((*shape[:-1], burn + n + 1))
    x = w[..., 1:] + ma * w[..., :-1]
    e = lfilter([1.0], [1.0, -ar], x, axis=-1)[..., burn:]
    return e / math.sqrt((1.0 + 2.0 * ar * ma + ma * ma) / (1.0 - ar * ar))


def simulate_run(steps: Sequence[float] | np.ndarray, rng: np.random.Generator, *,
                 noise: float = 0.05, ar: float = 0.5, coupling: float = 0.0,
                 ma: float = 0.0,
                 trend: str = "power", scale: float | None = None, exponent: float = 0.5,
                 loss_amplitude: float = 1.0, loss_level: float = 3.0,
                 feature_amplitude: float = -0.5, feature_level: float = 1.0,
                 feature_exponent: float = 1.0,
                 size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One simulated run (or ``size`` independent runs): a feature and a loss sharing only
    a decelerating trend, plus AR(1) or ARMA(1, 1) noise correlated across the two by ``coupling``.

    Args:
        steps: the checkpoints' training steps, shape (n,), >= 0.
        rng: the NumPy generator all draws come from.
        noise: the noise's standard deviation as a fraction of each series' trend
            amplitude (>= 0).
        ar: the noise's autoregressive coefficient over consecutive checkpoints, in
            (-1, 1) (with ``ma = 0`` its lag-one autocorrelation).
        ma: the noise's moving-average coefficient, in (-1, 1); 0 (the default) gives
            AR(1) noise, drawn exactly as before ARMA(1, 1) was added.
        coupling: the correlation between the feature's and the loss's noise, in [-1, 1];
            0 is the null (no relation beyond the shared trend).
        trend, scale, exponent: the shared trend shape (see :func:`trend_shape`).
        loss_amplitude, loss_level: the loss's trend is ``level + amplitude * g``.
        feature_amplitude, feature_level: the same for the feature (by default half the
            loss's amplitude and of the opposite sign).
        feature_exponent: the feature's trend is ``g ** feature_exponent`` (1: the same
            shape as the loss's; another value keeps it decelerating but not a linear
            function of the loss's trend).
        size: number of independent runs; ``None`` for one.

    Returns:
        ``(feature, loss)``, each of shape (n,), or (size, n) when ``size`` is given.
    """
    if noise < 0:
        raise ValueError("noise must be non-negative")
    if not -1.0 <= coupling <= 1.0:
        raise ValueError("coupling must lie in [-1, 1]")
    g = trend_shape(steps, trend=trend, scale=scale, exponent=exponent)
    n = g.size
    if ma == 0:
        e_loss = ar1(rng, n, ar, size)
        e_own = ar1(rng, n, ar, size)
    else:
        e_loss = arma11(rng, n, ar, ma, size)
        e_own = arma11(rng, n, ar, ma, size)
    e_feature = coupling * e_loss + np.sqrt(1.0 - coupling * coupling) * e_own
    loss = loss_level + loss_amplitude * g + noise * abs(loss_amplitude) * e_loss
    feature = (feature_level + feature_amplitude * g ** feature_exponent
               + noise * abs(feature_amplitude) * e_feature)
    return feature, loss
