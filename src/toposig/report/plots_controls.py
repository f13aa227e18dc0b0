"""The positive-control figure: the ground truth of every run, where each feature moves
against it, and the curves of the features placed best, every run's event marked.

Drawn only for a study whose statistics have a ``positive_controls`` section
(:func:`toposig.analysis.ground_truth.positive_control_analysis`). Like the other figure
modules, it reads nothing from disk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from toposig.analysis.compute import ArraysOf
from toposig.analysis.correlations import by_model
from toposig.records import Record
from toposig.records.positive_controls import Alignment, PositiveControls
from toposig.records.reading import SectionError
from toposig.records.statistics import positive_controls_of
from toposig.report.panels import finite_or_none, no_data, panel_grid, record_series
from toposig.report.style import (
    Drawn,
    Figure,
    StatisticsLike,
    Target,
    figure,
    registry,
    subplots,
)

MAX_FEATURES = 24  # rows of the alignment panel: the references, then the best placed
CURVES = 4  # panels of feature curves: the best placed features but the references


def run_colours(runs: Sequence[str]) -> dict[str, str]:
    """One colour per run (the seeds of one model are the runs compared here, so they
    are told apart, not drawn alike as elsewhere)."""
    return {r: f"C{i % 10}" for i, r in enumerate(runs)}


def has_positive_controls(records: Sequence[Record], statistics: StatisticsLike,
                          arrays: ArraysOf | None) -> bool:
    """The statistics hold a positive-control section with at least one run (a damaged
    section draws nothing; the summary says what is wrong with it)."""
    try:
        section = positive_controls_of(statistics)
    except SectionError:
        return False
    return section is not None and bool(section.runs)


def _signal_panel(ax: Axes, section: PositiveControls) -> None:
    """The ground-truth signal of every run across training, its first event marked."""
    colours = run_colours(list(section.runs))
    for label, run in section.runs.items():
        ax.plot(list(run.steps), [finite_or_none(v) for v in run.signal],
                color=colours[label], linewidth=1.0, label=label)
        for k, event in enumerate(section.events):
            step = run.event_steps.get(event)
            if step is not None:
                ax.axvline(step, color=colours[label], linewidth=0.6,
                           linestyle=("--", ":")[k % 2], alpha=0.7)
    for level in section.levels or ():
        ax.axhline(level, color="0.5", linewidth=0.6)
    ax.set_xlabel("training step")
    ax.set_ylabel(str(section.signal))
    ax.set_title("The ground truth of every run (dashed: its events)")
    ax.legend(fontsize=7)


def _ranked(section: PositiveControls, event: str) -> list[str]:
    alignment = section.alignment

    def key(feature: str) -> tuple[float, str]:
        rate = finite_or_none(_at(section, feature, event).hit_rate)
        return (-(rate if rate is not None else -1.0), feature)

    references = [f for f in section.references if f in alignment]
    ranked = sorted((f for f in alignment if f not in references), key=key)
    return [f for f in references if f is not None] + ranked[: MAX_FEATURES - len(references)]


def _at(section: PositiveControls, feature: str, event: str) -> Alignment:
    """The feature's alignment with ``event`` (an empty one where there is none)."""
    return section.alignment.get(feature, {}).get(event) or Alignment()


