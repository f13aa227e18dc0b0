"""Across seeds at a fixed point of training: a test that shared trends cannot fake.

Within one training run every quantity that drifts correlates with the loss. Across an
ensemble of seeds of the same model, taken at the same step, every run has had the same
training: a trend shared by all of them cannot make a feature's value predict which seed
ends with the lower loss. For a fraction ``f`` of training this module asks, over the
seeds of one model size:

- does the feature's value at ``f`` predict the final held-out loss once the loss at
  ``f`` is known, and once the best non-topological baseline of its space at ``f`` is
  known too? (:func:`across_seeds`: the partial Spearman correlation of the feature with
  the final loss given both, with a percentile bootstrap interval over seeds);
- does it predict better than that baseline? (a paired bootstrap of the difference of
  their absolute partial correlations with the final loss given the loss at ``f``);
- how far apart do seeds end? (:func:`seed_spread`: the seed-to-seed standard deviation
  of a quantity, a noise floor next to the text-resampling one).

Pure functions on arrays; the seeds are the independent units, so resampling them is a
valid bootstrap (unlike resampling the autocorrelated checkpoints of one run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

N_BOOTSTRAP = 2000
LEVEL = 0.95
MIN_SEEDS = 5  # below this the partial correlation with two controls has df < 1
FRACTIONS = (0.2, 0.3, 0.5)


@dataclass(frozen=True)
class AcrossSeeds:
    """One feature of one model size at one fraction of training, over its seeds.

    Attributes:
        r: partial Spearman correlation, over seeds, of the feature at the fraction with
            the final loss, given the loss at the fraction and ``baseline`` at the
            fraction (given the loss alone when there is no baseline); ``None`` when
            undefined (too few seeds, or a constant series).
        ci_low, ci_high: its percentile bootstrap interval (seeds resampled with
            replacement; resamples where it is undefined are left out; ``None`` when
            fewer than half are usable).
        r_loss_only: the partial correlation given the loss at the fraction alone.
        baseline: the baseline controlled for (``None`` when none is given).
        baseline_r: the baseline's own partial correlation with the final loss given the
            loss at the fraction.
        advantage, advantage_low, advantage_high: ``|r_loss_only| - |baseline_r|`` and its
            paired bootstrap interval (the same resamples for both).
        n_seeds: the seeds with every value present.
    """

    r: float | None
    ci_low: float | None
    ci_high: float | None
    r_loss_only: float | None
    baseline: str | None
    baseline_r: float | None
    advantage: float | None
    advantage_low: float | None
    advantage_high: float | None
    n_seeds: int

    @property
    def beyond_loss(self) -> bool:
        """The interval of ``r`` excludes 0: the feature predicts the final loss beyond
        the loss (and the baseline) at the fraction."""
        return (self.ci_low is not None and self.ci_high is not None
                and (self.ci_low > 0 or self.ci_high < 0))


def _complete(*columns: Sequence[float | None]) -> np.ndarray:
    """The rows (seeds) where every column is a finite number, as a (seeds, columns)
    float array."""
    a = np.array([[np.nan if v is None else float(v) for v in c] for c in columns]).T
    return a[np.isfinite(a).all(axis=1)]


def _ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis."""
    return sps.rankdata(a, axis=-1)


