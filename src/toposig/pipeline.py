"""The stage driver: plan a run (every check before any work), then run it.

:func:`plan_run` turns the user's models, steps and settings into a :class:`RunPlan`,
raising on any bad input before a model is loaded. :func:`execute` walks the plan's
checkpoints. Each checkpoint is loaded once for the signature families it needs
(``embedding``: hidden states and perplexity; ``weights``: neural persistence and
weight-row homology), each family's record is written to its own store (keyed by that
family's settings hash, so each resumes on its own) the moment it is done, failures are
recorded and the run goes on. The per-checkpoint records are the durable state; the
aggregate files (one entry per checkpoint with its families merged) are derived from
them, written when the run starts (so a run killed before it could write them rebuilds
them), after a recorded failure and when it ends, normally or not, so a run's
bookkeeping grows linearly with its checkpoints.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from tqdm.auto import tqdm

from . import homology
from .checkpoints import (
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
from .config import (
    SCHEMA_VERSION,
    EmbeddingSettings,
    GradientSettings,
    LandscapeSettings,
    WeightSettings,
    family_hash,
    settings_hash,
    weights_hash,
)
from .corpus import load_texts, probe_texts, texts_fingerprint
from .embedding import (
    CheckpointOutput,
    checkpoint_fields,
    resolve_device,
    resolve_dtype,
)
from .executors import Executor, SerialExecutor
from .locks import exclusive
from .revisions import StepSelection
from .store import ResultStore, remove_stale_temporaries
from .study import (
    FAMILIES,
    HASH_KEYS,
    IDENTITY,
    StudyMismatchError,
    check_run_fits,
    elsewhere,
    entry_order,
    load_study,
    merge_study,
    other_entries,
    study_hashes,
    study_labels,
)
from .tasks import PROBE_FAMILIES, Task, TaskFailure

logger = logging.getLogger(__name__)

VERSIONED_PACKAGES = ("torch", "transformers", "huggingface_hub", "numpy", "scipy",
                      "scikit-learn", "ripser", "giotto-ph", "gudhi", "persim")


# What a model folder or Hub revision gets without --signatures (the probes are opt-in).
DEFAULT_FAMILIES = ("embedding", "weights")
# Families that run the model and need its tokenizer and config (not a bare state dict).
MODEL_FAMILIES = ("embedding", "landscape", "gradients")


# What the aggregate keeps of a landscape or gradient record besides its features.
PROBE_FIELDS = {
    "landscape": ("settings_hash", "arrays_file", "probe_loss", "hessian_trace_se", "lanczos",
                  "theta_norm", "settings", "timings_s"),
    "gradients": ("settings_hash", "arrays_file", "ph_backend", "settings", "timings_s"),
}


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
    device: str
    dtype: str
    ph_backend: str
    local_files_only: bool
    settings_hash: str | None
    texts_source: str
    suite: dict | None = None  # the training suite's config.json, for --preset runs
    families: list[tuple[str, ...]] = field(default_factory=list)
    weight_settings: WeightSettings = field(default_factory=WeightSettings)
    weights_hash: str | None = None
    landscape_settings: LandscapeSettings = field(default_factory=LandscapeSettings)
    gradient_settings: GradientSettings = field(default_factory=GradientSettings)
    probe_texts: list[str] = field(default_factory=list)
    landscape_hash: str | None = None
    gradients_hash: str | None = None
    command: str | None = None  # the command line that made the run, for config.json

    def hash_of(self, family: str) -> str | None:
        """The settings hash that keys ``family``'s records (``None``: not in this run)."""
        return {"embedding": self.settings_hash, "weights": self.weights_hash,
                "landscape": self.landscape_hash, "gradients": self.gradients_hash}[family]

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
        (:func:`toposig.study.study_labels`), so a run of part of a study finds its
        records whatever else it brings."""
        mapping = study_labels(out_dir, self.models, self.sources)
        if mapping:
            self.checkpoints = [replace(c, label=mapping.get(c.label, c.label))
                                for c in self.checkpoints]

    def families_of(self, index: int) -> tuple[str, ...]:
        return self.families[index] if self.families else ("embedding",)

    @property
    def all_families(self) -> list[str]:
        present = {f for i in range(len(self.checkpoints)) for f in self.families_of(i)}
        return [f for f in FAMILIES if f in present]


@dataclass
class RunOutcome:
    records: list[dict]
    computed: int = 0
    skipped: int = 0
    failures: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    config: dict = field(default_factory=dict)


def checkpoint_families(ckpt: Checkpoint, requested: tuple[str, ...] | None) -> tuple[str, ...]:
    """The signature families of one checkpoint: ``requested``, or by default embedding
    and weights for model folders and Hub revisions and ``weights`` for plain checkpoint
    files."""
    if requested is not None:
        return requested
    return ("weights",) if ckpt.source == "file" else DEFAULT_FAMILIES


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
            ``--revision-pattern``; :func:`toposig.revisions.parse_selection`), or
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
    embedding = [c for c, f in zip(checkpoints, families, strict=True) if "embedding" in f]
    check_tokenizers([c for c, f in zip(checkpoints, families, strict=True)
                      if set(f) & set(MODEL_FAMILIES)], settings.tokenizer)
    ph_backend = homology.resolve_backend(settings.ph_backend)
    device, dtype = run_device(settings, remote_gpus)
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
                           gradient_settings, texts, probe, dtype)
    source = settings.texts or "wikitext-2-raw-v1 validation"
    return RunPlan(checkpoints, texts, settings, device, dtype, ph_backend, local_only,
                   hashes.get("embedding"), source, families=families,
                   weight_settings=weight_settings, weights_hash=hashes.get("weights"),
                   landscape_settings=landscape_settings,
                   gradient_settings=gradient_settings, probe_texts=probe,
                   landscape_hash=hashes.get("landscape"),
                   gradients_hash=hashes.get("gradients"))


def run_device(settings: EmbeddingSettings, remote_gpus: bool = False) -> tuple[str, str]:
    """The run's device and resolved precision (``auto`` resolved for the device).

    ``remote_gpus``: the checkpoints run on GPU workers elsewhere (Ray with
    ``--gpus-per-task``), so ``auto`` means CUDA there whatever this machine has.
    """
    if remote_gpus and (settings.device == "auto" or settings.device.startswith("cuda")):
        device = "cuda"  # each Ray task sees its own GPU as cuda; this driver may have none
    else:
        device = resolve_device(settings.device)
    return device, resolve_dtype(settings.dtype, device)


def family_hashes(families: set[str], settings: EmbeddingSettings,
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
    if "embedding" in families:
        out["embedding"] = settings_hash(settings, texts_fingerprint(texts), dtype)
    if "weights" in families:
        out["weights"] = weights_hash(weight_settings)
    for fam, s in (("landscape", landscape_settings), ("gradients", gradient_settings)):
        if fam in families:
            out[fam] = family_hash(fam, s, texts_fingerprint(probe))
    return out


def settings_views(settings: EmbeddingSettings, weight_settings: WeightSettings,
                   landscape_settings: LandscapeSettings, gradient_settings: GradientSettings,
                   dtype: str, texts: list[str]) -> dict[str, dict]:
    """Family -> its settings as config.json records them, the embedding's with the
    resolved ``dtype`` and the texts' ``texts_sha256`` (both in its hash): what
    :func:`toposig.study.check_run_fits` names when a hash differs."""
    return {"embedding": {**settings.to_dict(), "dtype": dtype,
                          "texts_sha256": texts_fingerprint(texts) if texts else None},
            "weights": weight_settings.to_dict(), "landscape": landscape_settings.to_dict(),
            "gradients": gradient_settings.to_dict()}


def failure_record(ckpt: Checkpoint, exc: BaseException, family: str = "embedding") -> dict:
    """A record of a checkpoint that could not be analysed, with the reason."""
    failure = TaskFailure.from_exception(exc)
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "failed",
        "family": family,
        **checkpoint_fields(ckpt),
        "error_type": failure.error_type,
        "error": failure.message,
        "traceback": failure.traceback_text,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def device_description(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        try:
            return torch.cuda.get_device_name(torch.device(device))
        except (AssertionError, RuntimeError):  # the GPUs are Ray workers' elsewhere
            return "CUDA device (remote workers)"
    return f"{platform.processor() or platform.machine()} CPU"


def _mean_time(records: list[dict], key: str) -> float | None:
    times = [r[key]["timings_s"]["total"] for r in records
             if isinstance(r.get(key), dict) and "timings_s" in r[key]]
    return sum(times) / len(times) if times else None


def run_config(plan: RunPlan, outcome: RunOutcome, started: str,
               previous: dict | None = None) -> dict:
    """The results folder's ``config.json``: the study (settings, inputs, models, steps,
    timings per checkpoint from every record) and the last run that wrote records.

    Args:
        plan, outcome: this run, as far as it has got; ``outcome.records`` are the
            aggregate entries of the whole study.
        started: when this run started (ISO 8601, UTC).
        previous: the folder's config.json before this run: its study is widened with
            this run's (:func:`toposig.study.merge_study`) and, when this run has written
            no record yet, its ``last_run`` is kept.
    """
    series: dict[str, list] = {}
    for c in plan.checkpoints:
        series.setdefault(c.label, []).append(c.step)
    config = {
        "schema_version": SCHEMA_VERSION,
        "signatures": plan.all_families,
        "settings": plan.settings.to_dict(),
        "settings_hash": plan.settings_hash,
        "weight_settings": plan.weight_settings.to_dict(),
        "weights_hash": plan.weights_hash,
        "landscape_settings": (plan.landscape_settings.to_dict()
                               if plan.landscape_hash else None),
        "landscape_hash": plan.landscape_hash,
        "gradient_settings": (plan.gradient_settings.to_dict()
                              if plan.gradients_hash else None),
        "gradients_hash": plan.gradients_hash,
        "texts_source": plan.texts_source if plan.texts else None,
        "texts_sha256": texts_fingerprint(plan.texts) if plan.texts else None,
        "n_texts": len(plan.texts),
        "models": plan.models,
        "model_sources": plan.sources,
        "steps": series,
        "dtype": plan.dtype if plan.settings_hash else None,  # in the embedding's hash
        "training_suite": plan.suite,
    }
    config = merge_study(previous, config)
    entries = outcome.records
    emb = [r for r in entries if "embedding" in r.get("families", ())]
    per_emb = [r["timings_s"]["total"] for r in emb if "timings_s" in r]
    config["n_checkpoints"] = len(entries)
    config["timings_s"] = {
        "mean_embedding_per_checkpoint": (sum(per_emb) / len(per_emb)) if per_emb else None,
        "mean_weights_per_checkpoint": _mean_time(entries, "weights"),
        "mean_landscape_per_checkpoint": _mean_time(entries, "landscape"),
        "mean_gradients_per_checkpoint": _mean_time(entries, "gradients"),
    }
    config["failures"] = [
        {"model": f["model_label"], "step": f["step"], "family": f["family"],
         "error": f["error"]}
        for f in outcome.failures
    ]
    # last_run: the run that last computed or failed something in the folder. A run that
    # reused every record leaves it as it was, so rerunning a finished study changes no file.
    wrote = outcome.computed > 0 or bool(outcome.failures)
    kept = (previous or {}).get("last_run")
    config["last_run"] = kept if kept and not wrote else {
        "command": plan.command,
        "started_at": started,
        "wall_s": outcome.wall_s,
        "n_checkpoints": len(plan.checkpoints),
        "n_computed": outcome.computed,
        "n_skipped": outcome.skipped,
        "n_failed": len(outcome.failures),
        "device": plan.device,
        "device_name": device_description(plan.device),
        "dtype": plan.dtype,
        "ph_backend": plan.ph_backend,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
    }
    return config


def merge_family_records(records: dict[str, dict]) -> dict | None:
    """One aggregate entry per checkpoint from its finished family records.

    The embedding record's fields stay at the top level (as the seed's files have them);
    the weight record adds its checkpoint-level features to ``features``, its stored
    loss as ``loss`` and the rest under ``weights``; the landscape and gradient records
    add their features and keep their details under ``landscape`` and ``gradients``.
    ``None`` when no family finished.
    """
    if not records:
        return None
    emb, w = records.get("embedding"), records.get("weights")
    first = next(iter(records.values()))
    entry = dict(emb) if emb else {"schema_version": SCHEMA_VERSION, "status": "ok",
                                   **{k: first.get(k) for k in IDENTITY}}
    entry["families"] = [f for f in FAMILIES if f in records]
    if w:
        entry["features"] = {**entry.get("features", {}), **w["features"]}
        entry["loss"] = w.get("checkpoint_loss")
        entry["loss_key"] = w.get("checkpoint_loss_key")
        if entry.get("num_parameters") is None:
            entry["num_parameters"] = w.get("num_parameters")
        entry["weights"] = {k: w.get(k) for k in (
            "settings_hash", "arrays_file", "n_matrices", "w_max", "ph_backend", "matrices",
            "timings_s")}
    for family, keys in PROBE_FIELDS.items():
        if rec := records.get(family):
            entry["features"] = {**entry.get("features", {}), **rec["features"]}
            if entry.get("num_parameters") is None:
                entry["num_parameters"] = rec.get("num_parameters")
            if entry.get("loss") is None and rec.get("checkpoint_loss") is not None:
                entry["loss"], entry["loss_key"] = rec["checkpoint_loss"], rec.get(
                    "checkpoint_loss_key")
            entry[family] = {k: rec.get(k) for k in keys}
    return entry


def execute(plan: RunPlan, out_dir: str | Path, force: bool = False,
            progress: bool = True, executor: Executor | None = None, *,
            extend: bool = False) -> RunOutcome:
    """Analyse every checkpoint of the plan, resuming from finished records.

    ``out_dir`` holds one study (:mod:`toposig.study`): a plan that brings a model the
    folder's study does not hold (unless ``extend``) or another settings hash for one of
    its families is refused before any work. The checkpoints (and families) without a
    finished record become tasks for ``executor`` (default:
    :class:`~toposig.executors.SerialExecutor`). Each family's record is written
    atomically the moment its result arrives; a family that failed is recorded as such
    and the run goes on. The aggregates, one entry per checkpoint of the whole study
    (this plan's and the finished records of the study's other checkpoints and
    families), are rebuilt from the records before the first task (a killed run's are
    stale), after a recorded failure, and once at the end, also when the run is
    interrupted or raises. The whole run holds ``out_dir``'s lock
    (:mod:`toposig.locks`) and first removes the temporaries a killed run left there.

    Raises:
        FolderLockedError: another process is writing to ``out_dir``.
        StudyMismatchError: the plan does not belong to ``out_dir``'s study.
    """
    with exclusive(out_dir, "results folder"):
        plan.adopt_study_labels(out_dir)
        check_run_fits(out_dir, plan.models, plan.hashes, plan.settings_views(),
                       extend=extend, sources=plan.sources)
        remove_stale_temporaries(out_dir)
        return _execute(plan, out_dir, force, progress, executor)


def _execute(plan: RunPlan, out_dir: str | Path, force: bool, progress: bool,
             executor: Executor | None) -> RunOutcome:
    """:func:`execute` once the results folder is locked, checked and cleaned."""
    previous = load_study(out_dir)
    study = merge_study(previous, {"models": plan.models, "signatures": plan.all_families,
                                   "steps": {}, **{HASH_KEYS[f]: h
                                                   for f, h in plan.hashes.items()}})
    stores = {f: ResultStore(out_dir, h) for f, h in study_hashes(study).items()}
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    outcome = RunOutcome(records=[])
    finished: list[dict[str, dict]] = []
    tasks: list[Task] = []
    replaced, changed = 0, set()
    for i, ckpt in enumerate(plan.checkpoints):
        families = plan.families_of(i)
        done_here = {}
        for fam, store in stores.items():  # the study's other families are merged too
            rec = None if force and fam in families else store.finished(ckpt)
            if rec is not None:
                done_here[fam] = rec
            elif fam in families and not force and store.changed(ckpt):
                replaced += 1
                changed.add(ckpt.label)
        finished.append(done_here)
        todo = tuple(f for f in families if f not in done_here)
        if todo:
            tasks.append(Task(i, ckpt, todo))
    outcome.skipped = len(plan.checkpoints) - len(tasks)
    others = other_entries(out_dir, study, {(c.label, c.name) for c in plan.checkpoints})
    if replaced:
        mixed = sorted(changed & {label for label, _ in others})
        if mixed:
            raise StudyMismatchError(
                f"{', '.join(mixed)}: checkpoints changed since their records in {out_dir} "
                "were written (retrained or replaced), and the study there holds other "
                "checkpoints of the same model that this run does not cover, made from the "
                f"old files: the aggregates would mix two trainings. {elsewhere(out_dir)}"
                f"; or run every step the study holds; or remove the old records "
                f"({Path(out_dir) / 'records'}/*/{mixed[0]}) to start that model afresh")
        logger.warning("%d record(s) in %s were made from checkpoints whose files have "
                       "changed since (retrained or replaced): they are computed again and "
                       "replaced", replaced, out_dir)
    order = entry_order(study)

    def refresh() -> None:
        entries = [e for f in finished if (e := merge_family_records(f)) is not None]
        entries += [e for f in others.values() if (e := merge_family_records(f))]
        entries.sort(key=order)  # the study's order, whatever the command line's
        outcome.records = entries
        outcome.wall_s = time.perf_counter() - t0
        outcome.config = run_config(plan, outcome, started, previous)
        if stores:  # a plan with no checkpoint has nothing to aggregate
            next(iter(stores.values())).write_aggregates(outcome.records, outcome.config)

    bar = tqdm(total=len(plan.checkpoints), initial=outcome.skipped, desc="checkpoints",
               unit="ckpt", disable=not progress)

    def emit(task: Task, family: str, result: CheckpointOutput | BaseException) -> None:
        _store_result(stores, task.ckpt, finished[task.index], outcome, plan.device, family,
                      result)
        if isinstance(result, BaseException):
            refresh()

    def done(task: Task) -> None:
        outcome.computed += 1
        bar.set_postfix_str(f"{task.ckpt.label} {task.ckpt.name}")
        bar.update(1)

    if tasks:
        refresh()
    try:
        (executor or SerialExecutor()).run(tasks, plan, emit, done)
    finally:
        bar.close()
        refresh()
    return outcome


def _store_result(stores: dict[str, ResultStore], ckpt: Checkpoint, finished: dict[str, dict],
                  outcome: RunOutcome, device: str, family: str,
                  result: CheckpointOutput | BaseException) -> None:
    """Write one family's record (or its failure) the moment it is done."""
    if isinstance(result, BaseException):
        rec = stores[family].write(failure_record(ckpt, result, family), ckpt)
        outcome.failures.append(rec)
        logger.error("%s: %s failed: %s: %s", ckpt.describe(), family,
                     rec["error_type"], rec["error"])
        _free_device_memory(device)
    else:
        finished[family] = stores[family].write(result.record, ckpt, result.arrays)


