"""The ``transformers`` Trainer callback: measure the model while it trains.

    from toposig.integrations import TopologyCallback
    trainer = Trainer(model=model, args=args, train_dataset=train)
    TopologyCallback(tokenizer=tokenizer, out="results/live").attach(trainer)
    trainer.train()

When to measure: at step 0, at every checkpoint the Trainer saves, and, with
``every_n_steps=K``, every K steps (``doubling=True``: also at 1, 2, 4, ... below K,
Pythia's schedule); ``at_evaluate=True`` adds every evaluation. A step that is due is
measured once the Trainer has finished that step's logging, evaluation and saving (at
the next of ``on_save``, ``on_step_begin``, ``on_epoch_end`` or ``on_train_end``), on the
weights as they are after the step, so the loss kept with the records is the one the
Trainer stores in that step's checkpoint (the last ``eval_loss``, else the last logged
training ``loss``), and the offline pipeline run on the saved checkpoint gives the same
record.

While training goes on (``background=True``; off by default, see
:mod:`toposig.live.background` for when it pays): a due step's weights are copied into a
twin of the model, which a worker thread measures while the Trainer trains on; the
records are the step's, and its scalars are logged when the measurement is done, under
the step measured and its epoch (``Trainer.log`` is called with ``state.global_step`` and
``state.epoch`` set to them for the call, so ``log_history``, TensorBoard and the other
loggers place them there). Before the Trainer saves a checkpoint, the measurement in
flight is waited for and logged, so the checkpoint's state names only steps whose
records are written and whose scalars its ``log_history`` holds; so are the last step and
the end of training, and, when the data loader forks workers, an epoch's start and an
evaluation. With ``stop_on_signal=True`` each measurement is waited for (the step
training stops at must not depend on how long a measurement took).

Logging: the scalars go through ``Trainer.log`` when the callback is attached to the
trainer (:meth:`TopologyCallback.attach`), so TensorBoard, W&B, MLflow and the rest
receive them like the loss; a callback passed in ``callbacks=[...]`` cannot reach the
trainer (``transformers`` does not hand it to callbacks), so it adds its scalars to
``state.log_history`` and the Python log only, and says so once.

Only the main process measures (``state.is_world_process_zero``).

Acting on the signal (experimental, off by default): with ``stop_on_signal=True``, a
measurement whose stop-or-scale signal says stop (the stop rule's ``stop: plateaued`` or
``stop: getting worse``, :func:`toposig.analysis.forecast.decide`) sets
``control.should_training_stop`` in the hook that measured, and the Trainer stops at its
next check: measured at a save, after that step; measured as the next step begins (the
usual case), after that step's first batch (so one more update without gradient
accumulation, none with it); the step and the reason are logged (a WARNING) and kept as
:attr:`TopologyCallback.stopped_at` and :attr:`TopologyCallback.stop_reason`. Only a
single-process training stops (several processes: a warning, and the signal is logged
but not acted on, since only the main process measures).

Resuming (``trainer.train(resume_from_checkpoint=...)``): the callback is a
``transformers`` stateful callback (``ExportableState``): each checkpoint's
``trainer_state.json`` keeps, under ``stateful_callbacks["TopologyCallback"]``, its
label, the steps measured, the step due but not yet measured when the checkpoint was
written, and the step and reason of a stop on the signal (:meth:`TopologyCallback.state`).
A training resumed from that checkpoint takes them back by itself (no
``restore_callback_states_from_checkpoint`` needed; the callback given to the new Trainer
keeps its tokenizer, texts, settings and ``attach``): it writes the same live series
(the label saved, unless ``label=`` names another), the records the abandoned
continuation left after the checkpoint are removed (:meth:`TopologyMonitor.start`), no
step up to the checkpoint is measured again, and a step that was due at the checkpoint
but whose measurement never got written (the training was killed in between) is
measured as training resumes, on the checkpoint's weights. From a checkpoint taken after
a stop on the signal, with ``stop_on_signal=True``, the training stops again after its
first step (the Trainer checks only after a step), saying so.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from toposig.files.names import UnsafeNameError, check_label, escape
from toposig.in_memory import check_families
from toposig.live.monitor import LiveResult, Schedule, TopologyMonitor, stop_reason
from toposig.sources.checkpoint_files import trainer_state_dict_loss

logger = logging.getLogger(__name__)


def default_label(output_dir: str | Path) -> str:
    """The name of the Trainer's ``output_dir`` as a plain file name (``model`` when
    nothing of it can be one)."""
    try:
        return check_label(escape(Path(output_dir).name).lstrip("-_"), "label")
    except UnsafeNameError:
        return "model"


def plain(value) -> bool:
    """Whether ``value`` is a plain JSON option: ``None``, a bool, a number, a string, or
    a list or tuple of strings."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


