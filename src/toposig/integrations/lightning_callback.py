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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import lightning.pytorch as pl

from toposig.live.monitor import LiveResult, Schedule, TopologyMonitor
from toposig.records import DEFAULT_FAMILIES

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
        **monitor: further :class:`~toposig.live.monitor.TopologyMonitor` options.
    """

    def __init__(self, tokenizer, texts: Sequence[str] | None = None,
                 out: str | Path = "results/live", every_n_steps: int = 100, *,
                 doubling: bool = False, families: Sequence[str] = DEFAULT_FAMILIES,
                 label: str = "model", model: Callable | None = None, **monitor):
        self.monitor = TopologyMonitor(
            tokenizer, out, texts=texts, families=families, label=label,
            schedule=Schedule(every_n_steps, doubling, at_save=False),
            command="toposig.integrations.LightningTopologyCallback", **monitor)
        self.model_of = model

    def _model(self, pl_module):
        if self.model_of is not None:
            return self.model_of(pl_module)
        return getattr(pl_module, "model", pl_module)

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        self.monitor.start(trainer.global_step, self._model(pl_module))
        if trainer.global_step == 0 and self.monitor.schedule.initial:
            self._measure(trainer, pl_module, None)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.is_global_zero and self.monitor.due(trainer.global_step):
            self._measure(trainer, pl_module, outputs)

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
