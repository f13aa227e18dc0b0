"""The ``landscape`` family, opt-in and for causal models only: the curvature of the loss
at the checkpoint (top Hessian eigenvalues, Hutchinson's trace) and the topology of the
loss surface around it, the merge tree of a grid in the plane of the top two Hessian
eigenvectors (:mod:`toposig.model.loss_probes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from toposig.config import FRACTION, ODD, POSITIVE, SEED, SettingsError, at_least, one_of, setting
from toposig.families.base import (
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Kind,
    Order,
    Session,
    SignatureFamily,
    Texts,
    features_of,
    probe_loss,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput

LANDSCAPE_DIRS = ("hessian", "random")

CURVATURE = FeatureGroup(
    "curvature", "curvature",
    features=(Feature("hessian_eig_<k>", "k-th largest eigenvalue of the loss Hessian "
                                         "(Lanczos)", "nats / weight unit²",
                      pattern=r"hessian_eig_([1-9][0-9]*)"),
              Feature("hessian_trace", "trace of the loss Hessian (Hutchinson)",
                      "nats / weight unit²")),
    prefixes=("hessian_",), order=Order.RECORDS)
_SURFACE = "loss surface around the checkpoint:"
TOPOLOGY = FeatureGroup(
    "landscape_topological", "landscape topology",
    features=(*features_of(("landscape_n_minima", (f"{_SURFACE} minima of the loss on the grid",
                                                   "count")),
                           ("landscape_n_saddles", (f"{_SURFACE} finite bars of the merge "
                                                    "tree", "count")), kind=Kind.COUNT),
              *features_of(
                  ("landscape_total_persistence", (f"{_SURFACE} sum of the merge tree's "
                                                   "lifetimes", "nats")),
                  ("landscape_mean_persistence", (f"{_SURFACE} mean merge-tree lifetime",
                                                  "nats")),
                  ("landscape_max_persistence", (f"{_SURFACE} longest merge-tree lifetime",
                                                 "nats")),
                  ("landscape_basin_depth", (f"{_SURFACE} depth of the checkpoint's basin",
                                             "nats")),
                  ("landscape_center_height", (f"{_SURFACE} loss at the checkpoint above its "
                                               "basin's minimum", "nats")),
                  ("landscape_loss_range", (f"{_SURFACE} highest minus lowest loss on the "
                                            "grid", "nats")),
                  kind=Kind.DISCONTINUOUS)),
    topological=True, baselines=("hessian_trace",), prefixes=("landscape_",),
    order=Order.RECORDS)


@dataclass(frozen=True)
class LandscapeFamily(SignatureFamily):
    """Curvature and loss-surface topology of the mean next-token loss (nats) of a fixed,
    seeded batch of ``n_windows`` windows of ``window`` tokens from the texts' source.

    The defaults (since 2026-11-29: 4 windows, tolerance 1e-2, a 13 x 13 grid; before:
    16, 1e-3, 21 x 21) let both probe families finish in under a minute a checkpoint on
    2 CPU cores with Pythia's 50,304-token vocabulary, whose output head is 95 % of
    every loss evaluation (``bench/bench_loss_probes.py --parts``)."""

    name: ClassVar[str] = "landscape"
    rough_seconds: ClassVar[float | None] = 2.9
    options_title: ClassVar[str] = ("landscape (curvature and loss-surface topology; windows "
                                    "from the --texts source)")
    order: ClassVar[int] = 20
    texts: ClassVar[Texts] = Texts.PROBE
    float32: ClassVar[bool] = True
    probes_loss: ClassVar[bool] = True
    target: ClassVar[str] = "loss"
    groups: ClassVar[tuple[FeatureGroup, ...]] = (CURVATURE, TOPOLOGY)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("Hess λ1", ">9", "hessian_eig_1", ".4g"),
        Column("minima", ">7", "landscape_n_minima", ".0f"))
    figure: ClassVar[str] = "loss_probe_evolution"
    over_training: ClassVar[tuple[str, ...]] = ("hessian_eig_1", "hessian_trace",
                                                "landscape_n_minima", "landscape_basin_depth")
    kept: ClassVar[tuple[str, ...]] = ("settings_hash", "arrays_file", "probe_loss",
                                       "hessian_trace_se", "lanczos", "theta_norm",
                                       "settings", "timings_s")

    n_windows: int = setting(4, "windows in the fixed batch whose loss is probed (default: "
                                "%(default)s)", option="--landscape-windows",
                             check=at_least(1))
    window: int = setting(64, "tokens per probe window, of the landscape, the gradients and "
                              "the LLC (default: %(default)s)", option="--probe-length",
                          check=at_least(2, "tokens"))
    top_k: int = setting(2, "top Hessian eigenvalues estimated by Lanczos (default: "
                            "%(default)s)", option="--hessian-k", check=at_least(1))
    lanczos_tol: float = setting(1e-2, "relative accuracy asked of the top Hessian "
                                       "eigenvalues (default: %(default)s)",
                                 option="--lanczos-tol", check=FRACTION)
    lanczos_maxiter: int = setting(20, "Lanczos restarts at most", check=at_least(1))
    trace_samples: int = setting(16, "Rademacher probes of the Hutchinson trace estimate "
                                     "(default: %(default)s)", option="--trace-samples",
                                 check=at_least(2))
    res: int = setting(13, "loss-surface grid points per axis, odd (default: %(default)s)",
                       option="--landscape-res", check=ODD)
    dirs: str = setting("hessian", "plane of the loss surface: the top two Hessian "
                                   "eigenvectors, or two filter-normalised random directions "
                                   "(default: %(default)s)",
                        option="--landscape-dirs", check=one_of(LANDSCAPE_DIRS),
                        cli={"choices": LANDSCAPE_DIRS})
    span: float = setting(1.0, "the grid spans -S..S along each direction, in units of the "
                               "weights' own norm (default: %(default)s)",
                          option="--landscape-span", check=POSITIVE)
    seed: int = setting(42, "seeds the windows, the Lanczos start, the probes and random "
                            "directions", from_run="seed", check=SEED)

    def check_together(self) -> None:
        if self.dirs == "hessian" and self.top_k < 2:
            raise SettingsError("--landscape-dirs hessian needs the top two eigenvectors: "
                                "--hessian-k >= 2")

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.loss_probes import analyse_landscape

        return probe_loss(loaded, inputs, self, analyse_landscape)

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"landscape: {self.n_windows} windows x {self.window} tokens, top {self.top_k} "
                f"Hessian eigenvalues, {self.res} x {self.res} grid in {self.dirs} directions, "
                f"span {self.span:g}, settings hash: {settings_hash}")


register(LandscapeFamily)
