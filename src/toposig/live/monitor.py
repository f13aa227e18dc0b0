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
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from toposig.analysis import online
from toposig.analysis.statistics import PHASE_FEATURES, PREDICTION_FEATURES
from toposig.config import (
    EmbeddingSettings,
    GradientSettings,
    LandscapeSettings,
    WeightSettings,
)
from toposig.files.atomic import atomic_write_json, read_json
from toposig.files.locks import (
    FolderLockedError,
    exclusive,
    open_lock_file,
    read_holder,
    write_holder,
)
from toposig.files.names import check_label
from toposig.in_memory import IN_MEMORY, MeasureInputs, check_families
from toposig.live.executor import InMemoryExecutor
from toposig.model.placement import Placement
from toposig.records import DEFAULT_FAMILIES, Family
from toposig.run.pipeline import execute
from toposig.run.plan import RunPlan, family_hashes
from toposig.run.study import StudyMismatchError, check_run_fits, load_study
from toposig.schedule import is_scheduled
from toposig.sources.checkpoints import Checkpoint

logger = logging.getLogger(__name__)

PREFIX = "topology/"
SIGNAL_PREFIX = "topology/experimental/"
# The features logged by default: each family's headline numbers (``log_features="all"``
# logs every checkpoint-level feature).
LOG_FEATURES = ("perplexity", "h0_total_persistence", "h1_total_persistence",
                "h1_n_features", "h1_persistence_entropy", "rankme", "np_mean",
                "weight_h0_total", "weight_h1_total", "hessian_eig_1", "hessian_trace",
                "landscape_n_minima", "grad_h0_total_persistence", "grad_norm_mean")
LIVE_DIR = "live"  # live/<label>/topology.png and live/<label>/signal.json
FIGURE_NAME = "topology.png"
SIGNAL_NAME = "signal.json"
WRITER_LOCK = ".writer.lock"  # live/<label>/.writer.lock: held by the monitor writing <label>


LOSS_KINDS = {"mean_nll": "loss on the analysed texts", "loss": "loss the trainer reported",
              "mlm_loss": "masked-LM loss on the analysed texts"}


def loss_kind(entries: Sequence[dict]) -> str:
    """The one kind of loss a live series uses throughout: the mean token loss on the
    analysed texts (``mean_nll``, ln perplexity) when every entry has it, else the loss
    the trainer reported (``loss``) when every entry has it, else whichever more entries
    have, so that a series never mixes two kinds of loss."""
    counts = {k: sum(e.get(k) is not None for e in entries) for k in LOSS_KINDS}
    return next((k for k in LOSS_KINDS if counts[k] == len(entries)),
                max(LOSS_KINDS, key=lambda k: counts[k]))


def loss_series(entries: Sequence[dict]) -> list[float | None]:
    """One loss per entry, of the kind :func:`loss_kind` chooses (``None`` where an entry
    lacks it)."""
    kind = loss_kind(entries)
    return [e.get(kind) for e in entries]


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