class TopologyCallback(TrainerCallback, ExportableState):
    """A :class:`transformers.TrainerCallback` that measures the signature families.

    Args:
        tokenizer: the model's tokenizer (default: the Trainer's ``processing_class``).
        texts: the analysed texts (default: the pipeline's WikiText-2 rows).
        out: the results folder.
        every_n_steps: also measure every this many steps (``None``: at saves only).
        doubling: with ``every_n_steps``, also at the powers of two below it.
        at_save: measure at every save.
        at_evaluate: measure at every evaluation.
        families: the signature families (default: embedding and weights).
        label: the model's name in the records (default: the name of the Trainer's
            ``output_dir``, made a plain file name; a resumed training: the label its
            checkpoint saved).
        stop_on_signal: stop training when a measurement's experimental stop-or-scale
            signal says stop (see the module; default off: the signal is only logged).
        **monitor: further :class:`~toposig.live.monitor.TopologyMonitor` options
            (``layers``, ``settings``, ``log_features``, ``overwrite``, ...).
    """

    def __init__(self, tokenizer=None, texts: Sequence[str] | None = None,
                 out: str | Path = "results/live", every_n_steps: int | None = None, *,
                 doubling: bool = False, at_save: bool = True, at_evaluate: bool = False,
                 families: Sequence[str] | None = None, label: str | None = None,
                 stop_on_signal: bool = False, **monitor):
        self.schedule = Schedule(every_n_steps, doubling, at_save, at_evaluate)
        self.options = {"texts": texts, "families": families, "label": label, **monitor}
        self.tokenizer = tokenizer
        self.out = Path(out)
        self.monitor: TopologyMonitor | None = None
        self.trainer = None
        self._pending: int | None = None
        self._epochs: dict[int, float | None] = {}  # step submitted -> the epoch then
        self._warned = False
        self.stop_on_signal = stop_on_signal
        self.stopped_at: int | None = None  # the step whose signal stopped training
        self.stop_reason: str | None = None  # and why (the stop rule's words)
        # what the checkpoint a training resumed from saved (state()'s attributes)
        self.checkpoint_state: dict | None = None
        self._can_stop = True  # False in a training of several processes
        if families is not None:  # bad options fail here, not when training starts
            check_families(families)
        if label is not None:
            check_label(label, "label")

    def attach(self, trainer) -> TopologyCallback:
        """Add this callback to ``trainer`` and log through ``trainer.log``."""
        self.trainer = trainer
        if self not in trainer.callback_handler.callbacks:  # already in callbacks=[...]
            trainer.add_callback(self)
        return self

    # -- resuming -------------------------------------------------------------------

    def state(self) -> dict:
        """What the Trainer saves of this callback in each checkpoint's
        ``trainer_state.json`` (``stateful_callbacks``; ``transformers``'
        ``ExportableState``), and a resumed training takes back.

        ``args`` are the callback's plain options (the results folder, the schedule, the
        families, the label, ``stop_on_signal`` and the monitor's options that are plain
        values; not the tokenizer, the texts or settings objects), so that a callback
        ``transformers`` rebuilds from them (``restore_callback_states_from_checkpoint``)
        writes the same series. ``attributes["checkpoint_state"]`` is the live state: the
        ``label``, the steps ``measured``, the step ``pending`` (due, and measured just
        after the checkpoint is written), and the step and reason of a stop on the
        signal (``stopped_at``, ``stop_reason``; ``None`` when none).
        """
        if self.monitor is not None:
            self.monitor.wait()  # the steps named measured have their records written
        label = self.monitor.label if self.monitor is not None else self.options["label"]
        s = self.schedule
        args: dict[str, object] = {
            "out": str(self.out), "every_n_steps": s.every_n_steps, "doubling": s.doubling,
            "at_save": s.at_save, "at_evaluate": s.at_evaluate,
            "stop_on_signal": self.stop_on_signal}
        args |= {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()
                 if k not in ("texts", "label") and plain(v)}
        args["label"] = label
        measured = sorted(self.monitor.measured) if self.monitor is not None else []
        return {"args": args, "attributes": {"checkpoint_state": {
            "label": label, "measured": measured, "pending": self._pending,
            "stopped_at": self.stopped_at, "stop_reason": self.stop_reason}}}

    def _saved_state(self, args, state) -> dict | None:
        """This callback's live state in the checkpoint the training resumes from
        (``None`` at step 0, or when the checkpoint holds none for this label)."""
        if state.global_step == 0:
            return None
        saved = (state.stateful_callbacks or {}).get(type(self).__name__)
        entries = saved if isinstance(saved, list) else [saved]
        found = [e.get("attributes", {}).get("checkpoint_state") for e in entries
                 if isinstance(e, dict)]
        found = [f for f in found if isinstance(f, dict)]
        label = self.options["label"] or (self.monitor.label if self.monitor else None)
        if label is None and len({f.get("label") for f in found}) > 1:
            label = default_label(args.output_dir)  # several callbacks: this one's
        found = [f for f in found if label is None or f.get("label") == label]
        return found[-1] if found else None  # the latest, should the Trainer append

    # -- events ---------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, processing_class=None,
                       **kwargs):
        if self.monitor is None and self.checkpoint_state is not None:
            warnings.warn(
                "restore_callback_states_from_checkpoint=True: the Trainer replaced the "
                "TopologyCallback given to it by a copy rebuilt from the checkpoint's plain "
                f"options (writing to {str(self.out)!r}, with no tokenizer, texts or "
                "settings objects, not attached to the Trainer); TopologyCallback takes "
                "its state back by itself: leave that option off", stacklevel=2)
        saved = self._saved_state(args, state)
        # the Trainer updates this entry at each save, and fails where it is missing (a
        # checkpoint written without this callback)
        state.stateful_callbacks.setdefault(type(self).__name__, self.state())
        self.checkpoint_state = saved
        self._pending = None
        step = state.global_step
        if saved is not None:
            self.stopped_at, self.stop_reason = saved.get("stopped_at"), saved.get("stop_reason")
        elif self.stopped_at is not None and step < self.stopped_at:
            self.stopped_at = self.stop_reason = None  # resumed from before the stop
        if not state.is_world_process_zero:
            return
        if self.monitor is None or step > 0:  # a resumed training: a monitor resumed at step
            self._make_monitor(self.tokenizer or processing_class, args.output_dir, saved)
        if self.trainer is None and not self._warned:
            self._warned = True
            warnings.warn(
                "TopologyCallback is not attached to the Trainer, so its scalars go to "
                "state.log_history and the results folder but not to TensorBoard, W&B or "
                "other loggers; use TopologyCallback(...).attach(trainer)", stacklevel=2)
        if self.stop_on_signal and args.world_size > 1:
            self._can_stop = False
            warnings.warn(
                "TopologyCallback(stop_on_signal=True) acts only in a single-process "
                f"training; with {args.world_size} processes only the main one measures, "
                "so the signal is logged but training is not stopped", stacklevel=2)
        if self.stop_on_signal and self._can_stop and self.stopped_at is not None:
            logger.warning("toposig: the training resumed at step %d stops after its first "
                           "step: the experimental stop-or-scale signal stopped it at step "
                           "%d (stop_on_signal=True; pass False to go on): %s", step,
                           self.stopped_at, self.stop_reason)
            control.should_training_stop = True
        self.monitor.start(step, model)
        if saved is not None:
            self._take_back(args, state, model, control, saved)
        if step == 0 and self.schedule.initial:
            self._measure(args, state, model, control)
        return control

    def _take_back(self, args, state, model, control, saved: dict) -> None:
        """Resumed at a checkpoint's step: the steps measured up to it are measured, and
        the step due at the checkpoint is measured now unless its records were written
        (the training was killed between the checkpoint and the measurement)."""
        step, monitor = state.global_step, self.monitor
        assert monitor is not None  # made as the training began
        measured = {int(s) for s in saved.get("measured") or ()}
        monitor.measured = {s for s in measured if s <= step}
        if saved.get("pending") == step and step not in monitor.measured:
            if step in monitor.recorded_steps():
                monitor.measured.add(step)
            else:
                self._measure(args, state, model, control)

    def on_step_end(self, args, state, control, **kwargs):
        if (self.schedule.due(state.global_step)
                or (self.schedule.at_save and control.should_save)
                or (self.schedule.at_evaluate and control.should_evaluate)):
            self._mark(state)
        self._settle(args, state, control)

    def on_evaluate(self, args, state, control, **kwargs):
        if self.schedule.at_evaluate:  # evaluations at an epoch's end pass no on_step_end
            self._mark(state)

    def on_save(self, args, state, control, model=None, **kwargs):
        if self.schedule.at_save:  # so do saves at an epoch's end (save_strategy="epoch")
            self._mark(state)
        self._flush(args, state, model, control)
        return control

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self._flush(args, state, model, control)
        return control

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self.monitor is not None and args.dataloader_num_workers > 0:
            # the data loader forks its workers: no measuring thread mid-work
            self._collect(state, control, wait=True)
        return control

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        self._flush(args, state, model, control)
        self._settle(args, state, control)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._flush(args, state, model, None)  # training is over: nothing to stop
        if self.monitor is not None and state.is_world_process_zero:
            try:
                self._collect(state, None, wait=True)
            finally:
                self.monitor.finish()

    # -- internals ------------------------------------------------------------------

    def _make_monitor(self, tokenizer, output_dir: str, saved: dict | None) -> None:
        """A monitor for this training: labelled by ``label=``, else the label the
        checkpoint resumed from saved, else the earlier monitor's, else the name of the
        ``output_dir`` (known as training begins)."""
        if tokenizer is None:
            raise ValueError("TopologyCallback needs the tokenizer (tokenizer=...), or a "
                             "Trainer with a processing_class")
        label = (self.options["label"] or (saved or {}).get("label")
                 or (self.monitor.label if self.monitor is not None else None)
                 or default_label(output_dir))
        if self.monitor is not None:
            self.monitor.close()  # an earlier training's (finished, or not ended)
        # no progress bar of its own: the Trainer's console gets one line per measurement
        opts = {"progress": False, **{k: v for k, v in self.options.items() if k != "label"}}
        self.monitor = TopologyMonitor(
            tokenizer, self.out, schedule=self.schedule, label=label,
            command="toposig.integrations.TopologyCallback (transformers Trainer)", **opts)

    def _mark(self, state) -> None:
        """The current step is due: measure it at the next flush."""
        if self.monitor is not None and state.global_step not in self.monitor.measured:
            self._pending = state.global_step

    def _settle(self, args, state, control) -> None:
        """Before the Trainer saves a checkpoint, wait for the measurement in flight and
        log it, so that the checkpoint's state and ``log_history`` hold every step named
        measured; before it evaluates with a data loader that forks workers, wait too."""
        if self.monitor is None or not state.is_world_process_zero:
            return
        forks = control.should_evaluate and args.dataloader_num_workers > 0
        if control.should_save or forks:
            self._collect(state, control, wait=True)

    def _flush(self, args, state, model, control) -> None:
        """Measure the step due, if any, and take up what the measurements finished."""
        if self.monitor is None or not state.is_world_process_zero:
            return
        if self._pending is not None and model is not None:
            self._pending = None
            self._measure(args, state, model, control)
        else:
            self._collect(state, control)

    def _measure(self, args, state, model, control) -> None:
        """Measure the current step (in the background where the monitor can), then
        take up what the measurements finished (:meth:`_collect`)."""
        stored = trainer_state_dict_loss({"log_history": state.log_history})
        self._epochs[state.global_step] = state.epoch
        self.monitor.submit(model, state.global_step, stored_loss=stored,
                            final_step=state.max_steps or None)
        # acting on the signal waits for it: the step training stops at must not depend
        # on how long a measurement took; so does the last step (its line in the console)
        last = bool(state.max_steps) and state.global_step >= state.max_steps
        self._collect(state, control, wait=self.stop_on_signal or last)

    def _collect(self, state, control, wait: bool = False) -> None:
        """Log the scalars of each measurement done since the last call (with ``wait``,
        after the one in flight), and with ``stop_on_signal`` set
        ``control.should_training_stop`` when its signal says stop (``control``
        ``None``: training is over, nothing is stopped)."""
        if self.monitor is None:
            return
        for result in self.monitor.collect(wait=wait):
            epoch = self._epochs.pop(result.step, state.epoch)
            if result.scalars:
                self._log(state, result.scalars, result.step, epoch)
            self._act(result, control)

    def _act(self, result: LiveResult, control) -> None:
        """Stop training (once) when asked to and ``result``'s signal says stop."""
        if (not self.stop_on_signal or not self._can_stop or control is None
                or self.stopped_at is not None):
            return
        reason = stop_reason(result.signal)
        if reason is None:
            return
        self.stopped_at, self.stop_reason = result.step, reason
        control.should_training_stop = True
        logger.warning("toposig: stopping training at step %d on the experimental "
                       "stop-or-scale signal (stop_on_signal=True): %s", result.step, reason)

    def _log(self, state, scalars: dict[str, float], step: int,
             epoch: float | None) -> None:
        """Log ``scalars`` under the ``step`` they were measured at, and that step's
        ``epoch`` (a measurement made in the background ends some steps later)."""
        if self.trainer is not None:
            now = state.global_step, state.epoch
            # Trainer.log's on_log clears control.should_log: called from a step's end it
            # would cancel the Trainer's own logging of that step's loss
            should_log = self.trainer.control.should_log
            state.global_step, state.epoch = step, epoch
            try:
                self.trainer.log(dict(scalars))
            finally:
                state.global_step, state.epoch = now
                self.trainer.control.should_log = should_log
        else:
            state.log_history.append({**scalars, "step": step})
            logger.info("toposig step %d: %s", step, scalars)