def _alignment_panel(ax: Axes, section: PositiveControls) -> None:
    """Per feature: every run's distance from its change-point
    (:func:`toposig.analysis.ground_truth.change_point`) to the first event, in
    checkpoints (signed: left of 0 the feature moves first); the band is a hit."""
    if not section.events or not section.alignment:
        no_data(ax, "no run reaches the ground truth's event")
        return
    event = section.events[0]
    features = _ranked(section, event)
    runs = list(section.runs)
    colours = run_colours(runs)
    for i, feature in enumerate(features):
        a = _at(section, feature, event)
        for k, (lead, n) in enumerate(zip(a.leads, a.apart, strict=False)):
            if lead is None or n is None:
                continue
            signed = -n if lead > 0 else n  # checkpoints before (-) or after (+) the event
            jitter = (k - (len(runs) - 1) / 2) * 0.12
            ax.plot([signed], [i + jitter], linestyle="none", marker="o", markersize=4,
                    color=colours[runs[k]] if k < len(runs) else "0.3")
    ax.axvspan(-1.5, 1.5, color="0.9", zorder=0)
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    labels = [f"{f}  ({_at(section, f, event).hit_rate or 0:.0%})" for f in features]
    ax.set_yticks(np.arange(len(features)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"change-point − event ({event}), in checkpoints (negative: the feature "
                  "moves first)")
    ax.set_title("Where each feature's level shifts (grey: a hit; in brackets: hit rate)")
    ax.legend(handles=[Line2D([], [], color=colours[r], marker="o", linestyle="none",
                              label=r) for r in runs], fontsize=7, loc="lower right")


def _curves_panel(ax: Axes, records: Sequence[Record], section: PositiveControls, feature: str,
                  event: str) -> None:
    """One feature across training, every run scaled to its own range (0: its lowest
    value, 1: its highest), with the run's event (dashed) and the feature's change-point
    (a dot) in the run's colour."""
    runs = list(section.runs)
    colours = run_colours(runs)
    a = _at(section, feature, event)
    leads = a.leads
    series = record_series(by_model(records), feature)
    for k, label in enumerate(runs):
        steps, values = series.get(label, (np.array([]), np.array([])))
        if len(values) < 2:
            continue
        span = float(np.ptp(values))
        scaled = (values - values.min()) / span if span > 0 else np.zeros_like(values)
        colour = colours[label]
        ax.plot(steps, scaled, color=colour, linewidth=0.9)
        step = section.runs[label].event_steps.get(event)
        if step is None:
            continue
        ax.axvline(step, color=colour, linewidth=0.7, linestyle="--", alpha=0.8)
        lead = leads[k] if k < len(leads) else None
        if lead is not None:
            at = step - lead
            ax.plot([at], [float(np.interp(at, steps, scaled))], marker="o", markersize=5,
                    color=colour, markeredgecolor="black", markeredgewidth=0.5)
    rate = finite_or_none(a.hit_rate)
    ax.set_title(f"{feature}" + (f" (hits {rate:.0%})" if rate is not None else ""),
                 fontsize=9)
    ax.set_xlabel("training step")
    ax.set_ylabel("scaled to each run's range")


@figure("positive_control", has_positive_controls)
def plot_positive_control(records: Sequence[Record], statistics: StatisticsLike,
                          arrays: ArraysOf | None = None,
                          on: Target | None = None) -> Drawn | None:
    """A positive control: the ground-truth signal of every run across training with its
    events; for the signal itself, the held-out loss and the features whose change-points
    fall nearest the first event most often, each run's distance from it in checkpoints;
    and below, the curves of the best placed features (up to :data:`CURVES`), every run's
    event and the feature's change-point marked."""
    section = positive_controls_of(statistics) or PositiveControls()
    events = section.events
    best = ([f for f in _ranked(section, events[0]) if f not in section.references][:CURVES]
            if events and section.alignment else [])
    if not best:
        fig, (left, right) = panel_grid(2, 2, figsize=(14.0, 6.5), target=on)
    else:
        fig, axes = subplots(2, CURVES, figsize=(16.0, 10.0), layout="constrained",
                             squeeze=False, height_ratios=[1.6, 1.0], target=on)
        grid = axes[0, 0].get_gridspec()
        for ax in axes[0]:
            ax.remove()
        half = CURVES // 2
        left, right = fig.add_subplot(grid[0, :half]), fig.add_subplot(grid[0, half:])
        for ax, feature in zip(axes[1], best, strict=False):
            _curves_panel(ax, records, section, feature, events[0])
        for ax in axes[1][len(best):]:
            ax.set_visible(False)
    _signal_panel(left, section)
    _alignment_panel(right, section)
    fig.suptitle("Positive control: does a feature move when the known transition happens?")
    return fig


MAX_EVENTS = 3  # panels of the head-to-head figure: the signal's first events, then
# the first of each mechanism signal's


def has_head_to_head(records: Sequence[Record], statistics: StatisticsLike,
                     arrays: ArraysOf | None) -> bool:
    """The positive-control section holds a head-to-head of at least one event."""
    try:
        section = positive_controls_of(statistics)
    except SectionError:
        return False
    return section is not None and any(section.head_to_head.values())


def _duel_panel(ax: Axes, section: PositiveControls, event: str) -> None:
    """Every feature's signed distance from ``event``, run by run, in checkpoints (right
    of 0: the feature moves first), the ground truth first, then by corrected p; a
    feature that detects the transition is starred and bold."""
    duel = section.head_to_head[event]
    runs = [label for label, run in section.runs.items()
            if run.event_steps.get(event) is not None
            and run.event_steps.get(event) in run.steps]
    colours = run_colours(list(section.runs))

    truth = (section.signal, *section.mechanism)  # tested alone, placed first

    def key(feature: str) -> tuple:
        t = duel[feature]
        p = finite_or_none(t.p_adjusted)
        d = finite_or_none(t.distance)
        return (truth.index(feature) if feature in truth else len(truth),
                p if p is not None else np.inf, d if d is not None else np.inf, feature)

    features = sorted(duel, key=key)
    for i, feature in enumerate(features):
        leads = duel[feature].leads
        for k, lead in enumerate(leads):
            if lead is None:
                continue
            jitter = (k - (len(leads) - 1) / 2) * 0.1
            ax.plot([lead], [i + jitter], linestyle="none", marker="o", markersize=3.5,
                    color=colours[runs[k]] if k < len(runs) else "0.3")
        median = finite_or_none(duel[feature].median_lead)
        if median is not None:
            ax.plot([median], [i], marker="|", markersize=9, color="black")
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    labels = []
    for f in features:
        t = duel[f]
        p = finite_or_none(t.p_adjusted)
        star = "* " if t.detects and f not in truth else ""
        labels.append(f"{star}{f}  (p {p:.2g})" if p is not None else f"{star}{f}")
    ax.set_yticks(np.arange(len(features)), labels, fontsize=6)
    for tick, f in zip(ax.get_yticklabels(), features, strict=True):
        if duel[f].detects and f not in truth:
            tick.set_fontweight("bold")
    ax.set_ylim(len(features) - 0.5, -0.5)
    ax.set_xlabel("event's checkpoint − change-point's (right of 0: the feature moves "
                  "first)")
    floor = finite_or_none(next(iter(duel.values())).min_p)
    ax.set_title(f"Event {event}: every feature's change-point, run by run\n"
                 f"(|: median; * detects: corrected p < {section.alpha or 0.05:g}"
                 + (f"; the smallest p: {floor:.2g})" if floor is not None else ")"),
                 fontsize=8)
    ax.legend(handles=[Line2D([], [], color=colours[r], marker="o", linestyle="none",
                              label=r) for r in runs], fontsize=6, loc="lower right")


@figure("head_to_head", has_head_to_head)
def plot_head_to_head(records: Sequence[Record], statistics: StatisticsLike,
                      arrays: ArraysOf | None = None,
                      on: Target | None = None) -> Drawn | None:
    """The head-to-head on the known transition (part F3 of the summary): for the
    signal's first event, each mechanism signal's first and the signal's others, up to
    :data:`MAX_EVENTS`, every feature's change-point against the event, run by run, in
    checkpoints, sorted by the corrected p of its mean distance."""
    section = positive_controls_of(statistics) or PositiveControls()
    own = [e for e in section.events if section.head_to_head.get(e)]
    mechanism = [next(e for e in m.events if section.head_to_head.get(e))
                 for m in section.mechanism.values()
                 if any(section.head_to_head.get(e) for e in m.events)]
    events = (own[:1] + mechanism + own[1:])[:MAX_EVENTS]
    if not events:
        fig, ax = subplots(1, 1, figsize=(8.0, 4.0), target=on)
        no_data(ax, "no event happens in two runs or more")
        return fig
    rows = max(len(section.head_to_head[e]) for e in events)
    fig, axes = subplots(1, len(events), figsize=(7.5 * len(events), 1.5 + 0.2 * rows),
                         layout="constrained", squeeze=False, target=on)
    for ax, event in zip(axes[0], events, strict=True):
        _duel_panel(ax, section, event)
    fig.suptitle("Head to head: which family's change-point lies nearest the known "
                 "transition?")
    return fig


CONTROL_FIGURES: dict[str, Figure] = registry(plot_positive_control, plot_head_to_head)

__all__ = ["CONTROL_FIGURES", "has_head_to_head", "has_positive_controls",
           "plot_head_to_head", "plot_positive_control"]
