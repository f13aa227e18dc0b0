"""The seed-ensemble figure: every seed's loss curve, and the across-seeds tests.

Drawn only for a study whose statistics have an ``ensembles`` section
(:func:`toposig.analysis.ensembles.ensemble_analysis`): the records of the seeds, grouped
by the model they are seeds of, and the section's partial correlations with their
intervals. Like the other figure modules, it reads nothing from disk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from toposig.analysis.compute import ArraysOf
from toposig.records import Record
from toposig.records.ensembles import AcrossSeeds, Ensembles
from toposig.records.reading import SectionError
from toposig.records.statistics import ensembles_of
from toposig.report.panels import (
    compact_handles,
    finite_or_none,
    model_styles,
    no_data,
    panel_grid,
)
from toposig.report.style import Drawn, Figure, StatisticsLike, Target, figure, registry

# the features drawn in the forest panel, in this order, where the section has them
HEADLINE_FEATURES = ("h0_total_persistence", "h1_total_persistence", "h1_n_features",
                     "np_mean", "weight_h0_total", "weight_h1_total", "rankme",
                     "effective_rank_cov", "mean_norm", "weight_l2_norm", "weight_alpha_mean")
FRACTION_MARKERS = ("o", "s", "^")


def has_ensembles(records: Sequence[Record], statistics: StatisticsLike,
                  arrays: ArraysOf | None) -> bool:
    """The statistics hold an across-seeds analysis with at least one seed group (a
    damaged section draws nothing; the summary says what is wrong with it)."""
    try:
        section = ensembles_of(statistics)
    except SectionError:
        return False
    return section is not None and bool(section.groups)


def _loss_panel(ax: Axes, records: Sequence[Record], groups: Sequence[str]) -> None:
    """Held-out loss across training, one thin line per seed, each seed its own colour
    (:func:`~toposig.report.panels.model_styles`: shades of its size's colour beside other
    sizes), the legend naming the seeds while they fit in it."""
    runs: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        loss, step, group = finite_or_none(r.loss), r.step, r.checkpoint.seed_group
        if group is not None and group in groups and loss is not None and step is not None:
            runs.setdefault(r.model_label, []).append((int(step), loss))
    if not runs:
        no_data(ax, "no stored loss")
        return
    styles = model_styles({label: [r for r in records if r.model_label == label]
                           for label in runs})
    for label, pts in runs.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=styles[label].color,
                linewidth=0.8, alpha=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out loss (nats / token)")
    ax.set_title("Every seed's held-out loss")
    ax.legend(handles=compact_handles([Line2D([], [], color=styles[label].color, label=label)
                                       for label in runs]), fontsize=8)


def _forest_panel(ax: Axes, section: Ensembles, groups: Sequence[str], styles) -> None:
    """Partial r across seeds with its interval, per headline feature, size and fraction."""
    across = section.across_seeds
    features = [f for f in HEADLINE_FEATURES if f in across]
    fractions = list(section.fractions)
    if not features:
        no_data(ax, "no headline feature was tested across seeds")
        return
    n_slots = len(groups) * len(fractions)
    offsets = np.linspace(-0.35, 0.35, n_slots) if n_slots > 1 else np.zeros(1)
    for fi, feature in enumerate(features):
        slot = 0
        for g in groups:
            for k, key in enumerate(fractions):
                c = across[feature].get(key, {}).get(g) or AcrossSeeds()
                y = fi + offsets[slot]
                slot += 1
                r, lo, hi = (finite_or_none(x) for x in (c.r, c.ci_low, c.ci_high))
                if r is None:
                    continue
                if lo is not None and hi is not None:
                    ax.plot([lo, hi], [y, y], color=styles[g].color, linewidth=1.0)
                ax.plot([r], [y], linestyle="none", color=styles[g].color,
                        marker=FRACTION_MARKERS[k % len(FRACTION_MARKERS)], markersize=4,
                        markerfacecolor=styles[g].color if c.beyond_loss else "white")
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    ax.set_yticks(range(len(features)), features, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(-1.05, 1.05)
    ax.set_xlabel("partial Spearman r with the final loss, across seeds")
    ax.set_title("Beyond the loss (and the best baseline) at each fraction")
    ax.legend(handles=[Line2D([], [], color="0.3", linestyle="none",
                              marker=FRACTION_MARKERS[k % len(FRACTION_MARKERS)],
                              markerfacecolor="white", label=f"at {float(key):.0%} of training")
                       for k, key in enumerate(fractions)]
              + [Line2D([], [], color="0.3", linestyle="none", marker="o",
                        markerfacecolor="0.3", label="interval excludes 0")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


@figure("seed_ensemble", has_ensembles)
def plot_seed_ensemble(records: Sequence[Record], statistics: StatisticsLike,
                       arrays: ArraysOf | None = None,
                       on: Target | None = None) -> Drawn | None:
    """A seed ensemble (1 × 2): the held-out loss of every seed across training, each
    seed its own colour (beside other sizes, a shade of its size's colour); and for the
    headline features the partial Spearman r across seeds of the value at 20/30/50 % of
    training with the final loss, given the loss there and the best baseline, with its
    bootstrap interval over seeds (filled: the interval excludes 0), coloured by size."""
    section = ensembles_of(statistics) or Ensembles()
    groups = list(section.groups)
    styles = model_styles(groups)
    fig, (left, right) = panel_grid(2, 2, figsize=(13.0, 5.5), target=on)
    _loss_panel(left, records, groups)
    _forest_panel(right, section, groups, styles)
    fig.suptitle("Seed ensemble: does a feature tell the seeds apart beyond the loss?")
    return fig


ENSEMBLE_FIGURES: dict[str, Figure] = registry(plot_seed_ensemble)

__all__ = ["ENSEMBLE_FIGURES", "HEADLINE_FEATURES", "has_ensembles", "plot_seed_ensemble"]
