"""The ``weights`` family: neural persistence, weight-row homology and spectra of every
linear layer's weight matrix, as stored (:mod:`toposig.model.weight_stage`)."""

from __future__ import annotations

import argparse

from toposig.config import EmbeddingSettings, WeightSettings, weights_hash
from toposig.records import CheckpointOutput, Family, Record
from toposig.stages.base import Column, Session, Stage, StageInputs


class WeightStage(Stage):
    family = Family.WEIGHTS
    settings_type = WeightSettings
    settings_key = "weight_settings"
    hash_key = "weights_hash"
    order = 10  # first: on the weights as loaded, before any move
    runs_model = False  # a state-dict file is enough
    reads_weights = True
    default_on = True
    columns = (Column("loss", ">8", "loss", ".3f"), Column("NP mean", ">8", "np_mean", ".4f"),
               Column("W-H0 total", ">11", "weight_h0_total", ".2f"))

    def default(self, run: EmbeddingSettings) -> WeightSettings:
        return WeightSettings(seed=run.seed, ph_backend=run.ph_backend)

    def settings_hash(self, settings: WeightSettings, inputs: StageInputs, dtype: str) -> str:
        return weights_hash(settings)

    def recorded_settings(self, settings: WeightSettings, hashed: bool) -> dict:
        """Always, as config.json has always kept them."""
        return settings.to_dict()

    def run(self, loaded: Session, settings: WeightSettings,
            inputs: StageInputs) -> CheckpointOutput:
        from toposig.model.weight_stage import analyse_weights

        loss, loss_key = loaded.stored_loss
        return analyse_weights(
            loaded.ckpt, loaded.matrices(settings.include, settings.exclude), settings,
            loss=loss, loss_key=loss_key, num_parameters=loaded.num_parameters,
            load_s=loaded.load_s, device=loaded.placement.cuda_device,
            available=loaded.available)

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        defaults = WeightSettings()
        g = parser.add_argument_group("weights (neural persistence, weight-row homology)")
        g.add_argument("--weight-max-rows", type=int, default=defaults.max_rows,
                       help="rows per matrix for Vietoris-Rips; a sample chosen with --seed "
                            "when a matrix has more (default: %(default)s)")
        g.add_argument("--weight-include", nargs="+", metavar="REGEX", default=[],
                       help="analyse exactly the 2-D weights whose parameter name matches one "
                            "of these regular expressions (default: the weights of the "
                            "model's Linear and Conv1D modules but its input and output "
                            "embeddings; for plain state-dict files the same, through the "
                            "transformers config found with the file (config.json beside it, "
                            "or in the file), else the 2-D *weight tensors that are no "
                            "embedding table or output head by their structure; the record's "
                            "matrix_rule says which)")
        g.add_argument("--weight-exclude", nargs="+", metavar="REGEX", default=[],
                       help="leave out weights whose name matches one of these regular "
                            "expressions")

    def settings_from_args(self, args: argparse.Namespace) -> WeightSettings:
        return WeightSettings(max_rows=args.weight_max_rows, maxdim=args.maxdim,
                              include=tuple(args.weight_include),
                              exclude=tuple(args.weight_exclude), seed=args.seed,
                              ph_backend=args.ph_backend)

    def record_parts(self, record: Record) -> list[str]:
        np_mean = record.features.get("np_mean")
        n_matrices = record.measure("n_matrices")
        return [f"{'?' if n_matrices is None else n_matrices} matrices",
                *([f"np_mean {np_mean:.4g}"] if np_mean is not None else [])]

    def describe(self, settings: WeightSettings, settings_hash: str | None,
                 inputs: StageInputs) -> str:
        return (f"weights: <= {settings.max_rows} rows per matrix, seed {settings.seed}, "
                f"settings hash: {settings_hash}")
