"""One function runs the stages of a loaded checkpoint, for every caller: the pipeline's
tasks (:func:`toposig.run.tasks.load_once`), :func:`toposig.measure` and the live
monitor (:func:`toposig.in_memory.measure_families`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from toposig.records import Family
from toposig.stages.base import Loaded, StageInputs
from toposig.stages.registry import run_order

Emit = Callable[[Family, object], None]


def run_stages(loaded: Loaded, families: Iterable[str], inputs: StageInputs,
               emit: Emit) -> None:
    """Run the stages of ``families`` on ``loaded`` in their order
    (:func:`~toposig.stages.registry.run_order`), handing each family's result (a
    :class:`~toposig.records.CheckpointOutput`, or the exception it raised) to ``emit``
    the moment it is done; a stage that raised does not stop the others."""
    for stage in run_order(families):
        try:
            result: object = stage.run(loaded, inputs.settings[stage.family], inputs)
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who records it
            result = exc
        emit(stage.family, result)
