"""The ``interlayer`` family: how the topology of the texts' hidden states persists from
one layer to the next, as the H0 zigzag barcode over every hidden state
(:mod:`toposig.features.zigzag`; Gardinazzi et al. 2025). Opt-in
(``--signatures ...,interlayer``).

One forward pass over the analysed texts gives every hidden state, mean-pooled over each
text's tokens as the embedding family pools them (the same pass as the embedding's, run
once when both families are measured); each layer's cloud becomes its
``k``-nearest-neighbour graph, and the graphs of neighbouring layers are joined through
their union. The record holds the barcode's scalars (``zigzag_h0_*``), the loss stored with
the checkpoint (what its features are tested against when no perplexity was measured),
their non-topological baseline (``layer_knn_overlap``: how much each text's neighbours persist
from layer to layer, on the same graphs), and its arrays the bars (``h0_bars``: birth and
death zigzag positions, inclusive; position ``2l`` is hidden state ``l``, ``2l + 1`` the
union of ``l`` and ``l + 1``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from toposig.config import at_least, setting
from toposig.families.base import (
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Kind,
    Session,
    SignatureFamily,
    Texts,
    with_stored_loss,
)
from toposig.families.registry import register
from toposig.features.names import ZIGZAG_NAMES
from toposig.records import CheckpointOutput, Record, now_iso, record_header

_WORDS: dict[str, tuple[str, str, Kind]] = {
    "zigzag_h0_n_bars": ("bars of the H0 zigzag over the layers' k-NN graphs", "count",
                         Kind.COUNT),
    "zigzag_h0_n_through": ("clusters of texts that persist through every layer", "count",
                            Kind.COUNT),
    "zigzag_h0_mean_span": ("mean layers an H0 zigzag bar spans", "layers",
                            Kind.DISCONTINUOUS),
    "zigzag_h0_entropy": ("entropy of the H0 zigzag bars' lengths", "nats",
                          Kind.DISCONTINUOUS),
    "zigzag_h0_mean_birth": ("mean layer at which an H0 zigzag bar is born", "layer",
                             Kind.DISCONTINUOUS),
    "zigzag_h0_layer_similarity": ("mean Jaccard index of the H0 zigzag bars alive at "
                                   "neighbouring layers", "0-1", Kind.DISCONTINUOUS),
}
STATISTICS = FeatureGroup(
    "interlayer_statistics", "inter-layer statistics",
    features=(Feature("layer_knn_overlap", "mean Jaccard index of each text's neighbours in "
                                           "neighbouring layers' k-NN graphs", "0-1"),),
    prefixes=("layer_knn_",))
TOPOLOGY = FeatureGroup(
    "interlayer_topological", "inter-layer topology",
    features=tuple(Feature(n, *_WORDS[n]) for n in ZIGZAG_NAMES),
    topological=True, baselines=STATISTICS.names, prefixes=("zigzag_",))


@dataclass(frozen=True)
class InterlayerFamily(SignatureFamily):
    """The H0 zigzag persistence of the texts' k-nearest-neighbour graphs over every
    hidden state, and how much each text's neighbours persist from layer to layer."""

    name: ClassVar[str] = "interlayer"
    options_title: ClassVar[str] = "interlayer (H0 zigzag persistence over the layers)"
    order: ClassVar[int] = 90  # before the embedding, on the model in the run's precision
    texts: ClassVar[Texts] = Texts.ANALYSED
    precision_keyed: ClassVar[bool] = True
    groups: ClassVar[tuple[FeatureGroup, ...]] = (TOPOLOGY, STATISTICS)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("ZZ bars", ">8", "zigzag_h0_n_bars", ".0f"),
        Column("ZZ sim", ">7", "zigzag_h0_layer_similarity", ".3f"))
    over_training: ClassVar[tuple[str, ...]] = (
        "zigzag_h0_n_bars", "zigzag_h0_n_through", "zigzag_h0_mean_span", "zigzag_h0_entropy",
        "zigzag_h0_layer_similarity", "layer_knn_overlap")
    current_features: ClassVar[tuple[str, ...]] = STATISTICS.names  # added after the zigzag
    study_keys: ClassVar[tuple[str, ...]] = ("dtype",)

    k: int = setting(10, "neighbours per text in each layer's k-nearest-neighbour graph "
                         "(default: %(default)s)", option="--interlayer-k", check=at_least(1))
    max_length: int = setting(128, "tokens per text after truncation", from_run="max_length",
                              check=at_least(2, "tokens"))

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.features.zigzag import knn_graph, knn_overlap, summarize, zigzag_h0
        from toposig.sources.checkpoints import checkpoint_identity

        model = loaded.model(float32=False)
        forward = loaded.texts_forward(inputs.texts, self.max_length, inputs.run.batch_size)
        fwd, placement = forward.result, loaded.placement
        t_fwd = time.perf_counter()
        graphs = [knn_graph(cloud, self.k) for cloud in fwd.pooled]
        bars = zigzag_h0(graphs)
        features = summarize(bars, len(graphs)).features()
        features["layer_knn_overlap"] = knn_overlap(graphs)
        t_feat = time.perf_counter()
        record = {
            **record_header(self.family, checkpoint_identity(loaded.ckpt)),
            "n_texts": len(inputs.texts),
            "n_layers": len(graphs),
            "layer_names": fwd.layer_names,
            "model_type": getattr(model.config, "model_type", None),
            "features": features,
            "settings": self.to_dict(),
            "dtype": placement.dtype,
            "timings_s": {"load": loaded.load_s, "forward": forward.seconds,
                          "features": t_feat - t_fwd,
                          "total": loaded.load_s + forward.seconds + t_feat - t_fwd},
            "finished_at": now_iso(),
        }
        record["num_parameters"] = loaded.num_parameters
        return with_stored_loss(loaded, CheckpointOutput(record,
                                                         {"h0_bars": bars.astype(np.int64)}))

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"interlayer: H0 zigzag over every hidden state, {self.k}-NN graphs of "
                f"{len(inputs.texts)} texts, settings hash: {settings_hash}")

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        n_layers = record.measure("n_layers")
        return [f"{'?' if n_layers is None else n_layers} layers"]


register(InterlayerFamily)
