"""``toposig import``: other people's measurement tables -> a results folder.

The folder has the layout a run writes, so the analysis (``analyze_results.py``,
:func:`toposig.load_results`, ``toposig backtest``, ``toposig compare``) reads it like
one the project measured:

- ``records/import-<hash>/<label>/step<NNNNNN>.json``: one record per model × step with
  its provenance (file, SHA-256, row, format), the imported features and which feature
  family each belongs to, and the file's names of renamed columns;
- ``data/all_results.json``, ``data/<label>_results.json``: the aggregate entries (the
  record's quality measures and features at the top level, as a run's entries);
- ``data/config.json``: the study (models, steps) and ``imported`` (format, files and
  their SHA-256), so a later ``run`` into the folder is refused.

``<hash>`` is a hash of the import's inputs (formats and file contents), so importing the
same files again rewrites the same bytes, and importing other files into a folder that
holds an import is refused. For a quality given as perplexity only, ``mean_nll`` =
ln(perplexity) is added (the loss in nats), and the record lists it under ``derived``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from toposig.families import registry
from toposig.families.base import FeatureGroup
from toposig.files.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    many_files,
    remove_empty_folder,
    remove_file,
    sync_all,
)
from toposig.files.locks import exclusive
from toposig.records import SCHEMA_VERSION
from toposig.run.store import remove_stale_temporaries
from toposig.run.study import Study, StudyMismatchError
from toposig.sources.imports import ImportedRow

logger = logging.getLogger(__name__)


def import_digest(rows: Sequence[ImportedRow], quality: dict | None = None,
                  parameters: Mapping[str, int] | None = None) -> str:
    """12 hex digits of SHA-256 over the imported files' (format, SHA-256), sorted, the
    declared quality measure, if any, and the parameter counts given with ``--params``,
    if any."""
    sources = sorted({(r.provenance.format, r.provenance.sha256) for r in rows})
    key: object = sources if quality is None else [sources, quality]
    if parameters:
        key = [key, {"num_parameters": dict(sorted(parameters.items()))}]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


Classify = Callable[[str], FeatureGroup]


def _what_differs(held: Mapping, config: Mapping) -> str:
    """How an import into a folder that holds another differs from it, in words: the
    files, ``--target``, ``--params``."""
    old, new = held.get("imported") or {}, config["imported"]
    shas = ({f.get("sha256") for f in old.get("files") or [] if isinstance(f, dict)},
            {f["sha256"] for f in new["files"]})
    parts = ["other files" if shas[0] != shas[1] else "the same file(s)"]
    if old.get("quality") != new.get("quality"):
        given = [(q or {}).get("column") if isinstance(q, dict) else None
                 for q in (old.get("quality"), new.get("quality"))]
        parts.append(f"with --target {given[0] or '(none)'}, this import "
                     f"{given[1] or '(none)'}")
    if old.get("num_parameters") != new.get("num_parameters"):
        parts.append("with other --params")
    return ", ".join(parts)


def remove_killed_import(out: Path, digest: str) -> list[Path]:
    """Remove what an import killed before it wrote ``data/config.json`` left in ``out``:
    the records of other imports (``records/import-<other hash>/<label>/step*.json``) and
    the ``data/<label>_results.json`` copies that hold their entries, nothing else; called
    with the folder's lock held when ``out`` holds no study. Returns what was removed.

    Raises:
        StudyMismatchError: ``out`` holds a run's records (``records/<settings hash>/``)
            without a study: an import goes into a folder of its own.
    """
    removed: list[Path] = []
    records = out / "records"
    folders = sorted(p for p in records.iterdir() if p.is_dir() and not p.is_symlink()) \
        if records.is_dir() and not records.is_symlink() else []
    runs = [p.name for p in folders if not p.name.startswith("import-")]
    if runs:
        raise StudyMismatchError(
            f"{out} holds records of a run (records/{runs[0]}) but no data/config.json "
            "(a run killed before it wrote its aggregates?); import into a folder of its "
            "own (--out)")
    stale = {p.name for p in folders if p.name != f"import-{digest}"}
    for folder in (p for p in folders if p.name in stale):
        for label in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
            for record in sorted(label.iterdir()):
                if record.is_file() and re.fullmatch(r"step\d+\.json|\..+\.tmp", record.name):
                    remove_file(record, root=out)
                    removed.append(record)
            remove_empty_folder(label, root=out)
        remove_empty_folder(folder, root=out)
    data = out / "data"
    for copy in sorted(data.glob("*_results.json")) if stale and data.is_dir() else []:
        if copy.is_symlink() or not copy.is_file():  # a FIFO would block the read
            continue
        try:
            entries = json.loads(copy.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if (isinstance(entries, list) and entries and all(
                isinstance(e, dict) and e.get("settings_hash") in stale for e in entries)):
            remove_file(copy, root=out)
            removed.append(copy)
    if removed:
        logger.warning("%s: removed %d file(s) an import killed before it finished left "
                       "behind (%s)", out, len(removed), ", ".join(sorted(stale)))
    return removed


def entry_of(row: ImportedRow, digest: str, classify: Classify,
             quality: dict | None = None) -> dict:
    """The record (and aggregate entry) of one imported row; ``classify`` names each
    feature's group (the analysis' :func:`toposig.analysis.correlations.feature_group`)."""
    features = dict(row.features)
    families = {name: classify(name) for name in features}
    owners = {registry.family_of_group(g) for g in families.values()}
    signatures = [f for f in registry.names() if f in owners]
    entry: dict = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "model": row.model,
        "model_label": row.label,
        "step": row.step,
        "source": "imported",
        "location": row.provenance.file,
        "revision": row.revision,
        "checkpoint_fingerprint": None,
        "settings_hash": f"import-{digest}",
        "families": signatures,
        "num_parameters": row.num_parameters,
        **row.quality,
    }
    if "loss" in row.quality:  # where the loss came from, as a run's loss_key says
        entry["loss_key"] = f"'loss' of {Path(row.provenance.file).name}"
    derived = []
    if "loss" not in row.quality and row.quality.get("perplexity", 0) > 0:
        entry["mean_nll"] = math.log(row.quality["perplexity"])
        derived.append("mean_nll")
    if quality is not None:
        entry["quality"] = quality
    entry["features"] = features
    entry["imported"] = {
        "file": row.provenance.file, "sha256": row.provenance.sha256,
        "row": row.provenance.row, "format": row.provenance.format,
        "columns": row.columns, "feature_family": {k: str(v) for k, v in families.items()},
        "derived": derived, "metadata": row.metadata,
    }
    if row.timings_s:
        entry["timings_s"] = row.timings_s
    return entry


def _compact(obj: object) -> bytes:
    """Compact JSON (one line, C-encoded): records and aggregates of an import, which may
    hold millions of entries that nobody reads by eye."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


