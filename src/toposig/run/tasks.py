"""One checkpoint's work, the unit every executor runs.

A :class:`Task` is a checkpoint and the signature families it still needs.
:func:`load_once` loads the checkpoint once and hands each family's result (or the
exception it raised) to a callback as soon as it is done; :func:`run_task` does the same
for a Hub checkpoint that has to be downloaded first and returns the results, in a form
that travels between processes (a :class:`TaskFailure` in place of an exception).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toposig.families.registry import run_order
from toposig.families.runner import run_families
from toposig.model.matrices import (
    copies_of_left_out,
    count_parameters,
    model_matrices,
    state_dict_matrices,
    state_dict_parameters,
)
from toposig.records import CheckpointOutput, Family
from toposig.sources import reload
from toposig.sources.checkpoint_files import load_checkpoint_file, trainer_state_loss
from toposig.sources.checkpoints import Checkpoint
from toposig.sources.fetch import Download, evict_snapshot, hub_snapshot
from toposig.sources.loading import load_model, load_tokenizer

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


class DiskCheckpoint:
    """A checkpoint loaded from disk for the families (:class:`toposig.families.base.Loaded`):
    a model folder or Hub snapshot as a model, a plain state-dict file as its tensors.

    The model is loaded once. When a family of the run reads the stored weights, it is
    loaded in float32 on the CPU (so that the stored values are what is analysed); when
    one needs float32 weights, in float32; otherwise in the run's precision on its device.
    :meth:`model` then moves it where a family asks, and the tokenizer is loaded on the
    first family that asks for it.
    """

    def __init__(self, ckpt: Checkpoint, plan: RunPlan, families: tuple[str, ...]):
        import torch

        t0 = time.perf_counter()
        stages = run_order(families)
        reads = any(s.reads_weights for s in stages)
        self.fp32 = reads or any(s.float32 for s in stages)
        self.ckpt, self.placement = ckpt, plan.placement
        self.local_files_only = plan.local_files_only
        self._run = plan.settings
        self._model = None
        self._reused = False
        self._tensors = None
        self._tokenizer: object = None
        if ckpt.source == "file":
            loaded = load_checkpoint_file(ckpt.location)
            self._tensors = loaded
            self.stored_loss = (loaded.loss, loaded.loss_key)
            self._copies = copies_of_left_out(loaded.tensors)  # one pass, used twice
            self.available = [n for n, t in loaded.tensors.items() if t.dim() == 2]
            self.num_parameters = state_dict_parameters(loaded.tensors, self._copies)
        else:
            # no family runs it: the series' model may be reused (the weights copied in)
            self._reused = not any(s.runs_model for s in stages)
            self._model = load_model(
                ckpt, torch.float32 if self.fp32 else plan.placement.weight_dtype,
                "cpu" if reads else plan.device, local_files_only=plan.local_files_only,
                trust_remote_code=plan.settings.trust_remote_code, reuse=self._reused)
            try:
                self.available = [n for n, p in self._model.named_parameters()
                                  if p.dim() == 2]
                self.num_parameters = count_parameters(self._model.parameters())
                self.stored_loss = (trainer_state_loss(ckpt.location)
                                    if ckpt.source == "local" else (None, None))
            except BaseException:
                self.close()  # no family will run: the series' model goes back now
                raise
        self.load_s = time.perf_counter() - t0

    def matrices(self, include, exclude):
        if self._tensors is not None:
            loaded = self._tensors
            return state_dict_matrices(loaded.tensors, include, exclude, self._copies,
                                       config=loaded.config,
                                       config_source=loaded.config_source or "config")
        return model_matrices(self._model, include, exclude)

    def close(self) -> None:
        """The families are done: a reused model goes back to its series."""
        if self._reused:
            reload.release(self._model)
            self._reused = False

    def model(self, *, float32: bool):
        if self._model is None:
            raise ValueError(f"{self.ckpt.describe()} is a state dict: there is no model to run")
        if self._reused:
            raise RuntimeError("a model loaded for families that only read its weights is "
                               "shared by the series; it cannot be run")
        t0 = time.perf_counter()
        if float32:
            self._model = self._model.to(self.placement.device)
        elif self.fp32:
            self._model = self._model.to(device=self.placement.device,
                                         dtype=self.placement.weight_dtype)
            self.fp32 = False
        self.load_s += time.perf_counter() - t0
        return self._model

    def tokenizer(self):
        if isinstance(self._tokenizer, BaseException):
            raise self._tokenizer
        if self._tokenizer is None:
            t0 = time.perf_counter()
            try:
                self._tokenizer = load_tokenizer(
                    self.ckpt, self._run.tokenizer, local_files_only=self.local_files_only,
                    trust_remote_code=self._run.trust_remote_code)
            except Exception as exc:
                self._tokenizer = exc
                raise
            finally:
                self.load_s += time.perf_counter() - t0
        return self._tokenizer


def load_once(ckpt: Checkpoint, families: tuple[str, ...], plan: RunPlan, emit: Emit) -> None:
    """Load a checkpoint once (:class:`DiskCheckpoint`) and run the families of
    ``families`` on it (:func:`toposig.families.runner.run_families`), handing each result to
    ``emit`` as soon as it is done (a family that raised, or all of them when the
    checkpoint could not be loaded, gets its exception)."""
    try:
        loaded = DiskCheckpoint(ckpt, plan, families)
    except Exception as exc:  # noqa: BLE001 - recorded per family by the caller
        for f in families:
            emit(Family(f), exc)
        return
    try:
        run_families(loaded, families, plan.inputs, emit)
    finally:
        loaded.close()


def run_task(plan: RunPlan, ckpt: Checkpoint, todo: tuple[str, ...], *, evict: bool = False,
             download: Download | None = None, num_threads: int | None = None
             ) -> dict[str, CheckpointOutput | TaskFailure]:
    """Fetch (Hub checkpoints), load once, compute ``todo``; one result per family.

    What a remote worker runs. With ``evict``, files this call downloaded are deleted
    once the results are computed. ``num_threads`` (a worker's share of a node's cores)
    caps torch's CPU threads and, while the task runs, the BLAS and OpenMP thread pools
    of NumPy, SciPy and the rest (``threadpoolctl``), so that workers side by side do not
    each start a pool as large as the node.
    """
    limits: contextlib.AbstractContextManager = contextlib.nullcontext()
    if num_threads:
        import torch
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(num_threads)
        limits = threadpool_limits(limits=num_threads)
    with limits:
        return _run_task(plan, ckpt, todo, evict, download)


def _run_task(plan: RunPlan, ckpt: Checkpoint, todo: tuple[str, ...], evict: bool,
              download: Download | None) -> dict[str, CheckpointOutput | TaskFailure]:
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
