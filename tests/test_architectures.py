"""The model's own loss and hidden states, on a matrix of architectures.

The pipeline's perplexity must be ``exp(model(ids, attention_mask=..., labels=...).loss)``
whatever the model does after its last hidden state (Gemma 2's soft-capping, Granite's
logit scaling, OPT-350m's output projection), and its pooled states the masked means of
``output_hidden_states``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import ARCHITECTURES, causal_lm

from toposig.model.forward import OutputHead, forward_pass, next_token_targets, tokenize
from toposig.model.training import byte_tokenizer

TEXTS = [
    "Persistent homology tracks how loops appear and vanish across scales.",
    "Short.",
    "The quick brown fox jumps over the lazy dog, twice over, and then once more.",
    "A sentence of medium length.",
    "xy",
]


@pytest.fixture(scope="module")
def tok():
    t = byte_tokenizer()
    t.pad_token = t.eos_token
    t.padding_side = "right"
    return t


def model_loss(model, ids, mask):
    """``model``'s own loss and hidden states on the right-padded batch."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask,
                    labels=ids.masked_fill(mask == 0, -100), output_hidden_states=True)
    return out.loss.item(), out.hidden_states


def masked_means(hidden_states, mask) -> list[np.ndarray]:
    m = mask.unsqueeze(-1).float()
    return [((h.float() * m).sum(1) / m.sum(1)).numpy() for h in hidden_states]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_perplexity_is_the_models_own_loss_and_pooling_its_hidden_states(arch, tok):
    model = causal_lm(arch)
    ids, mask = tokenize(tok, TEXTS, max_length=24)
    result = forward_pass(model, ids, mask, batch_size=2)
    loss, hidden = model_loss(model, ids, mask)
    assert result.head_mode == "chunked"  # the bounded-memory path serves every one
    assert result.perplexity == pytest.approx(math.exp(loss), rel=1e-5)
    assert result.n_tokens == int(mask[:, 1:].sum())
    assert len(result.pooled) == len(hidden)
    for ours, theirs in zip(result.pooled, masked_means(hidden, mask), strict=True):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_head_applies_what_the_model_applies_after_it(tok):
    """Soft-capping and logit scaling change the loss: the bare head gets it wrong."""
    ids, mask = tokenize(tok, TEXTS, max_length=24)
    for arch in ("gemma2", "granite"):
        model = causal_lm(arch)
        with torch.no_grad():  # logits large enough for Gemma 2's soft-capping to bite
            model.get_output_embeddings().weight.mul_(50.0)
        loss, _ = model_loss(model, ids, mask)
        with torch.no_grad():
            h = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
            bare = torch.nn.functional.cross_entropy(
                model.get_output_embeddings()(h[:, :-1][mask[:, 1:].bool()]).float(),
                ids[:, 1:][mask[:, 1:].bool()]).item()
        assert abs(bare - loss) > 1e-4, arch
        assert forward_pass(model, ids, mask).mean_nll == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize("mode", ["chunked", "selected", "labels"])
def test_every_head_mode_gives_the_models_loss(mode, tok, monkeypatch):
    model = causal_lm("gemma2")
    ids, mask = tokenize(tok, TEXTS, max_length=24)
    loss, _ = model_loss(model, ids, mask)
    head = OutputHead(model)
    assert head.mode == "chunked"
    head.mode = mode
    with torch.no_grad():
        _, nll = head.run(ids, mask, *next_token_targets(ids, mask))
    assert float(nll) / int(mask[:, 1:].sum()) == pytest.approx(loss, rel=1e-5)


def test_chunks_of_the_head_equal_one_pass(tok, monkeypatch):
    """Logits made a few rows at a time equal the whole batch's."""
    import toposig.model.forward as fw

    model = causal_lm("granite")
    ids, mask = tokenize(tok, TEXTS, max_length=24)
    whole = forward_pass(model, ids, mask, batch_size=5)
    monkeypatch.setattr(fw, "HEAD_CHUNK", 7)
    chunked = forward_pass(model, ids, mask, batch_size=5)
    assert chunked.nll_sum == pytest.approx(whole.nll_sum, rel=1e-6)


@pytest.mark.parametrize("arch", ["gemma2", "opt-350m"])
def test_pipeline_perplexity_is_the_models_own_loss(arch, tmp_path, wikitext_dir):
    """Done-when: a local series of tiny random checkpoints, run end to end."""
    from run_experiments import main
    from toposig.sources.corpus import load_texts

    series = tmp_path / arch
    models = {}
    for i, step in enumerate((0, 50)):
        model = causal_lm(arch, seed=i)
        model.save_pretrained(series / f"step{step}")
        byte_tokenizer().save_pretrained(series / f"step{step}")
        models[step] = model
    out = tmp_path / "out"
    assert main(["--models", str(series), "--out", str(out), "--n-texts", "12",
                 "--max-length", "32", "--no-progress", "--signatures", "embedding"]) == 0
    records = {r["step"]: r for r in json.loads((out / "data" / "all_results.json").read_text())}
    texts = load_texts(None, 12, 100)
    tok = byte_tokenizer()
    tok.pad_token, tok.padding_side = tok.eos_token, "right"
    ids, mask = tokenize(tok, texts, max_length=32)
    for step, model in models.items():
        loss, hidden = model_loss(model, ids, mask)
        assert records[step]["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
        assert records[step]["hidden_size"] == hidden[-1].shape[-1]


def test_a_model_without_an_output_head_module_gets_its_own_labels_loss(tok, monkeypatch):
    """When the head is not a module the forward calls, the model's own loss is used."""
    from toposig.model.embedding import check_vocab

    model = causal_lm("llama")
    ids, mask = tokenize(tok, TEXTS, max_length=24)
    loss, _ = model_loss(model, ids, mask)
    monkeypatch.setattr(type(model), "get_output_embeddings", lambda self: None)
    check_vocab(model, ids)  # falls back to the input embedding's rows
    result = forward_pass(model, ids, mask, batch_size=2)
    assert result.head_mode == "labels"
    assert result.perplexity == pytest.approx(math.exp(loss), rel=1e-5)
