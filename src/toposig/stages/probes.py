"""The loss probes, opt-in and for causal models only: ``landscape`` (Hessian curvature
and the topology of the loss surface around the checkpoint) and ``gradients`` (homology
of the per-example gradient cloud); :mod:`toposig.model.loss_probes`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from toposig.config import (
    LANDSCAPE_DIRS,
    EmbeddingSettings,
    GradientSettings,
    LandscapeSettings,
    family_hash,
)
from toposig.records import CheckpointOutput, Family
from toposig.sources.corpus import texts_fingerprint
from toposig.stages.base import Column, Session, Stage, StageInputs, Texts


class ProbeStage(Stage):
    """What the two probes share: the float32 model on the device, the probe texts, the
    stored loss kept in the record."""

    texts = Texts.PROBE
    float32 = True
    probes_loss = True

    def settings_hash(self, settings: Any, inputs: StageInputs, dtype: str) -> str:
        return family_hash(self.family, settings, texts_fingerprint(inputs.probe_texts))

    def analyzer(self) -> Callable[..., CheckpointOutput]:
        raise NotImplementedError

    def run(self, loaded: Session, settings: Any, inputs: StageInputs) -> CheckpointOutput:
        tokenizer = loaded.tokenizer()
        model = loaded.model(float32=True)
        result = self.analyzer()(loaded.ckpt, model, tokenizer, inputs.probe_texts,
                                settings, device=loaded.placement.device,
                                load_s=loaded.load_s)
        loss, loss_key = loaded.stored_loss
        result.record |= {"checkpoint_loss": loss, "checkpoint_loss_key": loss_key}
        return result


class LandscapeStage(ProbeStage):
    family = Family.LANDSCAPE
    settings_type = LandscapeSettings
    settings_key = "landscape_settings"
    hash_key = "landscape_hash"
    order = 20
    columns = (Column("Hess λ1", ">9", "hessian_eig_1", ".4g"),
               Column("minima", ">7", "landscape_n_minima", ".0f"))

    def default(self, run: EmbeddingSettings) -> LandscapeSettings:
        return LandscapeSettings(seed=run.seed)

    def analyzer(self) -> Callable[..., CheckpointOutput]:
        from toposig.model.loss_probes import analyse_landscape

        return analyse_landscape

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        d = LandscapeSettings()
        g = parser.add_argument_group("landscape (curvature and loss-surface topology; "
                                      "windows from the --texts source)")
        g.add_argument("--probe-length", type=int, default=d.window,
                       help="tokens per probe window, of the landscape and the gradients "
                            "(default: %(default)s)")
        g.add_argument("--landscape-windows", type=int, default=d.n_windows,
                       help="windows in the fixed batch whose loss is probed (default: "
                            "%(default)s)")
        g.add_argument("--hessian-k", type=int, default=d.top_k,
                       help="top Hessian eigenvalues estimated by Lanczos (default: "
                            "%(default)s)")
        g.add_argument("--lanczos-tol", type=float, default=d.lanczos_tol,
                       help="relative accuracy asked of the top Hessian eigenvalues "
                            "(default: %(default)s)")
        g.add_argument("--trace-samples", type=int, default=d.trace_samples,
                       help="Rademacher probes of the Hutchinson trace estimate (default: "
                            "%(default)s)")
        g.add_argument("--landscape-res", type=int, default=d.res,
                       help="loss-surface grid points per axis, odd (default: %(default)s)")
        g.add_argument("--landscape-dirs", choices=LANDSCAPE_DIRS, default=d.dirs,
                       help="plane of the loss surface: the top two Hessian eigenvectors, or "
                            "two filter-normalised random directions (default: %(default)s)")
        g.add_argument("--landscape-span", type=float, default=d.span,
                       help="the grid spans -S..S along each direction, in units of the "
                            "weights' own norm (default: %(default)s)")

    def settings_from_args(self, args: argparse.Namespace) -> LandscapeSettings:
        return LandscapeSettings(n_windows=args.landscape_windows, window=args.probe_length,
                                 top_k=args.hessian_k, lanczos_tol=args.lanczos_tol,
                                 trace_samples=args.trace_samples,
                                 res=args.landscape_res, dirs=args.landscape_dirs,
                                 span=args.landscape_span, seed=args.seed)

    def describe(self, settings: LandscapeSettings, settings_hash: str | None,
                 inputs: StageInputs) -> str:
        s = settings
        return (f"landscape: {s.n_windows} windows x {s.window} tokens, top {s.top_k} "
                f"Hessian eigenvalues, {s.res} x {s.res} grid in {s.dirs} directions, span "
                f"{s.span:g}, settings hash: {settings_hash}")


class GradientStage(ProbeStage):
    family = Family.GRADIENTS
    settings_type = GradientSettings
    settings_key = "gradient_settings"
    hash_key = "gradients_hash"
    order = 30
    columns = (Column("G-H0 total", ">11", "grad_h0_total_persistence", ".4g"),
               Column("|grad|", ">8", "grad_norm_mean", ".3g"))

    def default(self, run: EmbeddingSettings) -> GradientSettings:
        return GradientSettings(seed=run.seed, maxdim=run.maxdim, ph_backend=run.ph_backend)

    def analyzer(self) -> Callable[..., CheckpointOutput]:
        from toposig.model.loss_probes import analyse_gradients

        return analyse_gradients

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        d = GradientSettings()
        g = parser.add_argument_group("gradients (per-example gradient topology; windows "
                                      "of --probe-length tokens from the --texts source)")
        g.add_argument("--gradient-windows", type=int, default=d.n_windows,
                       help="examples whose gradients form the cloud (default: %(default)s)")
        g.add_argument("--gradient-dim", type=int, default=d.proj_dim,
                       help="dimension of the seeded random projection of the gradients "
                            "(default: %(default)s)")

    def settings_from_args(self, args: argparse.Namespace) -> GradientSettings:
        return GradientSettings(n_windows=args.gradient_windows, window=args.probe_length,
                                proj_dim=args.gradient_dim, maxdim=args.maxdim,
                                seed=args.seed, ph_backend=args.ph_backend)

    def describe(self, settings: GradientSettings, settings_hash: str | None,
                 inputs: StageInputs) -> str:
        s = settings
        return (f"gradients: {s.n_windows} windows x {s.window} tokens, projected to "
                f"{s.proj_dim} dimensions, settings hash: {settings_hash}")
