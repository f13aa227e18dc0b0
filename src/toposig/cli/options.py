"""Command-line options shared by the stage scripts, and logging setup."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from toposig.config import (
    DTYPE_CHOICES,
    EXECUTOR_CHOICES,
    LAYER_CHOICES,
    PH_BACKEND_CHOICES,
    EmbeddingSettings,
    SettingsError,
    parse_signatures,
)
from toposig.records import FAMILIES, Family
from toposig.sources.checkpoint_files import CHECKPOINT_SUFFIXES
from toposig.sources.revisions import RevisionError, StepSelection, parse_selection
from toposig.stages.registry import DEFAULT_STAGES, STAGES

_DEFAULTS = EmbeddingSettings()


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


def add_embedding_options(p: argparse.ArgumentParser) -> None:
    """Options that define what the embedding stage computes (see EmbeddingSettings)."""
    g = p.add_argument_group("embedding stage")
    g.add_argument("--texts", metavar="PATH", default=None,
                   help="plain-text UTF-8 file, one text per non-empty line (lines end at "
                        "\\n only; only the lines used are read, each text cut to "
                        "100,000 characters), instead of WikiText-2 validation (default: "
                        "WikiText-2)")
    g.add_argument("--n-texts", type=int, default=_DEFAULTS.n_texts,
                   help="number of texts = points of the cloud (default: %(default)s)")
    g.add_argument("--min-chars", type=int, default=_DEFAULTS.min_chars,
                   help="skip WikiText rows shorter than this after strip (default: %(default)s)")
    g.add_argument("--max-length", type=int, default=_DEFAULTS.max_length,
                   help="tokens per text after truncation (default: %(default)s)")
    g.add_argument("--tokenizer", metavar="NAME_OR_PATH", default=None,
                   help="tokenizer to use instead of each checkpoint's own: a Hub name, a "
                        "folder, or a tokenizer.json file")
    g.add_argument("--layers", metavar="|".join((*LAYER_CHOICES, "I,J,...")),
                   default=_DEFAULTS.layers,
                   help="analyse the last hidden state, every hidden state the model "
                        "returns (for most, the embedding output and every block; records "
                        "name them in layer_names), or the hidden states of these indices, "
                        "e.g. 0,3,-1 (negative ones count from the end, -1 is the last; "
                        "one that starts the list needs --layers=-2,-1) "
                        "(default: %(default)s)")
    g.add_argument("--pca-dim", type=int, default=_DEFAULTS.pca_dim,
                   help="PCA components before persistent homology (default: %(default)s)")
    g.add_argument("--maxdim", type=int, default=_DEFAULTS.maxdim,
                   help="highest homology dimension (default: %(default)s)")
    g.add_argument("--ph-backend", choices=PH_BACKEND_CHOICES, default=_DEFAULTS.ph_backend,
                   help="Vietoris-Rips library; auto = fastest installed (default: %(default)s)")
    g.add_argument("--batch-size", type=_int_or_auto, default=_DEFAULTS.batch_size,
                   help="texts per forward batch, or auto: 32 on a CPU, on a GPU all texts "
                        "at once, halved on each out-of-memory error (default: %(default)s)")
    g.add_argument("--device", default=_DEFAULTS.device,
                   help="auto (CUDA if present), cpu, cuda, cuda:N or mps (default: %(default)s)")
    g.add_argument("--dtype", choices=DTYPE_CHOICES, default=_DEFAULTS.dtype,
                   help="model precision: a dtype the weights are cast to, or bf16-autocast "
                        "(fp32 weights, bf16 matrix products); auto = bf16-autocast on CUDA, "
                        "float32 otherwise (default: %(default)s)")
    g.add_argument("--seed", type=int, default=_DEFAULTS.seed,
                   help="seed for every random choice (default: %(default)s)")
    g.add_argument("--resamples", type=int, default=_DEFAULTS.resamples, metavar="B",
                   help="recompute the analysed layer's persistent-homology features on B "
                        "bootstrap resamples of the texts (seeded, the same at every "
                        "checkpoint) and keep their spread (default: %(default)s)")
    g.add_argument("--save-hidden", action="store_true",
                   help="also save the pooled hidden states of the analysed layers (.npz)")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow checkpoints to run their own Python code (off by default: "
                        "a checkpoint from elsewhere can carry code)")


def add_family_options(p: argparse.ArgumentParser) -> None:
    """Which signature families (``--signatures``), and each family's own options
    (:meth:`toposig.stages.base.Stage.add_options`, in registry order)."""
    p.add_argument("--signatures", metavar="LIST", default=None,
                   help=f"comma-separated signature families: {', '.join(FAMILIES)}. "
                        f"Default: {' and '.join(DEFAULT_STAGES)} for model folders and Hub "
                        "models, "
                        f"{' and '.join(f for f, s in STAGES.items() if not s.runs_model)} "
                        "only for plain checkpoint files "
                        f"({', '.join(CHECKPOINT_SUFFIXES)})")
    for stage in STAGES.values():
        stage.add_options(p)


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


def executor_from_args(args: argparse.Namespace):
    """The executor the options ask for; raises ValueError/ImportError before any work."""
    from toposig.run.executors import make_executor

    if args.executor != "ray" and (args.ray_address or args.gpus_per_task
                                   or args.cpus_per_task != 1.0):
        raise ValueError("--ray-address, --cpus-per-task and --gpus-per-task apply to "
                         "--executor ray only")
    return make_executor(args.executor, evict=args.evict, prefetch=not args.no_prefetch,
                         ray_address=args.ray_address, cpus_per_task=args.cpus_per_task,
                         gpus_per_task=args.gpus_per_task)


def family_settings_from_args(args: argparse.Namespace) -> dict[Family, Any]:
    """Family -> its validated settings, for the families whose settings have options of
    their own (the embedding's are :func:`settings_from_args`); raises SettingsError
    naming a bad value."""
    return {f: s for f, stage in STAGES.items()
            if (s := stage.settings_from_args(args)) is not None}


def signatures_from_args(args: argparse.Namespace) -> tuple[str, ...] | None:
    return parse_signatures(args.signatures)


def settings_from_args(args: argparse.Namespace) -> EmbeddingSettings:
    """Build validated settings; raises SettingsError naming a bad value."""
    return EmbeddingSettings(
        n_texts=args.n_texts, min_chars=args.min_chars, max_length=args.max_length,
        pca_dim=args.pca_dim, maxdim=args.maxdim, layers=args.layers,
        batch_size=args.batch_size, texts=args.texts, tokenizer=args.tokenizer,
        device=args.device, dtype=args.dtype, ph_backend=args.ph_backend, seed=args.seed,
        trust_remote_code=args.trust_remote_code, save_hidden=args.save_hidden,
        resamples=args.resamples,
    )


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
