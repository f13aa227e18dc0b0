"""Stage for one checkpoint: hidden states, loss, PCA, persistent homology, spectral features.

Loads the checkpoint once, runs one batched forward pass over the texts, and prints the
record as JSON. With --out the record and its diagrams are also stored exactly as
run_experiments.py stores them (so a later run over the series skips this checkpoint).

Examples:
  python src/extract_embeddings.py --model path/to/run/step1000
  python src/extract_embeddings.py --model path/to/run --step 1000 --layers all
  python src/extract_embeddings.py --model path/to/run --step 1000 --layers 0,3,-1
  python src/extract_embeddings.py --model EleutherAI/pythia-70m --step 143000
"""

from __future__ import annotations

import argparse
import json
import sys

from toposig.cli.options import (
    INPUT_ERRORS,
    add_embedding_options,
    help_text,
    settings_from_args,
    setup_logging,
)
from toposig.config import SettingsError
from toposig.model.embedding import analyse_checkpoint
from toposig.records import Family
from toposig.run.plan import plan_run
from toposig.run.store import DamagedResultsError, ResultStore, clean_floats
from toposig.sources.checkpoints import SeriesError
from toposig.sources.revisions import parse_selection


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description=help_text(__doc__, prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True,
                   help="a model folder, a local series folder (with --step), or a Hub id "
                        "(with --step)")
    p.add_argument("--step", default=None,
                   help="the training step, for a series folder or a Hub id")
    p.add_argument("--revision", default=None,
                   help="the revision (Hub branch or sub-folder name), instead of --step")
    p.add_argument("--revision-pattern", metavar="REGEX", default=None,
                   help="regular expression for revision names, one group for the step "
                        "(a pattern that takes over 2 s on the names is refused)")
    p.add_argument("--out", default=None,
                   help="also store the record under this results root")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_embedding_options(p)
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    try:
        settings = settings_from_args(args)
        selection = parse_selection([args.step] if args.step is not None else None,
                                    [args.revision] if args.revision else None,
                                    args.revision_pattern)
        plan = plan_run([args.model], selection, settings, signatures=(Family.EMBEDDING,))
        if len(plan.checkpoints) != 1:
            steps = [c.step for c in plan.checkpoints]
            raise SeriesError(f"{args.model!r} is a series of {len(steps)} checkpoints "
                              f"(steps {steps}); choose one with --step")
    except INPUT_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ckpt = plan.checkpoints[0]
    try:
        result = analyse_checkpoint(ckpt, plan.texts, settings, placement=plan.placement,
                                    local_files_only=plan.local_files_only)
    except SettingsError as exc:  # --layers names an index the model does not have
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = result.record
    if args.out:
        store = ResultStore(args.out, plan.hash_of(Family.EMBEDDING))
        try:
            record = store.write(record, ckpt, result.arrays)
        except (DamagedResultsError, OSError) as exc:  # a link or a folder in the way,
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""  # full disk
            print(f"error: {where}{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
    print(json.dumps(clean_floats(record), indent=2))
    return 0

