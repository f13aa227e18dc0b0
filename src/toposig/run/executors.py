"""Who runs the tasks of a plan: one loop in this process, or Ray over a cluster.

An executor takes the plan's :class:`~toposig.run.tasks.Task` list and two callbacks from
the driver: ``emit(task, family, result)`` for each family's result (a
:class:`~toposig.records.CheckpointOutput`, or an exception for a failure) and
``done(task)`` once a task has no more to say. The driver writes every record through
its store, so resume, failures and aggregates are the same whichever executor ran.

- :class:`SerialExecutor` runs the tasks in order in this process. For Hub checkpoints
  it downloads task k + 1 in a background thread while task k is analysed, and with
  ``evict`` deletes task k's download once its records are written.
- :class:`RayExecutor` runs one Ray task per checkpoint (``ray`` is an optional
  dependency: ``requirements-ray.txt``), each asking for ``cpus_per_task`` CPUs and
  ``gpus_per_task`` GPUs (fractions share a GPU). Results come back to the driver as
  tasks finish; a task that raises, or whose worker dies, costs only its own checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from toposig.config import EXECUTOR_CHOICES
from toposig.run.tasks import Result, Task, TaskFailure, load_once, run_task
from toposig.sources.fetch import Download, Fetched, Prefetcher, evict_snapshot, hub_snapshot

if TYPE_CHECKING:
    from toposig.run.plan import RunPlan

logger = logging.getLogger(__name__)

EmitResult = Callable[[Task, str, Result], None]
TaskDone = Callable[[Task], None]

# Passed on to Ray workers, so they see the same data, cache and offline switches.
WORKER_ENV_VARS = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                   "TRANSFORMERS_OFFLINE", "TOPOSIG_DATASETS_DIR", "TOKENIZERS_PARALLELISM")


class Executor(Protocol):
    def run(self, tasks: Sequence[Task], plan: RunPlan, emit: EmitResult,
            done: TaskDone) -> None: ...


@dataclass
class SerialExecutor:
    """Tasks in order, in this process, with Hub downloads one checkpoint ahead.

    Attributes:
        prefetch: download the next Hub checkpoint while the current one is analysed.
        evict: delete a checkpoint's downloaded files once its records are written
            (files that were already cached before the run are left alone).
        download: ``snapshot_download`` or a stand-in with its signature.
        evict_files: deletes one downloaded snapshot
            (:func:`~toposig.sources.fetch.evict_snapshot`).
    """

    prefetch: bool = True
    evict: bool = False
    download: Download | None = None
    evict_files: Callable[[Path], object] = evict_snapshot

    def run(self, tasks: Sequence[Task], plan: RunPlan, emit: EmitResult,
            done: TaskDone) -> None:
        def fetch(task: Task) -> Fetched | None:
            if task.ckpt.source != "hub":
                return None
            return hub_snapshot(task.ckpt, local_files_only=plan.local_files_only,
                                download=self.download)

        for task, fetched in Prefetcher(tasks, fetch, ahead=1 if self.prefetch else 0):
            if isinstance(fetched, BaseException):
                for family in task.todo:
                    emit(task, family, fetched)
                done(task)
                continue
            ckpt = task.ckpt if fetched is None else dataclasses.replace(
                task.ckpt, local_path=str(fetched.path))
            load_once(ckpt, task.todo, plan, functools.partial(emit, task))
            done(task)  # the records are written: the files may go
            if self.evict and fetched is not None and fetched.downloaded:
                try:
                    self.evict_files(fetched.path)
                except Exception as exc:  # noqa: BLE001 - a leftover is not a failure
                    logger.warning("could not evict %s: %s", fetched.path, exc)


def _worker_env() -> dict[str, str]:
    return {k: os.environ[k] for k in WORKER_ENV_VARS if k in os.environ}


@dataclass
class RayExecutor:
    """One Ray task per checkpoint; records travel back to the driver.

    Attributes:
        address: an existing cluster to join (``ray://host:10001``, ``auto``); ``None``
            starts a local Ray instance for the run and stops it afterwards.
        cpus_per_task: CPUs each task asks for (its torch thread count, rounded up).
        gpus_per_task: GPUs each task asks for; a fraction lets small models share one.
        evict: delete each task's Hub download once its results are computed.
        num_cpus: CPUs of a local instance (``None``: all of this machine's).
    """

    address: str | None = None
    cpus_per_task: float = 1.0
    gpus_per_task: float = 0.0
    evict: bool = False
    num_cpus: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cpus_per_task) and self.cpus_per_task > 0):
            raise ValueError(f"--cpus-per-task must be a number > 0, got {self.cpus_per_task}")
        if not (math.isfinite(self.gpus_per_task) and self.gpus_per_task >= 0):
            raise ValueError(f"--gpus-per-task must be a number >= 0, got {self.gpus_per_task}")
        if self.gpus_per_task > 1 and self.gpus_per_task != int(self.gpus_per_task):
            raise ValueError("--gpus-per-task above 1 must be a whole number, got "
                             f"{self.gpus_per_task}")

    def _init(self):
        ray = import_ray()
        if ray.is_initialized():
            return ray, False
        package = str(Path(__file__).resolve().parents[1])  # the whole toposig package
        ray.init(address=self.address, num_cpus=None if self.address else self.num_cpus,
                 include_dashboard=False, logging_level=logging.WARNING,
                 runtime_env={"py_modules": [package], "env_vars": _worker_env()})
        return ray, True

    def run(self, tasks: Sequence[Task], plan: RunPlan, emit: EmitResult,
            done: TaskDone) -> None:
        if not tasks:
            return
        ray, started = self._init()
        try:
            remote = ray.remote(run_task).options(
                num_cpus=self.cpus_per_task, num_gpus=self.gpus_per_task, max_retries=0)
            plan_ref = ray.put(plan)
            threads = max(1, math.ceil(self.cpus_per_task))
            pending = {remote.remote(plan_ref, t.ckpt, t.todo, evict=self.evict,
                                     num_threads=threads): t for t in tasks}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ready[0])
                try:
                    results = ray.get(ready[0])
                except Exception as exc:  # noqa: BLE001 - the task raised or its worker died
                    failure = TaskFailure.from_exception(exc)
                    results = {f: failure for f in task.todo}
                for family in task.todo:
                    emit(task, family, results.get(family) or TaskFailure(
                        "MissingResult", f"the task returned no {family} result"))
                done(task)
        finally:
            if started:
                ray.shutdown()


def check_ray_address(address: str, timeout: float = 5.0) -> None:
    """Before any work: the cluster ``--ray-address`` names answers on its port.

    ``ray://host:port`` (Ray client, default port 10001) and ``host:port`` (the head's
    GCS, default 6379) are tried with one TCP connection; ``auto`` and ``local`` are left
    to Ray.

    Raises:
        ValueError: the address cannot be parsed or nothing answers there.
    """
    import socket
    from urllib.parse import urlsplit

    if address in ("auto", "local"):
        return
    client = address.startswith("ray://")
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port or (10001 if client else 6379)
    except ValueError as exc:
        raise ValueError(f"--ray-address {address!r} is not host:port or ray://host:port "
                         f"({exc})") from exc
    if not host:
        raise ValueError(f"--ray-address {address!r} is not host:port or ray://host:port")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ValueError(f"--ray-address {address!r}: nothing answers at {host}:{port} "
                         f"({exc}); is the cluster up?") from exc


def import_ray():
    """``ray``, or an error that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("--executor ray needs Ray: pip install -r requirements-ray.txt"
                          ) from exc
    return ray


def make_executor(name: str, *, evict: bool = False, prefetch: bool = True,
                  ray_address: str | None = None, cpus_per_task: float = 1.0,
                  gpus_per_task: float = 0.0) -> Executor:
    """The executor ``--executor name`` asks for, validated before any work."""
    if name == "serial":
        return SerialExecutor(prefetch=prefetch, evict=evict)
    if name == "ray":
        import_ray()
        executor = RayExecutor(address=ray_address, cpus_per_task=cpus_per_task,
                               gpus_per_task=gpus_per_task, evict=evict)
        if ray_address:
            check_ray_address(ray_address)
        return executor
    raise ValueError(f"--executor must be one of {', '.join(EXECUTOR_CHOICES)}, got {name!r}")
