"""Planning a run: the user's models, steps and settings become a checked :class:`RunPlan`.

:func:`plan_run` resolves series, texts, device and Hub access and computes each
family's settings hash, raising on any bad input before a model is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toposig.config import EmbeddingSettings
from toposig.features import homology
from toposig.model.placement import Placement
from toposig.records import FAMILIES, Family
from toposig.run.study import check_run_fits, study_labels, widen_settings
from toposig.sources.checkpoints import (
    EXPERIMENT_A_MODELS,
    MASKED,
    Checkpoint,
    HubUnavailableError,
    RefLister,
    SeriesError,
    assign_labels,
    check_hub_access,
    check_tokenizers,
    resolve_series,
    series_kinds,
)
from toposig.sources.corpus import load_texts, probe_texts
from toposig.sources.revisions import StepSelection
from toposig.stages.base import StageInputs, Texts
from toposig.stages.registry import (
    DEFAULT_STAGES,
    STAGES,
    complete_settings,
    hashes,
    needs_texts,
    settings_views,
)


@dataclass
class RunPlan:
    """Everything a run needs, checked.

    ``families[i]`` are the signature families of ``checkpoints[i]``. ``inputs`` holds
    the texts and every family's settings; ``hashes`` the settings hash that keys each
    computed family's records (:meth:`hash_of`).
    """

    checkpoints: list[Checkpoint]
    inputs: StageInputs
    placement: Placement  # the device and precision, resolved once
    ph_backend: str
    local_files_only: bool
    hashes: dict[Family, str] = field(default_factory=dict)  # families this run computes
    suite: dict | None = None  # the training suite's config.json, for --preset runs
    families: list[tuple[Family, ...]] = field(default_factory=list)
    command: str | None = None  # the command line that made the run, for config.json

    @property
    def device(self) -> str:
        return self.placement.device

    @property
    def dtype(self) -> str:
        return self.placement.dtype

    @property
    def settings(self) -> EmbeddingSettings:
        """The run's settings (device, precision, seed, tokenizer, texts)."""
        return self.inputs.run_settings

    @property
    def texts(self) -> list[str]:
        return self.inputs.texts

    @property
    def texts_source(self) -> str:
        return self.inputs.texts_source

    def hash_of(self, family: str) -> str | None:
        """The settings hash that keys ``family``'s records (``None``: not in this run)."""
        return self.hashes.get(Family(family))

    def settings_of(self, family: str) -> Any:
        """``family``'s settings."""
        return self.inputs.settings[Family(family)]

    def settings_views(self) -> dict[Family, dict]:
        """Family -> its settings as config.json records them
        (:func:`toposig.stages.registry.settings_views`)."""
        return settings_views(self.inputs, self.dtype)

    @property
    def models(self) -> dict[str, str]:
        """Model label -> the model as the user named it, in plan order."""
        return {c.label: c.model for c in self.checkpoints}

    @property
    def sources(self) -> dict[str, str]:
        """Model label -> ``hub``, ``local`` or ``file``."""
        return {c.label: c.source for c in self.checkpoints}

    def adopt_study_labels(self, out_dir: str | Path) -> None:
        """Give the run's models the labels ``out_dir``'s study already gives them
        (:func:`toposig.run.study.study_labels`), so a run of part of a study finds its
        records whatever else it brings."""
        mapping = study_labels(out_dir, self.models, self.sources)
        if mapping:
            self.checkpoints = [replace(c, label=mapping.get(c.label, c.label))
                                for c in self.checkpoints]

    def fit_study_settings(self, out_dir: str | Path, *, extend: bool) -> dict[Family, str]:
        """Widen each computed family's settings to ``out_dir``'s study's where the two
        differ in the stage's widening field alone (the embedding's ``layers``) and
        ``extend`` is on (:func:`toposig.run.study.widen_settings`): the run's settings
        and settings hash become the union's.

        Returns:
            family -> the study's settings hash the run's now replaces (empty: none).

        Raises:
            StudyMismatchError: such a field differs and ``extend`` is off.
        """
        replaced: dict[Family, str] = {}
        for family in list(self.hashes):
            settings, old = widen_settings(out_dir, family, self.inputs, self.dtype,
                                           extend=extend)
            if settings != self.settings_of(family):
                self.inputs = replace(self.inputs, settings={**self.inputs.settings,
                                                             family: settings})
                self.hashes[family] = STAGES[family].settings_hash(settings, self.inputs,
                                                                   self.dtype)
            if old:
                replaced[family] = old
        return replaced

    def checkpoints_of(self, family: str) -> set[tuple[str, str]]:
        """``(label, record stem)`` of the checkpoints whose ``family`` this run computes."""
        return {(c.label, c.name) for i, c in enumerate(self.checkpoints)
                if family in self.families_of(i)}

    def families_of(self, index: int) -> tuple[Family, ...]:
        return self.families[index]

    @property
    def all_families(self) -> list[Family]:
        present = {f for i in range(len(self.checkpoints)) for f in self.families_of(i)}
        return [f for f in FAMILIES if f in present]


def checkpoint_families(ckpt: Checkpoint,
                        requested: tuple[Family, ...] | None) -> tuple[Family, ...]:
    """The signature families of one checkpoint: ``requested``, or by default embedding
    and weights for model folders and Hub revisions and ``weights`` for plain checkpoint
    files."""
    if requested is not None:
        return requested
    if ckpt.source == "file":
        return tuple(f for f, s in STAGES.items() if not s.runs_model)
    return DEFAULT_STAGES


