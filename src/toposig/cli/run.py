"""Stage 1: models x checkpoints -> one record per checkpoint and signature family.

Four signature families: ``embedding`` (persistent homology and spectral geometry of the
hidden states on WikiText-2, plus perplexity), ``weights`` (neural persistence and
weight-row homology of every linear layer), ``landscape`` (top Hessian eigenvalues, the
Hessian trace and the merge tree of the loss surface around the checkpoint) and
``gradients`` (homology of per-example gradients). Model folders and Hub models get the
first two by default, plain PyTorch checkpoint files the weights; ``--signatures``
chooses (e.g. ``--signatures embedding,weights,landscape,gradients``).

The offline default, which runs anywhere: ``--preset tiny`` trains the project's own
small suite (if it is not trained yet) and analyses every checkpoint of it.

With no arguments this is experiment A: Pythia 70m/160m/410m from the Hugging Face Hub
at the seed's 19 steps (write it to its own folder: --out results/pythia). Point it at a
local training run with ``--models path/to/run``: a folder of step<N>/ or
checkpoint-<N>/ model folders, or a folder of checkpoint files with the step in each name
(step_000100.pt, ckpt-100.pt, epoch=3-step=100.ckpt, *.safetensors).

A results folder (--out) holds one study: a run that brings models or settings other
than the folder's is refused with a message (--extend adds models, or --layers). A rerun
skips finished checkpoints (--force recomputes); a failed checkpoint is recorded with its
error and the run goes on, exiting non-zero at the end.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from toposig.cli.options import (
    add_executor_options,
    add_family_options,
    add_run_options,
    add_step_options,
    check_executor_options,
    executor_from_args,
    family_settings_from_args,
    input_errors,
    selection_from_args,
    settings_from_args,
    setup_logging,
    signatures_from_args,
)
from toposig.cli.parser import CommandParser, help_text
from toposig.defaults import EXPERIMENT_A_MODELS, preset_names

if TYPE_CHECKING:
    from toposig.config import RunSettings

EXAMPLES = (
    "--preset tiny --out results/tiny",
    "--models runs/my-run --out results/my-run",
    "--models EleutherAI/pythia-70m --steps 1000 143000 --out results/pythia --dry-run",
    "--models runs/my-run --signatures weights --out results/my-run-weights",
)

logger = logging.getLogger("run_experiments")


def build_parser(prog: str | None = None) -> CommandParser:
    p = CommandParser(prog, help_text(__doc__, prog), EXAMPLES)
    m = p.add_argument_group("models")
    m.add_argument("--models", nargs="+", metavar="MODEL", default=None,
                   help="Hub ids (EleutherAI/pythia-70m) or local paths: a folder of "
                        "step<N>/ or checkpoint-<N>/ model folders is a series, a single "
                        "model folder a series of one; a folder of checkpoint files "
                        "(.pt/.pth/.bin/.ckpt/.safetensors state dicts, step in each name) "
                        "or one such file is a weights-only series "
                        f"(default: {' '.join(EXPERIMENT_A_MODELS)})")
    m.add_argument("--seeds", metavar="N", type=int, default=None,
                   help="with --preset: train N seeds of every model of the suite (an "
                        "ensemble, analysed across seeds), into <suite>-seeds<N>/ "
                        "(default: the preset's own number, 1 for most)")
    m.add_argument("--preset", metavar="NAME_OR_PATH", default=None,
                   help="train (if needed) and analyse one of the project's model suites: "
                        f"{', '.join(preset_names())} (shipped in toposig/presets/), or a "
                        "JSON file of one; trains into --suite-dir")
    m.add_argument("--suite-dir", default="runs",
                   help="where --preset suites are trained, relative to the current "
                        "folder (default: %(default)s)")
    add_step_options(p)
    o = p.add_argument_group("results folder")
    o.add_argument("--out", "--results", dest="out", default="results", metavar="FOLDER",
                   help="results folder: records/, data/ (--results is the same option, "
                        "as the analysis also accepts --out); it holds one study, so give "
                        "your own runs their own folder, e.g. results/my-run (default: "
                        "%(default)s in the current folder; in a checkout, the committed "
                        "reference run)")
    o.add_argument("--extend", action="store_true",
                   help="add models the study in --out does not hold yet (same settings), "
                        "or hidden-state layers (--layers) to its embedding: the study then "
                        "has the union, computed for every checkpoint it holds")
    o.add_argument("--force", action="store_true",
                   help="recompute checkpoints that already have a finished record")
    o.add_argument("--dry-run", action="store_true",
                   help="print the plan (models x checkpoints x families, how many are done "
                        "already and skipped) and a rough time estimate, then stop: no model "
                        "is loaded or trained, nothing is written")
    d = p.add_argument_group("display")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_run_options(p)
    add_family_options(p)
    add_executor_options(p)
    return p


# Options that change how a run shows itself, not what it computes: left out of the
# command config.json records.
DISPLAY_OPTIONS = ("--no-progress", "-v", "--verbose")


def recorded_command(argv: list[str], prog: str | None = None) -> str:
    """The command line as config.json records it: ``python src/run_experiments.py`` (or
    ``prog``, such as ``toposig run``) and the options, display options left out."""
    kept = [a for a in argv if a not in DISPLAY_OPTIONS]
    head = shlex.split(prog) if prog else ["python", "src/run_experiments.py"]
    return shlex.join([*head, *kept])


class Terminated(KeyboardInterrupt):
    """SIGTERM received while :func:`sigterm_as_interrupt` is in force: a
    :class:`KeyboardInterrupt`, so every ``finally`` and ``except KeyboardInterrupt`` that
    cleans up after Ctrl-C cleans up after ``kill``, a job scheduler or a container stop."""


INTERRUPTED = ("\ninterrupted: every finished checkpoint is saved; rerun the same command "
               "to continue")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the duration of the block, SIGTERM raises :class:`Terminated` in the main thread
    (as Ctrl-C raises :class:`KeyboardInterrupt`), so that a run's ``finally`` blocks run:
    the pipeline rewrites the aggregates from the records finished so far and the folder's
    lock is released. The previous handler is restored afterwards. Outside the main thread
    (where Python cannot set handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame) -> None:
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:  # None: a handler not set from Python; the default is the closest to it
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def interrupted_status(exc: KeyboardInterrupt) -> int:
    """The exit status of an interrupted command, as a shell reports a process that a
    signal stopped: 143 (128 + SIGTERM) for :class:`Terminated`, else 130 (128 + SIGINT)."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``toposig run``: returns the exit status (0, 1 when a checkpoint failed, 2 for bad
    input, 130 after Ctrl-C and 143 after SIGTERM, both with the finished records saved
    and the aggregates rewritten)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(prog).parse_args(argv)
    try:
        checked = check_arguments(args)  # before torch loads: a mistyped value is said at once
    except input_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.verbose)
    with sigterm_as_interrupt():
        try:
            return _main(args, argv, prog, checked)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM, e.g. while a suite trains
            print(INTERRUPTED, file=sys.stderr)
            return interrupted_status(exc)


