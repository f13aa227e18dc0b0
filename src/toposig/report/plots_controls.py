"""The positive-control figure: the ground truth of every run, and where each feature
moves against it.

Drawn only for a study whose statistics have a ``positive_controls`` section
(:func:`toposig.analysis.ground_truth.positive_control_analysis`). Like the other figure
modules, it reads nothing from disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from toposig.report.plots import finite_or_none, no_data, panel_grid
from toposig.report.style import Drawn, Figure, figure, registry

MAX_FEATURES = 24  # rows of the alignment panel: the references, then the best placed


def run_colours(runs: Sequence[str]) -> dict[str, str]:
    """One colour per run (the seeds of one model are the runs compared here, so they
    are told apart, not drawn alike as elsewhere)."""
    return {r: f"C{i % 10}" for i, r in enumerate(runs)}


def has_positive_controls(records: Sequence[dict], statistics: dict,
                          results_root: Path | None) -> bool:
    """The statistics hold a positive-control section with at least one run."""
    section = statistics.get("positive_controls")
    return isinstance(section, Mapping) and bool(section.get("runs"))


def _signal_panel(ax: Axes, section: Mapping) -> None:
    """The ground-truth signal of every run across training, its first event marked."""
    runs = section.get("runs") or {}
    events = list(section.get("events") or [])
    colours = run_colours(list(runs))
    for label, run in runs.items():
        steps, values = run.get("steps") or [], run.get("signal") or []
        ax.plot(steps, [finite_or_none(v) for v in values], color=colours[label],
                linewidth=1.0, label=label)
        for k, event in enumerate(events):
            step = (run.get("event_steps") or {}).get(event)
            if step is not None:
                ax.axvline(step, color=colours[label], linewidth=0.6,
                           linestyle=("--", ":")[k % 2], alpha=0.7)
    for level in section.get("levels") or []:
        ax.axhline(level, color="0.5", linewidth=0.6)
    ax.set_xlabel("training step")
    ax.set_ylabel(str(section.get("signal")))
    ax.set_title("The ground truth of every run (dashed: its events)")
    ax.legend(fontsize=7)


def _ranked(section: Mapping, event: str) -> list[str]:
    alignment = section.get("alignment") or {}

    def key(feature: str):
        a = (alignment[feature] or {}).get(event) or {}
        rate = finite_or_none(a.get("hit_rate"))
        return (-(rate if rate is not None else -1.0), feature)

    references = [f for f in (section.get("signal"), "loss") if f in alignment]
    ranked = sorted((f for f in alignment if f not in references), key=key)
    return references + ranked[: MAX_FEATURES - len(references)]


def _alignment_panel(ax: Axes, section: Mapping) -> None:
    """Per feature: every run's distance from its change-point
    (:func:`toposig.analysis.ground_truth.change_point`) to the first event, in
    checkpoints (signed: left of 0 the feature moves first); the band is a hit."""
    events = list(section.get("events") or [])
    if not events or not section.get("alignment"):
        no_data(ax, "no run reaches the ground truth's event")
        return
    event = events[0]
    features = _ranked(section, event)
    runs = list(section.get("runs") or {})
    colours = run_colours(runs)
    for i, feature in enumerate(features):
        a = (section["alignment"][feature] or {}).get(event) or {}
        leads, apart = a.get("leads") or [], a.get("apart") or []
        for k, (lead, n) in enumerate(zip(leads, apart, strict=False)):
            if lead is None or n is None:
                continue
            signed = -n if lead > 0 else n  # checkpoints before (-) or after (+) the event
            jitter = (k - (len(runs) - 1) / 2) * 0.12
            ax.plot([signed], [i + jitter], linestyle="none", marker="o", markersize=4,
                    color=colours[runs[k]] if k < len(runs) else "0.3")
    ax.axvspan(-1.5, 1.5, color="0.9", zorder=0)
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    labels = [f"{f}  ({(section['alignment'][f].get(event) or {}).get('hit_rate', 0) or 0:.0%})"
              for f in features]
    ax.set_yticks(np.arange(len(features)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"change-point − event ({event}), in checkpoints (negative: the feature "
                  "moves first)")
    ax.set_title("Where each feature's level shifts (grey: a hit; in brackets: hit rate)")
    ax.legend(handles=[Line2D([], [], color=colours[r], marker="o", linestyle="none",
                              label=r) for r in runs], fontsize=7, loc="lower right")


@figure("positive_control", has_positive_controls)
def plot_positive_control(records: list[dict], statistics: dict,
                          results_root: Path | None = None) -> Drawn | None:
    """A positive control (1 × 2): the ground-truth signal of every run across training
    with its events; and, for the signal itself, the held-out loss and the features whose
    change-points fall nearest the first event most often, each run's distance from it
    in checkpoints."""
    section = statistics.get("positive_controls") or {}
    fig, (left, right) = panel_grid(2, 2, figsize=(14.0, 6.5))
    _signal_panel(left, section)
    _alignment_panel(right, section)
    fig.suptitle("Positive control: does a feature move when the known transition happens?")
    return fig


CONTROL_FIGURES: dict[str, Figure] = registry(plot_positive_control)

__all__ = ["CONTROL_FIGURES", "has_positive_controls", "plot_positive_control"]
