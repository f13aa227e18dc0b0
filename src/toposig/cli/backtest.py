"""Backtest the final-loss forecasts on finished runs.

For each run in the results folders given, forecast its final loss from the checkpoints
up to 20, 30 and 50 % of its last step with every method (the latest observed loss, the
power law fitted after the initial plateau, the same law fitted through the plateau, the
default "shrunk" forecast, and the power law combined with a topological feature chosen
on the run's own history), and score each by its mean absolute error and the share of
95 % intervals that hold the final loss. Also scores the stop rule at 20, 30, 50 and
75 %. Losses in nats: a run's stored loss, else its mean token loss on the analysed texts
(ln perplexity), else its masked-LM loss.

Prints the table; with --json FILE also writes {"default_method", "rows": [{"model",
"fraction", "method", "forecast", "low", "high", "final", ...}], "summary", "decisions",
...} there (the older --out FILE still works, with a warning).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from toposig.cli.parser import CommandParser, add_deprecated, help_text
from toposig.defaults import STOP_GAIN

if TYPE_CHECKING:
    from toposig.analysis.backtest import Series

EXAMPLES = (
    "results/my-run",
    "results/run-a results/run-b --json backtest.json",
    "results/my-run --fractions 0.1,0.2 --noise 0",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    p.add_argument("folders", nargs="+", metavar="FOLDER",
                   help="results folders (written by a run or by toposig import)")
    f = p.add_argument_group("forecasts and the stop rule")
    f.add_argument("--fractions", default="0.2,0.3,0.5", metavar="LIST",
                   help="cutoffs as fractions of each run's last step (default: %(default)s)")
    f.add_argument("--min-gain", type=float, default=STOP_GAIN, metavar="NATS",
                   help="the stop rule's smallest gain worth training for, nats "
                        "(default: %(default)s)")
    f.add_argument("--noise", type=float, default=None, metavar="NATS",
                   help="the loss's measurement noise for the stop rule, nats (default: "
                        "estimated from each curve; 0 for an evaluation on fixed texts)")
    f.add_argument("--all-features", action="store_true",
                   help="let the topological forecast choose among every feature, not only "
                        "the analysis' prediction features")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", default=None,
                   help="also write the backtest (rows, summary, decisions) to this JSON file")
    add_deprecated(p, "--out", "--json")
    o.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it shows only on a terminal anyway)")
    return p


def load_series(folders: list[str]) -> dict[str, Series]:
    """Each run of the folders as a :class:`~toposig.analysis.backtest.Series`; a label
    that two folders share is prefixed with its folder as given.

    Raises:
        ValueError: a folder given twice, or a run with no loss to forecast.
    """
    from toposig.analysis.backtest import Series
    from toposig.analysis.compute import declared_quality, quality_loss
    from toposig.analysis.correlations import by_model, feature_names, feature_values
    from toposig.run.results_folder import load_entries

    resolved = [Path(f).resolve() for f in folders]
    for i, r in enumerate(resolved):
        if r in resolved[:i]:
            raise ValueError(f"{folders[i]} is given twice: its runs would count twice")
    per_folder = [(Path(f), by_model(load_entries(f))) for f in folders]
    counts: dict[str, int] = {}
    for _, groups in per_folder:
        for label in groups:
            counts[label] = counts.get(label, 0) + 1
    out = {}
    for folder, groups in per_folder:
        for label, recs in groups.items():
            if all(quality_loss(r) is None for r in recs):
                declared = declared_quality(recs)
                what = (f"its quality is {declared.column!r}" if declared
                        else "it has none")
                raise ValueError(f"{folder}: {label} has no loss to forecast ({what}); "
                                 "backtest forecasts a loss in nats: a stored loss, ln "
                                 "perplexity or a masked-LM loss")
            name = label if counts[label] == 1 else f"{folder}/{label}"
            names = feature_names(recs)
            out[name] = Series([r.step for r in recs], [quality_loss(r) for r in recs],
                               {f: feature_values(recs, f) for f in names})
    return out


def table_lines(result: dict) -> list[str]:
    lines = [f"{'method':<24}{'n':>4}{'MAE (nats)':>12}{'coverage':>10}{'width':>9}"
             f"{'above':>7}"]
    for method, s in result["summary"].items():
        if not s["n"]:
            lines.append(f"{method:<24}{0:>4}  (undefined on every run)")
            continue
        mark = "  <- default" if method == result["default_method"] else ""
        lines.append(f"{method:<24}{s['n']:>4}{s['mae']:>12.4f}{s['coverage']:>10.2f}"
                     f"{s['mean_width']:>9.3f}{s['above_final']:>7.2f}{mark}")
    d = result["decision_rates"]

    def pct(v):
        return "-" if v is None else f"{v:.0%}"

    lines.append(f"stop rule (min gain {result['min_gain']} nats): {d['n']} decisions, "
                 f"{d['n_stop']} stop, {d['n_continue']} continue; false stops "
                 f"{pct(d['false_stop'])}, missed stops {pct(d['missed_stop'])}, "
                 f"accuracy {pct(d['accuracy'])}")
    return lines


def check_arguments(args: argparse.Namespace) -> list[float]:
    """The cutoffs ``--fractions`` gives, once the folders and the numbers are checked
    (without the analysis: each folder exists, the fractions and gains are in range).

    Raises:
        ValueError: naming the folder that is missing (and the nearest ones) or the value.
    """
    from toposig.run.missing import missing_folder_error

    for folder in args.folders:
        if problem := missing_folder_error(folder):
            raise ValueError(problem)
    try:
        fractions = [float(x) for x in args.fractions.split(",") if x.strip()]
    except ValueError:
        fractions = []
    if not fractions or not all(0 < f < 1 for f in fractions) or \
            len(set(fractions)) != len(fractions):
        raise ValueError(f"--fractions must be distinct numbers between 0 and 1, got "
                         f"{args.fractions!r}")
    for name, value in (("--min-gain", args.min_gain), ("--noise", args.noise)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return fractions


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    try:  # before the analysis loads: said at once
        fractions = check_arguments(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from toposig.analysis import backtest
    from toposig.analysis.feature_sets import PREDICTION_FEATURES
    from toposig.files.atomic import atomic_write_json
    from toposig.records.rounding import STATISTICS_DIGITS, round_floats
    from toposig.run.results_folder import ResultsMissingError

    try:
        series = load_series(args.folders)
        from toposig.progress import tqdm

        with tqdm(total=len(series), desc="backtest", unit="run", leave=False,
                  disable=True if args.no_progress else None) as bar:
            result = backtest.backtest(
                series, fractions, None if args.all_features else PREDICTION_FEATURES,
                min_gain=args.min_gain, noise=args.noise, done=lambda _: bar.update())
        result = round_floats(result, STATISTICS_DIGITS)  # the same bytes on any CPU
        if args.json:
            atomic_write_json(Path(args.json), result, root=Path(args.json).parent)
    except (ResultsMissingError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(series)} run(s), cutoffs {', '.join(f'{f:g}' for f in fractions)}")
    print("\n".join(table_lines(result)))
    if args.json:
        print(f"backtest: {args.json}")
    return 0
