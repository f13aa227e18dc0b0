"""Known answers for the spectral baselines and the PCA step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toposig.features import spectral


def cloud_with_eigenvalues(lam: np.ndarray, n: int = 500, seed: int = 0) -> np.ndarray:
    """A centred (n, len(lam)) cloud whose covariance eigenvalues are exactly ``lam``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, lam.size))
    a -= a.mean(axis=0)
    u, _ = np.linalg.qr(a)  # orthonormal columns, each orthogonal to the ones vector
    v, _ = np.linalg.qr(rng.normal(size=(lam.size, lam.size)))
    return u * np.sqrt(lam * (n - 1)) @ v.T


@pytest.mark.parametrize("k", [5, 20, 50])
def test_isotropic_gaussian_has_rankme_and_participation_ratio_near_its_dimension(k):
    x = np.random.default_rng(k).normal(size=(20000, k))
    f = spectral.spectral_features(x)
    assert f["rankme"] == pytest.approx(k, rel=0.02)
    assert f["participation_ratio"] == pytest.approx(k, rel=0.02)
    assert f["effective_rank_cov"] == pytest.approx(k, rel=0.02)
    assert f["stable_rank"] == pytest.approx(k, rel=0.1)


def test_exact_spectrum_gives_exact_features():
    i = np.arange(1, 31, dtype=float)
    lam = i**-2.0
    f = spectral.spectral_features(cloud_with_eigenvalues(lam))
    assert f["eigenspectrum_decay_alpha"] == pytest.approx(2.0, abs=1e-9)
    assert f["stable_rank"] == pytest.approx(lam.sum() / lam[0])
    assert f["participation_ratio"] == pytest.approx(lam.sum() ** 2 / (lam**2).sum())
    sigma = np.sqrt(lam)
    p = sigma / sigma.sum() + 1e-7
    assert f["rankme"] == pytest.approx(math.exp(-(p * np.log(p)).sum()))


def test_decay_uses_only_the_top_fifty_eigenvalues():
    i = np.arange(1, 81, dtype=float)
    lam = np.where(i <= 50, i**-1.0, 50.0**-1.0 * (i / 50) ** -4.0)  # kink after 50
    assert spectral.eigenspectrum_decay(lam) == pytest.approx(1.0, abs=1e-9)


def test_low_rank_cloud():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 3)) @ rng.normal(size=(3, 40))
    f = spectral.spectral_features(x)
    assert f["participation_ratio"] <= 3.0 + 1e-9
    assert f["rankme"] < 3.5


def test_pca_keeps_distances_of_a_low_rank_cloud_and_reports_variance():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(100, 4)) @ rng.normal(size=(4, 30)) + 5.0
    scores, explained = spectral.pca_project(x, 10)
    assert scores.shape == (100, 10)
    assert explained == pytest.approx(1.0)
    d_orig = np.linalg.norm(x[:, None] - x[None], axis=-1)
    d_pca = np.linalg.norm(scores[:, None] - scores[None], axis=-1)
    np.testing.assert_allclose(d_pca, d_orig, atol=1e-8)


def test_pca_dimension_is_capped_by_points_and_features():
    x = np.random.default_rng(4).normal(size=(20, 8))
    assert spectral.pca_project(x, 50)[0].shape == (20, 8)
    assert spectral.pca_project(x.T, 50)[0].shape == (8, 7)


def test_bad_clouds_are_refused():
    with pytest.raises(ValueError, match="at least 2 points"):
        spectral.spectral_features(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="NaN"):
        spectral.spectral_features(np.array([[1.0, np.inf], [0.0, 0.0]]))
