"""Which weight matrices a checkpoint's weight signatures are computed on, and its size.

One model gives the same matrices, under the same names, whichever way it is stored.
Three rules choose them, and :attr:`Matrices.rule` says which did (for the record):

- **Module type** (:data:`RULE_MODULES`; a model folder or Hub revision, loaded): the
  weights of its linear layers found by module type (``torch.nn.Linear`` and
  ``transformers``' ``Conv1D``), leaving out by identity the modules
  ``get_input_embeddings()`` and ``get_output_embeddings()`` return and any linear layer
  whose weight shares storage with theirs (a head tied to the embedding); a model that
  names no output-embedding module has its head found by shape instead (a linear layer
  with one output per row of the input embedding). A ``Conv1D`` weight is stored
  (in, out); it is transposed so that every matrix is (out, in) and its rows are output
  neurons.
- **Module type through a config** (:func:`rule_config`; a plain state dict with a
  ``transformers`` config: ``config.json`` beside the file, or the checkpoint's own
  metadata, see :func:`toposig.sources.checkpoint_files.load_checkpoint_file`): the
  architecture is built on the meta device (no memory, no weights), the state dict's
  names are matched to its parameters, and exactly the matrices the module-type rule
  selects for that model are taken from the file, transposed likewise, under the model's
  parameter names. Models tried, first match taken: the class a model folder of that
  config loads (``AutoModelForCausalLM`` or ``AutoModelForMaskedLM``), the classes the
  config's ``architectures`` name, the bare ``AutoModel``. Names are matched as they are,
  without a ``module.`` / ``_orig_mod.`` wrapper prefix, or renamed as ``transformers``
  renames checkpoint names when it loads the model (``save_pretrained`` writes
  GPT-NeoX's ``lm_head`` as ``embed_out``) with the base prefix added or removed (a
  state dict of a bare base model). A model matches when every 2-D floating-point
  tensor of the file is one of its parameters with the same shape, and every matrix the
  rule selects is in the file but those of a top-level module the file holds nothing of
  (the head of a masked LM whose bare encoder was saved, a pooler the saved model did
  not have). When none matches, the tensor-structure rule decides and the rule recorded
  says why.
- **Tensor structure** (:func:`rule_structure`; a plain state dict with no config, or one
  that does not match it). What a name *says* is never used, only what the tensors are
  and where they sit in the module tree. Candidates are the 2-D floating-point
  ``*weight`` tensors (PyTorch's name for a module's weight: biases, norms and other 1-D
  tensors, causal masks, raw parameters and buffers are not candidates). A candidate is
  an *embedding table or output head* (:func:`embedding_tables`) when it is not inside a
  block of the layer stack (its dotted path has no number followed by a sub-module, as
  in ``layers.3.mlp``) and either its row count is the input size (second dimension) of
  no 2-D tensor of the file, as the rows of a vocabulary, position or token-type table
  are, or it shares storage with another tensor (an embedding and its tied head); a
  state dict with no layer stack at all (a plain MLP: ``0.weight``, ``2.weight``) has no
  such tables, and every candidate of it is analysed, its output layer too. Left
  out: those tables, every candidate that shares storage with one, and every candidate
  that holds a copy of one (same shape, dtype and values: a tied head saved to
  ``.safetensors``, which cannot share storage). Kept: the other candidates, as stored
  (a ``Conv1D`` weight is not recognised, so it stays (in, out): the same neural
  persistence, other rows), under the file's names.

  What it accepts: a model whose embeddings and heads sit outside the numbered blocks
  (every ``transformers`` language model, nanoGPT, minGPT, Meta's Llama format) gets the
  module-type rule's matrices, so long as no untied table's row count happens to be a
  layer's input size (GPT-2 medium's 1024-row position table beside its 1024-wide
  layers is kept) and no linear layer outside the blocks has outputs no layer reads (a
  classification head there is left out). Tables inside the blocks (T5's relative
  position bias) are kept. A config beside the file removes all of these doubts.

``--weight-include`` (exactly the 2-D ``*weight`` tensors whose name matches, rule
:data:`RULE_INCLUDE`) and ``--weight-exclude`` (on the names the record gets) override.
Parameter counts count each storage once, however many names point at it.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence

import torch

from toposig.features.weights import select_matrices

logger = logging.getLogger(__name__)

RULE_MODULES = "module type (loaded model)"
RULE_INCLUDE = "names (--weight-include)"
# wrapper prefixes a training loop's state dict may carry: DistributedDataParallel,
# torch.compile
_WRAPPER_PREFIXES: tuple[str, ...] = ("module.", "_orig_mod.")


def rule_config(source: str) -> str:
    """The record's ``matrix_rule`` when a config chose: ``"module type (<source>)"``."""
    return f"module type ({source})"


