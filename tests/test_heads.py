"""The ``heads`` family (induction-head scores): a hand-built induction pattern scores 1
and a uniform one its known value; a hand-built copying OV circuit scores 1 and its
negation -1; the per-head value and output matrices it reads rebuild each architecture's
attention output from the attention patterns; the model's attention is left as found."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import causal_lm

import toposig
from toposig.model.heads import (
    alphanumeric_tokens,
    copying_score,
    eager_attention,
    head_scores,
    ov_matrices,
    prefix_matching,
    repeated_sequences,
)
from toposig.model.training import byte_tokenizer

L = 6


def patterns(kind: str, n: int = 3, heads: int = 2) -> np.ndarray:
    """(n, heads, 2L, 2L) causal attention: ``induction`` attends from i to i - L + 1 in
    the second copy (to itself before), ``uniform`` over every earlier token and itself."""
    t = 2 * L
    a = np.zeros((n, heads, t, t))
    for i in range(t):
        if kind == "uniform":
            a[:, :, i, : i + 1] = 1.0 / (i + 1)
        else:
            a[:, :, i, i - L + 1 if i >= L else i] = 1.0
    return a


def test_an_induction_pattern_scores_one_and_a_uniform_one_its_share():
    np.testing.assert_allclose(prefix_matching(patterns("induction"), L), [1.0, 1.0])
    expected = np.mean([1.0 / (i + 1) for i in range(L, 2 * L)])
    np.testing.assert_allclose(prefix_matching(patterns("uniform"), L), [expected] * 2)


def test_a_copying_circuit_scores_one_its_negation_minus_one_and_the_full_circuit_agrees():
    rng = np.random.default_rng(0)
    w_e, w_v = rng.normal(size=(50, 8)), rng.normal(size=(4, 8))
    w_o = w_v.T  # with W_U = W_E the circuit is E V^T V E^T: positive semi-definite
    assert copying_score(w_v, w_o, w_e, w_e) == pytest.approx(1.0)
    assert copying_score(w_v, -w_o, w_e, w_e) == pytest.approx(-1.0)
    w_u = rng.normal(size=(50, 8))
    lam = np.linalg.eigvals(w_u @ w_o @ w_v @ w_e.T)  # vocab x vocab, as defined
    assert copying_score(w_v, w_o, w_e, w_u) == pytest.approx(lam.real.sum() / np.abs(lam).sum())


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2", "llama", "qwen2"])
def test_the_heads_value_and_output_matrices_rebuild_the_attention_output(arch):
    model = causal_lm(arch, seed=1)
    with torch.no_grad():  # no biases: the output is the heads' OV maps of their patterns
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    layer = 0
    att = {"gpt_neox": lambda m: m.base_model.layers[0].attention,
           "gpt2": lambda m: m.base_model.h[0].attn}.get(arch, lambda m: m.base_model.layers[0]
                                                         .self_attn)(model)
    seen = {}
    hook = att.register_forward_hook(
        lambda mod, args, kwargs, out: seen.update(x=kwargs.get("hidden_states", args[0] if
                                                                args else None), out=out[0]),
        with_kwargs=True)
    ids = repeated_sequences(264, 2, L, seed=0)
    with eager_attention(model), torch.no_grad():
        out = model(ids, output_attentions=True)
    hook.remove()
    x = seen["x"].double().numpy()
    a = out.attentions[layer].double().numpy()
    rebuilt = sum(a[:, h] @ (x @ w_v.T) @ w_o.T
                  for h, (w_v, w_o) in enumerate(ov_matrices(model, layer)))
    np.testing.assert_allclose(rebuilt, seen["out"].double().numpy(), rtol=1e-4, atol=1e-5)


def test_scores_of_a_model_and_its_attention_left_as_found():
    model = causal_lm("gpt_neox", seed=2)
    before = model.config._attn_implementation
    prefix, copying = head_scores(model, repeated_sequences(264, 4, L, seed=0), L)
    assert prefix.shape == copying.shape == (2, 4)
    assert ((prefix > 0) & (prefix < 1)).all() and ((copying >= -1) & (copying <= 1)).all()
    assert model.config._attn_implementation == before
    m = toposig.measure(model, byte_tokenizer(), ["unused"], families=("heads",),
                        progress=False)
    assert model.config._attn_implementation == before  # measure leaves it too
    alnum = alphanumeric_tokens(byte_tokenizer(), 264)
    assert [chr(i) for i in alnum] == [c for c in map(chr, range(128)) if c.isalnum()]
    assert m.features["head_prefix_max"] == pytest.approx(
        head_scores(model, repeated_sequences(alnum, 32, 8, seed=42), 8)[0].max())
