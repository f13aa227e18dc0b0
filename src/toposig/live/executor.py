"""An executor for the pipeline's driver that measures a model already in memory.

:func:`toposig.run.pipeline.execute` hands its tasks to an executor; this one computes
each task's families on the live model (:func:`toposig.in_memory.measure_families`)
instead of loading a checkpoint, so a measurement taken during training is written,
resumed, aggregated and failed exactly as the offline pipeline does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toposig.in_memory import measure_families
from toposig.progress import tqdm
from toposig.run.executors import EmitResult, TaskDone
from toposig.run.tasks import Task

if TYPE_CHECKING:
    from toposig.run.plan import RunPlan


@dataclass
class InMemoryExecutor:
    """Runs every task on ``model`` as it is (each task's checkpoint names the step).

    Attributes:
        model, tokenizer: the live model and its tokenizer (the texts and settings are
            the plan's).
        stored_loss: the loss the trainer knows for this state and where it was found.
        progress: show a progress bar over each task's families (``tqdm``, as
            :func:`toposig.measure` does).
        restore_rngs: restore the global random number generators after measuring
            (false for a copy measured on another thread than the training's).
    """

    model: Any
    tokenizer: Any
    stored_loss: tuple[float | None, str | None] = (None, None)
    progress: bool = False
    restore_rngs: bool = True

    def run(self, tasks: Sequence[Task], plan: RunPlan, emit: EmitResult,
            done: TaskDone) -> None:
        for task in tasks:
            bar = tqdm(total=len(task.todo), unit="family", disable=not self.progress,
                       desc=f"measuring {task.ckpt.label} at step {task.ckpt.step}")

            def keep(family, result, task=task, bar=bar) -> None:
                emit(task, family, result)
                bar.set_postfix_str(str(family))
                bar.update(1)

            try:
                measure_families(self.model, self.tokenizer, task.ckpt, task.todo,
                                 plan.inputs, keep, stored_loss=self.stored_loss,
                                 restore_rngs=self.restore_rngs)
            finally:
                bar.close()
            done(task)
