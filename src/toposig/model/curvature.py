"""Curvature of the loss at a checkpoint: top Hessian eigenvalues and the Hessian trace.

Nothing here forms the Hessian. Everything works on a Hessian-vector product, a function
``hvp(v) -> H v`` on flat float64 vectors of the parameter dimension ``dim``:

- :func:`top_eigenpairs`: the ``k`` algebraically largest eigenvalues and their
  eigenvectors by implicitly restarted Lanczos (ARPACK through
  :func:`scipy.sparse.linalg.eigsh`; LOBPCG, :func:`scipy.sparse.linalg.lobpcg`, for a
  model too large for ARPACK's 32-bit indices), with the number of products used and
  each pair's residual ``||H v − λ v|| / |λ|``;
- :func:`hutchinson_trace`: ``tr H ≈ mean of zᵀ H z`` over seeded Rademacher vectors
  ``z``, with its standard error.

:func:`loss_hvp` builds the product for a torch model's loss on a fixed batch by double
backward: the gradient is computed once with its graph kept, and each product is one
more backward pass through it (Pearlmutter's trick).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh, lobpcg

HVP = Callable[[np.ndarray], np.ndarray]


class CountingHVP:
    """An HVP that counts its calls (the cost measure of every estimate here)."""

    def __init__(self, hvp: HVP):
        self.hvp = hvp
        self.calls = 0

    def __call__(self, v: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.asarray(self.hvp(np.asarray(v, dtype=np.float64).ravel()),
                          dtype=np.float64).ravel()


@dataclass
class TopEigen:
    """Result of :func:`top_eigenpairs`.

    Attributes:
        values: (k,) eigenvalues, largest first (loss units per squared parameter unit).
        vectors: (dim, k) unit eigenvectors, column i for ``values[i]``.
        n_hvp: Hessian-vector products used (Lanczos plus one per residual).
        residuals: (k,) ``||H v − λ v|| / max(|λ|, tiny)`` of each pair.
        converged: ARPACK reached ``tol`` for all k pairs within ``maxiter`` restarts.
    """

    values: np.ndarray
    vectors: np.ndarray
    n_hvp: int
    residuals: np.ndarray
    converged: bool


def top_eigenpairs(hvp: HVP, dim: int, k: int = 2, *, tol: float = 1e-3,
                   maxiter: int = 20, seed: int = 0) -> TopEigen:
    """The ``k`` algebraically largest eigenpairs of the symmetric operator ``hvp``.

    Args:
        hvp: ``v -> H v`` on (dim,) float64 vectors.
        dim: the parameter dimension.
        k: number of eigenpairs (``1 <= k < dim``).
        tol: ARPACK's relative accuracy for the Ritz values.
        maxiter: ARPACK restarts at most (each costs up to ``ncv - k`` products).
        seed: seeds ARPACK's start vector, so the estimate is reproducible.

    When ARPACK does not converge within ``maxiter``, the pairs it did converge are
    returned (``converged`` False); if none did, a ``RuntimeError`` is raised.
    """
    if not 1 <= k < dim:
        raise ValueError(f"k must be between 1 and dim - 1 = {dim - 1}, got {k}")
    counted = CountingHVP(hvp)
    op = LinearOperator((dim, dim), matvec=counted, dtype=np.float64)
    ncv = min(dim, max(2 * k + 1, 12))
    if dim * ncv > ARPACK_MAX_ENTRIES:
        values, vectors, converged = _lobpcg(op, dim, k, tol, maxiter, seed)
    else:
        values, vectors, converged = _arpack(op, dim, k, ncv, tol, maxiter, seed)
    if values.size == 0:
        raise RuntimeError(
            f"Lanczos found no eigenpair in {counted.calls} Hessian-vector products "
            f"(tol {tol}, {maxiter} restarts)")
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    residuals = np.array([
        np.linalg.norm(counted(vectors[:, i]) - values[i] * vectors[:, i])
        / max(abs(values[i]), np.finfo(np.float64).tiny)
        for i in range(values.size)])
    return TopEigen(values, vectors, counted.calls, residuals, converged)


ARPACK_MAX_ENTRIES = 2**31 - 1
"""The most entries of ARPACK's Lanczos basis (``dim`` x ``ncv``) that 32-bit integers,
which ARPACK indexes it with, can address. On a Pythia-410m-sized model (405M parameters
x 12 vectors, past this) the process died with a segmentation fault inside ``eigsh`` (an
H100 machine's scipy); :func:`top_eigenpairs` uses LOBPCG there instead."""


def _arpack(op: LinearOperator, dim: int, k: int, ncv: int, tol: float, maxiter: int,
            seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    v0 = np.random.default_rng(seed).standard_normal(dim)
    try:
        values, vectors = eigsh(op, k=k, which="LA", tol=tol, maxiter=maxiter, v0=v0, ncv=ncv)
    except ArpackNoConvergence as exc:
        return exc.eigenvalues, exc.eigenvectors, False
    return values, vectors, True


def _lobpcg(op: LinearOperator, dim: int, k: int, tol: float, maxiter: int,
            seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The ``k`` largest eigenpairs by LOBPCG (:func:`scipy.sparse.linalg.lobpcg`), for
    dimensions ARPACK cannot index; it keeps a few (dim, k) blocks, not a Lanczos basis.
    ``maxiter`` counts its iterations (``k`` products each, plus the start); converged:
    it reached its residual-norm tolerance ``tol`` within them (it warns otherwise)."""
    import warnings

    x0 = np.random.default_rng(seed).standard_normal((dim, k))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values, vectors = lobpcg(op, x0, largest=True, tol=tol, maxiter=maxiter)
    not_converged = any("not reaching the requested tolerance" in str(w.message)
                        or "Exited at iteration" in str(w.message) for w in caught)
    return np.asarray(values), np.asarray(vectors), not not_converged


def hutchinson_trace(hvp: HVP, dim: int, n_samples: int = 16, *,
                     seed: int = 0) -> tuple[float, float]:
    """Hutchinson's estimate of ``tr H`` and its standard error.

    Args:
        hvp: ``v -> H v`` on (dim,) float64 vectors.
        dim: the parameter dimension.
        n_samples: Rademacher probes (one product each; at least 2).
        seed: seeds the probes.

    Returns:
        ``(mean of zᵀHz, standard deviation / sqrt(n_samples))``.
    """
    if n_samples < 2:
        raise ValueError(f"n_samples must be at least 2, got {n_samples}")
    rng = np.random.default_rng(seed)
    quads = np.empty(n_samples)
    for i in range(n_samples):
        z = rng.choice(np.array([-1.0, 1.0]), size=dim)
        quads[i] = z @ np.asarray(hvp(z), dtype=np.float64)
    return float(quads.mean()), float(quads.std(ddof=1) / np.sqrt(n_samples))


def loss_hvp(loss_fn: Callable[[], object], params: Sequence) -> HVP:
    """The Hessian-vector product of ``loss_fn()`` with respect to ``params``.

    Args:
        loss_fn: computes the scalar loss (a torch tensor) from ``params``; called once.
        params: the torch tensors (``requires_grad``) the Hessian is taken over; a flat
            vector lists their elements in this order.

    Returns:
        ``v -> H v`` on flat float64 numpy vectors; computed in the parameters' dtype
        and device.
    """
    import torch

    params = list(params)
    loss = loss_fn()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    sizes = [p.numel() for p in params]

    def hvp(v: np.ndarray) -> np.ndarray:
        flat = torch.as_tensor(v, dtype=params[0].dtype, device=params[0].device)
        parts = [c.view_as(p) for c, p in zip(torch.split(flat, sizes), params, strict=True)]
        hv = torch.autograd.grad(grads, params, grad_outputs=parts, retain_graph=True)
        return torch.cat([h.reshape(-1) for h in hv]).detach().cpu().double().numpy()

    return hvp
