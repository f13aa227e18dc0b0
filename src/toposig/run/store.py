"""Per-checkpoint records on disk: atomic writes, resume, failures, aggregate files.

Layout under the results root (``--out``, default ``results/``)::

    records/<settings_hash>/<model_label>/step000100.json   one record per checkpoint
    records/<settings_hash>/<model_label>/step000100.npz    its diagrams (layer<L>_h<q>)
    data/all_results.json        one entry per checkpoint of the folder's study
    data/<model_label>_results.json
    data/config.json             the study (settings, models, steps) and its last run

A record's JSON is written after its arrays, each to a temporary file renamed into
place, so a record that exists is complete and a killed run loses nothing it finished.
A record with ``"status": "failed"`` holds the error; it is retried on the next run.
Reads are validated: a record that is not a JSON object, or arrays that are not a whole
``.npz`` archive (damaged by hand, a full disk or a copy cut short), count as missing and
are recomputed, with a warning naming the file.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from toposig.families.registry import missing_features
from toposig.files.atomic import (
    LinkedFolderError,
    atomic_write_bytes,
    atomic_write_json,
    clean_floats,
    make_folder,
    read_json,
    remove_file,
)
from toposig.files.names import check_label, check_name
from toposig.records import (
    Family,
    Record,
    RecordError,
    arrays_file_problem,
    entry_problem,
)
from toposig.sources.checkpoints import Checkpoint, fingerprint

__all__ = ["ResultStore", "atomic_write_bytes", "atomic_write_json", "clean_floats",
           "read_json", "load_arrays", "arrays_damage", "remove_stale_temporaries",
           "DamagedResultsError"]

logger = logging.getLogger(__name__)
# the temporary files atomic_write_bytes makes: .<name>.<random characters>.tmp
_TEMPORARY = re.compile(r"\.[^/]+\.[A-Za-z0-9_]+\.tmp")


class ResultStore:
    """Records of one settings hash under one results root."""

    def __init__(self, root: str | Path, settings_hash: str, family: Family | None = None):
        self.root = Path(root)
        self.settings_hash = check_name(settings_hash, "settings hash")
        self.family = family
        self.records_dir = self.root / "records" / settings_hash
        self.data_dir = self.root / "data"

    def record_path(self, ckpt: Checkpoint) -> Path:
        return self.records_dir / ckpt.label / f"{ckpt.name}.json"

    def arrays_path(self, ckpt: Checkpoint) -> Path:
        return self.record_path(ckpt).with_suffix(".npz")

    def load(self, ckpt: Checkpoint) -> dict | None:
        """The stored record of ``ckpt``, or ``None``. A file that cannot be read, or whose
        content is not a sound record of this place
        (:func:`toposig.records.entry_problem`: types, model label, step, family), counts
        as none and is recomputed, with a warning naming it; so does a folder or link
        where the file should be."""
        path = self.record_path(ckpt)
        if not (path.exists() or path.is_symlink()):
            return None
        if path.is_symlink() or not path.is_file():
            logger.warning("ignoring %s: it is a %s, not a record file (it will be replaced "
                           "by the recomputed record)", path,
                           "link" if path.is_symlink() else "folder")
            return None
        try:
            rec = read_json(path)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            logger.warning("ignoring unreadable record %s (it will be recomputed): %s", path,
                           exc)
            return None
        problem = entry_problem(rec, family=self.family, label=ckpt.label, stem=ckpt.name,
                                arrays_file=self.arrays_file(ckpt))
        if problem:
            logger.warning("ignoring record %s: it %s (it will be recomputed)", path, problem)
            return None
        return rec

    def arrays_file(self, ckpt: Checkpoint) -> str:
        """Where ``ckpt``'s arrays belong, relative to the results root (as records
        name it)."""
        return str(self.arrays_path(ckpt).relative_to(self.root))

    def finished(self, ckpt: Checkpoint) -> dict | None:
        """The record of ``ckpt`` if it is finished and still current, else ``None``
        (:meth:`lookup`)."""
        return self.lookup(ckpt)[0]

    def lookup(self, ckpt: Checkpoint) -> tuple[dict | None, bool]:
        """``(record, stale)`` of ``ckpt``, reading its record once.

        ``record``: the record if it is finished (status ok, its arrays whole) and current
        (the checkpoint's files unchanged since, and it holds every feature its family
        computes today: :func:`toposig.families.registry.missing_features`), else ``None``.
        ``stale``: a finished record exists but was made from other files (a local
        checkpoint retrained or replaced in place).
        """
        rec = self.load(ckpt)  # sound, or None
        typed = Record.from_json(rec, copy_json=False) if rec else None
        if typed is None or not typed.ok:
            return None, False
        try:
            missing = missing_features(rec)
        except ValueError:  # an unknown family: not a record of this study's families
            return None, False
        if missing:
            logger.info("%s: its record predates %s; analysing it again", ckpt.describe(),
                        ", ".join(missing))
            return None, False
        stale = typed.checkpoint.fingerprint != fingerprint(ckpt)
        damage = arrays_damage(self.arrays_path(ckpt))
        if damage:
            logger.warning("%s: %s; the checkpoint is analysed again", self.arrays_path(ckpt),
                           damage)
            return None, stale
        if stale:
            logger.info("%s changed since its record was written: analysing it again",
                        ckpt.describe())
            return None, True
        return rec, False

    def write(self, record: dict, ckpt: Checkpoint, arrays: dict[str, np.ndarray] | None = None):
        """Write a record (and its arrays first). Returns the record as stored.

        Raises:
            DamagedResultsError: a folder where the record belongs, or a link or a file
                where one of its folders belongs (nothing is written through it).
        """
        try:
            return self._write(record, ckpt, arrays)
        except LinkedFolderError as exc:
            raise DamagedResultsError(str(exc)) from None

    def _write(self, record: dict, ckpt: Checkpoint,
               arrays: dict[str, np.ndarray] | None) -> dict:
        record = dict(record, settings_hash=self.settings_hash)
        path = self.record_path(ckpt)
        check_label(ckpt.label, "model label")
        make_folder(self.root, path.parent)
        if path.is_dir() and not path.is_symlink():  # a folder where the record belongs
            raise DamagedResultsError(
                f"{path} is a folder where the record of {ckpt.describe()} belongs; "
                "remove it (toposig does not delete folders it did not make)")
        if arrays is not None:
            buf = io.BytesIO()
            np.savez_compressed(buf, **arrays)
            atomic_write_bytes(self.arrays_path(ckpt), buf.getvalue(), root=self.root)
            record["arrays_file"] = self.arrays_file(ckpt)
        atomic_write_json(path, record, root=self.root, compact=True)
        return record

    def write_aggregates(self, records: list[dict], config: Mapping[str, Any]) -> None:
        """The seed's aggregate files from the finished (status ok) records, each a sound
        :class:`toposig.records.Record` (checked before anything is written).

        Raises:
            RecordError: an entry is not sound (a bug: the run made it).
        """
        ok = [r for r in records if r.get("status") == "ok"]
        for r in ok:
            problem = entry_problem(r)
            if problem:
                raise RecordError(f"the run made an unsound entry for "
                                  f"{r.get('model_label')} step {r.get('step')}: it {problem}")
        by_label: dict[str, list[dict]] = {}
        for r in ok:
            by_label.setdefault(check_label(r["model_label"], "model label"), []).append(r)
        try:
            # read by programs (people read summary.md and the figures): compact
            atomic_write_json(self.data_dir / "all_results.json", ok, root=self.root,
                              compact=True)
            for label, recs in by_label.items():
                atomic_write_json(self.data_dir / f"{label}_results.json", recs,
                                  root=self.root, compact=True)
            atomic_write_json(self.data_dir / "config.json", config, root=self.root)
        except LinkedFolderError as exc:
            raise DamagedResultsError(str(exc)) from None


def _links_below(root: Path, path: Path) -> Path | None:
    """The first component of ``path`` below ``root`` that is a symbolic link, if any."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return current
    return None


