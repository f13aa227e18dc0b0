"""Stage 3: results/data/ -> statistics.json, summary.md and the figures in results/plots/.

Per model and pooled over models: Spearman and Pearson correlation (with p-values) of
every feature with the quality measure (perplexity, or for weights-only runs the loss
stored with each checkpoint, or an encoder's masked-LM loss), the controls (intervals
from surrogates, Holm-adjusted p, partial correlations, first differences, the detrended
and partial-difference tests with each one's calibration and power on its own design,
pooled over models by a meta-analysis), training phases,
scaling and prediction; Wasserstein distances between consecutive checkpoints' diagrams.
Up to 24 figures, those the records have data for: 7 of embedding space, 4 of weight
space (the correlation heatmap among them), 8 of the analysis, 2 of the loss landscape
and gradients, one over training of the families without a figure of their own (the
inter-layer zigzag's), one of a seed ensemble and one of a positive control; a figure an
earlier analysis drew that no longer applies is removed. The same records give the same files,
byte for byte.

Before it reads anything the analysis checks that it can write its files (a read-only
folder, a folder where an --export table belongs, are refused at once), and, holding the
folder's lock, that data/all_results.json reflects the finished records of the folder's
study: aggregates that a killed run left behind are rebuilt from the records, with a
warning. A damaged data/all_results.json or data/config.json is refused naming the file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from toposig.cli.options import check_seed, setup_logging
from toposig.cli.parser import CommandParser, add_deprecated, help_text
from toposig.defaults import DPI, EXPORT_FORMATS, NULL_RUNS, SEED_CONTROLS

EXAMPLES = (
    "--out results/my-run",
    "--out results/my-run --no-plots",
    "--out results/my-run --formats png,pdf --export csv",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    i = p.add_argument_group("results folder")
    i.add_argument("--out", "--results", dest="results", default="results", metavar="FOLDER",
                   help="the results folder the run wrote (the run's --out; --results is "
                        "the same option) (default: %(default)s)")
    a = p.add_argument_group("analysis")
    a.add_argument("--target", default="auto", metavar="QUALITY",
                   help="quality measure the features are correlated with: perplexity "
                        "(measured on the texts), loss (stored with each checkpoint), "
                        "mlm_loss (an encoder's masked-LM loss), or a quality an import "
                        "declared (toposig import --target, e.g. an accuracy); auto = the "
                        "declared one, else perplexity when every record has it "
                        "(default: %(default)s)")
    a.add_argument("--analysis-seed", type=int, default=0, metavar="SEED",
                   help="seed of the analysis' random draws: bootstrap resamples, surrogates "
                        "and simulated null runs (a run's --seed seeds the measurement) "
                        "(default: %(default)s)")
    add_deprecated(p, "--seed", "--analysis-seed",
                   "(in the analysis; --seed is the measurement's seed in toposig run)")
    a.add_argument("--design-runs", type=int, default=NULL_RUNS, metavar="N",
                   help="simulated null runs of each detrended and partial-difference test's "
                        "own design, for its calibration and power (half as many per "
                        "coupling); 0 skips them (default: %(default)s)")
    a.add_argument("--fresh-designs", action="store_true",
                   help="simulate every test's design again instead of reusing the checks "
                        "of an earlier analysis (data/design_checks.json, kept by what "
                        "determines them: the same statistics either way, the reuse faster)")
    a.add_argument("--seed-controls", choices=SEED_CONTROLS, default="auto",
                   help="in a seed ensemble (--seeds N), the seeds the within-model controls "
                        "(summary parts A to C) run on: the first of each model, or all; "
                        "auto: all for a positive control (checkpoints with a ground truth, "
                        "e.g. --preset grokking), else the first (the test across seeds, "
                        "part E, always uses every seed) (default: %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument("--no-plots", action="store_true", help="statistics only, no figures")
    o.add_argument("--formats", default="png", metavar="LIST",
                   help="figure formats, comma-separated: png, pdf, svg (vector files keep "
                        "their text as text) (default: %(default)s)")
    o.add_argument("--dpi", type=int, default=DPI,
                   help="resolution of PNG figures, dots per inch (default: %(default)s)")
    o.add_argument("--export", action="append", choices=EXPORT_FORMATS, default=[],
                   metavar="{csv,parquet}",
                   help="also write every result as one tidy table (a row per model, step, "
                        "family and layer or matrix; toposig.load_results) to "
                        "data/results_table.<format>; repeat for both")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


class ReadOnlyResultsError(ValueError):
    """A results folder the analysis cannot write its files into; the message names it."""


def check_writable(results: Path, plots: bool) -> None:
    """Refuse, before anything is read or written, a results folder whose folders the
    analysis writes into (the folder itself, ``data/``, and ``plots/`` when figures are
    drawn) exist but cannot be written by this process. A missing folder passes (the
    analysis reports it missing). Permissions the process ignores (root) pass too: the
    write that then fails is reported by :func:`main` as cleanly.

    Raises:
        ReadOnlyResultsError: naming the folder.
        LinkedFolderError: ``data/`` or ``plots/`` is a symbolic link.
    """
    from toposig.files.atomic import LinkedFolderError

    for folder in (results, results / "data", *([results / "plots"] if plots else [])):
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise ReadOnlyResultsError(
                f"{folder}: is not writable, and the analysis writes data/statistics.json, "
                f"summary.md and plots/ into the results folder {results}; make it "
                "writable, or analyse a writable copy of it")
        if folder != results and folder.is_symlink():  # the writer refuses it too, later
            raise LinkedFolderError(
                f"{folder} is a symbolic link inside the results folder {results}; the "
                "analysis does not write through it (it would write where it points). "
                "Replace the link with a folder")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``toposig analyze``: returns the exit status, 0, or 2 with one ``error:`` line
    naming the file or folder at fault (missing, damaged, read-only, locked) and no
    traceback, or 130 after Ctrl-C with one line and no traceback."""
    args = build_parser(prog).parse_args(argv)
    from toposig.report.output import FigureOutput
    from toposig.run.missing import missing_folder_error

    try:  # before torch and the analysis load: said at once
        check_seed(args.analysis_seed, "--analysis-seed")
        if args.design_runs < 0:
            raise ValueError(f"--design-runs must be 0 or more, got {args.design_runs}")
        output = FigureOutput.from_options(args.formats, args.dpi)
        if problem := missing_folder_error(args.results):  # the arguments first, then the folder
            raise ValueError(problem)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.verbose)
    from toposig.analysis.compute import summary_lines
    from toposig.analyze import analyze
    from toposig.files.locks import FolderLockedError, exclusive
    from toposig.report.figures import figures_not_drawn
    from toposig.run.aggregates import rebuild_if_stale
    from toposig.run.results_folder import (
        ResultsMissingError,
        arrays_reader,
        export_problem,
        export_table,
        load_entries,
        load_results,
    )

    results = Path(args.results)
    try:
        tables = [results / "data" / f"results_table.{fmt}" for fmt in dict.fromkeys(args.export)]
        for table in tables:  # before anything is written
            if problem := export_problem(table):
                raise ValueError(problem)
        check_writable(results, plots=not args.no_plots)
        with exclusive(results, "results folder", create=False):
            rebuild_if_stale(results)  # aggregates a killed run left behind
            statistics, figures = analyze(results, plots=not args.no_plots,
                                          target=args.target, seed=args.analysis_seed,
                                          output=output,
                                          design_runs=args.design_runs,
                                          seed_controls=args.seed_controls,
                                          reuse_designs=not args.fresh_designs)
            not_drawn = ({} if args.no_plots else  # the records, as plot_all was given them
                         figures_not_drawn(statistics, load_entries(results),
                                           arrays_reader(results)))
            exported = [export_table(load_results(results), table, root=results)
                        for table in tables]
    except (ResultsMissingError, ValueError, FolderLockedError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a write refused or failed: a read-only folder, a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc} (the analysis writes "
              f"data/statistics.json, summary.md and plots/ into the results folder "
              f"{results})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: every file is written whole or not at all
        print(f"interrupted: each file of {results} is whole, from this analysis or the "
              "one before; run the command again to finish", file=sys.stderr)
        return 130
    print("\n".join(summary_lines(statistics)))
    print(f"statistics: {Path(args.results) / 'data' / 'statistics.json'}")
    if figures:
        print(f"figures ({len(figures)}, {', '.join(output.formats)}): "
              f"{Path(args.results) / 'plots'}/")
    for name, why in not_drawn.items():
        print(f"not drawn: {name} ({why})")
    for path in exported:
        print(f"table: {path}")
    return 0

