"""Read a results folder for :mod:`toposig.analysis.compare`: the edge that touches disk.

:func:`load_results_folder` loads what a comparison needs from a results root (the
layout of :mod:`toposig.run.store`) into a
:class:`toposig.analysis.compare.ResultsContent` (re-exported here):

- every record ``records/<settings-hash>/<model>/<checkpoint>.json`` (failed ones too),
  keyed by ``(settings-hash folder, model, checkpoint)``; the ``.npz`` arrays beside them
  are not read, nor the temporaries a killed run left (``.<name>.<random>.tmp``);
- ``data/all_results.json`` (the aggregate entries), ``data/statistics.json``,
  ``data/config.json``, and every other JSON file of ``data/`` or of the folder's top
  level (a backtest table written there with ``toposig backtest --json``), except the
  per-model copies of the aggregates (``data/<label>_results.json``), whose names are
  still listed.

A folder that does not exist, or has neither ``records/`` nor ``data/`` with one of
those files, raises :class:`NotAResultsFolderError`; a JSON file that cannot be read or
parsed, or holds the wrong type, raises :class:`DamagedResultsError` naming the file.
"""

from __future__ import annotations

from pathlib import Path

from toposig.analysis.compare import ResultsContent, document_problem
from toposig.files.atomic import read_json
from toposig.run.missing import nearest_folders
from toposig.run.store import DamagedResultsError

__all__ = ["load_results_folder", "read_comparable", "NotAResultsFolderError",
           "DamagedResultsError", "ResultsContent"]

_KNOWN = ("all_results.json", "statistics.json", "config.json")
_JSON_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number",
               bool: "boolean", type(None): "null"}


class NotAResultsFolderError(ValueError):
    """The path is not a results folder (missing, a file, or nothing a run writes)."""


def read_comparable(path: Path, want: type | tuple[type, ...] = (dict, list)) -> object:
    """The JSON document at ``path``, checked for what compare needs of it.

    Raises:
        DamagedResultsError: not JSON, nested deeper than the parser goes, not of type
            ``want``, or :func:`toposig.analysis.compare.document_problem` has an answer;
            the message names the file.
    """
    try:
        obj = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = ("nested too deep" if isinstance(exc, RecursionError)
               else f"{type(exc).__name__}: {exc}")
        raise DamagedResultsError(f"{path}: cannot be read as JSON ({why})") from None
    if not isinstance(obj, want):
        wanted = " or ".join(_JSON_NAMES[t] for t in (want if isinstance(want, tuple)
                                                      else (want,)))
        raise DamagedResultsError(f"{path}: holds a JSON {_JSON_NAMES.get(type(obj), 'value')}"
                                  f", not a JSON {wanted}")
    if problem := document_problem(obj):
        raise DamagedResultsError(f"{path}: {problem}")
    return obj


def load_results_folder(root: str | Path) -> ResultsContent:
    """Load the records, aggregates, statistics, config and other JSON of ``data/`` of
    the results folder ``root``.

    Raises:
        NotAResultsFolderError: ``root`` is missing, not a folder, or holds neither
            records nor any of ``data/all_results.json``, ``statistics.json``,
            ``config.json``.
        DamagedResultsError: a JSON file that cannot be parsed or is of the wrong type;
            the message names it.
    """
    root = Path(root)
    if not root.exists():
        near = nearest_folders(root)
        raise NotAResultsFolderError(f"{root}: no such folder" + (
            f"; did you mean {' or '.join(near)}?" if near else ""))
    if not root.is_dir():
        raise NotAResultsFolderError(f"{root}: not a folder (give a results folder, such "
                                     "as results/)")
    data = root / "data"
    record_files = sorted(p for p in (root / "records").glob("*/*/*.json")
                          if p.is_file() and not p.name.startswith("."))
    known = [n for n in _KNOWN if (data / n).is_file()]
    if not record_files and not known:
        raise NotAResultsFolderError(
            f"{root}: not a results folder (no records/<hash>/<model>/*.json and no "
            f"data/{{{','.join(_KNOWN)}}})")
    content = ResultsContent()
    for p in record_files:
        content.records[(p.parent.parent.name, p.parent.name, p.stem)] = read_comparable(
            p, dict)
    files = sorted(str(p.relative_to(root)) for pattern in ("data/*.json", "*.json")
                   for p in root.glob(pattern) if p.is_file() and not p.name.startswith("."))
    content.files = frozenset(files)
    if "data/all_results.json" in files:
        entries = read_comparable(data / "all_results.json", list)
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                raise DamagedResultsError(f"{data / 'all_results.json'}: entry {i} is a JSON "
                                          f"{_JSON_NAMES.get(type(e), 'value')}, not an "
                                          "object")
        content.aggregates = entries
    if "data/statistics.json" in files:
        content.statistics = read_comparable(data / "statistics.json", dict)
    if "data/config.json" in files:
        content.config = read_comparable(data / "config.json", dict)
    labels = {str(e.get("model_label")) for e in content.aggregates or []}
    labels |= {label for _, label, _ in content.records}
    labels |= set((content.config or {}).get("models") or {})
    copies = {f"data/{label}_results.json" for label in labels}
    for name in files:
        if name in copies or name in {f"data/{n}" for n in _KNOWN}:
            continue
        content.other[name] = read_comparable(root / name)
    return content
