"""Train one of the project's model suites: byte-level GPT-NeoX models on WikiText-2.

Writes <suite-dir>/<suite>/<model>/step<N>/ model folders (Hugging Face format, with the
tokenizer), a train_log.jsonl of per-step loss, gradient norm and learning rate per
model, and <suite-dir>/<suite>/config.json. Finished models are skipped; a killed run
resumes from its last checkpoint to the same final weights.

Presets are JSON files in src/toposig/presets/ (copy one and edit it, then pass its
path). With --measure-out, every checkpoint is also measured as it is saved, on the model
in memory (toposig.integrations' code path), into a results folder analyze_results.py
reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from toposig.cli.options import setup_logging
from toposig.cli.parser import CommandParser, help_text
from toposig.cli.run import interrupted_status, sigterm_as_interrupt
from toposig.defaults import preset_names

if TYPE_CHECKING:
    from toposig.model.presets import Task
    from toposig.model.training import OnCheckpoint

EXAMPLES = (
    "--preset tiny",
    "--preset tiny --measure-out results/live-tiny",
    "--preset my_suite.json --suite-dir /data/runs",
)


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    g = p.add_argument_group("the suite")
    g.add_argument("--preset", required=True,
                   help=f"a preset name ({', '.join(preset_names())}) or a JSON file of one")
    g.add_argument("--seeds", metavar="N", type=int, default=None,
                   help="with --preset: train N seeds of every model of the suite (an "
                        "ensemble, analysed across seeds), into <suite>-seeds<N>/ "
                        "(default: the preset's own number, 1 for most)")
    g.add_argument("--suite-dir", default="runs",
                   help="where suites are trained: <suite-dir>/<suite>/ (default: %(default)s)")
    m = p.add_argument_group("measuring while it trains")
    m.add_argument("--measure-out", metavar="FOLDER", default=None,
                   help="also measure each checkpoint as it is saved, in memory, into this "
                        "results folder (the live monitor's records, figure and signal)")
    m.add_argument("--measure-signatures", metavar="LIST", default="embedding,weights",
                   help="the families --measure-out measures (default: %(default)s)")
    m.add_argument("--measure-every", metavar="N", type=int, default=None,
                   help="with --measure-out, measure only the checkpoints at multiples of N "
                        "steps (and the last); default: every checkpoint")
    d = p.add_argument_group("display")
    d.add_argument("--no-progress", action="store_true", help="no progress bars")
    d.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def live_measurement(out: str, families, suite_dir: Path, final_step: int,
                     every: int | None = None) -> OnCheckpoint:
    """The trainer's checkpoint hook that measures each model in memory, one
    :class:`~toposig.live.monitor.TopologyMonitor` per model (labelled by its name), with
    the validation loss the checkpoint stores: every checkpoint, or with ``every`` those
    at multiples of it and the last.

    Raises:
        SettingsError: ``every`` below 1.
    """
    from toposig.checkpoint_steps import is_scheduled
    from toposig.config import SettingsError
    from toposig.live.monitor import TopologyMonitor
    from toposig.model.training import ModelSpec, byte_tokenizer

    if every is not None and every < 1:
        raise SettingsError(f"--measure-every must be at least 1, got {every}")

    monitors: dict[str, TopologyMonitor] = {}

    def on_checkpoint(spec: ModelSpec, model, step: int, info: dict) -> None:
        if every is not None and not is_scheduled(step, every, "regular") \
                and step != final_step:
            return
        if spec.name not in monitors:
            monitors[spec.name] = TopologyMonitor(
                byte_tokenizer(), out, families=families or None,
                label=spec.name, model_name=str(suite_dir / spec.name),
                command="toposig train --measure-out",
                # the suite's models are one study, and its training is deterministic
                # (the suite folder's settings are checked): a model trained again from
                # step 0 replaces its own records with the same numbers
                extend=True, overwrite=True)
        monitor = monitors[spec.name]
        monitor.measure(model, step, stored_loss=(info.get("val_loss"), "val_loss"),
                        final_step=final_step)
        if step == final_step:
            monitor.finish()

    return on_checkpoint


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``toposig train``: returns the exit status (0, 2 for bad input, 130 after Ctrl-C and
    143 after SIGTERM: the saved checkpoints are kept, and with ``--measure-out`` the
    measurements made so far with their aggregates)."""
    args = build_parser(prog).parse_args(argv)
    try:
        check_arguments(args)  # before torch loads: a mistyped value is said at once
    except ValueError as exc:  # SettingsError and TrainingConfigError among them
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.verbose)
    with sigterm_as_interrupt():
        try:
            return _main(args)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM
            print("\ninterrupted: every saved checkpoint is kept; rerun the same command to "
                  "resume from the last one", file=sys.stderr)
            return interrupted_status(exc)


