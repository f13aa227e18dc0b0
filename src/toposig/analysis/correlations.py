"""Statistics on checkpoint series: correlations with model quality, diagram-distance rates.

Pure functions on NumPy arrays and sequences of :class:`toposig.records.Record`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from toposig.families import registry
from toposig.families.base import FeatureGroup, Order
from toposig.features import homology
from toposig.records import Record

MIN_POINTS = 3
EXACT_SPEARMAN_MAX_N = 8  # exact permutation p-values up to 8! = 40,320 orderings


def _nan_to_none(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def correlation(x: Sequence[float], y: Sequence[float]) -> dict:
    """Spearman and Pearson correlation of ``x`` with ``y``, with two-sided p-values.

    Pairs where either value is missing or non-finite are dropped. ``pearson_log_*`` is
    Pearson against ``ln y`` (for perplexity: against the mean token loss), which is not
    dominated by the huge values at initialisation. Values are ``None`` where undefined
    (fewer than three pairs, or a constant series).
    """
    from scipy import stats as sps  # here: the live figure imports this module, not SciPy
    xa = np.array([np.nan if v is None else v for v in x], dtype=np.float64)
    ya = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    out: dict = {"n": int(xa.size)}
    names = ("spearman_r", "spearman_p", "pearson_r", "pearson_p", "pearson_log_r",
             "pearson_log_p")
    if xa.size < MIN_POINTS or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return out | {k: None for k in names}
    s = sps.spearmanr(xa, ya)
    s_p, method = spearman_p(xa, ya, s.statistic, s.pvalue)
    p = sps.pearsonr(xa, ya)
    pos = ya > 0
    if pos.sum() >= MIN_POINTS and np.ptp(xa[pos]) > 0:
        pl = sps.pearsonr(xa[pos], np.log(ya[pos]))
        pl_r, pl_p = pl.statistic, pl.pvalue
    else:
        pl_r = pl_p = math.nan
    vals = (s.statistic, s_p, p.statistic, p.pvalue, pl_r, pl_p)
    out["spearman_p_method"] = method
    return out | {k: _nan_to_none(float(v)) for k, v in zip(names, vals, strict=True)}


def spearman_p(x: np.ndarray, y: np.ndarray, rho: float, t_p: float) -> tuple[float, str]:
    """Spearman's two-sided p-value and how it was found.

    Exact over all orderings for n <= 8; for a perfect rank order without ties it is
    exactly 2/n! (only the order and its reverse reach |rho| = 1), where the
    t-approximation says 0; otherwise the t-approximation.
    """
    if x.size <= EXACT_SPEARMAN_MAX_N:
        return spearman_exact_p(x, y), "exact"
    no_ties = np.unique(x).size == x.size and np.unique(y).size == y.size
    if abs(rho) >= 1 - 1e-12 and no_ties:
        return math.exp(math.log(2) - math.lgamma(x.size + 1)), "exact (perfect rank order)"
    return t_p, "t-approximation"


def spearman_exact_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided permutation p-value of Spearman's rho over all n! orderings of ``y``.

    The t-approximation scipy uses is wrong for small n (it gives p = 0 for a perfect
    rank correlation of three points, whose exact p is 1/3). ``scipy.stats.permutation_test``
    gives the same p without ties (tested) but defines the two-sided p as twice the
    smaller one-sided one, which differs under ties, and is about 400x slower here.
    """
    from scipy import stats as sps
    rx = sps.rankdata(x) - (x.size + 1) / 2
    ry = sps.rankdata(y) - (y.size + 1) / 2
    perms = _orderings(y.size)
    rhos = (ry[perms] @ rx) / np.sqrt((rx @ rx) * (ry @ ry))
    observed = float(rx @ ry) / np.sqrt((rx @ rx) * (ry @ ry))
    return float(np.mean(np.abs(rhos) >= abs(observed) - 1e-12))


@functools.lru_cache(maxsize=EXACT_SPEARMAN_MAX_N + 1)
def _orderings(n: int) -> np.ndarray:
    """Every ordering of ``range(n)``, (n!, n), read-only (built once per n: building it
    took 20 ms of each exact p for n = 8)."""
    out = np.array(list(itertools.permutations(range(n))))
    out.flags.writeable = False
    return out


