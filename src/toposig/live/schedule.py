"""When a live run measures: its :class:`Schedule`, and what a step is."""

from __future__ import annotations

from dataclasses import dataclass

from toposig.checkpoint_steps import is_scheduled


def check_step(step: object) -> None:
    """Raise ``ValueError`` unless ``step`` is a non-negative integer."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"a step is the number of optimizer updates done, a non-negative "
                         f"integer; got {step!r}")


@dataclass(frozen=True)
class Schedule:
    """When to measure.

    Attributes:
        every_n_steps: measure every this many optimizer steps (``None``: not by count).
        doubling: also at the powers of two below ``every_n_steps`` (Pythia's schedule).
        at_save: also whenever the trainer saves a checkpoint.
        at_evaluate: also whenever the trainer evaluates.
        initial: also at step 0, before the first update.
    """

    every_n_steps: int | None = None
    doubling: bool = False
    at_save: bool = True
    at_evaluate: bool = False
    initial: bool = True

    def __post_init__(self) -> None:
        if self.every_n_steps is not None and (
                isinstance(self.every_n_steps, bool) or not isinstance(self.every_n_steps, int)
                or self.every_n_steps < 1):
            raise ValueError(f"every_n_steps must be a positive integer or None, got "
                             f"{self.every_n_steps!r}")
        if self.doubling and self.every_n_steps is None:
            raise ValueError("doubling=True needs every_n_steps (the doubling runs up to it)")

    def due(self, step: int) -> bool:
        """Whether ``step`` is due by count (saves and evaluations are the trainer's)."""
        if step == 0:
            return self.initial
        return self.every_n_steps is not None and is_scheduled(
            step, self.every_n_steps, "pythia" if self.doubling else "regular")
