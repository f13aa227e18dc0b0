"""Aggregates that reflect their records: what the analysis checks before it reads them.

A run rewrites the aggregates (``data/all_results.json``, ``data/<label>_results.json``)
from the records before its first task, after a failure and once at the end, also when it
is stopped by Ctrl-C or SIGTERM. A run stopped harder (SIGKILL, the out-of-memory killer,
a power cut, a second signal during that last rewrite) leaves records it finished that the
aggregates do not list; a folder copied or edited by hand may hold anything.

:func:`rebuild_if_stale` finds such aggregates cheaply (a record file newer than
``all_results.json``, a record of the study's models and settings hashes without an entry,
an entry without a record, or no ``all_results.json`` at all) and then rebuilds the entries
from the study's finished records, with the run's own code
(:meth:`toposig.run.study.Study.other_entries`,
:func:`toposig.families.registry.merge_family_records`,
:meth:`toposig.run.store.ResultStore.write_aggregates`); it writes only when they differ
from what the file holds, and says so in one warning.

:func:`read_aggregate` reads ``all_results.json`` as input that may be damaged or hostile:
anything but a JSON list of objects, each with a ``model_label`` and a ``step``, is refused
with an error that names the file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from toposig.families.registry import merge_family_records, relate_checkpoints
from toposig.files.atomic import clean_floats, read_json
from toposig.files.names import UnsafeNameError, check_label
from toposig.records import entry_problem, record_stem
from toposig.run.store import ArraysReader, DamagedResultsError, ResultStore
from toposig.run.study import Study, StudyMismatchError

logger = logging.getLogger(__name__)

AGGREGATE = "all_results.json"
_REWRITE = ("rerun the command that wrote the folder to rewrite it (a run keeps its records and "
            "rewrites the aggregates from them)")
_RESTORE = ("restore it from a copy: it says which study the records belong to, and a run "
            "refuses a folder whose study it cannot read")


_JSON_TYPES = {"dict": "object", "list": "list", "str": "string", "int": "integer",
               "float": "number", "bool": "boolean", "NoneType": "null"}


def _a(obj: object) -> str:
    """``obj``'s JSON type with its article: "a list", "an object", "a null"."""
    name = _JSON_TYPES.get(type(obj).__name__, type(obj).__name__)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def aggregate_path(results_dir: str | Path) -> Path:
    """Where a results folder's aggregate of every checkpoint is: ``data/all_results.json``."""
    return Path(results_dir) / "data" / AGGREGATE


