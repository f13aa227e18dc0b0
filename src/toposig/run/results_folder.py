"""Read a results folder for stage 3 (and export its table): the edge that touches disk.

:mod:`toposig.analysis` is pure: records and arrays in, statistics and tables out. This
module reads what it needs from a results root (the layout of :mod:`toposig.run.store`):

- :func:`load_entries`: the aggregate entries of the finished checkpoints
  (``data/all_results.json``, or, in a folder shipped with its records alone, as the
  committed ``results/seed004``, the entries a run would write, built from the records in
  memory);
- :func:`arrays_reader`: the arrays saved beside a record (its ``.npz``), for
  :func:`toposig.analysis.compute.compute_statistics`'s Wasserstein series and the
  figures of diagrams and loss surfaces;
- :func:`load_results`: the folder as one tidy table
  (:func:`toposig.analysis.table.results_table`); :func:`export_table` writes it as CSV
  or Parquet, :func:`export_problem` says beforehand why it could not.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from toposig.analysis.compute import ArraysOf
from toposig.defaults import EXPORT_FORMATS
from toposig.records import Record
from toposig.run.aggregates import aggregate_path, read_aggregate, read_study, study_entries
from toposig.run.missing import missing_folder_error
from toposig.run.store import load_arrays
from toposig.sources.checkpoints import checkpoints_in

if TYPE_CHECKING:
    import pandas as pd

    from toposig.run.study import Study

__all__ = ["ResultsMissingError", "load_entries", "arrays_reader",
           "load_results", "EXPORT_FORMATS", "export_problem", "export_table"]



class ResultsMissingError(FileNotFoundError):
    """No aggregate results where the analysis looked."""


def load_entries(results_dir: str | Path) -> list[Record]:
    """The aggregate entries (one :class:`toposig.records.Record` per finished
    checkpoint) of the study in ``results_dir``, in the file's order.

    A folder with a study's records but no ``data/all_results.json`` (one committed or
    shared with its records alone) gives the entries a run would write for them
    (:func:`toposig.run.aggregates.study_entries`), built in memory: nothing is written
    and nothing is measured.

    Raises:
        ResultsMissingError: there is no ``data/all_results.json`` and no finished
            record, or it holds no finished checkpoint.
        DamagedResultsError: it is not a file, not JSON, not a list of sound records
            (:func:`toposig.run.aggregates.read_aggregate`); the message names the file
            and the entry.
    """
    path = aggregate_path(results_dir)
    if not (path.exists() or path.is_symlink()):
        study = (read_study(results_dir)
                 if (Path(results_dir) / "data" / "config.json").is_file() else None)
        if records := _records_alone(study):
            return records
        if files := _imported_files(study):
            raise ResultsMissingError(
                f"{results_dir} holds an import whose records are not kept with it: "
                f"re-create them with `toposig import {' '.join(files)} --out "
                f"{results_dir}` (from the folder the paths are relative to; a README "
                "beside the folder may give the exact command), then open it again")
        if what := checkpoints_in(results_dir):
            name = Path(results_dir).resolve().name or "run"
            raise ResultsMissingError(
                f"{results_dir} is {what}, not a results folder: measure it first with "
                f"`toposig run --models {results_dir} --out results/{name}` (in a "
                f"checkout: `python src/run_experiments.py --models {results_dir} --out "
                f"results/{name}`), then open or analyse results/{name}")
        if problem := missing_folder_error(results_dir):
            raise ResultsMissingError(problem)
        raise ResultsMissingError(
            f"{path} does not exist: run `toposig run --out {results_dir}` (in a checkout: "
            f"`python src/run_experiments.py --out {results_dir}`) first, or pass --out "
            "with the folder a run wrote to"
        )
    entries = read_aggregate(path)
    records = [Record.from_json(r, copy_json=False)  # just parsed: nothing else holds it
               for r in entries if r["status"] == "ok"]
    if not records:
        failed = f" (only {len(entries)} failed ones)" if entries else ""
        raise ResultsMissingError(
            f"{path} holds no finished checkpoint to analyse{failed}; a run of the same "
            "command rewrites it from the records it finished")
    return records


def _records_alone(study: Study | None) -> list[Record]:
    """The finished entries of a study folder without aggregates, from its records
    (empty: no study, an import, or no finished record)."""
    if study is None or not study.held or study.imported or not study.hashes:
        return []
    return [Record.from_json(e, copy_json=False) for e in study_entries(study)
            if e["status"] == "ok"]


def _imported_files(study: Study | None) -> list[str]:
    """The files an import folder's ``config.json`` says it was made from (empty: no
    study, or not an import)."""
    if study is None or not study.imported:
        return []
    return [str(f.get("file")) for f in study.config["imported"].get("files", [])
            if isinstance(f, dict)]


def arrays_reader(results_dir: str | Path) -> ArraysOf:
    """The ``arrays_file`` of a record's part -> its arrays under ``results_dir``
    (:func:`toposig.run.store.load_arrays`, which raises
    ``DamagedResultsError`` for a missing or damaged file): the ``arrays`` of
    :func:`toposig.analysis.compute.compute_statistics`."""
    return functools.partial(load_arrays, results_dir)


def load_results(results_dir: str | Path = "results") -> pd.DataFrame:
    """The results folder written by ``run_experiments.py --out`` (or ``toposig run``) as
    one tidy table: see :func:`toposig.analysis.table.results_table`.

    Raises:
        ResultsMissingError: the folder has no ``data/all_results.json`` with a finished
            checkpoint.
    """
    from toposig.analysis.table import results_table  # pandas only when a table is made

    return results_table(load_entries(results_dir))


def export_problem(path: str | Path) -> str | None:
    """Why :func:`export_table` cannot write ``path``, or ``None``: a format other than
    :data:`EXPORT_FORMATS` (by suffix), a folder (not a link to
    one) where the file belongs, or Parquet without pyarrow or fastparquet. Checked
    before anything is written, so that a command refuses at once rather than after its
    other files."""
    import importlib.util

    path = Path(path)
    fmt = path.suffix.lstrip(".")
    if fmt not in EXPORT_FORMATS:
        return (f"cannot export to {path.name}: the formats are "
                f"{', '.join(EXPORT_FORMATS)}")
    if path.is_dir() and not path.is_symlink():
        return (f"{path}: is a folder where the exported table belongs; move it away "
                "(toposig does not replace folders)")
    if fmt == "parquet" and not any(importlib.util.find_spec(m)
                                    for m in ("pyarrow", "fastparquet")):
        return (f"{path}: writing Parquet needs pyarrow (pip install pyarrow); "
                "--export csv needs nothing more")
    return None


def export_table(table: pd.DataFrame, path: str | Path, *,
                 root: str | Path | None = None) -> Path:
    """Write the table as CSV or Parquet (by ``path``'s suffix), atomically; no folder
    between ``root`` (default: ``path``'s folder; the results folder for its
    ``data/results_table.*``) and ``path`` is followed through a link.

    Raises:
        ValueError: :func:`export_problem` has an answer for ``path``; nothing is written.
    """
    from toposig.files.atomic import atomic_write_bytes

    path = Path(path)
    fmt = path.suffix.lstrip(".")
    problem = export_problem(path)
    if problem:
        raise ValueError(problem)
    if fmt == "csv":
        data = table.to_csv(index=False, lineterminator="\n").encode("utf-8")
    else:
        import io

        buf = io.BytesIO()
        table.to_parquet(buf, index=False)
        data = buf.getvalue()
    atomic_write_bytes(path, data, root=path.parent if root is None else root)
    return path