def check_arguments(args: argparse.Namespace) -> tuple[RunSettings, dict]:
    """Check what the options say that can be checked without torch, the Hub client or
    the analysis (each in well under a second): the preset's file and ``--seeds``, the run
    and family settings, the steps asked for, the executor's options, and that each
    ``--models`` path exists (or can be a Hub id). :func:`_main` checks it all again, with
    the same messages, and what needs the models themselves.

    Returns:
        The run's settings and each requested family's, built once: :func:`_main` uses
        them (a task's inputs, known only once its suite is written, build them again).

    Raises:
        One of :func:`~toposig.cli.options.input_errors`, naming the bad value.
    """
    from toposig.families.registry import default_names, weights_only_names
    from toposig.model.preset_file import check_seeds, read_preset
    from toposig.sources.checkpoints import check_model_name

    task = None
    if args.preset:
        task = read_preset(args.preset).get("task")
        check_seeds(args.seeds)
    settings = settings_from_args(args)
    signatures = signatures_from_args(args)
    requested = signatures or (default_names() if args.preset
                               else (*default_names(), *weights_only_names()))
    if task is not None and args.texts is not None:
        raise ValueError(f"--preset {args.preset} measures the task's own inputs "
                         "(inputs.txt of its suite folder); leave out --texts")
    given = family_settings_from_args(args, settings, requested)  # no family reads the texts
    check_executor_options(args)
    if args.seeds is not None and not args.preset:
        raise ValueError("--seeds trains an ensemble of a --preset suite; without "
                         "--preset there is nothing to train")
    if args.preset and args.models:
        raise ValueError("--preset trains and analyses its own models; leave out --models")
    selection_from_args(args)
    for model in args.models or ():
        check_model_name(model)
    return settings, given


