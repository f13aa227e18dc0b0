"""A results folder in a notebook: its table, its statistics and every figure of its report.

    import toposig
    res = toposig.open("results")                 # what `toposig run` + `analyze` wrote
    res.table()                                   # a row per model, step, family, layer
    res.statistics["correlations"]["pooled"]      # what data/statistics.json holds
    res.plot.summary_figure()                     # a matplotlib Figure (a cell's value)
    res.plot.perplexity_curves(ax=ax)             # into an Axes of your own
    res.plot.training_curves(other=toposig.open("results-lr2"))   # two runs, one figure

Reading a folder writes nothing into it. The statistics are those the analysis wrote
(``data/statistics.json``) when they were computed from the folder's current records;
otherwise (no analysis yet, or records added since) they are computed in memory, exactly
as ``toposig analyze`` would, and a warning says so. The figures are the report's own
(:data:`toposig.report.figures.ALL_FIGURES`): the same drawing code as the files in
``plots/``, drawn on a new figure or on the caller's Axes, Figure or SubFigure, with the
caller's matplotlib backend untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from toposig.analysis.statistics import compute_statistics, records_digest
from toposig.files.atomic import STATISTICS_DIGITS, read_json, round_floats
from toposig.report.figures import (
    ALL_FIGURES,
    RunData,
    figures_that_apply,
    plot_compared,
)
from toposig.report.style import Drawn, Target
from toposig.run.results_folder import arrays_reader, load_entries, load_results

logger = logging.getLogger(__name__)

__all__ = ["Results", "open_results"]


class Results:
    """One results folder, read (see the module).

    Attributes:
        folder: the results folder.
        name: what the run is called on a comparison figure (default: the folder's name).
        records: the finished per-checkpoint entries of ``data/all_results.json``, one
            dict per (model, step), as the run wrote them.
        statistics: the analysis' statistics (see the module); computed on first use.
        plot: the report's figures, one method each (``res.plot.<figure>(ax=None,
            other=None)``); ``res.plot.names()`` lists those this folder has data for.
    """

    def __init__(self, folder: str | Path, name: str | None = None) -> None:
        self.folder = Path(folder)
        self.name = name or self.folder.name or self.folder.resolve().name
        self.records: list[dict] = load_entries(self.folder)
        self.plot = Plots(self)

    @cached_property
    def statistics(self) -> dict:
        """``data/statistics.json`` when it was computed from these records, else the same
        statistics computed in memory (nothing is written)."""
        path = self.folder / "data" / "statistics.json"
        reason = "there is none"
        if path.is_file():
            try:
                stored = read_json(path)
            except (OSError, ValueError) as exc:
                reason = f"it cannot be read ({exc})"
            else:
                if (isinstance(stored, dict)
                        and stored.get("records_sha256") == records_digest(self.records)):
                    return stored
                reason = "its records have changed since"
        logger.warning("%s: statistics computed in memory, as `toposig analyze` would, since "
                       "%s's data/statistics.json does not fit: %s", self.folder, self.folder,
                       reason)
        return round_floats(compute_statistics(self.records,
                                               arrays=arrays_reader(self.folder)),
                            STATISTICS_DIGITS)

    def table(self):
        """Every result as one tidy :class:`pandas.DataFrame` (:func:`toposig.load_results`):
        a row per (model, step, family, layer or matrix), a column per feature."""
        return load_results(self.folder)

    def run_data(self) -> RunData:
        """What a figure is drawn from (:class:`toposig.report.figures.RunData`)."""
        return RunData(self.name, self.records, self.statistics, self.folder)

    def __repr__(self) -> str:
        models = sorted({r.get("model_label") for r in self.records}, key=str)
        shown = ", ".join(map(str, models[:4])) + (", ..." if len(models) > 4 else "")
        return (f"Results({str(self.folder)!r}: {len(self.records)} checkpoints of "
                f"{len(models)} model(s) [{shown}])")


class Plots:
    """The figures of a :class:`Results`: ``plots.<figure>(ax=None, other=None)``.

    Each method draws the report figure of that name (the file ``plots/<figure>.png`` the
    analysis writes) and returns the :class:`matplotlib.figure.Figure` (or SubFigure)
    holding it, or ``None`` when the folder has nothing to draw it from.

    Args (of each method):
        ax: where to draw: an Axes (a figure of several panels takes its place, as a
            sub-figure), a Figure or a SubFigure; default: a new figure.
        other: another :class:`Results` (or several, a list) to compare with: the runs
            share the axes of figures drawn from the records alone (models relabelled
            ``<run>: <model>``) and are drawn side by side otherwise.
    """

    def __init__(self, results: Results) -> None:
        self._results = results

    def names(self) -> list[str]:
        """The figures this folder has data for, in the report's order."""
        r = self._results
        return [f.name for f in figures_that_apply(r.records, r.statistics, r.folder)]

    def __call__(self, figure: str, ax: Target | None = None,
                 other: Results | list[Results] | None = None) -> Drawn | None:
        """Draw the figure named ``figure`` (see the class)."""
        if figure not in ALL_FIGURES:
            raise ValueError(f"no figure named {figure!r}; the figures are "
                             f"{', '.join(ALL_FIGURES)}")
        fig = ALL_FIGURES[figure]
        r = self._results
        if other is None:
            return fig.plot(r.records, r.statistics, r.folder, ax=ax)
        others = other if isinstance(other, list | tuple) else [other]
        return plot_compared(fig, [r.run_data(), *(o.run_data() for o in others)], ax=ax)

    def __dir__(self) -> list[str]:
        return sorted([*super().__dir__(), *ALL_FIGURES])

    def __getattr__(self, name: str) -> Callable[..., Drawn | None]:
        if name.startswith("_") or name not in ALL_FIGURES:
            raise AttributeError(f"no figure named {name!r}; the figures are "
                                 f"{', '.join(ALL_FIGURES)}")

        def draw(ax: Target | None = None,
                 other: Results | list[Results] | None = None) -> Drawn | None:
            return self(name, ax=ax, other=other)

        draw.__name__ = name
        draw.__doc__ = ALL_FIGURES[name].__doc__
        return draw

    def __repr__(self) -> str:
        return f"<figures of {self._results.folder}: {', '.join(self.names())}>"


def open_results(folder: str | Path = "results", name: str | None = None) -> Results:
    """Open a results folder (``toposig.open``): a :class:`Results`.

    Args:
        folder: what ``toposig run --out`` wrote (default: ``results``).
        name: the run's name on comparison figures (default: the folder's name).

    Raises:
        toposig.run.results_folder.ResultsMissingError: the folder has no records.
    """
    return Results(folder, name)