def feature_names(records: Sequence[Record]) -> list[str]:
    """Numeric feature keys present in the records' ``features``, grouped by feature
    group in table order (:func:`toposig.families.registry.groups`: the families in
    registration order, each family's groups in its order). Within a group, as it says
    (:class:`~toposig.families.base.Order`): by name, in its declared order (names the
    group does not declare then come last, with any other name), or in the order the
    records give them (the loss probes'); the names of no group, and those of a group
    listed last (``other``), at the end by name.
    """
    keys: list[str] = []
    for r in records:
        for k, v in r.features.items():
            if k not in keys and isinstance(v, (int, float)):
                keys.append(k)
    grouped: list[str] = []
    for group in registry.groups():
        if group.last:
            continue
        if group.order == Order.DECLARED:
            grouped += [k for k in group.names if k in keys]
        else:
            members = [k for k in keys if feature_group(k) is group]
            grouped += members if group.order == Order.RECORDS else sorted(members)
    return grouped + sorted(k for k in keys if k not in grouped)


def feature_group(name: str) -> FeatureGroup:
    """What a feature measures: the group that declares it, or for a name the package
    does not compute (an imported table's) the group the naming convention gives
    (:func:`toposig.families.registry.group_of`; ``other`` when none does)."""
    return registry.group_of(name)


def signature_of(name: str) -> str:
    """The signature family whose records carry the checkpoint feature ``name``."""
    return registry.family_of(name).name


def is_probe(name: str) -> bool:
    """Whether a feature comes from a family that probes the loss (curvature, landscape,
    gradients)."""
    return registry.family_of(name).probes_loss


def target_of(name: str) -> str:
    """The quality measure a feature is tested against: ``perplexity`` (the hidden
    states' families) or the stored ``loss`` (the weights', as the seed paper did, and
    the loss probes')."""
    return registry.family_of(name).target


def prefers_loss(name: str) -> bool:
    """Features tested against the loss rather than perplexity (:func:`target_of`)."""
    return target_of(name) == "loss"


def by_model(records: Sequence[Record]) -> dict[str, list[Record]]:
    """Records grouped by model label, each group sorted by step, in first-seen order."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(r.model_label, []).append(r)
    return {k: sorted(v, key=lambda r: (r.step is None, r.step or 0))
            for k, v in groups.items()}


def feature_values(records: Sequence[Record], name: str) -> list[float | None]:
    """Each record's value of feature ``name`` (``None`` where it has none)."""
    return [r.features.get(name) for r in records]


def correlations_with_target(
    records: Sequence[Record], target: str = "perplexity", features: list[str] | None = None
) -> dict:
    """Correlation of every feature with ``target`` per model and pooled over models.

    Returns:
        ``{"per_model": {label: {feature: correlation}}, "pooled": {feature: correlation}}``.
    """
    features = features or feature_names(records)
    per_model = {
        label: {f: correlation(feature_values(recs, f), [r.measure(target) for r in recs])
                for f in features}
        for label, recs in by_model(records).items()
    }
    pooled = {f: correlation(feature_values(records, f), [r.measure(target) for r in records])
              for f in features}
    return {"target": target, "per_model": per_model, "pooled": pooled}


def consecutive_distances(diagrams: Sequence[Sequence[np.ndarray]]) -> list[dict[str, float]]:
    """Wasserstein distances between consecutive checkpoints' diagrams, per dimension.

    Args:
        diagrams: per checkpoint, in step order, its diagrams ``[H0, H1, ...]``.

    Returns:
        One dict per consecutive pair: ``h{q}_wasserstein`` (order 1, L∞ ground metric,
        Hera) and ``h{q}_wasserstein_persim_l2`` (``persim.wasserstein``, L2 ground
        metric: the seed's values).
    """
    out = []
    for a, b in zip(diagrams[:-1], diagrams[1:], strict=True):
        row: dict[str, float] = {}
        for q, (da, db) in enumerate(zip(a, b, strict=True)):
            row[f"h{q}_wasserstein"] = homology.wasserstein(da, db)
            row[f"h{q}_wasserstein_persim_l2"] = homology.wasserstein_persim(da, db)
        out.append(row)
    return out
