"""Planning a run: the user's models, steps and settings become a checked :class:`RunPlan`.

:func:`plan_run` resolves series, texts, device and Hub access and computes each
family's settings hash, raising on any bad input before a model is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from toposig.config import RunSettings
from toposig.defaults import EXPERIMENT_A_MODELS
from toposig.families import registry
from toposig.families.base import FamilyInputs, SignatureFamily, Texts
from toposig.features import homology
from toposig.model.placement import Placement
from toposig.records import Family
from toposig.run.study import Study, StudyMismatchError, elsewhere
from toposig.sources.checkpoints import (
    Checkpoint,
    HubUnavailableError,
    RefLister,
    SeriesError,
    assign_labels,
    check_hub_access,
    check_tokenizers,
    resolve_series,
)
from toposig.sources.corpus import load_texts, probe_texts
from toposig.sources.loading import MASKED, series_kinds
from toposig.sources.revisions import StepSelection

logger = logging.getLogger(__name__)


@dataclass
class RunPlan:
    """Everything a run needs, checked.

    ``families[i]`` are the signature families of ``checkpoints[i]``. ``inputs`` holds
    the texts, the run's settings and the settings of each family the run computes;
    ``hashes`` the settings hash that keys each computed family's records
    (:meth:`hash_of`).
    """

    checkpoints: list[Checkpoint]
    inputs: FamilyInputs
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
    def settings(self) -> RunSettings:
        """The run's settings (device, precision, seed, tokenizer, texts)."""
        return self.inputs.run

    @property
    def texts(self) -> list[str]:
        return self.inputs.texts

    @property
    def texts_source(self) -> str:
        return self.inputs.texts_source

    def hash_of(self, family: str) -> str | None:
        """The settings hash that keys ``family``'s records (``None``: not in this run)."""
        return self.hashes.get(Family(family))

    def settings_of(self, family: str) -> SignatureFamily:
        """``family`` with its settings in this run.

        Raises:
            KeyError: the run does not compute it.
        """
        return self.inputs.of(family)

    def settings_views(self) -> dict[Family, dict]:
        """Family -> its settings as config.json records them, with what else its hash
        covers (:meth:`~toposig.families.base.SignatureFamily.view`)."""
        return {Family(f): fam.view(self.inputs, self.dtype)
                for f, fam in self.inputs.families.items()}

    @property
    def models(self) -> dict[str, str]:
        """Model label -> the model as the user named it, in plan order."""
        return {c.label: c.model for c in self.checkpoints}

    @property
    def sources(self) -> dict[str, str]:
        """Model label -> ``hub``, ``local`` or ``file``."""
        return {c.label: c.source for c in self.checkpoints}

    def apply(self, terms: Reconciled) -> None:
        """Take the terms on which the folder's study admits this run (:func:`reconcile`):
        the models' labels as the study knows them, and each family's settings, and so
        its settings hash, as the run computes them in the study."""
        if terms.labels:
            self.checkpoints = [replace(c, label=terms.labels.get(c.label, c.label))
                                for c in self.checkpoints]
        self.inputs = terms.inputs
        self.hashes = dict(terms.hashes)

    def join(self, study: Study, *, extend: bool = False) -> dict[Family, str]:
        """Make this run part of ``study`` (the results folder's), or refuse it before any
        work: the study's terms (:func:`reconcile`) applied (:meth:`apply`), then
        :meth:`check_cover`.

        Returns:
            family -> the study's settings hash the run's now replaces (empty: none).

        Raises:
            StudyMismatchError: naming what differs and the way out.
        """
        terms = reconcile(study, self.models, self.sources, self.inputs, self.dtype,
                          extend=extend)
        self.apply(terms)
        self.check_cover(study, terms.replaces)
        return dict(terms.replaces)

    def check_cover(self, study: Study, replaces: Mapping[Family, str]) -> None:
        """Refuse a run that widens a family's settings in the study (``--extend`` adding
        hidden-state layers: ``replaces``, family -> the study's hash it replaces) but
        leaves out some of the study's checkpoints, whose records of it would drop out of
        the study (they are all made anew under the new settings hash); else say what
        happens. Needs the run's checkpoints with their steps (a ``--preset`` suite is
        checked once trained).

        Raises:
            StudyMismatchError: naming the checkpoints left out.
        """
        for family, old_hash in replaces.items():
            self._check_widened_cover(study, family, old_hash)

    def _check_widened_cover(self, study: Study, family: Family, old_hash: str) -> None:
        missing = study.uncovered_records(family, self.checkpoints_of(family))
        new_hash = self.hash_of(family)
        if missing:
            named = ", ".join(f"{label} {stem}" for label, stem in missing[:5])
            raise StudyMismatchError(
                f"--extend widens the {family} settings of the study in {study.folder} "
                f"({self._widened(family)}): every {family} record of it is made anew "
                f"under settings hash {new_hash}, but this run leaves out {len(missing)} "
                f"of its checkpoints ({named}{' ...' if len(missing) > 5 else ''}). Run "
                "every model and step the study holds (its data/config.json lists them), "
                f"or {elsewhere(study.folder)}")
        logger.info("widening the %s settings of the study (%s): each checkpoint's record "
                    "is computed again under settings hash %s; the records of hash %s (%s) "
                    "are no longer part of the study", family, self._widened(family),
                    new_hash, old_hash, study.folder / "records" / old_hash)

    def _widened(self, family: Family) -> str:
        """The widened setting of ``family`` as its option takes it (``--layers 0,-1``)."""
        widening = registry.get(family).widening
        if widening is None:
            return "its settings"
        value = getattr(self.settings_of(family), widening.field)
        return f"{widening.option} {widening.show(value)}"

    def checkpoints_of(self, family: str) -> set[tuple[str, str]]:
        """``(label, record stem)`` of the checkpoints whose ``family`` this run computes."""
        return {(c.label, c.name) for i, c in enumerate(self.checkpoints)
                if family in self.families_of(i)}

    def families_of(self, index: int) -> tuple[Family, ...]:
        return self.families[index]

    @property
    def all_families(self) -> list[Family]:
        present = {f for i in range(len(self.checkpoints)) for f in self.families_of(i)}
        return registry.in_order(present)


