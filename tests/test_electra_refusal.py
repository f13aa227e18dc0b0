"""ELECTRA's discriminator is refused from its config, before any weight is read, with the
message the loader gives after loading it (issue 26)."""

from __future__ import annotations

import string

import pytest
import torch
import transformers as T

from toposig.sources import loading
from toposig.sources.checkpoints import Checkpoint
from toposig.sources.loading import UnsupportedModelError


def char_tokenizer() -> T.BertTokenizerFast:
    """A WordPiece tokenizer whose vocabulary is characters: any text tokenizes offline."""
    chars = sorted(set(string.printable.strip()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    return T.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=False)


def electra_config(vocab: int) -> T.ElectraConfig:
    return T.ElectraConfig(vocab_size=vocab, embedding_size=16, hidden_size=16,
                           num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                           max_position_embeddings=64)


def save(cls, folder, seed: int = 0):
    tok = char_tokenizer()
    torch.manual_seed(seed)
    cls(electra_config(len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def discriminator(tmp_path_factory):
    """A series of two tiny random ElectraForPreTraining checkpoints: step0/, step10/."""
    root = tmp_path_factory.mktemp("electra") / "disc"
    for i, step in enumerate((0, 10)):
        save(T.ElectraForPreTraining, root / f"step{step}", seed=i)
    return root


@pytest.fixture
def no_loading(monkeypatch):
    """Any attempt to load weights fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded")

    for auto in (T.AutoModelForMaskedLM, T.AutoModelForCausalLM):
        monkeypatch.setattr(auto, "from_pretrained", refuse)


def loader_message(folder) -> str:
    """What loading the discriminator says today, after reading its weights (the config
    check switched off), less the checkpoint's description."""
    ckpt = Checkpoint("d", "d", 0, "local", str(folder))
    original = loading.check_head_weights
    loading.check_head_weights = lambda config, kind: None
    try:
        with pytest.raises(UnsupportedModelError) as info:
            loading.load_model(ckpt, torch.float32, "cpu")
    finally:
        loading.check_head_weights = original
    return str(info.value).removeprefix(f"{ckpt.describe()}: ")


@pytest.mark.parametrize("signatures", ["embedding", "weights", "embedding,weights"])
def test_the_discriminator_is_refused_before_any_work(discriminator, tmp_path, capsys,
                                                      no_loading, signatures, wikitext_dir):
    from run_experiments import main

    out = tmp_path / "out"
    assert main(["--models", str(discriminator), "--out", str(out), "--no-progress",
                 "--signatures", signatures]) == 2
    err = capsys.readouterr().err
    assert "ElectraForPreTraining" in err and "discriminator" in err
    assert "weight(s) of ElectraForMaskedLM are not in the checkpoint and would be random" in err
    assert "it is not a ForMaskedLM checkpoint" in err
    assert not out.exists()


def test_the_message_is_the_loaders(discriminator, monkeypatch):
    from toposig.config import RunSettings
    from toposig.run import plan as planning
    from toposig.sources.checkpoints import SeriesError

    after_loading = loader_message(discriminator / "step0")
    assert after_loading.startswith("5 weight(s) of ElectraForMaskedLM")
    for auto in (T.AutoModelForMaskedLM, T.AutoModelForCausalLM):
        monkeypatch.setattr(auto, "from_pretrained", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(SeriesError) as info:
        planning.plan_run([str(discriminator)], None, RunSettings(),
                          signatures=("weights",))
    assert after_loading in str(info.value)  # the same words, said before loading
    with pytest.raises(UnsupportedModelError) as direct:  # and by load_model itself
        loading.load_model(Checkpoint("d", "d", 0, "local", str(discriminator / "step0")),
                      torch.float32, "cpu")
    assert after_loading in str(direct.value)


def test_the_generator_and_bert_pretraining_heads_pass(tmp_path, no_loading):
    """ELECTRA's generator is a masked LM; BertForPreTraining carries its MLM head."""
    tok = char_tokenizer()
    generator = save(T.ElectraForMaskedLM, tmp_path / "gen" / "step0")
    bert = tmp_path / "bert" / "step0"
    T.BertForPreTraining(T.BertConfig(vocab_size=len(tok), hidden_size=16,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32)).save_pretrained(bert)
    ckpts = [Checkpoint("g", "g", 0, "local", str(generator)),
             Checkpoint("b", "b", 0, "local", str(bert))]
    assert loading.series_kinds(ckpts, local_files_only=True) == {"g": loading.MASKED,
                                                                  "b": loading.MASKED}


def test_a_matching_or_unknown_class_is_not_checked():
    from conftest import causal_lm_config

    for arch in ("gpt2", "llama", "gpt_neox"):
        cfg = causal_lm_config(arch)
        cfg.architectures = [T.AutoModelForCausalLM._model_mapping[type(cfg)].__name__]
        loading.check_head_weights(cfg, loading.CAUSAL)
    remote = electra_config(100)
    remote.architectures = ["MyOwnElectraForPreTraining"]  # remote code: loading checks
    loading.check_head_weights(remote, loading.MASKED)
    disc = electra_config(100)
    disc.architectures = ["ElectraForPreTraining"]
    with pytest.raises(UnsupportedModelError, match="generator_lm_head.bias"):
        loading.check_head_weights(disc, loading.MASKED)
