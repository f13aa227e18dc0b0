"""Spectral geometry of a point cloud, and the PCA that precedes persistent homology.

Pure functions on NumPy arrays (definitions: docs/measures.md). For a cloud ``X`` (n, d),
centred: σ are its singular values and λ = σ² / (n − 1) the eigenvalues of its
covariance. All features are dimensionless except where stated.
"""

from __future__ import annotations

import numpy as np

from toposig.features.names import SPECTRAL_NAMES

EPS_RANKME = 1e-7
DECAY_WINDOW = 50  # the seed's window: the top min(50, rank) eigenvalues
DECAY_FLOOR = 1e-12



def _centred(points: np.ndarray) -> np.ndarray:
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need a 2-D cloud of at least 2 points, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("point cloud contains NaN or inf")
    return x - x.mean(axis=0)


def singular_values(points: np.ndarray) -> np.ndarray:
    """Singular values (min(n, d),) of the centred cloud, descending."""
    return np.linalg.svd(_centred(points), compute_uv=False)


def entropy_rank(values: np.ndarray) -> float:
    """exp(−Σ pₖ ln pₖ) with pₖ = vₖ / Σv + 1e-7 (Garrido et al. 2023)."""
    v = np.asarray(values, dtype=np.float64)
    total = v.sum()
    if total <= 0:
        return 0.0
    p = v / total + EPS_RANKME
    return float(np.exp(-(p * np.log(p)).sum()))


def eigenspectrum_decay(eigenvalues: np.ndarray, window: int = DECAY_WINDOW) -> float:
    """α: minus the least-squares slope of log λᵢ on log i (i = 1, 2, ...).

    Fitted on the top ``min(window, rank)`` eigenvalues above 1e-12; NaN when fewer
    than two remain.
    """
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    lam = lam[lam > DECAY_FLOOR][:window]
    if lam.size < 2:
        return float("nan")
    i = np.arange(1, lam.size + 1, dtype=np.float64)
    slope = np.polyfit(np.log(i), np.log(lam), 1)[0]
    return float(-slope)


def spectral_features(points: np.ndarray) -> dict[str, float]:
    """RankMe, covariance effective rank, participation ratio, decay α, stable rank.

    Args:
        points: (n, d) un-reduced cloud; it is centred here.
    """
    sigma = singular_values(points)
    n = np.asarray(points).shape[0]
    lam = sigma**2 / (n - 1)
    total = lam.sum()
    if total <= 0:
        nan = float("nan")
        return {name: nan for name in SPECTRAL_NAMES}
    return {
        "rankme": entropy_rank(sigma),
        "effective_rank_cov": entropy_rank(lam),
        "participation_ratio": float(total**2 / (lam**2).sum()),
        "eigenspectrum_decay_alpha": eigenspectrum_decay(lam),
        "stable_rank": float(total / lam.max()),
    }


def pca_project(points: np.ndarray, k: int = 50) -> tuple[np.ndarray, float]:
    """Project a cloud on its top principal components (centred, not whitened).

    Args:
        points: (n, d) cloud.
        k: requested components; ``min(k, n − 1, d)`` are kept.

    Returns:
        ``(scores, explained)``: (n, k') coordinates in the cloud's units and the
        fraction of total variance they explain.
    """
    x = _centred(points)
    n, d = x.shape
    k_eff = max(1, min(k, n - 1, d))
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    total = float((s**2).sum())
    explained = float((s[:k_eff] ** 2).sum() / total) if total > 0 else 1.0
    return u[:, :k_eff] * s[:k_eff], explained
