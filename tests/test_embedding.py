"""Scale-normalised PH features and bootstrap resamples of the texts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_series, neox_config, pythia_tokenizer

import run_experiments
from toposig.config import RunSettings
from toposig.families.base import FamilyInputs
from toposig.families.embedding import EmbeddingFamily
from toposig.model import embedding
from toposig.model.placement import Placement


def circle_cloud(n: int = 80, radius: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0, 2 * np.pi, n)
    pts = np.zeros((n, 6))
    pts[:, 0], pts[:, 1] = radius * np.cos(theta), radius * np.sin(theta)
    return pts + rng.normal(scale=0.01, size=pts.shape)


def test_scaled_features_do_not_change_when_the_cloud_grows():
    small = embedding.layer_features(circle_cloud(), 50, 1, "auto").features
    big = embedding.layer_features(10 * circle_cloud(), 50, 1, "auto").features
    assert big["h1_total_persistence"] == pytest.approx(10 * small["h1_total_persistence"],
                                                        rel=1e-5)
    for q in (0, 1):
        for name in embedding.SCALED_NAMES:
            key = f"h{q}_{name}_scaled"
            assert big[key] == pytest.approx(small[key], rel=1e-5), key
    assert big["median_pairwise_distance"] == pytest.approx(
        10 * small["median_pairwise_distance"])
    # One long loop: its scaled lifetime is a fraction of the median distance (~1.3 r).
    assert 0.5 < small["h1_max_persistence_scaled"] < 1.5


def test_resamples_are_seeded_and_bracket_the_full_cloud():
    cloud = circle_cloud(120)
    spread = embedding.resampled_features(cloud, 50, 1, "auto", n_resamples=12, seed=3)
    again = embedding.resampled_features(cloud, 50, 1, "auto", n_resamples=12, seed=3)
    assert spread == again
    assert spread != embedding.resampled_features(cloud, 50, 1, "auto", 12, seed=4)
    full = embedding.layer_features(cloud, 50, 1, "auto").features
    s = spread["h1_max_persistence"]
    assert s["p2_5"] <= s["mean"] <= s["p97_5"] and s["std"] > 0
    assert s["p2_5"] * 0.8 <= full["h1_max_persistence"] <= s["p97_5"] * 1.2


def test_a_text_drawn_twice_is_one_point_of_the_complex():
    """A resample's repeated rows are identical, but the SVD gives their copies scores that
    differ in the last bits; the complex must see one point, not a ~1e-16 bar."""
    rng = np.random.default_rng(0)
    cloud = rng.normal(size=(200, 16)).astype(np.float32)
    idx = np.random.default_rng(42).integers(0, 200, size=200)
    n_distinct = np.unique(idx).size
    feats, diagrams, _, _ = embedding.ph_features(cloud[idx], 8, 1, "auto")
    assert feats["h0_n_features"] == n_distinct - 1  # one finite bar per merge
    assert diagrams[0].shape[0] == n_distinct
    finite = diagrams[0][np.isfinite(diagrams[0][:, 1])]
    assert (finite[:, 1] - finite[:, 0]).min() > 1e-3
    # the 8 components are fitted to the multiset: a drawn-twice text weighs twice
    once = embedding.ph_features(cloud[np.unique(idx)], 8, 1, "auto")[0]
    assert once["h1_total_persistence"] != feats["h1_total_persistence"]
    assert embedding.distinct_rows(cloud).tolist() == list(range(200))


def test_resamples_and_their_seed_enter_the_settings_hash():
    base = EmbeddingFamily().hash_of("t", "float32")
    assert EmbeddingFamily(seed=1).hash_of("t", "float32") == base
    with_b = EmbeddingFamily(resamples=5).hash_of("t", "float32")
    assert with_b != base
    assert EmbeddingFamily(resamples=5, seed=1).hash_of("t", "float32") != with_b
    with pytest.raises(ValueError, match="--resamples"):
        EmbeddingFamily(resamples=-1)


def test_resamples_through_the_pipeline(tmp_path, tokenizer_file, wikitext_dir):
    series = make_series(tmp_path / "s", [0, 5], pythia_tokenizer(tokenizer_file),
                         config=neox_config())
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(series), "--signatures", "embedding",
                                 "--n-texts", "40", "--max-length", "32", "--resamples", "4",
                                 "--out", str(out), "--no-progress"]) == 0
    recs = json.loads((out / "data" / "all_results.json").read_text())
    for r in recs:
        assert r["n_resamples"] == 4
        spread = r["features_resampled"]["h1_total_persistence_scaled"]
        assert spread["p2_5"] <= spread["p97_5"]
        assert "h1_total_persistence_scaled" in r["features"]


def test_batch_size_and_precision_choices():
    assert RunSettings().batch_size == "auto"
    cpu, gpu = Placement("cpu", "float32"), Placement("cuda", "bf16-autocast")
    assert cpu.batch_size("auto", 200) == 32
    assert gpu.batch_size("auto", 200) == 200  # backs off on OOM
    assert gpu.batch_size(8, 200) == 8
    for bad in (0, "big"):
        with pytest.raises(ValueError, match="--batch-size"):
            RunSettings(batch_size=bad)
    # resolved once: auto is CUDA with bf16 autocast for remote GPU workers, and on this
    # machine whatever torch finds; an explicit dtype is kept
    assert Placement.resolve("auto", "auto", remote_gpus=True) == gpu
    import torch

    assert Placement.resolve("cpu", "auto") == cpu
    assert Placement.resolve("cpu", "bfloat16").dtype == "bfloat16"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            Placement.resolve("cuda:1", "auto")
    assert (gpu.weight_dtype, gpu.autocast_bf16, gpu.cuda_device) == (torch.float32, True, "cuda")
    assert (cpu.weight_dtype, cpu.autocast_bf16, cpu.cuda_device) == (torch.float32, False, None)
    assert Placement("cpu", "bfloat16").weight_dtype is torch.bfloat16
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert Placement.of_model(model) == Placement("cpu", "bfloat16")
    # the batch size never enters the hash; the precision does
    family = EmbeddingFamily()

    def hashed(run: RunSettings, dtype: str) -> str:
        return family.settings_hash(FamilyInputs(["t"], [], run, {"embedding": family}), dtype)

    base = hashed(RunSettings(), "float32")
    assert hashed(RunSettings(batch_size=7), "float32") == base
    assert hashed(RunSettings(), "bf16-autocast") != base
    assert hashed(RunSettings(tokenizer="gpt2"), "float32") != base
