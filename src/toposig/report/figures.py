"""Every figure of a results folder: which apply to the records, and drawing them all.

:func:`plot_all` draws the embedding figures (``plots.FIGURES``) when the records have a
hidden-state feature or a perplexity, the weight figures (``plots.WEIGHT_FIGURES``) when
they have weight features, the correlation heatmap whenever the statistics hold
correlations, then the analysis figures (``plots_analysis``) and the landscape and
gradient figures (``plots_probes``) that apply, and removes the figures of these names it
did not draw.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from toposig.analysis.stats import feature_family, is_weight_feature
from toposig.report.plots import (
    FIGURE_FORMATS,
    FIGURES,
    HEATMAP,
    WEIGHT_FIGURES,
    FigureFn,
    FigureOutput,
    current_output,
    figure_output,
    finite_or_none,
    value_of,
)
from toposig.report.plots_analysis import ANALYSIS_FIGURES, plot_analysis_figures
from toposig.report.plots_probes import PROBE_FIGURES, plot_probe_figures

logger = logging.getLogger(__name__)


def _has_embedding(records: Sequence[dict]) -> bool:
    """Some record has a hidden-state feature (topological or spectral) or a perplexity."""
    return any(
        value_of(r, "perplexity") is not None
        or any(feature_family(k).startswith("embedding_") and finite_or_none(v) is not None
               for k, v in (r.get("features") or {}).items())
        for r in records)


def _has_weight(records: Sequence[dict]) -> bool:
    """Some record has a weight-space feature (``np_*`` or ``weight_*``)."""
    return any(is_weight_feature(k) and finite_or_none(v) is not None
               for r in records for k, v in (r.get("features") or {}).items())


def _has_correlations(statistics: dict) -> bool:
    correlations = (statistics or {}).get("correlations") or {}
    return bool(correlations.get("pooled")) or any(
        (correlations.get("per_model") or {}).values())


def plot_all(records: list[dict], statistics: dict, out_dir: str | Path,
             results_root: str | Path | None = None,
             output: FigureOutput | None = None) -> list[Path]:
    """Write the figures as ``<name>.png`` into ``out_dir`` (or in ``output``'s formats
    and resolution); returns their paths (in the first format).

    The seven embedding figures (``FIGURES``) are drawn when some record has a hidden-state
    feature or a perplexity, the weight figures (``WEIGHT_FIGURES``) when some record has a
    weight-space feature; the correlation heatmap whenever the statistics hold correlations.
    Given ``results_root`` (the folder the records' ``arrays_file`` paths are relative to),
    the analysis figures of ``plots_analysis`` that apply follow; then, when records have
    them, the landscape and gradient figures of ``plots_probes``. A figure of these sets
    left in ``out_dir`` by an earlier analysis that this one does not draw is removed, so
    the folder shows only figures of these records; other files are not touched.
    """
    with figure_output(output or current_output()):
        return _plot_all(records, statistics, Path(out_dir), results_root)


def _plot_all(records: list[dict], statistics: dict, out: Path,
              results_root: str | Path | None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    chosen: dict[str, FigureFn] = dict(FIGURES) if _has_embedding(records) else {}
    if _has_weight(records):
        chosen |= {k: v for k, v in WEIGHT_FIGURES.items() if k != HEATMAP}
    if _has_correlations(statistics):
        chosen[HEATMAP] = WEIGHT_FIGURES[HEATMAP]
    paths = [plot(records, statistics, out / f"{name}.png") for name, plot in chosen.items()]

    paths += (plot_analysis_figures(records, statistics, out, results_root)
              + plot_probe_figures(records, statistics, out, results_root))
    formats = current_output().formats
    written = {Path(p).with_suffix(f".{fmt}").name for p in paths for fmt in formats}
    for name in [*FIGURES, *WEIGHT_FIGURES, *ANALYSIS_FIGURES, *PROBE_FIGURES]:
        for fmt in FIGURE_FORMATS:  # drawn for records gone since, or in another format
            stale = out / f"{name}.{fmt}"
            if stale.name not in written and stale.is_file():
                stale.unlink()
                logger.info("removed %s: this analysis did not draw it", stale)
    return paths
