"""Ground truth for the positive controls: transitions whose step is known.

Two training runs change their internal structure at a step that can be measured
without any topology:

- **grokking** (Power et al. 2022; Nanda et al. 2023): on modular addition, held-out
  accuracy jumps long after the training loss has fallen; the ground truth is the step at
  which it first reaches 50 % and 90 % (:func:`modular_accuracy`, :func:`crossing_step`);
- **induction heads** (Olsson et al. 2022): the in-context score, the loss on the second
  copy of a repeated random sequence minus the loss on its first copy, drops sharply in a
  narrow window; the ground truth is the step at which it is halfway from its starting
  to its final level (:func:`induction_score`, :func:`halfway_step`).

:func:`alignment` places a feature's change-point relative to such a step. Pure functions
on arrays.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from toposig.analysis.controls import ALPHA, holm
from toposig.analysis.head_to_head import event_orders, head_to_head, swapped_distances
from toposig.records import GroundTruth, Record


def modular_targets(p: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a + b) mod p``."""
    return (np.asarray(a) + np.asarray(b)) % p


def modular_accuracy(logits: np.ndarray, a: np.ndarray, b: np.ndarray, p: int) -> float:
    """The share of pairs ``(a, b)`` whose most likely answer is ``(a + b) mod p``.

    Args:
        logits: (pairs, p) scores of each answer for each pair.
        a, b: (pairs,) operands in ``0..p-1``.
        p: the modulus.
    """
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[1] != p:
        raise ValueError(f"logits must be (pairs, {p}), got {logits.shape}")
    return float(np.mean(logits.argmax(axis=1) == modular_targets(p, a, b)))


