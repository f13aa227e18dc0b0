"""The embedding stage for one checkpoint: load, one forward pass, features, a record.

:func:`layer_features` is pure (arrays in, numbers out); :func:`analyse_checkpoint` is
the edge that loads the model and tokenizer and times each part.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from toposig.config import (
    MLM_FRACTION,
    MLM_SEED,
    Layers,
    RunSettings,
    resolve_layers,
)
from toposig.features import homology, spectral
from toposig.model.forward import (
    ForwardResult,
    MaskedLM,
    forward_pass,
    masked_positions,
    tokenize,
)
from toposig.model.placement import Placement
from toposig.records import TOP_FAMILY, CheckpointOutput, now_iso, record_header
from toposig.sources.checkpoints import Checkpoint, checkpoint_identity
from toposig.sources.loading import MASKED, load_model, load_tokenizer, model_kind

logger = logging.getLogger(__name__)


class EmbeddingOptions(Protocol):
    """What of the embedding family's settings the measurement reads
    (:class:`toposig.families.embedding.EmbeddingFamily`)."""

    @property
    def max_length(self) -> int: ...
    @property
    def pca_dim(self) -> int: ...
    @property
    def maxdim(self) -> int: ...
    @property
    def layers(self) -> Layers: ...
    @property
    def ph_backend(self) -> str: ...
    @property
    def resamples(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def save_hidden(self) -> bool: ...


@dataclass
class LayerResult:
    """Features and diagrams of one layer's point cloud."""

    features: dict[str, float]
    diagrams: list[np.ndarray]
    backend: str


SCALED_NAMES = ("total_persistence", "mean_persistence", "max_persistence", "std_persistence")


def median_pairwise_distance(cloud: np.ndarray) -> float:
    """Median Euclidean distance between distinct points of a cloud (n, d)."""
    from scipy.spatial.distance import pdist

    return float(np.median(pdist(np.asarray(cloud, dtype=np.float64))))


