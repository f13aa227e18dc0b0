"""Draw the report's figures from results folders: one run's, or two runs (or more) compared.

A comparison draws, for every figure some run has data for, one figure: the runs on the
same axes where the figure is drawn from the records alone (the evolution and training
curves; each model labelled <run>: <model>), side by side otherwise
(statistics and diagrams). The runs are named by their folders' names (--names to choose).
The folders are only read: their statistics are data/statistics.json where it fits the
records, else computed in memory as `toposig analyze` would. The figures go to --out
(default: compare-<run>-vs-<run>, or plots-<run> for one run, beside the first results
folder, not in the current folder; never inside a results folder given), each written
atomically; nothing else there is touched. A figure no run has the data for is not
drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toposig.cli.options import setup_logging
from toposig.cli.parser import CommandParser, help_text
from toposig.defaults import DPI
from toposig.files.names import escape, folder_name

EXAMPLES = (
    "results/my-run",
    "--compare results/my-run results/my-run-lr2",
    "results/my-run --figures perplexity_curves --formats svg --out figures/",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    p.add_argument("folders", nargs="*", metavar="FOLDER",
                   help="results folders (what `toposig run --out` wrote)")
    r = p.add_argument_group("runs")
    r.add_argument("--compare", nargs="+", default=[], metavar="FOLDER",
                   help="results folders to compare (with any FOLDER given before): one "
                        "figure for all of them")
    r.add_argument("--names", default=None, metavar="LIST",
                   help="the runs' names on the figures, comma-separated, in order "
                        "(default: the folders' names)")
    o = p.add_argument_group("figures")
    o.add_argument("--figures", default="all", metavar="LIST",
                   help="figure names, comma-separated, or all (every figure some run has "
                        "data for) (default: %(default)s)")
    o.add_argument("--out", default=None, metavar="FOLDER",
                   help="where the figures go (default: compare-<run>-vs-<run>, or "
                        "plots-<run>, beside the first results folder)")
    o.add_argument("--formats", default="png", metavar="LIST",
                   help="figure formats, comma-separated: png, pdf, svg (default: %(default)s)")
    o.add_argument("--dpi", type=int, default=DPI,
                   help="resolution of PNG figures, dots per inch (default: %(default)s)")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def run_names(folders: list[Path], names: str | None) -> list[str]:
    """The runs' names: ``--names`` split on commas, else the folders' names; refused when
    they are not one per folder or not all different."""
    chosen = ([n.strip() for n in names.split(",")] if names is not None
              else [folder_name(f) for f in folders])
    if len(chosen) != len(folders):
        raise ValueError(f"--names gives {len(chosen)} names for {len(folders)} folders")
    if len(set(chosen)) != len(chosen) or not all(chosen):
        raise ValueError(f"the runs need different, non-empty names to be told apart on a "
                         f"figure, got {chosen}; choose them with --names A,B")
    return chosen


def chosen_figures(text: str) -> list[str] | None:
    """``--figures``: ``None`` for all, else the names, each checked."""
    from toposig.report.figures import ALL_FIGURES

    if text.strip().lower() == "all":
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_FIGURES]
    if unknown or not names:
        raise ValueError(f"--figures: no figure named {', '.join(unknown) or repr(text)}; "
                         f"the figures are {', '.join(ALL_FIGURES)}")
    return names


def output_folder(out: str | None, names: list[str], folders: list[Path]) -> Path:
    """``--out``, or the default named after the runs, beside the first results folder
    (not in the current folder); refused when it is a file, or is or lies inside one of
    the results folders (they are only read: the analysis' own figures are not to be
    overwritten)."""
    folder = Path(out) if out is not None else folders[0].parent / (
        escape("compare-" + "-vs-".join(names)) if len(names) > 1 else escape(f"plots-{names[0]}"))
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {folder} is a file, not a folder")
    where = folder.resolve()
    for results in folders:
        inside = results.resolve()
        if where == inside or inside in where.parents:
            raise ValueError(f"--out {folder} is inside the results folder {results}, which "
                             "toposig plot only reads; give an --out outside it")
    return folder


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``toposig plot``: returns 0, or 2 with one ``error:`` line (a folder missing or
    damaged, an unknown figure, names that collide, an --out that is a file)."""
    args = build_parser(prog).parse_args(argv)
    from toposig.report.output import FigureOutput
    from toposig.run.missing import missing_folder_error

    folders = [Path(f) for f in [*args.folders, *args.compare]]
    try:  # before matplotlib and the analysis load: said at once
        if not folders:
            raise ValueError("give a results folder, or --compare A B")
        for folder in folders:
            if problem := missing_folder_error(folder):
                raise ValueError(problem)
        names = run_names(folders, args.names)
        output = FigureOutput.from_options(args.formats, args.dpi)
        out = output_folder(args.out, names, folders)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.verbose)
    from toposig.report.figures import ALL_FIGURES, save_compared
    from toposig.results import open_results
    from toposig.run.store import DamagedResultsError

    try:
        wanted = chosen_figures(args.figures)
        runs = [open_results(f, name) for f, name in zip(folders, names, strict=True)]
        written, skipped = [], []
        for name in wanted or list(ALL_FIGURES):
            fig = ALL_FIGURES[name]  # the statistics are read only for figures of them
            path = save_compared(fig, [r.run_data(fig) for r in runs], out / f"{name}.png",
                                 output, root=out if args.out is not None else out.parent)
            (written if path is not None else skipped).append(path or name)
    except (ValueError, DamagedResultsError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"figures ({len(written)}, {', '.join(output.formats)}) of "
          f"{' vs '.join(names)}: {out}/")
    if wanted is not None:
        for name in skipped:
            print(f"not drawn: {name} (no run has data for it)")
    return 0
