"""Presets: a suite of language models (:class:`toposig.model.training.SuiteConfig`) or a
positive-control task (:class:`toposig.model.modular_addition.ModularConfig`, a preset
whose JSON names ``"task": "modular_addition"``), read from ``toposig/presets/<name>.json``
or a JSON file, and trained by the function that belongs to each."""

from __future__ import annotations

from pathlib import Path

from toposig.model.modular_addition import TASK, ModularConfig, train_modular
from toposig.model.training import (
    SuiteConfig,
    TrainingConfigError,
    read_preset,
    suite_runs,
    train_suite,
)

Preset = SuiteConfig | ModularConfig


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
    if task == TASK:
        return ModularConfig.from_dict(data)
    raise TrainingConfigError(f"--preset {name_or_path!r}: unknown task {task!r} (known: {TASK})")


def run_names(preset: Preset) -> list[str]:
    """The folders a preset trains, one per model and seed, in training order."""
    if isinstance(preset, ModularConfig):
        return preset.run_names()
    return [r.spec.name for r in suite_runs(preset)]


def train_preset(preset: Preset, root: str | Path, *, progress: bool = True) -> Path:
    """Train every run of the preset under ``root``; returns the suite folder."""
    if isinstance(preset, ModularConfig):
        return train_modular(preset, root, progress=progress)[0]
    return train_suite(preset, root, progress=progress)[0]
