"""Stage for one checkpoint: hidden states, loss, PCA, persistent homology, spectral features.

Loads the checkpoint once, runs one batched forward pass over the texts, and prints the
record as JSON. With --out the record and its diagrams are also stored exactly as
run_experiments.py stores them (so a later run over the series skips this checkpoint).
The options are run_experiments.py's: --models and --steps (or --revisions) name the one
checkpoint (the older --model, --step and --revision still work, with a warning).
"""

from __future__ import annotations

import json
import sys

from toposig.cli.options import (
    add_run_options,
    add_step_options,
    input_errors,
    selection_from_args,
    settings_from_args,
    setup_logging,
)
from toposig.cli.parser import CommandParser, add_deprecated, help_text
from toposig.families.embedding import EmbeddingFamily

EXAMPLES = (
    "--models path/to/run/step1000",
    "--models path/to/run --steps 1000 --layers all",
    "--models path/to/run --steps 1000 --out results/my-run",
    "--models EleutherAI/pythia-70m --steps 143000",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    g = p.add_argument_group("the checkpoint")
    g.add_argument("--models", nargs="+", metavar="MODEL",
                   help="one model: a model folder, a local series folder (with --steps), "
                        "or a Hub id (with --steps)")
    add_deprecated(p, "--model", "--models")
    add_step_options(p, group=g)
    add_deprecated(p, "--step", "--steps")
    add_deprecated(p, "--revision", "--revisions")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None, metavar="FOLDER",
                   help="also store the record in this results folder, as a run would")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_run_options(p)
    EmbeddingFamily.add_options(p)
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    from toposig.sources.checkpoints import SeriesError, check_model_name

    try:  # before torch loads: said at once
        settings = settings_from_args(args)
        embedding = EmbeddingFamily.from_args(args, settings)
        if not args.models:
            raise ValueError("--models is required: the model folder, series folder or "
                             "Hub id of the checkpoint")
        if len(args.models) != 1:
            raise ValueError(f"extract measures one checkpoint; --models names "
                             f"{len(args.models)} ({' '.join(args.models)}): use "
                             "toposig run for several")
        selection = selection_from_args(args)
        check_model_name(args.models[0])
    except input_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.verbose)
    from toposig.config import SettingsError
    from toposig.model.embedding import analyse_checkpoint
    from toposig.run.plan import plan_run
    from toposig.run.store import DamagedResultsError, ResultStore, clean_floats

    try:
        plan = plan_run(args.models, selection, settings,
                        signatures=(embedding.family,),
                        family_settings={embedding.name: embedding})
        if len(plan.checkpoints) != 1:
            steps = [c.step for c in plan.checkpoints]
            raise SeriesError(f"{args.models[0]!r} is a series of {len(steps)} checkpoints "
                              f"(steps {steps}); choose one with --steps")
    except input_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ckpt = plan.checkpoints[0]
    try:
        result = analyse_checkpoint(ckpt, plan.texts, embedding, run=settings,
                                    placement=plan.placement,
                                    local_files_only=plan.local_files_only)
    except SettingsError as exc:  # --layers names an index the model does not have
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = result.record
    if args.out:
        store = ResultStore(args.out, plan.hash_of(embedding.name))
        try:
            record = store.write(record, ckpt, result.arrays)
        except (DamagedResultsError, OSError) as exc:  # a link or a folder in the way,
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""  # full disk
            print(f"error: {where}{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
    print(json.dumps(clean_floats(record), indent=2))
    return 0

