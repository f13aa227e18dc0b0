"""The stage driver: run a checked plan (:mod:`toposig.run.plan`) into a results folder.

:func:`execute` walks the plan's checkpoints. Each checkpoint is loaded once for the
signature families it needs (``embedding``: hidden states and perplexity; ``weights``:
neural persistence and weight-row homology; the landscape and gradient probes), each
family's record is written to its own store (keyed by that family's settings hash, so
each resumes on its own) the moment it is done, failures are recorded and the run goes
on. The per-checkpoint records are the durable state; the aggregate files (one entry per
checkpoint of the folder's study, its families merged) are derived from them, written
when the run starts (so a run killed before it could write them rebuilds them), after a
recorded failure and when it ends, normally or not, so a run's bookkeeping grows
linearly with its checkpoints.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from toposig.families import registry
from toposig.families.registry import merge_family_records, relate_checkpoints
from toposig.files.locks import exclusive
from toposig.model.placement import Placement
from toposig.progress import tqdm
from toposig.records import (
    SCHEMA_VERSION,
    CheckpointOutput,
    Family,
    Record,
    now_iso,
    record_family,
    record_header,
)
from toposig.run.estimate import RunOutline, measured_seconds
from toposig.run.executors import Executor, SerialExecutor
from toposig.run.plan import RunPlan
from toposig.run.store import (
    ArraysReader,
    DamagedResultsError,
    ResultStore,
    remove_stale_temporaries,
)
from toposig.run.study import Study, StudyMismatchError, elsewhere, merge_study
from toposig.run.tasks import Task, TaskFailure
from toposig.sources import reload
from toposig.sources.checkpoints import Checkpoint, checkpoint_identity
from toposig.version import __version__

logger = logging.getLogger(__name__)

VERSIONED_PACKAGES = ("torch", "transformers", "huggingface_hub", "numpy", "scipy",
                      "scikit-learn", "ripser", "giotto-ph", "gudhi", "persim")


@dataclass
class RunOutcome:
    """What a run did.

    Attributes:
        records: the aggregate entries it wrote (``data/all_results.json``), as JSON.
        entries: the same, typed (:class:`toposig.records.Record`, views of ``records``).
        computed, skipped: checkpoints measured, and found already measured.
        failures: the failure records of the checkpoints that failed.
        wall_s: its wall time.
        config: the ``data/config.json`` it wrote.
    """

    records: list[dict]
    entries: list[Record] = field(default_factory=list)
    computed: int = 0
    skipped: int = 0
    failures: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    config: dict = field(default_factory=dict)


def failure_record(ckpt: Checkpoint, exc: BaseException, family: Family) -> dict:
    """A record of a checkpoint that could not be analysed, with the reason."""
    failure = TaskFailure.from_exception(exc)
    return {
        **record_header(family, checkpoint_identity(ckpt), status="failed"),
        "error_type": failure.error_type,
        "error": failure.message,
        "traceback": failure.traceback_text,
        "finished_at": now_iso(),
    }


def package_versions() -> dict[str, str | None]:
    """Versions of toposig (from the package, installed or in a checkout) and of the
    packages whose versions change the numbers (``None``: not installed); a new dict."""
    return dict(_package_versions())


@functools.cache
def _package_versions() -> dict[str, str | None]:
    """Read once per process: the installed packages do not change under a running
    process, and reading their metadata at every refresh of ``config.json`` cost a live
    measurement about 15 ms."""
    out: dict[str, str | None] = {"toposig": __version__}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_config(plan: RunPlan, outcome: RunOutcome, started: str,
               previous: Mapping[str, Any] | None = None) -> dict:
    """The results folder's ``config.json``: the study (settings, inputs, models, steps,
    timings per checkpoint from every record) and the last run that wrote records.

    Args:
        plan, outcome: this run, as far as it has got; ``outcome.records`` are the
            aggregate entries of the whole study.
        started: when this run started (ISO 8601, UTC).
        previous: the folder's config.json before this run: its study is widened with
            this run's (:func:`toposig.run.study.merge_study`) and, when this run has written
            no record yet, its ``last_run`` is kept.
    """
    series: dict[str, list] = {}
    for c in plan.checkpoints:
        series.setdefault(c.label, []).append(c.step)
    config: dict = {"schema_version": SCHEMA_VERSION, "signatures": plan.all_families,
                    "run_settings": plan.settings.to_dict()}
    fields: dict = {}  # what each family keeps besides its settings and hash
    for cls in registry.families():  # a family this run does not compute: nothing of it
        h = plan.hash_of(cls.name)
        family = plan.settings_of(cls.name) if h is not None else None
        config[cls.settings_key] = family.to_dict() if family is not None else None
        config[cls.hash_key] = h
        if family is not None:
            fields |= family.study_fields(plan.inputs, plan.dtype)
        else:  # none of its own, unless a family the run computes shares the key
            fields |= {k: None for k in cls.study_keys if k not in fields}
    config |= {**fields, "models": plan.models, "model_sources": plan.sources,
               "steps": series, "training_suite": plan.suite}
    config = merge_study(previous, config)
    entries = outcome.entries
    config["n_checkpoints"] = len(entries)
    config["timings_s"] = {f"mean_{cls.name}_per_checkpoint": cls.mean_time(entries)
                           for cls in registry.families()}
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
        "device_name": plan.placement.description(),
        "dtype": plan.dtype,
        "ph_backend": plan.ph_backend,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
    }
    return config


def execute(plan: RunPlan, out_dir: str | Path, force: bool = False,
            progress: bool = True, executor: Executor | None = None, *,
            extend: bool = False, refresh_first: bool = True,
            study: Study | None = None,
            announce: Callable[[RunOutline], None] | None = None) -> RunOutcome:
    """Analyse every checkpoint of the plan, resuming from finished records.

    ``out_dir`` holds one study (:mod:`toposig.run.study`): a plan that brings a model the
    folder's study does not hold (unless ``extend``) or another settings hash for one of
    its families is refused before any work. The checkpoints (and families) without a
    finished record become tasks for ``executor`` (default:
    :class:`~toposig.run.executors.SerialExecutor`). Each family's record is written
    atomically the moment its result arrives; a family that failed is recorded as such
    and the run goes on. The aggregates, one entry per checkpoint of the whole study
    (this plan's and the finished records of the study's other checkpoints and
    families), are rebuilt from the records before the first task (a killed run's are
    stale), after a recorded failure, and once at the end, also when the run is
    interrupted or raises (``refresh_first=False`` skips the rebuild before the first task:
    for a caller that runs one checkpoint at a time and knows its last call rebuilt
    them, as the live monitor does). The whole run holds ``out_dir``'s lock
    (:mod:`toposig.files.locks`) and first removes the temporaries a killed run left there.

    The folder's study is read and the plan joins it here (:meth:`RunPlan.join`), once;
    a caller that did both itself while holding the folder's lock (the command line
    before it trains a ``--preset`` suite) passes the ``study`` it read, and it is not
    read again. ``announce`` is given the run's shape (:func:`outline`'s) once the
    finished records are read, before the first task.

    Raises:
        FolderLockedError: another process is writing to ``out_dir``.
        StudyMismatchError: the plan does not belong to ``out_dir``'s study.
    """
    with exclusive(out_dir, "results folder"):
        if study is None:
            study = Study.load(out_dir)
            plan.join(study, extend=extend)
        remove_stale_temporaries(out_dir)
        try:
            return _execute(plan, study, force, progress, executor, refresh_first,
                            announce)
        finally:
            reload.forget()  # a series' model is kept for this run's checkpoints only


@dataclass
class _Pending:
    """What a plan leaves to compute in a results folder, read from its records."""

    study: Study  # the folder's study as this run will leave it
    stores: dict[Family, ResultStore]
    finished: list[dict[str, dict]]  # per checkpoint: family -> its finished record
    tasks: list[Task]  # the checkpoints with a family to compute
    replaced: int = 0  # finished records made from checkpoint files changed since
    changed: set[str] = field(default_factory=set)  # the labels of those checkpoints


def _pending(plan: RunPlan, held: Study, force: bool) -> _Pending:
    """Read the finished records of ``held``'s folder for the plan's checkpoints (and
    the study's other families, merged too); writes nothing."""
    previous = held.config if held.held else None
    study = Study(held.folder, merge_study(previous, {
        "models": plan.models, "signatures": plan.all_families, "steps": {},
        **{registry.get(f).hash_key: h for f, h in plan.hashes.items()}}))
    stores = {f: ResultStore(held.folder, h, f) for f, h in study.hashes.items()}
    pending = _Pending(study, stores, [], [])
    for i, ckpt in enumerate(plan.checkpoints):
        families = plan.families_of(i)
        done_here = {}
        for fam, store in stores.items():  # the study's other families are merged too
            if force and fam in families:
                continue
            rec, stale = store.lookup(ckpt)
            if rec is not None:
                done_here[fam] = rec
            elif stale and fam in families:
                pending.replaced += 1
                pending.changed.add(ckpt.label)
        pending.finished.append(done_here)
        todo = tuple(f for f in families if f not in done_here)
        if todo:
            pending.tasks.append(Task(i, ckpt, todo))
    return pending


def _outline(plan: RunPlan, pending: _Pending, out_dir: str | Path) -> RunOutline:
    """The run's shape (:mod:`toposig.run.estimate`) from what is pending."""
    checkpoints: dict[str, int] = {}
    families: dict[str, int] = {}
    for i, ckpt in enumerate(plan.checkpoints):
        checkpoints[ckpt.label] = checkpoints.get(ckpt.label, 0) + 1
        for fam in plan.families_of(i):
            families[fam] = families.get(fam, 0) + 1
    todo = dict.fromkeys(families, 0)
    for task in pending.tasks:
        for fam in task.todo:
            todo[fam] += 1
    done: dict[str, list[dict]] = {}
    for i, here in enumerate(pending.finished):
        for fam in plan.families_of(i):
            if fam in here:
                done.setdefault(fam, []).append(here[fam])
    return RunOutline(checkpoints, families, todo, measured_seconds(done), str(out_dir))


def outline(plan: RunPlan, out_dir: str | Path, *, force: bool = False,
            extend: bool = False) -> RunOutline:
    """What :func:`execute` would do with the plan in ``out_dir``, without doing it
    (``toposig run --dry-run``): the folder's study and records are read, not locked,
    and nothing is written (a folder that does not exist stays so).

    Raises:
        StudyMismatchError: the plan does not belong to ``out_dir``'s study.
    """
    study = Study.load(out_dir)
    plan.join(study, extend=extend)
    return _outline(plan, _pending(plan, study, force), out_dir)


def _execute(plan: RunPlan, held: Study, force: bool, progress: bool,
             executor: Executor | None, refresh_first: bool,
             announce: Callable[[RunOutline], None] | None = None) -> RunOutcome:
    """:func:`execute` once the results folder is locked, checked and cleaned; ``held``
    is the folder's study before this run."""
    out_dir = held.folder
    previous = held.config if held.held else None
    pending = _pending(plan, held, force)
    study, stores, finished, tasks = (pending.study, pending.stores, pending.finished,
                                      pending.tasks)
    replaced, changed = pending.replaced, pending.changed
    if announce is not None:
        announce(_outline(plan, pending, out_dir))
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    outcome = RunOutcome(records=[])
    outcome.skipped = len(plan.checkpoints) - len(tasks)
    others = study.other_entries({(c.label, c.name) for c in plan.checkpoints})
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
    order = study.entry_order()
    series = SeriesIdentities(out_dir)
    for records in [*finished, *others.values()]:
        for rec in records.values():
            series.note(rec)

    arrays = ArraysReader(out_dir)

    def refresh() -> None:
        entries = [e for f in finished if (e := merge_family_records(f)) is not None]
        entries += [e for f in others.values() if (e := merge_family_records(f))]
        relate_checkpoints(entries, arrays)  # the drift's features, model by model
        entries.sort(key=order)  # the study's order, whatever the command line's
        outcome.records = entries
        # views of the merged JSON, not copies: nothing changes an entry once merged
        outcome.entries = [Record.from_json(e, where="the run's merged entry",
                                            copy_json=False) for e in entries]
        outcome.wall_s = time.perf_counter() - t0
        outcome.config = run_config(plan, outcome, started, previous)
        if stores:  # a plan with no checkpoint has nothing to aggregate
            next(iter(stores.values())).write_aggregates(outcome.records, outcome.config)

    bar = tqdm(total=len(plan.checkpoints), initial=outcome.skipped, desc="checkpoints",
               unit="ckpt", disable=not progress)

    def emit(task: Task, family: str, result: CheckpointOutput | BaseException) -> None:
        if not isinstance(result, BaseException):
            series.check(result.record, task.ckpt)  # before anything of it is written
        _store_result(stores, task.ckpt, finished[task.index], outcome, plan.placement, family,
                      result)
        if isinstance(result, BaseException):
            refresh()

    def done(task: Task) -> None:
        outcome.computed += 1
        bar.set_postfix_str(f"{task.ckpt.label} {task.ckpt.name}")
        bar.update(1)

    if tasks and refresh_first:
        refresh()
    try:
        (executor or SerialExecutor()).run(tasks, plan, emit, done)
    finally:
        bar.close()
        refresh()
    return outcome


class SeriesIdentities:
    """What each series of a results folder is: its architecture (``model_type``) and
    parameter count, as its finished records give them. A checkpoint whose record says
    otherwise is another model placed where the series was (a folder reused for another
    training, a file swapped): its records would be appended to a series they do not
    belong to, so the run is refused before the record is written."""

    def __init__(self, out_dir: str | Path):
        self.out_dir = out_dir
        self._held: dict[str, dict[str, tuple[object, str]]] = {}

    def note(self, record: dict) -> None:
        """Take what ``record`` says of its series where nothing is known yet."""
        held = self._held.setdefault(str(record.get("model_label")), {})
        where = f"step {record.get('step')}"
        for key, value in _identity(record).items():
            held.setdefault(key, (value, where))

    def check(self, record: dict, ckpt: Checkpoint) -> None:
        """Refuse ``record`` when it contradicts its series, else note it.

        Raises:
            StudyMismatchError: naming both values and where each comes from.
        """
        held = self._held.get(ckpt.label, {})
        for key, value in _identity(record).items():
            if key in held and held[key][0] != value:
                there, where = held[key]
                raise StudyMismatchError(
                    f"{ckpt.describe()} has {key} {value!r}, but the series "
                    f"{ckpt.label!r} in {self.out_dir} has {there!r} ({where}): another "
                    "model is at this series' path, and its records would be appended to "
                    f"the old series. Nothing of it was written. {elsewhere(self.out_dir)}"
                    "; or move the old model's records away (records/*/"
                    f"{ckpt.label}) to start the series afresh")
        self.note(record)


def _identity(record: dict) -> dict[str, object]:
    """The fields of a record that a series keeps at every checkpoint, compared family by
    family (each family counts parameters its own way: a loaded model's, a state dict's)."""
    try:
        family = record_family(record)
    except ValueError:
        return {}
    return {f"{k} ({family})": record[k] for k in ("model_type", "num_parameters")
            if record.get(k) is not None}


def _store_result(stores: dict[str, ResultStore], ckpt: Checkpoint, finished: dict[str, dict],
                  outcome: RunOutcome, placement: Placement, family: str,
                  result: CheckpointOutput | BaseException) -> None:
    """Write one family's record (or its failure) the moment it is done. A record that
    cannot be written where it belongs (a folder or a link planted there) is a failure of
    that checkpoint, reported, not the end of the run."""
    if not isinstance(result, BaseException):
        try:
            finished[family] = stores[family].write(result.record, ckpt, result.arrays)
            return
        except DamagedResultsError as exc:
            result = exc
    failure = failure_record(ckpt, result, family)
    with contextlib.suppress(DamagedResultsError):  # if so, reported below, not stored
        failure = stores[family].write(failure, ckpt)
    outcome.failures.append(failure)
    logger.error("%s: %s failed: %s: %s", ckpt.describe(), family,
                 failure["error_type"], failure["error"])
    placement.free_memory()


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
    lines += [plan.settings_of(f).describe(plan.hash_of(f), plan.inputs) for f in fams]
    ok = outcome.entries
    columns = [("model", "<24", None, None), ("step", ">8", None, None)]
    columns += [(c.header, c.width, c.key, c.number) for f in fams
                for c in registry.get(f).summary_columns(ok)]
    if ok:
        shown = ok
        if len(ok) > 8:  # each model's first and last checkpoint
            by_label: dict[str, list[Record]] = {}
            for r in ok:
                by_label.setdefault(r.model_label, []).append(r)
            shown = [r for recs in by_label.values()
                     for r in (recs[:1] + recs[-1:] if len(recs) > 1 else recs)]
            lines.append(f"(first and last checkpoint of each model; all {len(ok)} in the "
                         "results)")
        lines.append(" ".join(format(name, spec) for name, spec, _, _ in columns))
        for r in shown:
            cells = [format(r.model_label[:24], "<24"), format(str(r.step), ">8")]
            for _, spec, key, fmt in columns[2:]:
                value = r.measure(key)  # a quality (top level), else a feature
                value = r.features.get(key) if value is None else value
                cells.append(format(_fmt(value, fmt), spec))
            lines.append(" ".join(cells))
    lines.append(f"results: {data / 'all_results.json'}  (next: {analyze} "
                 f"--out {out_dir})")
    if outcome.failures:
        lines.append(f"FAILED ({len(outcome.failures)}):")
        for f in outcome.failures:
            lines.append(f"  {f['model_label']} step {f['step']} [{f['family']}]: "
                         f"{f['error_type']}: {f['error'].splitlines()[0][:200]}")
    return lines


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"
