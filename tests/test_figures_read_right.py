"""Figures that read right (issue 60): what a figure's titles claim, that its title and
legend lie inside it, that seeds are told apart, and that a series too short for a figure
draws none of it and says why."""

from __future__ import annotations

import re

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.text import Text
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
    assert "the calibrated tests are summary.md's table C4" in title


def assert_inside(drawn) -> list[Text]:
    """Every title and legend of a drawn figure lies inside the figure (a pixel of slack),
    as saved (constrained layout runs when the figure is drawn); returns those artists."""
    top = drawn if isinstance(drawn, MplFigure) else drawn.get_figure(root=True)
    FigureCanvasAgg(top)
    top.canvas.draw()
    renderer = top.canvas.get_renderer()
    artists = [t for f in [top, *top.subfigs] for t in [f._suptitle] if t is not None]
    artists += [t for ax in top.get_axes() for t in (ax.title, ax._left_title, ax._right_title)
                if t.get_text()]
    artists += [leg for f in [top, *top.subfigs] for leg in f.legends]
    artists += [leg for ax in top.get_axes() if (leg := ax.get_legend()) is not None]
    box = top.bbox
    for artist in artists:
        ext = artist.get_window_extent(renderer)
        assert (ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1
                and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1), (artist, ext, box)
    return artists


def controlled_run(tmp_path, n_models: int):
    from test_plots_analysis import MODELS, make_run
    from test_plots_analysis import as_records as analysis_records

    from toposig.analysis.compute import compute_statistics
    from toposig.run.results_folder import arrays_reader

    records = analysis_records(make_run(tmp_path, models=MODELS[:n_models]))
    return records, compute_statistics(records, n_bootstrap=20, arrays=arrays_reader(tmp_path))


def test_controls_summary_fits_its_title_and_legend_on_a_one_model_run(tmp_path):
    from toposig.report.plots_analysis import plot_controls_summary

    records, statistics = controlled_run(tmp_path, 1)
    drawn = plot_controls_summary.plot(records, statistics)
    artists = assert_inside(drawn)
    assert len(drawn.legends) == 1 and any(isinstance(a, Text) for a in artists)


def test_controls_summary_leaves_out_a_column_whose_every_cell_is_na(tmp_path):
    from toposig.records.statistics import controlled_of
    from toposig.report.plots_analysis import CONTROLS, _control_cell, plot_controls_summary

    records, statistics = controlled_run(tmp_path, 3)
    pooled = controlled_of(statistics).pooled
    assert pooled and all(_control_cell(entry, control)[0] == "undefined"
                          for entry in pooled.values() for control, _ in CONTROLS)
    drawn = plot_controls_summary.plot(records, statistics)
    (ax,) = [a for a in drawn.get_axes() if a.get_label() != "<colorbar>"]
    heads = [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"
             and t.get_text() in ("tiny-a", "tiny-b", "tiny-c", "pooled")]
    assert heads == ["tiny-a", "tiny-b", "tiny-c"]
    assert "left out, every cell n/a: pooled" in ax.get_title()
    assert "(pooled: also" not in ax.get_title()
    assert_inside(drawn)


def test_the_heatmap_fits_its_title_and_legend_on_a_one_model_run():
    records = synthetic_records(models=("pythia-70m",))
    assert_inside(plots.plot_correlation_heatmap.plot(records, synthetic_statistics(records)))


def seed_records(groups: dict[str, list[str]], steps=(0, 10, 100, 1000)) -> list:
    """Records of seed ensembles: group -> its seeds' model labels (``seed_group`` named
    on each record, as a task's runs write it)."""
    records = []
    for group, labels in groups.items():
        for k, label in enumerate(labels):
            for i, step in enumerate(steps):
                records.append({"model": f"runs/{label}", "model_label": label, "step": step,
                                "status": "ok", "seed": k, "seed_group": group,
                                "perplexity": 50.0 / (1 + i) + k, "loss": 4.0 - 0.5 * i,
                                "features": {"h1_total_persistence": 1.0 + i + 0.1 * k}})
    return as_records(records)


def test_the_seeds_of_one_ensemble_are_drawn_in_colours_of_their_own():
    seeds = [f"grokking-seed{k}" for k in range(8)]
    records = seed_records({"grokking": seeds})
    drawn = plots.plot_perplexity_curves.plot(records, {})
    (ax,) = drawn.get_axes()
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()
               if line.get_label() in seeds}
    assert sorted(colours) == sorted(seeds) and len(set(colours.values())) == 8
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(s in legend for s in seeds), legend  # the legend names every seed


