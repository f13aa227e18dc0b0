"""The single forward pass: loss equals transformers' own, pooling equals unbatched means."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import neox_config, pythia_tokenizer
from transformers import GPTNeoXForCausalLM

from toposig.forward import NonFiniteError, forward_pass, tokenize

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Short.",
    "Persistent homology tracks how loops and components appear and vanish across scales.",
    "A second sentence of medium length for the batch.",
    "x",
]


@pytest.fixture(scope="module")
def tok(tokenizer_file):
    t = pythia_tokenizer(tokenizer_file)
    t.pad_token = t.eos_token
    t.padding_side = "right"
    return t


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(neox_config(hidden=32, layers=3, heads=4)).eval()


def test_loss_equals_transformers_loss_over_non_padding_targets(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    result = forward_pass(model, ids, mask, batch_size=2)
    labels = ids.masked_fill(mask == 0, -100)
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=mask, labels=labels).loss.item()
    assert result.n_tokens == int(mask.sum() - mask.shape[0])  # every text loses its first
    assert result.mean_nll == pytest.approx(reference, rel=1e-5)
    assert result.perplexity == pytest.approx(math.exp(reference), rel=1e-5)
    assert result.n_input_tokens == int(mask.sum())


def test_pooled_states_equal_unbatched_means_for_every_layer(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    result = forward_pass(model, ids, mask, batch_size=2)
    assert result.pooled.shape == (4, len(TEXTS), 32)  # embeddings + 3 blocks
    for i, text in enumerate(TEXTS):
        enc = tok([text], max_length=12, truncation=True, return_tensors="pt")
        with torch.no_grad():
            hs = model.base_model(**enc, output_hidden_states=True).hidden_states
        for layer, h in enumerate(hs):
            np.testing.assert_allclose(result.pooled[layer, i], h[0].mean(0).numpy(),
                                       rtol=1e-5, atol=1e-6)


def test_batch_size_does_not_change_the_numbers(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    a = forward_pass(model, ids, mask, batch_size=1)
    b = forward_pass(model, ids, mask, batch_size=5)
    np.testing.assert_allclose(a.pooled, b.pooled, rtol=1e-5, atol=1e-6)
    assert a.nll_sum == pytest.approx(b.nll_sum, rel=1e-6)


def test_truncation_to_max_length(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=4)
    assert ids.shape[1] == 4
    assert int(mask.sum(1).max()) == 4


def test_non_finite_hidden_states_raise():
    torch.manual_seed(0)
    broken = GPTNeoXForCausalLM(neox_config(hidden=16, layers=2, heads=2, vocab=64)).eval()
    with torch.no_grad():
        broken.base_model.layers[1].mlp.dense_4h_to_h.weight.fill_(float("nan"))
    ids = torch.randint(0, 64, (3, 6))
    with pytest.raises(NonFiniteError, match=r"layers \[2\]"):
        forward_pass(broken, ids, torch.ones_like(ids))


class _MemoryLimited:
    """A model whose base runs out of memory on batches of more than ``limit`` texts."""

    def __init__(self, model, limit: int):
        self.model, self.limit, self.batches = model, limit, []
        outer = self

        class Base(torch.nn.Module):
            def forward(self, input_ids, **kw):
                outer.batches.append(input_ids.shape[0])
                if input_ids.shape[0] > outer.limit:
                    raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
                return outer.model.base_model(input_ids=input_ids, **kw)

        self.base_model = Base()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()


def test_out_of_memory_halves_the_batch_and_gives_the_same_numbers(tok, model, caplog):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    plain = forward_pass(model, ids, mask, batch_size=5)
    limited = _MemoryLimited(model, limit=2)
    backed_off = forward_pass(limited, ids, mask, batch_size=5)
    assert limited.batches[0] == 5 and max(b for b in limited.batches[1:] if b <= 2) == 2
    assert backed_off.batch_size == 2 and plain.batch_size == 5
    np.testing.assert_allclose(backed_off.pooled, plain.pooled, rtol=1e-5, atol=1e-6)
    assert backed_off.nll_sum == pytest.approx(plain.nll_sum, rel=1e-6)
    assert backed_off.n_tokens == plain.n_tokens
    assert "out of memory" in caplog.text


def test_out_of_memory_with_a_single_text_is_raised(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    with pytest.raises(torch.OutOfMemoryError):
        forward_pass(_MemoryLimited(model, limit=0), ids, mask, batch_size=5)


def test_bf16_autocast_stays_close_to_fp32(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    full = forward_pass(model, ids, mask, batch_size=5)
    auto = forward_pass(model, ids, mask, batch_size=5, autocast_bf16=True)
    assert auto.pooled.dtype == np.float32
    assert not np.array_equal(auto.pooled, full.pooled)  # bf16 products did run
    np.testing.assert_allclose(auto.pooled, full.pooled, rtol=0.05, atol=0.05)
    assert auto.mean_nll == pytest.approx(full.mean_nll, rel=0.01)
