"""Stage 3, orchestrated: a results folder's ``data/`` -> ``data/statistics.json``,
``summary.md`` and the figures in ``plots/``.

:func:`analyze` reads the finished checkpoints' entries and their arrays
(:mod:`toposig.run.results_folder`), computes the statistics
(:func:`toposig.analysis.compute.compute_statistics`, pure), rounds them once, and
writes them, the markdown summary (:func:`toposig.report.summary.summary_markdown`,
:func:`write_summary`) and the figures (:func:`toposig.report.figures.plot_all`, given
the folder's arrays). ``toposig analyze`` calls it holding the folder's lock. The report
itself (:mod:`toposig.report`) reads no file: it draws and writes what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from toposig.analysis.compute import compute_statistics
from toposig.analysis.controls import DESIGN_RUNS
from toposig.analysis.quality import (
    warn_series_with_one_checkpoint,
    warn_series_without_quality,
)
from toposig.files.atomic import atomic_write_bytes, atomic_write_json
from toposig.records import Record, Statistics
from toposig.records.rounding import STATISTICS_DIGITS, round_floats
from toposig.report.summary import summary_markdown
from toposig.run.results_folder import arrays_reader, load_entries

__all__ = ["analyze", "folder_statistics", "write_summary"]


def folder_statistics(results_dir: str | Path, records: Sequence[Record],
                      target: str = "auto", seed: int = 0,
                      design_runs: int = DESIGN_RUNS,
                      seed_controls: str = "auto") -> Statistics:
    """The statistics ``toposig analyze`` writes for ``records`` of ``results_dir`` (their
    arrays read from it), rounded once to ``STATISTICS_DIGITS``, before anything is written
    or drawn from them, so that the file, the summary and the figures are the same on every
    CPU (:mod:`toposig.records.rounding`). ``design_runs``: simulated null runs of each test's
    design (:mod:`toposig.analysis.inference`; 0 skips them); ``seed_controls``: which seeds
    of an ensemble the within-model controls run on (``auto``, ``first`` or ``all``:
    :func:`toposig.analysis.compute.compute_statistics`)."""
    computed = compute_statistics(records, target, seed=seed,
                                  arrays=arrays_reader(results_dir), design_runs=design_runs,
                                  seed_controls=seed_controls)
    return Statistics.from_json(round_floats(computed, STATISTICS_DIGITS))


def analyze(results_dir: str | Path = "results", plots: bool = True,
            target: str = "auto", seed: int = 0,
            output=None, design_runs: int = DESIGN_RUNS,
            seed_controls: str = "auto") -> tuple[Statistics, list[Path]]:
    """Write ``data/statistics.json``, ``summary.md`` and the figures (in ``output``'s
    formats and resolution, a :class:`toposig.report.style.FigureOutput`; PNG by default).
    Returns the statistics and figure paths. ``design_runs``: simulated null runs of each
    test's own design (:mod:`toposig.analysis.inference`; 0 skips the simulations).
    ``seed_controls``: in a seed ensemble, the within-model controls run on the first seed
    of each group (``first``), on every seed (``all``), or (``auto``) on every seed of a
    positive control and the first seeds otherwise.

    Raises:
        ResultsMissingError: no ``data/all_results.json`` with a finished checkpoint
            (:func:`toposig.run.results_folder.load_entries`).
        DamagedResultsError: the aggregate or a record's arrays are damaged.
        ValueError: an explicit ``target`` that no record has.
    """
    records = load_entries(results_dir)
    warn_series_without_quality(records)  # once per series, before panels are drawn empty
    warn_series_with_one_checkpoint(records)  # nothing to draw over training, or to test
    statistics = folder_statistics(results_dir, records, target, seed, design_runs,
                                   seed_controls)
    atomic_write_json(Path(results_dir) / "data" / "statistics.json", statistics.to_json(),
                      root=results_dir)
    write_summary(results_dir, statistics, records)
    figures: list[Path] = []
    if plots:
        from toposig.report.figures import (
            plot_all,  # matplotlib only when figures are drawn
        )

        figures = plot_all(records, statistics, Path(results_dir) / "plots",
                           arrays=arrays_reader(results_dir), output=output, root=results_dir)
    return statistics, figures


def write_summary(results_dir: str | Path, statistics: Statistics | Mapping,
                  records: Sequence[Record | Mapping]) -> Path:
    """Write :func:`toposig.report.summary.summary_markdown` to
    ``<results_dir>/summary.md`` atomically; returns the path."""
    path = Path(results_dir) / "summary.md"
    atomic_write_bytes(path, summary_markdown(statistics, records).encode("utf-8"),
                       root=results_dir)
    return path