def partial_spearman_rows(x: np.ndarray, y: np.ndarray, controls: np.ndarray) -> np.ndarray:
    """:func:`toposig.analysis.controls.partial_spearman`'s r for each row of a batch.

    Args:
        x, y: (B, n) values; controls: (B, c, n), c >= 1.

    Returns:
        (B,) correlations, NaN where undefined (x or y explained by the controls' ranks).
    """
    n = x.shape[-1]
    design = np.concatenate([np.ones(controls.shape[:1] + (1, n)), _ranks(controls)], axis=1)
    a = np.swapaxes(design, 1, 2)  # (B, n, c + 1)
    proj = a @ np.linalg.pinv(a)  # (B, n, n): projection on the controls' span
    rx, ry = _ranks(x), _ranks(y)
    res_x = rx - np.einsum("bij,bj->bi", proj, rx)
    res_y = ry - np.einsum("bij,bj->bi", proj, ry)
    den = np.sqrt((res_x * res_x).sum(axis=1) * (res_y * res_y).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip((res_x * res_y).sum(axis=1) / den, -1.0, 1.0)
    return np.where(den < 1e-9 * n, np.nan, r)


def _interval(values: np.ndarray) -> tuple[float | None, float | None]:
    """Percentile interval of the finite values; ``None`` when fewer than half are."""
    got = values[np.isfinite(values)]
    if got.size < values.size / 2:
        return None, None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(got, [tail, 100 - tail])
    return float(lo), float(hi)


def _value(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def across_seeds(feature: Sequence[float | None], final_loss: Sequence[float | None],
                 loss_at: Sequence[float | None],
                 baseline: Sequence[float | None] | None = None, *,
                 baseline_name: str | None = None, n_bootstrap: int = N_BOOTSTRAP,
                 seed: int = 0) -> AcrossSeeds:
    """The feature's value at a fraction of training against the final loss, over seeds.

    Args:
        feature: the feature at the fraction, one value per seed (``None`` = missing).
        final_loss: each seed's final held-out loss (nats), same order.
        loss_at: each seed's held-out loss at the fraction (nats).
        baseline: the non-topological baseline at the fraction, or ``None``.
        baseline_name: its name, for the record.
        n_bootstrap: resamples of the seeds.
        seed: the bootstrap's random seed.
    """
    with_base = baseline is not None
    columns = [feature, final_loss, loss_at] + ([baseline] if with_base else [])
    block = _complete(*columns)  # (seeds, 3 or 4)
    n = block.shape[0]
    name = baseline_name if with_base else None
    if n < MIN_SEEDS:
        return AcrossSeeds(None, None, None, None, name, None, None, None, None, n)
    rng = np.random.default_rng(seed)
    idx = np.vstack([np.arange(n)[None], rng.integers(0, n, size=(n_bootstrap, n))])
    b = np.swapaxes(block[idx], 1, 2)  # (1 + B, columns, seeds); row 0 is the data
    feat, final, loss = b[:, 0], b[:, 1], b[:, 2:3]
    r_loss = partial_spearman_rows(feat, final, loss)
    if with_base:
        r = partial_spearman_rows(feat, final, b[:, 2:4])
        r_base = partial_spearman_rows(b[:, 3], final, loss)
        advantage = np.abs(r_loss) - np.abs(r_base)
        a_lo, a_hi = _interval(advantage[1:])
    else:
        r, r_base, advantage = r_loss, np.full_like(r_loss, np.nan), np.full_like(r_loss,
                                                                                  np.nan)
        a_lo = a_hi = None
    lo, hi = _interval(r[1:])
    return AcrossSeeds(_value(r[0]), lo, hi, _value(r_loss[0]), name, _value(r_base[0]),
                       _value(advantage[0]), a_lo, a_hi, n)


def fraction_step(steps: Sequence[int], fraction: float) -> int:
    """The checkpoint step nearest to ``fraction`` of the last one (the earlier of two
    equally near), from a run's checkpoint steps."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    ordered = sorted(steps)
    if not ordered:
        raise ValueError("no checkpoint steps")
    goal = fraction * ordered[-1]
    return min(ordered, key=lambda s: (abs(s - goal), s))


def seed_spread(values: Sequence[float | None]) -> float | None:
    """The seed-to-seed standard deviation (ddof 1) of one quantity at one checkpoint,
    over the seeds that have it; ``None`` with fewer than two."""
    a = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    return float(a.std(ddof=1)) if a.size >= 2 else None


def within_spread(difference: float, spread: float | None, z: float = 1.96) -> bool | None:
    """Whether a difference between two models' single runs lies within what two seeds of
    one model differ by: ``|difference| <= z * sqrt(2) * spread`` (``None`` without a
    spread)."""
    if spread is None:
        return None
    return abs(difference) <= z * math.sqrt(2.0) * spread
