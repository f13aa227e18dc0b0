"""Ground truth for the positive controls: transitions whose step is known.

Two training runs change their internal structure at a step that can be measured
without any topology:

- **grokking** (Power et al. 2022; Nanda et al. 2023): on modular addition, held-out
  accuracy jumps long after the training loss has fallen; the ground truth is the step at
  which it first reaches 50 % and 90 % (:func:`modular_accuracy`, :func:`crossing_step`);
- **induction heads** (Olsson et al. 2022): the in-context score, the loss on the second
  copy of a repeated random sequence minus the loss on its first copy, drops sharply in a
  narrow window; the ground truth is the step at which it is halfway from its starting
  to its final level (:func:`induction_score`, :func:`halfway_step`).

:func:`alignment` places a feature's change-point relative to such a step. Pure functions
on arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def modular_targets(p: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a + b) mod p``."""
    return (np.asarray(a) + np.asarray(b)) % p


def modular_accuracy(logits: np.ndarray, a: np.ndarray, b: np.ndarray, p: int) -> float:
    """The share of pairs ``(a, b)`` whose most likely answer is ``(a + b) mod p``.

    Args:
        logits: (pairs, p) scores of each answer for each pair.
        a, b: (pairs,) operands in ``0..p-1``.
        p: the modulus.
    """
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[1] != p:
        raise ValueError(f"logits must be (pairs, {p}), got {logits.shape}")
    return float(np.mean(logits.argmax(axis=1) == modular_targets(p, a, b)))


def induction_score(token_losses: np.ndarray, length: int) -> float:
    """The in-context score of sequences made of a random block repeated once.

    Args:
        token_losses: (sequences, 2 * length - 1) per-token losses (nats) of predicting
            tokens 1 .. 2 * length - 1 of each sequence ``[block, block]`` from the
            tokens before them.
        length: the block's length in tokens.

    Returns:
        The mean loss on the second copy's tokens (2nd to last; its first token follows
        the first copy and could not be predicted from it) minus the mean loss on the first
        copy's predictable tokens (2nd to last), in nats: about 0 before induction heads
        form, strongly negative after.
    """
    losses = np.asarray(token_losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[1] != 2 * length - 1:
        raise ValueError(f"token_losses must be (sequences, {2 * length - 1}), "
                         f"got {losses.shape}")
    first = losses[:, : length - 1]  # predicting tokens 1 .. length-1
    second = losses[:, length:]  # predicting tokens length+1 .. 2 length-1
    return float(second.mean() - first.mean())


def crossing_step(steps: Sequence[int], values: Sequence[float | None],
                  level: float) -> int | None:
    """The first checkpoint step at which ``values`` reaches ``level`` (``None`` if
    never), over step-sorted checkpoints."""
    for s, v in sorted(zip(steps, values, strict=True)):
        if v is not None and math.isfinite(v) and v >= level:
            return int(s)
    return None


def halfway_step(steps: Sequence[int], values: Sequence[float | None]) -> int | None:
    """The first checkpoint step at which a falling ``values`` has covered half the way
    from its first to its last value (``None`` when it does not fall)."""
    pairs = [(s, v) for s, v in sorted(zip(steps, values, strict=True))
             if v is not None and math.isfinite(v)]
    if len(pairs) < 2 or pairs[-1][1] >= pairs[0][1]:
        return None
    level = (pairs[0][1] + pairs[-1][1]) / 2
    return next(int(s) for s, v in pairs if v <= level)


def change_point(steps: Sequence[int], values: Sequence[float | None]) -> int | None:
    """The checkpoint step that ends the largest change of ``values`` between consecutive
    checkpoints, per step of training: where a feature moves fastest (``None`` with fewer
    than two values)."""
    pairs = [(s, v) for s, v in sorted(zip(steps, values, strict=True))
             if v is not None and math.isfinite(v)]
    if len(pairs) < 2:
        return None
    s = np.array([p[0] for p in pairs], dtype=np.float64)
    v = np.array([p[1] for p in pairs], dtype=np.float64)
    rate = np.abs(np.diff(v)) / np.maximum(np.diff(s), 1.0)
    return int(s[1 + int(np.argmax(rate))])


@dataclass(frozen=True)
class Alignment:
    """Where a feature's change-point lies relative to a known event.

    Attributes:
        event_step: the ground truth's step.
        feature_step: the feature's change-point (:func:`change_point`).
        lead: ``event_step - feature_step`` in steps: positive when the feature moves
            first.
        checkpoints_apart: how many checkpoints lie between them (0: the same one).
        hit: within one checkpoint of the event.
    """

    event_step: int
    feature_step: int
    lead: int
    checkpoints_apart: int
    hit: bool


def alignment(steps: Sequence[int], values: Sequence[float | None],
              event_step: int | None) -> Alignment | None:
    """The feature's change-point against ``event_step`` on the checkpoints ``steps``;
    ``None`` when either is undefined."""
    found = change_point(steps, values)
    if found is None or event_step is None:
        return None
    ordered = sorted(steps)
    index = {s: i for i, s in enumerate(ordered)}
    if event_step not in index:
        raise ValueError(f"event step {event_step} is not a checkpoint step")
    apart = abs(index[found] - index[event_step])
    return Alignment(int(event_step), found, int(event_step - found), apart, apart <= 1)
