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

from toposig.records import Record
from toposig.records.ensembles import AcrossSeeds

N_BOOTSTRAP = 2000
LEVEL = 0.95
MIN_SEEDS = 5  # below this the partial correlation with two controls has df < 1
# The fewest seeds at which the interval holds its size: on simulated null ensembles it
# excluded 0 in 0.105 of them with 8 seeds and 0.024 with 12 (bench/bench_across_seeds.py,
# 2026-11-27); a size with fewer seeds is reported but counts in no verdict.
CALIBRATED_SEEDS = 12
FRACTIONS = (0.2, 0.3, 0.5)


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
        return _cell(None, None, None, None, name, None, None, None, None, n)
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
    return _cell(_value(r[0]), lo, hi, _value(r_loss[0]), name, _value(r_base[0]),
                 _value(advantage[0]), a_lo, a_hi, n)


def _cell(r: float | None, ci_low: float | None, ci_high: float | None,
          r_loss_only: float | None, baseline: str | None, baseline_r: float | None,
          advantage: float | None, advantage_low: float | None,
          advantage_high: float | None, n_seeds: int) -> AcrossSeeds:
    """The section's cell, with its verdicts: ``beyond_loss`` (the interval of ``r``
    excludes 0) and ``calibrated`` (at least :data:`CALIBRATED_SEEDS` seeds)."""
    beyond = (ci_low is not None and ci_high is not None and (ci_low > 0 or ci_high < 0))
    return AcrossSeeds(r, ci_low, ci_high, r_loss_only, baseline, baseline_r, advantage,
                       advantage_low, advantage_high, n_seeds, beyond,
                       n_seeds >= CALIBRATED_SEEDS)


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


# --- a results folder's ensembles ----------------------------------------------------


@dataclass(frozen=True)
class SeedRun:
    """One seed of an ensemble, from its records.

    Attributes:
        label: the run's model label (``m-seed3``).
        seed: its seed.
        steps: its checkpoint steps, ascending.
        loss: step -> the held-out loss its checkpoint stored (nats), where stored.
        features: step -> its checkpoint-level features.
        text_se: step -> feature -> the standard deviation over text resamples, where the
            run resampled the texts.
        num_parameters: its size.
    """

    label: str
    seed: int
    steps: tuple[int, ...]
    loss: dict[int, float]
    features: dict[int, dict[str, float]]
    text_se: dict[int, dict[str, float]]
    num_parameters: int | None


def seed_runs(records: Sequence[Record]) -> dict[str, list[SeedRun]]:
    """The seed ensembles among ``records``: seed group (the model the runs are seeds of)
    -> its runs ordered by seed, groups ordered by size then name. Records without a
    seed (:data:`toposig.records.SEED_FIELDS`) are left out."""
    by_label: dict[str, list[tuple[int, Record]]] = {}
    for r in records:
        if r.ok and r.checkpoint.seed_group is not None and r.step is not None:
            by_label.setdefault(r.model_label, []).append((r.step, r))
    groups: dict[str, list[SeedRun]] = {}
    for label, found in by_label.items():
        found.sort(key=lambda sr: sr[0])
        first, last = found[0][1].checkpoint, found[-1][1]
        assert first.seed_group is not None and first.seed is not None  # seed_problem
        groups.setdefault(first.seed_group, []).append(SeedRun(
            label, int(first.seed), tuple(step for step, _ in found),
            {step: float(r.loss) for step, r in found if _is_finite(r.loss)},
            {step: {k: float(v) for k, v in r.features.items() if _is_finite(v)}
             for step, r in found},
            {step: {k: float(spread.std) for k, spread in r.resampled.items()
                    if _is_finite(spread.std)}
             for step, r in found},
            last.num_parameters))
    for runs in groups.values():
        runs.sort(key=lambda run: (run.seed, run.label))
    return dict(sorted(groups.items(), key=lambda kv: (kv[1][0].num_parameters or 0, kv[0])))



def first_seeds(records: Sequence[Record]) -> list[Record]:
    """``records`` without the seeds of an ensemble but its first: every record of a model
    that is no seed run, and of each seed group (``seed_group``) those of its run with the
    lowest ``seed`` (ties broken by label), in their order.

    The within-model controls run on these in a seed ensemble: each seed of a size is the
    same test of an exchangeable run, so twenty of them repeat one question twenty times
    (and cost twenty times the time and space), while the test across seeds
    (:func:`ensemble_analysis`) is the one the ensemble is for."""
    first: dict[str, tuple[int, str]] = {}
    for r in records:
        group, seed = r.checkpoint.seed_group, r.checkpoint.seed
        if group is not None and seed is not None:
            key = (int(seed), r.model_label)
            first[group] = min(first.get(group, key), key)
    kept = {label for _, label in first.values()}
    return [r for r in records if r.checkpoint.seed_group is None or r.model_label in kept]