def _free_device_memory(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def summary_lines(plan: RunPlan, outcome: RunOutcome, out_dir: str | Path,
                  analyze: str = "python src/analyze_results.py") -> list[str]:
    """The one-screen summary printed at the end of a run; ``analyze`` is the command
    it names for the next stage."""
    data = Path(out_dir) / "data"
    fams = plan.all_families
    lines = [
        f"checkpoints: {len(plan.checkpoints)}  computed: {outcome.computed}  "
        f"skipped (already done): {outcome.skipped}  failed: {len(outcome.failures)}  "
        f"wall: {outcome.wall_s:.1f} s",
        f"signatures: {', '.join(fams)}; device: {plan.device} ({plan.dtype}), "
        f"PH backend: {plan.ph_backend}",
    ]
    if "embedding" in fams:
        lines.append(f"texts: {len(plan.texts)} from {plan.texts_source}, embedding settings "
                     f"hash: {plan.settings_hash}")
    if "weights" in fams:
        ws = plan.weight_settings
        lines.append(f"weights: <= {ws.max_rows} rows per matrix, seed {ws.seed}, settings "
                     f"hash: {plan.weights_hash}")
    if "landscape" in fams:
        ls = plan.landscape_settings
        lines.append(f"landscape: {ls.n_windows} windows x {ls.window} tokens, top "
                     f"{ls.top_k} Hessian eigenvalues, {ls.res} x {ls.res} grid in {ls.dirs} "
                     f"directions, span {ls.span:g}, settings hash: {plan.landscape_hash}")
    if "gradients" in fams:
        gs = plan.gradient_settings
        lines.append(f"gradients: {gs.n_windows} windows x {gs.window} tokens, projected to "
                     f"{gs.proj_dim} dimensions, settings hash: {plan.gradients_hash}")
    columns = [("model", "<24", None, None), ("step", ">8", None, None)]
    if any(r.get("mlm_loss") is not None for r in outcome.records):  # encoders
        columns += [("MLM loss", ">9", "mlm_loss", ".3f")]
    if "embedding" in fams:
        columns += [("perplexity", ">11", "perplexity", ".2f"),
                    ("H1 bars", ">8", "h1_n_features", ".0f"),
                    ("RankMe", ">8", "rankme", ".2f")]
    if "weights" in fams:
        columns += [("loss", ">8", "loss", ".3f"), ("NP mean", ">8", "np_mean", ".4f"),
                    ("W-H0 total", ">11", "weight_h0_total", ".2f")]
    if "landscape" in fams:
        columns += [("Hess λ1", ">9", "hessian_eig_1", ".4g"),
                    ("minima", ">7", "landscape_n_minima", ".0f")]
    if "gradients" in fams:
        columns += [("G-H0 total", ">11", "grad_h0_total_persistence", ".4g"),
                    ("|grad|", ">8", "grad_norm_mean", ".3g")]
    ok = outcome.records
    if ok:
        shown = ok
        if len(ok) > 8:  # each model's first and last checkpoint
            by_label: dict[str, list[dict]] = {}
            for r in ok:
                by_label.setdefault(r["model_label"], []).append(r)
            shown = [r for recs in by_label.values()
                     for r in (recs[:1] + recs[-1:] if len(recs) > 1 else recs)]
            lines.append(f"(first and last checkpoint of each model; all {len(ok)} in the "
                         "results)")
        lines.append(" ".join(format(name, spec) for name, spec, _, _ in columns))
        for r in shown:
            cells = [format(r["model_label"][:24], "<24"), format(str(r["step"]), ">8")]
            for _, spec, key, fmt in columns[2:]:
                value = r.get(key, (r.get("features") or {}).get(key))
                cells.append(format(_fmt(value, fmt), spec))
            lines.append(" ".join(cells))
    lines.append(f"results: {data / 'all_results.json'}  (next: {analyze} "
                 f"--results {out_dir})")
    if outcome.failures:
        lines.append(f"FAILED ({len(outcome.failures)}):")
        for f in outcome.failures:
            lines.append(f"  {f['model_label']} step {f['step']} [{f['family']}]: "
                         f"{f['error_type']}: {f['error'].splitlines()[0][:200]}")
    return lines


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"
