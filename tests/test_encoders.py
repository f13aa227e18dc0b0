"""Encoders (BERT and kin): measured with their masked-LM loss, never a causal perplexity;
refused where a family needs next tokens; unsupported kinds refused before any work."""

from __future__ import annotations

import json
import string

import pytest
import torch
import transformers as T
from conftest import causal_lm_config

from toposig.config import MLM_FRACTION
from toposig.model.forward import masked_positions, tokenize
from toposig.run import plan as planning
from toposig.sources import loading


def bert_tokenizer():
    """A WordPiece tokenizer whose vocabulary is characters: any text tokenizes offline."""
    chars = sorted(set(string.printable.strip()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    return T.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=False)


def bert_config(vocab: int) -> T.BertConfig:
    return T.BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                        architectures=["BertForMaskedLM"])


@pytest.fixture(scope="module")
def bert_series(tmp_path_factory):
    """A MultiBERTs-like local series: step_0k/, step_20k/ of a tiny random BertForMaskedLM."""
    root = tmp_path_factory.mktemp("bert")
    tok = bert_tokenizer()
    for i, name in enumerate(("step_0k", "step_20k")):
        torch.manual_seed(i)
        T.BertForMaskedLM(bert_config(len(tok))).save_pretrained(root / "run" / name)
        tok.save_pretrained(root / "run" / name)
    return root / "run"


def test_model_kinds():
    assert loading.model_kind(bert_config(100)) == loading.MASKED
    assert loading.model_kind(T.BertConfig(is_decoder=True)) == loading.CAUSAL  # BertLMHeadModel
    assert loading.model_kind(T.RobertaConfig()) == loading.MASKED
    assert loading.model_kind(T.DistilBertConfig()) == loading.MASKED
    for arch in ("gpt_neox", "gpt2", "llama", "opt", "gemma2"):
        assert loading.model_kind(causal_lm_config(arch)) == loading.CAUSAL
    with pytest.raises(loading.UnsupportedModelError, match="encoder-decoder"):
        loading.model_kind(T.T5Config())


def test_masked_positions_are_seeded_and_skip_padding_and_special_tokens():
    tok = bert_tokenizer()
    ids, mask = tokenize(tok, ["a short text", "a somewhat longer text than that", "x y"], 24)
    pos = masked_positions(ids, mask, tok.all_special_ids, MLM_FRACTION, seed=3)
    eligible = mask.bool() & ~torch.isin(ids, torch.tensor(tok.all_special_ids))
    assert bool((pos <= eligible).all())  # only real, non-special tokens
    assert int(pos.sum()) == round(MLM_FRACTION * int(eligible.sum()))
    assert torch.equal(pos, masked_positions(ids, mask, tok.all_special_ids, 0.15, seed=3))
    assert not torch.equal(pos, masked_positions(ids, mask, tok.all_special_ids, 0.15, seed=4))


def test_an_encoder_series_is_measured_with_its_masked_lm_loss(bert_series, tmp_path,
                                                               wikitext_dir):
    from analyze_results import main as analyze
    from run_experiments import main
    from toposig.model.embedding import masked_lm_objective
    from toposig.sources.corpus import load_texts

    out = tmp_path / "out"
    assert main(["--models", str(bert_series), "--out", str(out), "--n-texts", "12",
                 "--max-length", "32", "--no-progress"]) == 0
    recs = json.loads((out / "data" / "all_results.json").read_text())
    assert [r["step"] for r in recs] == [0, 20000]
    tok = T.AutoTokenizer.from_pretrained(bert_series / "step_0k")
    ids, mask = tokenize(tok, load_texts(None, 12, 100), 32)
    for r in recs:
        assert r["perplexity"] is None and r["mean_nll"] is None  # no causal perplexity
        assert r["quality_measure"] == "masked_lm_loss"
        assert r["families"] == ["embedding", "weights"]
        model = T.AutoModelForMaskedLM.from_pretrained(
            bert_series / f"step_{r['step'] // 1000}k").eval()
        objective = masked_lm_objective(model, tok, ids, mask)
        masked = ids.masked_fill(objective.positions, tok.mask_token_id)
        with torch.no_grad():  # the model's own masked-LM loss on those positions
            loss = model(input_ids=masked, attention_mask=mask,
                         labels=ids.masked_fill(~objective.positions, -100)).loss.item()
        assert r["mlm_loss"] == pytest.approx(loss, rel=1e-5)
        assert r["n_loss_tokens"] == int(objective.positions.sum())
        names = [m["name"] for m in r["weights"]["matrices"]]
        assert names and not any("word_embeddings" in n or "decoder" in n for n in names)
    assert analyze(["--results", str(out)]) == 0
    stats = json.loads((out / "data" / "statistics.json").read_text())
    assert stats["correlations"]["target"] == "mlm_loss"
    assert "masked-LM loss" in (out / "summary.md").read_text()


