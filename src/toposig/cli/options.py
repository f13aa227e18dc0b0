"""Command-line options shared by the stage scripts, and logging setup."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable

from toposig.config import EXECUTOR_CHOICES, RunSettings, SettingsError
from toposig.families import registry
from toposig.families.base import SignatureFamily
from toposig.records import Family
from toposig.sources.checkpoint_files import CHECKPOINT_SUFFIXES
from toposig.sources.revisions import RevisionError, StepSelection, parse_selection


def input_errors() -> tuple[type[Exception], ...]:
    """What bad user input raises while a run is planned: reported as "error: ..." with
    exit status 2, before any work. (SettingsError and SeriesError are ValueErrors too.)
    A function, so that building a parser (``--help``) imports none of the sources."""
    from toposig.files.locks import FolderLockedError
    from toposig.sources.checkpoints import HubUnavailableError, SeriesError
    from toposig.sources.corpus import DataMissingError

    return (SettingsError, SeriesError, RevisionError, HubUnavailableError,
            DataMissingError, ValueError, FileNotFoundError, ImportError, FolderLockedError)


def _int_or_auto(value: str) -> int | str:
    return value if value == "auto" else int(value)


def check_seed(seed: int, option: str = "--seed") -> int:
    """``seed`` if it is a valid seed (an integer from 0 to 2**32 - 1, as numpy's and
    torch's generators take), for commands whose seed is not checked by settings.

    Raises:
        ValueError: otherwise, naming ``option`` with the message the settings give.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"{option} must be an integer from 0 to 2**32 - 1, got {seed!r}")
    return seed


def add_step_options(p: argparse.ArgumentParser,
                     group: argparse._ArgumentGroup | None = None) -> None:
    """Which checkpoints of each series: ``--steps``, ``--revisions``, ``--revision-pattern``
    (in ``group``, else in a group of their own)."""
    g = group or p.add_argument_group("checkpoints")
    g.add_argument("--steps", nargs="+", metavar="STEP", default=None,
                   help="training steps to analyse, whatever the revision naming: integers, "
                        "'all' (every checkpoint the series has) or 'seed' (the seed study's "
                        "19 Pythia steps). Default: on the Hub the seed's 19 steps when the "
                        "repository has them all, otherwise every revision; every checkpoint "
                        "of a local series")
    g.add_argument("--revisions", nargs="+", metavar="NAME", default=None,
                   help="Hub revisions (or local sub-folder names) to analyse, by name, "
                        "e.g. step1000-tokens4B ckpt_100 (instead of --steps)")
    g.add_argument("--revision-pattern", metavar="REGEX", default=None,
                   help="a regular expression matching a whole revision or sub-folder name "
                        "with one group for the step, tried before the built-in schemes "
                        "(step<N>, step<N>-tokens<M>, step_<N>k, ckpt_<N>, checkpoint-<N>, "
                        r"global_step<N>, iter_<N>), e.g. 'epoch\d+-step(\d+)'; names "
                        "longer than 255 characters are not tried, and a pattern that takes "
                        "over 2 s on a series' names (catastrophic backtracking) is refused")


def selection_from_args(args: argparse.Namespace) -> StepSelection:
    """The step selection the options ask for; raises RevisionError naming a bad value."""
    return parse_selection(args.steps, args.revisions, args.revision_pattern)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options every family of a run shares (:class:`toposig.config.RunSettings`:
    the texts, tokenizer, device, precision, seed, homology library and dimension)."""
    RunSettings.add_options(p)


def add_family_options(p: argparse.ArgumentParser) -> None:
    """Which signature families (``--signatures``), and each registered family's own
    options (derived from its settings fields:
    :meth:`toposig.config.Settings.add_options`), in registration order."""
    p.add_argument("--signatures", metavar="LIST", default=None,
                   help=f"comma-separated signature families: {', '.join(registry.names())}. "
                        f"Default: {' and '.join(registry.default_names())} for model "
                        "folders and Hub models, "
                        f"{' and '.join(registry.weights_only_names())} "
                        "only for plain checkpoint files "
                        f"({', '.join(CHECKPOINT_SUFFIXES)})")
    for cls in registry.families():
        cls.add_options(p)


def add_executor_options(p: argparse.ArgumentParser) -> None:
    """Where the checkpoints are analysed, and how Hub downloads are handled."""
    g = p.add_argument_group("execution")
    g.add_argument("--executor", choices=EXECUTOR_CHOICES, default="serial",
                   help="serial: one checkpoint after another in this process; ray: one Ray "
                        "task per checkpoint (pip install -r requirements-ray.txt) "
                        "(default: %(default)s)")
    g.add_argument("--ray-address", metavar="ADDRESS", default=None,
                   help="join this Ray cluster (e.g. auto, ray://head:10001) instead of "
                        "starting a local Ray instance")
    g.add_argument("--cpus-per-task", type=float, default=1.0,
                   help="CPUs each Ray task asks for; also its torch thread count "
                        "(default: %(default)s)")
    g.add_argument("--gpus-per-task", type=float, default=0.0,
                   help="GPUs each Ray task asks for; a fraction (0.25) lets small models "
                        "share a GPU; > 0 runs the tasks on CUDA (default: %(default)s)")
    g.add_argument("--evict", action="store_true",
                   help="delete a Hub checkpoint's downloaded files once its records are "
                        "written (files cached before the run are kept)")
    g.add_argument("--no-prefetch", action="store_true",
                   help="serial executor: do not download the next Hub checkpoint while the "
                        "current one is analysed")


def check_executor_options(args: argparse.Namespace) -> None:
    """Refuse Ray's options without ``--executor ray`` (imports nothing).

    Raises:
        ValueError: naming them.
    """
    if args.executor != "ray" and (args.ray_address or args.gpus_per_task
                                   or args.cpus_per_task != 1.0):
        raise ValueError("--ray-address, --cpus-per-task and --gpus-per-task apply to "
                         "--executor ray only")


def executor_from_args(args: argparse.Namespace):
    """The executor the options ask for; raises ValueError/ImportError before any work."""
    from toposig.run.executors import make_executor

    check_executor_options(args)
    return make_executor(args.executor, evict=args.evict, prefetch=not args.no_prefetch,
                         ray_address=args.ray_address, cpus_per_task=args.cpus_per_task,
                         gpus_per_task=args.gpus_per_task)


def family_settings_from_args(args: argparse.Namespace, run: RunSettings,
                              families: Iterable[str]) -> dict[Family, SignatureFamily]:
    """Each of ``families`` with its validated settings from the parsed options (and the
    ``run``'s where it takes them); no other family's are built.

    Raises:
        SettingsError: naming the option with a bad value.
    """
    return {f: registry.get(f).from_args(args, run) for f in registry.in_order(families)}


def signatures_from_args(args: argparse.Namespace) -> tuple[Family, ...] | None:
    return registry.parse_signatures(args.signatures)


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    """The run's validated settings; raises SettingsError naming a bad value."""
    return RunSettings.from_args(args)


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "httpcore", "urllib3", "filelock", "huggingface_hub", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