def distinct_rows(cloud: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row of ``cloud`` (n, d), in
    order (all of them when no row repeats another exactly)."""
    _, first = np.unique(np.asarray(cloud), axis=0, return_index=True)
    return np.sort(first)


def ph_features(cloud: np.ndarray, pca_dim: int, maxdim: int, backend: str
                ) -> tuple[dict[str, float], list[np.ndarray], str, float]:
    """PCA → Vietoris–Rips → diagram features, raw and scale-normalised.

    Scale-normalised features are those of the cloud divided by its median pairwise
    distance ``m``: lifetimes divide by ``m``, so ``h{q}_{total,mean,max,std}_persistence``
    get a ``_scaled`` twin (counts and entropy do not change with scale). Growth of the
    embedding norm then does not pass for a change of topology.

    The principal components are fitted to every row, repeated ones included (a
    bootstrap resample weights a text by how often it was drawn), but the Vietoris–Rips
    complex is built on the distinct rows only: in exact arithmetic a repeated point
    adds nothing but zero-length H0 bars, while the SVD's rounding gives the copies
    coordinates that differ in the last bits, so they would add bars of length about
    1e-16, counted in ``h0_n_features`` and diluting the means.

    Returns:
        ``(features, diagrams, backend used, explained variance)``.
    """
    scores, explained = spectral.pca_project(cloud, pca_dim)
    scores = scores[distinct_rows(cloud)]
    diagrams, used = homology.vietoris_rips(scores, maxdim=maxdim, backend=backend)
    feats = homology.diagrams_features(diagrams)
    scale = median_pairwise_distance(cloud)
    if scale > 0:
        scaled = homology.diagrams_features([d / scale for d in diagrams])
        for q in range(len(diagrams)):
            for name in SCALED_NAMES:
                feats[f"h{q}_{name}_scaled"] = scaled[f"h{q}_{name}"]
    feats["median_pairwise_distance"] = scale
    feats["pca_components"] = float(scores.shape[1])
    return feats, diagrams, used, explained


def layer_features(cloud: np.ndarray, pca_dim: int, maxdim: int, backend: str) -> LayerResult:
    """PCA → Vietoris–Rips → diagram features, plus spectral features of the raw cloud.

    Args:
        cloud: (n_texts, hidden) pooled hidden states.
        pca_dim: requested PCA components.
        maxdim: highest homology dimension.
        backend: PH backend name or ``"auto"``.

    Returns:
        Features keyed ``h{q}_{name}`` (and the ``_scaled`` ones of :func:`ph_features`),
        the spectral names, ``pca_explained_variance``, ``pca_components``,
        ``median_pairwise_distance`` and ``mean_norm``; the diagrams (in PCA units, which
        are the cloud's own Euclidean units restricted to the top components) and the
        backend used.
    """
    feats, diagrams, used, explained = ph_features(cloud, pca_dim, maxdim, backend)
    feats.update(spectral.spectral_features(cloud))
    feats["pca_explained_variance"] = explained
    feats["mean_norm"] = float(np.linalg.norm(cloud, axis=1).mean())
    return LayerResult(feats, diagrams, used)


def resampled_features(cloud: np.ndarray, pca_dim: int, maxdim: int, backend: str,
                       n_resamples: int, seed: int) -> dict[str, dict[str, float]]:
    """Spread of the PH features over bootstrap resamples of the texts.

    Each resample draws n texts with replacement (a generator seeded by ``seed`` alone,
    so every checkpoint sees the same resamples) and recomputes :func:`ph_features`,
    whose complex holds each drawn text once, so counts reflect the distinct texts drawn
    (about 63%); read the persistence features.

    Returns:
        feature -> ``{"mean", "std", "p2_5", "p97_5"}`` over the resamples.
    """
    rng = np.random.default_rng(seed)
    n = cloud.shape[0]
    rows: list[dict[str, float]] = []
    for _ in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        rows.append(ph_features(cloud[idx], pca_dim, maxdim, backend)[0])
    out = {}
    for key in rows[0]:
        vals = np.array([r.get(key, np.nan) for r in rows], dtype=np.float64)
        vals = vals[np.isfinite(vals)]
        if vals.size:
            lo, hi = np.percentile(vals, [2.5, 97.5])
            out[key] = {"mean": float(vals.mean()), "std": float(vals.std()),
                        "p2_5": float(lo), "p97_5": float(hi)}
    return out


def analysed_layers(n_hidden_states: int, layers: Layers) -> list[int]:
    """The hidden-state indices ``layers`` names, ascending
    (:func:`toposig.config.resolve_layers`; raises SettingsError for an index out of
    range)."""
    return resolve_layers(layers, n_hidden_states)


@dataclass(frozen=True)
class TextsForward:
    """The analysed texts' one forward pass through a checkpoint's model, which the
    embedding and interlayer families share.

    Attributes:
        result: the pooled hidden states and the loss (:class:`ForwardResult`).
        masked_lm: the masked-LM objective it was scored on (an encoder), else ``None``.
        seconds: how long it took, tokenizing included.
    """

    result: ForwardResult
    masked_lm: MaskedLM | None
    seconds: float


def texts_forward(model, tokenizer, texts: list[str], max_length: int, placement: Placement,
                  batch_size: int | str) -> TextsForward:
    """Tokenize ``texts`` (``max_length`` tokens each) and run them through ``model``
    once, on ``placement``'s device and precision, ``batch_size`` texts a batch (at most;
    ``"auto"``: :meth:`~toposig.model.placement.Placement.batch_size`):
    the next-token loss, or for an encoder the masked-LM loss, and every hidden state
    mean-pooled over each text's tokens.

    Raises:
        ValueError: a token id beyond the model's vocabulary (:func:`check_vocab`).
        NonFiniteError: a hidden state or the loss is NaN or inf.
    """
    t0 = time.perf_counter()
    ids, mask = tokenize(tokenizer, texts, max_length)
    check_vocab(model, ids)
    masked_lm = masked_lm_objective(model, tokenizer, ids, mask)
    result = forward_pass(model, ids, mask, device=placement.device,
                          batch_size=placement.batch_size(batch_size, len(texts)),
                          autocast_bf16=placement.autocast_bf16, masked_lm=masked_lm)
    return TextsForward(result, masked_lm, time.perf_counter() - t0)


def analyse_checkpoint(
    ckpt: Checkpoint,
    texts: list[str],
    settings: EmbeddingOptions,
    *,
    run: RunSettings,
    placement: Placement,
    local_files_only: bool = False,
    model=None,
    tokenizer=None,
    load_s: float = 0.0,
    forward: TextsForward | None = None,
) -> CheckpointOutput:
    """Load one checkpoint once, run one forward pass, compute every feature.

    Args:
        settings: the embedding family's settings.
        run: the run's (its tokenizer, whether a checkpoint's own code may run, the
            forward batch size).
        placement: the resolved device and precision the forward pass runs in.
        model: the checkpoint's model already loaded where ``placement`` says (the
            pipeline loads once for both signature families), or ``None`` to load it.
        tokenizer: the checkpoint's tokenizer already loaded (with the override of
            ``run.tokenizer``), or ``None`` to load it.
        load_s: seconds already spent loading ``model`` (for the record's timings).
        forward: the texts' forward pass through ``model`` (:func:`texts_forward`) when
            another family of the checkpoint already ran it, or ``None`` to run it.

    The record's ``layer`` and the keys of its ``layer_features`` are indices into the
    model's ``hidden_states``; its ``layer_names`` says what each index is, one label per
    entry (:func:`~toposig.model.forward.hidden_state_layout`): index 0 is
    ``"embeddings"`` for most models but ``"block 1"`` for Mamba and RWKV. ``layer`` (whose
    features are ``features``, and the ``--resamples``' layer) is the highest index
    analysed: the last hidden state for ``"last"`` and ``"all"``; ``layer_features`` holds
    every analysed index unless ``settings.layers`` is ``"last"``.

    Raises whatever loading or the forward pass raises (missing revision, unreadable
    weights, :class:`~toposig.model.forward.NonFiniteError`), and
    :class:`~toposig.config.SettingsError` when ``settings.layers`` names an index the
    model does not have; the caller records it.
    """

    t0 = time.perf_counter() - load_s
    if tokenizer is None:
        tokenizer = load_tokenizer(ckpt, run.tokenizer,
                                   local_files_only=local_files_only,
                                   trust_remote_code=run.trust_remote_code)
    if model is None:
        model = load_model(ckpt, placement.weight_dtype, placement.device,
                           local_files_only=local_files_only,
                           trust_remote_code=run.trust_remote_code)
    t_load = time.perf_counter()

    if forward is None:
        forward = texts_forward(model, tokenizer, texts, settings.max_length, placement,
                                run.batch_size)
    fwd, masked_lm = forward.result, forward.masked_lm
    t_fwd = time.perf_counter()

    layers = analysed_layers(len(fwd.pooled), settings.layers)
    per_layer: dict[int, LayerResult] = {
        layer: layer_features(fwd.pooled[layer], settings.pca_dim, settings.maxdim,
                              settings.ph_backend)
        for layer in layers
    }
    resampled = None
    if settings.resamples:
        resampled = resampled_features(fwd.pooled[layers[-1]], settings.pca_dim,
                                       settings.maxdim, settings.ph_backend,
                                       settings.resamples, settings.seed)
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
        **record_header(TOP_FAMILY, checkpoint_identity(ckpt)),
        "perplexity": fwd.perplexity,
        "mean_nll": fwd.mean_nll,
        "n_loss_tokens": fwd.n_tokens,
        "n_input_tokens": fwd.n_input_tokens,
        "n_texts": len(texts),
        "num_layers": len(fwd.pooled) - 1,
        "hidden_size": int(fwd.pooled[-1].shape[1]),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "model_type": getattr(cfg, "model_type", None),
        "layer": last,
        "layer_names": fwd.layer_names,
        "ph_backend": per_layer[last].backend,
        "features": per_layer[last].features,
        "device": placement.device,
        "dtype": placement.dtype,
        "batch_size": fwd.batch_size,
        "timings_s": {
            "load": t_load - t0,
            "forward": forward.seconds,  # where it ran for another family too, its time there
            "features": t_feat - t_fwd,
            "total": (t_load - t0) + forward.seconds + (t_feat - t_fwd),
        },
        "finished_at": now_iso(),
    }
    if masked_lm is not None:  # an encoder: no next-token perplexity, ever
        record |= {"perplexity": None, "mean_nll": None, "quality_measure": "masked_lm_loss",
                   "mlm_loss": fwd.mean_nll, "mlm_fraction": MLM_FRACTION}
    if resampled is not None:
        record["n_resamples"] = settings.resamples
        record["features_resampled"] = resampled
    if settings.layers != "last":  # "all" or chosen indices
        record["layer_features"] = {str(k): v.features for k, v in per_layer.items()}
    del model
    return CheckpointOutput(record, arrays)


def masked_lm_objective(model, tokenizer, ids, mask, seed: int = MLM_SEED) -> MaskedLM | None:
    """The masked-LM objective when ``model`` is an encoder (``None`` for a causal LM):
    :data:`~toposig.config.MLM_FRACTION` of the non-special tokens, chosen by ``seed``
    (:data:`~toposig.config.MLM_SEED`: the same positions in every run).

    Raises:
        ValueError: an encoder whose tokenizer has no mask token.
    """
    if model_kind(model.config) != MASKED:
        return None
    if tokenizer.mask_token_id is None:
        raise ValueError(f"{type(model).__name__} is a masked language model, but its "
                         "tokenizer has no mask token to score it with")
    return MaskedLM(masked_positions(ids, mask, tokenizer.all_special_ids, MLM_FRACTION, seed),
                    tokenizer.mask_token_id)


def check_vocab(model, ids) -> None:
    """Raise ValueError when a token id is outside the model's vocabulary (the output
    head's rows, else the input embedding's, else the config's ``vocab_size``)."""
    vocab = None
    for module in (model.get_output_embeddings(), model.get_input_embeddings()):
        weight = getattr(module, "weight", None)
        if weight is not None:
            vocab = weight.shape[0]
            break
    vocab = vocab or getattr(model.config, "vocab_size", None)
    if vocab is not None and int(ids.max()) >= vocab:
        raise ValueError(f"tokenizer produces id {int(ids.max())} but the model's vocabulary "
                         f"has {vocab} entries: wrong --tokenizer for this model?")