def checkpoint_families(ckpt: Checkpoint,
                        requested: tuple[Family, ...] | None) -> tuple[Family, ...]:
    """The signature families of one checkpoint: ``requested``, or by default those a
    model gets (embedding and weights) for model folders and Hub revisions and those
    that need no model (weights) for plain checkpoint files."""
    if requested is not None:
        return requested
    if ckpt.source == "file":
        return registry.weights_only_names()
    return registry.default_names()


def plan_run(models: list[str] | None, selection: StepSelection | None,
             settings: RunSettings, signatures: tuple[str, ...] | None = None,
             remote_gpus: bool = False, *,
             family_settings: Mapping[str, SignatureFamily | None] | None = None,
             list_refs: RefLister | None = None) -> RunPlan:
    """Resolve series, texts, device and Hub access; raise before any work on bad input.

    Args:
        models: Hub ids, local folders or checkpoint files; ``None`` or empty for
            experiment A (Pythia 70m/160m/410m).
        selection: which checkpoints of each series (``--steps``, ``--revisions``,
            ``--revision-pattern``; :func:`toposig.sources.revisions.parse_selection`), or
            ``None`` for each series' default.
        settings: the run's validated settings (device, precision, seed, tokenizer,
            texts).
        signatures: the families to compute (``--signatures``), or ``None`` for each
            checkpoint kind's default.
        remote_gpus: the checkpoints run on GPU workers elsewhere (``--executor ray
            --gpus-per-task``): device ``auto`` means CUDA there, whatever this machine has.
        family_settings: family -> the family with its settings, for families whose
            settings are not their defaults seeded as ``settings`` say
            (:func:`toposig.families.registry.settings_for`); only the run's families'
            are used.
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
    runs_model = [c.name for c in registry.families() if c.runs_model]
    files = [c for c, f in zip(checkpoints, families, strict=True)
             if c.source == "file" and set(f).intersection(runs_model)]
    if files:
        raise SeriesError(
            f"{len(files)} checkpoint(s) are plain state-dict files ({files[0].location}"
            f"{' ...' if len(files) > 1 else ''}): they hold weights only, with no model "
            f"config or tokenizer to run the model ({', '.join(runs_model)}); use "
            f"--signatures {','.join(registry.weights_only_names())}, or point "
            "--models at model folders"
        )
    check_tokenizers([c for c, f in zip(checkpoints, families, strict=True)
                      if set(f).intersection(runs_model)], settings.tokenizer)
    ph_backend = homology.resolve_backend(settings.ph_backend)
    placement = Placement.resolve(settings.device, settings.dtype, remote_gpus)
    wanted = {f for fams in families for f in fams}
    texts = (load_texts(settings.texts, settings.n_texts, settings.min_chars)
             if registry.needs_texts(wanted, Texts.ANALYSED) else [])
    local_only = check_hub_access(checkpoints)
    encoders = {label for label, kind in series_kinds(
        checkpoints, local_files_only=local_only,
        trust_remote_code=settings.trust_remote_code).items() if kind == MASKED}
    probes = [c.name for c in registry.families() if c.probes_loss]
    probed = sorted({c.model for c, f in zip(checkpoints, families, strict=True)
                     if c.label in encoders and set(f).intersection(probes)})
    if probed:
        kept = ",".join(f for f in registry.default_names() if f not in probes)
        raise SeriesError(
            f"{', '.join(map(repr, probed))} is a masked language model (an encoder such as "
            f"BERT): the {' and '.join(probes)} families probe the next-token loss, "
            f"which an encoder does not define; leave them out (--signatures {kept})")
    probe = (probe_texts(settings.texts, settings.min_chars)
             if registry.needs_texts(wanted, Texts.PROBE) else [])
    inputs = FamilyInputs(texts, probe, settings,
                          registry.settings_for(settings, wanted, family_settings))
    return RunPlan(checkpoints, inputs, placement, ph_backend, local_only,
                   inputs.hashes(placement.dtype), families=families)


@dataclass(frozen=True)
class Reconciled:
    """The terms on which a results folder's study admits a run (:func:`reconcile`).

    Attributes:
        labels: run label -> the label the study already gives that model, for the
            run's models the study holds under another label.
        inputs: the run's inputs with each family's settings as the run computes them in
            the study (``--extend`` may widen the embedding's layers to the study's).
        hashes: family -> the settings hash its records are then keyed by.
        replaces: family -> the study's settings hash the run's replaces (widened).
    """

    labels: Mapping[str, str]
    inputs: FamilyInputs
    hashes: Mapping[Family, str]
    replaces: Mapping[Family, str]


def reconcile(study: Study, models: Mapping[str, str], sources: Mapping[str, str],
              inputs: FamilyInputs, dtype: str, *, extend: bool = False,
              unchecked: Iterable[str] = ()) -> Reconciled:
    """Read a run against the folder's study once and say on what terms it belongs to it,
    or refuse it (:mod:`toposig.run.study`). The one place a run and a study meet: the
    pipeline (:func:`toposig.run.pipeline.execute`), the command line before it trains a
    ``--preset`` suite, and the live monitor's guard ask it.

    The run's models take the labels the study already gives them
    (:meth:`~toposig.run.study.Study.labels_for`), so a run of part of a study finds its
    records whatever else it brings; each family's settings are widened to the study's
    where the two differ in the family's widening field alone (the embedding's
    ``layers``) and ``extend`` is on (:meth:`~toposig.run.study.Study.widen`); then the
    study checks the models and each family's settings hash
    (:meth:`~toposig.run.study.Study.check`). That a widening run covers every
    checkpoint of the study is :meth:`RunPlan.check_cover`'s, once the steps are known.

    Args:
        models, sources: the run's model label -> model as named, and -> its source.
        inputs: the run's texts and settings, of the families it computes.
        dtype: the run's resolved precision.
        extend: the run may add models, or widen a family's widening field.
        unchecked: families whose hash is not compared (a live run's precision-keyed
            families before the model's precision is known).

    Raises:
        StudyMismatchError: naming what differs and the way out.
    """
    labels = study.labels_for(dict(models), dict(sources))
    named = {labels.get(k, k): m for k, m in models.items()}
    origin = {labels.get(k, k): v for k, v in sources.items()}
    families, replaces = {}, {}
    for name in inputs.families:
        settings, old = study.widen(Family(name), inputs, dtype, extend=extend)
        families[name] = settings
        if old:
            replaces[Family(name)] = old
    widened = replace(inputs, families=families)
    hashes = widened.hashes(dtype)
    skip = set(map(str, unchecked))
    checked = {f: h for f, h in hashes.items() if f not in skip}
    study.check(named, checked, {f: widened.of(f).view(widened, dtype) for f in checked},
                extend=extend, sources=origin, replaces=replaces)
    return Reconciled(labels, widened, hashes, replaces)