def induction_score(token_losses: np.ndarray, length: int) -> float:
    """The in-context score of sequences made of a random block repeated once.

    Args:
        token_losses: (sequences, 2 * length - 1) per-token losses (nats) of predicting
            tokens 1 .. 2 * length - 1 of each sequence ``[block, block]`` from the
            tokens before them.
        length: the block's length in tokens.

    Returns:
        The mean loss on the second copy's tokens (2nd to last; its first token follows
        the first copy and could not be predicted from it) minus the mean loss on the first
        copy's predictable tokens (2nd to last), in nats: about 0 before induction heads
        form, strongly negative after.
    """
    losses = np.asarray(token_losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[1] != 2 * length - 1:
        raise ValueError(f"token_losses must be (sequences, {2 * length - 1}), "
                         f"got {losses.shape}")
    first = losses[:, : length - 1]  # predicting tokens 1 .. length-1
    second = losses[:, length:]  # predicting tokens length+1 .. 2 length-1
    return float(second.mean() - first.mean())


def crossing_step(steps: Sequence[int], values: Sequence[float | None],
                  level: float) -> int | None:
    """The first checkpoint step at which ``values`` reaches ``level`` (``None`` if
    never), over step-sorted checkpoints."""
    for s, v in sorted(zip(steps, values, strict=True)):
        if v is not None and math.isfinite(v) and v >= level:
            return int(s)
    return None


def halfway_step(steps: Sequence[int], values: Sequence[float | None]) -> int | None:
    """The first checkpoint step at which a falling ``values`` has covered half the way
    from its first to its last value (``None`` when it does not fall)."""
    pairs = [(s, v) for s, v in sorted(zip(steps, values, strict=True))
             if v is not None and math.isfinite(v)]
    if len(pairs) < 2 or pairs[-1][1] >= pairs[0][1]:
        return None
    level = (pairs[0][1] + pairs[-1][1]) / 2
    return next(int(s) for s, v in pairs if v <= level)


MIN_SEGMENT = 3  # checkpoints on each side of a change-point, in a long enough series


def _min_segment(n: int) -> int:
    """Checkpoints on each side of a change-point in a series of ``n``."""
    return max(1, min(MIN_SEGMENT, n // 4))


def change_point(steps: Sequence[int], values: Sequence[float | None]) -> int | None:
    """The checkpoint step at which the level of ``values`` shifts: the single change in
    mean that best splits the step-sorted series (least squares, "at most one change";
    Hinkley 1970), with at least ``MIN_SEGMENT`` checkpoints on each side (fewer in a
    series shorter than ``4 * MIN_SEGMENT``: a quarter of it, at least one). Returned is
    the first step of the second segment. ``None`` with fewer than two values, or when
    they never change.

    A sustained shift, not the largest jump between two checkpoints: one checkpoint's
    spike (a loss spike, an accuracy that dips and recovers) or the fast first steps of
    training move a series most without changing where it settles."""
    pairs = [(s, v) for s, v in sorted(zip(steps, values, strict=True))
             if v is not None and math.isfinite(v)]
    if len(pairs) < 2:
        return None
    v = np.array([p[1] for p in pairs], dtype=np.float64)
    if not np.ptp(v) > 0:
        return None
    n = len(v)
    m = _min_segment(n)
    cut = np.arange(m, n - m + 1)  # the second segment starts at index cut
    csum, csq = np.concatenate([[0.0], np.cumsum(v)]), np.concatenate([[0.0], np.cumsum(v * v)])
    left = csq[cut] - csum[cut] ** 2 / cut
    right = (csq[n] - csq[cut]) - (csum[n] - csum[cut]) ** 2 / (n - cut)
    return int(pairs[int(cut[int(np.argmin(left + right))])][0])


@dataclass(frozen=True)
class RunAlignment:
    """Where a feature's change-point lies relative to a known event, in one run (the
    section's :class:`toposig.records.positive_controls.Alignment` sums it over runs).

    Attributes:
        event_step: the ground truth's step.
        feature_step: the feature's change-point (:func:`change_point`).
        lead: ``event_step - feature_step`` in steps: positive when the feature moves
            first.
        checkpoints_apart: how many checkpoints lie between them (0: the same one).
        hit: within one checkpoint of the event.
    """

    event_step: int
    feature_step: int
    lead: int
    checkpoints_apart: int
    hit: bool


def alignment(steps: Sequence[int], values: Sequence[float | None],
              event_step: int | None) -> RunAlignment | None:
    """The feature's change-point against ``event_step`` on the checkpoints ``steps``;
    ``None`` when either is undefined."""
    found = change_point(steps, values)
    if found is None or event_step is None:
        return None
    ordered = sorted(steps)
    index = {s: i for i, s in enumerate(ordered)}
    if event_step not in index:
        raise ValueError(f"event step {event_step} is not a checkpoint step")
    apart = abs(index[found] - index[event_step])
    return RunAlignment(int(event_step), found, int(event_step - found), apart, apart <= 1)


def swapped_hits(steps: Sequence[Sequence[int]], change_points: Sequence[int],
                 events: Sequence[int]) -> np.ndarray:
    """Whether run ``i``'s change-point is within one checkpoint of run ``j``'s event:
    ``(n, n)`` bool, each distance counted on run ``i``'s checkpoints (an event step that
    is not among them counts at the nearest one). The diagonal is the hits; the rest is
    what the same change-points score against the other runs' events, which a feature
    that moves with the stage of training rather than with the event also hits."""
    return swapped_distances(steps, change_points, events) <= 1


def permutation_p_value(hits: np.ndarray) -> float | None:
    """One-sided p of the hits on the diagonal of :func:`swapped_hits` when the events
    are handed to the runs in every order (:func:`toposig.analysis.head_to_head.event_orders`:
    all ``n!`` orders up to 7 runs, else
    :data:`~toposig.analysis.head_to_head.PERMUTATIONS` drawn with a fixed seed; the
    observed order counts): the share of orders with at least as many hits. Calibrated
    whatever the features' trends, as long as the runs are exchangeable; with ``n`` runs
    it is at least ``1 / n!``. ``None`` with fewer than two runs."""
    n = len(hits)
    if n < 2:
        return None
    observed = int(np.trace(hits))
    orders = event_orders(n)
    scores = hits[np.arange(n)[None, :], orders].sum(axis=1)
    return float(np.mean(scores >= observed))


# --- the positive-control section of the statistics ---------------------------------


def event_steps(steps: Sequence[int], values: Sequence[float | None], event: str,
                levels: Sequence[float] | None = None) -> dict[str, int | None]:
    """The steps of a ground-truth signal's transition, by name: with ``levels``, the first
    checkpoint at which a rising signal reaches each level (a falling one comes down to
    it), keyed ``"0.5"``, ``"0.9"``, ...; without, the ``"halfway"`` step
    (:func:`halfway_step`, the signal negated when it rises)."""
    if event not in ("rise", "fall"):
        raise ValueError(f"event must be 'rise' or 'fall', got {event!r}")
    sign = 1.0 if event == "rise" else -1.0
    signed = [None if v is None else sign * v for v in values]
    if levels:
        return {f"{level:g}": crossing_step(steps, signed, sign * level) for level in levels}
    return {"halfway": halfway_step(steps, [None if v is None else -v for v in signed])}


def chance_hit_rate(steps: Sequence[int], event_step: int) -> float:
    """The hit rate of a change-point placed at random: the share of the checkpoints a
    change-point can fall on (:func:`change_point`: not within its minimum segment of
    either end) that lie within one checkpoint of the event."""
    ordered = sorted(steps)
    n, i = len(ordered), ordered.index(event_step)
    m = _min_segment(n)
    possible = range(m, n - m + 1)
    return sum(j in possible for j in (i - 1, i, i + 1)) / max(len(possible), 1)


def hit_p_value(hits: int, runs: int, chance: float | None) -> float | None:
    """One-sided binomial p-value of ``hits`` or more in ``runs`` at the ``chance`` rate:
    how surprising the hits are for a change-point placed at random (``None`` without
    runs)."""
    if not runs or chance is None:
        return None
    return float(sps.binomtest(int(hits), int(runs), min(max(chance, 0.0), 1.0),
                               alternative="greater").pvalue)


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


def positive_control_analysis(records: Sequence[Record], features: Sequence[str]) -> dict:
    """Where each feature's change-point lies against the ground truth, over the runs.

    Args:
        records: aggregate entries; those with a ``ground_truth``
            (:data:`toposig.records.GROUND_TRUTH`) are used, by model, sorted by step.
        features: the feature names to place. The ground-truth signal itself (under its
            name: the method's check, it must find its own event) and the loss stored
            with each checkpoint (``loss``) are placed first, as references.

    Returns:
        ``{}`` when no record has a ground truth; else ``signal``, ``event``, ``levels``,
        ``events`` (the event names, :func:`event_steps`), ``runs`` (label -> its
        ``seed``, ``seed_group``, ``steps``, ``signal`` values and ``event_steps``) and
        ``alignment`` (feature -> event -> ``leads`` per run in steps, positive when the
        feature moves first, ``None`` where undefined; ``apart`` in checkpoints;
        ``hits``; ``hit_rate`` and ``chance`` (the mean of :func:`chance_hit_rate`) over
        the runs where both are defined, and ``hit_p`` (:func:`hit_p_value`) with
        ``hit_holm_p``, Holm-adjusted over the features (not the two references);
        ``swapped_hit_rate``, the hit rate of each run's change-point at the other
        runs' events, and ``permutation_p`` (:func:`permutation_p_value`), which a
        feature that moves with the stage of training, not the event, does not pass;
        ``median_lead`` and ``median_apart``; ``n_runs``), ``head_to_head`` (event ->
        feature -> :func:`toposig.analysis.head_to_head.head_to_head`'s entry: the mean
        distance of the change-points from the event over the runs where it happens, its
        permutation p corrected over every feature but the ground truth's own signals,
        whose checks are tested alone; events that happen in fewer than two runs have
        none) and ``alpha``, the level a corrected p must be below for a feature to
        detect the event. With a ground truth that states a ``mechanism``, also
        ``mechanism`` (name -> its ``event``, ``levels`` and ``events``, named
        ``"<name> <level>"`` or ``"<name> halfway"``); each run holds its values under
        ``mechanism`` and their events' steps among its ``event_steps``, and the
        alignment and the head-to-head place every feature against those events too,
        the mechanism's signals as references (a feature named like one is read from
        the ground truth). The runs are those whose every checkpoint states the ground
        truth most checkpoints state (signal, event, levels, mechanism); the others are
        named in ``runs_left_out`` (with only a ``reason`` when no run is left).
    """
    runs: dict[str, list[tuple[int, GroundTruth, Record]]] = {}
    for r in records:
        if r.ok and r.ground_truth is not None and r.step is not None:
            runs.setdefault(r.model_label, []).append((r.step, r.ground_truth, r))
    if not runs:
        return {}
    def definition(truth: GroundTruth) -> tuple:
        return (truth.signal, truth.event, truth.levels,
                tuple((m.signal, m.event, m.levels) for m in truth.mechanism))

    # the ground truth most checkpoints state; runs that state another (another task in
    # the same folder, a checkpoint written before its run's mechanism) are named, not
    # mixed in
    stated = Counter(definition(t) for found in runs.values() for _, t, _ in found)
    reference = stated.most_common(1)[0][0]
    first = next(t for found in runs.values() for _, t, _ in found
                 if definition(t) == reference)
    signal, event, levels = first.signal, first.event, first.levels or None
    mechanism = [(m.signal, m.event, m.levels or None) for m in first.mechanism]
    left_out = sorted(label for label, found in runs.items()
                      if any(definition(t) != reference for _, t, _ in found))
    runs = {label: found for label, found in runs.items() if label not in left_out}
    if not runs:
        return {"reason": "every run states more than one ground truth across its "
                          "checkpoints (signal, event, levels or mechanism)",
                "runs_left_out": left_out}
    out_runs: dict[str, dict] = {}
    for label, found in runs.items():
        found.sort(key=lambda st: st[0])
        steps = [int(step) for step, _, _ in found]
        values = [t.value for _, t, _ in found]
        start = found[0][2].checkpoint
        out_runs[label] = {"seed": start.seed, "seed_group": start.seed_group,
                           "steps": steps, "signal": values,
                           "event_steps": event_steps(steps, values, event, levels)}
        if mechanism:
            measured = {m.signal: [] for m in first.mechanism}
            for _, truth, _ in found:
                for m in truth.mechanism:
                    measured[m.signal].append(m.value)
            out_runs[label]["mechanism"] = measured
            for name, kind, at in mechanism:
                out_runs[label]["event_steps"].update({
                    f"{name} {key}": step
                    for key, step in event_steps(steps, measured[name], kind, at).items()})
    first_run = next(iter(out_runs.values()))
    events = list(event_steps(first_run["steps"], first_run["signal"], event, levels))
    mechanism_events = {name: [e for e in first_run["event_steps"]
                               if e.startswith(f"{name} ")] for name, _, _ in mechanism}
    every_event = list(first_run["event_steps"])
    references = (signal, *(name for name, _, _ in mechanism))
    # the head-to-head's runs of each event: those where it happens
    contest = {name: [label for label, info in out_runs.items()
                      if info["event_steps"][name] in info["steps"]] for name in every_event}
    change_points: dict[str, dict[str, list[int | None]]] = {name: {} for name in every_event}
    alignment: dict[str, dict] = {}
    for feature in dict.fromkeys([signal, *references[1:], "loss", *features]):
        per_event = {}
        for name in every_event:
            leads, apart, hits, chance, placed = [], [], [], [], []
            for label, found in runs.items():
                info = out_runs[label]
                series = [_value_of(r, feature, references) for _, _, r in found]
                series = [v if isinstance(v, (int, float)) and math.isfinite(v) else None
                          for v in series]
                found = alignment_or_none(info["steps"], series, info["event_steps"][name])
                if label in contest[name]:
                    change_points[name].setdefault(feature, []).append(
                        None if found is None else found.feature_step)
                leads.append(None if found is None else found.lead)
                apart.append(None if found is None else found.checkpoints_apart)
                hits.append(None if found is None else found.hit)
                if found is not None:
                    chance.append(chance_hit_rate(info["steps"], found.event_step))
                    placed.append((info["steps"], found.feature_step, found.event_step))
            defined = [h for h in hits if h is not None]
            rate = float(np.mean(chance)) if chance else None
            swapped = swapped_hits(*zip(*placed, strict=True)) if placed else np.zeros((0, 0))
            others = swapped[~np.eye(len(swapped), dtype=bool)]
            per_event[name] = {
                "leads": leads, "apart": apart, "hits": hits, "n_runs": len(defined),
                "hit_rate": float(np.mean(defined)) if defined else None,
                "chance": rate,
                "hit_p": hit_p_value(sum(defined), len(defined), rate),
                "swapped_hit_rate": float(others.mean()) if others.size else None,
                "permutation_p": permutation_p_value(swapped),
                "median_lead": _median([v for v in leads if v is not None]),
                "median_apart": _median([v for v in apart if v is not None]),
            }
        if any(e["n_runs"] for e in per_event.values()):
            alignment[feature] = per_event
    tested = [f for f in alignment if f not in (*references, "loss")]
    for name in every_event:  # Holm over the features (the references are no test)
        adjusted = holm([alignment[f][name]["hit_p"] for f in tested])
        for f, p in zip(tested, adjusted, strict=True):
            alignment[f][name]["hit_holm_p"] = p
    duel = {}
    for name in every_event:
        labels = contest[name]
        if len(labels) >= 2:
            duel[name] = head_to_head(
                [out_runs[label]["steps"] for label in labels],
                [out_runs[label]["event_steps"][name] for label in labels],
                {f: cps for f, cps in change_points[name].items() if f in alignment},
                references=references, alpha=ALPHA)
    return {"signal": signal, "event": event, "levels": list(levels) if levels else None,
            "events": events, "runs": out_runs, "alignment": alignment,
            "head_to_head": duel, "alpha": ALPHA,
            **({"mechanism": {name: {"event": kind, "levels": list(at) if at else None,
                                     "events": mechanism_events[name]}
                              for name, kind, at in mechanism}} if mechanism else {}),
            **({"runs_left_out": left_out} if left_out else {})}


def _value_of(record: Record, name: str, references: Sequence[str]) -> float | None:
    """The ground-truth signal (``references[0]``), a signal of its mechanism (the
    rest), the stored loss, or a feature of one record."""
    truth = record.ground_truth
    if name == references[0]:
        return truth.value if truth else None
    if name in references:
        return next((m.value for m in truth.mechanism if m.signal == name), None) \
            if truth else None
    if name == "loss":
        return record.loss
    return record.features.get(name)


def alignment_or_none(steps: Sequence[int], values: Sequence[float | None],
                      event_step: int | None) -> RunAlignment | None:
    """:func:`alignment`, ``None`` also where the event step is not one of ``steps``."""
    if event_step is None or event_step not in steps:
        return None
    return alignment(steps, values, event_step)
