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
- ``"exp"``: ``g(s) = exp(-s / scale)`` (an exponential approach to a plateau).

Both fall from 1 at step 0 towards 0, ever more slowly. The loss is
``loss_level + loss_amplitude * g(s) + noise * |loss_amplitude| * e_loss`` and the feature
``feature_level + feature_amplitude * g(s) ** feature_exponent
+ noise * |feature_amplitude| * e_feature``, where ``e_loss`` and
``e_feature = coupling * e_loss + sqrt(1 - coupling**2) * e_own`` are stationary AR(1)
processes with unit variance and lag-one autocorrelation ``ar`` **in checkpoint index**
(the measurement noise of consecutive checkpoints, whatever their spacing in steps).
``noise`` is therefore the noise's standard deviation as a fraction of the trend's
amplitude (the trend's total drop).

Pure: draws come only from the NumPy ``Generator`` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Step grids of the two published seed studies.
PYTHIA_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000, 5000,
                                 10000, 33000, 66000, 100000, 143000)
LINEAR_STEPS: tuple[int, ...] = tuple(range(0, 5001, 100))
TRENDS = ("power", "exp")


def trend_shape(steps: Sequence[float] | np.ndarray, *, trend: str = "power",
                scale: float | None = None, exponent: float = 0.5) -> np.ndarray:
    """The decelerating trend ``g(step)``, 1 at step 0 and falling towards 0.

    Args:
        steps: training steps, shape (n,), >= 0.
        trend: ``"power"`` or ``"exp"`` (see the module docstring).
        scale: the trend's scale in steps; default ``max(steps) / 100`` for ``"power"``
            and ``max(steps) / 10`` for ``"exp"``.
        exponent: the power law's exponent (``"power"`` only).

    Returns:
        ``g``, shape (n,), dimensionless.
    """
    s = np.asarray(steps, dtype=np.float64)
    if trend not in TRENDS:
        raise ValueError(f"trend must be one of {TRENDS}, not {trend!r}")
    if scale is None:
        scale = float(s.max()) / (100.0 if trend == "power" else 10.0)
    if scale <= 0:
        raise ValueError("scale must be positive")
    if trend == "power":
        return (1.0 + s / scale) ** -exponent
    return np.exp(-s / scale)


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


def simulate_run(steps: Sequence[float] | np.ndarray, rng: np.random.Generator, *,
                 noise: float = 0.05, ar: float = 0.5, coupling: float = 0.0,
                 trend: str = "power", scale: float | None = None, exponent: float = 0.5,
                 loss_amplitude: float = 1.0, loss_level: float = 3.0,
                 feature_amplitude: float = -0.5, feature_level: float = 1.0,
                 feature_exponent: float = 1.0,
                 size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One simulated run (or ``size`` independent runs): a feature and a loss sharing only
    a decelerating trend, plus AR(1) noise correlated across the two by ``coupling``.

    Args:
        steps: the checkpoints' training steps, shape (n,), >= 0.
        rng: the NumPy generator all draws come from.
        noise: the noise's standard deviation as a fraction of each series' trend
            amplitude (>= 0).
        ar: the noise's lag-one autocorrelation over consecutive checkpoints, in (-1, 1).
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
    e_loss = ar1(rng, n, ar, size)
    e_own = ar1(rng, n, ar, size)
    e_feature = coupling * e_loss + np.sqrt(1.0 - coupling * coupling) * e_own
    loss = loss_level + loss_amplitude * g + noise * abs(loss_amplitude) * e_loss
    feature = (feature_level + feature_amplitude * g ** feature_exponent
               + noise * abs(feature_amplitude) * e_feature)
    return feature, loss
