"""Planning a run: the user's models, steps and settings become a checked :class:`RunPlan`.

:func:`plan_run` resolves series, texts, device and Hub access and computes each
family's settings hash, raising on any bad input before a model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from toposig.config import (
    EmbeddingSettings,
    GradientSettings,
    LandscapeSettings,
    WeightSettings,
    family_hash,
    settings_hash,
    weights_hash,
)
from toposig.features import homology
from toposig.model.placement import Placement
from toposig.records import (
    DEFAULT_FAMILIES,
    FAMILIES,
    MODEL_FAMILIES,
    PROBE_FAMILIES,
    Family,
)
from toposig.run.study import study_labels, widen_layers
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
from toposig.sources.corpus import load_texts, probe_texts, texts_fingerprint
from toposig.sources.revisions import StepSelection


@dataclass
class RunPlan:
    """Everything a run needs, checked.

    ``families[i]`` are the signature families of ``checkpoints[i]``. Each family's
    records are keyed by its settings hash (:meth:`hash_of`; ``None`` when no
    checkpoint needs the family): ``settings_hash`` for the embedding, ``weights_hash``,
    ``landscape_hash``, ``gradients_hash``. ``probe_texts`` are the texts the landscape
    and gradient probe windows are cut from.
    """

    checkpoints: list[Checkpoint]
    texts: list[str]
    settings: EmbeddingSettings
    placement: Placement  # the device and precision, resolved once
    ph_backend: str
    local_files_only: bool
    settings_hash: str | None
    texts_source: str
    suite: dict | None = None  # the training suite's config.json, for --preset runs
    families: list[tuple[Family, ...]] = field(default_factory=list)
    weight_settings: WeightSettings = field(default_factory=WeightSettings)
    weights_hash: str | None = None
    landscape_settings: LandscapeSettings = field(default_factory=LandscapeSettings)
    gradient_settings: GradientSettings = field(default_factory=GradientSettings)
    probe_texts: list[str] = field(default_factory=list)
    landscape_hash: str | None = None
    gradients_hash: str | None = None
    command: str | None = None  # the command line that made the run, for config.json

    @property
    def device(self) -> str:
        return self.placement.device

    @property
    def dtype(self) -> str:
        return self.placement.dtype

    def hash_of(self, family: Family) -> str | None:
        """The settings hash that keys ``family``'s records (``None``: not in this run)."""
        return {Family.EMBEDDING: self.settings_hash, Family.WEIGHTS: self.weights_hash,
                Family.LANDSCAPE: self.landscape_hash,
                Family.GRADIENTS: self.gradients_hash}[family]

    def settings_views(self) -> dict[str, dict]:
        """Family -> its settings as config.json records them (:func:`settings_views`)."""
        return settings_views(self.settings, self.weight_settings, self.landscape_settings,
                              self.gradient_settings, self.dtype, self.texts)

    @property
    def models(self) -> dict[str, str]:
        """Model label -> the model as the user named it, in plan order."""
        return {c.label: c.model for c in self.checkpoints}

    @property
    def sources(self) -> dict[str, str]:
        """Model label -> ``hub``, ``local`` or ``file``."""
        return {c.label: c.source for c in self.checkpoints}

    @property
    def hashes(self) -> dict[str, str]:
        """Family -> settings hash, for the families this run computes."""
        return {f: h for f in FAMILIES if (h := self.hash_of(f))}

    def adopt_study_labels(self, out_dir: str | Path) -> None:
        """Give the run's models the labels ``out_dir``'s study already gives them
        (:func:`toposig.run.study.study_labels`), so a run of part of a study finds its
        records whatever else it brings."""
        mapping = study_labels(out_dir, self.models, self.sources)
        if mapping:
            self.checkpoints = [replace(c, label=mapping.get(c.label, c.label))
                                for c in self.checkpoints]

    def fit_study_layers(self, out_dir: str | Path, *, extend: bool) -> dict[str, str]:
        """Take the union of ``out_dir``'s study's embedding layers and the run's when the
        two differ in ``layers`` alone and ``extend`` is on
        (:func:`toposig.run.study.widen_layers`): the run's settings and settings hash
        become the union's.

        Returns:
            family -> the study's settings hash the run's now replaces (empty: none).

        Raises:
            StudyMismatchError: the layers differ and ``extend`` is off.
        """
        if not self.settings_hash:
            return {}
        sha = texts_fingerprint(self.texts)
        settings, replaced = widen_layers(out_dir, self.settings, sha, self.dtype,
                                          extend=extend)
        if settings != self.settings:
            self.settings = settings
            self.settings_hash = settings_hash(settings, sha, self.dtype)
        return {Family.EMBEDDING: replaced} if replaced else {}

    def embedding_checkpoints(self) -> set[tuple[str, str]]:
        """``(label, record stem)`` of the checkpoints whose embedding this run computes."""
        return {(c.label, c.name) for i, c in enumerate(self.checkpoints)
                if Family.EMBEDDING in self.families_of(i)}

    def families_of(self, index: int) -> tuple[Family, ...]:
        return self.families[index] if self.families else (Family.EMBEDDING,)

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
    return (Family.WEIGHTS,) if ckpt.source == "file" else DEFAULT_FAMILIES


