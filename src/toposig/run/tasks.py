"""One checkpoint's work, the unit every executor runs.

A :class:`Task` is a checkpoint and the signature families it still needs.
:func:`load_once` loads the checkpoint once and hands each family's result (or the
exception it raised) to a callback as soon as it is done; :func:`run_task` does the same
for a Hub checkpoint that has to be downloaded first and returns the results, in a form
that travels between processes (a :class:`TaskFailure` in place of an exception).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toposig.model.embedding import analyse_checkpoint
from toposig.model.loss_probes import analyse_gradients, analyse_landscape
from toposig.model.matrices import (
    copies_of_left_out,
    count_parameters,
    model_matrices,
    state_dict_matrices,
    state_dict_parameters,
)
from toposig.model.weight_stage import analyse_weights
from toposig.records import PROBE_FAMILIES, CheckpointOutput, Family
from toposig.sources.checkpoint_files import load_checkpoint_file, trainer_state_loss
from toposig.sources.checkpoints import Checkpoint, load_model, load_tokenizer
from toposig.sources.fetch import Download, evict_snapshot, hub_snapshot

if TYPE_CHECKING:
    from toposig.run.plan import RunPlan

logger = logging.getLogger(__name__)

Result = CheckpointOutput | BaseException
Emit = Callable[[Family, Result], None]


@dataclass(frozen=True)
class Task:
    """Checkpoint ``index`` of the plan and the families it still needs."""

    index: int
    ckpt: Checkpoint
    todo: tuple[str, ...]


class TaskFailure(Exception):
    """A failure described in plain values, so it pickles across processes and machines.

    Attributes:
        error_type: the original exception's class name.
        message: its message.
        traceback_text: the last frames of its traceback.
    """

    def __init__(self, error_type: str, message: str, traceback_text: str = ""):
        super().__init__(message)
        self.error_type, self.message, self.traceback_text = error_type, message, traceback_text

    def __reduce__(self):
        return TaskFailure, (self.error_type, self.message, self.traceback_text)

    @classmethod
    def from_exception(cls, exc: BaseException) -> TaskFailure:
        if isinstance(exc, TaskFailure):
            return exc
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return cls(type(exc).__name__, str(exc).strip() or type(exc).__name__,
                   "".join(tb[-3:]))




def load_once(ckpt: Checkpoint, families: tuple[Family, ...], plan: RunPlan, emit: Emit) -> None:
    """Load a checkpoint once and compute each family, handing each result to ``emit``
    as soon as it is done (a family that raised gets its exception).

    Whenever the weights, the landscape or the gradients are wanted, the model is loaded
    in float32 (on the CPU first when the weights are analysed, so that the stored values
    are what is analysed); the embedding stage, which runs last, then moves it to the
    run's device and dtype.
    """
    import torch

    t0 = time.perf_counter()
    want_w = Family.WEIGHTS in families
    probes = [f for f in PROBE_FAMILIES if f in families]
    fp32 = want_w or bool(probes)
    try:
        ws = plan.weight_settings
        if ckpt.source == "file":
            loaded = load_checkpoint_file(ckpt.location)
            model, loss, loss_key = None, loaded.loss, loaded.loss_key
            copies = copies_of_left_out(loaded.tensors)  # one pass, used twice
            matrices = state_dict_matrices(loaded.tensors, ws.include, ws.exclude, copies,
                                           config=loaded.config,
                                           config_source=loaded.config_source or "config")
            available = [n for n, t in loaded.tensors.items() if t.dim() == 2]
            n_params = state_dict_parameters(loaded.tensors, copies)
            del loaded
        else:
            model = load_model(
                ckpt, torch.float32 if fp32 else plan.placement.weight_dtype,
                "cpu" if want_w else plan.device, local_files_only=plan.local_files_only,
                trust_remote_code=plan.settings.trust_remote_code)
            matrices = model_matrices(model, ws.include, ws.exclude) if want_w else {}
            available = [n for n, p in model.named_parameters() if p.dim() == 2]
            n_params = count_parameters(model.parameters())
            loss, loss_key = (trainer_state_loss(ckpt.location) if ckpt.source == "local"
                              else (None, None))
    except Exception as exc:  # noqa: BLE001 - recorded per family by the caller
        for f in families:
            emit(f, exc)
        return
    load_s = time.perf_counter() - t0
    if want_w:
        try:
            result = analyse_weights(
                ckpt, matrices, plan.weight_settings, loss=loss, loss_key=loss_key,
                num_parameters=n_params, load_s=load_s,
                device=plan.placement.cuda_device,
                available=available)
        except Exception as exc:  # noqa: BLE001
            result = exc
        del matrices
        emit(Family.WEIGHTS, result)
    if not (probes or Family.EMBEDDING in families):
        return
    t1 = time.perf_counter()
    try:  # one tokenizer for every family that runs the model
        tokenizer = load_tokenizer(ckpt, plan.settings.tokenizer,
                                   local_files_only=plan.local_files_only,
                                   trust_remote_code=plan.settings.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - recorded for the families that need it
        for f in families:
            if f != Family.WEIGHTS:
                emit(f, exc)
        return
    load_s += time.perf_counter() - t1
    if probes:
        _probe_families(ckpt, probes, plan, model, tokenizer, (loss, loss_key), load_s, emit)
    if Family.EMBEDDING in families:
        try:
            t2 = time.perf_counter()
            if fp32:
                model = model.to(device=plan.device, dtype=plan.placement.weight_dtype)
            result = analyse_checkpoint(
                ckpt, plan.texts, plan.settings, placement=plan.placement,
                local_files_only=plan.local_files_only, model=model, tokenizer=tokenizer,
                load_s=load_s + time.perf_counter() - t2)
        except Exception as exc:  # noqa: BLE001
            result = exc
        emit(Family.EMBEDDING, result)


def _probe_families(ckpt: Checkpoint, probes: list[Family], plan: RunPlan, model, tokenizer,
                    stored_loss: tuple[float | None, str | None], load_s: float,
                    emit: Emit) -> None:
    """The landscape and gradient families on the float32 model (moved to the device);
    each record carries the checkpoint's stored loss and where it was found."""
    try:
        model = model.to(plan.device)
    except Exception as exc:  # noqa: BLE001
        for f in probes:
            emit(f, exc)
        return
    stages = {Family.LANDSCAPE: (analyse_landscape, plan.landscape_settings),
              Family.GRADIENTS: (analyse_gradients, plan.gradient_settings)}
    loss, loss_key = stored_loss
    for family in probes:
        stage, settings = stages[family]
        try:
            result = stage(ckpt, model, tokenizer, plan.probe_texts, settings,
                           device=plan.device, load_s=load_s)
            result.record |= {"checkpoint_loss": loss, "checkpoint_loss_key": loss_key}
        except Exception as exc:  # noqa: BLE001
            result = exc
        emit(family, result)


