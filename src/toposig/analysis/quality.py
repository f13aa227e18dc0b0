"""What a series lacks for the analysis, said once before it draws: any quality measure,
or a second checkpoint.

A series' quality measure is what the analysis relates its signatures to: the stored
loss of its checkpoints (``loss``: a checkpoint file's ``val_loss`` / ``loss`` /
``best_val_loss``, a trainer state's), the perplexity the embedding family measures, or
an encoder's masked-LM loss. A series with none of them (plain state-dict files that
saved no loss, measured for their weights only) gets empty loss panels and no
correlations with the loss; :func:`warn_series_without_quality` says so, once per series,
naming it, instead of leaving the user to wonder at the empty panels.

A series of one checkpoint has no curve over training and no correlation (a Spearman ρ
needs :data:`~toposig.analysis.correlations.MIN_POINTS` checkpoints);
:func:`warn_series_with_one_checkpoint` says so, once per series.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from toposig.analysis.correlations import MIN_POINTS
from toposig.records import Record

logger = logging.getLogger(__name__)

QUALITY_FIELDS: tuple[str, ...] = ("loss", "perplexity", "mlm_loss")
"""Entry fields that measure a checkpoint's quality (any one is enough)."""


def _finite(value) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def series_without_quality(records: Sequence[Record]) -> list[str]:
    """The model label of every series none of whose finished records has a quality
    measure (a finite number in one of :data:`QUALITY_FIELDS`), in first-seen order.

    Failed records are not counted, and a series with no finished record is not listed
    (it has nothing to draw either way).
    """
    has: dict[str, bool] = {}
    for r in records:
        if r.ok:
            has[r.model_label] = has.get(r.model_label, False) \
                or any(_finite(r.measure(k)) for k in QUALITY_FIELDS)
    return [label for label, ok in has.items() if not ok]


def warn_series_without_quality(records: Sequence[Record],
                                log: logging.Logger | None = None) -> list[str]:
    """Log one warning per series without a quality measure
    (:func:`series_without_quality`), naming it and what would give it one; returns
    those series' labels. Call it once, where the analysis starts, before anything is
    drawn."""
    missing = series_without_quality(records)
    for label in missing:
        n = sum(1 for r in records if r.model_label == label and r.ok)
        (log or logger).warning(
            "series %r has no quality measure: none of its %d checkpoint(s) has a loss, a "
            "perplexity or a masked-LM loss, so its loss panels stay empty and its "
            "signatures are not correlated with the loss. Measure its perplexity (the "
            "embedding family, on a model folder), or save the loss with each checkpoint "
            "(val_loss, loss or nanoGPT's best_val_loss in the file; trainer_state.json "
            "beside a model folder)", label, n)
    return missing


def series_with_one_checkpoint(records: Sequence[Record]) -> list[str]:
    """The model label of every series with exactly one finished record, in first-seen
    order (failed records are not counted)."""
    counts: dict[str, int] = {}
    for r in records:
        if r.ok:
            counts[r.model_label] = counts.get(r.model_label, 0) + 1
    return [label for label, n in counts.items() if n == 1]


def warn_series_with_one_checkpoint(records: Sequence[Record],
                                    log: logging.Logger | None = None) -> list[str]:
    """Log one warning per series of a single checkpoint
    (:func:`series_with_one_checkpoint`), naming it and what it cannot give; returns those
    series' labels. Call it once, where the analysis starts, before anything is drawn."""
    lone = series_with_one_checkpoint(records)
    for label in lone:
        (log or logger).warning(
            "series %r has only one checkpoint: its figures over training cannot be drawn "
            "and its correlations cannot be tested (a Spearman correlation needs %d "
            "checkpoints or more); measure more checkpoints of it (a checkpoint series, or "
            "--steps) to see it change", label, MIN_POINTS)
    return lone


__all__ = ["QUALITY_FIELDS", "series_with_one_checkpoint", "series_without_quality",
           "warn_series_with_one_checkpoint", "warn_series_without_quality"]
