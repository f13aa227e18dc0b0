"""Nanda et al.'s (2023) progress measures of modular addition, from the logits of every
pair: the restricted and the excluded loss in the Fourier basis of the operands.

A model that has grokked ``a + b mod p`` computes its answers from a few *key
frequencies* ``w_k = 2 pi k / p``: its logit for answer ``c`` is close to
``sum_k alpha_k cos(w_k (a + b - c))``. For each answer ``c`` the logits over the
``p x p`` grid of operands are a function of ``(a, b)``; for each frequency ``k`` in
``1 .. (p - 1) / 2`` the two waves ``cos(w_k (a + b))`` and ``sin(w_k (a + b))`` (in the
two-dimensional Fourier basis, ``cc - ss`` and ``sc + cs`` of the products
``{cos, sin}(w_k a) x {cos, sin}(w_k b)``) carry the algorithm, each of squared norm
``p^2 / 2`` on the grid, orthogonal to each other, to every other frequency's and to the
constant. As in Nanda et al.'s code, only these two are kept or taken out: not the
``a - b`` waves of the same products, which a model that memorises a split symmetric in
``(a, b)`` also carries.

- :func:`frequency_energy`: each frequency's share of the logits, the squared norm of
  their projection on its two waves, summed over the answers;
- :func:`key_frequencies`: the largest-energy frequencies that together hold
  :data:`KEY_SHARE` of the energy of all frequencies (of the final checkpoint's logits:
  the key frequencies of the run);
- :func:`restricted_loss`: the loss on every pair of the logits kept to the constant and
  the key frequencies' waves (falls as the generalising circuit forms, before the
  held-out loss does);
- :func:`excluded_loss`: the loss on the training pairs of the logits with the key
  frequencies' waves taken out (rises as the training pairs come to be fitted through
  the circuit rather than memorised).

Pure functions on arrays: ``logits`` is ``(p, p, p)``, ``[a, b, c]`` the score of answer
``c`` for the operands ``(a, b)``; losses in nats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

KEY_SHARE = 0.8  # of the energy of every frequency, held by the key frequencies


def _check(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 3 or not x.shape[0] == x.shape[1] == x.shape[2] or x.shape[0] < 3:
        raise ValueError(f"logits must be (p, p, p) with p >= 3, got {x.shape}")
    if x.shape[0] % 2 == 0:
        raise ValueError(f"the modulus must be odd, got p = {x.shape[0]}")
    return x


WAVE_NORM2 = 0.5  # the squared norm of one wave over the grid, as a share of p^2


def _waves(p: int, k: int) -> np.ndarray:
    """``(2, p, p)``: ``cos(w_k (a + b))`` and ``sin(w_k (a + b))``."""
    total = np.add.outer(np.arange(p), np.arange(p))
    w = 2 * np.pi * k * total / p
    return np.stack([np.cos(w), np.sin(w)])


def _coefficients(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Frequency ``k``'s waves ``(2, p, p)`` and the logits' coefficients on them,
    answer by answer ``(2, p)``."""
    p = logits.shape[0]
    waves = _waves(p, k)
    return waves, np.einsum("wab,abc->wc", waves, logits) / (WAVE_NORM2 * p * p)


def _component(logits: np.ndarray, k: int) -> np.ndarray:
    """``(p, p, p)``: the projection of the logits, answer by answer, on frequency
    ``k``'s two waves."""
    waves, coefficients = _coefficients(logits, k)
    return np.einsum("wab,wc->abc", waves, coefficients)


def frequency_energy(logits: np.ndarray) -> np.ndarray:
    """``((p - 1) / 2,)``: the squared norm of the logits' projection on each frequency's
    two waves ``k = 1 .. (p - 1) / 2`` (index ``k - 1``), summed over the answers."""
    x = _check(logits)
    p = x.shape[0]
    out = np.empty((p - 1) // 2)
    for k in range(1, (p - 1) // 2 + 1):
        _, coefficients = _coefficients(x, k)
        out[k - 1] = WAVE_NORM2 * p * p * float(np.sum(coefficients ** 2))
    return out


def key_frequencies(logits: np.ndarray, share: float = KEY_SHARE) -> tuple[int, ...]:
    """The frequencies ``k`` (``1 .. (p - 1) / 2``, ascending) of largest energy that
    together hold at least ``share`` of the energy of all of them; ``()`` when the logits
    hold none (constant in the operands)."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    x = _check(logits)
    energy = frequency_energy(x)
    total = float(energy.sum())
    if not total > 1e-12 * float(np.sum(x * x)):  # none, up to rounding
        return ()
    order = np.argsort(-energy, kind="stable")
    held = np.cumsum(energy[order]) / total
    count = int(np.searchsorted(held, share - 1e-12) + 1)
    return tuple(sorted(int(k) + 1 for k in order[:count]))


def _loss(logits: np.ndarray, mask: np.ndarray | None) -> float:
    """Mean cross-entropy of the answers ``(a + b) mod p`` over the pairs in ``mask``
    (every pair without one)."""
    p = logits.shape[0]
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    answer = (a + b) % p
    picked = np.take_along_axis(logits, answer[..., None], axis=2)[..., 0]
    losses = logsumexp(logits, axis=2) - picked
    chosen = losses if mask is None else losses[np.asarray(mask, dtype=bool)]
    if chosen.size == 0:
        raise ValueError("no pair is chosen")
    return float(chosen.mean())


def restricted_loss(logits: np.ndarray, key: Sequence[int]) -> float:
    """The loss on every pair of the logits kept to, for each answer, their mean over the
    operands and their projection on the key frequencies (nats)."""
    x = _check(logits)
    kept = np.broadcast_to(x.mean(axis=(0, 1), keepdims=True), x.shape).copy()
    for k in key:
        kept += _component(x, int(k))
    return _loss(kept, None)


def excluded_loss(logits: np.ndarray, key: Sequence[int], train: np.ndarray) -> float:
    """The loss on the training pairs (``train``: ``(p, p)`` bool, ``[a, b]``) of the
    logits with their projection on the key frequencies taken out (nats)."""
    x = _check(logits)
    left = x.copy()
    for k in key:
        left -= _component(x, int(k))
    return _loss(left, train)
