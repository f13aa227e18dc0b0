"""Did a rerun reproduce a results folder? Compare two results folders number by number.

Training is not bitwise reproducible across CPU models, so a rerun of the quick start on
another machine gives slightly different numbers. This compares folder A (say, the
committed reference results/) with folder B (your rerun, results/my-run) under a
tolerance that fits each kind of number, and says whether the numbers agree and whether
the conclusions agree:

  records      records/<settings-hash>/<model>/<step>.json, matched by hash, model, step
  aggregates   data/all_results.json, entries matched by model and step
  statistics   data/statistics.json, config.json and any other JSON (backtest tables)

  continuous   |a - b| <= atol + rtol * max(|a|, |b|)          (--rtol, --atol)
               defaults 1e-3 and 1e-6: 100x the 1e-5 relative noise that most features
               show across CPU models (a few, such as the longest H1 bar, move more)
  discontinuous  statistics of persistence diagrams, bootstrap spreads, and what the
               statistics derive from them: |a - b| <= atol + disc-rtol * max(|a|, |b|)
               default 50 x rtol (5e-2): a bar that rounding makes or removes moves a
               mean bar length by its share                      (--disc-rtol)
  counts       bar counts, n_*, integers: |a - b| <= max(count-tol, count-rtol * max)
               defaults 1 and 0.01: a bar at the rounding level comes and goes
  correlations |a - b| <= corr-tol                              (--corr-tol)
               default 0.04: one near-tied pair of 18 checkpoints swapped
  p-values     the same decision at p < alpha                   (--alpha)
  ignored      timings, clocks, hosts, devices, versions, paths, fingerprints
               (toposig.analysis.compare.IGNORED_KEYS), and what --ignore names

Conclusions: every significance decision of statistics.json (per model and pooled, each
control: significant with which sign, or not), and for backtest tables each method's MAE
within its own error, the best method and the stop rule's actions.

A and B may also be two JSON files (two statistics.json, two backtest tables).
Exit status: 0 everything within tolerance and the same conclusions, 1 a difference
beyond tolerance or a changed conclusion, 2 bad input (a folder missing, not a results
folder, a damaged JSON file: not JSON, nested too deep, an integer beyond any float, a
section of another shape; a bad option), naming the file.

The defaults accept what a rerun on another CPU model gives (measured on an emulated
one: every conclusion the same, every number within its kind's tolerance).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from toposig.analysis.compare import (
    ATOL_PER_RTOL,
    IGNORED_KEYS,
    KINDS,
    Comparison,
    Difference,
    Tolerances,
    compare_documents,
    compare_results,
)
from toposig.cli.parser import CommandParser, help_text
from toposig.files.atomic import atomic_write_json
from toposig.run.compare_folders import (
    DamagedResultsError,
    NotAResultsFolderError,
    load_results_folder,
    read_comparable,
)

_DEFAULTS = Tolerances()

EXAMPLES = (
    "results results/my-run",
    "results results/my-run --rtol 1e-2 --json comparison.json",
    "results results/my-run --ignore '*.ridge*'",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    p.add_argument("a", metavar="A", help="the first results folder (the reference)")
    p.add_argument("b", metavar="B", help="the second results folder (the rerun)")
    t = p.add_argument_group("tolerances")
    t.add_argument("--rtol", type=float, default=_DEFAULTS.rtol,
                   help="relative tolerance of continuous values (default: %(default)s: "
                        "about 100x the float32 rounding most features show on another CPU)")
    t.add_argument("--atol", type=float, default=None,
                   help="absolute floor for continuous values near 0 (default: rtol x "
                        f"{ATOL_PER_RTOL:g}, {_DEFAULTS.atol:g} with the default rtol)")
    t.add_argument("--count-tol", type=float, default=_DEFAULTS.count_tol, metavar="N",
                   help="absolute tolerance of counts: persistence bars, n_*, integers "
                        "(default: %(default)s)")
    t.add_argument("--count-rtol", type=float, default=_DEFAULTS.count_rtol, metavar="SHARE",
                   help="... or this share of the larger count, whichever is more "
                        "(default: %(default)s)")
    t.add_argument("--corr-tol", type=float, default=_DEFAULTS.corr_tol,
                   help="absolute tolerance of correlation coefficients and their CIs "
                        "(default: %(default)s)")
    t.add_argument("--disc-rtol", type=float, default=None,
                   help="relative tolerance of discontinuous values (statistics of "
                        "persistence diagrams, bootstrap spreads; default: 50 x rtol)")
    t.add_argument("--alpha", type=float, default=_DEFAULTS.alpha,
                   help="p-values are compared by the decision p < alpha "
                        "(default: %(default)s)")
    t.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                   help="also skip values whose path matches this fnmatch pattern, as the "
                        "report prints paths (repeatable): e.g. '*.ridge*' for the "
                        "leave-one-model-out ridge forecasts, an ill-conditioned fit that "
                        "rounding moves a lot, or 'records/l*' for the landscape records")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", default=None,
                   help="also write the whole comparison (every difference) to FILE")
    o.add_argument("--show", type=int, default=20, metavar="N",
                   help="how many differences to list, worst first (default: %(default)s)")
    return p


def _load(path: str):
    """A folder -> its loaded content; a JSON file -> the document (each file checked:
    :func:`toposig.run.compare_folders.read_comparable`)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        return read_comparable(p)
    return load_results_folder(p)


def _context(config: dict | None) -> str:
    """Where and with what a folder's last run computed (data/config.json last_run)."""
    last = (config or {}).get("last_run") or {}
    if not last:
        return "no last_run in data/config.json"
    pk = last.get("packages") or {}
    parts = [last.get("device_name") or last.get("device"), last.get("platform"),
             f"torch {pk['torch']}" if pk.get("torch") else None,
             f"PH {last['ph_backend']}" if last.get("ph_backend") else None,
             f"started {last['started_at']}" if last.get("started_at") else None]
    return ", ".join(str(x) for x in parts if x)


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.7g}"
    if v is None:
        return "absent"
    return str(v)


