"""toposig.measure on an in-memory model: the pipeline's numbers, and the model left as
it was (mode, weights, requires_grad, gradients, random number generators)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import causal_lm

import run_experiments
import toposig
from toposig.config import RunSettings
from toposig.families.embedding import EmbeddingFamily
from toposig.families.gradients import GradientsFamily
from toposig.families.landscape import LandscapeFamily
from toposig.model.training import byte_tokenizer

TEXTS = [(f"Text number {i}: " + "the quick brown fox jumps over the lazy dog; " * (2 + i % 3))
         .strip() for i in range(24)]  # as a texts file gives them: stripped lines


@pytest.fixture(scope="module")
def model():
    return causal_lm("gpt_neox", seed=3)


def test_measure_gives_the_pipelines_records_for_the_same_weights(model, tmp_path):
    tok = byte_tokenizer()
    folder = tmp_path / "run" / "step7"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tmp_path / "run"), "--out", str(out),
                                 "--texts", str(tmp_path / "texts.txt"), "--n-texts",
                                 str(len(TEXTS)), "--layers", "all", "--no-progress"]) == 0
    entry = json.loads((out / "data" / "all_results.json").read_text())[0]
    m = toposig.measure(model, tok, TEXTS, layers="all", step=7,
                        settings=RunSettings(n_texts=len(TEXTS)))
    assert m.perplexity == pytest.approx(entry["perplexity"], rel=1e-9)
    assert set(m.features) == set(entry["features"])
    for k, v in entry["features"].items():
        assert m.features[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert m.layer_features.keys() == {int(k) for k in entry["layer_features"]}
    rec = m.records["embedding"]
    assert (rec["source"], rec["checkpoint_fingerprint"], rec["step"]) == ("memory", None, 7)
    assert [d.shape[1] for d in m.diagrams()] == [2, 2]
    table = m.table()
    assert set(table["family"]) == {"embedding", "weights"}


def test_a_tokenizer_without_pad_token_or_padding_left_gives_the_same_numbers(tokenizer_file):
    """Pythia's tokenizer has no pad token, and a notebook's may pad on the left: the
    pipeline pads on the right itself, so neither changes the numbers."""
    from conftest import neox_config, pythia_tokenizer
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(neox_config(vocab=len(pythia_tokenizer(tokenizer_file))))
    settings = RunSettings(n_texts=len(TEXTS))
    bare = pythia_tokenizer(tokenizer_file)
    assert bare.pad_token is None
    left = pythia_tokenizer(tokenizer_file)
    left.pad_token, left.padding_side = "<|endoftext|>", "left"
    right = pythia_tokenizer(tokenizer_file)
    right.pad_token, right.padding_side = "<|endoftext|>", "right"
    ref = toposig.measure(model, right, TEXTS, families=["embedding"], settings=settings)
    for tok in (bare, left):
        m = toposig.measure(model, tok, TEXTS, families=["embedding"], settings=settings)
        assert m.perplexity == ref.perplexity
        assert m.features == ref.features
    assert bare.pad_token is None and left.padding_side == "left"  # theirs, untouched


def test_measure_leaves_the_model_as_it_found_it(model):
    model.train()
    frozen = next(iter(model.parameters()))
    frozen.requires_grad_(False)
    last = list(model.parameters())[-1]
    last.grad = torch.ones_like(last)
    grad = last.grad
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(11)
    expected_draw = torch.rand(3)
    torch.manual_seed(11)
    toposig.measure(model, byte_tokenizer(), TEXTS[:16],
                    families=("weights", "landscape", "gradients", "embedding"),
                    family_settings={
                        "landscape": LandscapeFamily(n_windows=2, window=16, res=3,
                                                     trace_samples=2, lanczos_maxiter=5),
                        "gradients": GradientsFamily(n_windows=8, window=16, proj_dim=8)})
    assert torch.equal(torch.rand(3), expected_draw)  # the generator's state is restored
    assert model.training
    assert not frozen.requires_grad and all(
        p.requires_grad for p in model.parameters() if p is not frozen)
    assert last.grad is grad and all(p.grad is None for p in model.parameters()
                                     if p is not last)
    assert all(torch.equal(weights[n], p) for n, p in model.named_parameters())
    frozen.requires_grad_(True)
    last.grad = None


def test_an_unknown_family_is_refused(model):
    with pytest.raises(ValueError, match="families are embedding, weights"):
        toposig.measure(model, byte_tokenizer(), TEXTS, families=("spectra",))


def test_settings_are_given_per_family_and_the_old_keywords_still_work(model):
    from toposig.families.weights import WeightsFamily

    few = WeightsFamily(max_rows=5)
    m = toposig.measure(model, byte_tokenizer(), TEXTS, families=("weights",),
                        family_settings={"weights": few}, progress=False)
    assert m.records["weights"]["settings"]["max_rows"] == 5
    with pytest.warns(DeprecationWarning, match="weight_settings= is deprecated"):
        old = toposig.measure(model, byte_tokenizer(), TEXTS, families=("weights",),
                              weight_settings=few, progress=False)
    assert old.records["weights"]["features"] == m.records["weights"]["features"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'weights_setting'"):
        toposig.measure(model, byte_tokenizer(), TEXTS, weights_setting=few)
    with pytest.raises(TypeError, match="'spectra' is not a family"):
        toposig.measure(model, byte_tokenizer(), TEXTS, family_settings={"spectra": few})
    with pytest.raises(TypeError, match="must be a WeightsFamily"):
        toposig.measure(model, byte_tokenizer(), TEXTS, family_settings={"weights": 5})


def test_probes_of_a_half_precision_model_and_mixed_placements_are_refused(model):
    import copy

    half = copy.deepcopy(model).to(torch.bfloat16)
    with pytest.raises(ValueError, match="need float32 weights"):
        toposig.measure(half, byte_tokenizer(), TEXTS, families=("gradients",))
    m = toposig.measure(half, byte_tokenizer(), TEXTS, families=("weights",))
    assert m.records["weights"]["features"]["np_mean"] > 0
    mixed = copy.deepcopy(model)
    next(iter(mixed.parameters())).data = next(iter(mixed.parameters())).data.double()
    with pytest.raises(ValueError, match="several devices or in several precisions"):
        toposig.measure(mixed, byte_tokenizer(), TEXTS)


def test_measure_shows_progress_unless_asked_not_to(model, capsys):
    texts = [f"text {i} about the geometry of language models" for i in range(24)]
    toposig.measure(model, byte_tokenizer(), texts, families=("weights", "embedding"),
                    label="demo")
    err = capsys.readouterr().err
    assert "measuring demo" in err and "2/2" in err
    toposig.measure(model, byte_tokenizer(), texts, families=("weights",), progress=False)
    assert "measuring" not in capsys.readouterr().err


def test_a_measurement_prints_in_a_few_lines(model):
    texts = [f"text {i} about the geometry of language models" for i in range(24)]
    m = toposig.measure(model, byte_tokenizer(), texts, families=("embedding", "weights"),
                        label="demo", step=7, progress=False)
    text = repr(m)
    assert len(text.splitlines()) == 3 and len(text) < 400, text
    assert text.startswith("Measurement(demo, step 7):")
    assert "embedding:" in text and "perplexity" in text and "weights:" in text
    assert "matrices" in text and "np_mean" in text
    assert "1 layer(s), 24 texts" in text and "?" not in text  # read off the typed records
    assert m.record is not None and f"{len(m.record.matrices)} matrices" in text
    assert repr(toposig.in_memory.Measurement()) == "Measurement(model, step -: nothing measured)"
    rec = m.record  # the typed record of a results folder, from the same entry
    assert rec is not None and rec.checkpoint.label == "demo" and rec.checkpoint.step == 7
    assert rec.families == ("embedding", "weights") and dict(rec.features) == m.features
    assert rec.perplexity == m.perplexity and len(rec.matrices) > 0
    assert toposig.in_memory.Measurement().record is None


def test_layers_and_settings_layers_never_override_each_other(model):
    texts = [f"text {i} about the geometry of language models" for i in range(24)]
    m = toposig.measure(model, byte_tokenizer(), texts, families=("embedding",),
                        family_settings={"embedding": EmbeddingFamily(layers="all")},
                        progress=False)
    assert len(m.layer_features) > 1  # the settings' "all" is kept, not reset to "last"
    with pytest.raises(ValueError, match="disagree"):
        toposig.measure(model, byte_tokenizer(), texts, layers="last",
                        family_settings={"embedding": EmbeddingFamily(layers="all")},
                        progress=False)
