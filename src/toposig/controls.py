"""Correlations a reviewer would accept: uncertainty, multiple testing, and confounds.

Every quantity that drifts during training correlates with the loss, so a raw Spearman
ρ between a feature and perplexity says little on its own. For each feature × model this
module adds:

- a percentile bootstrap 95% CI of Spearman ρ over checkpoints (seeded resamples);
- Holm's step-down correction across every feature × model tested (separately for the
  raw, partial and first-difference tests);
- the partial Spearman correlation controlling for training progress, log(1 + step):
  the Pearson correlation of the rank residuals after regressing each rank vector on
  the ranks of log(1 + step), with a t-test on n − 3 degrees of freedom;
- the Spearman correlation of first differences between consecutive checkpoints: two
  series that merely share a trend lose their correlation here.

Pure functions on arrays and records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from .stats import MIN_POINTS, by_model, correlation, feature_values

ALPHA = 0.05
N_BOOTSTRAP = 1000
CONTROLS = ("raw", "partial_log_step", "first_differences")


def _clean(*arrays: Sequence[float | None]) -> list[np.ndarray]:
    """Float arrays with every position where any array is missing or non-finite dropped."""
    arrs = [np.array([np.nan if v is None else v for v in a], dtype=np.float64) for a in arrays]
    keep = np.logical_and.reduce([np.isfinite(a) for a in arrs])
    return [a[keep] for a in arrs]


def bootstrap_spearman_ci(x: Sequence[float], y: Sequence[float], n_resamples: int = N_BOOTSTRAP,
                          seed: int = 0, level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI of Spearman ρ, resampling (x, y) pairs with replacement.

    Resamples in which either variable is constant (ρ undefined) are left out; ``None``
    when fewer than three pairs or fewer than half the resamples are usable.
    """
    xa, ya = _clean(x, y)
    n = xa.size
    if n < MIN_POINTS:
        return None, None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    rx = sps.rankdata(xa[idx], axis=1)
    ry = sps.rankdata(ya[idx], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    ok = den > 0
    if ok.sum() < n_resamples / 2:
        return None, None
    rho = (rx * ry).sum(axis=1)[ok] / den[ok]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(rho, [tail, 100 - tail])
    return float(lo), float(hi)


def partial_spearman(x: Sequence[float], y: Sequence[float], z: Sequence[float]
                     ) -> tuple[float | None, float | None, int]:
    """Spearman correlation of x and y controlling for z, with its two-sided p-value.

    Ranks of x and y are each regressed on the ranks of z (with intercept); the result
    is the Pearson correlation of the residuals, tested with t = r·sqrt((n−3)/(1−r²)).
    Returns ``(r, p, n)``; ``(None, None, n)`` when undefined.
    """
    xa, ya, za = _clean(x, y, z)
    n = xa.size
    if n < MIN_POINTS + 1:
        return None, None, n
    rx, ry, rz = (sps.rankdata(a) for a in (xa, ya, za))
    design = np.column_stack([np.ones(n), rz])
    res_x = rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]
    res_y = ry - design @ np.linalg.lstsq(design, ry, rcond=None)[0]
    den = math.sqrt(float(res_x @ res_x) * float(res_y @ res_y))
    if den < 1e-12:
        return None, None, n
    r = max(-1.0, min(1.0, float(res_x @ res_y) / den))
    df = n - 3
    if abs(r) >= 1.0:
        return r, 0.0, n
    t = r * math.sqrt(df / (1 - r * r))
    return r, float(2 * sps.t.sf(abs(t), df)), n


