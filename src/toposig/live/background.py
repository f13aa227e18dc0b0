"""Measuring while training goes on: a twin of the model, measured on a worker thread.

A live measurement of the docs' ``Trainer`` example takes about as long as ten of its
training steps (0.5 s against 0.05 s, 2026-11-29). With ``background`` on, a monitor
copies the model's weights into a twin (a copy made once, refreshed in place at each
measurement: milliseconds for a small model) and hands the twin to one worker thread,
which measures it and writes the records, the signal and the figure while the training
thread goes on. The records are those of the step the weights were copied at.

What keeps the training untouched: the twin is a separate model (its own parameters,
eval mode, no gradients), its tokenizer a separate copy (a fast tokenizer must not be
called from two threads at once), the worker never saves or restores the global random
number generators (:func:`toposig.in_memory.preserved_state` with ``rngs=False``; the
measurement draws from its own seeded generators only), and the results folder's lock
is exclusive between threads (:func:`toposig.files.locks.exclusive`). At most one
measurement is in flight: the next one, and every call that reads or writes the folder,
waits for it.

It is off by default (``background=False``), because on a CPU it was measured not to
pay: on the docs' example on 2 cores (``bench/bench_callback.py``, 2026-11-28, medians
of 5 pairs; ``docs/training.md`` § Cost), with torch's default threads (one per core)
the worker's threads and the training's fight for the cores and the training slowed by
9.5 s, against 3.9 s when it waits for the measurements; with the training on one thread
it slowed by 4.6 s either way. It is meant for a training that leaves the CPU idle (one
on a GPU), where it is not measured yet. The twin lives where the model does (on an
accelerator it takes as much device memory again).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from toposig.live.measurement import RememberingTokenizer, tokenizer_state

logger = logging.getLogger(__name__)


def check_background(choice) -> bool:
    """``choice`` if it is ``True`` or ``False``.

    Raises:
        ValueError: it is not.
    """
    if choice is not True and choice is not False:
        raise ValueError(f"background must be True or False, got {choice!r}")
    return choice


class Twin:
    """A copy of a training model and its tokenizer, measured in the model's place.

    Args:
        model: the training model (deep-copied once; the copy's parameters need no
            gradients and it is in eval mode).
        tokenizer: the model's tokenizer (deep-copied, and remembering its tokenizations:
            :class:`~toposig.live.measurement.RememberingTokenizer`).

    Raises:
        Exception: whatever ``copy.deepcopy`` raises for a model or tokenizer that cannot
            be copied.
    """

    def __init__(self, model, tokenizer):
        import torch

        self.of = model
        self.model = copy.deepcopy(model)
        with torch.no_grad():
            for p in self.model.parameters():
                p.grad = None
                p.requires_grad_(False)
        self.model.eval()
        if not self.fits(model):  # pragma: no cover - deepcopy keeps them
            raise ValueError("the model's copy does not have the model's tensors")
        self.tokenizer = RememberingTokenizer(copy.deepcopy(tokenizer))

    @staticmethod
    def _named(model) -> list[tuple]:
        """Every parameter and buffer, by name."""
        return [*model.named_parameters(), *model.named_buffers()]

    def fits(self, model) -> bool:
        """Whether ``model`` still has the twin's tensors (names, shapes, dtypes and
        devices): a resized vocabulary, a model moved or cast needs a new twin."""
        def layout(m) -> list[tuple]:
            return [(n, tuple(t.shape), t.dtype, t.device) for n, t in self._named(m)]

        return layout(self.model) == layout(model)

    def refresh(self, model, tokenizer) -> None:
        """Copy ``model``'s current parameters and buffers into the twin, and the
        tokenizer again if its state changed (:func:`tokenizer_state`: a token added)."""
        import torch

        with torch.no_grad():
            for (_, mine), (_, theirs) in zip(self._named(self.model), self._named(model),
                                              strict=True):
                mine.copy_(theirs)
        if tokenizer_state(tokenizer) != tokenizer_state(self.tokenizer._wrapped):
            self.tokenizer = RememberingTokenizer(copy.deepcopy(tokenizer))


class Worker:
    """One job at a time on one thread (not a daemon: a job in flight when the program
    ends is finished, not cut off)."""

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future | None = None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the thread, after the job before it has ended."""
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="toposig-measure")
        self._future = self._pool.submit(job)

    def wait(self) -> None:
        """Wait for the job in flight, if any (a job reports its own failures; one that
        escapes it is raised here)."""
        future, self._future = self._future, None
        if future is not None:
            future.result()

    def close(self) -> None:
        """Wait for the job in flight and end the thread."""
        try:
            self.wait()
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)
