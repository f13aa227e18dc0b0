"""Figures that read right (issue 60): what a figure's titles claim, that its title and
legend lie inside it, that seeds are told apart, and that a series too short for a figure
draws none of it and says why."""

from __future__ import annotations

import re

from matplotlib.figure import Figure as MplFigure
from test_plots import as_records, synthetic_records, synthetic_statistics, synthetic_weight_records

from toposig.analysis import correlations
from toposig.report import plots


def titles(drawn) -> list[str]:
    """Every title of a drawn figure: its suptitle and each Axes' titles."""
    top = drawn if isinstance(drawn, MplFigure) else drawn.get_figure(root=True)
    out = [t.get_text() for f in [top, *top.subfigs] for t in [f._suptitle] if t is not None]
    for ax in top.get_axes():
        out += [ax.get_title(loc) for loc in ("left", "center", "right")]
    return [t for t in out if t]


POOLED_P = re.compile(r"pooled[^\n]*\bp\s*=", re.IGNORECASE)


def test_no_pooled_p_value_is_printed_in_a_figure_title():
    records = synthetic_records()
    statistics = synthetic_statistics(records)
    drawn = plots.plot_topology_vs_perplexity.plot(records, statistics)
    shown = titles(drawn)
    assert any("pooled ρ (description) = " in t for t in shown), shown
    assert not any(POOLED_P.search(t) for t in shown), shown
    weights = as_records(synthetic_weight_records())
    stats = {"correlations": correlations.correlations_with_target(weights, "loss")}
    shown = titles(plots.plot_np_vs_loss_scatter.plot(weights, stats))
    assert any("pooled ρ (description) = " in t for t in shown), shown
    assert not any(POOLED_P.search(t) or "p = " in t for t in shown), shown


def test_the_heatmap_says_it_describes_and_does_not_test():
    records = synthetic_records()
    drawn = plots.plot_correlation_heatmap.plot(records, synthetic_statistics(records))
    title = " ".join(" ".join(titles(drawn)).split())  # the title's lines as one
    assert "raw correlations over all checkpoints: a description, not a test" in title
    assert "controls_summary / summary.md C4" in title

