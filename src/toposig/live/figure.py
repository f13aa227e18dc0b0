"""The live figure of one label, ``live/<label>/topology.png``, refreshed as the series
grows (:func:`toposig.report.live_figure.draw_live_figure`), at most once per interval
unless forced. A figure that cannot be drawn is logged, and never stops training."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from toposig.analysis import online
from toposig.live.signal import LOSS_KINDS, loss_kind, loss_series
from toposig.records import Record

logger = logging.getLogger(__name__)

FIGURE_NAME = "topology.png"  # live/<label>/topology.png


def _import_drawing() -> None:
    """Import the drawing code (matplotlib: about 0.5 s of a process on 2 cores), so that
    the first figure does not wait for it. Run on a thread while the model trains; a
    failure is left for the drawing to report."""
    with contextlib.suppress(Exception):  # the drawing itself logs why it cannot draw
        import toposig.report.live_figure  # noqa: F401


class LiveFigure:
    """Draws ``path`` from a series' entries and its latest signal.

    Args:
        path: the figure file.
        root: the results folder it is inside: no folder between them is followed
            through a link.
        interval_s: the least time between two refreshes (a forced one excepted).
    """

    def __init__(self, path: Path, root: Path, interval_s: float = 60.0):
        self.path = path
        self.root = root
        self.interval_s = interval_s
        self.drawn_at = -math.inf

    def draw(self, entries: Sequence[Record], signal: online.Signal | None,
             force: bool) -> None:
        """Draw now when ``force`` or the interval has passed since the last drawing (or,
        before the first, since the first measurement: one point is no curve, and a run
        shorter than the interval is drawn once, when it ends)."""
        now = time.monotonic()
        if self.drawn_at == -math.inf and not force and self.interval_s > 0:
            self.drawn_at = now
            # the drawing code is imported while the model trains on, on a thread (after
            # the first measurement, when the training's data loader has started): the
            # import holds Python's lock of the module, so a drawing that comes first
            # waits for it and never imports twice
            threading.Thread(target=_import_drawing, name="toposig-figure-import",
                             daemon=True).start()
            return
        if not force and now - self.drawn_at < self.interval_s:
            return
        from toposig.report.live_figure import draw_live_figure

        try:
            draw_live_figure(entries, self.path, loss_series(entries), signal,
                             loss_name=LOSS_KINDS[loss_kind(entries)], root=self.root)
        except Exception as exc:  # noqa: BLE001 - a figure never stops training
            logger.warning("toposig: could not draw %s: %s", self.path, exc)
        self.drawn_at = time.monotonic()
