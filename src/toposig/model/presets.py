"""Presets: a suite of language models (:class:`toposig.model.training.SuiteConfig`) or a
positive-control task, a preset whose JSON names its ``"task"``:
``"modular_addition"`` (:class:`toposig.model.modular_addition.ModularConfig`, grokking)
or ``"induction"`` (:class:`toposig.model.induction.InductionConfig`, induction heads).
Read from ``toposig/presets/<name>.json`` or a JSON file. A task
(:class:`toposig.model.task.TaskConfig`) trains itself (``train``), writes the texts it
is measured on (``write_inputs``) and names its signal and the weights left out of its
weight family (``SIGNAL``, ``WEIGHT_EXCLUDE``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeGuard

from toposig.model.induction import InductionConfig
from toposig.model.modular_addition import ModularConfig
from toposig.model.task import TaskConfig
from toposig.model.training import (
    SuiteConfig,
    TrainingConfigError,
    read_preset,
    suite_runs,
    train_suite,
)

Task = ModularConfig | InductionConfig
Preset = SuiteConfig | Task
TASKS: dict[str, type[Task]] = {cls.TASK: cls for cls in (ModularConfig, InductionConfig)}
"""Every positive-control task, by the name a preset's JSON gives it."""


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
    return isinstance(preset, TaskConfig)


def run_names(preset: Preset) -> list[str]:
    """The folders a preset trains, one per model and seed, in training order."""
    if isinstance(preset, SuiteConfig):
        return [r.spec.name for r in suite_runs(preset)]
    return preset.run_names()


def train_preset(preset: Preset, root: str | Path, *, progress: bool = True) -> Path:
    """Train every run of the preset under ``root``; returns the suite folder."""
    if isinstance(preset, SuiteConfig):
        return train_suite(preset, root, progress=progress)[0]
    return preset.train(root, progress=progress)[0]