def _difference_line(d: Difference) -> str:
    note = f"; {d.note}" if d.note else ""
    beyond = f" ({d.excess:.3g}x the allowed)" if d.excess != float("inf") else ""
    return (f"  {d.path}\n      {d.kind}: A {_value(d.a)}  B {_value(d.b)}{beyond}; "
            f"rule {d.tolerance}{note}")


def report_lines(cmp: Comparison, a: str, b: str, show: int = 20,
                 contexts: tuple[str, str] | None = None) -> list[str]:
    """The short report: what was compared, the worst differences, the two verdicts."""
    tol = cmp.tolerances
    lines = [f"A: {a}", f"B: {b}"]
    if contexts:
        lines[0] += f"  ({contexts[0]})"
        lines[1] += f"  ({contexts[1]})"
    cov = ", ".join(f"{src} {c.matched} matched" + (
        f" ({c.only_a} only in A, {c.only_b} only in B)" if c.only_a or c.only_b else "")
        for src, c in cmp.coverage.items())
    if cov:
        lines.append(f"items: {cov}")
    total = sum(cmp.compared.values())
    lines.append(f"compared {total:,} values, by kind:")
    for kind in KINDS:
        if cmp.compared.get(kind):
            lines.append(f"  {kind:<12}{cmp.compared[kind]:>9,}   {tol.describe(kind)}")
    lines.append(f"  ignored     {cmp.ignored:>9,}   keys that are not results "
                 f"({', '.join(sorted(IGNORED_KEYS)[:6])}, ...)"
                 + (f" and {', '.join(cmp.ignore)}" if cmp.ignore else ""))
    if cmp.differences:
        groups = cmp.by_field()
        lines.append(f"differences beyond tolerance: {len(cmp.differences):,}, by source, "
                     "kind and key (the largest groups):")
        for source, kind, key, count, excess in groups[:max(show // 2, 5)]:
            worst = "" if excess == float("inf") else f"  up to {excess:.3g}x the allowed"
            lines.append(f"  {count:>7,}  {source:<12}{kind:<12}{key}{worst}")
        if len(groups) > max(show // 2, 5):
            lines.append(f"  ... {len(groups) - max(show // 2, 5)} more groups")
        shown = cmp.worst(show)
        if shown:
            lines.append(f"the first {len(shown)}, worst first (items missing, decisions, "
                         "numbers by how far beyond, keys missing):")
            lines += [_difference_line(d) for d in shown]
    if cmp.backtest:
        agree = sum(m.agree for m in cmp.backtest)
        lines.append(f"backtest: {agree} of {len(cmp.backtest)} method MAEs agree within "
                     "their own error")
    if cmp.conclusion_changes:
        lines.append(f"conclusions that changed: {len(cmp.conclusion_changes)}:")
        for c in cmp.conclusion_changes[:show]:
            detail = f"  ({c.detail})" if c.detail else ""
            lines.append(f"  {c.path}: {c.what}: A {c.a}, B {c.b}{detail}")
    if cmp.numbers_agree:
        lines.append(f"numbers: AGREE, all {total:,} within tolerance")
    else:
        lines.append(f"numbers: DIFFER, {len(cmp.differences):,} beyond tolerance")
    if not cmp.conclusions_compared:
        lines.append("conclusions: none to compare (no statistics.json or backtest on "
                     "both sides)")
    elif cmp.conclusions_agree:
        lines.append(f"conclusions: AGREE, all {cmp.conclusions_compared:,} the same")
    else:
        lines.append(f"conclusions: DIFFER, {len(cmp.conclusion_changes):,} of "
                     f"{cmp.conclusions_compared:,} changed")
    return lines


def main(argv: list[str] | None = None, prog: str | None = "toposig compare") -> int:
    """Compare results folders A and B; 0 when they agree, 1 when not, 2 on bad input."""
    try:
        args = build_parser(prog).parse_args(argv)
    except SystemExit as exc:  # --help (0) or an argparse error (2, message printed)
        return int(exc.code or 0)
    started = time.perf_counter()
    try:
        tol = Tolerances(args.rtol, args.atol, args.count_tol, args.count_rtol,
                         args.corr_tol, args.alpha, args.disc_rtol)
        if args.show < 0:
            raise ValueError(f"--show must be >= 0, not {args.show}")
        a, b = _load(args.a), _load(args.b)
    except (NotAResultsFolderError, DamagedResultsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    a_folder = not isinstance(a, (dict, list))
    if a_folder != (not isinstance(b, (dict, list))):
        print("error: compare two results folders or two JSON files, not one of each",
              file=sys.stderr)
        return 2
    if a_folder:
        cmp = compare_results(a, b, tol, args.ignore)
        contexts = (_context(a.config), _context(b.config))
    else:
        cmp = compare_documents(a, b, Path(args.a).stem, tol, ignore=args.ignore)
        contexts = None
    print("\n".join(report_lines(cmp, args.a, args.b, args.show, contexts)))
    if args.json:
        try:
            atomic_write_json(Path(args.json), {"a": args.a, "b": args.b, **cmp.to_dict()},
                              root=Path(args.json).parent)
        except (OSError, ValueError) as exc:
            print(f"error: cannot write {args.json}: {exc}", file=sys.stderr)
            return 2
        print(f"comparison: {args.json}")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0 if cmp.agree else 1


if __name__ == "__main__":
    from toposig.cli.process import run_command

    sys.exit(run_command(main))