def _main(args: argparse.Namespace, argv: list[str], prog: str | None,
          checked: tuple[RunSettings, dict]) -> int:
    """:func:`main` once the options are parsed and checked (``checked``: the settings
    :func:`check_arguments` built)."""
    from toposig.families.llc import LLCFamily
    from toposig.families.registry import default_names, weights_only_names
    from toposig.families.weights import WeightsFamily
    from toposig.files.locks import exclusive
    from toposig.in_memory import measure_inputs
    from toposig.model.placement import Placement
    from toposig.model.presets import is_task, load_preset, run_names, train_preset
    from toposig.model.training import with_seeds
    from toposig.records import Family
    from toposig.run.plan import plan_run, reconcile
    from toposig.run.store import read_json
    from toposig.run.study import Study

    lock = ExitStack()
    study = None  # the folder's study, when read here (before a suite trains)
    try:
        preset = with_seeds(load_preset(args.preset), args.seeds) if args.preset else None
        settings, given = checked
        signatures = signatures_from_args(args)
        requested = signatures or (default_names() if args.preset
                                   else (*default_names(), *weights_only_names()))
        if is_task(preset):  # a task: measured on its own inputs
            if args.texts is not None:
                raise ValueError(f"--preset {args.preset} measures the task's own inputs "
                                 "(inputs.txt of its suite folder); leave out --texts")
            if not args.dry_run:  # which writes nothing
                settings = replace(settings, texts=str(preset.write_inputs(
                    Path(args.suite_dir) / preset.name)), n_texts=preset.n_texts)
                given = family_settings_from_args(args, settings, requested)
        weights = given.get(WeightsFamily.name)
        if is_task(preset) and weights is not None and not (weights.include
                                                            or weights.exclude):
            given[Family(WeightsFamily.name)] = replace(  # the task's own exclusions
                weights, exclude=tuple(preset.WEIGHT_EXCLUDE))
        llc = given.get(LLCFamily.name)
        if is_task(preset) and llc is not None and llc.texts_file is None:
            # the loss the task trains on, on its own lines, unless --llc-texts says
            # otherwise (an --llc-objective of its own is kept)
            own = preset.llc_settings(Path(args.suite_dir) / preset.name)
            if own is not None:  # a setting given on the command line is kept
                default = LLCFamily()
                own = {k: v for k, v in own.items()
                       if getattr(llc, k) == getattr(default, k)}
                given[Family(LLCFamily.name)] = replace(llc, **own)
        executor = executor_from_args(args)
        models, suite_dir = args.models, None
        remote_gpus = args.executor == "ray" and args.gpus_per_task > 0
        if args.seeds is not None and not args.preset:
            raise ValueError("--seeds trains an ensemble of a --preset suite; without "
                             "--preset there is nothing to train")
        if args.preset:
            if args.models:
                raise ValueError("--preset trains and analyses its own models; "
                                 "leave out --models")
            if args.dry_run:
                return _dry_run_preset(args, preset, requested)
            suite = preset
            names = run_names(suite)  # every seed of every model
            families = set(requested)
            lock.enter_context(exclusive(args.out, "results folder"))  # before training
            placement = Placement.resolve(settings.device, settings.dtype, remote_gpus)
            study = Study.load(args.out)  # read once, reconciled before training
            terms = reconcile(
                study, {n: str(Path(args.suite_dir) / suite.name / n) for n in names},
                {n: "local" for n in names}, measure_inputs(settings, None, families, given),
                placement.dtype, extend=args.extend)
            given = dict(terms.inputs.families)  # --extend may have widened them
            suite_dir = train_preset(suite, args.suite_dir, progress=not args.no_progress)
            models = [str(suite_dir / n) for n in names]
        plan = plan_run(models, selection_from_args(args), settings, signatures,
                        remote_gpus=remote_gpus, family_settings=given)
        if suite_dir is not None:
            plan.suite = read_json(suite_dir / "config.json")
            plan.apply(terms)
            plan.check_cover(study, terms.replaces)  # the suite's steps are known now
        elif args.dry_run:
            return _dry_run(plan, args)
        else:
            lock.enter_context(exclusive(args.out, "results folder"))
        plan.command = recorded_command(argv, prog)
    except input_errors() as exc:
        lock.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BaseException:  # Ctrl-C or SIGTERM while a suite trains: the lock goes too
        lock.close()
        raise
    with lock:
        return _run(plan, args, executor, prog, study)