def check_step(step: object) -> None:
    """Raise ``ValueError`` unless ``step`` is a non-negative integer."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"a step is the number of optimizer updates done, a non-negative "
                         f"integer; got {step!r}")


class LiveRunExistsError(FileExistsError):
    """A training that starts at step 0 into a results folder that already holds live
    records of the same model: the two trainings would mix."""


class LabelInUseError(FolderLockedError):
    """Another live monitor (another training, in another process or in this one) is
    writing the same label in the same results folder; the message names the folder,
    the label and the holding process."""


@dataclass(frozen=True)
class Schedule:
    """When to measure.

    Attributes:
        every_n_steps: measure every this many optimizer steps (``None``: not by count).
        doubling: also at the powers of two below ``every_n_steps`` (Pythia's schedule).
        at_save: also whenever the trainer saves a checkpoint.
        at_evaluate: also whenever the trainer evaluates.
        initial: also at step 0, before the first update.
    """

    every_n_steps: int | None = None
    doubling: bool = False
    at_save: bool = True
    at_evaluate: bool = False
    initial: bool = True

    def __post_init__(self) -> None:
        if self.every_n_steps is not None and (
                isinstance(self.every_n_steps, bool) or not isinstance(self.every_n_steps, int)
                or self.every_n_steps < 1):
            raise ValueError(f"every_n_steps must be a positive integer or None, got "
                             f"{self.every_n_steps!r}")
        if self.doubling and self.every_n_steps is None:
            raise ValueError("doubling=True needs every_n_steps (the doubling runs up to it)")

    def due(self, step: int) -> bool:
        """Whether ``step`` is due by count (saves and evaluations are the trainer's)."""
        if step == 0:
            return self.initial
        return self.every_n_steps is not None and is_scheduled(
            step, self.every_n_steps, "pythia" if self.doubling else "regular")


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
        seconds: wall time of the measurement, bookkeeping included.
    """

    step: int
    entry: dict | None
    failures: list[dict] = field(default_factory=list)
    scalars: dict[str, float] = field(default_factory=dict)
    signal: online.Signal | None = None
    seconds: float = 0.0


class TopologyMonitor:
    """Measures a training model into a results folder (see the module).

    Args:
        tokenizer: the model's tokenizer.
        out: the results folder (created; one study, as for ``run_experiments.py``).
        texts: the analysed texts (default: the pipeline's 200 WikiText-2 validation
            rows); the landscape and gradient probes cut their windows from them too.
        families: the signature families to measure (default: embedding and weights).
        schedule: when to measure (:class:`Schedule`); the integrations build it from
            their ``every_n_steps``, ``doubling``, ``at_save`` and ``at_evaluate``.
        label: the model's name in the records (a plain file name).
        model_name: the model as ``config.json`` names it (default: ``label``).
        layers: ``"last"`` or ``"all"``.
        settings: the embedding's settings, as for :func:`toposig.measure`.
        weight_settings: the weight family's settings, likewise.
        landscape_settings: the landscape family's settings, likewise.
        gradient_settings: the gradient family's settings, likewise.
        log_features: the features logged as scalars, or ``"all"``.
        figure_interval_s: the least time between two refreshes of the figure (it is
            always drawn by :meth:`finish`).
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

    Raises:
        ValueError: an unknown family or an unsafe label.
    """

    def __init__(self, tokenizer, out: str | Path, *, texts: Sequence[str] | None = None,
                 families: Sequence[str] = DEFAULT_FAMILIES, schedule: Schedule | None = None,
                 label: str = "model", model_name: str | None = None, layers: str = "last",
                 settings: EmbeddingSettings | None = None,
                 weight_settings: WeightSettings | None = None,
                 landscape_settings: LandscapeSettings | None = None,
                 gradient_settings: GradientSettings | None = None,
                 log_features: Sequence[str] | str = LOG_FEATURES,
                 figure_interval_s: float = 60.0, overwrite: bool = False,
                 extend: bool = False, lock_wait_s: float = 60.0,
                 command: str = "toposig live monitor"):
        self.tokenizer = tokenizer
        self.out = Path(out)
        self.families = check_families(families)
        self.schedule = schedule or Schedule()
        self.label = check_label(label, "label")
        self.model_name = model_name or label
        settings = replace(settings or EmbeddingSettings(), layers=layers)
        self.inputs = MeasureInputs.default(settings, texts, self.families, weight_settings,
                                            landscape_settings, gradient_settings)
        self.texts_source = ("texts given to the monitor" if texts is not None
                             else settings.texts or "wikitext-2-raw-v1 validation")
        self.log_features = log_features
        self.figure_interval_s = figure_interval_s
        self.overwrite = overwrite
        self.extend = extend
        self.lock_wait_s = lock_wait_s
        self.command = command
        self.measured: set[int] = set()
        self.results: list[LiveResult] = []
        self.final_step: int | None = None
        self._started = False
        self._drawn_at = -math.inf
        self._entries: list[dict] = []
        self._signal: online.Signal | None = None
        self._history: list[dict] = []
        self._start_step: int | None = None  # the step start() was given, until it is done
        self._writer: tuple[int, int] | None = None  # (fd, pid) of the label's writer lock

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
        (:func:`toposig.run.study.check_run_fits`, as the measurement would), records of
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
        with self._locked():
            held_before = self._writer is not None
            if not held_before:
                self._claim(create=False)  # refuse at once if another monitor writes
            try:
                if self.results:  # measuring already: the folder was checked at its start
                    self._claim()
                    return
                self._prepare(step, model)
            except BaseException:
                if not held_before:
                    self.close()  # refused: the label is left to whoever may take it
                raise

    def _prepare(self, step: int, model) -> None:
        """:meth:`start` with the folder's lock held: every check, then the label taken,
        then the removals (only once the model's precision is known, when it counts)."""
        config = load_study(self.out)
        held_model = ((config or {}).get("models") or {}).get(self.label)
        if held_model is not None and held_model != self.model_name:
            raise StudyMismatchError(
                f"{self.out} holds {held_model!r} under the label {self.label!r}; this "
                f"training is {self.model_name!r}: give it another label (label=...) "
                "or write to another folder (out=...)")
        exact = self._check_study(config, model)
        records = self._label_records()
        if step == 0 and records and not self.overwrite:
            raise LiveRunExistsError(
                f"{self.out} already holds records of {self.label!r} at "
                f"{len({s for s, _ in records})} step(s) "
                f"({records[0][1].parent}); a training starting at step 0 would mix "
                "with them. Write to another folder (out=...), give this run another "
                "label, or pass overwrite=True to remove them first")
        stale = [(s, p) for s, p in records if s > step or (step == 0 and s == 0)]
        self._check_foreign(stale)
        self._claim()
        if not exact:  # the removals wait for the model's precision (first measurement)
            self._start_step = step
            return
        if stale:
            self._remove(stale, step, config)
        self._history = [h for h in self._read_signal()
                         if isinstance(h.get("step"), (int, float)) and h["step"] <= step
                         and not (step == 0 and stale)]
        self._start_step = None
        self._started = True

    def _check_study(self, config: dict | None, model) -> bool:
        """Refuse (as the measurement's :func:`~toposig.run.pipeline.execute` would) a
        monitor whose model or settings do not belong to the folder's study; return
        whether the check was complete: without ``model`` the embedding's settings are
        checked in the study's precision, the model's own being unknown yet.

        Raises:
            StudyMismatchError: see :func:`toposig.run.study.check_run_fits`.
            ValueError: ``model`` cannot be measured (several devices or precisions).
        """
        embedding = Family.EMBEDDING in self.families
        if model is not None:
            placement = Placement.of_model(model, self.inputs.settings.dtype)
        else:
            placement = Placement("cpu", (config or {}).get("dtype") or "float32")
        ckpt = Checkpoint(model=self.model_name, label=self.label, step=0, source="memory",
                          location=IN_MEMORY)
        plan = self._plan(ckpt, placement)
        plan.adopt_study_labels(self.out)
        hashes = plan.hashes
        if model is None and not (config or {}).get("dtype"):
            hashes.pop(Family.EMBEDDING, None)  # a study without a recorded precision
        check_run_fits(self.out, plan.models, hashes, plan.settings_views(),
                       extend=self.extend, sources=plan.sources)
        return model is not None or not embedding

    def _check_foreign(self, stale: list[tuple[int, Path]]) -> None:
        """Refuse to remove records of this label that the offline pipeline made (only
        records this monitor's kind made, ``source: "memory"``, are ever removed).

        Raises:
            StudyMismatchError: naming the first such record.
        """
        foreign = []
        for _, path in stale:
            try:
                rec = read_json(path)
            except (OSError, ValueError):
                continue  # unreadable: the pipeline recomputes such a record anyway
            if isinstance(rec, dict) and rec.get("source") not in ("memory", None):
                foreign.append(path)
        if foreign:
            raise StudyMismatchError(
                f"{foreign[0]} (and {len(foreign) - 1} more) of {self.label!r} were made by "
                "the offline pipeline, not during training; they are not removed. Give this "
                "training another label (label=...) or write to another folder (out=...)")

    def _claim(self, create: bool = True) -> None:
        """Hold ``live/<label>/.writer.lock`` (an advisory ``fcntl.flock``, kept open until
        :meth:`close`; the kernel releases it when the process ends, however it ends, so
        a killed training's label is taken over). A no-op while held; with ``create``
        false, a missing lock file is not created (nobody holds it). Called with the
        folder's lock held, so checking and taking the label cannot interleave with
        another monitor's.

        Raises:
            LabelInUseError: another monitor, in this process or another, holds it.
            UnsafeLockFileError: the lock file is a link, not a plain file, or not ours.
        """
        if self._writer is not None:
            return
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX: no advisory locks
            return
        path = self.out / LIVE_DIR / self.label / WRITER_LOCK
        if not create and not path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock_file(path)  # no link followed, nothing truncated
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = read_holder(fd)
            os.close(fd)
            who = ("another monitor in this process, not finished (call its finish())"
                   if holder == str(os.getpid()) else f"process {holder}")
            raise LabelInUseError(
                f"the label {self.label!r} in the results folder {str(self.out)!r} is "
                f"being written by {who}: another training is writing it, and two "
                "trainings under one label would remove or mix each other's records. "
                "Give this training another label (label=...), write to another folder "
                "(out=...), or wait for that training to finish") from None
        write_holder(fd)
        self._writer = (fd, os.getpid())

    def close(self) -> None:
        """Release the label (:meth:`finish` does; a later measurement takes it again,
        if no other monitor has taken it meanwhile)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        fd, pid = writer
        try:
            if pid == os.getpid():  # a forked child shares the lock: only the owner unlocks
                import fcntl

                write_holder(fd, None)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the kernel releases it
            self.close()

    def _label_records(self) -> list[tuple[int, Path]]:
        """(step, path) of this label's record files in the folder, every family."""
        out = []
        for path in sorted((self.out / "records").glob(f"*/{self.label}/step*.json")):
            digits = path.stem.removeprefix("step")
            if digits.isdigit():
                out.append((int(digits), path))
        return out

    def _remove(self, stale: list[tuple[int, Path]], step: int, config: dict | None) -> None:
        """Delete ``stale`` records (with their arrays) and their steps in the study;
        :meth:`start` has checked them (:meth:`_check_foreign`) and taken the label."""
        for _, path in stale:
            path.unlink(missing_ok=True)
            path.with_suffix(".npz").unlink(missing_ok=True)
        gone = {s for s, _ in stale}
        if config is not None and self.label in (config.get("steps") or {}):
            config["steps"][self.label] = [s for s in config["steps"][self.label]
                                           if s not in gone]
            atomic_write_json(self.out / "data" / "config.json", config)
        logger.warning("toposig: removed the records of %r at %d step(s) in %s (%s)",
                       self.label, len(gone), self.out,
                       "overwrite=True" if step == 0 else
                       f"left by a training that went past step {step}, now resumed there")

    def _locked(self):
        """The folder's lock, waiting up to ``lock_wait_s`` for another process."""
        return exclusive(self.out, "results folder", wait_s=self.lock_wait_s)

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
        first = not self.results
        if not self._started:
            self.start(step if self._start_step is None else self._start_step, model)
        if final_step is not None:
            self.final_step = final_step
        t0 = time.perf_counter()
        try:
            with self._locked():
                self._claim()  # again after finish(), unless another monitor took it
                result = self._measure(model, step, stored_loss, first)
        except Exception as exc:
            if first:
                raise
            logger.error("toposig: the measurement at step %d failed (training goes on): "
                         "%s: %s", step, type(exc).__name__, exc)
            result = LiveResult(step, None, [{"error_type": type(exc).__name__,
                                              "error": str(exc)}])
        result.seconds = time.perf_counter() - t0
        self.measured.add(step)
        self.results.append(result)
        return result

    def finish(self) -> None:
        """Draw the figure once more with everything measured and release the label
        (:meth:`close`) for another training (call at the end)."""
        try:
            if self._entries and self._writer is not None:
                with self._locked():
                    self._draw(force=True)
        finally:
            self.close()

    @property
    def figure_path(self) -> Path:
        """This label's live figure: ``live/<label>/topology.png``."""
        return self.out / LIVE_DIR / self.label / FIGURE_NAME

    @property
    def signal_path(self) -> Path:
        """This label's signal history: ``live/<label>/signal.json``."""
        return self.out / LIVE_DIR / self.label / SIGNAL_NAME

    # -- internals ------------------------------------------------------------------

    def _hashes(self, dtype: str) -> dict[str, str]:
        i = self.inputs
        return family_hashes(set(self.families), i.settings, i.weight_settings,
                             i.landscape_settings, i.gradient_settings, i.texts,
                             i.probe_texts, dtype)

    def _plan(self, ckpt: Checkpoint, placement: Placement) -> RunPlan:
        i = self.inputs
        hashes = self._hashes(placement.dtype)
        return RunPlan(
            [ckpt], i.texts, i.settings, placement, i.settings.ph_backend, True,
            hashes.get(Family.EMBEDDING), self.texts_source, families=[self.families],
            weight_settings=i.weight_settings, weights_hash=hashes.get(Family.WEIGHTS),
            landscape_settings=i.landscape_settings, gradient_settings=i.gradient_settings,
            probe_texts=i.probe_texts, landscape_hash=hashes.get(Family.LANDSCAPE),
            gradients_hash=hashes.get(Family.GRADIENTS), command=self.command)

    def _measure(self, model, step: int, stored_loss: tuple[float | None, str | None],
                 first: bool) -> LiveResult:
        """One measurement, the folder's lock held (:meth:`measure`)."""
        placement = Placement.of_model(model, self.inputs.settings.dtype)
        ckpt = Checkpoint(model=self.model_name, label=self.label, step=step,
                          source="memory", location=IN_MEMORY)
        plan = self._plan(ckpt, placement)
        outcome = execute(plan, self.out, force=True, progress=False,
                          executor=InMemoryExecutor(model, self.tokenizer, self.inputs,
                                                    stored_loss),
                          extend=self.extend, refresh_first=first)
        label = plan.checkpoints[0].label  # as the study knows it
        self._entries = [e for e in outcome.records if e.get("model_label") == label
                         and e.get("step") is not None]
        entry = next((e for e in self._entries if e["step"] == step), None)
        failures = [f for f in outcome.failures if f.get("step") == step]
        try:  # the experimental signal and the figure never cost a measurement
            self._signal = self._compute_signal()
            self._write_signal()
            self._draw(force=False)
        except Exception as exc:  # noqa: BLE001
            logger.warning("toposig: the live signal or figure at step %d failed: %s: %s",
                           step, type(exc).__name__, exc)
        return LiveResult(step, entry, failures, self._scalars(entry), self._signal)

    def _series(self) -> tuple[list[int], list[float | None], dict[str, list]]:
        steps = [e["step"] for e in self._entries]
        losses = loss_series(self._entries)
        names = {k for e in self._entries for k in (e.get("features") or {})}
        features = {f: [(e.get("features") or {}).get(f) for e in self._entries]
                    for f in sorted(names)}
        return steps, losses, features

    def _compute_signal(self) -> online.Signal | None:
        if not self._entries:
            return None
        steps, losses, features = self._series()
        return online.stop_or_scale(steps, losses, features, self.final_step,
                                    phase_features=PHASE_FEATURES,
                                    forecast_features=PREDICTION_FEATURES)

    def _read_signal(self) -> list[dict]:
        """This label's ``signal.json``: the signal after each measurement (``[]`` when
        missing or not such a list; it is then written afresh)."""
        path = self.signal_path
        try:
            data = read_json(path) if path.is_file() else []
        except (OSError, ValueError):
            data = None
        if not (isinstance(data, list) and all(isinstance(h, dict) for h in data)):
            logger.warning("toposig: %s is not a list of signals; it is written afresh", path)
            return []
        return data

    def _write_signal(self) -> None:
        if self._signal is None:
            return
        self._history = [h for h in self._history if h.get("step") != self._signal.step]
        self._history.append(self._signal.to_dict())
        self._history.sort(key=lambda h: h["step"])
        atomic_write_json(self.signal_path, self._history)

    def _draw(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._drawn_at < self.figure_interval_s:
            return
        from toposig.report.live_figure import draw_live_figure

        try:
            draw_live_figure(self._entries, self.figure_path, loss_series(self._entries),
                             self._signal,
                             loss_name=LOSS_KINDS[loss_kind(self._entries)])
        except Exception as exc:  # noqa: BLE001 - a figure never stops training
            logger.warning("toposig: could not draw %s: %s", self.figure_path, exc)
        self._drawn_at = time.monotonic()

    def _scalars(self, entry: dict | None) -> dict[str, float]:
        out: dict[str, float] = {}
        if entry is not None:
            values = {**(entry.get("features") or {})}
            for key in ("perplexity", "loss"):
                if entry.get(key) is not None:
                    values[key] = entry[key]
            names = values if self.log_features == "all" else [
                f for f in self.log_features if f in values]
            for name in names:
                v = values[name]
                if isinstance(v, (int, float)) and math.isfinite(v):
                    out[PREFIX + name] = float(v)
        if self._signal is not None:
            out |= {SIGNAL_PREFIX + k: v for k, v in self._signal.scalars().items()}
        return out

    @property
    def entries(self) -> list[dict]:
        """The aggregate entries of this label measured so far (one per step)."""
        return list(self._entries)

    @property
    def signal(self) -> online.Signal | None:
        """The latest stop-or-scale signal (experimental)."""
        return self._signal

    @property
    def stop_reason(self) -> str | None:
        """:func:`stop_reason` of the latest signal: why its stop rule says stop, or
        ``None`` when it says continue or has no decision (experimental)."""
        return stop_reason(self._signal)
