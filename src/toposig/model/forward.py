"""One batched forward pass: pooled hidden states of every layer and the model's own loss.

Texts are tokenized once (truncated to ``max_length``, right-padded with the pad token,
EOS for Pythia), sorted by length so batches carry little padding, and run through the
model. From the same pass come

- the mean over non-padding tokens of every hidden state the model returns with
  ``output_hidden_states=True``, one array per entry since their widths may differ. What
  each entry *is* differs between architectures, so :func:`hidden_state_layout` finds out
  once per model and names them (``ForwardResult.layer_names``): most decoders and
  encoders return the embedding output, then each block's output, the last one after the
  final norm (and, for OPT-350m-style models, the output projection); Mamba, Mamba-2,
  FalconMamba and RWKV return no embedding output: their entry 0 is the first block's
  output, and their last entry the last block's output after the final norm;
- the next-token negative log-likelihood of every non-padding target token (position
  t+1 predicted from position t) from the logits *the model itself* makes of its last
  hidden state: the output head and whatever the model applies after it (Gemma 2's
  final soft-capping, Granite's logit scaling). :class:`OutputHead` finds, once per
  model, the module whose output feeds the head, and computes logits for chunks of the
  non-padding positions only by running the model's own forward with that module
  answering with the chunk, so no logits are made for padding and memory stays bounded
  by :data:`HEAD_CHUNK`. The result equals ``exp(model(ids, attention_mask=mask,
  labels=...).loss)`` (tested on nine architectures).

An encoder (BERT and its kin) has no next-token loss. With a :class:`MaskedLM` objective
its quality is the masked-LM loss instead: a seeded 15% of the non-special tokens are
replaced by the mask token in a second pass, and the model's own logits at those
positions are scored against the original tokens; the hidden states still come from the
texts as they are.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from toposig.model.placement import free_device_memory

logger = logging.getLogger(__name__)

HEAD_CHUNK = 4096  # token rows per output-head call: bounds the logits' memory


class NonFiniteError(RuntimeError):
    """The model produced NaN or inf hidden states or loss."""


@dataclass
class ForwardResult:
    """Outputs of :func:`forward_pass`.

    Attributes:
        pooled: one array (n_texts, width) float32 per entry of the model's
            ``hidden_states`` (texts in input order); ``layer_names`` says what each is.
            Index -1 is the final hidden state; index 0 is the embedding output only
            where ``layer_names[0] == "embeddings"`` (not for Mamba or RWKV).
        nll_sum: summed next-token negative log-likelihood (nats).
        n_tokens: number of target tokens in ``nll_sum``.
        n_input_tokens: non-padding input tokens.
        batch_size: the largest batch that ran (below the one asked for after an
            out-of-memory back-off).
        head_mode: how the logits were made (:attr:`OutputHead.mode`).
        layer_names: what each entry of ``pooled`` is (:func:`hidden_state_layout`),
            one label per entry (``"hidden state i"`` where the probe could not tell).
    """

    pooled: list[np.ndarray]
    nll_sum: float
    n_tokens: int
    n_input_tokens: int
    batch_size: int = 0
    head_mode: str = ""
    layer_names: list[str] = field(default_factory=list)

    @property
    def mean_nll(self) -> float:
        return self.nll_sum / self.n_tokens if self.n_tokens else float("nan")

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll) if self.n_tokens else float("nan")


def tokenize(tokenizer, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, (n_texts, T) int64, right-padded, T <= max_length.

    Padded here, not by the tokenizer, so its ``padding_side`` and pad token (many causal
    LMs' tokenizers, Pythia's among them, have none) do not matter: the pad id is the
    tokenizer's pad token, else its EOS, else 0, and the mask hides it.
    """
    ids = tokenizer(list(texts), max_length=max_length, truncation=True,
                    padding=False)["input_ids"]
    if any(len(row) == 0 for row in ids):
        raise ValueError("a text tokenized to zero tokens")
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    rows = [torch.as_tensor(row, dtype=torch.long) for row in ids]
    mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True)
    return pad_sequence(rows, batch_first=True, padding_value=pad), mask


