"""Part F of the summary, for a study whose checkpoints state a ground truth only: the
known transition of each run, and where each feature moves against it."""

from __future__ import annotations

import math
from collections.abc import Mapping

from toposig.analysis.correlations import feature_group
from toposig.records import Record
from toposig.records.positive_controls import Alignment
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
    headers = ["Run", "Seed", *(_event_heading(e) for e in events), f"Final {pc.signal}"]
    rows = [[md_code(label), DASH if run.seed is None else run.seed,
             *(fmt_step(run.event_steps.get(e)) for e in events),
             fmt_value((run.signal or (None,))[-1])]
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
        + (f" {never} run(s) never reach the first event, and count in no alignment."
           if never else "")
        + (" Left out, as they state another ground truth: "
           + ", ".join(md_code(r) for r in pc.runs_left_out) + "."
           if pc.runs_left_out else ""))
    return [caption, "", *md_table(headers, rows)]


def _event_heading(event: str) -> str:
    if event == "halfway":
        return "Halfway step"
    return f"Step reaching {fmt_value(float(event))}"


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
                   f"{_event_heading(e)}: hits (rate; chance; p; Holm p)",
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
        family = ("the ground truth itself" if feature == pc.signal
                  else "quality (held-out loss)" if feature == "loss"
                  else str(feature_group(feature)))
        rows.append([md_code(feature), family, *cells])
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
        "and `loss`, the held-out loss the task stores. Then sorted by the hit rate at the "
        "first event. "
        + (f"Features with hits above chance (Holm p < 0.05) at the first event: "
           f"{', '.join(md_code(f) for f in better)}." if better
           else "No feature's hits are above chance (Holm p < 0.05) at the first event.")
        + " The within-model controls of every feature against the ground-truth signal "
        "(the quality of parts A to C here) are in C1 to C4, computed for "
        + ("the first seed of each group only."
           if about_of(statistics).notes.get("controlled_seeds") else "every run."))
    return [caption, "", *md_table(headers, rows)]


PART = Part(
    "Part F. Positive control",
    "A training run whose transition step is known without topology: does the pipeline "
    "see it, and when?",
    (("F1. The ground truth", _control_runs),
     ("F2. Features against the transition", _control_alignment)),
    needs="positive_controls")  # only a study whose checkpoints state one
