"""The live figure of one label, ``live/<label>/topology.png``, refreshed as the series
grows (:func:`toposig.report.live_figure.draw_live_figure`), at most once per interval
unless forced. A figure that cannot be drawn is logged, and never stops training."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

from toposig.analysis import online
from toposig.live.signal import LOSS_KINDS, loss_kind, loss_series
from toposig.records import Record

logger = logging.getLogger(__name__)

FIGURE_NAME = "topology.png"  # live/<label>/topology.png


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
            # matplotlib is imported when a figure is first drawn, not on a thread before:
            # on a 2-core CPU that import (about 0.5 s of a core) slowed the steps trained
            # beside it by about 0.6 s (measured 2026-11-29, step by step)
            return
        if not force and now - self.drawn_at < self.interval_s:
            return
        try:
            from toposig.report.live_figure import draw_live_figure

            draw_live_figure(entries, self.path, loss_series(entries), signal,
                             loss_name=LOSS_KINDS[loss_kind(entries)], root=self.root)
        except Exception as exc:  # noqa: BLE001 - a figure never stops training
            logger.warning("toposig: could not draw %s: %s", self.path, exc)
        self.drawn_at = time.monotonic()