def _read(path: Path, what: str, fix: str):
    """The JSON of ``path``, or :class:`DamagedResultsError` naming it and ``fix`` (a
    folder, a dangling link or a device where the file belongs is refused unopened)."""
    if not path.is_file():
        kind = "folder" if path.is_dir() else "link" if path.is_symlink() else "special file"
        raise DamagedResultsError(f"{path}: is a {kind}, not {what}; {fix}")
    try:
        return read_json(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DamagedResultsError(f"{path}: is not readable JSON ({type(exc).__name__}: "
                                  f"{exc}); {fix}") from None


def _entry_name(entry: object) -> str:
    """`` (label step N)`` of an entry, as far as it says, for error messages."""
    if not isinstance(entry, dict):
        return ""
    return f" ({entry.get('model_label', '?')} step {entry.get('step', '?')})"


def read_aggregate(path: str | Path) -> list[dict]:
    """The entries of an aggregate file (``data/all_results.json``), checked.

    Raises:
        DamagedResultsError: the file is not a regular file, not JSON, not a list, or an
            entry is not a sound record (:func:`toposig.records.entry_problem`, the
            definition :class:`toposig.records.Record` reads by), has a model label that
            cannot name files (:func:`toposig.files.names.check_label`) or repeats another
            entry's model and step; the message names the file and the entry.
    """
    path = Path(path)
    entries = _read(path, "the aggregate of the folder's checkpoints", _REWRITE)
    if not isinstance(entries, list):
        raise DamagedResultsError(f"{path}: holds {_a(entries)}, not a "
                                  f"list of checkpoint entries; {_REWRITE}")
    seen: dict[tuple[str, int | None], int] = {}
    for i, entry in enumerate(entries):
        problem = entry_problem(entry)
        if not problem:
            try:
                check_label(entry["model_label"])
            except UnsafeNameError as exc:
                problem = f"cannot be read: {exc}"
        key = (entry["model_label"], entry["step"]) if not problem else None
        if key in seen:
            problem = f"repeats the checkpoint of entry {seen[key]}"
        if problem:
            raise DamagedResultsError(f"{path}: entry {i}{_entry_name(entry)} {problem}; "
                                      f"{_REWRITE}")
        seen[key] = i  # type: ignore[index]
    return entries


def read_study(results_dir: str | Path) -> Study:
    """A results folder's study for the analysis (:meth:`toposig.run.study.Study.load`):
    a sound study or an import's; ``held`` is false when there is no ``config.json``.

    Raises:
        DamagedResultsError: the study cannot be loaded (a link, a folder, not JSON, not an
            object with a ``models`` mapping, wrong types); the message starts with the
            file's path.
    """
    try:
        return Study.load(results_dir, way_out=_RESTORE)
    except StudyMismatchError as exc:
        raise DamagedResultsError(str(exc)) from None


def _record_files(study: Study) -> dict[tuple[str, str], int]:
    """``(label, stem)`` -> newest modification time (ns) of the study's record files
    (:meth:`toposig.run.study.Study.record_files`, as the run finds them)."""
    out: dict[tuple[str, str], int] = {}
    for _, _, label, path in study.record_files():
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            continue
        key = (label, path.stem)
        out[key] = max(out.get(key, mtime), mtime)
    return out


def stale_reason(study: Study, entries: list[dict] | None) -> str | None:
    """Why the aggregate may not reflect the study's records, or ``None``: a cheap test on
    file names and times; the records themselves are read only when it answers.

    Args:
        study: the results folder's study (:func:`read_study`).
        entries: what ``data/all_results.json`` holds (:func:`read_aggregate`), ``None``
            when there is no such file.
    """
    root = study.folder
    if entries is None:
        return f"there is no {aggregate_path(root)}"
    files = _record_files(study)
    written = aggregate_path(root).stat().st_mtime_ns
    newer = sorted(k for k, t in files.items() if t > written)
    if newer:
        return (f"{len(newer)} checkpoint(s)' records are newer than it "
                f"(first: {newer[0][0]} {newer[0][1]})")
    listed = {(e["model_label"], record_stem(e["step"])) for e in entries}
    unlisted = sorted(files.keys() - listed)
    if unlisted:
        return (f"{len(unlisted)} checkpoint(s) with records have no entry "
                f"(first: {unlisted[0][0]} {unlisted[0][1]})")
    orphans = sorted(listed - files.keys())
    if orphans:
        return (f"{len(orphans)} entr(ies) have no record (first: {orphans[0][0]} "
                f"{orphans[0][1]})")
    return None


def study_entries(study: Study) -> list[dict]:
    """The aggregate entries of the study's finished, sound records (whole arrays), one per
    checkpoint with its families merged, in the study's order: what a run's last rewrite of
    the aggregates writes for them."""
    others = study.other_entries(covered=set())
    entries = [e for records in others.values() if (e := merge_family_records(records))]
    relate_checkpoints(entries, ArraysReader(study.folder))
    entries.sort(key=study.entry_order())
    return entries


def rebuild_if_stale(results_dir: str | Path) -> bool:
    """Rebuild a run's aggregates from its records when they do not reflect them.

    Folders without ``data/config.json``, imports (whose records are their tables) and
    studies without a settings hash are left alone. When :func:`stale_reason` answers,
    the entries are rebuilt from the study's finished records (:func:`study_entries`) and
    the aggregate files and ``config.json`` (unchanged) written, with a warning naming
    the folder and the reason, unless they equal what ``all_results.json`` holds; a
    folder with no ``all_results.json`` at all (one committed or shared with its records
    alone, as ``results/seed004``) gets its aggregates written with an info message. Call it
    while holding the folder's lock (:func:`toposig.files.locks.exclusive`).

    Returns:
        Whether the aggregates were rewritten.

    Raises:
        DamagedResultsError: ``config.json`` or ``all_results.json`` is damaged
            (:func:`read_study`, :func:`read_aggregate`), or a folder on the way to the
            aggregates is a link.
    """
    root = Path(results_dir)
    study = read_study(root)
    if not study.held or study.imported:
        return False
    hashes = study.hashes
    if not hashes:
        return False
    path = aggregate_path(root)
    current = read_aggregate(path) if (path.exists() or path.is_symlink()) else None
    reason = stale_reason(study, current)
    if reason is None:
        return False
    entries = study_entries(study)
    if current is None and not entries:
        return False  # nothing finished: the analysis says so
    if current is not None and json.loads(json.dumps(clean_floats(entries))) == current:
        logger.debug("%s: %s, but its entries are those of the records", path, reason)
        return False
    ResultStore(root, next(iter(hashes.values()))).write_aggregates(entries, study.config)
    if current is None:  # a folder shipped with its records alone: the normal way to read it
        logger.info("%s written from the finished records of the study in %s (%d "
                    "checkpoint(s))", path, root, len(entries))
    else:
        logger.warning("%s did not reflect the finished records of the study in %s (%s): "
                       "the aggregates were rebuilt from the records (%d checkpoint(s))",
                       path, root, reason, len(entries))
    return True
