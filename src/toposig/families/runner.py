"""One function runs the families of a loaded checkpoint, for every caller: the pipeline's
tasks (:func:`toposig.run.tasks.load_once`), :func:`toposig.measure` and the live
monitor (:func:`toposig.in_memory.measure_families`).

The families get the checkpoint as a :class:`CheckpointSession`: the caller's
:class:`~toposig.families.base.Loaded`, and the work that several families share done once
for the checkpoint (the analysed texts' forward pass, read by the embedding and the
interlayer families)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toposig.families.base import FamilyInputs, Loaded
from toposig.families.registry import run_order
from toposig.records import Family

if TYPE_CHECKING:
    from toposig.model.embedding import TextsForward

Emit = Callable[[Family, object], None]


class CheckpointSession:
    """One checkpoint for the span of :func:`run_families`: every part of the caller's
    :class:`~toposig.families.base.Loaded`, as that gives it, and :meth:`texts_forward`,
    run once per texts, length and batch size however many families ask (the session ends
    with the call, so a live monitor's next step runs its own)."""

    def __init__(self, loaded: Loaded) -> None:
        self._loaded = loaded
        self._forwards: dict[tuple[tuple[str, ...], int, int | str], TextsForward] = {}
        self.ckpt = loaded.ckpt
        self.placement = loaded.placement
        self.stored_loss = loaded.stored_loss
        self.local_files_only = loaded.local_files_only

    @property
    def load_s(self) -> float:
        return self._loaded.load_s

    @property
    def num_parameters(self) -> int | None:
        return self._loaded.num_parameters

    @property
    def available(self) -> list[str]:
        return self._loaded.available

    def matrices(self, include: Sequence[str], exclude: Sequence[str]) -> Mapping[str, Any]:
        return self._loaded.matrices(include, exclude)

    def model(self, *, float32: bool):
        return self._loaded.model(float32=float32)

    def tokenizer(self):
        return self._loaded.tokenizer()

    def texts_forward(self, texts: list[str], max_length: int, batch_size: int | str
                      ) -> TextsForward:
        """The texts' forward pass through the model in the run's precision
        (:func:`toposig.model.embedding.texts_forward`), run on the first call for these
        texts, ``max_length`` and ``batch_size`` and kept for the others."""
        from toposig.model.embedding import texts_forward

        key = (tuple(texts), max_length, batch_size)
        if key not in self._forwards:
            self._forwards[key] = texts_forward(self.model(float32=False), self.tokenizer(),
                                                texts, max_length, self.placement, batch_size)
        return self._forwards[key]


def run_families(loaded: Loaded, families: Iterable[str], inputs: FamilyInputs,
                 emit: Emit) -> None:
    """Run the families of ``families`` on ``loaded`` in their order
    (:func:`~toposig.families.registry.run_order`), each with its settings in ``inputs``
    and on the same :class:`CheckpointSession`, handing each family's result (a
    :class:`~toposig.records.CheckpointOutput`, or the exception it raised) to ``emit``
    the moment it is done; a family that raised does not stop the others."""
    session = CheckpointSession(loaded)
    for cls in run_order(families):
        try:
            result: object = inputs.of(cls.name).compute(session, inputs)
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who records it
            result = exc
        emit(Family(cls.name), result)
