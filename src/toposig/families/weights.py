"""The ``weights`` family: neural persistence, weight-row homology and spectra of every
linear layer's weight matrix, as stored (:mod:`toposig.model.weight_stage`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from toposig.config import PH_BACKEND_CHOICES, REGEXES, SEED, as_tuple, at_least, one_of, setting
from toposig.families.base import (
    HOMOLOGY_DIMENSIONS,
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Kind,
    Order,
    Scope,
    Session,
    SignatureFamily,
    diagram_features,
    features_of,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput, Record

_ROWS = "the weight rows'"
WEIGHT_STATISTICS: tuple[str, ...] = ("weight_l2_norm", "weight_std", "weight_max_abs",
                                      "weight_mean_abs", "weight_spectral_norm_mean",
                                      "weight_stable_rank_mean", "weight_alpha_mean",
                                      "weight_alpha_weighted_mean", "weight_std_over_max_mean")
_STATISTICS_WORDS = {
    "weight_l2_norm": ("Frobenius norm of all analysed weights", "weight units"),
    "weight_std": ("standard deviation of all analysed weights", "weight units"),
    "weight_max_abs": ("largest absolute weight", "weight units"),
    "weight_mean_abs": ("mean absolute weight", "weight units"),
    "weight_spectral_norm_mean": ("mean largest singular value (weightwatcher)",
                                  "weight units"),
    "weight_stable_rank_mean": ("mean stable rank (weightwatcher)", "dims"),
    "weight_alpha_mean": ("mean power-law exponent of the eigenvalue tails "
                          "(weightwatcher alpha)", "exponent"),
    "weight_alpha_weighted_mean": ("mean alpha · log10 λ_max (weightwatcher)",
                                   "exponent · log10 λ"),
    "weight_std_over_max_mean": ("mean over matrices of the weights' standard deviation over "
                                 "the largest |w| neural persistence scales by (its "
                                 "confound: Girrbach et al. 2023)", "ratio"),
}
TOPOLOGY_DISPLAY = ("np_mean", "np_std", "np_min", "np_max", "np_seed_mean", "np_seed_std",
                    "weight_h0_total", "weight_h1_total", "weight_h1_count",
                    "weight_h0_entropy_mean", "weight_h1_entropy_mean")
"""The weight topology in the order figures show it; the rest of the group follows, by
name."""

TOPOLOGY = FeatureGroup(
    "weight_topological", "weight topology",
    features=(
        *(Feature(f"np_{stat}", f"{stat} over matrices of the normalised neural persistence "
                                "(Rieck et al. 2019)", "0-1")
          for stat in ("mean", "std", "min", "max")),
        *(Feature(f"np_seed_{stat}",
                  f"{stat} over matrices of the seed paper's neural persistence",
                  "NP / (max · (n − 1))") for stat in ("mean", "std")),
        *(f for q in HOMOLOGY_DIMENSIONS for f in (
            Feature(f"weight_h{q}_total",
                    f"Σ over matrices of the weight rows' H{q} total persistence",
                    "weight distance", Kind.DISCONTINUOUS),
            Feature(f"weight_h{q}_count", f"Σ over matrices of the weight rows' H{q} bars",
                    "count", Kind.COUNT),
            Feature(f"weight_h{q}_entropy_mean",
                    f"mean over matrices of the weight rows' H{q} persistence entropy",
                    "nats", Kind.DISCONTINUOUS))),
        Feature("np_seed_layer_<i>", "the seed paper's neural persistence of layer i "
                                     "(imported tables)", "NP / (max · (n − 1))",
                pattern=r"np_seed_layer_([0-9]+)")),
    topological=True,
    baselines=("weight_l2_norm", "weight_spectral_norm_mean", "weight_alpha_mean",
               "weight_alpha_weighted_mean", "weight_std_over_max_mean"),
    prefixes=("np_", "weight_h0_", "weight_h1_", "weight_h2_"), display=TOPOLOGY_DISPLAY)
STATISTICS = FeatureGroup(
    "weight_statistics", "weight statistics",
    features=tuple(Feature(n, *_STATISTICS_WORDS[n]) for n in WEIGHT_STATISTICS),
    prefixes=("weight_",), order=Order.DECLARED, display=WEIGHT_STATISTICS)

_MATRIX = (Scope.MATRIX,)
MATRIX_FEATURES: tuple[Feature, ...] = (
    Feature("n_rows_used", "rows of the matrix in its Vietoris–Rips cloud (a seeded "
                           "sample when it has more than --weight-max-rows)", "count",
            Kind.COUNT, _MATRIX),
    *features_of(
        ("np", ("neural persistence, p = 2 (Rieck et al. 2019)", "0-√(n − 1)")),
        ("np_normalized", ("neural persistence divided by √(n − 1)", "0-1")),
        ("np_seed", ("the seed paper's neural persistence", "NP / (max · (n − 1))")),
        scopes=_MATRIX),
    *diagram_features("", _ROWS, "weight distance", _MATRIX),
    *features_of(
        ("l2_norm", ("Frobenius norm", "weight units")),
        ("std", ("standard deviation of the weights", "weight units")),
        ("max_abs", ("largest absolute weight", "weight units")),
        ("mean_abs", ("mean absolute weight", "weight units")),
        ("ww_pl_alpha", ("power-law exponent of the eigenvalue tail (weightwatcher)",
                         "exponent")),
        ("ww_pl_xmin", ("where the fitted tail starts", "eigenvalue")),
        ("ww_pl_xmax", ("largest eigenvalue of the fit", "eigenvalue")),
        ("ww_pl_ks_distance", ("Kolmogorov–Smirnov distance of the fit", "0-1")),
        ("ww_pl_sigma", ("standard error of alpha", "exponent")),
        ("ww_weighted_alpha", ("alpha · log10 λ_max", "exponent · log10 λ")),
        ("ww_log_alpha_norm", ("log10 of the Schatten alpha-norm", "log10")),
        ("ww_lambda_max", ("largest eigenvalue of WᵀW", "weight units²")),
        ("spectral_norm", ("largest singular value", "weight units")),
        ("stable_rank", ("‖W‖_F² / ‖W‖₂²", "dims")),
        scopes=_MATRIX),
    *features_of(
        ("ww_pl_num_spikes", ("eigenvalues in the fitted tail", "count")),
        ("ww_num_evals", ("eigenvalues of WᵀW", "count")),
        kind=Kind.COUNT, scopes=_MATRIX),
)
"""What each weight matrix of a record holds besides its name and shape."""


@dataclass(frozen=True)
class WeightsFamily(SignatureFamily):
    """Neural persistence (Rieck et al. 2019) of every linear layer's weight matrix,
    Vietoris–Rips homology of its rows, and the plain baselines (norms, weightwatcher's
    heavy-tail exponent), on the weights as stored."""

    name: ClassVar[str] = "weights"
    rough_seconds: ClassVar[float | None] = 0.08
    options_title: ClassVar[str] = "weights (neural persistence, weight-row homology)"
    settings_key: ClassVar[str] = "weight_settings"
    hash_key: ClassVar[str] = "weights_hash"
    order: ClassVar[int] = 10  # first: on the weights as loaded, before any move
    runs_model: ClassVar[bool] = False  # a state-dict file is enough
    reads_weights: ClassVar[bool] = True
    default_on: ClassVar[bool] = True
    target: ClassVar[str] = "loss"
    word: ClassVar[str] = "weight"
    groups: ClassVar[tuple[FeatureGroup, ...]] = (TOPOLOGY, STATISTICS)
    matrix_features: ClassVar[tuple[Feature, ...]] = MATRIX_FEATURES
    columns: ClassVar[tuple[Column, ...]] = (
        Column("loss", ">8", "loss", ".3f"), Column("NP mean", ">8", "np_mean", ".4f"),
        Column("W-H0 total", ">11", "weight_h0_total", ".2f"))
    figure: ClassVar[str] = "neural_persistence_evolution"
    over_training: ClassVar[tuple[str, ...]] = ("np_mean", "np_seed_mean")
    kept: ClassVar[tuple[str, ...]] = ("settings_hash", "arrays_file", "n_matrices", "w_max",
                                       "ph_backend", "matrices", "timings_s")
    loss_first: ClassVar[bool] = True
    # the heavy-tail baselines: a record without them predates them
    current_features: ClassVar[tuple[str, ...]] = (
        "weight_spectral_norm_mean", "weight_stable_rank_mean", "weight_alpha_mean",
        "weight_alpha_weighted_mean")

    max_rows: int = setting(
        200, "rows per matrix for Vietoris-Rips; a sample chosen with --seed when a matrix "
             "has more (default: %(default)s)", option="--weight-max-rows", check=at_least(3))
    maxdim: int = setting(1, "highest homology dimension of the row diagrams",
                          from_run="maxdim", check=one_of((0, 1, 2)))
    include: tuple[str, ...] = setting(
        (), "analyse exactly the 2-D weights whose parameter name matches one of these "
            "regular expressions (default: the weights of the model's Linear and Conv1D "
            "modules but its input and output embeddings; for plain state-dict files the "
            "same, through the transformers config found with the file (config.json beside "
            "it, or in the file), else the 2-D *weight tensors that are no embedding table "
            "or output head by their structure; the record's matrix_rule says which)",
        option="--weight-include", check=REGEXES, normalise=as_tuple,
        cli={"metavar": "REGEX"})
    exclude: tuple[str, ...] = setting(
        (), "leave out weights whose name matches one of these regular expressions",
        option="--weight-exclude", check=REGEXES, normalise=as_tuple,
        cli={"metavar": "REGEX"})
    seed: int = setting(42, "seeds the row sample", from_run="seed", check=SEED)
    ph_backend: str = setting("auto", "Vietoris-Rips library", from_run="ph_backend",
                              check=one_of(PH_BACKEND_CHOICES), hashed=False)

    @classmethod
    def missing_features(cls, record: Mapping) -> list[str]:
        """Also ``matrix_rule`` for a record of a plain checkpoint file without one
        (written while such files' matrices were chosen by their names)."""
        missing = super().missing_features(record)
        if record.get("source") == "file" and not record.get("matrix_rule"):
            missing.append("matrix_rule")
        return missing

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.weight_stage import analyse_weights

        loss, loss_key = loaded.stored_loss
        return analyse_weights(
            loaded.ckpt, loaded.matrices(self.include, self.exclude), self,
            family=self.name, loss=loss, loss_key=loss_key,
            num_parameters=loaded.num_parameters, load_s=loaded.load_s,
            device=loaded.placement.cuda_device, available=loaded.available)

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"weights: <= {self.max_rows} rows per matrix, seed {self.seed}, "
                f"settings hash: {settings_hash}")

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        np_mean = record.features.get("np_mean")
        n_matrices = record.measure("n_matrices")
        return [f"{'?' if n_matrices is None else n_matrices} matrices",
                *([f"np_mean {np_mean:.4g}"] if np_mean is not None else [])]


register(WeightsFamily)
