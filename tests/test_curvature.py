"""Known answers for the curvature estimates: Lanczos eigenvalues and Hutchinson's trace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toposig.model import curvature


def symmetric_with_spectrum(values: np.ndarray, seed: int = 0) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((values.size,) * 2))
    return (q * values) @ q.T


def test_lanczos_recovers_the_largest_eigenvalues_of_a_known_matrix():
    values = np.concatenate([[12.0, 7.5], np.linspace(-3.0, 4.0, 58)])
    a = symmetric_with_spectrum(values)
    top = curvature.top_eigenpairs(lambda v: a @ v, a.shape[0], k=2, tol=1e-8, seed=1)
    assert top.values == pytest.approx([12.0, 7.5], abs=1e-6)
    assert top.converged and top.n_hvp > 2
    assert np.all(top.residuals < 1e-6)
    for i in range(2):  # eigenvectors: A v = λ v, unit norm
        v = top.vectors[:, i]
        assert np.linalg.norm(v) == pytest.approx(1.0)
        assert np.allclose(a @ v, top.values[i] * v, atol=1e-5)


def test_lanczos_is_reproducible_and_rejects_a_bad_k():
    a = symmetric_with_spectrum(np.linspace(-1.0, 5.0, 20))
    one = curvature.top_eigenpairs(lambda v: a @ v, 20, k=3, seed=7)
    two = curvature.top_eigenpairs(lambda v: a @ v, 20, k=3, seed=7)
    assert np.array_equal(one.values, two.values)
    with pytest.raises(ValueError, match="k must be"):
        curvature.top_eigenpairs(lambda v: a @ v, 20, k=20)


def test_hutchinson_is_exact_for_a_diagonal_and_unbiased_otherwise():
    d = np.random.default_rng(0).uniform(-1, 3, 40)
    mean, se = curvature.hutchinson_trace(lambda v: d * v, 40, n_samples=4, seed=0)
    assert mean == pytest.approx(d.sum()) and se == pytest.approx(0.0, abs=1e-9)
    a = symmetric_with_spectrum(np.linspace(0.0, 2.0, 40), seed=3)
    mean, se = curvature.hutchinson_trace(lambda v: a @ v, 40, n_samples=400, seed=1)
    assert se > 0 and abs(mean - np.trace(a)) < 4 * se


def test_loss_hvp_of_a_quadratic_is_its_matrix():
    rng = np.random.default_rng(2)
    a = symmetric_with_spectrum(rng.uniform(-2, 6, 17), seed=4)
    b = rng.standard_normal(17)
    w = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    c = torch.tensor(rng.standard_normal(5), requires_grad=True)
    at, bt = torch.tensor(a), torch.tensor(b)

    def loss():
        theta = torch.cat([w.reshape(-1), c])
        return 0.5 * theta @ at @ theta + bt @ theta

    hvp = curvature.loss_hvp(loss, [w, c])
    v = rng.standard_normal(17)
    assert np.allclose(hvp(v), a @ v)
    top = curvature.top_eigenpairs(hvp, 17, k=2, tol=1e-10)
    assert top.values == pytest.approx(np.sort(np.linalg.eigvalsh(a))[::-1][:2], abs=1e-8)
    mean, _ = curvature.hutchinson_trace(hvp, 17, n_samples=2000, seed=0)
    assert mean == pytest.approx(np.trace(a), rel=0.05)


def test_top_eigenvalues_of_a_network_loss_match_its_full_hessian():
    """A small nonlinear network: Lanczos on double-backward products against the
    eigenvalues of the Hessian torch.func builds explicitly."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 4, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    w1 = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(6, dtype=torch.float64, requires_grad=True)

    def loss_of(a, b):
        return ((torch.tanh(x @ a.T) @ b - y) ** 2).mean()

    hess = torch.func.hessian(lambda flat: loss_of(flat[:24].view(6, 4), flat[24:]))(
        torch.cat([w1.detach().reshape(-1), w2.detach()]))
    expected = np.sort(np.linalg.eigvalsh(hess.numpy()))[::-1]
    hvp = curvature.loss_hvp(lambda: loss_of(w1, w2), [w1, w2])
    top = curvature.top_eigenpairs(hvp, 30, k=2, tol=1e-10)
    assert top.values == pytest.approx(expected[:2], rel=1e-6)
    mean, _ = curvature.hutchinson_trace(hvp, 30, n_samples=3000, seed=0)
    assert mean == pytest.approx(expected.sum(), rel=0.1)


def test_past_arpacks_32_bit_indices_lobpcg_gives_the_same_top_pairs(monkeypatch):
    """ARPACK's Lanczos basis (dim x ncv) is indexed with 32-bit integers: a
    Pythia-410m-sized model (405M x 12) crashed the process inside eigsh. Past that size
    the pairs come from LOBPCG; here the limit is lowered to send a small operator there."""
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    spectrum = np.concatenate([[9.0, 7.5], rng.uniform(-2.0, 2.0, 58)])
    a = (q * spectrum) @ q.T
    arpack = curvature.top_eigenpairs(lambda v: a @ v, 60, k=2, tol=1e-8, seed=1)
    monkeypatch.setattr(curvature, "ARPACK_MAX_ENTRIES", 60 * 12 - 1)
    large = curvature.top_eigenpairs(lambda v: a @ v, 60, k=2, tol=1e-8, maxiter=200, seed=1)
    assert large.converged and large.values == pytest.approx([9.0, 7.5], rel=1e-6)
    assert large.values == pytest.approx(arpack.values, rel=1e-6)
    assert np.abs(large.vectors.T @ arpack.vectors) == pytest.approx(np.eye(2), abs=1e-4)
    assert (large.residuals < 1e-5).all() and large.n_hvp > 2
