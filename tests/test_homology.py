"""Known answers for Vietoris–Rips persistence, diagram features and diagram distances."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from toposig.features import homology


def circle(n: int, noise: float = 0.0, seed: int = 0, dim: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = 2 * np.pi * np.arange(n) / n if noise == 0 else rng.uniform(0, 2 * np.pi, n)
    pts = np.c_[np.cos(theta), np.sin(theta)] + noise * rng.normal(size=(n, 2))
    if dim > 2:  # isometric embedding in R^dim by a random orthonormal frame
        q, _ = np.linalg.qr(rng.normal(size=(dim, 2)))
        pts = pts @ q.T
    return pts


def test_evenly_spaced_circle_has_one_h1_bar_with_analytic_birth_and_death():
    # 100 points evenly on the unit circle: the loop is born when neighbours connect
    # (chord of 1 step) and dies when k/n first exceeds 1/3 (Adamaszek & Adams 2017):
    # k = 34 steps, chord 2 sin(34 pi / 100).
    dgms, _ = homology.vietoris_rips(circle(100), maxdim=1)
    h1 = dgms[1]
    assert len(h1) == 1
    birth, death = h1[0]
    assert birth == pytest.approx(2 * math.sin(math.pi / 100), abs=1e-5)
    assert death == pytest.approx(2 * math.sin(34 * math.pi / 100), abs=1e-5)
    # H0: 99 finite bars all born at 0, dying at the neighbour chord; plus the infinite bar.
    assert np.isinf(dgms[0][:, 1]).sum() == 1
    assert homology.diagram_features(dgms[0])["n_features"] == 99


def test_noisy_circle_in_high_dimension_has_one_dominant_loop():
    dgms, _ = homology.vietoris_rips(circle(100, noise=0.1, seed=1, dim=50), maxdim=1)
    life = np.sort(homology.finite_lifetimes(dgms[1]))[::-1]
    assert len(life) >= 2  # noise makes small loops too
    assert life[0] > 1.0
    assert life[0] > 10 * life[1]


@pytest.mark.parametrize("shape", [(200, 50), (60, 3)])
def test_every_installed_backend_gives_identical_diagrams(shape):
    backends = homology.available_backends()
    assert len(backends) >= 2, "install at least two of ripser, giotto-ph, gudhi"
    cloud = np.random.default_rng(7).normal(size=shape)
    reference, _ = homology.vietoris_rips(cloud, maxdim=1, backend=backends[0])
    for b in backends[1:]:
        dgms, used = homology.vietoris_rips(cloud, maxdim=1, backend=b)
        assert used == b
        for q in (0, 1):
            np.testing.assert_array_equal(dgms[q], reference[q])


def _wrappers_diagrams(backend: str, dist: np.ndarray, maxdim: int) -> list:
    """The diagrams of the library's own Python wrapper (which imports scikit-learn)."""
    if backend == "ripser":
        ripser = pytest.importorskip("ripser")
        return ripser.ripser(dist, maxdim=maxdim, distance_matrix=True)["dgms"]
    gph = pytest.importorskip("gph")
    return gph.ripser_parallel(dist, metric="precomputed", maxdim=maxdim, n_threads=1)["dgms"]


@pytest.mark.parametrize("backend", ["ripser", "giotto-ph"])
@pytest.mark.parametrize("cloud", ["normal", "ties", "duplicates", "two points", "one point"])
@pytest.mark.parametrize("maxdim", [0, 1, 2])
def test_the_ripser_and_giotto_cores_give_their_wrappers_diagrams(backend, cloud, maxdim):
    """The ripser and giotto-ph backends call their library's C++ core directly (no
    scikit-learn import); the raw diagrams equal those of ``ripser.ripser`` and
    ``gph.ripser_parallel`` themselves, bit for bit, on clouds with distinct, tied (a
    grid) and repeated points, and on the smallest clouds."""
    rng = np.random.default_rng(3)
    points = {"normal": rng.normal(size=(40, 6)),
              "ties": np.array([[i, j] for i in range(6) for j in range(6)], dtype=float),
              "duplicates": np.repeat(rng.normal(size=(12, 4)), 3, axis=0),
              "two points": np.array([[0.0, 0.0], [3.0, 4.0]]),
              "one point": np.zeros((1, 3))}[cloud]
    if cloud == "normal" and maxdim == 2:
        points = points[:25]
    dist = homology.distance_matrix(points)
    theirs = _wrappers_diagrams(backend, dist, maxdim)
    if backend == "giotto-ph":
        assert homology._giotto_core() is not None  # the core itself, not the fallback
    ours = homology._BACKENDS[backend](dist, maxdim)
    assert len(ours) == len(theirs) == maxdim + 1
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == np.float64 and a.shape == np.asarray(b).reshape(-1, 2).shape
        np.testing.assert_array_equal(a, np.asarray(b).reshape(-1, 2))


