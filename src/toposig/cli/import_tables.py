"""Import per-checkpoint measurements made elsewhere into a results folder.

Reads the seed studies' tables or any table of one row per model x step, validates every
row before writing anything, and writes a results folder that analyze, backtest and
compare (and toposig.load_results) read like one toposig measured:

  seed-a  the embedding study's pythia-*_results.json (one file per model)
  seed-b  the weight study's tda_features.json (model -> rows)
  table   a CSV or Parquet file: columns model, step (required), revision,
          num_parameters (optional), the qualities loss (nats), perplexity, mlm_loss,
          and numeric features (every other column)

--params gives the models' parameter counts where the files have none (the seed
paper's Table 1 for seed-b).

The format of each file is detected when --format is not given. Values are carried
exactly; each record names its file, the file's SHA-256 and its row.
"""

from __future__ import annotations

import sys

from toposig.cli.parser import CommandParser, help_text
from toposig.sources.imports import (
    FORMATS,
    QUALITY_COLUMNS,
    ImportFormatError,
    parameter_counts,
    read_rows,
    reserved_fields,
    with_parameters,
    with_target,
)

EXAMPLES = (
    "measurements.csv --out results/theirs",
    "evals.parquet --target accuracy --higher-is-better --out results/theirs",
    "tda_features.json --params params.csv --out results/seed-b",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    p.add_argument("files", nargs="+", metavar="FILE", help="the tables to import")
    t = p.add_argument_group("the tables")
    o = p.add_argument_group("output")
    o.add_argument("--out", required=True, metavar="FOLDER",
                   help="the results folder to write (new, or one holding this same import)")
    t.add_argument("--format", choices=FORMATS, default=None,
                   help="the files' format (default: detected per file)")
    t.add_argument("--target", default=None, metavar="COLUMN",
                   help="the quality measure the analysis correlates with, any numeric "
                        "column (e.g. an accuracy); it is then a quality, not a feature "
                        "(default: the analysis chooses among loss, perplexity, mlm_loss)")
    t.add_argument("--params", default=None, metavar="FILE|MODEL=N,...",
                   help="each model's parameter count, for the scaling, prediction and "
                        "pooled size controls: a CSV with columns model,num_parameters (e.g. "
                        "a paper's table) or MODEL=N pairs; every imported model needs one")
    t.add_argument("--higher-is-better", action="store_true",
                   help="the --target column grows as the model improves (an accuracy); "
                        "losses and perplexity are lower-is-better")
    o.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they show only on a terminal anyway)")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    from toposig.analysis.correlations import feature_group
    from toposig.files.atomic import LinkedFolderError
    from toposig.files.locks import FolderLockedError
    from toposig.run.importer import write_import
    from toposig.run.study import StudyMismatchError

    try:
        quality = None
        if args.target is not None:
            if args.target in reserved_fields():
                raise ImportFormatError(f"--target {args.target!r} is a field every record "
                                        "has (identity or bookkeeping), not a quality")
            if args.higher_is_better and args.target in QUALITY_COLUMNS:
                raise ImportFormatError(f"--higher-is-better: {args.target} is lower-is-better")
            quality = {"column": args.target, "higher_is_better": args.higher_is_better}
        elif args.higher_is_better:
            raise ImportFormatError("--higher-is-better needs --target COLUMN")
        rows = read_rows(args.files, args.format, progress=not args.no_progress)
        counts = parameter_counts(args.params) if args.params is not None else None
        if counts is not None:
            rows = with_parameters(rows, counts)
        if quality is not None:
            rows = with_target(rows, args.target)
        config = write_import(args.out, rows, feature_group, quality, counts,
                              progress=not args.no_progress)
    except (ImportFormatError, StudyMismatchError, FolderLockedError, LinkedFolderError,
            OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n_features = len({f for r in rows for f in r.features})
    print(f"imported {len(rows)} checkpoints of {len(config['models'])} model(s) "
          f"({', '.join(config['models'])}), {n_features} features, into {args.out}")
    print(f"next: toposig analyze --out {args.out}")
    return 0
