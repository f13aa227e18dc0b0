"""The ``dimension`` family (intrinsic dimension of the hidden states): its numbers are
scikit-dimension's, a cloud of known dimension gives it, a repeated point counts once,
and end to end with the embedding on every layer, one forward pass, each family's
features in its own rows of the table."""

from __future__ import annotations

import json

import numpy as np
import pytest
import skdim
from conftest import causal_lm

import run_experiments
import toposig
from toposig.families.dimension import DimensionFamily
from toposig.features.intrinsic_dimension import distinct_points, intrinsic_dimensions
from toposig.model.training import byte_tokenizer

FAST = ["--no-progress", "--n-texts", "30", "--max-length", "24"]


def cloud(n: int = 300, dim: int = 5, ambient: int = 64, seed: int = 0) -> np.ndarray:
    """Gaussian points on a random ``dim``-dimensional subspace of ``ambient`` dimensions."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, dim)) @ rng.normal(size=(dim, ambient))


def test_the_numbers_are_scikit_dimensions():
    x = cloud(dim=7)
    got = intrinsic_dimensions(x, discard_fraction=0.2, k=15)
    assert got["id_twonn"] == skdim.id.TwoNN(discard_fraction=0.2).fit(x).dimension_
    assert got["id_mle"] == skdim.id.MLE().fit(x, n_neighbors=15).dimension_


@pytest.mark.parametrize("dim", [2, 5, 10])
def test_a_cloud_of_known_dimension_gives_it(dim):
    got = intrinsic_dimensions(cloud(n=1000, dim=dim))
    assert got["id_twonn"] == pytest.approx(dim, rel=0.15)
    assert got["id_mle"] == pytest.approx(dim, rel=0.2)


def test_a_repeated_point_counts_once_and_too_few_give_none():
    x = cloud(n=100)
    twice = np.concatenate([x, x[:10]])  # ten texts analysed twice: distances of 0
    assert intrinsic_dimensions(twice) == intrinsic_dimensions(x)
    np.testing.assert_array_equal(distinct_points(twice), x)
    assert intrinsic_dimensions(x[:11], k=10) == {"id_twonn": None, "id_mle": None}
    with pytest.raises(ValueError, match="NaN or inf"):
        intrinsic_dimensions(np.full((20, 3), np.nan))


def test_its_records_hold_every_layer_and_the_table_keeps_the_families_apart(
        tiny_series, wikitext_dir, tmp_path):
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tiny_series), "--signatures",
                                 "embedding,dimension", "--layers", "all", "--out", str(out),
                                 *FAST]) == 0
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["dimension_settings"]["layers"] == "all"
    entries = json.loads((out / "data" / "all_results.json").read_text())
    for e in entries:
        layers = e["layer_features"]
        assert len(layers) == len(e["layer_names"]) == 3  # embeddings and two blocks
        for values in layers.values():
            assert {"id_twonn", "id_mle", "rankme"} <= set(values)
        assert e["features"]["id_twonn"] == layers[str(e["layer"])]["id_twonn"]
    table = toposig.load_results(out)
    dims = table[table["family"] == "dimension"]
    emb = table[table["family"] == "embedding"]
    assert len(dims) == len(emb) == 9 and dims["id_twonn"].notna().all()
    assert emb["id_twonn"].isna().all() and dims["rankme"].isna().all()


def test_it_shares_the_embeddings_forward_pass(monkeypatch):
    from toposig.model import embedding

    model, texts = causal_lm("gpt2", seed=0), [f"text number {i} " * (1 + i % 4)
                                               for i in range(30)]
    dims = {"dimension": DimensionFamily(k=5)}
    alone = toposig.measure(model, byte_tokenizer(), texts, families=("dimension",),
                            layers="all", family_settings=dims, progress=False)
    calls = []
    real = embedding.forward_pass
    monkeypatch.setattr(embedding, "forward_pass",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    both = toposig.measure(model, byte_tokenizer(), texts, families=("embedding", "dimension"),
                           layers="all", family_settings=dims, progress=False)
    assert len(calls) == 1
    assert both.records["dimension"]["layer_features"] == \
        alone.records["dimension"]["layer_features"]
    assert len(alone.records["dimension"]["layer_features"]) == 3