@pytest.mark.parametrize("backend", ["ripser", "giotto-ph"])
def test_importing_the_ripser_and_giotto_backends_does_not_import_scikit_learn(backend):
    code = ("import sys, numpy as np; from toposig.features import homology; "
            "homology.vietoris_rips(np.random.default_rng(0).normal(size=(30, 3)), "
            f"backend={backend!r}); print('sklearn' in sys.modules)")
    src = Path(__file__).resolve().parents[1] / "src"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "False"


def test_the_installed_backends_are_looked_up_once_per_process(monkeypatch):
    calls = []
    real = homology.importlib.util.find_spec
    monkeypatch.setattr(homology.importlib.util, "find_spec",
                        lambda name, *a: calls.append(name) or real(name, *a))
    forget = getattr(homology._installed_backends, "cache_clear", lambda: None)
    forget()
    try:
        for _ in range(50):
            homology.resolve_backend("auto")
            homology.resolve_backend("ripser")
        assert sorted(calls) == sorted(homology._MODULE_OF_BACKEND.values())
        homology.available_backends().clear()  # a caller's list is its own
        assert homology.available_backends()
    finally:
        forget()


def test_auto_backend_is_the_first_installed_and_bad_names_are_refused():
    assert homology.resolve_backend("auto") == homology.available_backends()[0]
    with pytest.raises(ValueError, match="unknown PH backend 'dionysus'"):
        homology.resolve_backend("dionysus")


def test_entropy_of_equal_bars_is_log_count():
    for m in (1, 5, 37):
        diagram = np.c_[np.zeros(m), np.full(m, 0.7)]
        assert homology.diagram_features(diagram)["persistence_entropy"] == pytest.approx(
            math.log(m)
        )


def test_diagram_features_by_hand():
    diagram = np.array([[0.0, 1.0], [0.5, 2.5], [1.0, 4.0], [0.0, 4.0], [2.0, 2.0],
                        [0.0, np.inf]])
    f = homology.diagram_features(diagram)  # lifetimes 1, 2, 3, 4; zero bar and inf dropped
    life = np.array([1.0, 2.0, 3.0, 4.0])
    p = life / life.sum()
    assert f["n_features"] == 4
    assert f["total_persistence"] == 10
    assert f["mean_persistence"] == 2.5
    assert f["max_persistence"] == 4
    assert f["std_persistence"] == pytest.approx(np.std(life))
    assert f["persistence_entropy"] == pytest.approx(-(p * np.log(p)).sum())
    assert f["n_significant"] == 2  # strictly above the median 2.5


