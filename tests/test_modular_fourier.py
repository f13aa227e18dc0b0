"""Nanda et al.'s progress measures (toposig.features.modular_fourier): the frequency
energies equal numpy's FFT's, a model made of key frequencies keeps its loss when
restricted to them and loses everything when they are excluded."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toposig.features import modular_fourier as MF

P = 17


def circuit(p: int, key: dict[int, float]) -> np.ndarray:
    """Logits ``sum_k alpha_k cos(w_k (a + b - c))``: the grokked algorithm."""
    a, b, c = np.meshgrid(np.arange(p), np.arange(p), np.arange(p), indexing="ij")
    return sum(alpha * np.cos(2 * np.pi * k * (a + b - c) / p) for k, alpha in key.items())


def test_each_frequency_s_energy_is_the_fft_s():
    logits = np.random.default_rng(0).normal(size=(P, P, P))
    f = np.fft.fft2(logits, axes=(0, 1))  # (k1, k2, c)
    power = np.abs(f) ** 2 / P ** 2  # Parseval: the squared norm of each 2-D wave
    # the a + b waves of frequency k are the 2-D entries (k, k) and (-k, -k)
    expected = [(power[k, k] + power[-k % P, -k % P]).sum()
                for k in range(1, (P - 1) // 2 + 1)]
    np.testing.assert_allclose(MF.frequency_energy(logits), expected, rtol=1e-10)


def test_the_a_minus_b_waves_of_a_key_frequency_are_neither_kept_nor_taken_out():
    # as in Nanda et al.'s code: only cos / sin (w (a + b)); a memorised part in
    # cos(w (a - b)) at the same frequency stays out of the restricted logits
    a, b, c = np.meshgrid(np.arange(P), np.arange(P), np.arange(P), indexing="ij")
    w = 2 * np.pi * 3 / P
    algorithm = 6 * np.cos(w * (a + b - c))
    memorised = 6 * np.cos(w * (a - b)) * np.cos(w * c)
    logits = algorithm + memorised
    assert MF.restricted_loss(logits, (3,)) == pytest.approx(MF._loss(algorithm, None),
                                                            abs=1e-9)
    train = np.ones((P, P), dtype=bool)
    assert MF.excluded_loss(logits, (3,), train) == pytest.approx(
        MF._loss(memorised, train), abs=1e-9)


def test_a_circuit_of_key_frequencies_is_found_kept_and_excluded():
    logits = circuit(P, {3: 6.0, 7: 4.0})
    assert MF.key_frequencies(logits) == (3, 7)
    noisy = logits + 0.05 * np.random.default_rng(1).normal(size=logits.shape)
    assert MF.key_frequencies(noisy) == (3, 7)
    full = MF._loss(logits, None)
    assert MF.restricted_loss(logits, (3, 7)) == pytest.approx(full, abs=1e-9)
    # without the key frequencies nothing is left: every answer equally likely
    train = np.random.default_rng(2).random((P, P)) < 0.5
    assert MF.excluded_loss(logits, (3, 7), train) == pytest.approx(math.log(P), abs=1e-9)
    # keeping one of the two loses part of the answer; excluding the other keeps it
    assert MF.restricted_loss(logits, (3,)) > full + 0.1
    assert MF.excluded_loss(logits, (7,), train) < math.log(P) - 0.1


def test_a_memorising_model_s_logits_have_no_key_of_few_frequencies():
    # random answers for every pair: the energy is spread over every frequency
    rng = np.random.default_rng(3)
    table = np.zeros((P, P, P))
    table[np.arange(P)[:, None], np.arange(P)[None, :], rng.integers(0, P, (P, P))] = 10.0
    assert len(MF.key_frequencies(table)) >= 5
    assert MF.key_frequencies(np.ones((P, P, P))) == ()


def test_bad_logits_are_refused():
    for bad in (np.zeros((4, 4, 4)), np.zeros((5, 5, 4)), np.zeros((5, 5))):
        with pytest.raises(ValueError):
            MF.frequency_energy(bad)
    with pytest.raises(ValueError, match="share"):
        MF.key_frequencies(circuit(5, {1: 1.0}), share=0)
