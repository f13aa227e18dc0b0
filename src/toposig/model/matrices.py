"""Which weight matrices a checkpoint's weight signatures are computed on, and its size.

- **A model** (a model folder or Hub revision, loaded): the weights of its linear layers
  found by module type (``torch.nn.Linear`` and ``transformers``' ``Conv1D``), leaving
  out by identity the modules ``get_input_embeddings()`` and
  ``get_output_embeddings()`` return and any linear layer whose weight shares storage
  with theirs (a head tied to the embedding). A ``Conv1D`` weight is stored (in, out);
  it is transposed so that every matrix is (out, in) and its rows are output neurons.
- **A plain state dict** (a ``.pt`` / ``.safetensors`` file with no model around it):
  the 2-D ``*weight`` tensors whose names do not match
  :data:`~toposig.features.weights.DEFAULT_EXCLUDE` (embedding name components such as
  ``token_emb`` or ``embed_in``, ``wte``, ``wpe``, heads, Meta's ``output.weight``,
  norms), none that shares storage with a tensor left out that way (nanoGPT's
  ``head.weight`` tied to ``token_emb.weight``) and none that is a copy of one (a tied
  head saved to ``.safetensors``, which cannot share storage).

Either way ``--weight-include`` (exactly the 2-D ``*weight`` tensors whose name matches)
and ``--weight-exclude`` override. Parameter counts count each storage once, however
many names point at it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import torch

from toposig.features.weights import DEFAULT_EXCLUDE, select_matrices


def storage_key(t: torch.Tensor) -> tuple:
    """Identity of a tensor's memory: two names with the same key are one parameter."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())


def count_parameters(tensors: Iterable[torch.Tensor]) -> int:
    """Number of values in ``tensors``, each storage counted once."""
    seen: set[tuple] = set()
    total = 0
    for t in tensors:
        key = storage_key(t)
        if key not in seen:
            seen.add(key)
            total += t.numel()
    return total


def _is_mask_buffer(name: str, t: torch.Tensor) -> bool:
    """A causal-mask buffer saved in a state dict (minGPT/nanoGPT/old GPT-2 ``attn.bias``,
    ``attn.masked_bias``): not a parameter, however it is named."""
    return name.endswith(("attn.bias", "attn.masked_bias")) and t.dim() in (0, 4)


def _left_out_by_name(name: str) -> bool:
    return any(re.search(p, name) for p in DEFAULT_EXCLUDE)


def copies_of_left_out(tensors: Mapping[str, torch.Tensor]) -> set[str]:
    """Names of tensors equal in shape, dtype and every value to a tensor the name rule
    leaves out, with no storage of their own to tell: a head tied to the embedding but
    saved as a copy (``.safetensors`` cannot share storage)."""
    left_out = [t for n, t in tensors.items() if _left_out_by_name(n) and t.dim() == 2]
    copies = set()
    for name, t in tensors.items():
        if t.dim() != 2 or _left_out_by_name(name):
            continue
        for e in left_out:
            if (e.shape == t.shape and e.dtype == t.dtype
                    and storage_key(e) != storage_key(t) and torch.equal(e, t)):
                copies.add(name)
                break
    return copies


def state_dict_parameters(tensors: Mapping[str, torch.Tensor],
                          copies: set[str] | None = None) -> int:
    """Parameters of a plain state dict: its floating-point tensors, each storage once
    (a tied tensor saved as a copy of an embedding or head once too), causal-mask
    buffers left out. ``copies``: :func:`copies_of_left_out` of ``tensors``, if known."""
    copies = copies_of_left_out(tensors) if copies is None else copies
    return count_parameters(t for name, t in tensors.items()
                            if t.is_floating_point() and not _is_mask_buffer(name, t)
                            and name not in copies)


def _shapes(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {n: tuple(t.shape) for n, t in tensors.items() if t.is_floating_point()}


def state_dict_matrices(tensors: Mapping[str, torch.Tensor], include: Sequence[str] = (),
                        exclude: Sequence[str] = (), copies: set[str] | None = None
                        ) -> dict[str, torch.Tensor]:
    """The matrices of a plain state dict, by name, in its order (see the module doc).

    Args:
        tensors: parameter name -> tensor.
        include, exclude: ``--weight-include`` / ``--weight-exclude`` regular expressions.
        copies: :func:`copies_of_left_out` of ``tensors``, if already known.
    """
    names = select_matrices(_shapes(tensors), include, exclude)
    if not include:  # nothing tied to a tensor the name rule leaves out, nor a copy of one
        left_out = {storage_key(t) for n, t in tensors.items() if _left_out_by_name(n)}
        copies = copies_of_left_out(tensors) if copies is None else copies
        names = [n for n in names if storage_key(tensors[n]) not in left_out
                 and n not in copies]
    return {n: tensors[n] for n in names}


def model_matrices(model: torch.nn.Module, include: Sequence[str] = (),
                   exclude: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """The matrices of a model: its linear layers' weights, (out, in), by parameter name.

    Args:
        model: a ``transformers`` model (``get_input_embeddings`` /
            ``get_output_embeddings`` name what is left out).
        include, exclude: ``--weight-include`` / ``--weight-exclude`` regular expressions;
            with ``include``, exactly the 2-D ``*weight`` parameters whose name matches.
    """
    from transformers.pytorch_utils import Conv1D

    transposed = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, Conv1D)}
    exc = [re.compile(p) for p in exclude]
    if include:
        params = dict(model.state_dict(keep_vars=True))
        chosen = {n: params[n] for n in select_matrices(_shapes(params), include)}
    else:
        head = _get(model, "get_output_embeddings")
        left_out = [m for m in (_get(model, "get_input_embeddings"), head) if m is not None]
        tied = {storage_key(p) for m in left_out for p in m.parameters()}
        chosen = {}
        for name, m in model.named_modules():
            if not isinstance(m, (torch.nn.Linear, Conv1D)) or any(m is e for e in left_out):
                continue
            if head is None and _left_out_by_name(f"{name}.weight"):
                continue  # the model names no head module: the name rule finds it
            w = getattr(m, "weight", None)
            if not isinstance(w, torch.Tensor) or w.dim() != 2 or storage_key(w) in tied:
                continue
            chosen[f"{name}.weight" if name else "weight"] = w
    return {n: (w.detach().t() if n in transposed else w.detach())
            for n, w in chosen.items() if not any(p.search(n) for p in exc)}


def _get(model, method: str):
    try:
        return getattr(model, method)()
    except (AttributeError, NotImplementedError):
        return None
