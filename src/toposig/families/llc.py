"""The ``llc`` family, opt-in and for causal models only: the local learning coefficient
of each checkpoint, sampled with ``devinterp``'s SGLD on windows of the texts' source
(:mod:`toposig.model.llc`): the field's instrument for developmental stages (Hoogland et
al. 2024), a reference for what topology sees.

The windows are cut from the ``--texts`` source as the other loss probes' are: for the
suites the project trains, WikiText-2, the corpus they are trained on (its validation
split); for the task suites, the task's own ``inputs.txt``. The loss sampled is the mean
next-token cross-entropy on them (devinterp's, which equals the model's
``model(ids, labels=ids).loss``; a test shows it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from toposig.config import NON_NEGATIVE, POSITIVE, SEED, SettingsError, at_least, setting
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
    probe_loss,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput, Record

LLC = FeatureGroup(
    "llc", "local learning coefficient",
    features=(Feature("llc_mean", "local learning coefficient: mean over the kept SGLD "
                                  "chains of nβ (E[L] - L(w*))", "dimensionless"),
              Feature("llc_std", "standard deviation of the kept chains' LLC",
                      "dimensionless"),
              Feature("llc_chains_kept", "SGLD chains neither diverged nor negative",
                      "count", Kind.COUNT),
              Feature("llc_init_loss", "the checkpoint's loss on the sampling windows",
                      "nats"),
              Feature("llc_drift", "change of the kept chains' LLC from the second to the "
                                   "last quarter of the steps (near 0: settled)",
                      "dimensionless")),
    prefixes=("llc_",), order=Order.DECLARED)


@dataclass(frozen=True)
class LLCFamily(SignatureFamily):
    """The local learning coefficient by SGLD (devinterp), ``chains`` chains of ``draws``
    steps each after ``burnin``, on ``n_windows`` windows of ``window`` tokens, ``batch``
    windows a step."""

    name: ClassVar[str] = "llc"
    options_title: ClassVar[str] = ("llc (local learning coefficient by devinterp's SGLD; "
                                    "windows of --probe-length tokens from the --texts source)")
    settings_key: ClassVar[str] = "llc_settings"
    order: ClassVar[int] = 40
    texts: ClassVar[Texts] = Texts.PROBE
    float32: ClassVar[bool] = True
    probes_loss: ClassVar[bool] = True
    target: ClassVar[str] = "loss"
    word: ClassVar[str] = "LLC"
    seeds_global_random: ClassVar[bool] = True  # devinterp's set_seed
    groups: ClassVar[tuple[FeatureGroup, ...]] = (LLC,)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("LLC", ">8", "llc_mean", ".4g"),
        Column("chains", ">6", "llc_chains_kept", ".0f"))
    over_training: ClassVar[tuple[str, ...]] = ("llc_mean", "llc_chains_kept", "llc_drift")
    kept: ClassVar[tuple[str, ...]] = ("settings_hash", "arrays_file", "chains", "n_beta",
                                       "settings", "timings_s")

    n_windows: int = setting(64, "windows the SGLD batches are drawn from (default: "
                                 "%(default)s)", option="--llc-windows", check=at_least(1))
    window: int = setting(64, "tokens per probe window", option="--probe-length",
                          check=at_least(2, "tokens"))
    chains: int = setting(4, "SGLD chains (default: %(default)s)", option="--llc-chains",
                          check=at_least(1))
    draws: int = setting(200, "SGLD steps per chain after the burn-in (default: "
                              "%(default)s)", option="--llc-draws", check=at_least(1))
    burnin: int = setting(0, "SGLD steps per chain before the draws, left out of the "
                             "estimate (default: %(default)s)",
                          option="--llc-burnin", check=at_least(0))
    lr: float = setting(3e-4, "SGLD step size ε (default: %(default)s)", option="--llc-lr",
                        check=POSITIVE)
    n_beta: float = setting(100.0, "inverse temperature nβ (default: %(default)s)",
                            option="--llc-nbeta", check=POSITIVE)
    localization: float = setting(100.0, "strength γ of the pull towards the checkpoint's "
                                         "weights, 0 for none (default: %(default)s)",
                                  option="--llc-localization", check=NON_NEGATIVE)
    batch: int = setting(16, "windows per SGLD step (default: %(default)s)",
                         option="--llc-batch", check=at_least(1))
    max_rise: float = setting(5.0, "a chain whose loss over its last quarter rises more than "
                                   "this many nats above the checkpoint's is diverged and "
                                   "left out (default: %(default)s)",
                              option="--llc-max-rise", check=POSITIVE)
    seed: int = setting(42, "seeds the windows and the chains", from_run="seed", check=SEED)

    def check_together(self) -> None:
        if self.batch > self.n_windows:
            raise SettingsError(f"--llc-batch {self.batch} is more than the "
                                f"{self.n_windows} windows of --llc-windows")

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.loss_probes import analyse_llc

        return probe_loss(loaded, inputs, self, analyse_llc)

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"llc: {self.chains} chains x {self.draws} draws (burn-in {self.burnin}), "
                f"ε {self.lr:g}, nβ {self.n_beta:g}, γ {self.localization:g}, batch "
                f"{self.batch} of {self.n_windows} windows x {self.window} tokens, settings "
                f"hash: {settings_hash}")

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        value = record.features.get("llc_mean")
        kept = record.features.get("llc_chains_kept")
        return [f"LLC {'n/a' if value is None else f'{value:.4g}'} "
                f"({'?' if kept is None else int(kept)} chains kept)"]


register(LLCFamily)
