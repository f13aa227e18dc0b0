"""The ``interlayer`` family: how the topology of the texts' hidden states persists from
one layer to the next, as the H0 zigzag barcode over every hidden state
(:mod:`toposig.features.zigzag`; Gardinazzi et al. 2025). Opt-in
(``--signatures ...,interlayer``).

One forward pass over the analysed texts gives every hidden state, mean-pooled over each
text's tokens as the embedding family pools them (the same pass as the embedding's, run
once when both families are measured); each layer's cloud becomes its
``k``-nearest-neighbour graph, and the graphs of neighbouring layers are joined through
their union. The record holds the barcode's scalars (``zigzag_h0_*``) and its arrays the
bars (``h0_bars``: birth and death zigzag positions, inclusive; position ``2l`` is hidden
state ``l``, ``2l + 1`` the union of ``l`` and ``l + 1``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass

import numpy as np

from toposig.config import SCHEMA_VERSION, EmbeddingSettings, SettingsError
from toposig.records import CheckpointOutput, Family, Record, now_iso, record_header
from toposig.sources.corpus import texts_fingerprint
from toposig.stages.base import Column, Session, Stage, StageInputs, Texts


@dataclass(frozen=True)
class InterlayerSettings:
    """The ``interlayer`` family's settings.

    Attributes:
        k: neighbours per text in each layer's graph (capped at the texts less one).
        max_length: tokens per text after truncation.
    """

    k: int = 10
    max_length: int = 128

    def __post_init__(self) -> None:
        if not (isinstance(self.k, int) and self.k >= 1):
            raise SettingsError(f"--interlayer-k must be at least 1, got {self.k!r}")
        if not (isinstance(self.max_length, int) and self.max_length >= 2):
            raise SettingsError(f"the interlayer max_length must be at least 2 tokens, got "
                                f"{self.max_length!r}")

    def to_dict(self) -> dict:
        return asdict(self)


class InterlayerStage(Stage):
    family = Family.INTERLAYER
    settings_type = InterlayerSettings
    settings_key = "interlayer_settings"
    hash_key = "interlayer_hash"
    order = 90  # before the embedding, on the model in the run's precision
    texts = Texts.ANALYSED
    precision_keyed = True
    columns = (Column("ZZ bars", ">8", "zigzag_h0_n_bars", ".0f"),
               Column("ZZ sim", ">7", "zigzag_h0_layer_similarity", ".3f"))

    def default(self, run: EmbeddingSettings) -> InterlayerSettings:
        return InterlayerSettings(max_length=run.max_length)

    def settings_hash(self, settings: InterlayerSettings, inputs: StageInputs,
                      dtype: str) -> str:
        keyed = {**settings.to_dict(), "schema": SCHEMA_VERSION, "family": str(self.family),
                 "texts_sha": texts_fingerprint(inputs.texts), "dtype": dtype}
        blob = json.dumps(keyed, sort_keys=True).encode()
        return "i" + hashlib.sha256(blob).hexdigest()[:11]

    def run(self, loaded: Session, settings: InterlayerSettings,
            inputs: StageInputs) -> CheckpointOutput:
        from toposig.features.zigzag import knn_graph, summarize, zigzag_h0
        from toposig.sources.checkpoints import checkpoint_identity

        model = loaded.model(float32=False)
        forward = loaded.texts_forward(inputs.texts, settings.max_length,
                                       inputs.run_settings.batch_size)
        fwd, placement = forward.result, loaded.placement
        t_fwd = time.perf_counter()
        graphs = [knn_graph(cloud, settings.k) for cloud in fwd.pooled]
        bars = zigzag_h0(graphs)
        summary = summarize(bars, len(graphs))
        t_feat = time.perf_counter()
        record = {
            **record_header(self.family, checkpoint_identity(loaded.ckpt)),
            "n_texts": len(inputs.texts),
            "n_layers": len(graphs),
            "layer_names": fwd.layer_names,
            "model_type": getattr(model.config, "model_type", None),
            "features": summary.features(),
            "settings": settings.to_dict(),
            "dtype": placement.dtype,
            "timings_s": {"load": loaded.load_s, "forward": forward.seconds,
                          "features": t_feat - t_fwd,
                          "total": loaded.load_s + forward.seconds + t_feat - t_fwd},
            "finished_at": now_iso(),
        }
        return CheckpointOutput(record, {"h0_bars": bars.astype(np.int64)})

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("interlayer (H0 zigzag persistence over the layers)")
        g.add_argument("--interlayer-k", type=int, default=InterlayerSettings().k,
                       help="neighbours per text in each layer's k-nearest-neighbour graph "
                            "(default: %(default)s)")

    def settings_from_args(self, args: argparse.Namespace) -> InterlayerSettings:
        return InterlayerSettings(k=args.interlayer_k, max_length=args.max_length)

    def describe(self, settings: InterlayerSettings, settings_hash: str | None,
                 inputs: StageInputs) -> str:
        return (f"interlayer: H0 zigzag over every hidden state, {settings.k}-NN graphs of "
                f"{len(inputs.texts)} texts, settings hash: {settings_hash}")

    def record_parts(self, record: Record) -> list[str]:
        n_layers = record.measure("n_layers")
        return [f"{'?' if n_layers is None else n_layers} layers"]