def _is_finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _common_steps(runs: Sequence[SeedRun]) -> list[int]:
    """The steps every seed of a group has a checkpoint at."""
    common = set(runs[0].steps)
    for run in runs[1:]:
        common &= set(run.steps)
    return sorted(common)


def _at(runs: Sequence[SeedRun], step: int, feature: str) -> list[float | None]:
    return [run.features.get(step, {}).get(feature) for run in runs]


def _best_baseline(candidates: Sequence[str], runs: Sequence[SeedRun], step: int,
                   final: list, loss_at: list) -> str | None:
    """The baseline whose value at ``step`` predicts the final loss best given the loss
    at ``step`` (largest |partial Spearman| over seeds), among those defined."""
    best, best_r = None, -1.0
    for b in candidates:
        block = _complete(_at(runs, step, b), final, loss_at)
        if block.shape[0] < MIN_SEEDS:
            continue
        r = partial_spearman_rows(block[None, :, 0], block[None, :, 1], block[None, None, :, 2])
        if np.isfinite(r[0]) and abs(r[0]) > best_r:
            best, best_r = b, abs(float(r[0]))
    return best


def _fraction_key(f: float) -> str:
    return f"{f:g}"


def ensemble_analysis(records: Sequence[Record], features: Sequence[str],
                      baselines_of, *, fractions: Sequence[float] = FRACTIONS,
                      n_bootstrap: int = N_BOOTSTRAP, seed: int = 0) -> dict:
    """The ``ensembles`` section of the statistics: every seed ensemble among the records
    tested across seeds (:func:`across_seeds`) at each fraction, with the seed-to-seed
    spread as a noise floor. ``{}`` when the records hold no ensemble.

    Args:
        records: the checkpoints' records.
        features: the checkpoint-level features to test, in report order.
        baselines_of: feature -> the non-topological baselines it is tested beyond
            (:func:`toposig.analysis.controls.baselines_of`; ``()`` for the baselines
            themselves, which are then tested given the loss alone).
        fractions: the fractions of training (of each group's last common step).
        n_bootstrap, seed: the bootstrap over seeds.

    Returns:
        ``groups`` (per seed group: its seeds, labels, size, steps, the step of each
        fraction, final-loss summary), ``across_seeds`` (feature -> fraction -> group ->
        :class:`AcrossSeeds` as JSON), ``verdict`` (feature -> fraction -> sizes tested,
        sizes whose interval excludes 0, ``predicts_beyond_loss`` = in more than half of
        the sizes tested (a size with fewer than :data:`CALIBRATED_SEEDS` seeds, where
        the interval does not hold its size, is not tested: ``sizes_too_few_seeds``),
        sizes where the advantage over the baseline has an interval above 0),
        ``seed_spread`` (``loss`` and each feature -> group -> mean, seed-to-seed SD and
        the median text-resampling SD at the final step), ``between_sizes`` (quantity ->
        consecutive sizes' difference between their first seeds' final values, and
        whether it lies within two seeds' spread), ``expected_by_chance``.
    """
    groups = seed_runs(records)
    if not groups:
        return {}
    info, steps_of = {}, {}
    for g, runs in groups.items():
        common = _common_steps(runs)
        if not common:
            continue
        last = common[-1]
        steps_of[g] = {_fraction_key(f): fraction_step(common, f) for f in fractions}
        finals = [run.loss.get(last) for run in runs]
        info[g] = {"labels": [run.label for run in runs], "seeds": [run.seed for run in runs],
                   "n_seeds": len(runs), "num_parameters": runs[0].num_parameters,
                   "steps": common, "final_step": last, "fraction_steps": steps_of[g],
                   "final_loss": _summary(finals)}
    across: dict[str, dict] = {}
    verdict: dict[str, dict] = {}
    for fi, feature in enumerate(features):
        per_fraction, verdicts = {}, {}
        for f in fractions:
            key = _fraction_key(f)
            cells = {}
            for gi, (g, runs) in enumerate(groups.items()):
                if g not in info:
                    continue
                step, last = steps_of[g][key], info[g]["final_step"]
                final = [run.loss.get(last) for run in runs]
                loss_at = [run.loss.get(step) for run in runs]
                values = _at(runs, step, feature)
                if sum(v is not None for v in values) == 0:
                    continue
                candidates = [b for b in baselines_of(feature) if b != feature]
                base = _best_baseline(candidates, runs, step, final, loss_at)
                cells[g] = across_seeds(
                    values, final, loss_at, _at(runs, step, base) if base else None,
                    baseline_name=base, n_bootstrap=n_bootstrap,
                    seed=seed + 7919 * fi + 104729 * gi + int(1000 * f)).to_json()
            if cells:
                per_fraction[key] = cells
                tested = [c for c in cells.values()
                          if c["r"] is not None and c["calibrated"]]
                verdicts[key] = {
                    "sizes_tested": len(tested),
                    "sizes_too_few_seeds": sum(1 for c in cells.values()
                                               if c["r"] is not None and not c["calibrated"]),
                    "sizes_beyond": sum(c["beyond_loss"] for c in tested),
                    "predicts_beyond_loss": bool(tested) and
                    sum(c["beyond_loss"] for c in tested) > len(tested) / 2,
                    "sizes_better_than_baseline": sum(
                        1 for c in tested if c["advantage_low"] is not None
                        and c["advantage_low"] > 0),
                }
        if per_fraction:
            across[feature] = per_fraction
            verdict[feature] = verdicts
    spread = {q: s for q in ("loss", *features)
              if (s := _spreads(groups, info, q))}
    return {
        "groups": info,
        "fractions": [_fraction_key(f) for f in fractions],
        "across_seeds": across,
        "verdict": verdict,
        "seed_spread": spread,
        "between_sizes": {q: d for q in spread if (d := _between_sizes(groups, info, q,
                                                                      spread[q]))},
        "expected_by_chance": expected_by_chance(verdict),
        "n_bootstrap": n_bootstrap,
        "level": LEVEL,
        "method": ("per seed group and fraction f: partial Spearman, over seeds, of the "
                   "feature at f with the final held-out loss given the loss at f and the "
                   "feature's best baseline at f (the one of its space that best predicts "
                   "the final loss given the loss at f), percentile bootstrap over seeds; "
                   "advantage = |partial r given the loss| - |the baseline's|, paired "
                   "bootstrap; 'predicts beyond the loss' = the interval excludes 0 in more "
                   f"than half of the sizes with at least {CALIBRATED_SEEDS} seeds (with "
                   "fewer the interval does not hold its size); no correction for the "
                   "number of features"),
        "calibrated_seeds": CALIBRATED_SEEDS,
    }


