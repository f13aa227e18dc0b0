"""The ``gradients`` family, opt-in and for causal models only: the homology of the cloud
of per-example gradients, projected to a few dimensions, and their norms and agreement
(:mod:`toposig.model.loss_probes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from toposig.config import PH_BACKEND_CHOICES, SEED, at_least, one_of, setting
from toposig.families.base import (
    Column,
    FamilyInputs,
    FeatureGroup,
    Order,
    Session,
    SignatureFamily,
    Texts,
    diagram_features,
    features_of,
    probe_loss,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput

TOPOLOGY = FeatureGroup(
    "gradient_topological", "gradient topology",
    features=diagram_features("grad_", "per-example gradients'", "gradient distance"),
    topological=True, baselines=("grad_norm_mean", "grad_noise_scale"),
    prefixes=("grad_h0_", "grad_h1_", "grad_h2_"), order=Order.RECORDS)
STATISTICS = FeatureGroup(
    "gradient_statistics", "gradient statistics",
    features=(*features_of(*((f"grad_norm_{stat}", (f"{stat} per-example gradient norm",
                                                    "nats / weight unit"))
                             for stat in ("mean", "std", "median", "max"))),
              *features_of(("grad_noise_scale", ("simple gradient noise scale tr(Σ) / |G|² "
                                                 "(McCandlish et al. 2018)", "examples")))),
    prefixes=("grad_norm_", "grad_noise_"), order=Order.RECORDS)
# the examples' gradients agreeing: what a small noise scale predicts (McCandlish et al.),
# so the cosine is tested beyond it, as a topological feature is beyond its space's norm
AGREEMENT = FeatureGroup(
    "gradient_agreement", "gradient agreement",
    features=features_of(("grad_cosine_mean", ("mean cosine between two examples' "
                                               "projected gradients", "cosine"))),
    baselines=("grad_noise_scale",), prefixes=("grad_cosine",), order=Order.RECORDS)


@dataclass(frozen=True)
class GradientsFamily(SignatureFamily):
    """Vietoris–Rips homology of the per-example gradients of ``n_windows`` token
    windows of the texts' source, each a point after a seeded sparse random projection to
    ``proj_dim`` dimensions."""

    name: ClassVar[str] = "gradients"
    rough_seconds: ClassVar[float | None] = 0.51
    options_title: ClassVar[str] = ("gradients (per-example gradient topology; windows of "
                                    "--probe-length tokens from the --texts source)")
    settings_key: ClassVar[str] = "gradient_settings"
    order: ClassVar[int] = 30
    texts: ClassVar[Texts] = Texts.PROBE
    float32: ClassVar[bool] = True
    probes_loss: ClassVar[bool] = True
    target: ClassVar[str] = "loss"
    word: ClassVar[str] = "gradient"
    groups: ClassVar[tuple[FeatureGroup, ...]] = (TOPOLOGY, STATISTICS, AGREEMENT)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("G-H0 total", ">11", "grad_h0_total_persistence", ".4g"),
        Column("|grad|", ">8", "grad_norm_mean", ".3g"))
    figure: ClassVar[str] = "loss_probe_evolution"
    over_training: ClassVar[tuple[str, ...]] = (
        "grad_h0_total_persistence", "grad_h1_total_persistence", "grad_norm_mean",
        "grad_cosine_mean")
    kept: ClassVar[tuple[str, ...]] = ("settings_hash", "arrays_file", "ph_backend",
                                       "settings", "timings_s")

    n_windows: int = setting(64, "examples whose gradients form the cloud (default: "
                                 "%(default)s)", option="--gradient-windows",
                             check=at_least(3))
    window: int = setting(64, "tokens per probe window", option="--probe-length",
                          check=at_least(2, "tokens"))
    proj_dim: int = setting(128, "dimension of the seeded random projection of the gradients "
                                 "(default: %(default)s)", option="--gradient-dim",
                            check=at_least(2))
    maxdim: int = setting(1, "highest homology dimension", from_run="maxdim",
                          check=one_of((0, 1, 2)))
    chunk_size: int = setting(8, "examples per vectorised gradient call (memory only)",
                              check=at_least(1), hashed=False)
    seed: int = setting(42, "seeds the windows and the projection", from_run="seed",
                        check=SEED)
    ph_backend: str = setting("auto", "Vietoris-Rips library", from_run="ph_backend",
                              check=one_of(PH_BACKEND_CHOICES), hashed=False)

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.loss_probes import analyse_gradients

        return probe_loss(loaded, inputs, self, analyse_gradients)

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"gradients: {self.n_windows} windows x {self.window} tokens, projected to "
                f"{self.proj_dim} dimensions, settings hash: {settings_hash}")


register(GradientsFamily)
