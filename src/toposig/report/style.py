"""The figure convention every figure module follows, and how figures are written.

A figure is a :class:`Figure`: a file name, a test of whether it applies to a results
folder, and a drawing function with one signature,
``draw(records, statistics, arrays, on) -> Figure | SubFigure | None``: the records (one
:class:`toposig.records.Record` per model and checkpoint), the statistics of
:func:`toposig.analysis.compute.compute_statistics`, the arrays saved beside the
records (an :data:`~toposig.analysis.compute.ArraysOf`: a record's arrays file -> its
arrays; ``None`` when the caller has none) and where to draw (``on``: the caller's Axes, Figure
or SubFigure, given to :meth:`Figure.plot` as ``ax``; ``None`` for a new figure); it
reads nothing else, makes its panels with :func:`subplots` (``target=on``) and returns
the figure holding them, writing nothing. :func:`figure` makes one from a drawing
function. :meth:`Figure.plot` draws it under :data:`RC_PARAMS` (without touching global
rcParams); :meth:`Figure.save` draws it and writes the file, the one place a figure is
written. Each figure module lists its figures in a :func:`registry`, and
:func:`toposig.report.figures.plot_all` saves, in registry order, those that apply.

:func:`save_figure` writes a figure in the formats and resolution of the
:class:`FigureOutput` it is given (PNG at :data:`DPI` by default), atomically, with
selectable text in PDF and SVG.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.figure import SubFigure

from toposig.defaults import DPI  # noqa: F401 - re-exported (style.DPI)
from toposig.files.atomic import atomic_write_with
from toposig.records import Record, Statistics, records_from_json
from toposig.report.output import FIGURE_FORMATS, FigureOutput  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from toposig.analysis.compute import ArraysOf

logger = logging.getLogger(__name__)


def subplots(nrows: int = 1, ncols: int = 1, *, target: Target | None = None, **kwargs):
    """``(figure, axes)`` as :func:`matplotlib.pyplot.subplots` returns them, but the
    figure is not pyplot's: it belongs to no backend or window, so drawing a report figure
    never changes (or opens anything in) the backend a notebook or script uses, and
    saving picks the writer for the format (Agg for PNG). Figure keywords (``figsize``,
    ``layout``, ...) go to the figure, the rest to :meth:`~matplotlib.figure.Figure.subplots`.

    Given a ``target`` (the caller's, from a drawing's ``ax``) the panels go there instead:
    into the given Axes (one panel), into a sub-figure in that Axes' place (several
    panels, or one panel whose drawing adds figure-level legends or colour bars:
    ``figure_artists=True``, so they stay in that place and off the caller's other Axes),
    or into the given Figure or SubFigure; the figure keywords are then the caller's
    business and ignored. The figure returned is the one that holds the panels (a
    SubFigure in the second case), on which titles, legends and colour bars go.
    """
    fig_keys = {"figsize", "dpi", "layout", "facecolor", "edgecolor", "frameon"}
    figure_artists = kwargs.pop("figure_artists", False)
    grid_kwargs = {k: v for k, v in kwargs.items() if k not in fig_keys}
    if isinstance(target, Axes) and nrows * ncols == 1 and not figure_artists:
        return target.get_figure(), (target if grid_kwargs.get("squeeze", True)
                                     else np.array([[target]], dtype=object))
    fig = canvas(target=target, **{k: v for k, v in kwargs.items() if k in fig_keys})
    return fig, fig.subplots(nrows, ncols, **grid_kwargs)


def canvas(*, target: Target | None = None, **figure_kwargs) -> MplFigure | SubFigure:
    """A new figure (``figure_kwargs`` go to :class:`matplotlib.figure.Figure`), or the
    caller's ``target``: its Figure or SubFigure, or for an Axes a sub-figure in that
    Axes' place in its grid (the Axes is removed)."""
    if target is None:
        return ShownFigure(**figure_kwargs)
    if not isinstance(target, Axes):
        return target
    spec = target.get_subplotspec()
    parent = target.get_figure()
    if spec is None or parent is None:
        raise ValueError("this figure has several panels: give a Figure, a SubFigure or an "
                         "Axes made by subplots (one with a place in a grid)")
    target.remove()
    return parent.add_subfigure(spec)


