"""The ``dimension`` family, opt-in: the intrinsic dimension of the analysed texts' hidden
states, layer by layer (:mod:`toposig.features.intrinsic_dimension`; TwoNN and MLE from
scikit-dimension), the geometric baseline a topological claim about the same cloud must
beat.

Its clouds are the embedding's: every text's hidden states mean-pooled over its tokens,
from the same forward pass (run once a checkpoint when both families are measured), at
the layers ``--layers`` names (the option is the embedding's too). The record's
``features`` are the highest analysed layer's, its ``layer_features`` every analysed
layer's (unless ``--layers last``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from toposig.config import FRACTION, Layers, at_least, parse_layers, setting
from toposig.families.base import (
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Order,
    Scope,
    Session,
    SignatureFamily,
    Texts,
    hidden_state_record,
    with_stored_loss,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput, Record

_LAYERED = (Scope.CHECKPOINT, Scope.LAYER)
DIMENSION = FeatureGroup(
    "intrinsic_dimension", "intrinsic dimension",
    features=(Feature("id_twonn", "TwoNN intrinsic dimension of the pooled hidden states "
                                  "(Facco et al. 2017)", "dims", scopes=_LAYERED),
              Feature("id_mle", "maximum-likelihood intrinsic dimension of the pooled hidden "
                                "states' k nearest neighbours (Levina and Bickel 2004)",
                      "dims", scopes=_LAYERED)),
    prefixes=("id_",), order=Order.DECLARED)


@dataclass(frozen=True)
class DimensionFamily(SignatureFamily):
    """TwoNN and MLE intrinsic dimension of the mean-pooled hidden states of the analysed
    texts, at every analysed layer."""

    name: ClassVar[str] = "dimension"
    rough_seconds: ClassVar[float | None] = 0.16
    options_title: ClassVar[str] = "dimension (intrinsic dimension of the hidden states)"
    order: ClassVar[int] = 95  # before the embedding, on the model in the run's precision
    texts: ClassVar[Texts] = Texts.ANALYSED
    precision_keyed: ClassVar[bool] = True
    groups: ClassVar[tuple[FeatureGroup, ...]] = (DIMENSION,)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("ID 2NN", ">7", "id_twonn", ".2f"),
        Column("ID MLE", ">7", "id_mle", ".2f"))
    over_training: ClassVar[tuple[str, ...]] = ("id_twonn", "id_mle")
    kept: ClassVar[tuple[str, ...]] = ("settings_hash", "arrays_file", "layer",
                                       "settings", "timings_s")
    study_keys: ClassVar[tuple[str, ...]] = ("dtype",)

    max_length: int = setting(128, "tokens per text after truncation", from_run="max_length",
                              check=at_least(2, "tokens"))
    layers: Layers = setting("last", "the hidden states analysed, as the embedding's",
                             option="--layers", normalise=parse_layers,
                             cli={"metavar": "last|all|I,J,..."})
    discard_fraction: float = setting(0.1, "share of the largest neighbour-distance ratios "
                                           "TwoNN leaves out (default: %(default)s)",
                                      option="--id-discard", check=FRACTION)
    k: int = setting(10, "neighbours per point of the MLE estimate (default: %(default)s)",
                     option="--id-k", check=at_least(1))

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.features.intrinsic_dimension import intrinsic_dimensions
        from toposig.model.embedding import analysed_layers

        forward = loaded.texts_forward(inputs.texts, self.max_length, inputs.run.batch_size)
        pooled = forward.result.pooled
        t0 = time.perf_counter()
        layers = analysed_layers(len(pooled), self.layers)
        per_layer = {layer: intrinsic_dimensions(pooled[layer], self.discard_fraction, self.k)
                     for layer in layers}
        record = hidden_state_record(self, loaded, inputs, forward, layers[-1],
                                     per_layer[layers[-1]], time.perf_counter() - t0)
        if self.layers != "last":
            record["layer_features"] = {str(k): v for k, v in per_layer.items()}
        return with_stored_loss(loaded, CheckpointOutput(record, {}))

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"dimension: TwoNN (discarding {self.discard_fraction:g}) and MLE ({self.k} "
                f"neighbours) of {len(inputs.texts)} texts' hidden states, settings hash: "
                f"{settings_hash}")

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        value = record.features.get("id_twonn")
        return [f"TwoNN {'n/a' if value is None else f'{value:.3g}'}"]


register(DimensionFamily)
