"""The figure convention every figure module follows, and how figures are written.

A figure is a :class:`Figure`: a file name, a test of whether it applies to a results
folder, and a drawing function with one signature,
``draw(records, statistics, path, results_root) -> Path | None``: the records (one dict
per model and checkpoint, as the store writes them), the statistics of
:func:`toposig.analysis.statistics.compute_statistics`, the path to write (its suffix is
replaced by each output format) and the folder the records' ``arrays_file`` paths are
relative to (``None`` when the caller has none). :func:`figure` makes one from a drawing
function; calling it draws under :data:`RC_PARAMS` without touching global rcParams.
Each figure module lists its figures in a :func:`registry`, and
:func:`toposig.report.figures.plot_all` draws, in registry order, those that apply.

:func:`save_figure` writes a figure in the formats and resolution of the current
:class:`FigureOutput` (PNG at :data:`DPI` unless a caller sets another with
:func:`figure_output`), atomically, with selectable text in PDF and SVG.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure as MplFigure

logger = logging.getLogger(__name__)


def subplots(nrows: int = 1, ncols: int = 1, **kwargs):
    """``(figure, axes)`` as :func:`matplotlib.pyplot.subplots` returns them, but the
    figure is not pyplot's: it belongs to no backend or window, so drawing a report figure
    never changes (or opens anything in) the backend a notebook or script uses, and
    saving picks the writer for the format (Agg for PNG). Figure keywords (``figsize``,
    ``layout``, ...) go to the figure, the rest to :meth:`~matplotlib.figure.Figure.subplots`.
    """
    fig_keys = {"figsize", "dpi", "layout", "facecolor", "edgecolor", "frameon"}
    fig = MplFigure(**{k: v for k, v in kwargs.items() if k in fig_keys})
    axes = fig.subplots(nrows, ncols, **{k: v for k, v in kwargs.items() if k not in fig_keys})
    return fig, axes

DPI = 130
# Font sizes of every figure (applied per figure with plt.rc_context).
RC_PARAMS = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "figure.titlesize": 13,
}

FIGURE_FORMATS = ("png", "pdf", "svg")
# Vector text stays text (selectable, searchable): TrueType in PDF, <text> in SVG; no
# creation date, so the same figure gives the same bytes.
VECTOR_RC = {"pdf.fonttype": 42, "svg.fonttype": "none", "svg.hashsalt": "toposig"}
NO_DATES = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}

Draw = Callable[[list[dict], dict, Path, "Path | None"], "Path | None"]
Applies = Callable[[Sequence[dict], dict, "Path | None"], bool]


class Figure:
    """One figure of a results folder.

    Attributes:
        name: the file's stem (``summary_figure`` → ``summary_figure.png``).
        draw: the drawing function (see the module).
        applies: ``applies(records, statistics, results_root)``, whether the folder's data
            calls for this figure (:func:`toposig.report.figures.plot_all` draws only
            those).

    Calling a ``Figure`` draws it: ``fig(records, statistics, path, results_root=None)``
    returns the path written (first output format), or ``None`` when there was nothing to
    draw and nothing was written. ``None`` records or statistics count as empty.
    """

    def __init__(self, name: str, draw: Draw, applies: Applies) -> None:
        self.name = name
        self.draw = draw
        self.applies = applies
        functools.update_wrapper(self, draw)

    def __call__(self, records: Sequence[dict] | None, statistics: dict | None,
                 path: str | Path, results_root: str | Path | None = None) -> Path | None:
        root = Path(results_root) if results_root is not None else None
        with plt.rc_context(RC_PARAMS):
            return self.draw(list(records or []), statistics or {}, Path(path), root)

    def __repr__(self) -> str:
        return f"Figure({self.name!r})"


def always(records: Sequence[dict], statistics: dict, results_root: Path | None) -> bool:
    """An ``applies`` test that always holds."""
    return True


def figure(name: str, applies: Applies = always) -> Callable[[Draw], Figure]:
    """Decorator: the drawing function as a :class:`Figure` named ``name``."""

    def make(draw: Draw) -> Figure:
        return Figure(name, draw, applies)

    return make


def registry(*figures: Figure) -> dict[str, Figure]:
    """A figure module's figures by name, in drawing order."""
    out: dict[str, Figure] = {}
    for f in figures:
        if f.name in out:
            raise ValueError(f"two figures named {f.name}")
        out[f.name] = f
    return out


def applicable(figures: Mapping[str, Figure], records: Sequence[dict], statistics: dict,
               results_root: str | Path | None) -> list[str]:
    """Names of the figures of ``figures`` that apply, in order."""
    root = Path(results_root) if results_root is not None else None
    return [name for name, f in figures.items() if f.applies(records, statistics or {}, root)]


# ------------------------------------------------------------------------------ output


@dataclass(frozen=True)
class FigureOutput:
    """Which files a figure is written as: ``formats`` (the first is the path a plotting
    function returns) and ``dpi`` for raster output (PNG)."""

    formats: tuple[str, ...] = ("png",)
    dpi: int = DPI

    def __post_init__(self) -> None:
        bad = [f for f in self.formats if f not in FIGURE_FORMATS]
        if not self.formats or bad:
            raise ValueError(f"figure formats are {', '.join(FIGURE_FORMATS)}, comma-"
                             f"separated; got {','.join(self.formats) or 'none'}")
        if not (isinstance(self.dpi, int) and 10 <= self.dpi <= 2400):
            raise ValueError(f"--dpi must be an integer between 10 and 2400, got {self.dpi}")


_OUTPUT: ContextVar[FigureOutput | None] = ContextVar("figure_output", default=None)


def current_output() -> FigureOutput:
    """The :class:`FigureOutput` figures are written with now (PNG at ``DPI`` by default)."""
    return _OUTPUT.get() or FigureOutput()


@contextlib.contextmanager
def figure_output(output: FigureOutput) -> Iterator[FigureOutput]:
    """Write the figures drawn inside the block as ``output`` says."""
    token = _OUTPUT.set(output)
    try:
        yield output
    finally:
        _OUTPUT.reset(token)


def save_figure(fig: MplFigure, path: str | Path) -> Path:
    """Write a figure in each format of the current :class:`FigureOutput` (``path`` with
    that suffix), each atomically (a temporary file in the same folder, then a rename),
    so a kill never leaves a cut-short image in place. Returns the first format's path."""
    output = current_output()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        for fmt in output.formats:
            target = path.with_suffix(f".{fmt}")
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{target.name}.",
                                       suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f, plt.rc_context(VECTOR_RC):
                    fig.savefig(f, dpi=output.dpi, format=fmt, metadata=NO_DATES.get(fmt))
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            logger.debug("wrote %s", target)
    finally:
        plt.close(fig)
    return path.with_suffix(f".{output.formats[0]}")
