"""The ``drift`` family, opt-in: how the representation of the analysed texts moves from
checkpoint to checkpoint, as linear CKA and k-nearest-neighbour overlap of each
checkpoint's pooled hidden states with the previous checkpoint's and the last one's
(:mod:`toposig.features.drift`), the representational-similarity baselines a topological
claim about training dynamics must beat.

Its features relate checkpoints, so a checkpoint's record holds what it measured: the
pooled hidden states of the analysed texts at the highest layer ``--layers`` names (the
embedding's cloud, from the same forward pass), its arrays' ``pooled``. The features are
made when a run's aggregate entries are (:func:`toposig.families.registry.relate_checkpoints`),
model by model in step order: ``_prev`` undefined at the first checkpoint, ``_last`` 1 at
the last; a run that adds later checkpoints moves every ``_last``. A model measured in
memory at one step (``toposig.measure``) has its cloud and no drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from toposig.config import Layers, at_least, parse_layers, setting
from toposig.families.base import (
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Session,
    SignatureFamily,
    Texts,
    hidden_state_record,
    with_stored_loss,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput

DRIFT = FeatureGroup(
    "representational_drift", "representational drift",
    features=(Feature("drift_cka_prev", "linear CKA of the pooled hidden states with the "
                                        "previous checkpoint's", "0-1"),
              Feature("drift_cka_last", "linear CKA of the pooled hidden states with the "
                                        "last checkpoint's", "0-1"),
              Feature("drift_knn_prev", "mean Jaccard index of each text's k nearest "
                                        "neighbours here and at the previous checkpoint",
                      "0-1"),
              Feature("drift_knn_last", "mean Jaccard index of each text's k nearest "
                                        "neighbours here and at the last checkpoint", "0-1")),
    prefixes=("drift_",))


@dataclass(frozen=True)
class DriftFamily(SignatureFamily):
    """Linear CKA and k-NN overlap of the pooled hidden states of the analysed texts with
    the previous and the last checkpoint's."""

    name: ClassVar[str] = "drift"
    rough_seconds: ClassVar[float | None] = 0.13
    options_title: ClassVar[str] = "drift (representational similarity across checkpoints)"
    order: ClassVar[int] = 96  # before the embedding, on the model in the run's precision
    texts: ClassVar[Texts] = Texts.ANALYSED
    precision_keyed: ClassVar[bool] = True
    relates_checkpoints: ClassVar[bool] = True
    groups: ClassVar[tuple[FeatureGroup, ...]] = (DRIFT,)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("CKA prev", ">8", "drift_cka_prev", ".3f"),
        Column("CKA last", ">8", "drift_cka_last", ".3f"))
    over_training: ClassVar[tuple[str, ...]] = ("drift_cka_prev", "drift_cka_last",
                                                "drift_knn_prev", "drift_knn_last")
    kept: ClassVar[tuple[str, ...]] = ("settings_hash", "arrays_file", "layer", "settings",
                                       "timings_s")
    study_keys: ClassVar[tuple[str, ...]] = ("dtype",)

    max_length: int = setting(128, "tokens per text after truncation", from_run="max_length",
                              check=at_least(2, "tokens"))
    layers: Layers = setting("last", "the hidden states analysed, as the embedding's (the "
                                     "drift's: the highest of them)", option="--layers",
                             normalise=parse_layers, cli={"metavar": "last|all|I,J,..."})
    k: int = setting(10, "neighbours per text of the k-NN overlap (default: %(default)s)",
                     option="--drift-k", check=at_least(1))

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.embedding import analysed_layers

        forward = loaded.texts_forward(inputs.texts, self.max_length, inputs.run.batch_size)
        pooled = forward.result.pooled
        layer = analysed_layers(len(pooled), self.layers)[-1]
        # the features are made across checkpoints (relate): the record keeps the cloud
        record = hidden_state_record(self, loaded, inputs, forward, layer, {})
        cloud = np.asarray(pooled[layer], dtype=np.float32)
        return with_stored_loss(loaded, CheckpointOutput(record, {"pooled": cloud}))

    @classmethod
    def relate(cls, arrays: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
               ) -> list[dict[str, float | None]]:
        from toposig.features.drift import drift_series

        k = settings.get("k", 10)
        return drift_series([a["pooled"] for a in arrays], int(k))

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"drift: linear CKA and {self.k}-NN overlap of {len(inputs.texts)} texts' "
                f"hidden states with the previous and last checkpoint's, settings hash: "
                f"{settings_hash}")


register(DriftFamily)