Target = Axes | MplFigure | SubFigure


class ShownFigure(MplFigure):
    """A figure made without pyplot that shows itself, as one PNG image, where a notebook
    shows a cell's value, in a plain kernel, with no ``%matplotlib`` line and no pyplot
    imported (a plain matplotlib Figure shows there as ``<Figure size ... with 4 Axes>``
    until pyplot is). pyplot does not hold it, so it is not shown a second time at the end
    of the cell; where pyplot's inline backend is active its own display of figures takes
    over, once."""

    def _repr_png_(self) -> bytes:
        import io

        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def drawn_on(drawn: Drawn | None, ax: Target | None) -> Shown | None:
    """What a drawing returns to its caller: the figure it made (``ax`` None); else what
    it drew on: the Axes given, when the panels went onto it, or the sub-figure that took
    its place, or the SubFigure given, or given a Figure the list of its Axes. Returning
    those, never the caller's Figure, is what keeps a notebook from showing a pyplot
    figure twice (once as the cell's value, once as pyplot's figure at the end of the
    cell)."""
    if isinstance(ax, Axes) and drawn is not None and ax in drawn.axes:
        return ax
    if isinstance(ax, MplFigure) and drawn is ax:  # the caller's Figure: its Axes
        return list(ax.axes)
    return drawn

# Font sizes of every figure (applied per figure with mpl.rc_context); typed Any since
# matplotlib types rcParams keys as a Literal of every key.
RC_PARAMS: Any = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "figure.titlesize": 13,
}

# Vector text stays text (selectable, searchable): TrueType in PDF, <text> in SVG; no
# creation date, so the same figure gives the same bytes.
VECTOR_RC: Any = {"pdf.fonttype": 42, "svg.fonttype": "none", "svg.hashsalt": "toposig"}
NO_DATES = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}

Drawn = MplFigure | SubFigure
Shown = MplFigure | SubFigure | Axes | list[Axes]  # what a public drawing returns: drawn_on
RecordLike = Record | Mapping[str, Any]
"""A record, or the JSON of one (an entry of ``data/all_results.json``)."""
StatisticsLike = Statistics | Mapping[str, Any]
"""The statistics, or their JSON (whole or partial: the figures read each section with
the ``*_of`` readers of :mod:`toposig.records.statistics`)."""
Draw = Callable[[Sequence[Record], StatisticsLike, "ArraysOf | None", "Target | None"],
                "Drawn | None"]
Applies = Callable[[Sequence[Record], StatisticsLike, "ArraysOf | None"], bool]


def as_records(records: Iterable[RecordLike] | None) -> list[Record]:
    """The records as :class:`~toposig.records.Record`
    (:func:`toposig.records.records_from_json`).

    Raises:
        toposig.records.RecordError: a dict that is not a sound record.
    """
    return records_from_json(records)


