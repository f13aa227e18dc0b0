"""Which files a figure is written as (:class:`FigureOutput`: formats and resolution),
without matplotlib, so that ``--formats`` and ``--dpi`` are checked before it loads;
:mod:`toposig.report.style` draws and writes them."""

from __future__ import annotations

from dataclasses import dataclass

from toposig.defaults import DPI

__all__ = ["FIGURE_FORMATS", "FigureOutput"]

FIGURE_FORMATS = ("png", "pdf", "svg")


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

    @classmethod
    def from_options(cls, formats: str, dpi: int) -> FigureOutput:
        """From ``--formats`` (comma-separated, any case, repeats dropped) and ``--dpi``."""
        return cls(tuple(dict.fromkeys(f.strip().lower() for f in formats.split(",")
                                       if f.strip())), dpi)