def _summary(values: Sequence[float | None]) -> dict:
    a = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if a.size == 0:
        return {"n": 0, "mean": None, "sd": None, "min": None, "max": None}
    return {"n": int(a.size), "mean": float(a.mean()), "sd": seed_spread(list(a)),
            "min": float(a.min()), "max": float(a.max())}


def _final_values(runs: Sequence[SeedRun], last: int, quantity: str) -> list[float | None]:
    if quantity == "loss":
        return [run.loss.get(last) for run in runs]
    return _at(runs, last, quantity)


def _spreads(groups: dict, info: dict, quantity: str) -> dict:
    """Group -> the final step's mean, seed-to-seed SD and (for a feature the texts were
    resampled for) the median text-resampling SD over seeds."""
    out = {}
    for g, runs in groups.items():
        if g not in info:
            continue
        last = info[g]["final_step"]
        s = _summary(_final_values(runs, last, quantity))
        if s["n"] < 2:
            continue
        text = [run.text_se.get(last, {}).get(quantity) for run in runs]
        text = [t for t in text if t is not None]
        out[g] = {**s, "text_sd": float(np.median(text)) if text else None}
    return out


def _between_sizes(groups: dict, info: dict, quantity: str, spread: dict) -> list[dict]:
    """Consecutive sizes (by parameters): the difference of their first seeds' final
    values (the run a single-seed study would have made) and whether it lies within what
    two seeds of one size differ by (:func:`within_spread`, the two sizes' SDs pooled)."""
    names = [g for g in groups if g in spread]
    out = []
    for a, b in zip(names, names[1:], strict=False):
        va = _final_values(groups[a][:1], info[a]["final_step"], quantity)[0]
        vb = _final_values(groups[b][:1], info[b]["final_step"], quantity)[0]
        if va is None or vb is None:
            continue
        pooled = math.sqrt((spread[a]["sd"] ** 2 + spread[b]["sd"] ** 2) / 2)
        out.append({"from": a, "to": b, "difference": vb - va, "spread": pooled,
                    "within_spread": within_spread(vb - va, pooled)})
    return out


def expected_by_chance(verdict: dict, alpha: float = 1 - LEVEL) -> float:
    """How many (feature, fraction) cells of ``verdict`` would read "predicts beyond the
    loss" by chance if no feature did: the sum over cells of the binomial probability
    that more than half of its sizes exclude 0, each with probability ``alpha`` (the
    interval's nominal rate; the measured one is lower, see the tests)."""
    total = 0.0
    for per_fraction in verdict.values():
        for v in per_fraction.values():
            k = v["sizes_tested"]
            if k:
                total += float(sps.binom.sf(math.floor(k / 2), k, alpha))
    return total