class Figure:
    """One figure of a results folder.

    Attributes:
        name: the file's stem (``summary_figure`` → ``summary_figure.png``).
        draw: the drawing function, ``draw(records, statistics, arrays)`` → the
            figure it drew (see the module), or ``None`` when there is nothing to draw.
        applies: ``applies(records, statistics, arrays)``, whether the folder's data
            calls for this figure (:func:`toposig.report.figures.plot_all` draws only
            those).
        overlay: whether the figure is drawn from the records alone, one line or column
            per model, so that two runs compare on the same axes (their models relabelled
            ``<run>: <model>``); the others compare side by side.

    :meth:`plot` draws the figure and returns it, on ``ax`` when given; :meth:`save` (also
    what calling a ``Figure`` does) draws it and writes it to a file, the one place a
    figure touches the disk.
    """

    def __init__(self, name: str, draw: Draw, applies: Applies, overlay: bool = False) -> None:
        self.name = name
        self.draw = draw
        self.applies = applies
        self.overlay = overlay
        functools.update_wrapper(self, draw)

    def plot(self, records: Iterable[RecordLike] | None, statistics: StatisticsLike | None,
             arrays: ArraysOf | None = None, *, ax: Target | None = None
             ) -> Drawn | None:
        """Draw the figure and return it (``None`` when there is nothing to draw).

        Args:
            records: the per-checkpoint records (:class:`~toposig.records.Record`, or
                ``data/all_results.json``'s entries as dicts).
            statistics: the analysis' statistics (``data/statistics.json``).
            arrays: a record's arrays file (:meth:`~toposig.records.Record.arrays_file`)
                -> the arrays saved there (figures of diagrams and loss surfaces need it):
                :func:`toposig.run.results_folder.arrays_reader` of the results folder.
            ax: where to draw: an Axes (a figure of several panels takes that Axes'
                place in its grid, as a sub-figure), a Figure or a SubFigure; ``None``: a
                new :class:`matplotlib.figure.Figure` of the figure's own size, made
                without pyplot (it shows in a notebook as a cell's value, and
                ``fig.savefig`` writes it).

        Returns:
            The Figure or SubFigure holding the panels.
        """
        with mpl.rc_context(RC_PARAMS):
            return self.draw(as_records(records), statistics or {}, arrays, ax)

    def save(self, records: Iterable[RecordLike] | None, statistics: StatisticsLike | None,
             path: str | Path, arrays: ArraysOf | None = None, *,
             output: FigureOutput | None = None,
             root: str | Path | None = None) -> Path | None:
        """Draw the figure and write it to ``path`` in ``output``'s formats and resolution
        (see :func:`save_figure`, and for ``root``); returns the path written (first
        output format), or ``None`` when there was nothing to draw and nothing was
        written. ``None`` records or statistics count as empty."""
        with mpl.rc_context(RC_PARAMS):
            drawn = self.plot(records, statistics, arrays)
            return None if drawn is None else save_figure(drawn, path, output, root=root)

    __call__ = save

    def __repr__(self) -> str:
        return f"Figure({self.name!r})"


def always(records: Sequence[Record], statistics: StatisticsLike,
           arrays: ArraysOf | None) -> bool:
    """An ``applies`` test that always holds."""
    return True


def figure(name: str, applies: Applies = always, overlay: bool = False
           ) -> Callable[[Draw], Figure]:
    """Decorator: the drawing function as a :class:`Figure` named ``name``."""

    def make(draw: Draw) -> Figure:
        return Figure(name, draw, applies, overlay)

    return make


def registry(*figures: Figure) -> dict[str, Figure]:
    """A figure module's figures by name, in drawing order."""
    out: dict[str, Figure] = {}
    for f in figures:
        if f.name in out:
            raise ValueError(f"two figures named {f.name}")
        out[f.name] = f
    return out


def applicable(figures: Mapping[str, Figure], records: Iterable[RecordLike],
               statistics: StatisticsLike | None, arrays: ArraysOf | None) -> list[str]:
    """Names of the figures of ``figures`` that apply, in order (``records``: Records or
    their JSON, see :func:`as_records`)."""
    recs = as_records(records)
    return [name for name, f in figures.items() if f.applies(recs, statistics or {}, arrays)]


# ------------------------------------------------------------------------------ output


def save_figure(fig: Drawn, path: str | Path, output: FigureOutput | None = None, *,
                root: str | Path | None = None) -> Path:
    """Write a figure in each format of ``output`` (``path`` with that suffix; default:
    PNG at :data:`DPI`), each atomically (a temporary file in the same folder, then a
    rename), so a kill never leaves a cut-short image in place; a SubFigure writes the
    figure it is part of. Returns the first format's path.

    ``root``: the folder the caller was given (default: ``path``'s folder); no folder
    between it and ``path`` is followed through a link
    (:func:`toposig.files.atomic.atomic_write_with`)."""
    output = output or FigureOutput()
    path = Path(path)
    top = fig if isinstance(fig, MplFigure) else fig.get_figure(root=True)
    try:
        for fmt in output.formats:
            target = path.with_suffix(f".{fmt}")

            def write(f, fmt=fmt):
                with mpl.rc_context(VECTOR_RC):
                    top.savefig(f, dpi=output.dpi, format=fmt, metadata=NO_DATES.get(fmt))

            atomic_write_with(target, write, root=path.parent if root is None else root)
            logger.debug("wrote %s", target)
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")  # only a caller's figure is pyplot's
        if pyplot is not None:
            pyplot.close(top)
    return path.with_suffix(f".{output.formats[0]}")
