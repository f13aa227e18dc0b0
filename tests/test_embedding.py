"""Scale-normalised PH features and bootstrap resamples of the texts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_series, neox_config, pythia_tokenizer

import run_experiments
from toposig.config import EmbeddingSettings, settings_hash
from toposig.model import embedding


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


def test_resamples_and_their_seed_enter_the_settings_hash():
    base = settings_hash(EmbeddingSettings(), "t", "float32")
    assert settings_hash(EmbeddingSettings(seed=1), "t", "float32") == base
    with_b = settings_hash(EmbeddingSettings(resamples=5), "t", "float32")
    assert with_b != base
    assert settings_hash(EmbeddingSettings(resamples=5, seed=1), "t", "float32") != with_b
    with pytest.raises(ValueError, match="--resamples"):
        EmbeddingSettings(resamples=-1)


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
    assert EmbeddingSettings().batch_size == "auto"
    assert embedding.resolve_batch_size("auto", "cpu", 200) == 32
    assert embedding.resolve_batch_size("auto", "cuda", 200) == 200  # backs off on OOM
    assert embedding.resolve_batch_size(8, "cuda", 200) == 8
    for bad in (0, "big"):
        with pytest.raises(ValueError, match="--batch-size"):
            EmbeddingSettings(batch_size=bad)
    assert embedding.resolve_dtype("auto", "cuda") == "bf16-autocast"
    assert embedding.resolve_dtype("auto", "cpu") == "float32"
    import torch

    assert embedding.weight_dtype("bf16-autocast") is torch.float32
    assert embedding.weight_dtype("bfloat16") is torch.bfloat16
    # the batch size never enters the hash; the precision does
    base = settings_hash(EmbeddingSettings(), "t", "float32")
    assert settings_hash(EmbeddingSettings(batch_size=7), "t", "float32") == base
    assert settings_hash(EmbeddingSettings(), "t", "bf16-autocast") != base