def write_import(out_dir: str | Path, rows: Sequence[ImportedRow], classify: Classify,
                 quality: dict | None = None,
                 parameters: Mapping[str, int] | None = None, *,
                 progress: bool = False) -> dict:
    """Write the results folder of the module docstring; returns its config.

    ``quality``: ``{"column": name, "higher_is_better": bool}``, the quality measure the
    analysis correlates with (an import's ``--target``), kept in every entry and in
    ``config.json``; ``None``: the analysis chooses among loss, perplexity, mlm_loss.
    ``progress``: a bar over the records (on a terminal).

    The records are written in one pass, each atomically but flushed to disk together
    (:func:`toposig.files.atomic.many_files`, then one ``sync``), a record that already
    holds its bytes left untouched; then the aggregates, and ``config.json`` last: a
    folder without it is an import killed before it finished, which the next import
    rewrites (the same files) or removes (:func:`remove_killed_import`).

    Raises:
        StudyMismatchError: ``out_dir`` holds another study (a run's, or an import of
            other files); nothing is written.
        FolderLockedError: another process holds the folder.
    """
    out = Path(out_dir)
    digest = import_digest(rows, quality, parameters)
    order = {label: i for i, label in enumerate(dict.fromkeys(r.label for r in rows))}
    rows = sorted(rows, key=lambda r: (order[r.label], r.step))
    by_label: dict[str, list[ImportedRow]] = {label: [] for label in order}
    for r in rows:
        by_label[r.label].append(r)
    sources = sorted({(r.provenance.file, r.provenance.sha256, r.provenance.format)
                      for r in rows}, key=lambda t: (t[1], t[0]))
    config = {
        "schema_version": SCHEMA_VERSION,
        "imported": {
            "digest": digest,
            "files": [{"file": f, "sha256": h, "format": fmt} for f, h, fmt in sources],
            **({"quality": quality} if quality is not None else {}),
            **({"num_parameters": dict(parameters)} if parameters else {}),
        },
        "models": {label: group[0].model for label, group in by_label.items()},
        "model_sources": dict.fromkeys(order, "imported"),
        "steps": {label: [r.step for r in group] for label, group in by_label.items()},
        "n_checkpoints": len(rows),
    }
    with exclusive(out, "results folder"):
        held = Study.load(out)
        if held.held and held.import_digest != digest:
            what = (f"an import of {_what_differs(held.config, config)}" if held.imported
                    else "the study of a run")
            raise StudyMismatchError(
                f"{out} holds {what} ({', '.join(held.models)}); import into a folder "
                "of its own (--out)")
        remove_stale_temporaries(out)  # a killed import's, or a killed run's
        if not held.held:
            remove_killed_import(out, digest)
        from toposig.progress import tqdm

        entries: dict[str, list[dict]] = {}
        with tqdm(total=len(rows), desc="records", unit="row", disable=None if progress
                  else True, leave=False) as bar:
            for label, group in by_label.items():
                entries[label] = [entry_of(r, digest, classify, quality) for r in group]
                with many_files(out, out / "records" / f"import-{digest}" / label) as write:
                    for e in entries[label]:
                        write(f"step{e['step']:06d}.json", _compact(e))
                        bar.update()
        sync_all()  # every record on disk before the files that vouch for them
        data = out / "data"
        atomic_write_bytes(data / "all_results.json",
                           _compact([e for label in order for e in entries[label]]), root=out)
        for label in order:
            atomic_write_bytes(data / f"{label}_results.json", _compact(entries[label]),
                               root=out)
        atomic_write_json(data / "config.json", config, root=out)
    return config
