"""The single forward pass: loss equals transformers' own, pooling equals unbatched means."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import neox_config, pythia_tokenizer
from transformers import GPTNeoXForCausalLM

from toposig.model.forward import NonFiniteError, forward_pass, tokenize

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
    assert [p.shape for p in result.pooled] == [(len(TEXTS), 32)] * 4  # embeddings + 3 blocks
    for i, text in enumerate(TEXTS):
        enc = tok([text], max_length=12, truncation=True, return_tensors="pt")
        with torch.no_grad():
            hs = model.base_model(**enc, output_hidden_states=True).hidden_states
        for layer, h in enumerate(hs):
            np.testing.assert_allclose(result.pooled[layer][i], h[0].mean(0).numpy(),
                                       rtol=1e-5, atol=1e-6)


def test_batch_size_does_not_change_the_numbers(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    a = forward_pass(model, ids, mask, batch_size=1)
    b = forward_pass(model, ids, mask, batch_size=5)
    for x, y in zip(a.pooled, b.pooled, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
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
    """Makes ``model`` run out of memory on batches of more than ``limit`` texts (a hook
    on its base model raises as CUDA would); a context manager that removes the hook."""

    def __init__(self, model, limit: int):
        self.model, self.limit, self.batches = model, limit, []

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.batches.append(ids.shape[0])
        if ids.shape[0] > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    def __enter__(self):
        self.handle = self.model.base_model.register_forward_pre_hook(self._hook,
                                                                      with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def test_out_of_memory_halves_the_batch_and_gives_the_same_numbers(tok, model, caplog):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    plain = forward_pass(model, ids, mask, batch_size=5)
    with _MemoryLimited(model, limit=2) as limited:
        backed_off = forward_pass(model, ids, mask, batch_size=5)
    batches = limited.batches[limited.batches.index(5):]  # before: the output head's probe
    assert max(b for b in batches[1:] if b <= 2) == 2
    assert backed_off.batch_size == 2 and plain.batch_size == 5
    for a, b in zip(backed_off.pooled, plain.pooled, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert backed_off.nll_sum == pytest.approx(plain.nll_sum, rel=1e-6)
    assert backed_off.n_tokens == plain.n_tokens
    assert "out of memory" in caplog.text


def test_out_of_memory_with_a_single_text_is_raised(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    with _MemoryLimited(model, limit=0), pytest.raises(torch.OutOfMemoryError):
        forward_pass(model, ids, mask, batch_size=5)


def test_bf16_autocast_stays_close_to_fp32(tok, model):
    ids, mask = tokenize(tok, TEXTS, max_length=12)
    full = forward_pass(model, ids, mask, batch_size=5)
    auto = forward_pass(model, ids, mask, batch_size=5, autocast_bf16=True)
    assert all(p.dtype == np.float32 for p in auto.pooled)
    assert not np.array_equal(auto.pooled[-1], full.pooled[-1])  # bf16 products did run
    for a, b in zip(auto.pooled, full.pooled, strict=True):
        np.testing.assert_allclose(a, b, rtol=0.05, atol=0.05)
    assert auto.mean_nll == pytest.approx(full.mean_nll, rel=0.01)
