"""One batched forward pass: pooled hidden states of every layer and the token loss.

Texts are tokenized once (truncated to ``max_length``, right-padded with the pad token,
EOS for Pythia), sorted by length so batches carry little padding, and run through the
model's base transformer. From the same pass come

- the mean over non-padding tokens of every hidden state the model returns: the
  embedding output and each block, the last one after the final layer norm (as
  ``transformers`` returns it);
- the next-token negative log-likelihood of every non-padding target token (position
  t+1 predicted from position t), from the output head applied to those positions only,
  so no logits are ever computed for padding.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

HEAD_CHUNK = 4096  # token rows per output-head call: bounds the logits' memory


class NonFiniteError(RuntimeError):
    """The model produced NaN or inf hidden states or loss."""


@dataclass
class ForwardResult:
    """Outputs of :func:`forward_pass`.

    Attributes:
        pooled: (n_layers + 1, n_texts, hidden) float32, texts in input order; index 0
            is the embedding output, -1 the final hidden state.
        nll_sum: summed next-token negative log-likelihood (nats).
        n_tokens: number of target tokens in ``nll_sum``.
            n_input_tokens: non-padding input tokens.
        batch_size: the largest batch that ran (below the one asked for after an
            out-of-memory back-off).
    """

    pooled: np.ndarray
    nll_sum: float
    n_tokens: int
    n_input_tokens: int
    batch_size: int = 0

    @property
    def mean_nll(self) -> float:
        return self.nll_sum / self.n_tokens if self.n_tokens else float("nan")

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll) if self.n_tokens else float("nan")


def tokenize(tokenizer, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, (n_texts, T) int64, right-padded, T <= max_length."""
    enc = tokenizer(
        texts, max_length=max_length, truncation=True, padding="longest", return_tensors="pt"
    )
    mask = enc["attention_mask"]
    if bool((mask.sum(1) == 0).any()):
        raise ValueError("a text tokenized to zero tokens")
    return enc["input_ids"], mask


def _batches(lengths: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    order = torch.argsort(lengths, descending=True, stable=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _batch(base, head, ids: torch.Tensor, mask: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(n_layers + 1, b, hidden) float32 layer means, summed NLL (float64), target count."""
    out = base(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    m = mask.unsqueeze(-1).to(torch.float32)
    denom = m.sum(1)
    layer_means = torch.stack([(h.float() * m).sum(1) / denom for h in out.hidden_states])
    targets_valid = mask[:, 1:].bool()
    h_sel = out.last_hidden_state[:, :-1][targets_valid]
    tgt = ids[:, 1:][targets_valid]
    nll = torch.zeros((), dtype=torch.float64)
    for start in range(0, h_sel.shape[0], HEAD_CHUNK):
        logits = head(h_sel[start : start + HEAD_CHUNK]).float()
        nll += F.cross_entropy(logits, tgt[start : start + HEAD_CHUNK],
                               reduction="sum").double().cpu()
    return layer_means.cpu(), nll, int(tgt.numel())


def _empty_cache(device: str | torch.device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()


@torch.inference_mode()
def forward_pass(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
    autocast_bf16: bool = False,
) -> ForwardResult:
    """Run the texts through ``model`` once.

    A batch that runs out of device memory is split in two and retried, down to single
    texts, so the largest batch that fits is found without failing the checkpoint.

    Args:
        model: a ``transformers`` causal LM (``base_model`` and ``get_output_embeddings``).
        input_ids, attention_mask: (n_texts, T) from :func:`tokenize`, right-padded.
        batch_size: texts per batch (at most).
        device: where the model lives.
        autocast_bf16: run matrix products in bfloat16 under ``torch.autocast`` (the
            weights stay as loaded; pooling and the loss are accumulated in fp32/fp64).

    Raises:
        NonFiniteError: a hidden state or the loss is NaN or inf.
        torch.OutOfMemoryError: not even one text fits.
    """
    base = model.base_model
    head = model.get_output_embeddings()
    n = input_ids.shape[0]
    lengths = attention_mask.sum(1)
    pooled: np.ndarray | None = None
    nll_sum = torch.zeros((), dtype=torch.float64)
    n_tokens = largest = 0
    device_type = torch.device(device).type
    queue = deque(_batches(lengths, batch_size))
    while queue:
        idx = queue.popleft()
        t_max = int(lengths[idx].max())
        ids = input_ids[idx, :t_max].to(device)
        mask = attention_mask[idx, :t_max].to(device)
        try:
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast_bf16):
                layer_means, nll, count = _batch(base, head, ids, mask)
        except torch.OutOfMemoryError:
            if len(idx) == 1:
                raise
            del ids, mask
            _empty_cache(device)
            half = (len(idx) + 1) // 2
            logger.warning("out of memory with a batch of %d texts: retrying as %d + %d",
                           len(idx), half, len(idx) - half)
            queue.extendleft([idx[half:], idx[:half]])
            continue
        largest = max(largest, len(idx))
        if pooled is None:
            pooled = np.empty((layer_means.shape[0], n, layer_means.shape[-1]),
                              dtype=np.float32)
        pooled[:, idx.numpy()] = layer_means.numpy()
        nll_sum += nll
        n_tokens += count

    assert pooled is not None
    bad_layers = [i for i in range(pooled.shape[0]) if not np.isfinite(pooled[i]).all()]
    if bad_layers:
        raise NonFiniteError(f"non-finite hidden states at layers {bad_layers} (0 = embeddings)")
    if not math.isfinite(float(nll_sum)):
        raise NonFiniteError("non-finite next-token loss")
    return ForwardResult(pooled, float(nll_sum), n_tokens, int(lengths.sum()), largest)
