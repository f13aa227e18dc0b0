"""The experimental stop-or-scale signal of a live series: computed after each
measurement on the points so far (:mod:`toposig.analysis.online`), kept per measurement in
``live/<label>/signal.json``, logged under ``topology/experimental/``, and read as a
decision to stop (:func:`stop_reason`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from toposig.analysis import online
from toposig.analysis.feature_sets import PHASE_FEATURES, PREDICTION_FEATURES
from toposig.files.atomic import atomic_write_json, read_json
from toposig.records import Record

logger = logging.getLogger(__name__)

SIGNAL_PREFIX = "topology/experimental/"
SIGNAL_NAME = "signal.json"  # live/<label>/signal.json

LOSS_KINDS = {"mean_nll": "loss on the analysed texts", "loss": "loss the trainer reported",
              "mlm_loss": "masked-LM loss on the analysed texts"}


def loss_kind(entries: Sequence[Record]) -> str:
    """The one kind of loss a live series uses throughout: the mean token loss on the
    analysed texts (``mean_nll``, ln perplexity) when every entry has it, else the loss
    the trainer reported (``loss``) when every entry has it, else whichever more entries
    have, so that a series never mixes two kinds of loss."""
    counts = {k: sum(e.measure(k) is not None for e in entries) for k in LOSS_KINDS}
    return next((k for k in LOSS_KINDS if counts[k] == len(entries)),
                max(LOSS_KINDS, key=lambda k: counts[k]))


def loss_series(entries: Sequence[Record]) -> list[float | None]:
    """One loss per entry, of the kind :func:`loss_kind` chooses (``None`` where an entry
    lacks it)."""
    kind = loss_kind(entries)
    return [e.measure(kind) for e in entries]


# The stop rule's decisions that mean stop (:func:`toposig.analysis.forecast.decide`).
STOP_DECISIONS = frozenset(d for d in online.DECISION_CODES if d.startswith("stop"))


def stop_reason(signal: online.Signal | None) -> str | None:
    """Why ``signal``'s stop rule says stop: ``"<decision> (<the rule's reason>)"``, or the
    decision with the default forecast when the rule gave no reason; ``None`` when there
    is no signal or forecast, or the decision is not one of :data:`STOP_DECISIONS`
    (``continue``). Experimental, as the signal is."""
    f = signal.forecast if signal is not None else None
    if f is None or f.decision not in STOP_DECISIONS:
        return None
    if f.decision_reason:
        return f"{f.decision} ({f.decision_reason})"
    return (f"{f.decision} (default forecast of the final loss at step {f.final_step:g}: "
            f"{f.default}, 95 % interval [{f.default_low}, {f.default_high}])")


LOGGED_SIGNAL = ("final_loss_default", "stop")  # what a trainer's log gets by default


def series(entries: Sequence[Record]
           ) -> tuple[list[int | None], list[float | None], dict[str, list]]:
    """The steps, the losses (one kind, :func:`loss_series`) and every feature's values
    of a live series' aggregate entries."""
    steps = [e.step for e in entries]
    losses = loss_series(entries)
    names = {k for e in entries for k in e.features}
    features = {f: [e.features.get(f) for e in entries] for f in sorted(names)}
    return steps, losses, features


def compute_signal(entries: Sequence[Record], final_step: int | None) -> online.Signal | None:
    """The stop-or-scale signal of ``entries`` (``None`` when there are none)."""
    if not entries:
        return None
    steps, losses, features = series(entries)
    return online.stop_or_scale(steps, losses, features, final_step,
                                phase_features=PHASE_FEATURES,
                                forecast_features=PREDICTION_FEATURES)


class LiveSignal:
    """One label's signal: the latest, and the history written to ``path``
    (``live/<label>/signal.json`` inside the results folder ``root``, no folder between
    them followed through a link)."""

    def __init__(self, path: Path, root: Path):
        self.path = path
        self.root = root
        self.signal: online.Signal | None = None
        self.history: list[dict] = []

    def read(self) -> list[dict]:
        """The signal file: the signal after each measurement (``[]`` when missing or not
        such a list; it is then written afresh)."""
        path = self.path
        try:
            data = read_json(path) if path.is_file() else []
        except (OSError, ValueError):
            data = None
        if not (isinstance(data, list) and all(isinstance(h, dict) for h in data)):
            logger.warning("toposig: %s is not a list of signals; it is written afresh", path)
            return []
        return data

    def resume(self, step: int, fresh: bool) -> None:
        """Go on from the file's signals up to ``step`` (none when ``fresh``: a training
        that starts afresh over removed records)."""
        self.history = [h for h in self.read()
                        if isinstance(h.get("step"), (int, float)) and h["step"] <= step
                        and not fresh]

    def update(self, entries: Sequence[Record], final_step: int | None) -> None:
        """Compute the signal of ``entries`` and write it into the history."""
        self.signal = compute_signal(entries, final_step)
        self.write()

    def write(self) -> None:
        """Put the latest signal in the history (replacing one of the same step) and
        write the history."""
        if self.signal is None:
            return
        self.history = [h for h in self.history if h.get("step") != self.signal.step]
        self.history.append(self.signal.to_dict())
        self.history.sort(key=lambda h: h["step"])
        atomic_write_json(self.path, self.history, root=self.root)

    def scalars(self, everything: bool = False) -> dict[str, float]:
        """The latest signal's scalars, as logged (``topology/experimental/...``): the
        default forecast of the final loss and the decision (:data:`LOGGED_SIGNAL`), or
        with ``everything`` each phase, forecast and standard error too (they are all in
        ``signal.json``)."""
        if self.signal is None:
            return {}
        return {SIGNAL_PREFIX + k: v for k, v in self.signal.scalars().items()
                if everything or k in LOGGED_SIGNAL}

    @property
    def stop_reason(self) -> str | None:
        """:func:`stop_reason` of the latest signal."""
        return stop_reason(self.signal)