def plan_run(models: list[str] | None, selection: StepSelection | None,
             settings: EmbeddingSettings, weight_settings: WeightSettings | None = None,
             signatures: tuple[str, ...] | None = None, remote_gpus: bool = False,
             landscape_settings: LandscapeSettings | None = None,
             gradient_settings: GradientSettings | None = None, *,
             list_refs: RefLister | None = None) -> RunPlan:
    """Resolve series, texts, device and Hub access; raise before any work on bad input.

    Args:
        models: Hub ids, local folders or checkpoint files; ``None`` or empty for
            experiment A (Pythia 70m/160m/410m).
        selection: which checkpoints of each series (``--steps``, ``--revisions``,
            ``--revision-pattern``; :func:`toposig.sources.revisions.parse_selection`), or
            ``None`` for each series' default.
        settings: validated embedding settings.
        weight_settings: validated weight settings (defaults when ``None``).
        signatures: the families to compute (``--signatures``), or ``None`` for each
            checkpoint kind's default.
        remote_gpus: the checkpoints run on GPU workers elsewhere (``--executor ray
            --gpus-per-task``): device ``auto`` means CUDA there, whatever this machine has.
        landscape_settings, gradient_settings: settings of those families (defaults
            when ``None``).
        list_refs: lists a Hub repository's revisions (``huggingface_hub.list_repo_refs``
            when ``None``).
    """
    weight_settings = weight_settings or WeightSettings(seed=settings.seed,
                                                        ph_backend=settings.ph_backend)
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
    files = [c for c, f in zip(checkpoints, families, strict=True)
             if c.source == "file" and set(f) & set(MODEL_FAMILIES)]
    if files:
        raise SeriesError(
            f"{len(files)} checkpoint(s) are plain state-dict files ({files[0].location}"
            f"{' ...' if len(files) > 1 else ''}): they hold weights only, with no model "
            "config or tokenizer to run the model (embedding, landscape, gradients); use "
            "--signatures weights, or point --models at model folders"
        )
    embedding = [c for c, f in zip(checkpoints, families, strict=True) if Family.EMBEDDING in f]
    check_tokenizers([c for c, f in zip(checkpoints, families, strict=True)
                      if set(f) & set(MODEL_FAMILIES)], settings.tokenizer)
    ph_backend = homology.resolve_backend(settings.ph_backend)
    placement = Placement.resolve(settings.device, settings.dtype, remote_gpus)
    texts: list[str] = []
    if embedding:
        texts = load_texts(settings.texts, settings.n_texts, settings.min_chars)
    local_only = check_hub_access(checkpoints)
    encoders = {label for label, kind in series_kinds(
        checkpoints, local_files_only=local_only,
        trust_remote_code=settings.trust_remote_code).items() if kind == MASKED}
    probed = sorted({c.model for c, f in zip(checkpoints, families, strict=True)
                     if c.label in encoders and set(f) & set(PROBE_FAMILIES)})
    if probed:
        raise SeriesError(
            f"{', '.join(map(repr, probed))} is a masked language model (an encoder such as "
            "BERT): the landscape and gradients families probe the next-token loss, which "
            "an encoder does not define; leave them out (--signatures embedding,weights)")
    landscape_settings = landscape_settings or LandscapeSettings(seed=settings.seed)
    gradient_settings = gradient_settings or GradientSettings(
        seed=settings.seed, maxdim=settings.maxdim, ph_backend=settings.ph_backend)
    wanted = {f for fams in families for f in fams}
    probe = (probe_texts(settings.texts, settings.min_chars)
             if wanted & set(PROBE_FAMILIES) else [])
    hashes = family_hashes(wanted, settings, weight_settings, landscape_settings,
                           gradient_settings, texts, probe, placement.dtype)
    source = settings.texts or "wikitext-2-raw-v1 validation"
    return RunPlan(checkpoints, texts, settings, placement, ph_backend, local_only,
                   hashes.get(Family.EMBEDDING), source, families=families,
                   weight_settings=weight_settings, weights_hash=hashes.get(Family.WEIGHTS),
                   landscape_settings=landscape_settings,
                   gradient_settings=gradient_settings, probe_texts=probe,
                   landscape_hash=hashes.get(Family.LANDSCAPE),
                   gradients_hash=hashes.get(Family.GRADIENTS))


def family_hashes(families: set[Family], settings: EmbeddingSettings,
                  weight_settings: WeightSettings, landscape_settings: LandscapeSettings,
                  gradient_settings: GradientSettings, texts: list[str],
                  probe: list[str], dtype: str) -> dict[str, str]:
    """Family -> the settings hash its records are keyed by, for ``families``.

    Args:
        texts: the analysed texts (the embedding's hash covers them).
        probe: the texts the landscape and gradient windows are cut from.
        dtype: the resolved precision of the embedding's forward pass.
    """
    out: dict[str, str] = {}
    if Family.EMBEDDING in families:
        out[Family.EMBEDDING] = settings_hash(settings, texts_fingerprint(texts), dtype)
    if Family.WEIGHTS in families:
        out[Family.WEIGHTS] = weights_hash(weight_settings)
    for fam, s in ((Family.LANDSCAPE, landscape_settings), (Family.GRADIENTS, gradient_settings)):
        if fam in families:
            out[fam] = family_hash(fam, s, texts_fingerprint(probe))
    return out


def settings_views(settings: EmbeddingSettings, weight_settings: WeightSettings,
                   landscape_settings: LandscapeSettings, gradient_settings: GradientSettings,
                   dtype: str, texts: list[str]) -> dict[str, dict]:
    """Family -> its settings as config.json records them, the embedding's with the
    resolved ``dtype`` and the texts' ``texts_sha256`` (both in its hash): what
    :func:`toposig.run.study.check_run_fits` names when a hash differs."""
    return {Family.EMBEDDING: {**settings.to_dict(), "dtype": dtype,
                               "texts_sha256": texts_fingerprint(texts) if texts else None},
            Family.WEIGHTS: weight_settings.to_dict(),
            Family.LANDSCAPE: landscape_settings.to_dict(),
            Family.GRADIENTS: gradient_settings.to_dict()}