def check_arguments(args: argparse.Namespace) -> None:
    """Check, without torch, the preset's file, ``--seeds`` and, with ``--measure-out``,
    the families and ``--measure-every`` (:func:`_main` checks them again, with the same
    messages, and the suite's settings).

    Raises:
        TrainingConfigError, SettingsError: naming the bad value.
    """
    from toposig.config import SettingsError
    from toposig.families.registry import parse_signatures
    from toposig.model.preset_file import check_seeds, read_preset

    read_preset(args.preset)
    check_seeds(args.seeds)
    if args.measure_out:
        parse_signatures(args.measure_signatures)
        if args.measure_every is not None and args.measure_every < 1:
            raise SettingsError(f"--measure-every must be at least 1, got {args.measure_every}")


def _main(args: argparse.Namespace) -> int:
    """:func:`main` once the options are parsed."""
    from toposig.config import SettingsError
    from toposig.families.registry import parse_signatures
    from toposig.files.atomic import LinkedFolderError
    from toposig.files.locks import FolderLockedError, UnusableFolderError
    from toposig.live.monitor import LIVE_DIR, LiveRunExistsError
    from toposig.model.presets import load_preset
    from toposig.model.training import (
        SuiteConfig,
        TrainingConfigError,
        train_suite,
        with_seeds,
    )
    from toposig.run.study import StudyMismatchError
    from toposig.sources.corpus import DataMissingError

    try:
        config = with_seeds(load_preset(args.preset), args.seeds)
        if not isinstance(config, SuiteConfig):  # a positive-control task
            return _train_task(config, args)
        measure = None
        if args.measure_out:
            measure = live_measurement(args.measure_out,
                                       parse_signatures(args.measure_signatures),
                                       Path(args.suite_dir) / config.name, config.steps,
                                       every=args.measure_every)
        suite_dir, results = train_suite(config, args.suite_dir, progress=not args.no_progress,
                                         on_checkpoint=measure)
    except (TrainingConfigError, DataMissingError, FolderLockedError, SettingsError,
            LiveRunExistsError, StudyMismatchError, LinkedFolderError,
            UnusableFolderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a write the system refused: a full disk, a read-only folder
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"suite {config.name}: {suite_dir}")
    print(f"{'model':<20} {'parameters':>10} {'checkpoints':>11} {'final val loss':>15} "
          f"{'trained':>10}")
    for r in results:
        trained = "before" if r.skipped else f"{r.seconds:.0f} s"
        print(f"{r.name:<20} {r.num_parameters:>10,} {len(r.checkpoints):>11} "
              f"{r.final_val_loss:>15.4f} {trained:>10}")
    if args.measure_out:
        print(f"measured in memory: {args.measure_out} (figures: "
              f"{Path(args.measure_out) / LIVE_DIR}/<model>/topology.png; next: python "
              f"src/analyze_results.py --out {args.measure_out})")
    print(f"next: python src/run_experiments.py --models {suite_dir}/*  "
          f"(or --preset {args.preset}, which trains and analyses in one go)")
    return 0



def _train_task(config: Task, args: argparse.Namespace) -> int:
    """``train`` of a positive-control task preset (``grokking``, ``induction``)."""
    from toposig.model.training import INPUTS_FILE, TrainingConfigError

    if args.measure_out:
        raise TrainingConfigError(f"--measure-out measures a suite of language models while "
                                  f"it trains; --preset {args.preset} is a task: train it, "
                                  f"then run python src/run_experiments.py --preset "
                                  f"{args.preset}")
    suite_dir, results = config.train(args.suite_dir, progress=not args.no_progress)
    signal = config.SIGNAL
    print(f"suite {config.name}: {suite_dir}")
    print(f"{'run':<24} {'seed':>5} {'parameters':>10} {'checkpoints':>11} "
          f"{'final ' + signal:>24}")
    for r in results:
        print(f"{r['name']:<24} {r['seed']:>5} {r['num_parameters']:>10,} "
              f"{len(r['checkpoints']):>11} {r['final_' + signal]:>24.3f}")
    print(f"next: python src/run_experiments.py --preset {args.preset} (measures every "
          f"checkpoint on the task's inputs, {suite_dir / INPUTS_FILE})")
    return 0
