"""Train one of the project's model suites: byte-level GPT-NeoX models on WikiText-2.

Writes <suite-dir>/<suite>/<model>/step<N>/ model folders (Hugging Face format, with the
tokenizer), a train_log.jsonl of per-step loss, gradient norm and learning rate per
model, and <suite-dir>/<suite>/config.json. Finished models are skipped; a killed run
resumes from its last checkpoint to the same final weights.

Presets are JSON files in src/toposig/presets/ (copy one and edit it, then pass its path):
  python src/train_suite.py --preset tiny
  python src/train_suite.py --preset seed004
  python src/train_suite.py --preset my_suite.json --suite-dir /data/runs
"""

from __future__ import annotations

import argparse
import sys

from toposig.cli.options import setup_logging
from toposig.files.locks import FolderLockedError
from toposig.model.training import TrainingConfigError, load_suite_config, preset_names, train_suite
from toposig.sources.corpus import DataMissingError


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True,
                   help=f"a preset name ({', '.join(preset_names())}) or a JSON file of one")
    p.add_argument("--suite-dir", default="runs",
                   help="where suites are trained: <suite-dir>/<suite>/ (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    try:
        config = load_suite_config(args.preset)
        suite_dir, results = train_suite(config, args.suite_dir, progress=not args.no_progress)
    except (TrainingConfigError, DataMissingError, FolderLockedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"suite {config.name}: {suite_dir}")
    print(f"{'model':<20} {'parameters':>10} {'checkpoints':>11} {'final val loss':>15} "
          f"{'trained':>10}")
    for r in results:
        trained = "before" if r.skipped else f"{r.seconds:.0f} s"
        print(f"{r.name:<20} {r.num_parameters:>10,} {len(r.checkpoints):>11} "
              f"{r.final_val_loss:>15.4f} {trained:>10}")
    print(f"next: python src/run_experiments.py --models {suite_dir}/*  "
          f"(or --preset {args.preset}, which trains and analyses in one go)")
    return 0