def run_task(plan: RunPlan, ckpt: Checkpoint, todo: tuple[str, ...], *, evict: bool = False,
             download: Download | None = None, num_threads: int | None = None
             ) -> dict[str, CheckpointOutput | TaskFailure]:
    """Fetch (Hub checkpoints), load once, compute ``todo``; one result per family.

    What a remote worker runs. With ``evict``, files this call downloaded are deleted
    once the results are computed. ``num_threads`` caps torch's CPU threads (a worker's
    share of a node's cores).
    """
    if num_threads:
        import torch

        torch.set_num_threads(num_threads)
    fetched = None
    if ckpt.source == "hub":
        try:
            fetched = hub_snapshot(ckpt, local_files_only=plan.local_files_only,
                                   download=download)
        except Exception as exc:  # noqa: BLE001
            return {f: TaskFailure.from_exception(exc) for f in todo}
        ckpt = dataclasses.replace(ckpt, local_path=str(fetched.path))
    results: dict[str, CheckpointOutput | TaskFailure] = {}

    def keep(family: Family, result: Result) -> None:
        results[family] = (TaskFailure.from_exception(result)
                           if isinstance(result, BaseException) else result)

    load_once(ckpt, todo, plan, keep)
    if evict and fetched is not None and fetched.downloaded:
        try:
            evict_snapshot(fetched.path)
        except Exception as exc:  # noqa: BLE001 - a leftover download is not a failure
            logger.warning("could not evict %s: %s", fetched.path, exc)
    return results