def test_seeds_take_shades_of_their_models_colour_beside_other_models():
    from matplotlib.colors import rgb_to_hsv, to_rgb

    from toposig.analysis.correlations import by_model
    from toposig.report.panels import model_styles

    # labels that do not say they are seeds: the records' seed_group does
    records = seed_records({"small": ["s-a", "s-b", "s-c"], "large": ["l-a", "l-b", "l-c"]})
    styles = model_styles(by_model(records))
    assert len({st.color for st in styles.values()}) == 6
    hue = {label: rgb_to_hsv(to_rgb(st.color))[0] for label, st in styles.items()}
    assert max(hue[s] for s in ("s-a", "s-b", "s-c")) - min(
        hue[s] for s in ("s-a", "s-b", "s-c")) < 0.02  # one hue, several shades
    assert abs(hue["s-a"] - hue["l-a"]) > 0.1  # another model, another hue


def short_run(tmp_path, steps):
    from test_plots_analysis import MODELS, make_run
    from test_plots_analysis import as_records as analysis_records

    from toposig.analysis.compute import compute_statistics
    from toposig.run.results_folder import arrays_reader

    records = analysis_records(make_run(tmp_path, models=MODELS[:1], steps=steps))
    statistics = compute_statistics(records, n_bootstrap=10, arrays=arrays_reader(tmp_path),
                                    design_runs=0)
    return records, statistics, arrays_reader(tmp_path)


def test_a_series_too_short_for_a_figure_draws_none_of_it_and_says_why(tmp_path):
    from toposig.report import figures

    assert figures.MIN_CHECKPOINTS["correlation_heatmap"][0] == 3
    records, statistics, arrays = short_run(tmp_path / "one", (1000,))
    drawn = [f.name for f in figures.figures_that_apply(records, statistics, arrays)]
    assert drawn and not set(drawn) & set(figures.MIN_CHECKPOINTS), drawn
    why = figures.figures_not_drawn(statistics, records, arrays)
    assert why["correlation_heatmap"] == ("needs 3 or more checkpoints of one model for a "
                                          "Spearman correlation; the most here is 1")
    assert why["topological_evolution"].startswith("needs 2 or more checkpoints")
    assert {"persistence_diagrams", "betti_curves"}.isdisjoint(why)  # one checkpoint will do
    paths = figures.plot_all(records, statistics, tmp_path / "plots", arrays)
    assert {p.stem for p in paths}.isdisjoint(figures.MIN_CHECKPOINTS)
    # four checkpoints: correlations, not the three-segment phase fits
    records, statistics, arrays = short_run(tmp_path / "four", (0, 10, 100, 1000))
    drawn = [f.name for f in figures.figures_that_apply(records, statistics, arrays)]
    assert "correlation_heatmap" in drawn and "controls_summary" in drawn
    assert "phase_fits" not in drawn
    why = figures.figures_not_drawn(statistics, records, arrays)
    assert why["phase_fits"] == ("needs 6 or more checkpoints of one model for a "
                                 "three-segment fit; the most here is 4")
    assert not {"correlation_heatmap", "training_curves"} & set(why)


def test_the_analysis_warns_of_a_one_checkpoint_series_and_lists_what_it_skips(
        tmp_path, capsys, caplog):
    import logging

    import analyze_results
    from toposig.analysis.quality import warn_series_with_one_checkpoint
    from toposig.cli.import_tables import main as import_main
    from toposig.run.results_folder import load_entries

    table = tmp_path / "run.csv"
    rows = ["model,step,loss,my_feature"]
    rows += [f"m,{s},{3.0 - 0.1 * i:.2f},{0.5 + 0.03 * i * (-1) ** i:.3f}"
             for i, s in enumerate((0, 10, 100, 1000))]
    rows.append("lone,1000,2.5,0.7")
    table.write_text("\n".join(rows) + "\n")
    folder = tmp_path / "short"
    assert import_main([str(table), "--out", str(folder)]) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert analyze_results.main(["--out", str(folder), "--design-runs", "0"]) == 0
    out = capsys.readouterr().out
    assert "not drawn: phase_fits (needs 6 or more checkpoints of one model" in out
    warned = [r.getMessage() for r in caplog.records if "only one checkpoint" in r.getMessage()]
    assert len(warned) == 1 and "'lone'" in warned[0], caplog.text
    assert "cannot be drawn" in warned[0] and "cannot be tested" in warned[0]
    assert warn_series_with_one_checkpoint(load_entries(folder)) == ["lone"]
