"""The ``llc`` family, opt-in and for causal models only: the local learning coefficient
of each checkpoint, sampled with ``devinterp``'s SGLD on windows of the texts' source
(:mod:`toposig.model.llc`): the field's instrument for developmental stages (Hoogland et
al. 2024), a reference for what topology sees.

The LLC is a property of the loss a model was trained on, so it is sampled on that loss.
By default (``--llc-objective next_token``) the windows are cut from the ``--texts``
source as the other loss probes' are: for the suites the project trains, WikiText-2, the
corpus they are trained on (its validation split); the loss is the mean next-token
cross-entropy on them (devinterp's, which equals the model's ``model(ids,
labels=ids).loss``; a test shows it). A task trained on its answers alone (the grokking
suite: ``a b = c``, the loss on ``c``) is sampled on that (``--llc-objective answer``):
each line of ``--llc-texts`` (the suite's training lines, which ``run --preset`` writes
and names) one window, the loss of its last token alone. For the induction suite, trained
on every next byte, the default is its objective, on the suite's ``inputs.txt``."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from toposig.config import (
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    TEXT_OR_NONE,
    SettingsError,
    at_least,
    one_of,
    setting,
)
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

OBJECTIVES = ("next_token", "answer")  # the loss sampled (--llc-objective)

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
    rough_seconds: ClassVar[float | None] = 17.7
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
    objective: str = setting(
        "next_token", "the loss sampled: 'next_token' (every token of windows of "
        "--probe-length tokens cut from the texts) or 'answer' (each text one window, the "
        "loss of its last token alone: a task trained on its answers, such as --preset "
        "grokking's 'a b = c'; default: %(default)s)",
        option="--llc-objective", check=one_of(OBJECTIVES), cli={"choices": OBJECTIVES})
    texts_file: str | None = setting(
        None, "a file of the texts the LLC's windows come from, one per line (default: the "
              "--texts source; a task preset's own training lines for the answer objective)",
        option="--llc-texts", check=TEXT_OR_NONE, cli={"metavar": "PATH"}, hashed=False)
    seed: int = setting(42, "seeds the windows and the chains", from_run="seed", check=SEED)

    def check_together(self) -> None:
        if self.batch > self.n_windows:
            raise SettingsError(f"--llc-batch {self.batch} is more than the "
                                f"{self.n_windows} windows of --llc-windows")
        if self.texts_file is not None and not Path(self.texts_file).is_file():
            raise SettingsError(f"--llc-texts {self.texts_file!r} is not a file")

    def llc_texts(self, inputs: FamilyInputs) -> list[str]:
        """The texts its windows come from: the ``--llc-texts`` file's lines, else the
        run's probe texts."""
        return inputs.probe_texts if self.texts_file is None else _texts_of(self.texts_file)

    def settings_hash(self, inputs: FamilyInputs, dtype: str) -> str:
        """Keyed by the texts it reads, not by their file's name (``--llc-texts`` moves
        with its folder)."""
        if self.texts_file is None:
            return super().settings_hash(inputs, dtype)
        from toposig.sources.corpus import texts_fingerprint

        return self.hash_of(texts_fingerprint(self.llc_texts(inputs)), dtype,
                            inputs.run.tokenizer)

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.loss_probes import analyse_llc

        return probe_loss(loaded, inputs, self, analyse_llc, texts=self.llc_texts(inputs))

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        windows = (f"{self.n_windows} texts, each one window, the loss of its last token"
                   if self.objective == "answer"
                   else f"{self.n_windows} windows x {self.window} tokens")
        source = f" of {self.texts_file}" if self.texts_file is not None else ""
        return (f"llc: {self.chains} chains x {self.draws} draws (burn-in {self.burnin}), "
                f"ε {self.lr:g}, nβ {self.n_beta:g}, γ {self.localization:g}, batch "
                f"{self.batch} of {windows}{source}, settings hash: {settings_hash}")

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        value = record.features.get("llc_mean")
        kept = record.features.get("llc_chains_kept")
        return [f"LLC {'n/a' if value is None else f'{value:.4g}'} "
                f"({'?' if kept is None else int(kept)} chains kept)"]


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    from toposig.sources.corpus import read_texts_file

    return tuple(read_texts_file(path))


def _texts_of(path: str) -> list[str]:
    """The lines of an ``--llc-texts`` file, read once per version of it (every checkpoint
    and the settings hash read them)."""
    st = Path(path).stat()
    return list(_read(path, st.st_mtime_ns, st.st_size))


register(LLCFamily)
