"""The ``drift`` family (representational similarity across checkpoints): linear CKA
against its kernel definition, its invariances, the k-NN overlap, and end to end: the
features made from the records' clouds model by model, the same when the aggregates are
rebuilt from the records, a damaged cloud's checkpoint left out and one without its
array leaving the model's undefined, not the folder unreadable."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import run_experiments
from toposig.features.drift import drift_series, knn_overlap, linear_cka
from toposig.run.aggregates import rebuild_if_stale
from toposig.run.store import load_arrays

FAST = ["--no-progress", "--n-texts", "20", "--max-length", "24", "--drift-k", "4"]


def clouds(n: int = 40, d: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, x @ rng.normal(size=(d, 12)) + 0.5 * rng.normal(size=(n, 12))


def cka_by_kernels(x: np.ndarray, y: np.ndarray) -> float:
    """HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) with linear kernels and the centring
    matrix (Kornblith et al. 2019, eq. 3): the definition, computed another way."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n
    k, ell = h @ x @ x.T @ h, h @ y @ y.T @ h
    return float(np.sum(k * ell) / np.sqrt(np.sum(k * k) * np.sum(ell * ell)))


def test_cka_is_its_kernel_definition_one_with_itself_and_invariant():
    x, y = clouds()
    assert linear_cka(x, y) == pytest.approx(cka_by_kernels(x, y), rel=1e-10)
    assert linear_cka(x, x) == pytest.approx(1.0, rel=1e-12)
    q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(16, 16)))
    assert linear_cka(x @ q * 3.7 + 5.0, y) == pytest.approx(linear_cka(x, y), rel=1e-10)
    unrelated = np.random.default_rng(2).normal(size=x.shape)
    assert linear_cka(x, unrelated) < 0.6 < linear_cka(x, y)
    assert linear_cka(np.ones((5, 3)), x[:5]) is None  # no variance
    with pytest.raises(ValueError, match="the same"):
        linear_cka(x, y[:-1])


def test_the_knn_overlap_is_one_with_itself_and_falls_when_texts_are_shuffled():
    x, _ = clouds()
    assert knn_overlap(x, x * 2.0, k=5) == 1.0
    shuffled = x[np.random.default_rng(3).permutation(len(x))]
    assert knn_overlap(x, shuffled, k=5) < 0.3


def test_each_checkpoint_is_related_to_the_previous_and_the_last():
    x, y = clouds()
    z = clouds(seed=4)[0]
    got = drift_series([x, y, z], k=5)
    assert got[0]["drift_cka_prev"] is None and got[0]["drift_knn_prev"] is None
    assert got[1]["drift_cka_prev"] == linear_cka(x, y)
    assert got[2]["drift_cka_last"] == pytest.approx(1.0) and got[2]["drift_knn_last"] == 1.0
    assert got[0]["drift_cka_last"] == linear_cka(x, z)
    broken = y.copy()
    broken[3, 1] = np.nan  # a precision's overflow at the middle checkpoint
    around = drift_series([x, broken, z], k=5)
    assert all(v is None for v in around[1].values())
    assert around[2]["drift_cka_prev"] == linear_cka(x, z)  # related around it
    assert around[0]["drift_knn_last"] == knn_overlap(x, z, 5)


def test_the_gram_form_of_cka_is_the_feature_space_form():
    rng = np.random.default_rng(5)
    wide, other = rng.normal(size=(30, 80)), rng.normal(size=(30, 60))  # n < d: Gram form
    a, b = wide - wide.mean(0), other - other.mean(0)
    plain = np.linalg.norm(b.T @ a) ** 2 / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))
    assert linear_cka(wide, other) == pytest.approx(plain, rel=1e-10)
    assert linear_cka(wide, other) == pytest.approx(cka_by_kernels(wide, other), rel=1e-10)


@pytest.fixture()
def drifted(tiny_series, wikitext_dir, tmp_path):
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tiny_series), "--signatures", "drift",
                                 "--out", str(out), *FAST]) == 0
    return out


def entries(out):
    return json.loads((out / "data" / "all_results.json").read_text())


def test_a_run_relates_its_checkpoints_from_their_clouds_and_a_rebuild_agrees(drifted):
    got = entries(drifted)
    assert [e["step"] for e in got] == [0, 10, 100]
    pooled = [load_arrays(drifted, e["drift"]["arrays_file"])["pooled"] for e in got]
    assert pooled[0].shape == (20, 32)
    assert got[0]["features"]["drift_cka_prev"] is None
    assert got[1]["features"]["drift_cka_prev"] == pytest.approx(linear_cka(*pooled[:2]))
    assert got[1]["features"]["drift_knn_last"] == pytest.approx(
        knn_overlap(pooled[1], pooled[2], 4))
    assert got[2]["features"]["drift_cka_last"] == pytest.approx(1.0)
    record = json.loads(next((drifted / "records").rglob("step000010.json")).read_text())
    assert record["features"] == {}  # the record holds the cloud; the entry the relation
    (drifted / "data" / "all_results.json").unlink()
    assert rebuild_if_stale(drifted)
    assert entries(drifted) == got


def test_a_damaged_cloud_is_left_out_and_one_without_its_array_undefines_the_model(
        drifted, caplog):
    npz = next((drifted / "records").rglob("step000010.npz"))
    npz.write_bytes(b"not an npz")  # its record is unfinished: to be computed again
    (drifted / "data" / "all_results.json").unlink()
    assert rebuild_if_stale(drifted)
    got = entries(drifted)
    assert [e["step"] for e in got] == [0, 100]  # related around it
    assert got[1]["features"]["drift_cka_prev"] == got[0]["features"]["drift_cka_last"]
    np.savez(npz, other=np.zeros(3))  # a sound file without the cloud
    (drifted / "data" / "all_results.json").unlink()
    with caplog.at_level(logging.WARNING):
        assert rebuild_if_stale(drifted)
    assert "the drift features of tiny_series0 are left out" in caplog.text
    for e in entries(drifted):
        assert all(e["features"][k] is None for k in ("drift_cka_prev", "drift_cka_last"))
