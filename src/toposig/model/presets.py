"""Presets: a suite of language models (:class:`toposig.model.training.SuiteConfig`) or a
positive-control task, a preset whose JSON names its ``"task"``:
``"modular_addition"`` (:class:`toposig.model.modular_addition.ModularConfig`, grokking)
or ``"induction"`` (:class:`toposig.model.induction.InductionConfig`, induction heads).
Read from ``toposig/presets/<name>.json`` or a JSON file, and trained by the function
that belongs to each."""

from __future__ import annotations

from pathlib import Path
from typing import TypeGuard

from toposig.model import induction, modular_addition
from toposig.model.induction import InductionConfig
from toposig.model.modular_addition import ModularConfig
from toposig.model.training import (
    SuiteConfig,
    TrainingConfigError,
    read_preset,
    suite_runs,
    train_suite,
)

Task = ModularConfig | InductionConfig
Preset = SuiteConfig | Task
TASKS: dict[str, type[ModularConfig] | type[InductionConfig]] = {
    modular_addition.TASK: ModularConfig, induction.TASK: InductionConfig}
_MODULES = {ModularConfig: modular_addition, InductionConfig: induction}


def load_preset(name_or_path: str) -> Preset:
    """The preset of that name or file: a task's config when its JSON names a ``task``,
    else a suite's.

    Raises:
        TrainingConfigError: unknown preset or task, unreadable file, or bad settings.
    """
    data = read_preset(name_or_path)
    task = data.get("task")
    if task is None:
        return SuiteConfig.from_dict(data)
    if task in TASKS:
        return TASKS[task].from_dict(data)
    raise TrainingConfigError(f"--preset {name_or_path!r}: unknown task {task!r} (known: "
                              f"{', '.join(TASKS)})")


def is_task(preset: Preset | None) -> TypeGuard[Task]:
    """Whether the preset is a positive-control task (measured on its own inputs)."""
    return isinstance(preset, ModularConfig | InductionConfig)


def run_names(preset: Preset) -> list[str]:
    """The folders a preset trains, one per model and seed, in training order."""
    if isinstance(preset, SuiteConfig):
        return [r.spec.name for r in suite_runs(preset)]
    return preset.run_names()


def task_signal(task: Task) -> str:
    """The name of the task's ground-truth signal (``trainer_state.json`` holds it)."""
    return str(_MODULES[type(task)].SIGNAL)


def write_task_inputs(task: Task, suite_dir: str | Path) -> Path:
    """Write the task's ``inputs.txt`` into ``suite_dir`` (the texts its checkpoints are
    measured on); returns its path."""
    return _MODULES[type(task)].write_inputs(task, suite_dir)  # type: ignore[arg-type]


def task_weight_exclude(task: Task) -> list[str]:
    """The weight names the weight family leaves out of a task's checkpoints by default:
    the induction task's zero MLP matrices, nothing of the others."""
    return [induction.WEIGHT_EXCLUDE] if isinstance(task, InductionConfig) else []


def train_task(task: Task, root: str | Path, *, progress: bool = True
               ) -> tuple[Path, list[dict]]:
    """Train every seed of a task under ``root``; returns the suite folder and each run's
    ``done.json``."""
    if isinstance(task, InductionConfig):
        return induction.train_induction(task, root, progress=progress)
    return modular_addition.train_modular(task, root, progress=progress)


def train_preset(preset: Preset, root: str | Path, *, progress: bool = True) -> Path:
    """Train every run of the preset under ``root``; returns the suite folder."""
    if isinstance(preset, SuiteConfig):
        return train_suite(preset, root, progress=progress)[0]
    return train_task(preset, root, progress=progress)[0]