def test_probing_an_encoder_is_refused_before_any_work(bert_series, tmp_path, capsys,
                                                       wikitext_dir):
    from run_experiments import main

    out = tmp_path / "out"
    assert main(["--models", str(bert_series), "--out", str(out), "--no-progress",
                 "--signatures", "embedding,gradients"]) == 2
    err = capsys.readouterr().err
    assert "is a masked language model (an encoder" in err and "--signatures" in err
    assert not out.exists()


def test_an_encoder_decoder_is_refused_before_any_work(tmp_path, capsys, wikitext_dir):
    from run_experiments import main

    cfg = T.T5Config(vocab_size=64, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2)
    T.T5ForConditionalGeneration(cfg).save_pretrained(tmp_path / "t5" / "step1")
    bert_tokenizer().save_pretrained(tmp_path / "t5" / "step1")
    for sig in ("embedding", "weights"):
        assert main(["--models", str(tmp_path / "t5"), "--out", str(tmp_path / "out"),
                     "--signatures", sig]) == 2
        assert "encoder-decoder" in capsys.readouterr().err


def test_an_encoder_in_a_run_does_not_re_key_the_causal_records(bert_series, tmp_path,
                                                                wikitext_dir):
    from conftest import causal_lm

    from toposig.config import RunSettings
    from toposig.model.training import byte_tokenizer

    causal_lm("gpt2").save_pretrained(tmp_path / "gpt" / "step0")
    byte_tokenizer().save_pretrained(tmp_path / "gpt" / "step0")
    s = RunSettings(n_texts=12)
    alone = planning.plan_run([str(tmp_path / "gpt")], None, s)
    mixed = planning.plan_run([str(tmp_path / "gpt"), str(bert_series)], None, s)
    assert alone.hash_of("embedding") == mixed.hash_of("embedding")


def test_a_classifier_checkpoint_is_refused_before_any_work(tmp_path, capsys, wikitext_dir):
    from run_experiments import main

    tok = bert_tokenizer()
    cfg = bert_config(len(tok))
    cfg.architectures = None
    T.BertForSequenceClassification(cfg).save_pretrained(tmp_path / "cls" / "step0")
    tok.save_pretrained(tmp_path / "cls" / "step0")
    for sig in ("embedding", "weights"):
        assert main(["--models", str(tmp_path / "cls"), "--out", str(tmp_path / "out"),
                     "--signatures", sig]) == 2
        assert "saved without a language-model head" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_language_model_weights_are_a_recorded_failure(tmp_path):
    """A checkpoint that claims a masked-LM head but lacks its weights is not given a
    random one."""
    from safetensors.torch import load_file, save_file

    from toposig.sources.checkpoints import Checkpoint
    from toposig.sources.loading import UnsupportedModelError, load_model

    tok = bert_tokenizer()
    folder = tmp_path / "bert"
    T.BertForMaskedLM(bert_config(len(tok))).save_pretrained(folder)
    sd = {k: v for k, v in load_file(folder / "model.safetensors").items()
          if not k.startswith("cls.predictions.transform")}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnsupportedModelError, match="would be random.*cls.predictions.transform"):
        load_model(Checkpoint("b", "b", None, "local", str(folder)), torch.float32, "cpu")
