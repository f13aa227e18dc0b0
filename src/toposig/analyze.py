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

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from toposig.analysis.compute import compute_statistics
from toposig.analysis.controls import DESIGN_RUNS
from toposig.analysis.design_cache import DesignCache
from toposig.analysis.quality import (
    warn_series_with_one_checkpoint,
    warn_series_without_quality,
)
from toposig.files.atomic import atomic_write_bytes, atomic_write_json, read_json
from toposig.records import Record, Statistics
from toposig.records.rounding import STATISTICS_DIGITS, round_floats
from toposig.report.summary import summary_markdown
from toposig.run.results_folder import arrays_reader, load_entries

__all__ = ["DESIGN_CACHE_FILE", "analyze", "design_cache_path", "folder_statistics",
           "read_design_cache", "write_summary"]

logger = logging.getLogger("toposig.analysis")

DESIGN_CACHE_FILE = "design_checks.json"
"""The design checks' file in a folder's ``data/``."""


def folder_statistics(results_dir: str | Path, records: Sequence[Record],
                      target: str = "auto", seed: int = 0,
                      design_runs: int = DESIGN_RUNS,
                      seed_controls: str = "auto",
                      design_cache: DesignCache | None = None) -> Statistics:
    """The statistics ``toposig analyze`` writes for ``records`` of ``results_dir`` (their
    arrays read from it), rounded once to ``STATISTICS_DIGITS``, before anything is written
    or drawn from them, so that the file, the summary and the figures are the same on every
    CPU (:mod:`toposig.records.rounding`). ``design_runs``: simulated null runs of each test's
    design (:mod:`toposig.analysis.inference`; 0 skips them); ``seed_controls``: which seeds
    of an ensemble the within-model controls run on (``auto``, ``first`` or ``all``:
    :func:`toposig.analysis.compute.compute_statistics`); ``design_cache``: design checks
    to reuse and add to (:mod:`toposig.analysis.design_cache`). Each stage is logged as it
    starts and ends (``toposig.analysis`` at INFO: ``toposig analyze`` shows them)."""
    computed = compute_statistics(records, target, seed=seed,
                                  arrays=arrays_reader(results_dir), design_runs=design_runs,
                                  seed_controls=seed_controls, design_cache=design_cache,
                                  progress=lambda line: logger.info("%s", line))
    return Statistics.from_json(round_floats(computed, STATISTICS_DIGITS))


def analyze(results_dir: str | Path = "results", plots: bool = True,
            target: str = "auto", seed: int = 0,
            output=None, design_runs: int = DESIGN_RUNS,
            seed_controls: str = "auto",
            reuse_designs: bool = True) -> tuple[Statistics, list[Path]]:
    """Write ``data/statistics.json``, ``summary.md`` and the figures (in ``output``'s
    formats and resolution, a :class:`toposig.report.style.FigureOutput`; PNG by default).
    Returns the statistics and figure paths. ``design_runs``: simulated null runs of each
    test's own design (:mod:`toposig.analysis.inference`; 0 skips the simulations).
    ``seed_controls``: in a seed ensemble, the within-model controls run on the first seed
    of each group (``first``), on every seed (``all``), or (``auto``) on every seed of a
    positive control and the first seeds otherwise. ``reuse_designs``: reuse the design
    checks of an earlier analysis of the folder (``data/design_checks.json``, rewritten
    with this analysis' checks), which gives the same statistics faster; ``False``
    simulates every design again.

    Raises:
        ResultsMissingError: no ``data/all_results.json`` with a finished checkpoint
            (:func:`toposig.run.results_folder.load_entries`).
        DamagedResultsError: the aggregate or a record's arrays are damaged.
        ValueError: an explicit ``target`` that no record has.
    """
    records = load_entries(results_dir)
    warn_series_without_quality(records)  # once per series, before panels are drawn empty
    warn_series_with_one_checkpoint(records)  # nothing to draw over training, or to test
    cache = read_design_cache(results_dir) if reuse_designs else DesignCache()
    statistics = folder_statistics(results_dir, records, target, seed, design_runs,
                                   seed_controls, design_cache=cache)
    atomic_write_json(Path(results_dir) / "data" / "statistics.json", statistics.to_json(),
                      root=results_dir)
    if design_runs:
        atomic_write_json(design_cache_path(results_dir), cache.to_json(), root=results_dir,
                          compact=True)
    write_summary(results_dir, statistics, records)
    figures: list[Path] = []
    if plots:
        from toposig.report.figures import (
            plot_all,  # matplotlib only when figures are drawn
        )

        logger.info("figures ...")
        start = time.perf_counter()
        figures = plot_all(records, statistics, Path(results_dir) / "plots",
                           arrays=arrays_reader(results_dir), output=output, root=results_dir)
        logger.info("figures: %d in %.1f s", len(figures), time.perf_counter() - start)
    return statistics, figures


def design_cache_path(results_dir: str | Path) -> Path:
    """``<results_dir>/data/design_checks.json``: the folder's design checks, by what
    determines them (:mod:`toposig.analysis.design_cache`)."""
    return Path(results_dir) / "data" / DESIGN_CACHE_FILE


def read_design_cache(results_dir: str | Path) -> DesignCache:
    """The design checks an earlier analysis of the folder left: an empty cache where
    there are none or other code made them; a damaged file, a link or anything but a
    plain file is said (a warning naming it) and left out, its checks simulated again
    and the file written anew."""
    path = design_cache_path(results_dir)
    if not (path.exists() or path.is_symlink()):
        return DesignCache()
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a plain file")
        return DesignCache.from_json(read_json(path))
    except (OSError, ValueError) as exc:  # a RecordError and a JSON error are ValueErrors
        logger.warning("%s is not a sound design-check cache (%s): its checks are "
                       "simulated again", path, exc)
        return DesignCache()


def write_summary(results_dir: str | Path, statistics: Statistics | Mapping,
                  records: Sequence[Record | Mapping]) -> Path:
    """Write :func:`toposig.report.summary.summary_markdown` to
    ``<results_dir>/summary.md`` atomically; returns the path."""
    path = Path(results_dir) / "summary.md"
    atomic_write_bytes(path, summary_markdown(statistics, records).encode("utf-8"),
                       root=results_dir)
    return path