def _batches(lengths: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    order = torch.argsort(lengths, descending=True, stable=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


_MISSING = object()


def _first_tensor(out) -> torch.Tensor | None:
    """The first tensor of a module's output: a tensor, a tuple's first item, or a
    ``ModelOutput``'s first field (``last_hidden_state``)."""
    if isinstance(out, torch.Tensor):
        return out
    try:
        first = out[0]
    except (TypeError, IndexError, KeyError):
        return None
    return first if isinstance(first, torch.Tensor) else None


def _tensor_key(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (t.data_ptr(), tuple(t.shape))


@functools.cache
def _hidden_only_output():
    """A ``ModelOutput`` holding only ``last_hidden_state``; any other field reads None."""
    from dataclasses import dataclass as _dataclass

    from transformers.utils import ModelOutput

    @_dataclass
    class HiddenOnly(ModelOutput):
        last_hidden_state: torch.Tensor | None = None

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            return None

    return HiddenOnly


class OutputHead:
    """The model's own map from the output head's input to its logits, for any rows.

    Built once per model by a two-token probe pass with hooks: the *feeder* is the
    outermost module whose output is the head's input (the base transformer for
    decoders; OPT's decoder, which its causal-LM class calls directly; the transform of a
    BERT masked-LM head). :meth:`logits` then runs the model's own forward on a dummy
    token with the feeder answering with the given rows, so that the head and everything
    after it (soft-capping, scaling) are the model's own code. The probe checks that
    this reproduces the probe pass's logits exactly.

    Attributes:
        mode: ``"chunked"`` (feeder found and checked: logits for chunks of rows),
            ``"selected"`` (the head's input is cut to the wanted rows inside one forward
            pass: exact, memory rows × vocabulary per batch) or ``"labels"`` (the head is
            not a module the forward calls: the model's own ``labels=`` loss).
    """

    def __init__(self, model, device: str | torch.device = "cpu"):
        self.model = model
        self.head = model.get_output_embeddings()
        self.device = device
        self.feeder = None
        self._feeder_kind = "model_output"
        self.mode = "labels"
        if self.head is not None:
            self._probe()

    # -- the probe ---------------------------------------------------------------------
    def _probe(self) -> None:
        model, head = self.model, self.head
        inside_head = {id(m) for m in head.modules()}
        entered: dict[int, int] = {}
        outputs: dict[int, tuple] = {}
        head_in: list[tuple] = []
        handles = []

        def pre(mod, args):
            entered.setdefault(id(mod), len(entered))

        def post(mod, args, out):
            if id(mod) not in outputs:
                outputs[id(mod)] = (_tensor_key(_first_tensor(out)), out)

        def head_pre(mod, args, kwargs):
            x = args[0] if args else kwargs.get("input")
            head_in.append((_tensor_key(x), x))

        modules = {id(m): m for m in model.modules()}
        try:
            for m in model.modules():
                if m is model or id(m) in inside_head:
                    continue
                handles.append(m.register_forward_pre_hook(pre))
                handles.append(m.register_forward_hook(post))
            handles.append(head.register_forward_pre_hook(head_pre, with_kwargs=True))
            ids = torch.zeros((1, 2), dtype=torch.long, device=self.device)
            ref = model(input_ids=ids, attention_mask=torch.ones_like(ids))
        finally:
            for h in handles:
                h.remove()
        if len(head_in) != 1 or head_in[0][0] is None:
            logger.debug("%s: the output head is not called once as a module; using the "
                         "model's labels= loss", type(model).__name__)
            return
        self.mode = "selected"
        key, x = head_in[0]
        matches = sorted((entered[i], i) for i, (k, _) in outputs.items()
                         if k == key and i in entered)
        if not matches:
            return
        feeder_id = matches[0][1]
        self.feeder = modules[feeder_id]
        out = outputs[feeder_id][1]
        self._feeder_kind = ("tensor" if isinstance(out, torch.Tensor)
                             else "tuple" if isinstance(out, tuple) else "model_output")
        try:
            again = self.logits(x.reshape(-1, x.shape[-1]))
        except Exception as exc:  # noqa: BLE001 - any failure means: not usable
            logger.debug("%s: chunked head failed its check (%s)", type(model).__name__, exc)
            self.feeder = None
            return
        want = getattr(ref, "logits", None)
        if want is not None and again.shape == want.reshape(-1, want.shape[-1]).shape \
                and torch.equal(again, want.reshape(-1, want.shape[-1])):
            self.mode = "chunked"
        else:
            self.feeder = None

    # -- logits of given rows ------------------------------------------------------------
    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """The model's logits (k, vocabulary) for head inputs ``rows`` (k, width)."""
        feeder = self.feeder
        if feeder is None:
            raise RuntimeError("no feeder module: use the model's forward pass")
        calls: list[int] = []
        hidden = rows.unsqueeze(0)
        kind = self._feeder_kind
        answer_type = _hidden_only_output() if kind == "model_output" else None

        def answer(*args, **kwargs):
            calls.append(1)
            if kind == "tensor":
                return hidden
            if kind == "tuple":
                return (hidden,)
            return answer_type(last_hidden_state=hidden)

        old = feeder.__dict__.get("forward", _MISSING)
        feeder.forward = answer
        try:
            out = self.model(input_ids=torch.zeros((1, 1), dtype=torch.long,
                                                   device=rows.device))
        finally:
            if old is _MISSING:
                del feeder.forward
            else:
                feeder.forward = old
        if len(calls) != 1:
            raise RuntimeError(f"the feeder module was called {len(calls)} times")
        return out.logits.reshape(-1, out.logits.shape[-1])

    # -- one batch -----------------------------------------------------------------------
    def run(self, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor,
            targets: torch.Tensor, labels: torch.Tensor
            ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """One forward pass of a batch: every hidden state, and the summed cross-entropy
        (float64, nats) of the logits at positions ``rows`` against ``targets``.

        Args:
            ids, mask: (b, T) input ids and attention mask.
            rows: (b, T) bool, the positions whose logits are scored, row-major.
            targets: (k,) the token each of those positions is scored against.
            labels: (b, T) the same as ``model(..., labels=)`` takes it (used only when
                the head is not a module the forward calls).
        """
        if self.mode == "labels":
            if targets.numel() == 0:
                out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
                return out.hidden_states, torch.zeros((), dtype=torch.float64)
            out = self.model(input_ids=ids, attention_mask=mask, labels=labels,
                             output_hidden_states=True)
            return out.hidden_states, out.loss.double().cpu() * int(targets.numel())
        captured: list[torch.Tensor] = []

        def cut(x: torch.Tensor) -> torch.Tensor:
            captured.append(x)
            if self.mode == "chunked":
                return x[:, :0]  # the head makes no logits in this pass
            return x[rows].unsqueeze(0)

        def head_pre(mod, args, kwargs):
            if args:
                return (cut(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "input": cut(kwargs["input"])}

        handle = self.head.register_forward_pre_hook(head_pre, with_kwargs=True)
        try:
            out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        finally:
            handle.remove()
        if self.mode == "selected":
            return out.hidden_states, _nll(out.logits.reshape(-1, out.logits.shape[-1]),
                                           targets)
        picked = captured[0][rows]
        nll = torch.zeros((), dtype=torch.float64)
        for start in range(0, picked.shape[0], HEAD_CHUNK):
            nll += _nll(self.logits(picked[start:start + HEAD_CHUNK]),
                        targets[start:start + HEAD_CHUNK])
        return out.hidden_states, nll


# -- what each hidden state is ------------------------------------------------------------

EMBEDDINGS = "embeddings"
FINAL_NORM = "final norm"


def block_label(k: int) -> str:
    """The label of the output of block ``k`` (1-based): ``"block 3"``."""
    return f"block {k}"


def unknown_label(index: int) -> str:
    """The label of entry ``index`` of ``hidden_states`` when what it is is not known."""
    return f"hidden state {index}"


def _block_list(model) -> torch.nn.ModuleList | None:
    """The model's stack of blocks: the first ``ModuleList`` (in module order) with as
    many entries as the config's ``num_hidden_layers`` (the longest one when the config
    has no such number); ``None`` when there is none."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    if n is not None:
        return next((m for m in lists if len(m) == n), None)
    return max(lists, key=len, default=None)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same tensor (same storage, offset, shape and strides)."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _scaled(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``b`` is ``a`` times a power of two (exact in floating point): RWKV halves its
    hidden states every ``rescale_every`` blocks, after the block returned them."""
    if a.shape != b.shape or a.dtype != b.dtype or not a.is_floating_point():
        return False
    nonzero = a != 0
    if not bool(nonzero.any()):
        return False
    ratio = float(b[nonzero][0] / a[nonzero][0])
    if not math.isfinite(ratio) or ratio <= 0:
        return False
    mantissa, _ = math.frexp(ratio)
    return mantissa == 0.5 and torch.equal(a * ratio, b)


@torch.inference_mode()
def hidden_state_layout(model, device: str | torch.device = "cpu") -> list[str]:
    """What each entry of ``model(..., output_hidden_states=True).hidden_states`` is.

    Found, not assumed: a two-token probe pass with hooks on the blocks (the
    ``ModuleList`` of ``num_hidden_layers`` modules) and on the modules outside them, and
    each entry is compared with what they saw, the very tensor first, else its values.

    Returns:
        One label per entry, in order (empty when the model returns no hidden states or
        the probe fails): ``"embeddings"`` (the input of the first block: the embedding
        output with whatever the model adds to it, positions, scaling, a projection),
        ``"block k"`` (the output of the k-th block, 1-based, or that output times a
        power of two: RWKV halves its hidden states every ``rescale_every`` blocks at
        inference, after the block returned them), ``"final norm"`` (the
        output of a norm module after the blocks: the last block's output, normed),
        ``"final <name>"`` (the output of another module after the blocks, such as
        OPT-350m's ``project_out``) or ``"hidden state i"`` (none of these). An entry
        that matches nothing but follows ``"embeddings"`` or ``"block k"`` is taken to
        be the next block's output.

    Most architectures give ``["embeddings", "block 1", ..., "block n-1", "final
    norm"]``; Mamba, Mamba-2, FalconMamba and RWKV ``["block 1", ..., "block n", "final
    norm"]``: no embedding output, and the last block twice, before and after the norm.
    """
    try:
        return _probe_layout(model, device)
    except Exception as exc:  # noqa: BLE001 - any failure means: not known
        logger.debug("%s: hidden-state layout not found (%s)", type(model).__name__, exc)
        return []


def _probe_layout(model, device: str | torch.device) -> list[str]:
    blocks = _block_list(model)
    # (label, tensor, from the blocks' own hooks) in the order they ran
    events: list[tuple[str, torch.Tensor, bool]] = []
    started: list[bool] = []
    handles = []
    skip: set[int] = set()
    if blocks is not None:
        skip |= {id(m) for m in blocks.modules()}
        skip |= {id(m) for m in model.modules()
                 if any(sub is blocks for sub in m.modules())}  # the blocks' ancestors
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        skip |= {id(m) for m in head.modules()}

    def block_pre(mod, args, kwargs):
        x = args[0] if args else kwargs.get("hidden_states")
        if not started and isinstance(x, torch.Tensor):
            events.append((EMBEDDINGS, x, True))
        started.append(True)

    def block_post(k):
        def post(mod, args, out):
            t = _first_tensor(out)
            if t is not None:
                events.append((block_label(k), t, True))
        return post

    def other_post(name, mod):
        leaf = name.rsplit(".", 1)[-1]
        label = FINAL_NORM if "norm" in type(mod).__name__.lower() else f"final {leaf}"

        def post(m, args, out):
            t = _first_tensor(out)
            if t is not None:
                events.append((label if started else leaf, t, False))
        return post

    try:
        if blocks is not None:
            handles.append(blocks[0].register_forward_pre_hook(block_pre, with_kwargs=True))
            for k, block in enumerate(blocks, start=1):
                handles.append(block.register_forward_hook(block_post(k)))
        for name, mod in model.named_modules():
            if mod is not model and id(mod) not in skip:
                handles.append(mod.register_forward_hook(other_post(name, mod)))
        vocab = getattr(model.config, "vocab_size", None) or 2
        ids = (torch.arange(2, device=device) % vocab).unsqueeze(0)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                    output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    hidden = getattr(out, "hidden_states", None)
    if not hidden:
        return []
    ours = [(lb, t) for lb, t, own in events if own]
    ordered = ours + [(lb, t) for lb, t, own in events if not own]  # the blocks' own first
    labels: list[str | None] = []
    for h in hidden:
        found = next((lb for lb, t in ordered if _same(t, h)), None)
        if found is None:
            found = next((lb for lb, t in ordered if _equal(t, h)), None)
        if found is None:
            found = next((lb for lb, t in ours if _scaled(t, h)), None)
        labels.append(found)
    n_blocks = len(blocks) if blocks is not None else 0
    out_labels: list[str] = []
    for i, lb in enumerate(labels):
        if lb is None and out_labels:
            prev = out_labels[-1]
            k = 0 if prev == EMBEDDINGS else _block_number(prev)
            if k is not None and k < n_blocks:
                lb = block_label(k + 1)
        out_labels.append(lb if lb is not None else unknown_label(i))
    return out_labels


def _block_number(label: str) -> int | None:
    """``k`` of ``"block k"``; ``None`` for any other label."""
    head, _, k = label.partition(" ")
    return int(k) if head == "block" and k.isdigit() else None


def next_token_targets(ids: torch.Tensor, mask: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows, targets and ``labels=`` of the next-token loss: position t of every
    non-padding target t + 1 is scored against token t + 1."""
    valid = mask[:, 1:].bool()
    rows = torch.zeros_like(mask, dtype=torch.bool)
    rows[:, :-1] = valid
    return rows, ids[:, 1:][valid], ids.masked_fill(mask == 0, -100)


def masked_positions(ids: torch.Tensor, mask: torch.Tensor, special_ids: list[int],
                     fraction: float, seed: int) -> torch.Tensor:
    """(n, T) bool: a seeded ``fraction`` of the non-padding, non-special tokens.

    The choice depends only on the token ids and ``seed``, so every checkpoint of a
    series (one tokenizer) is scored on the same positions. At least one is chosen.
    """
    eligible = mask.bool() & ~torch.isin(ids, torch.tensor(special_ids, dtype=ids.dtype))
    flat = np.flatnonzero(eligible.reshape(-1).numpy())
    if flat.size == 0:
        raise ValueError("no token to mask: every token is padding or special")
    k = max(1, round(fraction * flat.size))
    chosen = np.random.default_rng(seed).choice(flat, size=k, replace=False)
    out = torch.zeros(ids.numel(), dtype=torch.bool)
    out[torch.from_numpy(np.sort(chosen))] = True
    return out.reshape(ids.shape)


@dataclass(frozen=True)
class MaskedLM:
    """The masked-LM objective of an encoder: which positions are masked, and how.

    Attributes:
        positions: (n_texts, T) bool from :func:`masked_positions`.
        mask_token_id: the tokenizer's mask token, put in place of every chosen token.
    """

    positions: torch.Tensor
    mask_token_id: int


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy (nats, float64 on the CPU) of logits (k, V) for targets (k,)."""
    return F.cross_entropy(logits.float(), targets, reduction="sum").double().cpu()


def _batch(head: OutputHead, ids: torch.Tensor, mask: torch.Tensor,
           masked: torch.Tensor | None = None, mask_token_id: int | None = None,
           ) -> tuple[list[torch.Tensor], torch.Tensor, int]:
    """Per-layer (b, width) float32 means, summed NLL (float64), scored-token count.

    Next-token loss by default; with ``masked`` positions the hidden states come from
    the texts as they are and the loss from a second pass with those positions masked.
    """
    if masked is None:
        rows, targets, labels = next_token_targets(ids, mask)
        hidden_states, nll = head.run(ids, mask, rows, targets, labels)
    else:
        none = torch.zeros_like(masked)
        hidden_states, _ = head.run(ids, mask, none, ids[none], ids)
        targets = ids[masked]
        _, nll = head.run(ids.masked_fill(masked, mask_token_id), mask, masked, targets,
                          ids.masked_fill(~masked, -100))
    m = mask.unsqueeze(-1).to(torch.float32)
    denom = m.sum(1)
    layer_means = [((h.float() * m).sum(1) / denom).cpu() for h in hidden_states]
    return layer_means, nll, int(targets.numel())


@torch.inference_mode()
def forward_pass(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
    autocast_bf16: bool = False,
    masked_lm: MaskedLM | None = None,
) -> ForwardResult:
    """Run the texts through ``model`` once.

    A batch that runs out of device memory is split in two and retried, down to single
    texts, so the largest batch that fits is found without failing the checkpoint.

    Args:
        model: a ``transformers`` language model (causal, or masked with ``masked_lm``)
            in eval mode on ``device``.
        input_ids, attention_mask: (n_texts, T) from :func:`tokenize`, right-padded.
        batch_size: texts per batch (at most).
        device: where the model lives.
        autocast_bf16: run matrix products in bfloat16 under ``torch.autocast`` (the
            weights stay as loaded; pooling and the loss are accumulated in fp32/fp64).
        masked_lm: score the model on this masked-LM objective (an encoder) instead of
            the next-token loss; ``nll_sum`` / ``n_tokens`` are then over the masked
            tokens.

    Raises:
        NonFiniteError: a hidden state or the loss is NaN or inf.
        torch.OutOfMemoryError: not even one text fits.
    """
    head = OutputHead(model, device)
    layout = hidden_state_layout(model, device)
    n = input_ids.shape[0]
    lengths = attention_mask.sum(1)
    pooled: list[np.ndarray] | None = None
    nll_sum = torch.zeros((), dtype=torch.float64)
    n_tokens = largest = 0
    device_type = torch.device(device).type
    queue = deque(_batches(lengths, batch_size))
    while queue:
        idx = queue.popleft()
        t_max = int(lengths[idx].max())
        ids = input_ids[idx, :t_max].to(device)
        mask = attention_mask[idx, :t_max].to(device)
        masked = None if masked_lm is None else masked_lm.positions[idx, :t_max].to(device)
        try:
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast_bf16):
                layer_means, nll, count = _batch(
                    head, ids, mask, masked, masked_lm and masked_lm.mask_token_id)
        except torch.OutOfMemoryError:
            if len(idx) == 1:
                raise
            del ids, mask
            free_device_memory(device)
            half = (len(idx) + 1) // 2
            logger.warning("out of memory with a batch of %d texts: retrying as %d + %d",
                           len(idx), half, len(idx) - half)
            queue.extendleft([idx[half:], idx[:half]])
            continue
        largest = max(largest, len(idx))
        if pooled is None:
            pooled = [np.empty((n, lm.shape[-1]), dtype=np.float32) for lm in layer_means]
        for layer, lm in zip(pooled, layer_means, strict=True):
            layer[idx.numpy()] = lm.numpy()
        nll_sum += nll
        n_tokens += count

    assert pooled is not None
    if len(layout) != len(pooled):
        if layout:
            logger.debug("hidden-state layout has %d entries, the pass %d", len(layout),
                         len(pooled))
        layout = [unknown_label(i) for i in range(len(pooled))]
    bad_layers = [i for i, layer in enumerate(pooled) if not np.isfinite(layer).all()]
    if bad_layers:
        names = ", ".join(f"{i} = {layout[i]}" for i in bad_layers)
        raise NonFiniteError(f"non-finite hidden states at layers {bad_layers} ({names})")
    if not math.isfinite(float(nll_sum)):
        raise NonFiniteError("non-finite " + ("masked-LM" if masked_lm else "next-token")
                             + " loss")
    return ForwardResult(pooled, float(nll_sum), n_tokens, int(lengths.sum()), largest,
                         head.mode, layout)