def _dry_run(plan, args: argparse.Namespace) -> int:
    """``--dry-run``: print the plan of a checked run and its estimate; 0. The results
    folder is read, not locked or written."""
    from toposig.run.estimate import outline_lines
    from toposig.run.pipeline import outline
    from toposig.run.store import DamagedResultsError
    from toposig.run.study import StudyMismatchError

    try:
        shape = outline(plan, args.out, force=args.force, extend=args.extend)
    except (StudyMismatchError, DamagedResultsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(outline_lines(shape)))
    print("dry run: nothing was loaded or written; run the same command without --dry-run "
          "to start")
    return 0


def _dry_run_preset(args: argparse.Namespace, preset, requested) -> int:
    """``--dry-run`` with ``--preset``: the plan from the preset's own schedule (its runs
    and checkpoint steps), whether each run is trained already, and the estimate of
    measuring them; nothing is trained, loaded or written."""
    from toposig.checkpoint_steps import scheduled_steps
    from toposig.model.presets import run_names
    from toposig.model.training import DONE_FILE
    from toposig.run.estimate import RunOutline, outline_lines

    names = run_names(preset)
    suite = Path(args.suite_dir) / preset.name
    n = len(scheduled_steps(preset.steps, preset.checkpoint_every,
                            getattr(preset, "schedule", "regular")))
    untrained = [name for name in names if not (suite / name / DONE_FILE).is_file()]
    families = dict.fromkeys(map(str, requested), n * len(names))
    shape = RunOutline(dict.fromkeys(names, n), families, dict(families), out=args.out,
                       note=(f"first trains {len(untrained)} of {len(names)} run(s) into "
                             f"{suite} (not in the estimate)" if untrained else
                             f"trained already in {suite}")
                       + f"; checkpoints with records in {args.out} are skipped",
                       done_known=False)
    print("\n".join(outline_lines(shape)))
    print("dry run: nothing was trained, loaded or written; run the same command without "
          "--dry-run to start")
    return 0


def _run(plan, args: argparse.Namespace, executor, prog: str | None = None,
         study=None) -> int:
    """Execute a checked plan while the results folder is locked (``study``: the
    folder's, when the plan was reconciled with it already)."""
    from toposig.files.atomic import LinkedFolderError
    from toposig.run.estimate import outline_lines
    from toposig.run.pipeline import execute, summary_lines
    from toposig.run.store import DamagedResultsError
    from toposig.run.study import StudyMismatchError

    def announce(outline) -> None:
        print("\n".join(outline_lines(outline)), flush=True)

    try:
        outcome = execute(plan, args.out, force=args.force, progress=not args.no_progress,
                          executor=executor, extend=args.extend, study=study,
                          announce=announce)
    except KeyboardInterrupt as exc:  # the aggregates were rewritten on the way out
        print(INTERRUPTED, file=sys.stderr)
        return interrupted_status(exc)
    except (StudyMismatchError, DamagedResultsError, LinkedFolderError) as exc:
        # found once the records were read, or a folder of --out that is not written
        # through (a link planted there)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a write the system refused: a full disk, a read-only folder
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc} (every finished record is kept; free "
              "the space or fix the folder and run the same command again)", file=sys.stderr)
        return 2
    analyze = "toposig analyze" if prog else "python src/analyze_results.py"
    print("\n".join(summary_lines(plan, outcome, args.out, analyze)))
    return 1 if outcome.failures else 0