def rule_structure(reason: str = "no config") -> str:
    """The record's ``matrix_rule`` when the tensors' structure chose, and why no config
    did: ``"tensor structure (<reason>)"``."""
    return f"tensor structure ({reason})"


class Matrices(dict):
    """The chosen matrices: name -> (out, in) tensor, in order, and the rule that chose.

    Attributes:
        rule: which rule chose them (:data:`RULE_MODULES`, :func:`rule_config`,
            :func:`rule_structure`, :data:`RULE_INCLUDE`), for the record's
            ``matrix_rule``.
    """

    def __init__(self, items: Mapping[str, torch.Tensor] | None = None, rule: str = ""):
        super().__init__(items or {})
        self.rule = rule


def storage_key(t: torch.Tensor) -> tuple:
    """Identity of a tensor's memory: two names with the same key are one parameter.

    A meta tensor has no memory (every one reports address 0): its key is the tensor
    object itself, so names tied to one ``Parameter`` share it and no others do.
    """
    if t.is_meta:
        return ("meta", id(t))
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


def _shapes(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {n: tuple(t.shape) for n, t in tensors.items() if t.is_floating_point()}


# ------------------------------------------------------------------ tensor structure


def in_layer_stack(name: str) -> bool:
    """Whether a parameter sits inside a block of a repeated stack: a component of its
    dotted path is a number and a sub-module follows it (``layers.3.mlp.fc.weight``;
    not ``layers.3.weight``, a layer that is itself the list's element).

    >>> in_layer_stack("model.layers.0.self_attn.q_proj.weight"), in_layer_stack("0.weight")
    (True, False)
    """
    parts = name.split(".")
    return any(p.isdigit() and len(parts) - i - 1 >= 2 for i, p in enumerate(parts))


def _is_candidate(name: str, t: torch.Tensor) -> bool:
    return (t.dim() == 2 and t.is_floating_point() and name.endswith("weight")
            and min(t.shape) >= 1)


def embedding_tables(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of a plain state dict's embedding tables and output heads, by structure.

    A candidate (2-D floating-point ``*weight`` tensor) outside the blocks of the layer
    stack (:func:`in_layer_stack`) whose row count is the second dimension of no 2-D
    floating-point tensor of the state dict (no layer takes a vocabulary, position or
    token-type index as input), or that shares storage with another tensor (a tied
    embedding and head). A state dict with no layer stack at all (a plain MLP,
    ``0.weight``, ``2.weight``) has none. See the module doc for what this accepts.

    Args:
        tensors: parameter name -> tensor.

    Returns:
        Their names, in the state dict's order.
    """
    two_d = {n: t for n, t in tensors.items() if t.dim() == 2 and t.is_floating_point()}
    if not any(in_layer_stack(n) for n in tensors):
        return []  # no layer stack: a plain network (an MLP), every layer of it analysed
    inputs = {int(t.shape[1]) for t in two_d.values()}
    names_of: dict[tuple, int] = {}
    for t in tensors.values():
        key = storage_key(t)
        names_of[key] = names_of.get(key, 0) + 1
    return [n for n, t in two_d.items()
            if _is_candidate(n, t) and not in_layer_stack(n)
            and (int(t.shape[0]) not in inputs or names_of[storage_key(t)] > 1)]


def copies_of_left_out(tensors: Mapping[str, torch.Tensor],
                       tables: Sequence[str] | None = None) -> set[str]:
    """Names of the 2-D tensors that hold a copy of an embedding table or head
    (:func:`embedding_tables`), with no storage of their own to tell: a head tied to the
    embedding but saved as a copy (``.safetensors`` cannot share storage).

    A copy is equal in shape, dtype and every value to a table and does not share its
    storage. Of tables equal to each other, the first in the state dict's order is the
    original and the others are copies, so that each is counted once.

    Args:
        tensors: parameter name -> tensor.
        tables: :func:`embedding_tables` of ``tensors``, if already known.
    """
    tables = embedding_tables(tensors) if tables is None else tables

    def copy_of(t: torch.Tensor, originals: list[str]) -> bool:
        return any(tensors[o].shape == t.shape and tensors[o].dtype == t.dtype
                   and storage_key(tensors[o]) != storage_key(t) and torch.equal(tensors[o], t)
                   for o in originals)

    originals: list[str] = []
    copies = set()
    for name in tables:
        if copy_of(tensors[name], originals):
            copies.add(name)
        else:
            originals.append(name)
    for name, t in tensors.items():
        if t.dim() == 2 and name not in tables and copy_of(t, originals):
            copies.add(name)
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


def structure_matrices(tensors: Mapping[str, torch.Tensor], exclude: Sequence[str] = (),
                       copies: set[str] | None = None) -> dict[str, torch.Tensor]:
    """The tensor-structure rule (module doc): the candidates that are no embedding
    table or head, share no storage with one and are no copy of one, as stored (2-D,
    the file's layout), by the file's names, in its order; ``exclude`` removes names.

    Args:
        tensors: parameter name -> tensor.
        exclude: ``--weight-exclude`` regular expressions.
        copies: :func:`copies_of_left_out` of ``tensors``, if already known.
    """
    tables = embedding_tables(tensors)
    copies = copies_of_left_out(tensors, tables) if copies is None else copies
    left_out = {storage_key(tensors[n]) for n in tables}
    exc = [re.compile(p) for p in exclude]
    return {n: t for n, t in tensors.items()
            if _is_candidate(n, t) and n not in tables and n not in copies
            and storage_key(t) not in left_out and not any(p.search(n) for p in exc)}


# ------------------------------------------------------------------ module type


def linear_layers(model: torch.nn.Module) -> list[tuple[str, torch.Tensor, bool]]:
    """The module-type rule (module doc) on a model, real or on the meta device.

    Returns:
        ``(parameter name, weight as stored, stored (in, out))`` of each chosen linear
        layer, in module order; the third item is true for a ``Conv1D``, whose weight
        is transposed to (out, in) before analysis.
    """
    from transformers.pytorch_utils import Conv1D

    emb_in = _get(model, "get_input_embeddings")
    head = _get(model, "get_output_embeddings")
    left_out = [m for m in (emb_in, head) if m is not None]
    tied = {storage_key(p) for m in left_out for p in m.parameters()}
    emb_w = getattr(emb_in, "weight", None)
    vocab = int(emb_w.shape[0]) if isinstance(emb_w, torch.Tensor) and emb_w.dim() == 2 else None
    chosen = []
    for name, m in model.named_modules():
        if not isinstance(m, (torch.nn.Linear, Conv1D)) or any(m is e for e in left_out):
            continue
        w = getattr(m, "weight", None)
        if not isinstance(w, torch.Tensor) or w.dim() != 2 or storage_key(w) in tied:
            continue
        conv = isinstance(m, Conv1D)
        if head is None and vocab is not None and int(w.shape[1 if conv else 0]) == vocab:
            continue  # the model names no head module: one output per token is the head
        chosen.append((f"{name}.weight" if name else "weight", w, conv))
    return chosen


def model_matrices(model: torch.nn.Module, include: Sequence[str] = (),
                   exclude: Sequence[str] = ()) -> Matrices:
    """The matrices of a model: its linear layers' weights, (out, in), by parameter name.

    Args:
        model: a ``transformers`` model (``get_input_embeddings`` /
            ``get_output_embeddings`` name what is left out).
        include, exclude: ``--weight-include`` / ``--weight-exclude`` regular expressions;
            with ``include``, exactly the 2-D ``*weight`` parameters whose name matches.

    Returns:
        :class:`Matrices` (rule :data:`RULE_MODULES`, or :data:`RULE_INCLUDE`) of the
        stored values, not copies.
    """
    from transformers.pytorch_utils import Conv1D

    if include:
        conv = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, Conv1D)}
        params = dict(model.state_dict(keep_vars=True))
        return Matrices({n: _oriented(params[n], n in conv)
                         for n in select_matrices(_shapes(params), include, exclude)},
                        RULE_INCLUDE)
    exc = [re.compile(p) for p in exclude]
    return Matrices({n: _oriented(w, conv) for n, w, conv in linear_layers(model)
                     if not any(p.search(n) for p in exc)}, RULE_MODULES)


def _oriented(w: torch.Tensor, stored_in_out: bool) -> torch.Tensor:
    return w.detach().t() if stored_in_out else w.detach()


def _get(model, method: str):
    try:
        return getattr(model, method)()
    except (AttributeError, NotImplementedError):
        return None


# ------------------------------------------------------------------ plain state dicts


def state_dict_matrices(tensors: Mapping[str, torch.Tensor], include: Sequence[str] = (),
                        exclude: Sequence[str] = (), copies: set[str] | None = None, *,
                        config=None, config_source: str = "config") -> Matrices:
    """The matrices of a plain state dict (see the module doc), and the rule that chose.

    Args:
        tensors: parameter name -> tensor.
        include, exclude: ``--weight-include`` / ``--weight-exclude`` regular expressions.
        copies: :func:`copies_of_left_out` of ``tensors``, if already known.
        config: the checkpoint's ``transformers`` config (a ``PretrainedConfig`` or the
            contents of a ``config.json``), or ``None``: with one whose model matches the
            tensors, the module-type rule chooses.
        config_source: where the config was found, for the record's rule
            (``"config.json beside the file"``).

    Returns:
        :class:`Matrices`: name -> (out, in) tensor (the file's tensors, a ``Conv1D``
        weight transposed when a config says which are), in order.
    """
    if include:
        return Matrices({n: tensors[n] for n in select_matrices(_shapes(tensors), include,
                                                                exclude)}, RULE_INCLUDE)
    reason = "no config"
    if config is not None:
        found, why = config_matrices(tensors, config, exclude)
        if found is not None:
            return Matrices(found, rule_config(config_source))
        reason = f"the {config_source} does not fit the tensors: {why}"
        logger.info("%s; choosing matrices by tensor structure", reason)
    return Matrices(structure_matrices(tensors, exclude, copies), rule_structure(reason))


def config_matrices(tensors: Mapping[str, torch.Tensor], config, exclude: Sequence[str] = ()
                    ) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The module-type rule for a plain state dict, through the model ``config`` builds.

    Args:
        tensors: parameter name -> tensor.
        config: a ``PretrainedConfig`` or a ``config.json``'s contents.
        exclude: ``--weight-exclude`` regular expressions, on the model's names.

    Returns:
        ``(model name -> (out, in) tensor of the file, "")`` from the first model that
        matches (module doc), or ``(None, why none did)``.
    """
    cfg = _as_config(config)
    if cfg is None:
        return None, "not a config transformers can read without remote code"
    exc = [re.compile(p) for p in exclude]
    why = "no model class of it could be built"
    for cls in _model_classes(cfg):
        try:
            with torch.device("meta"):
                model = cls.from_config(cfg) if hasattr(cls, "from_config") else cls(cfg)
        except Exception as e:  # noqa: BLE001 - a class that does not fit: try the next
            logger.debug("%s not built from the config: %s", getattr(cls, "__name__", cls), e)
            continue
        mapping, why = _match_names(tensors, model)
        if mapping is None:
            continue
        layers = linear_layers(model)
        held = {n.split(".")[0] for n in mapping}  # the model's top modules the file holds
        missing = [n for n, _, _ in layers if n not in mapping]
        if [n for n in missing if n.split(".")[0] in held] or len(missing) == len(layers):
            why = (f"{type(model).__name__} has linear layers the file lacks "
                   f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''})")
            continue
        return ({n: _oriented(tensors[mapping[n]], conv) for n, _, conv in layers
                 if n in mapping and not any(p.search(n) for p in exc)}, "")
    return None, why


def _as_config(config):
    """A ``PretrainedConfig`` of ``config`` (one already, or a ``config.json``'s
    contents), or ``None`` when transformers cannot read it without remote code."""
    from transformers import PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return config
    if not isinstance(config, Mapping) or "auto_map" in config:
        return None
    from transformers import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[config["model_type"]].from_dict(dict(config))
    except Exception as e:  # noqa: BLE001 - unknown type, bad values: no config
        logger.debug("config not read: %s", e)
        return None


def _model_classes(cfg) -> list:
    """Classes to try for ``cfg``: the one a model folder of it loads, those its
    ``architectures`` name, the bare base model."""
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from toposig.sources.loading import MASKED, UnsupportedModelError, model_kind

    classes: list = []
    with contextlib.suppress(UnsupportedModelError):  # a classifier: no class a folder loads
        classes.append(AutoModelForMaskedLM if model_kind(cfg) == MASKED
                       else AutoModelForCausalLM)
    for arch in getattr(cfg, "architectures", None) or ():
        cls = getattr(transformers, str(arch), None) if str(arch).isidentifier() else None
        if isinstance(cls, type) and cls not in classes:
            classes.append(cls)
    classes.append(AutoModel)
    return classes


def _match_names(tensors: Mapping[str, torch.Tensor], model: torch.nn.Module
                 ) -> tuple[dict[str, str] | None, str]:
    """``(model parameter name -> file name, "")`` under the first renaming that makes
    every 2-D floating-point tensor of the file a parameter or buffer of ``model`` of the
    same shape; ``(None, why)`` when none does.

    Renamings tried: none; a ``module.`` / ``_orig_mod.`` wrapper prefix removed; then
    ``transformers``' own renaming of checkpoint names when it loads this model (GPT-NeoX's
    ``embed_out`` is its ``lm_head``, old ``gamma``/``beta`` names), with the model's base
    prefix added or removed where that names a parameter (a bare base model's state dict).
    A file that needs more than renaming (experts stacked into one tensor) does not match.
    """
    meta = model.state_dict(keep_vars=True)
    own = {n: tuple(t.shape) for n, t in meta.items()}
    two_d = [n for n, t in tensors.items() if t.dim() == 2 and t.is_floating_point()]
    base = getattr(model, "base_model_prefix", "") or ""
    hf_rename = _transformers_renaming(model)

    def unwrap(n: str) -> str:
        for p in _WRAPPER_PREFIXES:
            n = n.removeprefix(p)
        return n

    def renamed(n: str) -> str:
        n = hf_rename(unwrap(n))
        if base and n.startswith(f"{base}.") and n not in own and n[len(base) + 1:] in own:
            return n[len(base) + 1:]
        if base and n not in own and f"{base}.{n}" in own:
            return f"{base}.{n}"
        return n

    best: list[str] = two_d
    for rename in (lambda n: n, unwrap, renamed):
        mapping = {rename(n): n for n in tensors}
        unmatched = [n for n in two_d if own.get(rename(n)) != tuple(tensors[n].shape)]
        if not unmatched and len(mapping) == len(tensors):
            return mapping, ""
        if len(unmatched) < len(best):
            best = unmatched
    return None, (f"{type(model).__name__} has no parameter of that name and shape for "
                  f"{', '.join(best[:3])}{' ...' if len(best) > 3 else ''}")


def _transformers_renaming(model: torch.nn.Module):
    """``transformers``' renaming of checkpoint names into ``model``'s parameter names
    (its load-time ``WeightRenaming`` rules, without the conversions that merge or split
    tensors); the identity where this version of transformers has none."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, apply_renamings

        rules = [t for t in get_model_conversion_mapping(model)
                 if isinstance(t, WeightRenaming)]
    except Exception as e:  # noqa: BLE001 - internal API of transformers 5: names as they are
        logger.debug("no transformers renaming rules: %s", e)
        return lambda n: n
    return lambda n: apply_renamings(n, rules)