def plan_run(models: list[str] | None, selection: StepSelection | None,
             settings: EmbeddingSettings, signatures: tuple[str, ...] | None = None,
             remote_gpus: bool = False, *,
             family_settings: Mapping[Family, Any] | None = None,
             list_refs: RefLister | None = None) -> RunPlan:
    """Resolve series, texts, device and Hub access; raise before any work on bad input.

    Args:
        models: Hub ids, local folders or checkpoint files; ``None`` or empty for
            experiment A (Pythia 70m/160m/410m).
        selection: which checkpoints of each series (``--steps``, ``--revisions``,
            ``--revision-pattern``; :func:`toposig.sources.revisions.parse_selection`), or
            ``None`` for each series' default.
        settings: validated embedding settings (also the run's: device, precision,
            seed, tokenizer, texts).
        signatures: the families to compute (``--signatures``), or ``None`` for each
            checkpoint kind's default.
        remote_gpus: the checkpoints run on GPU workers elsewhere (``--executor ray
            --gpus-per-task``): device ``auto`` means CUDA there, whatever this machine has.
        family_settings: family -> its settings, for families whose settings are not
            their defaults (:func:`toposig.stages.registry.complete_settings`).
        list_refs: lists a Hub repository's revisions (``huggingface_hub.list_repo_refs``
            when ``None``).
    """
    models = list(models) if models else list(EXPERIMENT_A_MODELS)
    resolved, unlisted = [], []
    for m in models:
        try:
            resolved.append(resolve_series(m, selection, list_refs=list_refs))
        except HubUnavailableError as exc:
            unlisted.append(exc)
    if unlisted:  # one message naming every Hub model that could not be listed
        raise HubUnavailableError.listing([r for e in unlisted for r in e.repos],
                                          unlisted[0].reason)
    series = assign_labels(resolved)
    checkpoints = [c for s in series for c in s]
    families = [checkpoint_families(c, signatures) for c in checkpoints]
    runs_model = [f for f, stage in STAGES.items() if stage.runs_model]
    files = [c for c, f in zip(checkpoints, families, strict=True)
             if c.source == "file" and set(f).intersection(runs_model)]
    if files:
        raise SeriesError(
            f"{len(files)} checkpoint(s) are plain state-dict files ({files[0].location}"
            f"{' ...' if len(files) > 1 else ''}): they hold weights only, with no model "
            f"config or tokenizer to run the model ({', '.join(runs_model)}); use "
            f"--signatures {','.join(f for f in STAGES if f not in runs_model)}, or point "
            "--models at model folders"
        )
    check_tokenizers([c for c, f in zip(checkpoints, families, strict=True)
                      if set(f).intersection(runs_model)], settings.tokenizer)
    ph_backend = homology.resolve_backend(settings.ph_backend)
    placement = Placement.resolve(settings.device, settings.dtype, remote_gpus)
    wanted = {f for fams in families for f in fams}
    texts = (load_texts(settings.texts, settings.n_texts, settings.min_chars)
             if needs_texts(wanted, Texts.ANALYSED) else [])
    local_only = check_hub_access(checkpoints)
    encoders = {label for label, kind in series_kinds(
        checkpoints, local_files_only=local_only,
        trust_remote_code=settings.trust_remote_code).items() if kind == MASKED}
    probes = [f for f, stage in STAGES.items() if stage.probes_loss]
    probed = sorted({c.model for c, f in zip(checkpoints, families, strict=True)
                     if c.label in encoders and set(f).intersection(probes)})
    if probed:
        kept = ",".join(f for f in DEFAULT_STAGES if f not in probes)
        raise SeriesError(
            f"{', '.join(map(repr, probed))} is a masked language model (an encoder such as "
            f"BERT): the {' and '.join(probes)} families probe the next-token loss, "
            f"which an encoder does not define; leave them out (--signatures {kept})")
    probe = (probe_texts(settings.texts, settings.min_chars)
             if needs_texts(wanted, Texts.PROBE) else [])
    inputs = StageInputs(texts, probe, complete_settings(settings, family_settings),
                         settings.texts or "wikitext-2-raw-v1 validation")
    return RunPlan(checkpoints, inputs, placement, ph_backend, local_only,
                   hashes(wanted, inputs, placement.dtype), families=families)


def fit_study(out_dir: str | Path, inputs: StageInputs, families: set[Family],
              placement: Placement, models: dict[str, str], sources: dict[str, str], *,
              extend: bool) -> StageInputs:
    """Check, before any work, that a run of ``families`` with ``inputs`` on ``models``
    belongs to ``out_dir``'s study, as :func:`toposig.run.pipeline.execute` will (a
    ``--preset`` run checks before it trains).

    Returns:
        the inputs the run computes with: ``inputs``, widened where ``extend`` adds to the
        study's settings (:meth:`RunPlan.fit_study_settings`).

    Raises:
        StudyMismatchError: see :func:`toposig.run.study.check_run_fits`.
    """
    plan = RunPlan([], inputs, placement, inputs.run_settings.ph_backend, True,
                   hashes(families, inputs, placement.dtype))
    replaces = plan.fit_study_settings(out_dir, extend=extend)
    check_run_fits(out_dir, models, plan.hashes, plan.settings_views(), extend=extend,
                   sources=sources, replaces=replaces)
    return plan.inputs