def test_diagram_features_equal_numpys_definitions_to_the_bit():
    """The features are computed without np.mean, np.std and np.median (a third of the
    time); they are the values those give, bit for bit, on diagrams of every size (odd
    and even, for the median), with ties, infinite bars, zero bars and scales apart."""
    rng = np.random.default_rng(38)
    for _ in range(3000):
        m = int(rng.integers(1, 60))
        births = rng.random(m) * rng.choice([1e-3, 1.0, 1e3])
        deaths = births + rng.random(m) * rng.choice([1e-6, 1.0, 1e4])
        if rng.random() < 0.3:  # tied lifetimes around the median
            deaths[: m // 2] = births[: m // 2] + rng.choice([0.5, 0.25])
        if rng.random() < 0.2:
            deaths[0] = np.inf
        if rng.random() < 0.2:
            deaths[-1] = births[-1]
        f = homology.diagram_features(np.stack([births, deaths], axis=1))
        life = homology.finite_lifetimes(np.stack([births, deaths], axis=1))
        if life.size == 0:
            continue
        expected = {
            "n_features": float(life.size), "total_persistence": float(life.sum()),
            "mean_persistence": float(life.mean()), "max_persistence": float(life.max()),
            "std_persistence": float(life.std()),
            "persistence_entropy": homology.persistence_entropy(life),
            "n_significant": float(np.count_nonzero(life > np.median(life)))}
        assert f == expected
        assert all(type(v) is float for v in f.values())


def test_empty_diagram_features_are_zero():
    f = homology.diagram_features(np.empty((0, 2)))
    assert all(v == 0.0 for v in f.values())
    assert set(f) == set(homology.FEATURE_NAMES)


def brute_force_wasserstein(a: np.ndarray, b: np.ndarray, ground: float) -> float:
    """Order-1 Wasserstein by an explicit assignment with diagonal copies."""
    def dist(u, v):
        return np.linalg.norm(u - v, ord=ground)

    def to_diag(u):
        mid = (u[0] + u[1]) / 2
        return dist(u, np.array([mid, mid]))

    m, k = len(a), len(b)
    cost = np.zeros((m + k, m + k))
    for i in range(m):
        for j in range(k):
            cost[i, j] = dist(a[i], b[j])
        cost[i, k:] = to_diag(a[i])
    for j in range(k):
        cost[m:, j] = to_diag(b[j])
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].sum())


def test_wasserstein_known_answers_and_identity():
    single = np.array([[0.0, 2.0]])
    empty = np.empty((0, 2))
    assert homology.wasserstein(single, empty) == pytest.approx(1.0)  # L-inf: half the bar
    assert homology.wasserstein(single, empty, internal_p=2) == pytest.approx(math.sqrt(2))
    d, _ = homology.vietoris_rips(np.random.default_rng(3).normal(size=(80, 5)), maxdim=1)
    assert homology.wasserstein(d[1], d[1]) == 0.0
    assert homology.wasserstein_persim(d[1], d[1]) == 0.0


def test_wasserstein_agrees_with_brute_force_and_with_persim():
    rng = np.random.default_rng(11)
    a, _ = homology.vietoris_rips(rng.normal(size=(60, 4)), maxdim=1)
    b, _ = homology.vietoris_rips(1.3 * rng.normal(size=(60, 4)), maxdim=1)
    for q in (0, 1):
        fa, fb = (d[q][np.isfinite(d[q][:, 1])] for d in (a, b))
        assert homology.wasserstein(a[q], b[q]) == pytest.approx(
            brute_force_wasserstein(fa, fb, np.inf), rel=1e-6)
        hera_l2 = homology.wasserstein(a[q], b[q], internal_p=2)
        assert hera_l2 == pytest.approx(brute_force_wasserstein(fa, fb, 2), rel=1e-6)
        assert homology.wasserstein_persim(a[q], b[q]) == pytest.approx(hera_l2, rel=1e-6)


def test_bad_point_clouds_are_refused():
    with pytest.raises(ValueError, match="2-D"):
        homology.vietoris_rips(np.zeros(5))
    with pytest.raises(ValueError, match="NaN"):
        homology.vietoris_rips(np.array([[0.0, np.nan], [1.0, 1.0]]))


def test_betti_curve_equals_gudhis():
    from gudhi.representations import BettiCurve

    rng = np.random.default_rng(4)
    births = rng.random(40)
    diagram = np.vstack([np.stack([births, births + rng.random(40)], axis=1),
                         [[0.2, np.inf], [0.5, 0.5]]])  # an infinite and a zero-length bar
    for grid in (np.linspace(0.0, 2.5, 57), np.unique(diagram[np.isfinite(diagram)])):
        want = BettiCurve(predefined_grid=grid).fit_transform([diagram])[0]
        np.testing.assert_array_equal(homology.betti_curve(diagram, grid), want)
    assert homology.betti_curve(np.empty((0, 2)), np.array([0.0, 1.0])).tolist() == [0, 0]


def test_vietoris_rips_names_its_two_results_and_still_unpacks():
    result = homology.vietoris_rips(circle(40), maxdim=1)
    dgms, used = result
    assert result.diagrams is dgms and result.backend == used
    assert repr(result) == (f"Persistence(H0: {len(dgms[0])} bars, H1: {len(dgms[1])} bars; "
                            f"by {used})")