def arrays_damage(path: Path) -> str | None:
    """Why the ``.npz`` at ``path`` cannot be used, or ``None`` when it is whole (every
    member's checksum verified)."""
    import zipfile

    if not path.is_file():
        return "missing"
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                return f"member {bad} is corrupt"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return f"not a readable .npz archive ({type(exc).__name__}: {exc})"
    return None


class DamagedResultsError(ValueError):
    """A results file that cannot be read as what it should be; the message names it."""


def load_arrays(results_root: str | Path, arrays_file: str) -> dict[str, np.ndarray]:
    """The arrays of ``arrays_file``, a record's (relative to the root:
    ``records/<hash>/<label>/<stem>.npz``, :meth:`toposig.records.Record.arrays_file`).

    Raises:
        DamagedResultsError: the name is not one a record may give, or the file is
            missing or damaged (naming it, and the fix).
    """
    problem = arrays_file_problem(str(arrays_file))
    if problem:
        raise DamagedResultsError(f"{results_root}: a record {problem}")
    path = Path(results_root) / arrays_file
    damage = arrays_damage(path)
    if damage:
        raise DamagedResultsError(f"{path}: {damage}; rerun run_experiments.py with the "
                                  "same options to recompute it")
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


class ArraysReader:
    """:func:`load_arrays` of one results root, each file read once while it is unchanged
    (keyed by its name, size and modification time): what relating a model's checkpoints
    reads at every refresh of a run's aggregates."""

    def __init__(self, results_root: str | Path) -> None:
        self.root = Path(results_root)
        self._read: dict[tuple[str, int, int], dict[str, np.ndarray]] = {}

    def __call__(self, arrays_file: str) -> dict[str, np.ndarray]:
        try:
            stat = (self.root / arrays_file).stat()
        except OSError:
            return load_arrays(self.root, arrays_file)  # it names what is wrong
        key = (str(arrays_file), stat.st_size, stat.st_mtime_ns)
        if key not in self._read:
            self._read[key] = load_arrays(self.root, arrays_file)
        return self._read[key]


def remove_stale_temporaries(root: str | Path) -> list[Path]:
    """Delete the temporaries (``.<name>.<random>.tmp``) that a killed run left under a
    results root's ``data/``, ``plots/``, ``live/<label>/`` and ``records/<hash>/<model>/``
    folders; call it only while holding the root's lock. Nothing else is touched."""
    root = Path(root)
    removed = []
    for pattern in ("data/.*.tmp", "plots/.*.tmp", "live/*/.*.tmp", "records/*/*/.*.tmp"):
        for p in root.glob(pattern):
            # never through a linked folder (someone else's files), never a link itself,
            # and only the names atomic_write_bytes gives: .<name>.<random>.tmp
            if (p.is_file() and not p.is_symlink() and _links_below(root, p) is None
                    and _TEMPORARY.fullmatch(p.name)):
                with contextlib.suppress(LinkedFolderError):  # made a link meanwhile
                    remove_file(p, root=root)
                    removed.append(p)
    if removed:
        logger.info("removed %d temporary file(s) a killed run left under %s", len(removed),
                    root)
    return removed
