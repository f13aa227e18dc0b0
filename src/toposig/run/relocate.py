"""Records that name their checkpoint by an absolute path, rewritten as runs write them now.

Records written before 2026-12-03 kept a local checkpoint's ``location`` as the measuring
machine's absolute path (``/home/me/project/runs/m/step100``): a folder moved or shared
names checkpoints that are not there and says how someone's disk is laid out. Runs now
write the path relative to the record's model source
(:attr:`toposig.sources.checkpoints.Checkpoint.stored_location`: ``step100``).
:func:`relocate_folder` rewrites an older folder's records so, in place and atomically,
holding the folder's lock; nothing else in a record changes, so the checkpoint's
fingerprint, features and arrays stay, and a later run still resumes from them. The
aggregates and statistics name the records' digest, so analyse the folder again after it
(``toposig analyze --out FOLDER``).

Run it as ``python -m toposig.run.relocate FOLDER [FOLDER ...]``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path, PurePosixPath

from toposig.files.atomic import atomic_write_json, read_json
from toposig.files.locks import FolderLockedError, exclusive

__all__ = ["relative_location", "relocate_folder", "main"]

logger = logging.getLogger(__name__)

LOCAL_SOURCES = ("local", "file")


def relative_location(model: str, location: str) -> str:
    """A checkpoint's ``location`` relative to its model source ``model``, from an
    absolute ``location`` written on another machine (a relative one is returned as it
    is).

    ``model`` is the source as the run was given it: an absolute path is taken off the
    front of ``location``; a relative one (``runs/m``) is found as a run of whole
    components inside it (``/old/checkout/runs/m/step100`` -> ``step100``; the source
    itself -> ``.``). Where ``model`` is not in ``location`` (a checkpoint reached
    through a link), the location's last component, as a run names such a checkpoint."""
    where = PurePosixPath(location)
    if not where.is_absolute():
        return location
    source = PurePosixPath(model)
    if source.is_absolute():
        try:
            return where.relative_to(source).as_posix()  # "." for the source itself
        except ValueError:
            return where.name
    wanted = tuple(p for p in source.parts if p != ".")
    parts = where.parts
    for start in range(len(parts) - len(wanted), 0, -1):  # the match nearest the end
        if wanted and parts[start:start + len(wanted)] == wanted:
            return PurePosixPath(".", *parts[start + len(wanted):]).as_posix()
    return where.name


def relocate_folder(folder: str | Path) -> int:
    """Rewrite every record under ``folder/records/`` whose local ``location`` is
    absolute (:func:`relative_location`), holding the folder's lock; returns how many
    were rewritten. A record that cannot be read is left as it is, with a warning."""
    folder = Path(folder)
    if not (folder / "records").is_dir():
        raise FileNotFoundError(f"{folder} holds no records/ folder: not a results folder")
    changed = 0
    with exclusive(folder, "results folder", create=False):
        for path in sorted((folder / "records").glob("*/*/*.json")):
            if path.is_symlink() or not path.is_file():
                continue
            try:
                record = read_json(path)
            except (OSError, ValueError) as exc:
                logger.warning("left %s as it is: %s", path, exc)
                continue
            if not isinstance(record, dict) or record.get("source") not in LOCAL_SOURCES:
                continue
            location, model = record.get("location"), record.get("model")
            if not (isinstance(location, str) and isinstance(model, str)):
                continue
            relative = relative_location(model, location)
            if relative != location:
                record["location"] = relative
                atomic_write_json(path, record, root=folder, compact=True)
                changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m toposig.run.relocate",
        description="Rewrite the records of results folders written before 2026-12-03 so "
                    "that they name their checkpoints relative to the model source, not "
                    "by the measuring machine's absolute path; then analyse each again.")
    parser.add_argument("folders", nargs="+", metavar="FOLDER")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    for folder in args.folders:
        try:
            n = relocate_folder(folder)
        except (OSError, FolderLockedError) as exc:
            print(f"{folder}: {exc}", file=sys.stderr)
            return 2
        print(f"{folder}: {n} record(s) rewritten"
              + (f"; analyse it again: toposig analyze --out {folder}" if n else ""))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
