"""Choosing hidden-state layers: ``--layers last|all|0,3,-1`` and ``measure(layers=[...])``
(docs/running.md): parsing, which hidden states the indices name, errors, the settings
hash of ``last`` and ``all`` unchanged, and ``--extend`` adding layers to a study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import causal_lm, neox_config, save_checkpoint

import extract_embeddings
import run_experiments
import toposig
from toposig.config import (
    RunSettings,
    SettingsError,
    parse_layers,
    resolve_layers,
    union_layers,
)
from toposig.families.embedding import EmbeddingFamily
from toposig.model.forward import tokenize
from toposig.model.training import byte_tokenizer

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [f"text {i} about the geometry of language models and their hidden states"
         for i in range(16)]


# -- parsing ------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "normal"), [
    ("last", "last"), ("all", "all"), (" all ", "all"),
    ("0,3,-1", (0, 3, -1)), ("3, 0", (0, 3)), ("-1,-2,2,2", (2, -2, -1)),
    ("-1", "last"), ([-1, -1], "last"), ([0, 3, -1], (0, 3, -1)), ((5, 1), (1, 5)),
    ("+2", (2,)),
])
def test_layers_have_one_normal_form(given, normal):
    assert parse_layers(given) == normal
    assert EmbeddingFamily(layers=given).layers == normal


@pytest.mark.parametrize("bad", ["0,x", "", ",", "1,", "1.5", "first", "0;1", [], [1.0],
                                 [True], 3, None])
def test_bad_layers_are_refused_naming_the_option(bad):
    with pytest.raises(SettingsError, match="--layers"):
        EmbeddingFamily(layers=bad)


def test_the_union_of_two_choices():
    assert union_layers("last", (0,)) == (0, -1)
    assert union_layers((0, 2), (2, 3)) == (0, 2, 3)
    assert union_layers("all", (0,)) == union_layers((1,), "all") == "all"
    assert union_layers("last", "last") == "last"


def test_indices_map_to_hidden_states_and_out_of_range_names_the_count():
    assert resolve_layers("last", 4) == [3]
    assert resolve_layers("all", 4) == [0, 1, 2, 3]
    assert resolve_layers((0, 3, -1), 4) == [0, 3]  # 3 and -1 are one state: once
    assert resolve_layers((-4, -2), 4) == [0, 2]
    for bad in ((4,), (0, -5)):
        with pytest.raises(SettingsError, match="returns 4 hidden states"):
            resolve_layers(bad, 4)


# -- the settings hash ----------------------------------------------------------------------

def test_the_hash_of_last_and_all_is_what_it_was():
    """The reference run's config.json (results/, made with --layers all) records the hash
    the code still computes from its settings; "last" and "all" hash as before --layers
    took indices, and a plain -1 is "last"."""
    config = json.loads((ROOT / "results" / "data" / "config.json").read_text())
    settings = EmbeddingFamily.from_dict(config["settings"])
    assert settings.layers == "all"
    recomputed = settings.hash_of(config["texts_sha256"], config["dtype"])
    assert recomputed == config["settings_hash"] == "945195e2ce8e"
    assert (ROOT / "results" / "records" / recomputed).is_dir()
    last = EmbeddingFamily().hash_of("texts", "float32")
    assert last == "a4264bae7a7a"  # computed by the code before --layers took indices
    assert EmbeddingFamily(layers="all").hash_of("texts", "float32") == "ff92dfa23949"
    assert EmbeddingFamily(layers=[-1]).hash_of("texts", "float32") == last
    chosen = {EmbeddingFamily(layers=v).hash_of("texts", "float32")
              for v in ("0,-1", [-1, 0], (0, -1, -1))}
    assert len(chosen) == 1 and chosen.isdisjoint({last, recomputed})


# -- in memory ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model():
    return causal_lm("gpt_neox", seed=4, layers=3)  # 4 hidden states


def measured(model, layers, **kw):
    return toposig.measure(model, byte_tokenizer(), TEXTS, families=("embedding",),
                           layers=layers, settings=RunSettings(n_texts=len(TEXTS)),
                           family_settings={"embedding": EmbeddingFamily(save_hidden=True,
                                                                         **kw)},
                           progress=False)


def test_index_i_is_hidden_state_i_as_the_model_returns_it(model):
    every = measured(model, "all")
    chosen = measured(model, [0, 2, -1])
    rec, arrays = chosen.records["embedding"], chosen.arrays["embedding"]
    assert sorted(chosen.layer_features) == [0, 2, 3]
    assert rec["layer"] == 3 and len(rec["layer_names"]) == 4
    assert chosen.features == every.features  # the highest index's, as "all" gives
    for i in (0, 2, 3):
        assert chosen.layer_features[i] == every.layer_features[i]
        assert torch.equal(torch.from_numpy(arrays[f"layer{i}_hidden"]),
                           torch.from_numpy(every.arrays["embedding"][f"layer{i}_hidden"]))
    assert not any(k.startswith("layer1_") for k in arrays)
    # the pooled state is the mean over each text's tokens of hidden_states[i]
    ids, mask = tokenize(byte_tokenizer(), TEXTS, EmbeddingFamily().max_length)
    with torch.no_grad():
        states = model(input_ids=ids, attention_mask=mask,
                       output_hidden_states=True).hidden_states
    m = mask.unsqueeze(-1).float()
    for i in (0, 2, 3):
        pooled = (states[i].float() * m).sum(1) / m.sum(1)
        torch.testing.assert_close(torch.from_numpy(arrays[f"layer{i}_hidden"]), pooled,
                                   rtol=1e-4, atol=1e-5)


def test_a_single_index_and_duplicates(model):
    last = measured(model, "last")
    same = measured(model, [3, -1])  # one state of four: analysed once
    assert same.layer_features.keys() == {3} and same.features == last.features
    first = measured(model, [0])
    assert first.records["embedding"]["layer"] == 0 and first.layer_features.keys() == {0}


def test_an_index_the_model_lacks_and_conflicting_settings_are_errors(model):
    for bad in ([4], [0, -5]):
        with pytest.raises(SettingsError, match="returns 4 hidden states"):
            measured(model, bad)
    with pytest.raises(SettingsError, match="--layers"):
        measured(model, "0,x")
    with pytest.raises(ValueError, match="disagree"):
        toposig.measure(model, byte_tokenizer(), TEXTS, families=("embedding",),
                        layers=[0], family_settings={"embedding": EmbeddingFamily(layers="all")},
                        progress=False)
    agreed = toposig.measure(model, byte_tokenizer(), TEXTS, families=("embedding",),
                             layers="0,-1",
                             family_settings={"embedding": EmbeddingFamily(layers=(-1, 0))},
                             progress=False)
    assert agreed.layer_features.keys() == {0, 3}


# -- the command line and the study ----------------------------------------------------------

@pytest.fixture()
def study(tmp_path):
    """A results folder holding the study of a two-checkpoint series ``a`` (2 hidden
    states each) made with --layers last."""
    cfg = neox_config(hidden=8, layers=1, heads=2, vocab=264)
    for i, step in enumerate((0, 10)):
        save_checkpoint(tmp_path / "runs" / "a" / f"step{step}", cfg, byte_tokenizer(), seed=i)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out"
    assert run(tmp_path, out) == 0
    return tmp_path, out


def run(tmp_path: Path, out: Path, *extra: str) -> int:
    return run_experiments.main(["--models", str(tmp_path / "runs" / "a"), "--out", str(out),
                                 "--texts", str(tmp_path / "texts.txt"), "--n-texts", "12",
                                 "--max-length", "24", "--no-progress", *extra])


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".toposig.lock"}


def read(out: Path, name: str):
    return json.loads((out / "data" / name).read_text())


def test_bad_layers_text_is_an_input_error(tmp_path, capsys):
    assert run_experiments.main(["--layers", "0,x", "--out", str(tmp_path / "o")]) == 2
    assert "--layers" in capsys.readouterr().err
    assert extract_embeddings.main(["--models", str(tmp_path), "--layers", "x"]) == 2
    assert "--layers" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_index_out_of_range_fails_the_checkpoint_naming_the_count(study, capsys):
    tmp_path, _ = study
    out = tmp_path / "other"
    assert run(tmp_path, out, "--layers", "0,5", "--signatures", "embedding") == 1
    assert "returns 2 hidden states" in capsys.readouterr().out
    assert extract_embeddings.main(["--models", str(tmp_path / "runs" / "a" / "step0"),
                                    "--texts", str(tmp_path / "texts.txt"), "--n-texts",
                                    "12", "--layers=-3"]) == 2
    assert "returns 2 hidden states" in capsys.readouterr().err


def test_extend_adds_layers_to_every_checkpoint_of_the_study(study, capsys):
    tmp_path, out = study
    old = read(out, "config.json")
    old_entries = read(out, "all_results.json")
    before = files(out)
    # other layers without --extend: refused, naming --extend, nothing written
    assert run(tmp_path, out, "--layers", "0") == 2
    err = capsys.readouterr().err
    assert "--layers last" in err and "--extend" in err and "--layers 0" in err
    assert files(out) == before
    # part of the study with --extend: refused, every checkpoint is needed
    assert run(tmp_path, out, "--layers", "0", "--extend", "--steps", "10") == 2
    assert "leaves out 1 of its checkpoints (a step000000)" in capsys.readouterr().err
    assert files(out) == before

    assert run(tmp_path, out, "--layers", "0", "--extend") == 0
    config = read(out, "config.json")
    assert config["settings"]["layers"] == [0, -1]  # the union
    assert config["settings_hash"] == EmbeddingFamily.from_dict(config["settings"]).hash_of(
        config["texts_sha256"], config["dtype"])
    assert config["settings_hash"] != old["settings_hash"]
    assert config["weights_hash"] == old["weights_hash"]  # the weights are not touched
    assert config["last_run"]["n_computed"] == 2
    entries = read(out, "all_results.json")
    assert [(e["model_label"], e["step"]) for e in entries] == [("a", 0), ("a", 10)]
    for new, was in zip(entries, old_entries, strict=True):
        assert set(new["layer_features"]) == {"0", "1"}
        assert new["layer"] == was["layer"] == 1
        assert new["features"] == was["features"]  # the last layer's, computed again
        last = new["layer_features"]["1"]  # the entry's features are every family's
        assert last == {k: was["features"][k] for k in last}
        assert new["weights"] == was["weights"]
    records = sorted(p.name for p in (out / "records").iterdir())
    assert config["settings_hash"] in records and old["settings_hash"] in records

    # the study now has --layers 0,-1: the same again computes nothing, "last" is refused
    assert run(tmp_path, out, "--layers", "0", "--extend") == 0
    assert read(out, "config.json")["last_run"]["n_computed"] == 2  # the run before's
    capsys.readouterr()
    assert run(tmp_path, out) == 2
    assert "--layers 0,-1" in capsys.readouterr().err
    assert run(tmp_path, out, "--layers=0,-1") == 0
