"""weightwatcher's heavy-tail metrics: against weightwatcher itself, and known answers."""

from __future__ import annotations

import contextlib
import io
import logging
import math

import numpy as np
import pytest
from conftest import ARCHITECTURES, causal_lm

from toposig.features import heavy_tail


def pareto_quantiles(n: int, alpha: float, xmin: float) -> np.ndarray:
    """n eigenvalues at the mid-quantiles of p(λ) ∝ λ^−α on [xmin, ∞), ascending."""
    q = (np.arange(n) + 0.5) / n
    return xmin * (1 - q) ** (-1 / (alpha - 1))


def with_spectrum(evals: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """A (rows, len(evals)) matrix whose squared singular values are ``evals``."""
    k = evals.size
    u, _ = np.linalg.qr(rng.standard_normal((rows, k)))
    v, _ = np.linalg.qr(rng.standard_normal((k, k)))
    return (u * np.sqrt(evals)) @ v.T


def naive_fit(evals: np.ndarray, thresh: float = 1e-5) -> dict[str, float]:
    """The fit written from the module docstring, one candidate xmin at a time."""
    x = np.sort(evals[evals > thresh])
    n = x.size
    small = n < 20
    alphas, ds, sigmas = [], [], []
    for i in range(n - 1):
        tail = x[i:]
        k = n - i
        s = float(np.sum(np.log(tail / x[i])))
        alpha, d = 0.0, 1.0
        if not small:
            alpha = 1 + k / s
            if alpha > 1:
                d = np.max(np.abs(1 - (tail / x[i]) ** (1 - alpha) - np.arange(k) / k))
        elif k >= 8 and s > 1e-12:
            alpha = 1 + (k - 1) / s
            d = np.max(np.abs(np.arange(k) / k - (1 - (tail / x[i]) ** (1 - alpha))))
        alphas.append(alpha)
        ds.append(d)
        sigmas.append((alpha - 1) / math.sqrt(k))
    i = int(np.argmin(ds))
    return {"alpha": alphas[i], "xmin": x[i], "D": ds[i], "sigma": sigmas[i],
            "num_pl_spikes": int(np.sum(evals >= x[i]))}


# ------------------------------------------------------------------------ the ESD


def test_esd_is_the_squared_singular_values_unnormalised():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((70, 30)).astype(np.float32)
    ev = heavy_tail.esd(w)
    assert ev.shape == (30,) and ev.dtype == np.float64
    assert np.all(np.diff(ev) >= 0)
    sv = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(ev, np.sort(sv**2), rtol=1e-12)
    # the eigenvalues of the smaller Gram matrix, not divided by N (or M)
    np.testing.assert_allclose(ev, np.linalg.eigvalsh(w.T.astype(np.float64) @ w), rtol=1e-9)
    np.testing.assert_allclose(heavy_tail.esd(w.T), ev, rtol=1e-12)
    # orthonormal columns: every eigenvalue 1, whatever N
    q, _ = np.linalg.qr(rng.standard_normal((500, 20)))
    np.testing.assert_allclose(heavy_tail.esd(q), np.ones(20), rtol=1e-12)


def test_esd_gram_method_agrees():
    rng = np.random.default_rng(1)
    for shape in [(64, 32), (40, 90), (128, 128), (1, 7), (7, 1)]:
        w = rng.standard_normal(shape)
        svd = heavy_tail.esd(w, method="svd")
        for given in (w, np.asfortranarray(w), w.astype(np.float32), w.T.copy().T):
            gram = heavy_tail.esd(given, method="gram")
            np.testing.assert_allclose(gram, heavy_tail.esd(given, method="svd"),
                                       rtol=1e-8, atol=1e-14 * svd.max())
        assert np.array_equal(heavy_tail.esd(w), heavy_tail.esd(w, method="gram"))
    with pytest.raises(ValueError, match="method"):
        heavy_tail.esd(w, method="eig")


def test_invalid_input():
    with pytest.raises(ValueError, match="2-D"):
        heavy_tail.esd(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="NaN"):
        heavy_tail.esd(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        heavy_tail.powerlaw_alpha(np.array([1.0, np.inf]))
    with pytest.raises(ValueError):
        heavy_tail.powerlaw_alpha(np.array([]))


# ------------------------------------------------------------------------ the fit


@pytest.mark.parametrize("alpha", [2.0, 2.5, 3.0, 4.5])
def test_exact_power_law_spectrum_gives_its_alpha(alpha):
    rng = np.random.default_rng(2)
    lam = pareto_quantiles(200, alpha, 0.1)
    w = with_spectrum(lam, 300, rng)
    fit = heavy_tail.powerlaw_alpha(w)
    assert fit["alpha"] == pytest.approx(alpha, rel=0.01)
    assert fit["num_pl_spikes"] == 200  # the whole spectrum is the tail
    assert fit["lambda_max"] == pytest.approx(lam.max(), rel=1e-10)
    assert fit["D"] < 0.01
    # from the eigenvalues (any order), the same fit
    assert heavy_tail.powerlaw_alpha(rng.permutation(lam))["alpha"] == pytest.approx(
        fit["alpha"], rel=1e-10)


def test_power_law_tail_above_a_bulk_is_found():
    rng = np.random.default_rng(3)
    bulk = rng.uniform(0.01, 0.5, 300)
    tail = pareto_quantiles(300, 2.5, 1.0)
    fit = heavy_tail.powerlaw_alpha(np.concatenate([bulk, tail]))
    assert fit["xmin"] == pytest.approx(1.0, rel=0.05)
    assert fit["alpha"] == pytest.approx(2.5, rel=0.05)
    assert 280 <= fit["num_pl_spikes"] <= 320


@pytest.mark.parametrize("n", [12, 19, 20, 300])
def test_fit_matches_the_definition(n, monkeypatch):
    """Both paths (fewer than 20 eigenvalues: the small-n fit), the KS distances in
    many small blocks, the threshold, against a one-candidate-at-a-time loop."""
    monkeypatch.setattr(heavy_tail, "_BLOCK_ELEMENTS", 1000)
    rng = np.random.default_rng(n)
    evals = np.concatenate([rng.standard_t(2.5, n) ** 2, [0.0, 1e-7, 1e-5]])
    ours = heavy_tail.powerlaw_alpha(evals)
    ref = naive_fit(evals)
    for key in ("alpha", "xmin", "D", "sigma", "num_pl_spikes"):
        assert ours[key] == pytest.approx(ref[key], rel=1e-12), key
    assert ours["num_evals"] == n + 3
    assert ours["xmax"] == evals.max() == ours["lambda_max"]


def test_too_few_eigenvalues_give_nan():
    w = np.outer(np.arange(1.0, 11.0), np.ones(10))  # rank 1: one eigenvalue above 1e-5
    fit = heavy_tail.powerlaw_alpha(w)
    assert math.isnan(fit["alpha"]) and math.isnan(fit["D"])
    assert fit["lambda_max"] == pytest.approx(385.0 * 10)
    feats = heavy_tail.heavy_tail_features(w)
    assert math.isnan(feats["ww_pl_alpha"]) and math.isnan(feats["ww_weighted_alpha"])
    assert feats["stable_rank"] == pytest.approx(1.0)


# ------------------------------------------------------------------------ norms, features


def test_norms_match_numpy():
    rng = np.random.default_rng(4)
    for shape in [(50, 20), (20, 50), (33, 33)]:
        w = rng.standard_normal(shape).astype(np.float32)
        w64 = w.astype(np.float64)
        spec = np.linalg.norm(w64, ord=2)
        fro = np.linalg.norm(w64, ord="fro")
        assert heavy_tail.spectral_norm(w) == pytest.approx(spec, rel=1e-12)
        assert heavy_tail.frobenius_norm(w) == pytest.approx(fro, rel=1e-12)
        assert heavy_tail.stable_rank(w) == pytest.approx(fro**2 / spec**2, rel=1e-12)
        feats = heavy_tail.heavy_tail_features(w)
        assert feats["spectral_norm"] == pytest.approx(spec, rel=1e-12)
        assert feats["frobenius_norm"] == pytest.approx(fro, rel=1e-12)
        assert feats["ww_lambda_max"] == pytest.approx(spec**2, rel=1e-12)


def test_features_names_and_small_matrices():
    names = heavy_tail.HEAVY_TAIL_NAMES
    assert len(set(names)) == len(names)
    assert not any(a != b and b.startswith(a) for a in names for b in names)  # prefix-free
    rng = np.random.default_rng(5)
    feats = heavy_tail.heavy_tail_features(rng.standard_normal((100, 40)))
    assert tuple(feats) == names
    assert all(type(v) is float and math.isfinite(v) for v in feats.values())
    fit = heavy_tail.powerlaw_alpha(rng.standard_normal((100, 40)))
    assert set(heavy_tail.FIT_KEYS) == set(fit)
    # fewer than min_evals = 8 eigenvalues: weightwatcher skips the layer
    small = rng.standard_normal((10, 5))
    feats = heavy_tail.heavy_tail_features(small)
    assert all(math.isnan(v) for k, v in feats.items() if k.startswith("ww_"))
    assert feats["frobenius_norm"] == pytest.approx(np.linalg.norm(small))
    assert math.isfinite(heavy_tail.heavy_tail_features(small, min_evals=0)["ww_pl_alpha"])
    feats = heavy_tail.heavy_tail_features(np.zeros((20, 10)))
    assert feats["frobenius_norm"] == 0.0 and math.isnan(feats["stable_rank"])


# ------------------------------------------------------------------------ weightwatcher


def linear_stack(torch, mats: list[np.ndarray]):
    """A ``torch.nn.Sequential`` of ``Linear`` layers whose weights are ``mats``, (out, in)
    each, as weightwatcher walks a model."""
    model = torch.nn.Sequential()
    for m in mats:
        lin = torch.nn.Linear(m.shape[1], m.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(m))
        model.append(lin)
    return model


# weightwatcher 0.7.7 builds its table with a call pandas 3 deprecates
@pytest.mark.filterwarnings("ignore:Passing a dict to DataFrame.from_records")
def test_matches_weightwatcher_analyze():
    """Layer by layer against ``WeightWatcher().analyze()`` with its defaults.

    On a CPU weightwatcher reads the float32 weights and squares the singular values of
    SciPy's SVD in float64; we take the eigenvalues of the float64 Gram matrix (issue 38).
    Both are backward stable, so an eigenvalue differs by a few ε·λ_max, which is more,
    relative to it, for a small one: the largest difference here is 1.3e-12 relative, in
    an xmin, with OpenBLAS's AVX-512 kernels (5e-13 with its AVX2 ones, 2026-11-29). The
    tolerance is rel 1e-11 (issue 38 asked for 1e-9), the counts exact. With CUDA,
    weightwatcher reads the weights as float16 and its default SVD runs in float32 on the
    GPU: there we give it ``svd_method="accurate"`` and ourselves the float16-rounded
    weights.
    """
    ww = pytest.importorskip("weightwatcher")
    torch = pytest.importorskip("torch")
    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    rng = np.random.default_rng(6)
    mats = [
        rng.standard_normal((64, 32)) * 0.1,  # Marchenko-Pastur bulk
        rng.standard_t(2.0, (128, 128)) * 0.05,  # heavy-tailed entries
        rng.standard_normal((300, 4)) @ rng.standard_normal((4, 100)) * 0.2
        + rng.standard_normal((300, 100)) * 0.02,  # low rank plus noise
        rng.standard_t(3.0, (100, 300)) * 0.05,
        with_spectrum(pareto_quantiles(90, 2.5, 0.05), 200, rng).T,  # a power law, 90x200
        rng.standard_normal((30, 15)) * 0.2,  # 15 eigenvalues: the small-n fit
        rng.standard_normal((5, 10)),  # 5 eigenvalues < min_evals: skipped
    ]
    model = linear_stack(torch, mats)
    cuda = torch.cuda.is_available()
    kwargs = {"svd_method": "accurate"} if cuda else {}
    with contextlib.redirect_stdout(io.StringIO()):  # its small-n fit prints
        details = ww.WeightWatcher(model=model).analyze(**kwargs)
    rows = {str(r["longname"]): r for r in details.to_dict("records")}
    assert set(rows) == {str(i) for i in range(len(mats) - 1)}  # the 5x10 layer skipped

    tight = {"rel": 1e-11, "abs": 0.0}
    for i, lin in enumerate(model):
        w = lin.weight.detach()
        w = (w.half().float() if cuda else w).numpy()
        feats = heavy_tail.heavy_tail_features(w)
        if str(i) not in rows:
            assert min(w.shape) < heavy_tail.MIN_EVALS
            assert math.isnan(feats["ww_pl_alpha"])
            continue
        row = rows[str(i)]
        fit = heavy_tail.powerlaw_alpha(w)
        assert fit == heavy_tail.powerlaw_alpha(heavy_tail.esd(w))
        for key in ("alpha", "xmin", "xmax", "D", "sigma", "num_pl_spikes", "lambda_max",
                    "num_evals"):
            assert fit[key] == pytest.approx(row[key], **tight), (i, key)
        expected = {
            "ww_pl_alpha": row["alpha"], "ww_pl_xmin": row["xmin"],
            "ww_pl_xmax": row["xmax"], "ww_pl_ks_distance": row["D"],
            "ww_pl_sigma": row["sigma"], "ww_pl_num_spikes": row["num_pl_spikes"],
            "ww_weighted_alpha": row["alpha_weighted"],
            "ww_log_alpha_norm": row["log_alpha_norm"],
            "ww_lambda_max": row["lambda_max"], "ww_num_evals": row["num_evals"],
            "spectral_norm": row["sv_max"], "stable_rank": row["stable_rank"],
        }
        for key, value in expected.items():
            assert feats[key] == pytest.approx(value, **tight), (i, key)
        # weightwatcher's norm names: spectral_norm = σ_max², norm = ‖W‖_F²
        assert feats["spectral_norm"] ** 2 == pytest.approx(row["spectral_norm"], **tight)
        assert feats["frobenius_norm"] ** 2 == pytest.approx(row["norm"], **tight)
        assert row["status"] == "success"


@pytest.mark.filterwarnings("ignore:Passing a dict to DataFrame.from_records")
def test_checkpoint_means_match_weightwatcher_summary():
    """The weight stage's mean α and weighted α are ``get_summary()``'s ``alpha`` and
    ``alpha_weighted`` over the same layers (a layer below 8 eigenvalues counts in
    neither)."""
    ww = pytest.importorskip("weightwatcher")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("weightwatcher reads float16 weights with CUDA")
    from toposig.features import weights

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    rng = np.random.default_rng(3)
    mats = [rng.standard_normal((64, 32)) * 0.1, rng.standard_t(2.0, (128, 128)) * 0.05,
            rng.standard_t(3.0, (100, 300)) * 0.05, rng.standard_normal((30, 15)) * 0.2,
            rng.standard_normal((5, 10))]
    model = linear_stack(torch, mats)
    watcher = ww.WeightWatcher(model=model)
    with contextlib.redirect_stdout(io.StringIO()):
        summary = watcher.get_summary(watcher.analyze())
    sig = weights.weight_signatures(
        {str(i): lin.weight.detach().numpy() for i, lin in enumerate(model)})
    assert sig.features["weight_alpha_mean"] == pytest.approx(summary["alpha"], rel=1e-12)
    assert sig.features["weight_alpha_weighted_mean"] == pytest.approx(
        summary["alpha_weighted"], rel=1e-12)


WW_KEYS = {"ww_pl_alpha": "alpha", "ww_pl_xmin": "xmin", "ww_pl_xmax": "xmax",
           "ww_pl_ks_distance": "D", "ww_pl_sigma": "sigma",
           "ww_pl_num_spikes": "num_pl_spikes", "ww_weighted_alpha": "alpha_weighted",
           "ww_log_alpha_norm": "log_alpha_norm", "ww_lambda_max": "lambda_max",
           "ww_num_evals": "num_evals", "spectral_norm": "sv_max",
           "stable_rank": "stable_rank"}


@pytest.mark.filterwarnings("ignore:Passing a dict to DataFrame.from_records")
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_weight_stages_spectra_equal_weightwatchers_on_every_architecture(arch):
    """Every matrix the weight stage analyses in a tiny model of each architecture (Gram
    eigenvalues, :data:`heavy_tail.ESD_METHOD`), against ``WeightWatcher.analyze()`` on
    the same matrices (its SVD in float64): α, λ_max, the whole fit and the norms to
    1e-9 relative."""
    ww = pytest.importorskip("weightwatcher")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("weightwatcher reads float16 weights with CUDA")
    from toposig.features import weights
    from toposig.model.matrices import model_matrices

    assert heavy_tail.ESD_METHOD == "gram"
    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    # one block of hidden size 32: square and rectangular matrices (both ways), each of
    # at least 8 eigenvalues
    mats = {n: w.float().numpy() for n, w in model_matrices(causal_lm(arch, layers=1)).items()}
    model = linear_stack(torch, list(mats.values()))
    with contextlib.redirect_stdout(io.StringIO()):
        rows = {int(r["longname"]): r for r in
                ww.WeightWatcher(model=model).analyze().to_dict("records")}
    sig = weights.weight_signatures(mats, max_rows=8)
    shapes = set()
    for i, entry in enumerate(sig.matrices):
        lin = model[i]
        assert np.array_equal(lin.weight.detach().numpy(), mats[entry["name"]])
        shapes.add(tuple(entry["shape"]))
        if i not in rows:  # fewer than 8 eigenvalues: weightwatcher skips it
            assert min(entry["shape"]) < heavy_tail.MIN_EVALS
            continue
        for ours, theirs in WW_KEYS.items():
            assert entry[ours] == pytest.approx(rows[i][theirs], rel=1e-9, abs=0.0), \
                (arch, entry["name"], ours)
    assert len(shapes) >= 2, shapes  # square and rectangular (both ways) where it has them
