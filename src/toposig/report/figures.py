"""Every figure of a results folder: which apply to the records, and drawing them all.

:data:`ALL_FIGURES` lists every figure (:class:`toposig.report.style.Figure`) in drawing
order: the embedding figures and the weight figures with the correlation heatmap
(``plots``), the statistics figures (``plots_analysis``) and the embedding's figures of its
stored diagrams and per-layer features (``plots_diagrams``), then the landscape and
gradient figures (``plots_probes``), the figure over training of every family without one
of its own (``plots_families``), for a seed ensemble its figure (``plots_ensembles``) and
for a positive control its figure (``plots_controls``).
:func:`plot_all` draws those that apply to the records, skipping those that need more
checkpoints of one model than any has (:data:`MIN_CHECKPOINTS`; :func:`figures_not_drawn`
says why), and removes the figures of these names it did not draw. :func:`plot_compared` draws one
figure for two runs (or more): on the same axes when the figure is drawn from the records
alone (``Figure.overlay``), else side by side.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure as MplFigure

from toposig.analysis.compute import ArraysOf
from toposig.analysis.correlations import MIN_POINTS
from toposig.files.atomic import make_folder, remove_file
from toposig.records import Record
from toposig.records.statistics import about_of
from toposig.report.plots import FIGURES, WEIGHT_FIGURES
from toposig.report.plots_analysis import ANALYSIS_FIGURES, not_drawn_reason
from toposig.report.plots_controls import CONTROL_FIGURES
from toposig.report.plots_diagrams import DIAGRAM_FIGURES
from toposig.report.plots_ensembles import ENSEMBLE_FIGURES
from toposig.report.plots_families import FAMILY_FIGURES
from toposig.report.plots_probes import PROBE_FIGURES
from toposig.report.style import (
    FIGURE_FORMATS,
    RC_PARAMS,
    Drawn,
    Figure,
    FigureOutput,
    RecordLike,
    StatisticsLike,
    Target,
    applicable,
    as_records,
    canvas,
    save_figure,
)

logger = logging.getLogger(__name__)

ALL_FIGURES: dict[str, Figure] = {**FIGURES, **WEIGHT_FIGURES, **ANALYSIS_FIGURES,
                                  **DIAGRAM_FIGURES, **PROBE_FIGURES, **FAMILY_FIGURES,
                                  **ENSEMBLE_FIGURES, **CONTROL_FIGURES}


# ------------------------------------------------------- the checkpoints a figure needs

MIN_CURVE_CHECKPOINTS = 2
"""A curve over training (one line per model against the step), or a distance between
consecutive checkpoints, needs two checkpoints of one model."""
MIN_CORRELATION_CHECKPOINTS = MIN_POINTS
"""A Spearman ρ of one model's checkpoints is undefined below three
(:data:`toposig.analysis.correlations.MIN_POINTS`): the correlation figures would show
only "n/a"."""
MIN_CONTROL_CHECKPOINTS = MIN_POINTS + 1
"""The controls need one checkpoint more than a plain ρ: the partial correlation on
log(1 + step), and the ρ of consecutive differences (``MIN_POINTS`` differences)."""
MIN_PREDICTION_CHECKPOINTS = 4
"""Predicting the final loss takes three early checkpoints and the final one."""
MIN_PHASE_CHECKPOINTS = 6
"""Three-segment fits against log(1 + step) keep two checkpoints in each segment: the
analysis fits none below six (:func:`toposig.analysis.compute.phase_analysis`)."""

MIN_CHECKPOINTS: dict[str, tuple[int, str]] = {
    **{name: (MIN_CURVE_CHECKPOINTS, "for a curve over training")
       for name in ("summary_figure", "topological_evolution", "spectral_evolution",
                    "perplexity_curves", "neural_persistence_evolution",
                    "vr_persistence_evolution", "training_curves", "loss_probe_evolution",
                    "feature_evolution")},
    "wasserstein_rate": (MIN_CURVE_CHECKPOINTS, "for a distance between consecutive ones"),
    **{name: (MIN_CORRELATION_CHECKPOINTS, "for a Spearman correlation")
       for name in ("topology_vs_perplexity", "topo_vs_spectral_correlations",
                    "np_vs_loss_scatter", "correlation_heatmap")},
    "controls_summary": (MIN_CONTROL_CHECKPOINTS, "for the controlled correlations"),
    "prediction_comparison": (MIN_PREDICTION_CHECKPOINTS,
                              "to predict the final loss from early ones"),
    "phase_fits": (MIN_PHASE_CHECKPOINTS, "for a three-segment fit"),
}
"""Figure name -> (the least number of checkpoints some model must have for it, what for):
:func:`plot_all` (and :func:`figures_that_apply`) skip a figure whose every model has
fewer, and :func:`figures_not_drawn` says so, rather than draw it empty. The figures of
one checkpoint each (diagrams, Betti curves, layer heatmaps, loss surfaces) and those
drawn from a section that states its own reason (scaling, seed ensembles, positive
controls) have no entry. Drawing a figure by name (``Figure.plot``) still draws it."""


def checkpoints_per_model(records: Iterable[RecordLike]) -> dict[str, int]:
    """Model label -> its number of finished checkpoints, in first-seen order."""
    counts: dict[str, int] = {}
    for r in as_records(records):
        if r.ok:
            counts[r.model_label] = counts.get(r.model_label, 0) + 1
    return counts


def too_few_checkpoints(name: str, records: Iterable[RecordLike]) -> str | None:
    """Why figure ``name`` cannot be drawn from ``records`` (no model has the checkpoints
    :data:`MIN_CHECKPOINTS` asks of it), else ``None``."""
    if name not in MIN_CHECKPOINTS:
        return None
    need, purpose = MIN_CHECKPOINTS[name]
    most = max(checkpoints_per_model(records).values(), default=0)
    if most >= need:
        return None
    return (f"needs {need} or more checkpoints of one model {purpose}; "
            f"the most here is {most}")


def figures_that_apply(records: Iterable[RecordLike], statistics: StatisticsLike,
                       arrays: ArraysOf | None = None) -> list[Figure]:
    """The figures of :data:`ALL_FIGURES` whose ``applies`` test holds and whose
    records have the checkpoints they need (:data:`MIN_CHECKPOINTS`), in drawing order
    (``records``: Records, or their JSON)."""
    recs = as_records(records)
    return [ALL_FIGURES[name]
            for name in applicable(ALL_FIGURES, recs, statistics, arrays)
            if too_few_checkpoints(name, recs) is None]


def figures_not_drawn(statistics: StatisticsLike, records: Iterable[RecordLike] = (),
                      arrays: ArraysOf | None = None) -> dict[str, str]:
    """Figure name -> why it is not drawn: the figures drawn from one section of the
    statistics (``plots_analysis.has_section``) whose comparison this study cannot make
    (the section holds only a reason, e.g. scaling with one model, or is damaged), and,
    given the ``records`` (and ``arrays``, as :func:`plot_all` is), the figures that apply
    to them but need more checkpoints of one model than any has
    (:func:`too_few_checkpoints`), in drawing order."""
    present = about_of(statistics).sections
    recs = as_records(records)
    applying = set(applicable(ALL_FIGURES, recs, statistics, arrays)) if recs else set()
    out: dict[str, str] = {}
    for name, fig in ALL_FIGURES.items():
        section = getattr(fig.applies, "section", None)
        why = (not_drawn_reason(statistics, section)
               if isinstance(section, str) and section in present else None)
        if why is None and name in applying:
            why = too_few_checkpoints(name, recs)
        if why:
            out[name] = why
    return out


def plot_all(records: Iterable[RecordLike], statistics: StatisticsLike, out_dir: str | Path,
             arrays: ArraysOf | None = None,
             output: FigureOutput | None = None, *,
             root: str | Path | None = None) -> list[Path]:
    """Write the figures that apply as ``<name>.png`` into ``out_dir`` (or in
    ``output``'s formats and resolution); returns their paths (in the first format).

    ``records`` are :class:`~toposig.records.Record` or their JSON (read once, here).
    The seven embedding figures are drawn when some record has a hidden-state feature or
    a perplexity, the weight figures when some record has a weight-space feature, the
    correlation heatmap whenever the statistics hold correlations. Given ``arrays`` (a
    record's arrays file -> the arrays saved there, e.g.
    :func:`toposig.run.results_folder.arrays_reader` of the folder), the analysis figures
    that apply follow; then, when records have them, the landscape and gradient figures.
    A figure that needs more checkpoints of one model than any has
    (:data:`MIN_CHECKPOINTS`) is not drawn: :func:`figures_not_drawn` says why. A figure
    of :data:`ALL_FIGURES` left in ``out_dir`` by an earlier analysis that this one does
    not draw is removed, so the folder shows only figures of these records;
    other files are not touched.

    ``root``: the folder the caller was given (default: ``out_dir``; the results folder
    when ``out_dir`` is its ``plots/``): no folder below it is written through a link.
    """
    out = Path(out_dir)
    return _plot_all(as_records(records), statistics, out, arrays, output or FigureOutput(),
                     out if root is None else Path(root))


def _plot_all(records: Sequence[Record], statistics: StatisticsLike, out: Path,
              arrays: ArraysOf | None, output: FigureOutput, root: Path) -> list[Path]:
    make_folder(root, out)
    paths = []
    for fig in figures_that_apply(records, statistics, arrays):
        path = fig.save(records, statistics, out / f"{fig.name}.png", arrays, output=output,
                        root=root)
        if path is not None:
            paths.append(path)
    formats = output.formats
    written = {Path(p).with_suffix(f".{fmt}").name for p in paths for fmt in formats}
    for name in ALL_FIGURES:
        for fmt in FIGURE_FORMATS:  # drawn for records gone since, or in another format
            stale = out / f"{name}.{fmt}"
            if stale.name not in written and stale.is_file():
                remove_file(stale, root=root)
                logger.info("removed %s: this analysis did not draw it", stale)
    return paths


# ------------------------------------------------------------------------ comparing runs


@dataclass(frozen=True)
class RunData:
    """What a figure is drawn from, for one run: its name (the label its models get on a
    comparison), its records (:class:`~toposig.records.Record`; given as their JSON, they
    are read here), its statistics and the arrays saved beside its records (a record's
    arrays file -> its arrays)."""

    name: str
    records: Sequence[RecordLike] = field(default_factory=list)
    statistics: StatisticsLike = field(default_factory=dict)
    arrays: ArraysOf | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", as_records(self.records))


def relabelled(run: RunData) -> list[Record]:
    """The run's records with each model label prefixed by the run's name
    (``<run>: <model>``), so that the models of two runs stay apart on one figure."""
    return [Record.from_json({**r.to_json(), "model_label": f"{run.name}: {r.model_label}"})
            for r in as_records(run.records)]


def plot_compared(fig: Figure, runs: Sequence[RunData], ax: Target | None = None
                  ) -> Drawn | None:
    """One figure for several runs, returned (``None`` when no run has the data for it:
    a run whose data the figure does not apply to, ``fig.applies``, is left out).

    A figure drawn from the records alone (``fig.overlay``: the evolution curves, the
    training curves) is drawn once from every run's records, the models
    relabelled ``<run>: <model>``, so the runs share its axes. Any other figure (drawn from
    a run's statistics or arrays) is drawn once per run, side by side in sub-figures each
    titled with the run's name, each at the size it has alone.

    Args:
        fig: the figure (an entry of :data:`ALL_FIGURES`).
        runs: the runs, in the order they are drawn (left to right).
        ax: where to draw (see :meth:`toposig.report.style.Figure.plot`); ``None``: a new
            figure.

    Raises:
        ValueError: two runs with the same name (their models could not be told apart).
    """
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"runs to compare need different names, got {names}")
    runs = [run for run in runs  # a run without the data for it is left out
            if fig.applies(as_records(run.records), run.statistics, run.arrays)]
    if not runs:
        return None
    if len(runs) == 1:  # nothing to compare: the figure as the run's report draws it
        return fig.plot(runs[0].records, runs[0].statistics, runs[0].arrays, ax=ax)
    if fig.overlay:
        merged = [r for run in runs for r in relabelled(run)]
        return fig.plot(merged, {}, None, ax=ax)
    alone = [(run, fig.plot(run.records, run.statistics, run.arrays)) for run in runs]
    drawn = [(run, d) for run, d in alone if d is not None]
    if not drawn:
        return None
    sizes = [d.get_size_inches() for _, d in drawn if isinstance(d, MplFigure)]
    with mpl.rc_context(RC_PARAMS):
        width = sum(float(w) for w, _ in sizes)
        height = max(float(h) for _, h in sizes)
        parent = canvas(figsize=(width, height), layout="constrained", target=ax)
        panels = parent.subfigures(1, len(drawn), squeeze=False,
                                   width_ratios=[float(w) for w, _ in sizes])
        for sub, (run, _) in zip(panels.ravel(), drawn, strict=True):
            fig.plot(run.records, run.statistics, run.arrays, ax=sub)
            title = sub.get_suptitle()
            sub.suptitle(f"{run.name}" + (f"\n{title}" if title else ""))
    return parent


def save_compared(fig: Figure, runs: Sequence[RunData], path: str | Path,
                  output: FigureOutput | None = None, *,
                  root: str | Path | None = None) -> Path | None:
    """:func:`plot_compared` written to ``path`` (each format of ``output``, and
    ``root``, see :func:`toposig.report.style.save_figure`); ``None`` when nothing was
    drawn."""
    with mpl.rc_context(RC_PARAMS):
        drawn = plot_compared(fig, runs)
        return None if drawn is None else save_figure(drawn, path, output, root=root)
