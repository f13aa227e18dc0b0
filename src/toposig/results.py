"""A results folder in a notebook: its table, its statistics and every figure of its report.

    import toposig
    res = toposig.open("results")                 # what `toposig run` + `analyze` wrote
    res.table()                                   # a row per model, step, family, layer
    res.records[0].checkpoint, res.records[0].features    # typed, validated records
    res.statistics.correlations.pooled["rankme"]          # typed statistics
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
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path

from toposig.analysis.compute import records_digest
from toposig.analyze import folder_statistics
from toposig.files.atomic import read_json
from toposig.files.names import folder_name
from toposig.records import Record, Statistics, StatisticsError
from toposig.report.figures import ALL_FIGURES, RunData, figures_that_apply, plot_compared
from toposig.report.style import Figure, Shown, Target, drawn_on
from toposig.run.results_folder import arrays_reader, load_entries, load_results

logger = logging.getLogger(__name__)

__all__ = ["Results", "open_results"]


class Results:
    """One results folder, read (see the module).

    Attributes:
        folder: the results folder.
        name: what the run is called on a comparison figure (default: the folder's name).
        records: the finished per-checkpoint entries of ``data/all_results.json``, one
            :class:`toposig.records.Record` per (model, step), validated as they are read.
        statistics: the analysis' statistics, :class:`toposig.records.Statistics` (see
            the module); computed on first use.
        plot: the report's figures, one method each (``res.plot.<figure>(ax=None,
            other=None)``); ``res.plot.names()`` lists those this folder has data for.
    """

    def __init__(self, folder: str | Path, name: str | None = None, *,
                 fresh: bool = False, target: str = "auto", seed: int = 0) -> None:
        self.folder = Path(folder)
        self.name = name or folder_name(self.folder)
        self.records: list[Record] = load_entries(self.folder)
        self.fresh, self.target, self.seed = fresh, target, seed
        self.plot = Plots(self)

    @cached_property
    def statistics(self) -> Statistics:
        """``data/statistics.json`` when it was computed from these records (and holds
        each section as the analysis writes it), else the same statistics computed in
        memory, with ``target`` and ``seed`` (nothing is written). ``fresh=True``: always
        computed (the file fits its records, not necessarily this version of toposig)."""
        stored, reason = (None, "fresh=True") if self.fresh else self._read_stored()
        if stored is not None:
            return stored
        logger.warning("%s: statistics computed in memory, as `toposig analyze` would, "
                       "since its data/statistics.json is not used: %s", self.folder, reason)
        return folder_statistics(self.folder, self.records, self.target, self.seed)

    def _stored_problem(self) -> str | None:
        """Why ``data/statistics.json`` cannot stand for these records (``None``: it can)."""
        return self._read_stored()[1]

    def _read_stored(self) -> tuple[Statistics | None, str | None]:
        """``(data/statistics.json, None)`` when it can stand for these records, else
        ``(None, why not)``."""
        path = self.folder / "data" / "statistics.json"
        if not path.is_file():
            return None, "there is none"
        try:
            stored = read_json(path)
        except (OSError, ValueError, RecursionError) as exc:
            return None, f"it cannot be read ({type(exc).__name__}: {exc})"
        try:
            statistics = Statistics.from_json(stored)
        except StatisticsError as exc:
            return None, f"it is damaged ({exc})"
        if statistics.records_sha256 is None:
            return None, "it does not say which records it was computed from"
        if statistics.records_sha256 != records_digest(self.records):
            return None, "its records have changed since"
        if self.target != "auto" and statistics.target != self.target:
            return None, f"it was computed against {statistics.target}, not {self.target}"
        return statistics, None

    def table(self):
        """Every result as one tidy :class:`pandas.DataFrame` (:func:`toposig.load_results`):
        a row per (model, step, family, layer or matrix), a column per feature."""
        return load_results(self.folder)

    def run_data(self, figure: Figure | None = None) -> RunData:
        """What a figure is drawn from (:class:`toposig.report.figures.RunData`); for a
        figure drawn from the records alone (``figure.overlay``) without the statistics,
        so that they are not computed for it."""
        needs = figure is None or not figure.overlay
        return RunData(self.name, self.records, self.statistics if needs else {},
                       arrays_reader(self.folder))

    def __repr__(self) -> str:
        models = sorted({r.checkpoint.label for r in self.records})
        shown = ", ".join(map(str, models[:4])) + (", ..." if len(models) > 4 else "")
        return (f"Results({str(self.folder)!r}: {len(self.records)} checkpoints of "
                f"{len(models)} model(s) [{shown}])")


class Plots:
    """The figures of a :class:`Results`: ``plots.<figure>(ax=None, other=None)``.

    Each method draws the report figure of that name (the file ``plots/<figure>.png`` the
    analysis writes) and returns the :class:`matplotlib.figure.Figure` it made (shown
    once as a notebook cell's value), or given ``ax`` what it drew on: that Axes, or the
    sub-figure that took its place (:func:`toposig.report.style.drawn_on`); ``None`` when
    the folder has nothing to draw it from.

    Args (of each method):
        ax: where to draw: an Axes (a figure of several panels takes its place, as a
            sub-figure), a Figure or a SubFigure; default: a new figure.
        other: another :class:`Results` or results folder (or several, a list) to
            compare with: the runs share the axes of figures drawn from the records
            alone (models relabelled ``<run>: <model>``) and are drawn side by side
            otherwise; a run without the data for the figure is left out.
    """

    def __init__(self, results: Results) -> None:
        self._results = results

    def names(self) -> list[str]:
        """The figures this folder has data for, in the report's order."""
        r = self._results
        applying = figures_that_apply(r.records, r.statistics, arrays_reader(r.folder))
        return [f.name for f in applying]

    def __call__(self, figure: str, ax: Target | None = None,
                 other: Results | str | Path | Sequence[Results | str | Path] | None = None
                 ) -> Shown | None:
        """Draw the figure named ``figure`` (see the class)."""
        if figure not in ALL_FIGURES:
            raise ValueError(f"no figure named {figure!r}; the figures are "
                             f"{', '.join(ALL_FIGURES)}")
        fig = ALL_FIGURES[figure]
        others: list[Results | str | Path] = (
            [] if other is None else list(other) if isinstance(other, list | tuple)
            else [other])  # type: ignore[list-item]
        runs = [self._results, *(o if isinstance(o, Results) else Results(o) for o in others)]
        return drawn_on(plot_compared(fig, [r.run_data(fig) for r in runs], ax=ax), ax)

    def __dir__(self) -> list[str]:
        return sorted([*super().__dir__(), *ALL_FIGURES])

    def __getattr__(self, name: str) -> Callable[..., Shown | None]:
        if name.startswith("_") or name not in ALL_FIGURES:
            raise AttributeError(f"no figure named {name!r}; the figures are "
                                 f"{', '.join(ALL_FIGURES)}")

        def draw(ax: Target | None = None,
                 other: Results | str | Path | Sequence[Results | str | Path] | None = None
                 ) -> Shown | None:
            return self(name, ax=ax, other=other)

        draw.__name__ = name
        draw.__doc__ = ALL_FIGURES[name].__doc__
        return draw

    def __repr__(self) -> str:
        return f"<figures of {self._results.folder}: {', '.join(self.names())}>"


def open_results(folder: str | Path = "results", name: str | None = None, *,
                 fresh: bool = False, target: str = "auto", seed: int = 0) -> Results:
    """Open a results folder (``toposig.open``): a :class:`Results`.

    Args:
        folder: what ``toposig run --out`` wrote (default: ``results``).
        name: the run's name on comparison figures (default: the folder's name).
        fresh: compute the statistics in memory even where ``data/statistics.json`` fits
            the records (it may come from another version of toposig).
        target: the quality measure of the statistics computed in memory (``toposig
            analyze``'s ``--target``); one other than ``auto`` that the file was not
            computed against has them computed.
        seed: the seed of the statistics computed in memory (``toposig analyze``'s
            ``--analysis-seed``).

    Raises:
        toposig.run.results_folder.ResultsMissingError: the folder has no records.
    """
    return Results(folder, name, fresh=fresh, target=target, seed=seed)
