"""Every figure of a results folder: which apply to the records, and drawing them all.

:data:`ALL_FIGURES` lists every figure (:class:`toposig.report.style.Figure`) in drawing
order: the embedding figures and the weight figures with the correlation heatmap
(``plots``), the analysis figures (``plots_analysis``), then the landscape and gradient
figures (``plots_probes``). :func:`plot_all` draws those that apply to the records and
removes the figures of these names it did not draw.
"""

from __future__ import annotations

import logging
from pathlib import Path

from toposig.report.plots import FIGURES, WEIGHT_FIGURES
from toposig.report.plots_analysis import ANALYSIS_FIGURES, not_drawn_reason
from toposig.report.plots_probes import PROBE_FIGURES
from toposig.report.style import (
    FIGURE_FORMATS,
    Figure,
    FigureOutput,
    applicable,
    current_output,
    figure_output,
)

logger = logging.getLogger(__name__)

ALL_FIGURES: dict[str, Figure] = {**FIGURES, **WEIGHT_FIGURES, **ANALYSIS_FIGURES,
                                  **PROBE_FIGURES}


def figures_that_apply(records: list[dict], statistics: dict,
                       results_root: str | Path | None = None) -> list[Figure]:
    """The figures of :data:`ALL_FIGURES` whose ``applies`` test holds, in drawing order."""
    return [ALL_FIGURES[name]
            for name in applicable(ALL_FIGURES, records, statistics, results_root)]


def figures_not_drawn(statistics: dict) -> dict[str, str]:
    """Figure name -> why it is not drawn, for the figures drawn from one section of the
    statistics (``plots_analysis.has_section``) whose comparison this study cannot make
    (the section holds only a reason, e.g. scaling with one model)."""
    return {name: why for name, fig in ALL_FIGURES.items()
            if (section := getattr(fig.applies, "section", None)) in statistics
            and (why := not_drawn_reason(statistics, section))}


def plot_all(records: list[dict], statistics: dict, out_dir: str | Path,
             results_root: str | Path | None = None,
             output: FigureOutput | None = None) -> list[Path]:
    """Write the figures that apply as ``<name>.png`` into ``out_dir`` (or in
    ``output``'s formats and resolution); returns their paths (in the first format).

    The seven embedding figures are drawn when some record has a hidden-state feature or
    a perplexity, the weight figures when some record has a weight-space feature, the
    correlation heatmap whenever the statistics hold correlations. Given ``results_root``
    (the folder the records' ``arrays_file`` paths are relative to), the analysis figures
    that apply follow; then, when records have them, the landscape and gradient figures.
    A figure of :data:`ALL_FIGURES` left in ``out_dir`` by an earlier analysis that this
    one does not draw is removed, so the folder shows only figures of these records;
    other files are not touched.
    """
    with figure_output(output or current_output()):
        return _plot_all(records, statistics, Path(out_dir), results_root)


def _plot_all(records: list[dict], statistics: dict, out: Path,
              results_root: str | Path | None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fig in figures_that_apply(records, statistics, results_root):
        path = fig(records, statistics, out / f"{fig.name}.png", results_root)
        if path is not None:
            paths.append(path)
    formats = current_output().formats
    written = {Path(p).with_suffix(f".{fmt}").name for p in paths for fmt in formats}
    for name in ALL_FIGURES:
        for fmt in FIGURE_FORMATS:  # drawn for records gone since, or in another format
            stale = out / f"{name}.{fmt}"
            if stale.name not in written and stale.is_file():
                stale.unlink()
                logger.info("removed %s: this analysis did not draw it", stale)
    return paths
