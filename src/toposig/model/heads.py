"""The mechanism of in-context copying, head by head (Olsson et al. 2022): how much each
attention head behaves as half of an induction circuit.

- **Prefix matching**, from the attention pattern on repeated random sequences ``[r, r]``
  (``r`` of ``L`` tokens drawn uniformly, seeded, from the vocabulary or its text-like
  tokens, :func:`alphanumeric_tokens`): at each position ``i`` of the second
  copy, the attention from ``i`` to the token after the earlier occurrence of the
  current token, ``i − L + 1``; averaged over those positions and the sequences. An
  induction head scores near 1, a head attending uniformly over its past about
  ``1 / (i + 1)``.
- **Copying**, from the weights: the eigenvalues ``λ`` of the head's OV circuit from
  tokens to logits, ``W_U W_O W_V W_Eᵀ`` (layer norms left out, as Olsson et al. do),
  whose nonzero eigenvalues are those of the small ``W_V W_Eᵀ W_U W_O``; the score is
  ``Σ Re λ / Σ |λ|``: 1 when the head raises the logit of the token it attends to,
  −1 when it lowers it. For the architectures whose per-head value and output
  matrices this module reads (:func:`ov_matrices`: GPT-NeoX, GPT-2, and those with
  ``v_proj`` / ``o_proj``); ``NaN`` for the others.

Pure on arrays where it can be (:func:`prefix_matching`, :func:`copying_score`); the
model-reading parts take a Hugging Face causal LM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np


def repeated_sequences(tokens, n: int, length: int, seed: int):
    """``(n, 2 * length)`` int64: ``n`` blocks of ``length`` tokens drawn uniformly from
    ``tokens`` (a vocabulary size, for every id below it, or a sequence of ids) by
    ``seed``, each written twice."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if isinstance(tokens, int):
        block = torch.randint(0, tokens, (n, length), generator=g)
    else:
        pool = torch.as_tensor(list(tokens), dtype=torch.long)
        block = pool[torch.randint(0, len(pool), (n, length), generator=g)]
    return torch.cat([block, block], dim=1)


def alphanumeric_tokens(tokenizer, vocab: int) -> list[int]:
    """The ids below ``vocab`` whose text, as ``tokenizer`` decodes it alone, is ASCII
    letters or digits (a leading space allowed): text-like tokens, as the blocks of
    ``--preset induction`` are."""
    texts = tokenizer.batch_decode([[i] for i in range(vocab)])
    return [i for i, t in enumerate(texts) if t.strip().isascii() and t.strip().isalnum()]


def prefix_matching(attentions: np.ndarray, length: int) -> np.ndarray:
    """``(heads,)`` prefix-matching scores from one layer's attention ``(n, heads, T, T)``
    (rows attend to columns) over sequences ``[r, r]`` with ``len(r) == length``."""
    a = np.asarray(attentions, dtype=np.float64)
    rows = np.arange(length, 2 * length)
    return a[:, :, rows, rows - length + 1].mean(axis=(0, 2))


def copying_score(w_v: np.ndarray, w_o: np.ndarray, w_e: np.ndarray | None = None,
                  w_u: np.ndarray | None = None, *, embed_unembed: np.ndarray | None = None
                  ) -> float:
    """``Σ Re λ / Σ |λ|`` of the OV circuit ``W_U W_O W_V W_Eᵀ`` of one head: ``w_v``
    (head size, hidden), ``w_o`` (hidden, head size), ``w_e`` and ``w_u`` (vocab,
    hidden), or instead ``embed_unembed`` = ``W_Eᵀ W_U`` (hidden, hidden), the same for
    every head. ``NaN`` when every eigenvalue is 0."""
    if embed_unembed is None:
        embed_unembed = np.asarray(w_e, np.float64).T @ np.asarray(w_u, np.float64)
    small = np.asarray(w_v, np.float64) @ embed_unembed @ np.asarray(w_o, np.float64)
    lam = np.linalg.eigvals(small)
    total = np.abs(lam).sum()
    return float(lam.real.sum() / total) if total > 0 else float("nan")


def _array(weight) -> np.ndarray:
    return weight.detach().cpu().double().numpy()  # on the CPU first: no float64 on a GPU


def ov_matrices(model, layer: int) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """``[(W_V (head size, hidden), W_O (hidden, head size))]`` of each head of ``layer``,
    for the layouts this module knows, else ``None``."""
    cfg = model.config
    heads = cfg.num_attention_heads
    kind = getattr(cfg, "model_type", "")
    blocks = model.base_model
    if kind == "gpt_neox":
        att = blocks.layers[layer].attention
        hs = cfg.hidden_size // heads
        qkv, dense = _array(att.query_key_value.weight), _array(att.dense.weight)
        return [(qkv[h * 3 * hs + 2 * hs:(h + 1) * 3 * hs], dense[:, h * hs:(h + 1) * hs])
                for h in range(heads)]
    if kind == "gpt2":
        att = blocks.h[layer].attn
        d = cfg.n_embd
        hs = d // heads
        w = _array(att.c_attn.weight)  # Conv1D: (hidden, 3 hidden), x @ w
        proj = _array(att.c_proj.weight)  # (hidden, hidden), x @ proj
        return [(w[:, 2 * d + h * hs:2 * d + (h + 1) * hs].T, proj[h * hs:(h + 1) * hs, :].T)
                for h in range(heads)]
    layers = getattr(blocks, "layers", None)
    att = getattr(layers[layer], "self_attn", None) if layers is not None else None
    if att is not None and hasattr(att, "v_proj") and hasattr(att, "o_proj"):
        v, o = _array(att.v_proj.weight), _array(att.o_proj.weight)
        hs = o.shape[1] // heads
        per_kv = heads // (v.shape[0] // hs)  # query heads sharing one key-value head
        return [(v[(h // per_kv) * hs:(h // per_kv + 1) * hs], o[:, h * hs:(h + 1) * hs])
                for h in range(heads)]
    return None


@contextlib.contextmanager
def eager_attention(model) -> Iterator[None]:
    """The model's attention in its eager form (the one that returns the patterns) while
    in the block; its own form after."""
    before = model.config._attn_implementation
    if before == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def head_scores(model, ids, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(layers, heads)`` prefix-matching and copying scores of ``model`` (a causal LM,
    float32) on the repeated sequences ``ids`` ``(n, 2 * length)``."""
    import torch

    with eager_attention(model), torch.no_grad():
        out = model(ids.to(next(model.parameters()).device), output_attentions=True)
    prefix = np.stack([prefix_matching(a.float().cpu().numpy(), length)
                       for a in out.attentions])
    embed_unembed = (_array(model.get_input_embeddings().weight).T
                     @ _array(model.get_output_embeddings().weight))  # (hidden, hidden)
    copying = np.full(prefix.shape, np.nan)
    for layer in range(prefix.shape[0]):
        ov = ov_matrices(model, layer)
        if ov is None:
            break
        copying[layer] = [copying_score(v, o, embed_unembed=embed_unembed) for v, o in ov]
    return prefix, copying
