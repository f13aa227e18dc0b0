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
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback

from toposig.files.names import UnsafeNameError, check_label, escape
from toposig.in_memory import check_families
from toposig.live.monitor import LiveResult, Schedule, TopologyMonitor, stop_reason
from toposig.records import DEFAULT_FAMILIES
from toposig.sources.checkpoint_files import trainer_state_dict_loss

logger = logging.getLogger(__name__)


def default_label(output_dir: str | Path) -> str:
    """The name of the Trainer's ``output_dir`` as a plain file name (``model`` when
    nothing of it can be one)."""
    try:
        return check_label(escape(Path(output_dir).name).lstrip("-_"), "label")
    except UnsafeNameError:
        return "model"


class TopologyCallback(TrainerCallback):
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
            ``output_dir``, made a plain file name).
        stop_on_signal: stop training when a measurement's experimental stop-or-scale
            signal says stop (see the module; default off: the signal is only logged).
        **monitor: further :class:`~toposig.live.monitor.TopologyMonitor` options
            (``layers``, ``settings``, ``log_features``, ``overwrite``, ...).
    """

    def __init__(self, tokenizer=None, texts: Sequence[str] | None = None,
                 out: str | Path = "results/live", every_n_steps: int | None = None, *,
                 doubling: bool = False, at_save: bool = True, at_evaluate: bool = False,
                 families: Sequence[str] = DEFAULT_FAMILIES, label: str | None = None,
                 stop_on_signal: bool = False, **monitor):
        self.schedule = Schedule(every_n_steps, doubling, at_save, at_evaluate)
        self.options = {"texts": texts, "families": families, "label": label, **monitor}
        self.tokenizer = tokenizer
        self.out = Path(out)
        self.monitor: TopologyMonitor | None = None
        self.trainer = None
        self._pending: int | None = None
        self._warned = False
        self.stop_on_signal = stop_on_signal
        self.stopped_at: int | None = None  # the step whose signal stopped training
        self.stop_reason: str | None = None  # and why (the stop rule's words)
        self._can_stop = True  # False in a training of several processes
        check_families(families)  # bad options fail here, not when training starts
        if label is not None:
            check_label(label, "label")

    def attach(self, trainer) -> TopologyCallback:
        """Add this callback to ``trainer`` and log through ``trainer.log``."""
        self.trainer = trainer
        if self not in trainer.callback_handler.callbacks:  # already in callbacks=[...]
            trainer.add_callback(self)
        return self

    # -- events ---------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, processing_class=None,
                       **kwargs):
        if not state.is_world_process_zero:
            return
        if self.monitor is None:
            self._make_monitor(self.tokenizer or processing_class,
                               self.options["label"] or default_label(args.output_dir))
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
        self.monitor.start(state.global_step, model)
        if state.global_step == 0 and self.schedule.initial:
            self._measure(args, state, model, control)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if (self.schedule.due(state.global_step)
                or (self.schedule.at_save and control.should_save)
                or (self.schedule.at_evaluate and control.should_evaluate)):
            self._mark(state)

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

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        self._flush(args, state, model, control)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._flush(args, state, model, None)  # training is over: nothing to stop
        if self.monitor is not None and state.is_world_process_zero:
            self.monitor.finish()

    # -- internals ------------------------------------------------------------------

    def _make_monitor(self, tokenizer, label: str) -> None:
        if tokenizer is None:
            raise ValueError("TopologyCallback needs the tokenizer (tokenizer=...), or a "
                             "Trainer with a processing_class")
        opts = {k: v for k, v in self.options.items() if k != "label"}
        self.monitor = TopologyMonitor(
            tokenizer, self.out, schedule=self.schedule, label=label,
            command="toposig.integrations.TopologyCallback (transformers Trainer)", **opts)

    def _mark(self, state) -> None:
        """The current step is due: measure it at the next flush."""
        if self.monitor is not None and state.global_step not in self.monitor.measured:
            self._pending = state.global_step

    def _flush(self, args, state, model, control) -> None:
        if self._pending is None or model is None or not state.is_world_process_zero:
            return
        self._pending = None
        self._measure(args, state, model, control)

    def _measure(self, args, state, model, control) -> LiveResult:
        """Measure now, log the scalars, and with ``stop_on_signal`` set
        ``control.should_training_stop`` when the signal says stop (``control`` ``None``:
        training is over, nothing is stopped)."""
        stored = trainer_state_dict_loss({"log_history": state.log_history})
        result = self.monitor.measure(model, state.global_step, stored_loss=stored,
                                      final_step=state.max_steps or None)
        if result.scalars:
            self._log(state, result.scalars)
        self._act(result, control)
        return result

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

    def _log(self, state, scalars: dict[str, float]) -> None:
        if self.trainer is not None:
            self.trainer.log(dict(scalars))
        else:
            state.log_history.append({**scalars, "step": state.global_step})
            logger.info("toposig step %d: %s", state.global_step, scalars)