def first_difference_spearman(x: Sequence[float], y: Sequence[float]) -> dict:
    """Spearman (and Pearson) of consecutive differences of two step-ordered series.

    Pairs are formed only between consecutive checkpoints where both values exist.
    """
    xa, ya = _clean(x, y)
    return correlation(np.diff(xa).tolist(), np.diff(ya).tolist())


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone); ``None`` stays ``None``."""
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def controlled_correlations(records: Sequence[dict], targets: dict[str, str],
                            n_resamples: int = N_BOOTSTRAP, seed: int = 0) -> dict:
    """Every feature × model correlation with its target, under each control.

    Args:
        records: aggregate entries (``model_label``, ``step``, ``features``, targets).
        targets: feature name -> the record field it is correlated with (``perplexity``
            for embedding features, ``loss`` for weight features).
        n_resamples: bootstrap resamples per correlation.
        seed: seeds the bootstrap (each test gets its own stream from it).

    Returns:
        ``{"per_model": {label: {feature: entry}}, "summary": {feature: {...}}, ...}``
        where an entry holds ``target``, ``n``, Spearman/Pearson r and p, ``ci_low`` /
        ``ci_high``, ``holm_p``, ``partial_r`` / ``partial_p`` / ``partial_holm_p``,
        ``diff_r`` / ``diff_p`` / ``diff_holm_p`` and ``significant`` under each
        control (Holm-adjusted p < 0.05, the same sign as the raw ρ for the controls).
        ``summary`` counts, per feature, the models where it stays significant.
    """
    per_model: dict[str, dict[str, dict]] = {}
    flat: list[dict] = []
    for m_index, (label, recs) in enumerate(by_model(records).items()):
        steps = [math.log1p(r["step"]) if r.get("step") is not None else None for r in recs]
        table: dict[str, dict] = {}
        for f_index, (feature, target) in enumerate(targets.items()):
            x = feature_values(recs, feature)
            y = [r.get(target) for r in recs]
            raw = correlation(x, y)
            lo, hi = bootstrap_spearman_ci(x, y, n_resamples, seed=_stream(seed, m_index,
                                                                            f_index))
            pr, pp, _ = partial_spearman(x, y, steps)
            diff = first_difference_spearman(x, y)
            entry = {
                "target": target,
                "n": raw["n"],
                "spearman_r": raw.get("spearman_r"),
                "spearman_p": raw.get("spearman_p"),
                "pearson_r": raw.get("pearson_r"),
                "pearson_p": raw.get("pearson_p"),
                "ci_low": lo,
                "ci_high": hi,
                "partial_r": pr,
                "partial_p": pp,
                "diff_r": diff.get("spearman_r"),
                "diff_p": diff.get("spearman_p"),
                "diff_n": diff["n"],
            }
            table[feature] = entry
            flat.append(entry)
        per_model[label] = table
    for key, out in (("spearman_p", "holm_p"), ("partial_p", "partial_holm_p"),
                     ("diff_p", "diff_holm_p")):
        for entry, adj in zip(flat, holm([e[key] for e in flat]), strict=True):
            entry[out] = adj
    for entry in flat:
        entry["significant"] = _significance(entry)
    return {
        "alpha": ALPHA,
        "n_bootstrap": n_resamples,
        "seed": seed,
        "controls": list(CONTROLS),
        "n_tests": len(flat),
        "targets": dict(targets),
        "per_model": per_model,
        "summary": _summary(per_model, targets),
    }


def _stream(seed: int, *keys: int) -> int:
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1)[0])


def _significance(e: dict) -> dict[str, bool]:
    def sig(p, r) -> bool:
        same_sign = (r is not None and e["spearman_r"] is not None
                     and np.sign(r) == np.sign(e["spearman_r"]))
        return p is not None and p < ALPHA and same_sign

    return {
        "raw": e["holm_p"] is not None and e["holm_p"] < ALPHA,
        "partial_log_step": sig(e["partial_holm_p"], e["partial_r"]),
        "first_differences": sig(e["diff_holm_p"], e["diff_r"]),
    }


def _summary(per_model: dict[str, dict[str, dict]], targets: dict[str, str]) -> dict:
    """Per feature: in how many models it is significant under each control."""
    out = {}
    for feature, target in targets.items():
        entries = [t[feature] for t in per_model.values() if feature in t]
        out[feature] = {
            "target": target,
            "n_models": len(entries),
            **{f"significant_{c}": sum(e["significant"][c] for e in entries)
               for c in CONTROLS},
            "all_controls": sum(all(e["significant"].values()) for e in entries),
        }
    return out
