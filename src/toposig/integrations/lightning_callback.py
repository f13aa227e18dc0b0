"""The PyTorch Lightning callback: measure the model while it trains.

Lightning is an optional extra (``pip install lightning``); this module imports it, and
nothing else in toposig does.

    from toposig.integrations import LightningTopologyCallback
    trainer = L.Trainer(max_steps=1000, callbacks=[
        LightningTopologyCallback(tokenizer, out="results/live", every_n_steps=100)])

The measured model is ``pl_module.model`` when the LightningModule wraps a
``transformers`` model there (the usual pattern), else ``pl_module`` itself, or what
``model=`` returns for the module. Measurements are taken at step 0 (``on_train_start``)
and after each optimizer step that is due (``on_train_batch_end``), on the main process;
the scalars go to every logger of the trainer (``logger.log_metrics``: TensorBoard,
CSV, W&B, MLflow), at the step they were measured.

Acting on the signal (experimental, off by default): with ``stop_on_signal=True``, a
measurement whose stop-or-scale signal says stop (the stop rule's ``stop: plateaued`` or
``stop: getting worse``, :func:`toposig.analysis.forecast.decide`) sets
``trainer.should_stop``, so the fit ends after the step measured (unless ``min_steps`` or
``min_epochs`` are not reached yet: Lightning's rule); the step and the reason are logged
(a WARNING) and kept as :attr:`LightningTopologyCallback.stopped_at` and
:attr:`LightningTopologyCallback.stop_reason`. With several processes the main one's
decision is shared with the others (``strategy.reduce_boolean_decision``) at each step
due, so every process stops together.

Resuming: the callback's ``state_dict`` (saved in Lightning's checkpoints, under a key
naming the label) keeps the steps measured, the planned last step and the stop. A fit
resumed from a checkpoint taken at or after the stop, with ``stop_on_signal=True``, stops
again at once (saying so); one resumed from before the stop forgets it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import lightning.pytorch as pl

from toposig.live.monitor import LiveResult, Schedule, TopologyMonitor, stop_reason

logger = logging.getLogger(__name__)

# Metrics a LightningModule commonly logs for its loss, most trusted first.
LOSS_METRICS = ("val_loss", "eval_loss", "train_loss", "loss")


class LightningTopologyCallback(pl.Callback):
    """A Lightning :class:`~lightning.pytorch.callbacks.Callback` measuring the
    signature families (options as :class:`~toposig.integrations.TopologyCallback`).

    Args:
        tokenizer: the model's tokenizer.
        texts: the analysed texts (default: the pipeline's WikiText-2 rows).
        out: the results folder.
        every_n_steps: measure every this many optimizer steps.
        doubling: also at the powers of two below ``every_n_steps``.
        families: the signature families (default: embedding and weights).
        label: the model's name in the records.
        model: ``pl_module -> the transformers model`` (default: ``pl_module.model``
            when it exists, else ``pl_module``).
        stop_on_signal: stop training when a measurement's experimental stop-or-scale
            signal says stop (see the module; default off: the signal is only logged).
        **monitor: further :class:`~toposig.live.monitor.TopologyMonitor` options.
    """

    def __init__(self, tokenizer, texts: Sequence[str] | None = None,
                 out: str | Path = "results/live", every_n_steps: int = 100, *,
                 doubling: bool = False, families: Sequence[str] | None = None,
                 label: str = "model", model: Callable | None = None,
                 stop_on_signal: bool = False, **monitor):
        if monitor.get("background"):
            raise ValueError("background=True is taken by the transformers Trainer callback "
                             "only; the Lightning callback measures with the training "
                             "waiting")
        self.monitor = TopologyMonitor(  # no progress bar of its own, as the Trainer's
            tokenizer, out, texts=texts, families=families, label=label,
            schedule=Schedule(every_n_steps, doubling, at_save=False),
            command="toposig.integrations.LightningTopologyCallback",
            **{"progress": False, **monitor})
        self.model_of = model
        self.stop_on_signal = stop_on_signal
        self.stopped_at: int | None = None  # the step whose signal stopped training
        self.stop_reason: str | None = None  # and why (the stop rule's words)

    @property
    def state_key(self) -> str:
        """The key of this callback's state in a checkpoint (one per label)."""
        return self._generate_state_key(label=self.monitor.label)

    def state_dict(self) -> dict:
        """What a resumed fit needs: the steps measured, the planned last step, and the
        step and reason of a stop on the signal (``None`` when none)."""
        return {"measured": sorted(self.monitor.measured),
                "final_step": self.monitor.final_step,
                "stopped_at": self.stopped_at, "stop_reason": self.stop_reason}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take back :meth:`state_dict` (Lightning calls it when a fit resumes from a
        checkpoint, before ``on_train_start``)."""
        self.monitor.measured = {int(s) for s in state_dict.get("measured", ())}
        if state_dict.get("final_step") is not None:
            self.monitor.final_step = int(state_dict["final_step"])
        self.stopped_at = state_dict.get("stopped_at")
        self.stop_reason = state_dict.get("stop_reason")

    def _model(self, pl_module):
        if self.model_of is not None:
            return self.model_of(pl_module)
        return getattr(pl_module, "model", pl_module)

    def on_train_start(self, trainer, pl_module) -> None:
        step = trainer.global_step
        if self.stopped_at is not None and step < self.stopped_at:
            self.stopped_at = self.stop_reason = None  # resumed from before the stop
        if self.stop_on_signal and self.stopped_at is not None:
            if trainer.is_global_zero:
                logger.warning("toposig: the fit resumed at step %d stops at once: the "
                               "experimental stop-or-scale signal stopped it at step %d "
                               "(stop_on_signal=True; pass False to go on): %s", step,
                               self.stopped_at, self.stop_reason)
            trainer.should_stop = True
        result = None
        if trainer.is_global_zero:
            self.monitor.start(step, self._model(pl_module))
            if step == 0 and self.monitor.schedule.initial:
                result = self._measure(trainer, pl_module, None)
        if step == 0 and self.monitor.schedule.initial:
            self._act(trainer, result)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        result = None
        if trainer.is_global_zero and self.monitor.due(step):
            result = self._measure(trainer, pl_module, outputs)
        if self.monitor.schedule.due(step):  # every process: the same steps
            self._act(trainer, result)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            self.monitor.finish()

    def _measure(self, trainer, pl_module, outputs) -> LiveResult:
        final = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 \
            else trainer.estimated_stepping_batches  # max_epochs: the planned steps
        final = final if isinstance(final, int) else None  # inf: not known
        result = self.monitor.measure(self._model(pl_module), trainer.global_step,
                                      stored_loss=stored_loss(trainer, outputs),
                                      final_step=final)
        if result.scalars:
            for lg in trainer.loggers:
                lg.log_metrics(dict(result.scalars), step=trainer.global_step)
        return result

    def _act(self, trainer, result: LiveResult | None) -> None:
        """With ``stop_on_signal``, stop the fit (once) when the main process's
        ``result`` says stop; every process calls this at the same steps."""
        if not self.stop_on_signal or self.stopped_at is not None:
            return
        reason = stop_reason(result.signal) if result is not None else None
        if trainer.world_size > 1:  # only the main process measured
            if not trainer.strategy.reduce_boolean_decision(reason is not None, all=False):
                return
        elif reason is None:
            return
        self.stopped_at = trainer.global_step
        self.stop_reason = reason  # None on the other processes
        trainer.should_stop = True
        if trainer.is_global_zero:
            logger.warning("toposig: stopping training at step %d on the experimental "
                           "stop-or-scale signal (stop_on_signal=True): %s",
                           trainer.global_step, reason)


def stored_loss(trainer, outputs) -> tuple[float | None, str | None]:
    """The loss Lightning knows now: the first of :data:`LOSS_METRICS` among the
    trainer's ``callback_metrics``, else the batch's training loss."""
    for key in LOSS_METRICS:
        value = _scalar(trainer.callback_metrics.get(key))
        if value is not None:
            return value, f"callback_metrics.{key}"
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    value = _scalar(loss)
    return (value, "train_batch_loss") if value is not None else (None, None)


def _scalar(value) -> float | None:
    try:
        x = float(value.detach().item() if hasattr(value, "detach") else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return x if math.isfinite(x) else None
