"""Which feature's change-point lies nearest the known transitions, tested over runs and
corrected over features (issue 58's head-to-head; the positive controls' hit count is
:mod:`toposig.analysis.ground_truth`'s).

For each feature and each run, the distance, in checkpoints, between the feature's
change-point and the run's event. The statistic is the mean distance over the runs
(smaller: nearer). Handing each run another run's event gives the statistic's null: a
feature that moves with the stage of training, not with the event, comes as near the
other runs' events as to its own. Every order of the events (all ``n!`` up to 7 runs,
else :data:`~toposig.analysis.ground_truth.PERMUTATIONS` drawn with a fixed seed, the
observed order counted) gives the one-sided p, whose smallest attainable value is
``1 / orders``. The correction over features is Westfall and Young's min-P: the same
orders for every feature, each order's smallest p over the features, the share of
orders where it is at most a feature's observed p. It holds the family-wise error rate
whatever the features' dependence (a test checks it on simulated runs where nothing is
related).

The null assumes the runs are exchangeable: seeds of one design, on one grid of
checkpoints. Where the grids differ, another run's event is counted at the nearest of a
run's own checkpoints, clamped to its ends, and the orders are no longer alike.

Pure functions on arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PERMUTATIONS = 20_000  # drawn when the runs have more orders than this (8 runs or more)
PERMUTATION_SEED = 0

def swapped_distances(steps: Sequence[Sequence[int]], change_points: Sequence[int | None],
                      events: Sequence[int]) -> np.ndarray:
    """``(n, n)`` checkpoints between run ``i``'s change-point and run ``j``'s event, on
    run ``i``'s checkpoints (an event step not among them counts at the nearest); a row
    is NaN where the run's change-point is undefined (``None``)."""
    n = len(events)
    out = np.full((n, n), np.nan)
    for i in range(n):
        found = change_points[i]
        if found is None:
            continue
        grid = np.asarray(sorted(steps[i]), dtype=np.int64)
        at = _nearest(grid, found)
        for j in range(n):
            out[i, j] = abs(_nearest(grid, events[j]) - at)
    return out


def _nearest(grid: np.ndarray, step: int) -> int:
    """The index of the checkpoint of the sorted ``grid`` nearest ``step``."""
    return int(np.abs(grid - step).argmin())


def event_orders(n: int) -> np.ndarray:
    """``(orders, n)``: every order of ``n`` runs' events, the observed one first (``n``
    up to 7), else the observed one and :data:`PERMUTATIONS` - 1 drawn with a fixed seed."""
    if math.factorial(n) <= PERMUTATIONS:
        return np.array(list(itertools.permutations(range(n))))
    rng = np.random.default_rng(PERMUTATION_SEED)
    drawn = np.array([rng.permutation(n) for _ in range(PERMUTATIONS - 1)])
    return np.concatenate([np.arange(n)[None, :], drawn])


@dataclass(frozen=True)
class DistanceTest:
    """One feature's head-to-head test against one event, over the runs.

    Attributes:
        distance: the mean checkpoints between its change-point and the run's event.
        p: one-sided permutation p of so small a mean distance.
        p_adjusted: ``p`` corrected over the features tested together (min-P).
        min_p: the smallest p the runs' orders allow (``1 / orders``).
        n_runs: the runs where its change-point is defined.
    """

    distance: float | None
    p: float | None
    p_adjusted: float | None
    min_p: float
    n_runs: int


def _statistics(d: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """``(orders,)`` mean distance over the defined runs under each order of the events."""
    rows = ~np.isnan(d).all(axis=1)
    taken = d[np.arange(len(d))[None, :], orders][:, rows]
    return taken.mean(axis=1) if rows.any() else np.full(len(orders), np.nan)


def distance_tests(distances: Mapping[str, np.ndarray]) -> dict[str, DistanceTest]:
    """The head-to-head test of each feature (see the module) from its
    :func:`swapped_distances` (all of the same runs, in the same order), corrected over
    all of them together. A feature defined in no run has no test (``None``s)."""
    if not distances:
        return {}
    n = len(next(iter(distances.values())))
    orders = event_orders(n)
    min_p = 1.0 / len(orders)
    stats = {f: _statistics(d, orders) for f, d in distances.items()}
    tested = [f for f, t in stats.items() if np.isfinite(t[0])]
    # each order's p for each feature: the share of orders at most as far
    p_of_order = {}
    for f in tested:
        t = stats[f]
        ranks = np.searchsorted(np.sort(t), t, side="right")
        p_of_order[f] = ranks / len(t)
    smallest = (np.min(np.stack([p_of_order[f] for f in tested]), axis=0)
                if tested else np.array([]))
    out = {}
    for f, d in distances.items():
        runs = int((~np.isnan(d).all(axis=1)).sum())
        if f not in tested:
            out[f] = DistanceTest(None, None, None, min_p, runs)
            continue
        p = float(p_of_order[f][0])
        out[f] = DistanceTest(float(stats[f][0]), p, float(np.mean(smallest <= p)), min_p,
                              runs)
    return out


def signed_leads(steps: Sequence[Sequence[int]], change_points: Sequence[int | None],
                 events: Sequence[int]) -> list[int | None]:
    """Per run, the event's checkpoint minus the change-point's, on the run's own
    checkpoints (positive: the feature moves first; ``None`` where undefined)."""
    out: list[int | None] = []
    for grid_steps, found, event in zip(steps, change_points, events, strict=True):
        if found is None:
            out.append(None)
            continue
        grid = np.asarray(sorted(grid_steps), dtype=np.int64)
        out.append(_nearest(grid, event) - _nearest(grid, found))
    return out


def head_to_head(steps: Sequence[Sequence[int]], events: Sequence[int],
                 change_points: Mapping[str, Sequence[int | None]],
                 references: Sequence[str] = (), alpha: float = 0.05) -> dict[str, dict]:
    """The head-to-head of every feature against one event, over the runs where the
    event happens, as JSON-ready entries.

    Args:
        steps: per run, its checkpoint steps.
        events: per run, the event's step.
        change_points: feature -> per run, its change-point's step (``None``: none).
        references: features tested alone, not corrected over with the rest (the
            ground-truth signal itself: it is the method's check, not a contender).
        alpha: the level a feature's corrected p must be below to be said to detect the
            event.

    Returns:
        feature -> ``distance`` (mean checkpoints from the event), ``p``, ``p_adjusted``
        (min-P over the non-reference features), ``min_p``, ``n_runs``, ``leads`` (per
        run, :func:`signed_leads`), ``median_lead`` (checkpoints) and ``detects``
        (``p_adjusted < alpha``).
    """
    distances = {f: swapped_distances(steps, cps, events) for f, cps in change_points.items()}
    contenders = {f: d for f, d in distances.items() if f not in references}
    tests = {**distance_tests(contenders),
             **{f: distance_tests({f: distances[f]})[f] for f in references
                if f in distances}}
    out = {}
    for f in change_points:
        t = tests[f]
        leads = signed_leads(steps, change_points[f], events)
        defined = [v for v in leads if v is not None]
        out[f] = {"distance": t.distance, "p": t.p, "p_adjusted": t.p_adjusted,
                  "min_p": t.min_p, "n_runs": t.n_runs, "leads": leads,
                  "median_lead": float(np.median(defined)) if defined else None,
                  "detects": t.p_adjusted is not None and t.p_adjusted < alpha}
    return out
