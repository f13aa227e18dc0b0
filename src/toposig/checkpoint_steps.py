"""Which training steps are measured or saved: every ``every`` steps, and with Pythia's
doubling also the powers of two below ``every`` (1, 2, 4, ...), where a model changes
fastest.

Pythia saves step 0, the powers of two up to 512 and then every 1,000 steps; the
project's trainer (``schedule: pythia``) and the live callbacks
(:mod:`toposig.integrations`) use the same rule.
"""

from __future__ import annotations

SCHEDULE_KINDS = ("pythia", "regular")


def is_scheduled(step: int, every: int, kind: str = "pythia") -> bool:
    """Whether ``step`` (updates done, >= 0) is on the schedule: a multiple of ``every``
    (step 0 included), or for ``pythia`` a power of two below ``every``.

    Raises:
        ValueError: ``every`` below 1 or an unknown ``kind``.
    """
    if every < 1:
        raise ValueError(f"every must be at least 1, got {every}")
    if kind not in SCHEDULE_KINDS:
        raise ValueError(f"unknown schedule {kind!r}; allowed: {', '.join(SCHEDULE_KINDS)}")
    if step % every == 0:
        return True
    return kind == "pythia" and 0 < step < every and step & (step - 1) == 0


def scheduled_steps(total: int, every: int, kind: str = "pythia") -> list[int]:
    """The steps of ``0..total`` on the schedule (:func:`is_scheduled`), always with 0 and
    ``total``; only the multiples of ``every`` and the powers of two are tried."""
    candidates = set(range(0, total + 1, max(every, 1)))
    candidates |= {1 << k for k in range(max(every, 1).bit_length()) if 1 << k <= total}
    return sorted({s for s in candidates if is_scheduled(s, every, kind)} | {0, total})
