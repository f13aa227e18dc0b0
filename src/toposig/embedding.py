"""The embedding stage for one checkpoint: load, one forward pass, features, a record.

:func:`layer_features` is pure (arrays in, numbers out); :func:`analyse_checkpoint` is
the edge that loads the model and tokenizer and times each part.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from . import homology, spectral
from .checkpoints import Checkpoint, fingerprint, load_model, load_tokenizer
from .config import SCHEMA_VERSION, EmbeddingSettings
from .forward import forward_pass, tokenize

logger = logging.getLogger(__name__)


@dataclass
class LayerResult:
    """Features and diagrams of one layer's point cloud."""

    features: dict[str, float]
    diagrams: list[np.ndarray]
    backend: str


def layer_features(cloud: np.ndarray, pca_dim: int, maxdim: int, backend: str) -> LayerResult:
    """PCA → Vietoris–Rips → diagram features, plus spectral features of the raw cloud.

    Args:
        cloud: (n_texts, hidden) pooled hidden states.
        pca_dim: requested PCA components.
        maxdim: highest homology dimension.
        backend: PH backend name or ``"auto"``.

    Returns:
        Features keyed ``h{q}_{name}``, the spectral names, ``pca_explained_variance``
        and ``pca_components``; the diagrams (in PCA units, which are the cloud's own
        Euclidean units restricted to the top components) and the backend used.
    """
    scores, explained = spectral.pca_project(cloud, pca_dim)
    diagrams, used = homology.vietoris_rips(scores, maxdim=maxdim, backend=backend)
    feats = homology.diagrams_features(diagrams)
    feats.update(spectral.spectral_features(cloud))
    feats["pca_explained_variance"] = explained
    feats["pca_components"] = float(scores.shape[1])
    feats["mean_norm"] = float(np.linalg.norm(cloud, axis=1).mean())
    return LayerResult(feats, diagrams, used)


def resolve_device(device: str) -> str:
    import torch

    if device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {device} asked for, but CUDA is not available here")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` → bfloat16 on CUDA, float32 elsewhere."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


@dataclass
class CheckpointOutput:
    """A finished checkpoint: its JSON record and the arrays saved beside it."""

    record: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def analysed_layers(n_hidden_states: int, layers: str) -> list[int]:
    return list(range(n_hidden_states)) if layers == "all" else [n_hidden_states - 1]


def analyse_checkpoint(
    ckpt: Checkpoint,
    texts: list[str],
    settings: EmbeddingSettings,
    *,
    device: str,
    dtype: str,
    local_files_only: bool = False,
    model=None,
    load_s: float = 0.0,
) -> CheckpointOutput:
    """Load one checkpoint once, run one forward pass, compute every feature.

    Args:
        model: the checkpoint's model already loaded on ``device`` in ``dtype`` (the
            pipeline loads once for both signature families), or ``None`` to load it.
        load_s: seconds already spent loading ``model`` (for the record's timings).

    Raises whatever loading or the forward pass raises (missing revision, unreadable
    weights, :class:`~toposig.forward.NonFiniteError`); the caller records it.
    """
    import torch

    t0 = time.perf_counter() - load_s
    tokenizer = load_tokenizer(ckpt, settings.tokenizer, local_files_only=local_files_only,
                               trust_remote_code=settings.trust_remote_code)
    if model is None:
        model = load_model(ckpt, getattr(torch, dtype), device,
                           local_files_only=local_files_only,
                           trust_remote_code=settings.trust_remote_code)
    t_load = time.perf_counter()

    ids, mask = tokenize(tokenizer, texts, settings.max_length)
    vocab = model.get_output_embeddings().weight.shape[0]
    if int(ids.max()) >= vocab:
        raise ValueError(
            f"tokenizer produces id {int(ids.max())} but the model's vocabulary has {vocab} "
            "entries: wrong --tokenizer for this model?"
        )
    fwd = forward_pass(model, ids, mask, batch_size=settings.batch_size, device=device)
    t_fwd = time.perf_counter()

    layers = analysed_layers(fwd.pooled.shape[0], settings.layers)
    per_layer: dict[int, LayerResult] = {
        layer: layer_features(fwd.pooled[layer], settings.pca_dim, settings.maxdim,
                              settings.ph_backend)
        for layer in layers
    }
    t_feat = time.perf_counter()

    last = layers[-1]
    arrays: dict[str, np.ndarray] = {}
    for layer, res in per_layer.items():
        for q, dgm in enumerate(res.diagrams):
            arrays[f"layer{layer}_h{q}"] = dgm
        if settings.save_hidden:
            arrays[f"layer{layer}_hidden"] = fwd.pooled[layer]
    cfg = model.config
    record = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        **checkpoint_fields(ckpt),
        "perplexity": fwd.perplexity,
        "mean_nll": fwd.mean_nll,
        "n_loss_tokens": fwd.n_tokens,
        "n_input_tokens": fwd.n_input_tokens,
        "n_texts": len(texts),
        "num_layers": int(fwd.pooled.shape[0] - 1),
        "hidden_size": int(fwd.pooled.shape[2]),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "model_type": getattr(cfg, "model_type", None),
        "layer": last,
        "ph_backend": per_layer[last].backend,
        "features": per_layer[last].features,
        "device": device,
        "dtype": dtype,
        "timings_s": {
            "load": t_load - t0,
            "forward": t_fwd - t_load,
            "features": t_feat - t_fwd,
            "total": t_feat - t0,
        },
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if settings.layers == "all":
        record["layer_features"] = {str(k): v.features for k, v in per_layer.items()}
    del model
    return CheckpointOutput(record, arrays)


def checkpoint_fields(ckpt: Checkpoint) -> dict:
    """The identity of a checkpoint as it appears in every record."""
    return {
        "model": ckpt.model,
        "model_label": ckpt.label,
        "step": ckpt.step,
        "source": ckpt.source,
        "location": ckpt.location,
        "revision": ckpt.revision,
        "checkpoint_fingerprint": fingerprint(ckpt),
    }
