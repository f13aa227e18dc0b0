"""What the positive-control tasks share (:mod:`toposig.model.modular_addition`,
:mod:`toposig.model.induction`): their presets' JSON form and run names, the check of
their names, and the suite folder a task trains into."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, ClassVar

from toposig.files.atomic import atomic_write_json, read_json
from toposig.files.locks import exclusive
from toposig.files.names import UnsafeNameError, check_name
from toposig.model.training import TrainingConfigError, check_field_types, write_inputs_file


class TaskConfig:
    """A mixin for a task's frozen dataclass of settings with ``name`` and ``seeds``: its
    run ``k`` is ``<name>-seed<k>``, and its JSON form names the task (``"task"``).

    Class attributes:
        TASK: the task's name in a preset's JSON.
        SIGNAL: the name of its ground-truth signal (``trainer_state.json`` holds it).
        WEIGHT_EXCLUDE: the weight names the weight family leaves out of its checkpoints
            by default (regular expressions).
    """

    TASK: ClassVar[str]
    SIGNAL: ClassVar[str]
    WEIGHT_EXCLUDE: ClassVar[tuple[str, ...]] = ()
    name: str
    hidden: int
    layers: int
    heads: int
    steps: int
    checkpoint_every: int
    lr: float
    weight_decay: float
    warmup: int
    seed: int
    seeds: int

    def to_dict(self) -> dict:
        return {"task": self.TASK, **asdict(self)}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict) -> Any:
        known = {f.name for f in fields(cls)} | {"task"}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise TrainingConfigError(f"unknown {cls.TASK} settings {unknown}; allowed: "
                                      f"{sorted(known)}")
        if d.get("task", cls.TASK) != cls.TASK:
            raise TrainingConfigError(f"task {d.get('task')!r} is not {cls.TASK!r}")
        return cls(**{k: v for k, v in d.items() if k != "task"})

    def run_names(self) -> list[str]:
        return [f"{self.name}-seed{k}" for k in range(self.seeds)]

    def texts(self) -> list[str]:
        """The lines its checkpoints are measured on (its suite's ``inputs.txt``)."""
        raise NotImplementedError

    def write_inputs(self, suite_dir: str | Path) -> Path:
        """Write ``inputs.txt`` (:meth:`texts`) into the suite folder (made if missing);
        returns its path. A file that is already there with these lines is left as it is.

        Raises:
            TrainingConfigError: the folder's ``inputs.txt`` holds other lines (another
                suite's); nothing is written.
        """
        return write_inputs_file(suite_dir, self.texts(), self.name)

    def llc_settings(self, suite_dir: str | Path) -> dict | None:
        """The ``llc`` family's settings that sample the loss the task trains, writing
        any file they name into ``suite_dir``; ``None``: the family's defaults (every
        next token of the ``--texts`` source: the suite's ``inputs.txt``) are it."""
        return None

    def train(self, root: str | Path = "runs", *, progress: bool = True
              ) -> tuple[Path, list[dict]]:
        """Train every seed under ``root``; returns the suite folder and each run's
        ``done.json``."""
        raise NotImplementedError


def check_task_fields(c: TaskConfig) -> None:
    """Raise :class:`TrainingConfigError` for a setting of the wrong type, a suite or run
    name that is not a safe folder name, or a bad value of the settings every task has
    (the model's shape, the schedule, the optimizer, the seeds)."""
    check_field_types(c, f"{c.TASK} suite {c.name!r}")
    try:
        check_name(c.name, "suite name")
        for name in c.run_names():
            check_name(name, "model name")
    except UnsafeNameError as exc:
        raise TrainingConfigError(str(exc)) from exc
    need = task_check(c)
    need(c.hidden > 0 and c.layers > 0 and c.heads > 0 and c.hidden % c.heads == 0
         and (c.hidden // c.heads) % 2 == 0,
         "hidden, layers, heads must be positive, heads must divide hidden into an even "
         "head size")
    need(c.steps >= 1 and c.checkpoint_every >= 1, "steps and checkpoint_every must be >= 1")
    need(c.lr > 0 and c.weight_decay >= 0 and 0 <= c.warmup <= c.steps,
         "need lr > 0, weight_decay >= 0, 0 <= warmup <= steps")
    need(c.seeds >= 1 and c.seed >= 0, "need seeds >= 1 and seed >= 0")


def task_check(c: TaskConfig) -> Callable[[bool, str], None]:
    """``need(ok, message)``: raise :class:`TrainingConfigError` naming the suite and the
    message unless ``ok``."""
    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise TrainingConfigError(f"{c.TASK} suite {c.name!r}: {msg}")
    return need


@contextmanager
def task_suite(c: TaskConfig, root: str | Path, fingerprint: dict, about: dict
               ) -> Iterator[Path]:
    """The task's suite folder ``root/<name>/``, locked, while its runs train.

    ``config.json`` is written with ``fingerprint`` (what must match for the folder to be
    resumed) and ``about``; a folder whose ``config.json`` holds another fingerprint is
    refused.

    Raises:
        TrainingConfigError: the folder holds a suite trained with other settings.
        FolderLockedError: another run is training into the same folder.
    """
    suite_dir = Path(root) / c.name
    with exclusive(suite_dir, "suite folder"):
        cfg_path = suite_dir / "config.json"
        if cfg_path.is_file() and {k: read_json(cfg_path).get(k) for k in fingerprint} \
                != json.loads(json.dumps(fingerprint)):
            raise TrainingConfigError(
                f"{suite_dir} holds suite {c.name!r} trained with other settings; move it "
                "away, or train into another --suite-dir")
        atomic_write_json(cfg_path, {**fingerprint, **about}, root=suite_dir)
        yield suite_dir
