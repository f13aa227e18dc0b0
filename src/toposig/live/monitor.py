"""Measure a model while it trains, into a results folder the offline tools read.

A :class:`TopologyMonitor` is what every integration (the ``transformers`` and Lightning
callbacks, the project's own trainer, a hand-written loop) drives. Each measurement:

1. runs the chosen signature families on the model in memory, without saving or
   reloading it (:func:`toposig.in_memory.measure_families`: eval mode and no gradients
   for the forward passes, the model's own device and precision; every module's
   train/eval mode, parameter flags and gradients and the random number generators
   restored after, :func:`toposig.in_memory.preserved_state`; the weights and the
   optimizer never touched);
2. writes the records through the offline pipeline's own driver
   (:func:`toposig.run.pipeline.execute`, with an executor that measures in memory): the
   same folder layout, schema, settings hashes, aggregates and ``config.json``, so
   ``analyze_results.py`` runs on the folder unchanged, and a failed family is recorded
   as the pipeline records one;
3. returns the scalars to log (``topology/<feature>`` and the experimental
   ``topology/experimental/...`` signal of :mod:`toposig.analysis.online`), and refreshes
   ``live/<label>/topology.png`` and ``live/<label>/signal.json`` in the results folder.

The whole measurement holds the results folder's lock (waiting up to ``lock_wait_s`` for
another toposig process), as a pipeline run does. Besides, a monitor owns its label from
:meth:`TopologyMonitor.start` until :meth:`TopologyMonitor.finish` (or
:meth:`TopologyMonitor.close`, or the end of its process, however it ends): it holds
``live/<label>/.writer.lock`` (``fcntl.flock``), so a second monitor on the same label, in
another process or in this one, is refused (:class:`LabelInUseError`) before it removes
or writes anything, while other labels of the folder are measured alongside.

Everything that could refuse a monitor (its model under the label, the study's settings
of each of its families, records of the label made by the offline pipeline, a fresh
start over earlier records) is checked by :meth:`TopologyMonitor.start` before any record
is removed, so a refused resume leaves the folder as it was.

A measurement that fails outright (after the first) is logged and training goes on;
the first one raises, so a results folder that belongs to another study, or a model
that cannot be measured, stops the run before it has trained for long.

Measuring while training goes on (:meth:`TopologyMonitor.submit` with
``background=True``; the ``transformers`` callback submits its measurements): the weights
are copied into a twin of the model and a worker thread measures the twin and writes its
records while the training goes on; the results are taken up by
:meth:`TopologyMonitor.collect` (see :mod:`toposig.live.background`).
:meth:`TopologyMonitor.measure` measures at once, on the model itself.

The monitor composes one part per job, each in its own module:

- :mod:`toposig.live.schedule`: when to measure (:class:`Schedule`);
- :mod:`toposig.live.guard`: the study guard (a start, resume or extension checked
  against the folder's study before anything is removed; the label's writer lock);
- :mod:`toposig.live.measurement`: the measurement (the plan, the settings hashes, the
  records written through the pipeline's driver; the logged feature scalars);
- :mod:`toposig.live.signal`: the experimental stop-or-scale signal (``signal.json``,
  :func:`stop_reason`);
- :mod:`toposig.live.figure`: the live figure (``topology.png``);
- :mod:`toposig.live.background`: the twin and the worker thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toposig.analysis import online
from toposig.config import RunSettings
from toposig.families import registry
from toposig.families.base import FamilyInputs
from toposig.families.registry import default_names
from toposig.files.names import check_label
from toposig.in_memory import check_families, given_settings
from toposig.live.background import Twin, Worker, check_background
from toposig.live.figure import FIGURE_NAME, LiveFigure
from toposig.live.guard import (
    WRITER_LOCK,
    LabelInUseError,
    LiveRunExistsError,
    StudyGuard,
)
from toposig.live.measurement import (
    LOG_FEATURES,
    PREFIX,
    LiveMeasurement,
    feature_scalars,
    live_inputs,
)
from toposig.live.schedule import Schedule, check_step
from toposig.live.signal import (
    LOSS_KINDS,
    SIGNAL_NAME,
    SIGNAL_PREFIX,
    STOP_DECISIONS,
    LiveSignal,
    loss_kind,
    loss_series,
    stop_reason,
)
from toposig.records import Family, Record

logger = logging.getLogger(__name__)

LIVE_DIR = "live"  # live/<label>/topology.png and live/<label>/signal.json

# The names this module has always offered, now each in the module of its part.
__all__ = [
    "FIGURE_NAME", "LIVE_DIR", "LOG_FEATURES", "LOSS_KINDS", "PREFIX", "SIGNAL_NAME",
    "SIGNAL_PREFIX", "STOP_DECISIONS", "WRITER_LOCK", "LabelInUseError", "LiveResult",
    "LiveRunExistsError", "Schedule", "TopologyMonitor", "check_step", "loss_kind",
    "loss_series", "stop_reason",
]


@dataclass
class LiveResult:
    """One measurement.

    Attributes:
        step: the training step measured.
        entry: the step's aggregate entry (families merged), or ``None`` when every
            family failed.
        failures: the failure records of the families that failed.
        scalars: name -> value, as logged (``topology/...``).
        signal: the experimental stop-or-scale signal after this measurement.
        seconds: wall time of the measurement, bookkeeping included (in the background:
            from the copy of the weights to the records written).
        background: measured on a twin of the model while training went on
            (:meth:`TopologyMonitor.submit`).
    """

    step: int
    entry: Record | None
    failures: list[dict] = field(default_factory=list)
    scalars: dict[str, float] = field(default_factory=dict)
    signal: online.Signal | None = None
    seconds: float = 0.0
    background: bool = False


class TopologyMonitor:
    """Measures a training model into a results folder (see the module).

    Args:
        tokenizer: the model's tokenizer.
        out: the results folder (created; one study, as for ``run_experiments.py``).
        texts: the analysed texts (default: the pipeline's 200 WikiText-2 validation
            rows); the landscape and gradient probes cut their windows from them too.
        families: the signature families to measure (default: those a model gets by
            default, embedding and weights).
        schedule: when to measure (:class:`Schedule`); the integrations build it from
            their ``every_n_steps``, ``doubling``, ``at_save`` and ``at_evaluate``.
        label: the model's name in the records (a plain file name).
        model_name: the model as ``config.json`` names it (default: ``label``).
        layers: ``"last"`` or ``"all"``.
        settings: the run's settings, as for :func:`toposig.measure`.
        family_settings: family -> the family with its settings, likewise
            (the per-family keywords of earlier versions are still taken, with a
            DeprecationWarning).
        log_features: the features logged as scalars, or ``"all"``.
        figure_interval_s: the least time between two refreshes of the figure, and
            between the first measurement and the first drawing (it is always drawn by
            :meth:`finish`).
        overwrite: let a training that starts at step 0 remove the folder's live
            records of ``label`` and start afresh (refused by default:
            :class:`LiveRunExistsError`); never while another monitor is writing the
            label (:class:`LabelInUseError`).
        extend: let this label join a folder whose study holds other models (as
            ``run_experiments.py --extend``; refused by default, as a run bringing a new
            model is).
        lock_wait_s: how long a measurement waits for the folder's lock when another
            toposig process holds it (an analysis, say) before giving up.
        command: how the run was made, for ``config.json``.
        progress: a progress bar over the families of the first measurement (the one that
            also reads the texts; later ones are quiet), on stderr; ``False``: none.
        background: whether :meth:`submit` measures a twin of the model on a worker
            thread while training goes on (``True``: worth it where the training leaves
            cores idle, :mod:`toposig.live.background`), or at once (``False``).

    Raises:
        ValueError: an unknown family, an unsafe label or a ``background`` that is not
            ``True`` or ``False``.
    """

    def __init__(self, tokenizer, out: str | Path, *, texts: Sequence[str] | None = None,
                 families: Sequence[str] | None = None, schedule: Schedule | None = None,
                 label: str = "model", model_name: str | None = None, layers: str = "last",
                 settings: RunSettings | None = None,
                 family_settings: Mapping[str, Any] | None = None,
                 log_features: Sequence[str] | str = LOG_FEATURES,
                 figure_interval_s: float = 60.0, overwrite: bool = False,
                 extend: bool = False, lock_wait_s: float = 60.0,
                 command: str = "toposig live monitor", progress: bool = True,
                 background: bool = False, **legacy: Any):
        out = Path(out)
        checked = check_families(default_names() if families is None else families)
        if check_background(background):
            seeding = [f for f in checked if registry.get(f).seeds_global_random]
            if seeding:
                raise ValueError(f"{', '.join(seeding)} seeds the process's random "
                                 "generators while it samples (devinterp), which training "
                                 "draws from at the same time: measure it with "
                                 "background=False")
        label = check_label(label, "label")
        inputs = live_inputs(texts, checked, layers, settings,
                             given_settings(family_settings, legacy, "TopologyMonitor"))
        self.schedule = schedule or Schedule()
        self.log_features = log_features
        self._measurement = LiveMeasurement(
            tokenizer, out, families=checked, label=label, model_name=model_name or label,
            inputs=inputs, command=command, extend=extend,
            progress=progress)
        live = out / LIVE_DIR / label
        self._guard = StudyGuard(self._measurement, live / WRITER_LOCK, overwrite=overwrite,
                                 extend=extend, lock_wait_s=lock_wait_s)
        self._signal = LiveSignal(live / SIGNAL_NAME, out)
        self._figure = LiveFigure(live / FIGURE_NAME, out, figure_interval_s)
        self.measured: set[int] = set()
        self.results: list[LiveResult] = []
        self.final_step: int | None = None
        self._started = False
        self._entries: list[Record] = []
        self._start_step: int | None = None  # the step start() was given, until it is done
        self.background = check_background(background)
        self._worker = Worker()
        self._twin: Twin | None = None
        self._done: deque[LiveResult] = deque()  # measured in the background, not collected
        self._failed: BaseException | None = None  # the first measurement's, in the background
        self._uncopyable = False  # the model or its tokenizer could not be copied: said once

    # -- the parts' settings, as attributes ---------------------------------------------

    @property
    def tokenizer(self):
        return self._measurement.tokenizer

    @property
    def out(self) -> Path:
        """The results folder."""
        return self._measurement.out

    @property
    def label(self) -> str:
        """The model's name in the records."""
        return self._measurement.label

    @property
    def model_name(self) -> str:
        return self._measurement.model_name

    @property
    def families(self) -> tuple[Family, ...]:
        return self._measurement.families

    @property
    def inputs(self) -> FamilyInputs:
        return self._measurement.inputs

    @property
    def texts_source(self) -> str:
        return self._measurement.inputs.texts_source

    @property
    def command(self) -> str:
        return self._measurement.command

    @property
    def overwrite(self) -> bool:
        return self._guard.overwrite

    @property
    def extend(self) -> bool:
        return self._guard.extend

    @property
    def lock_wait_s(self) -> float:
        return self._guard.lock_wait_s

    @property
    def figure_interval_s(self) -> float:
        return self._figure.interval_s

    # -- when -----------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Whether ``step`` is due by the schedule's count and not measured yet."""
        return step not in self.measured and self.schedule.due(step)

    def __call__(self, model, step: int, *, loss: float | None = None,
                 final_step: int | None = None) -> LiveResult | None:
        """For a hand-written loop: measure ``model`` if ``step`` is due (else ``None``).

        Args:
            step: optimizer updates done so far.
            loss: the training loss known at this step (nats), kept as the records'
                stored loss.
            final_step: the run's planned last step, for the final-loss forecast.
        """
        if not self.due(step):
            return None
        return self.measure(model, step, stored_loss=(loss, None if loss is None
                                                      else "train_loss"),
                            final_step=final_step)

    # -- measuring ------------------------------------------------------------------

    def start(self, step: int, model=None) -> None:
        """Take this label and check the folder, under its lock, before training starts
        at ``step`` (the first measurement calls it when no integration has).

        The label is this monitor's from now until :meth:`finish` or :meth:`close` (or
        the end of the process): a second monitor on it is refused. Every check that
        could refuse this monitor runs before anything is removed or written: the model
        the study holds under the label, the study's settings of each family measured
        (:meth:`toposig.run.study.Study.check`, as the measurement would), records of
        the label the offline pipeline made, and a fresh start over earlier records.

        A training resumed at ``step`` > 0 goes on writing; its label's live records
        after ``step``, left by the continuation it abandoned, are then removed (they
        would mix two trainings), and so are their steps in the study. The embedding's
        settings hash covers the model's precision: without ``model`` they are checked
        against the study's precision now and removed only at the first measurement,
        once the model's own precision has been checked too.

        Args:
            step: optimizer updates done when training starts (resumes).
            model: the model to be measured (default: known at the first measurement).

        Raises:
            LabelInUseError: another monitor (another training, in this process or
                another) is writing this label in this folder.
            LiveRunExistsError: ``step`` is 0 and the folder already holds records of
                this label (a fresh training would mix with them); with ``overwrite``
                its live records are removed instead.
            StudyMismatchError: the folder's study holds another model under this
                label, records of it that the offline pipeline made, or other settings
                for one of this monitor's families.
            ValueError: ``model`` cannot be measured (several devices or precisions).
            FolderLockedError: another toposig process holds the folder.
        """
        check_step(step)
        self.wait()
        admitted = self._guard.admit(step, model, measuring=bool(self.results))
        if admitted is None:  # measuring already: the folder was checked at its start
            return
        if not admitted.complete:  # the removals wait for the model's precision
            self._start_step = step
            return
        self._signal.resume(step, fresh=step == 0 and admitted.removed)
        self._start_step = None
        self._started = True

    def close(self) -> None:
        """Wait for a measurement in flight, drop the model's twin, and release the label
        (:meth:`finish` does; a later measurement takes it again, if no other monitor
        has taken it meanwhile)."""
        try:
            self._worker.close()
        finally:
            self._twin = None
            self._guard.close()

    def recorded_steps(self) -> set[int]:
        """The steps of this label that have records in the results folder (measured,
        or failed), any family."""
        self.wait()
        return {s for s, _ in self._guard.label_records()}

    def measure(self, model, step: int, *,
                stored_loss: tuple[float | None, str | None] = (None, None),
                final_step: int | None = None) -> LiveResult:
        """Measure ``model`` at ``step`` now, whatever the schedule (see the module).

        Args:
            stored_loss: the loss the trainer knows for this state and where it was
                found (kept as a checkpoint's stored loss is).
            final_step: the run's planned last step (for the forecast; default: the
                last one given).

        Raises:
            ValueError: ``step`` is not a non-negative integer.
            Exception: whatever the first measurement raises (a folder of another
                study, a model that cannot be measured, a folder another process holds,
                a label another monitor writes: :meth:`start`); later failures (a label
                taken by another monitor after :meth:`finish` included) are logged and
                returned, and write nothing.
        """
        check_step(step)
        self.wait()
        first = not self.results
        if not self._started:
            self.start(step if self._start_step is None else self._start_step, model)
        if final_step is not None:
            self.final_step = final_step
        t0 = time.perf_counter()
        try:
            result = self._locked_measure(model, step, stored_loss, first)
        except Exception as exc:
            if first:
                raise
            result = self._failure(step, exc)
        result.seconds = time.perf_counter() - t0
        self.measured.add(step)
        self.results.append(result)
        return result

    def submit(self, model, step: int, *,
               stored_loss: tuple[float | None, str | None] = (None, None),
               final_step: int | None = None) -> None:
        """Measure ``model`` at ``step`` while training goes on: copy its weights into a
        twin now and measure the twin on a worker thread (:mod:`toposig.live.background`);
        :meth:`collect` hands over the result. Where the model is measured in the
        foreground (``background``), it is measured at once, as by :meth:`measure`, and
        :meth:`collect` hands over that result too. A measurement still in flight is
        waited for first.

        Args: as :meth:`measure`.

        Raises:
            ValueError: ``step`` is not a non-negative integer.
            Exception: what :meth:`start` raises; in the foreground, what the first
                measurement raises (in the background, :meth:`collect` raises it).
        """
        check_step(step)
        self.wait()
        if not self._started:
            self.start(step if self._start_step is None else self._start_step, model)
        twin = self._twin_for(model)
        t0 = time.perf_counter()
        if twin is not None:
            try:
                twin.refresh(model, self.tokenizer)
            except Exception as exc:  # noqa: BLE001 - measured in the foreground then
                logger.warning("toposig: measuring step %d with the training waiting: the "
                               "model could not be copied (%s: %s)", step,
                               type(exc).__name__, exc)
                twin = self._twin = None
        if twin is None:
            self._done.append(self.measure(model, step, stored_loss=stored_loss,
                                           final_step=final_step))
            return
        if final_step is not None:
            self.final_step = final_step
        first = not self.results
        self.measured.add(step)

        def job() -> None:
            try:
                result = self._locked_measure(twin.model, step, stored_loss, first,
                                              tokenizer=twin.tokenizer, restore_rngs=False)
            except Exception as exc:  # noqa: BLE001 - reported by collect()
                if first:
                    self._failed = exc
                    return
                result = self._failure(step, exc)
            result.seconds = time.perf_counter() - t0
            result.background = True
            self.results.append(result)
            self._done.append(result)

        self._worker.submit(job)

    def collect(self, wait: bool = False) -> list[LiveResult]:
        """The results of :meth:`submit` not collected yet, oldest first; with ``wait``,
        after the measurement in flight has ended.

        Raises:
            Exception: what the run's first measurement raised in the background (once).
        """
        if wait:
            self.wait()
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def wait(self) -> None:
        """Wait for the measurement in flight, if any (:meth:`submit`)."""
        self._worker.wait()

    def finish(self) -> None:
        """Wait for the measurement in flight, draw the figure once more with everything
        measured, and release the label (:meth:`close`) for another training (call at
        the end)."""
        try:
            self.wait()
            if self._entries and self._guard.held:
                with self._guard.locked():
                    self._figure.draw(self._entries, self._signal.signal, force=True)
        finally:
            self.close()

    @property
    def figure_path(self) -> Path:
        """This label's live figure: ``live/<label>/topology.png``."""
        return self._figure.path

    @property
    def signal_path(self) -> Path:
        """This label's signal history: ``live/<label>/signal.json``."""
        return self._signal.path

    # -- internals ------------------------------------------------------------------

    def _twin_for(self, model) -> Twin | None:
        """The twin of ``model`` that :meth:`submit` measures, made at its first use
        (``None``: ``model`` is measured in the foreground: ``background`` is off, or the
        model or its tokenizer cannot be copied, which is logged once)."""
        if not self.background:
            return None
        if self._twin is not None and self._twin.of is model and self._twin.fits(model):
            return self._twin
        self._twin = None
        try:
            self._twin = Twin(model, self.tokenizer)
        except Exception as exc:  # noqa: BLE001 - measured in the foreground then
            if not self._uncopyable:
                logger.warning("toposig: measuring %s with the training waiting: the model or "
                               "its tokenizer cannot be copied for a background measurement "
                               "(%s: %s)", self.label, type(exc).__name__, exc)
            self._uncopyable = True
        return self._twin

    def _locked_measure(self, model, step: int,
                        stored_loss: tuple[float | None, str | None], first: bool,
                        **options: Any) -> LiveResult:
        """:meth:`_measure` with the folder's lock held and the label claimed."""
        with self._guard.locked():
            self._guard.claim()  # again after finish(), unless another monitor took it
            return self._measure(model, step, stored_loss, first, **options)

    def _failure(self, step: int, exc: Exception) -> LiveResult:
        """A measurement after the first failed: logged, and training goes on."""
        logger.error("toposig: the measurement at step %d failed (training goes on): "
                     "%s: %s", step, type(exc).__name__, exc)
        return LiveResult(step, None, [{"error_type": type(exc).__name__,
                                        "error": str(exc)}])

    def _measure(self, model, step: int, stored_loss: tuple[float | None, str | None],
                 first: bool, **options: Any) -> LiveResult:
        """One measurement, the folder's lock held (:meth:`measure`); ``options`` go to
        :meth:`LiveMeasurement.run`."""
        measured = self._measurement.run(model, step, stored_loss, first, **options)
        self._entries = measured.entries
        try:  # the experimental signal and the figure never cost a measurement
            self._signal.update(self._entries, self.final_step)
            self._figure.draw(self._entries, self._signal.signal, force=False)
        except Exception as exc:  # noqa: BLE001
            logger.warning("toposig: the live signal or figure at step %d failed: %s: %s",
                           step, type(exc).__name__, exc)
        scalars = (feature_scalars(measured.entry, self.log_features)
                   | self._signal.scalars(everything=self.log_features == "all"))
        return LiveResult(step, measured.entry, measured.failures, scalars,
                          self._signal.signal)

    @property
    def entries(self) -> list[Record]:
        """The aggregate entries of this label measured so far (one per step)."""
        return list(self._entries)

    @property
    def signal(self) -> online.Signal | None:
        """The latest stop-or-scale signal (experimental)."""
        return self._signal.signal

    @property
    def stop_reason(self) -> str | None:
        """:func:`stop_reason` of the latest signal: why its stop rule says stop, or
        ``None`` when it says continue or has no decision (experimental)."""
        return self._signal.stop_reason
