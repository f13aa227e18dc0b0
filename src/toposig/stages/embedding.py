"""The ``embedding`` family: persistent homology and spectra of the hidden states on the
analysed texts, and the model's own loss on them (:mod:`toposig.model.embedding`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toposig.config import (
    EmbeddingSettings,
    format_layers,
    parse_layers,
    settings_hash,
    union_layers,
)
from toposig.records import CheckpointOutput, Family, Record
from toposig.sources.corpus import texts_fingerprint
from toposig.stages.base import Column, Session, Stage, StageInputs, Texts, Widening


class EmbeddingStage(Stage):
    family = Family.EMBEDDING
    settings_type = EmbeddingSettings
    settings_key = "settings"
    hash_key = "settings_hash"
    order = 100  # last: it moves the model to the run's precision
    texts = Texts.ANALYSED
    default_on = True
    precision_keyed = True
    columns = (Column("perplexity", ">11", "perplexity", ".2f"),
               Column("H1 bars", ">8", "h1_n_features", ".0f"),
               Column("RankMe", ">8", "rankme", ".2f"))
    field_keys = ("texts_source", "texts_sha256", "n_texts", "dtype")
    view_keys = ("dtype", "texts_sha256")
    widening = Widening("layers", "--layers", parse_layers, union_layers, format_layers)

    def default(self, run: EmbeddingSettings) -> EmbeddingSettings:
        return run

    def settings_hash(self, settings: EmbeddingSettings, inputs: StageInputs,
                      dtype: str) -> str:
        return settings_hash(settings, texts_fingerprint(inputs.texts), dtype)

    def settings_view(self, settings: EmbeddingSettings, inputs: StageInputs,
                      dtype: str) -> dict:
        """With the resolved ``dtype`` and the texts' ``texts_sha256`` (both in its
        hash)."""
        return {**settings.to_dict(), "dtype": dtype,
                "texts_sha256": texts_fingerprint(inputs.texts) if inputs.texts else None}

    def recorded_settings(self, settings: EmbeddingSettings, hashed: bool) -> dict:
        """Always: they are also the run's settings (device, precision, seed)."""
        return settings.to_dict()

    def study_fields(self, inputs: StageInputs, dtype: str, hashed: bool) -> dict[str, Any]:
        texts = inputs.texts
        return {"texts_source": inputs.texts_source if texts else None,
                "texts_sha256": texts_fingerprint(texts) if texts else None,
                "n_texts": len(texts),
                "dtype": dtype if hashed else None}  # in its hash

    def run(self, loaded: Session, settings: EmbeddingSettings,
            inputs: StageInputs) -> CheckpointOutput:
        from toposig.model.embedding import analyse_checkpoint

        tokenizer = loaded.tokenizer()
        model = loaded.model(float32=False)
        load_s = loaded.load_s
        forward = loaded.texts_forward(inputs.texts, settings.max_length, settings.batch_size)
        return analyse_checkpoint(
            loaded.ckpt, inputs.texts, settings, placement=loaded.placement,
            local_files_only=loaded.local_files_only, model=model, tokenizer=tokenizer,
            load_s=load_s, forward=forward)

    def describe(self, settings: EmbeddingSettings, settings_hash: str | None,
                 inputs: StageInputs) -> str:
        return (f"texts: {len(inputs.texts)} from {inputs.texts_source}, embedding settings "
                f"hash: {settings_hash}")

    def record_parts(self, record: Record) -> list[str]:
        quality = [f"{k} {v:.4g}" for k, v in (("perplexity", record.perplexity),
                                               ("mlm_loss", record.mlm_loss))
                   if v is not None]
        n_texts = record.measure("n_texts")
        return [*quality, f"{len(record.layers) or 1} layer(s), "
                          f"{'?' if n_texts is None else n_texts} texts"]

    def summary_columns(self, entries: Sequence[Record]) -> tuple[Column, ...]:
        """An encoder's masked-LM loss first, when an entry has one."""
        mlm = any(r.mlm_loss is not None for r in entries)
        return ((Column("MLM loss", ">9", "mlm_loss", ".3f"),) if mlm else ()) + self.columns
