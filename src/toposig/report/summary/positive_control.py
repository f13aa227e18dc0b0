"""Part F of the summary, for a study whose checkpoints state a ground truth only: the
known transition of each run, and where each feature moves against it."""

from __future__ import annotations

import math
from collections.abc import Mapping

from toposig.analysis.correlations import feature_group
from toposig.records import Record
from toposig.records.positive_controls import Alignment, HeadToHead, PositiveControls
from toposig.records.statistics import (
    Statistics,
    about_of,
    positive_controls_of,
)
from toposig.report.summary.cells import (
    DASH,
    Absent,
    Part,
    computed,
    finite,
    fmt_count,
    fmt_p,
    fmt_step,
    fmt_value,
    md_code,
    md_table,
)


def _control_runs(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pc = computed(positive_controls_of(statistics), "positive_controls")
    events = list(pc.events)
    every = list(pc.every_event)
    headers = ["Run", "Seed", *(event_heading(e) for e in every), f"Final {pc.signal}",
               *(f"Final {name}" for name in pc.mechanism)]
    rows = [[md_code(label), DASH if run.seed is None else run.seed,
             *(fmt_step(run.event_steps.get(e)) for e in every),
             fmt_value((run.signal or (None,))[-1]),
             *(fmt_value((run.mechanism.get(name) or (None,))[-1]) for name in pc.mechanism)]
            for label, run in pc.runs.items()]
    never = sum(run.event_steps.get(events[0]) is None
                for run in pc.runs.values()) if events else 0
    caption = (
        f"The ground truth of each run, measured without any topology: `{pc.signal}`, "
        f"stored with every checkpoint by the task that trained it; its event is the first "
        "checkpoint at which it "
        + (f"{'reaches' if pc.event == 'rise' else 'comes down to'} each level"
           if pc.levels else "has covered half its way from first to last value")
        + " (— = never within the run)."
        + (" The signals that name the mechanism, stored beside it, have events of their "
           "own: " + "; ".join(
               f"`{name}` {'rises' if m.event == 'rise' else 'falls'}, its event the first "
               "checkpoint at which it "
               + (f"{'reaches' if m.event == 'rise' else 'comes down to'} "
                  + ", ".join(fmt_value(v) for v in m.levels)
                  if m.levels else "has covered half its way")
               for name, m in pc.mechanism.items()) + "."
           if pc.mechanism else "")
        + (f" {never} run(s) never reach the first event, and count in no alignment."
           if never else "")
        + (" Left out, as they state another ground truth: "
           + ", ".join(md_code(r) for r in pc.runs_left_out) + "."
           if pc.runs_left_out else ""))
    return [caption, "", *md_table(headers, rows)]


def event_heading(event: str) -> str:
    """``"0.5"`` -> "Step reaching 0.5"; a mechanism signal's ``"name 0.3"`` -> "Step
    `name` reaches 0.3"."""
    name, _, at = event.rpartition(" ")
    if name:
        return (f"Step `{name}` is halfway" if at == "halfway"
                else f"Step `{name}` reaches {_level(at)}")
    if event == "halfway":
        return "Halfway step"
    return f"Step reaching {_level(event)}"


def _level(text: str) -> str:
    """A level as the tables print numbers; as written when it is not one (a damaged
    statistics file)."""
    try:
        return fmt_value(float(text))
    except ValueError:
        return text


def _family(pc: PositiveControls, feature: str) -> str:
    return ("the ground truth itself" if feature == pc.signal
            else "the ground truth's mechanism" if feature in pc.mechanism
            else "quality (held-out loss)" if feature == "loss"
            else str(feature_group(feature)))


def _control_alignment(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pc = computed(positive_controls_of(statistics), "positive_controls")
    events = list(pc.events)
    if not events:
        raise Absent("the ground truth defines no event")
    alignment = pc.alignment
    first = events[0]
    absent = Alignment()

    def order(item: tuple[str, Mapping[str, Alignment]]) -> tuple:
        e = item[1].get(first, absent)
        rate, apart = e.hit_rate, e.median_apart
        return (-(rate if finite(rate) else -1), apart if finite(apart) else math.inf,
                item[0])

    headers = ["Feature", "Family",
               *(h for e in events for h in (
                   f"{event_heading(e)}: hits (rate; chance; p; Holm p)",
                   "at other runs' events (rate; permutation p)",
                   "median lead, steps", "median checkpoints apart"))]
    rows = []
    references = pc.references  # placed first; no test
    ranked = [*(f for f in references if f in alignment),
              *(f for f, _ in sorted(alignment.items(), key=order) if f not in references)]
    for feature in ranked:
        per_event = alignment[feature]
        cells = []
        for e in events:
            a = per_event.get(e, absent)
            cells += [f"{a.n_hits} of {a.n_runs or 0} ({fmt_value(a.hit_rate)}; "
                      f"{fmt_value(a.chance)}; {fmt_p(a.hit_p)}; {fmt_p(a.hit_holm_p)})",
                      f"{fmt_value(a.swapped_hit_rate)}; {fmt_p(a.permutation_p)}",
                      fmt_step(a.median_lead), fmt_count(a.median_apart)]
        rows.append([md_code(feature), _family(pc, feature), *cells])
    better = [f for f, per in alignment.items()
              if (p := per.get(first, absent).hit_holm_p) is not None and finite(p)
              and p < 0.05]
    caption = (
        "Where each feature's level shifts (its change-point: the single change in mean "
        "that best splits its series, at least three checkpoints a side) against the "
        "ground truth's event, run by run: a hit is a change-point within one checkpoint "
        "of the event; lead = event step − change-point step (positive: the feature moves "
        "first). Chance: the hit rate of a change-point placed at random where one can "
        "fall; p: one-sided binomial test of the hits against it, Holm p: adjusted over "
        "the features. At other runs' events: the hit rate of the same change-points "
        "against the events of the other runs, which a feature that moves with the stage "
        "of training rather than with the event scores as well; permutation p: the share "
        "of the ways to hand the events to the runs that give at least as many hits "
        "(one-sided, not adjusted over the features; with n runs at least 1/n!). "
        "References that need no topology, placed first: "
        f"`{pc.signal}`, the ground truth's own change-point (the method's check), "
        + "".join(f"`{name}`, " for name in pc.mechanism)
        + "and `loss`, the held-out loss the task stores. Then sorted by the hit rate at the "
        "first event. "
        + (f"Features with hits above chance (Holm p < 0.05) at the first event: "
           f"{', '.join(md_code(f) for f in better)}." if better
           else "No feature's hits are above chance (Holm p < 0.05) at the first event.")
        + " The within-model controls of every feature against the ground-truth signal "
        "(the quality of parts A to C here) are in C1 to C4, computed for "
        + ("the first seed of each group only."
           if about_of(statistics).notes.get("controlled_seeds") else "every run."))
    return [caption, "", *md_table(headers, rows)]


def _head_to_head(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pc = computed(positive_controls_of(statistics), "positive_controls")
    events = [e for e in pc.every_event if e in pc.head_to_head]
    if not events:
        raise Absent("no event happens in two runs or more")
    first = pc.head_to_head[events[0]]
    absent = HeadToHead()
    truth = (pc.signal, *pc.mechanism)  # tested alone, placed first

    def order(feature: str) -> tuple:
        t = first.get(feature, absent)
        return (truth.index(feature) if feature in truth else len(truth),
                t.p_adjusted if finite(t.p_adjusted) else math.inf,
                t.distance if finite(t.distance) else math.inf, feature)

    headers = ["Feature", "Family",
               *(f"{event_heading(e)}: checkpoints apart (runs); p; corrected p; median "
                 "lead" for e in events)]
    features = sorted({f for e in events for f in pc.head_to_head[e]}, key=order)
    rows = []
    for feature in features:
        cells = []
        for e in events:
            t = pc.head_to_head[e].get(feature, absent)
            mark = " **detects**" if t.detects and feature not in truth else ""
            cells.append(f"{fmt_value(t.distance)} ({t.n_runs or 0}); {fmt_p(t.p)}; "
                         f"{fmt_p(t.p_adjusted)}{mark}; {_fmt_lead(t.median_lead)}")
        rows.append([md_code(feature), _family(pc, feature), *cells])
    alpha = pc.alpha if finite(pc.alpha) else 0.05
    verdicts = []
    for e in events:
        found = [f for f, t in pc.head_to_head[e].items() if t.detects and f not in truth]
        floor = next(iter(pc.head_to_head[e].values())).min_p
        verdicts.append(
            f"{event_heading(e)}: "
            + (", ".join(md_code(f) for f in found) if found else "no feature")
            + f" (the smallest p these runs allow: {fmt_p(floor)}).")
    caption = (
        "The head-to-head of every family on the known transition. Each cell: the mean "
        "distance, in checkpoints, between the feature's change-point (as in F2) and the "
        "run's event, over the runs where the event happens (their number in brackets); "
        "its one-sided p, the share of the ways to hand the events to the runs that bring "
        "the change-points as near on average (all orders up to 7 runs, else 20,000 "
        "drawn), so a feature that moves at the same stage of every run does not pass; "
        "its corrected p, Westfall and Young's min-P over every feature here (the loss "
        "included) but the ground truth's own signals, which are each tested alone; and "
        "the median lead, the event's checkpoint minus the change-point's (positive: the "
        "feature moves first). A feature is said to detect the transition only with a "
        f"corrected p below {fmt_value(alpha)}. Detected, by event: " + " ".join(verdicts))
    return [caption, "", *md_table(headers, rows)]


def _fmt_lead(x) -> str:
    return f"lead {x:+.3g}" if finite(x) else "lead —"


PART = Part(
    "Part F. Positive control",
    "A training run whose transition step is known without topology: does the pipeline "
    "see it, and when?",
    (("F1. The ground truth", _control_runs),
     ("F2. Features against the transition", _control_alignment),
     ("F3. Head to head: whose change-point lies nearest the transition", _head_to_head)),
    needs="positive_controls")  # only a study whose checkpoints state one
