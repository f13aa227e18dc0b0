"""A results folder that is not there, said at once: the nearest folders' names and the
command that would make it. Imports nothing heavy, so a command checks its folder before
torch and the analysis load (:func:`missing_folder_error`)."""

from __future__ import annotations

import difflib
from pathlib import Path

__all__ = ["missing_folder_error", "nearest_folders"]


def nearest_folders(folder: str | Path, n: int = 3) -> list[str]:
    """Up to ``n`` existing folders beside ``folder`` (a path that does not exist) whose
    names are near its name: the typo's likely meaning, spelled as ``folder`` is."""
    folder = Path(folder)
    parent = folder.parent
    try:
        names = sorted(c.name for c in parent.iterdir() if c.is_dir())
    except OSError:
        return []
    return [str(parent / m) for m in difflib.get_close_matches(folder.name, names, n, 0.6)]


def missing_folder_error(results_dir: str | Path) -> str | None:
    """The error for a results folder ``results_dir`` that does not exist (nor is a
    link), naming the nearest folders beside it, or ``None`` where the folder is there
    (what it holds is for the reader to judge)."""
    path = Path(results_dir)
    if path.exists() or path.is_symlink():
        return None
    if near := nearest_folders(path):
        return (f"{results_dir} does not exist; did you mean {' or '.join(near)}? "
                f"(`toposig run --out {results_dir}` would make it)")
    return (f"{results_dir} does not exist: run `toposig run --out {results_dir}` (in a "
            f"checkout: `python src/run_experiments.py --out {results_dir}`) first, or pass "
            "--out with the folder a run wrote to")
