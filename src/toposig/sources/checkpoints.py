"""Checkpoint series behind one interface: Hub revisions and local model folders.

A *series* is a list of :class:`Checkpoint` of one model, ordered by training step.

- A Hugging Face Hub id (``EleutherAI/pythia-70m``) is a series of the repository's
  revisions (branches and tags, ``huggingface_hub.list_repo_refs``; from the local cache
  when the Hub cannot be reached), each mapped to a training step by
  :mod:`toposig.sources.revisions` (``step1000``, ``step1000-tokens4B``, ``ckpt_100``, ...).
- A local folder whose sub-folders hold models in Hugging Face format (what
  ``save_pretrained`` and the HF Trainer write) is a series; the same parser reads the
  steps from the sub-folder names.
- A single model folder (with ``config.json``) is a series of one.
- A plain PyTorch checkpoint file (``.pt``, ``.pth``, ``.bin``, ``.ckpt``,
  ``.safetensors``: a state dict, see :mod:`toposig.sources.checkpoint_files`) is a series of
  one, and a folder of them with the step in each name is a series. These carry weights
  only: the weight-space signatures apply, the embedding stage does not.

Models are loaded with ``from_pretrained`` whatever their origin; ``trust_remote_code``
is never set unless the caller asks, and ``transformers`` loads plain PyTorch weight
files with ``weights_only=True`` (safetensors preferred when both exist).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toposig.files.content_hash import content_fingerprint
from toposig.files.names import UnsafeNameError, series_labels
from toposig.records import GROUND_TRUTH, record_stem
from toposig.sources.checkpoint_files import (
    CHECKPOINT_SUFFIXES,
    discover_files,
    is_checkpoint_file,
    read_trainer_state,
    step_from_name,
    stored_step,
    trainer_state_ground_truth,
    trainer_state_seed,
)
from toposig.sources.revisions import (
    SEED_STEPS,
    Revision,
    RevisionError,
    StepSelection,
    parse_revision,
    parse_revisions,
    select,
)

logger = logging.getLogger(__name__)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "vocab.txt", "spiece.model")
MIN_VOCAB = 16  # transformers 5 builds an empty tokenizer from a bare config: refuse it
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")


RefLister = Callable[[str], Any]  # list_repo_refs: repo id -> object with .branches, .tags


class SeriesError(ValueError):
    """A model argument or step list cannot be turned into a checkpoint series."""


class HubUnavailableError(RuntimeError):
    """The Hub cannot be reached and the requested checkpoints are not cached.

    Attributes:
        repos: the Hub models concerned; reason: why the Hub could not be reached.
    """

    def __init__(self, message: str, repos: tuple[str, ...] = (), reason: str = ""):
        super().__init__(message)
        self.repos, self.reason = repos, reason

    @classmethod
    def listing(cls, repos: list[str], reason: str) -> HubUnavailableError:
        """No revision list for ``repos``: the Hub is unreachable and nothing is cached."""
        named = ", ".join(map(repr, repos))
        return cls(
            f"cannot reach the Hugging Face Hub ({reason}) to list the revisions of {named}, "
            "and the local Hugging Face cache holds none of them (offline, the list of "
            f"revisions comes from the cache).\n{local_advice(repos[0])}", tuple(repos), reason)


def local_advice(repo_id: str) -> str:
    """What to do when Hub checkpoints cannot be had: the end of every such message."""
    return ("Run on local checkpoints instead, for example:\n"
            "  python src/run_experiments.py --models path/to/run   "
            "# a folder of step<N>/ or checkpoint-<N>/ model folders\n"
            "or, on a machine that can reach the Hub, download them first "
            f"(hf download {repo_id} --revision step1000).")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of one model.

    Attributes:
        model: the model as the user named it (Hub id or local series folder).
        label: short unique name used for files (``pythia-70m``).
        step: training step, or ``None`` for a lone model folder without one.
        source: ``"hub"``, ``"local"`` (a model folder), ``"file"`` (a state-dict file) or
            ``"memory"`` (a model measured in memory, :func:`toposig.measure`).
        location: Hub id, model folder path or checkpoint file path.
        revision: Hub revision (``step1000``), ``None`` for local folders.
        local_path: where a Hub checkpoint's files were downloaded to (set by the
            pipeline's prefetching; not part of the checkpoint's identity).
    """

    model: str
    label: str
    step: int | None
    source: str
    location: str
    revision: str | None = None
    local_path: str | None = field(default=None, compare=False)

    @property
    def load_source(self) -> tuple[str, str | None]:
        """``(name_or_path, revision)`` to load from: the downloaded folder when there
        is one, else the location and revision."""
        return (self.local_path, None) if self.local_path else (self.location, self.revision)

    @property
    def stored_location(self) -> str:
        """Where a record says the checkpoint is (its ``location``): a local folder or
        file by its path relative to the model source, in POSIX form (``step100``,
        ``checkpoints/ckpt-100.pt``; ``.`` for the source itself), so that a record names
        no absolute path of the machine that measured it and stays true when the study
        moves; one outside its source (reached through a link) by its name alone. A Hub
        id or the in-memory marker as it is."""
        if self.source not in ("local", "file"):
            return self.location
        here = Path(self.location)
        try:
            return here.relative_to(Path(self.model).resolve()).as_posix()
        except ValueError:
            return here.name

    @property
    def name(self) -> str:
        """File stem of this checkpoint's records: ``step000100`` or ``final``."""
        return record_stem(self.step)

    def describe(self) -> str:
        where = f"@{self.revision}" if self.revision else ""
        step = "-" if self.step is None else self.step
        return f"{self.label} step {step} ({self.location}{where})"


def is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def checkpoints_in(folder: str | Path) -> str | None:
    """What kind of checkpoints ``folder`` holds, in words, or ``None``: a model folder, a
    folder of checkpoint folders (``step<N>/``...), or of checkpoint files. For messages
    to someone who gave a checkpoint folder where a results folder belongs."""
    path = Path(folder)
    if not path.is_dir():
        return None
    if is_model_folder(path) and not (path / "data").is_dir():
        return "a model folder (config.json and its weights)"
    try:
        children = sorted(path.iterdir())
    except OSError:
        return None
    if any(c.is_dir() and is_model_folder(c) and parse_revision(c.name) for c in children):
        return "a folder of checkpoints (step<N>/ model folders)"
    if any(c.is_file() and is_checkpoint_file(c) for c in children):
        return "a folder of checkpoint files"
    return None


# Hugging Face weight files (``save_pretrained``'s names, sharded or not)
_HF_WEIGHTS = re.compile(r"(model|pytorch_model|tf_model|flax_model)(-\d+-of-\d+)?"
                         r"\.(safetensors|bin|h5|msgpack)(\.index\.json)?")


def holds_hf_weights(path: Path) -> bool:
    """Whether a folder holds weights under the names ``save_pretrained`` gives."""
    return any(p.is_file() and _HF_WEIGHTS.fullmatch(p.name) for p in path.iterdir())


def _stepped_files(path: Path, selection: StepSelection) -> dict[int | None, Path]:
    """The checkpoint files of a folder whose config.json is their config, not a model's
    (no Hugging Face weights beside it): ``{}`` when it is a model folder after all."""
    if holds_hf_weights(path):
        return {}
    try:
        files = discover_files(path, selection.compiled)
    except ValueError:
        return {}
    return files


def discover_steps(folder: Path, pattern: re.Pattern[str] | None = None
                   ) -> tuple[list[Revision], dict[str, Path], list[str]]:
    """Sub-folders of ``folder`` that hold a model and whose name stands for a step.

    Returns:
        ``(revisions ordered by step, name -> folder, names of model folders that stand
        for no step)``.

    Raises:
        SeriesError: two sub-folders stand for the same step.
    """
    models, unparsed, empty = [], [], []
    for child in sorted(folder.iterdir()):
        if not child.is_dir() or child.name.startswith("."):
            continue
        parsed = parse_revision(child.name, pattern)
        if is_model_folder(child):
            (models if parsed else unparsed).append(child.name)
        elif parsed:
            empty.append(child.name)
    try:
        revisions = parse_revisions(models, pattern, where=f"local series {str(folder)!r}")
    except RevisionError as exc:
        raise SeriesError(str(exc)) from exc
    if revisions and empty:
        logger.warning("%s: %d sub-folder(s) named like checkpoints hold no config.json and "
                       "are left out: %s", folder, len(empty), ", ".join(empty[:5]))
    if revisions and unparsed:
        logger.warning("%s: %d model folder(s) stand for no training step and are left out "
                       "(--revision-pattern reads other names): %s", folder, len(unparsed),
                       ", ".join(unparsed[:5]))
    return revisions, {r.name: folder / r.name for r in revisions}, unparsed


def _label_of(model: str) -> str:
    return Path(model.rstrip("/")).name or model


def check_model_name(model: str) -> None:
    """Refuse a ``--models`` value that is no existing file or folder and cannot be a Hub
    id: a local path (it starts with '.', '/' or '~', or its parent folder exists here) or
    a name no Hub repository has, naming the nearest names beside it. Reads only the file
    system, so that a command checks its models before torch or the Hub client loads.

    Raises:
        SeriesError: naming ``model``.
    """
    path = Path(model).expanduser()
    if path.exists():
        return
    if model.startswith((".", "/", "~")) or (path.parent != Path(".")
                                              and path.parent.is_dir()):
        raise SeriesError(  # runs/nope: a mistyped local path, not a Hub repository
            f"no such folder: {model!r} (a local path: it starts with '.', '/' or '~', "
            "or its parent folder exists here; not a Hugging Face Hub id)"
            + _nearest(path))
    if not _HUB_ID_RE.match(model):
        raise SeriesError(
            f"model {model!r} is neither an existing local folder nor a Hugging Face "
            "Hub id (like EleutherAI/pythia-70m)" + _nearest(path)
        )


def resolve_series(model: str, selection: StepSelection | None = None, *,
                   list_refs: RefLister | None = None,
                   cache_dir: str | Path | None = None) -> list[Checkpoint]:
    """Turn one ``--models`` value and the step selection into a checkpoint series.

    Args:
        model: Hub id, local folder or checkpoint file.
        selection: ``--steps`` / ``--revisions`` / ``--revision-pattern``; ``None`` for the
            default: on the Hub the seed's 19 steps when the repository has them all
            (Pythia), otherwise every revision; every step found in a local folder.
        list_refs: lists a Hub repository's refs (``huggingface_hub.list_repo_refs`` when
            ``None``; a stand-in in the tests).
        cache_dir: the Hugging Face cache to list revisions from when the Hub cannot be
            reached (the default cache when ``None``).

    Raises:
        SeriesError: not a folder nor a valid Hub id; a folder with no model; steps or
            revisions asked for that the series does not have.
        HubUnavailableError: the Hub cannot be reached and its cache holds no revision.
    """
    selection = selection or StepSelection()
    label = _label_of(model)
    path = Path(model).expanduser()
    try:
        if path.is_file():
            return _file_series(model, path, selection)
        if path.exists():
            return _local_series(model, label, path, selection)
        check_model_name(model)
        names, origin = hub_revision_names(model, list_refs=list_refs, cache_dir=cache_dir)
        where = f"Hub model {model!r}" + (" (its revisions in the local cache: the Hub "
                                          "cannot be reached)" if origin == "cache" else "")
        available = parse_revisions(names, selection.compiled, where=where)
        unparsed = sorted(set(names) - {r.name for r in available})
        chosen = select(available, selection, where, default_schedule=SEED_STEPS,
                        unparsed=unparsed)
    except RevisionError as exc:
        raise SeriesError(str(exc)) from exc
    return [Checkpoint(model, label, r.step, "hub", model, revision=r.name) for r in chosen]


def _nearest(path: Path) -> str:
    """``"; the nearest names there: ..."`` for a path that does not exist, from the
    entries of its nearest existing parent folder ("" when none is close)."""
    import difflib

    parent = path.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    try:
        names = sorted(p.name for p in parent.iterdir() if not p.name.startswith("."))
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.5)
    return f"; the nearest names in {str(parent)!r}: {', '.join(close)}" if close else ""


def _local_series(model: str, label: str, path: Path, selection: StepSelection
                  ) -> list[Checkpoint]:
    if is_model_folder(path) and not _stepped_files(path, selection):
        rev = parse_revision(path.name, selection.compiled)
        if not selection.is_default:
            if rev is None:
                raise SeriesError(f"{model!r} is a single model folder whose name stands for "
                                  "no step; --steps and --revisions do not apply to it")
            select([rev], selection, f"model folder {model!r}")
        return [Checkpoint(model, label, rev.step if rev else None, "local",
                           str(path.resolve()))]
    available, folders, unparsed = discover_steps(path, selection.compiled)
    source = "local"
    if not available:
        try:
            files = discover_files(path, selection.compiled)
        except ValueError as exc:
            raise SeriesError(str(exc)) from exc
        if None in files:  # a lone checkpoint file without a step
            if not selection.is_default:
                raise SeriesError(f"{model!r} holds one checkpoint file with no step in its "
                                  "name or itself; --steps and --revisions do not apply to "
                                  "it")
            return [Checkpoint(model, label, None, "file", str(files[None].resolve()))]
        available = [Revision(f.stem, s, "file") for s, f in sorted(files.items())]
        folders = {f.stem: f for f in files.values()}
        source = "file"
    if not available:
        hint = (f" (model folders whose names stand for no step: {', '.join(unparsed[:3])}; "
                "pass --revision-pattern with one group for the step)" if unparsed else "")
        raise SeriesError(
            f"folder {model!r} holds no model: expected config.json in it, sub-folders "
            "named like checkpoints (step<N>, checkpoint-<N>, step<N>-tokens<M>, ckpt_<N>, "
            "step_<N>k, global_step<N>, iter_<N>) that hold one, or checkpoint files "
            f"({', '.join(CHECKPOINT_SUFFIXES)}) with the step in their names or in "
            f"themselves (nanoGPT's iter_num){hint}"
        )
    chosen = select(available, selection, f"local series {model!r}", unparsed=unparsed)
    return [Checkpoint(model, label, r.step, source, str(folders[r.name].resolve()))
            for r in chosen]


def _file_series(model: str, path: Path, selection: StepSelection) -> list[Checkpoint]:
    if not is_checkpoint_file(path):
        raise SeriesError(
            f"{model!r} is a file but not a checkpoint file ({', '.join(CHECKPOINT_SUFFIXES)}); "
            "the embedding stage reads model folders in Hugging Face format (config.json "
            "plus weights) or a folder of step<N>/ sub-folders"
        )
    step = step_from_name(path.name, selection.compiled)
    if step is None:
        step = stored_step(path)  # nanoGPT's ckpt.pt: its iter_num
    if not selection.is_default:
        if step is None:
            raise SeriesError(f"{model!r} is a single checkpoint file with no step in its "
                              "name or itself; --steps and --revisions do not apply to it")
        select([Revision(path.name, step, "file")], selection, f"checkpoint file {model!r}")
    label = path.name[: -len(path.suffix)] if path.suffix else path.name
    return [Checkpoint(model, label, step, "file", str(path.resolve()))]


def assign_labels(series: list[list[Checkpoint]]) -> list[list[Checkpoint]]:
    """Give every series a label that is a plain file name and unique within the run
    (:func:`toposig.files.names.series_labels`: two folders named ``run`` become ``a-run`` and
    ``b-run``).

    Raises:
        SeriesError: the same model twice, or two no label tells apart (both named).
    """
    firsts = [s[0] for s in series if s]
    try:
        labels = series_labels([c.model for c in firsts], [c.source == "hub" for c in firsts],
                               [Path(c.model).expanduser().is_file() for c in firsts])
    except UnsafeNameError as exc:
        raise SeriesError(str(exc)) from exc
    by_model = dict(zip((c.model for c in firsts), labels, strict=True))
    return [[replace(c, label=by_model[c.model]) for c in s] for s in series]


def fingerprint(ckpt: Checkpoint) -> str | None:
    """Identity of a local checkpoint: the hash of its files' names and contents
    (:func:`toposig.files.content_hash.content_fingerprint`, cached by size and modification
    time). A record is reused only while this matches, so a checkpoint retrained or
    replaced in place is analysed again, and one copied to another machine is not.
    Hub revisions are identified by their name; a model measured in memory
    (:func:`toposig.measure`) has no files and no fingerprint."""
    if ckpt.source in ("hub", "memory"):
        return None
    return content_fingerprint(ckpt.location, sidecars_of(ckpt))


def sidecars_of(ckpt: Checkpoint) -> list[Path]:
    """The files beside a checkpoint file that change what is measured: the
    ``config.json`` :func:`toposig.sources.checkpoint_files.find_config` reads (none for a
    folder, whose files are all fingerprinted)."""
    if ckpt.source != "file":
        return []
    beside = Path(ckpt.location).parent / "config.json"
    return [beside] if beside.is_file() else []


def checkpoint_identity(ckpt: Checkpoint) -> dict:
    """The fields that say which checkpoint a record belongs to
    (:data:`toposig.records.IDENTITY`, in that order), then, for a member of a seed
    ensemble (a local folder whose ``trainer_state.json`` names them:
    :func:`toposig.sources.checkpoint_files.trainer_state_seed`), its ``seed`` and
    ``seed_group`` (:data:`toposig.records.SEED_FIELDS`), and for a positive control's
    checkpoint its ``ground_truth`` (:data:`toposig.records.GROUND_TRUTH`)."""
    identity = {
        "model": ckpt.model,
        "model_label": ckpt.label,
        "step": ckpt.step,
        "source": ckpt.source,
        "location": ckpt.stored_location,
        "revision": ckpt.revision,
        "checkpoint_fingerprint": fingerprint(ckpt),
    }
    if ckpt.source == "local":
        state = read_trainer_state(ckpt.location)  # once, for the seed and the truth
        seed, group = trainer_state_seed(ckpt.location, state)
        if seed is not None:
            identity |= {"seed": seed, "seed_group": group}
        if (truth := trainer_state_ground_truth(ckpt.location, state)) is not None:
            identity[GROUND_TRUTH] = truth
    return identity


def has_tokenizer(ckpt: Checkpoint) -> bool:
    """Whether a local checkpoint folder carries tokenizer files (Hub ones are assumed to)."""
    if ckpt.source == "hub":
        return True
    if ckpt.source == "file":
        return False
    return any((Path(ckpt.location) / f).is_file() for f in TOKENIZER_FILES)


def check_tokenizers(checkpoints: list[Checkpoint], override: str | None) -> None:
    """Before any work: every local checkpoint has a tokenizer, or one is given.

    Raises:
        SeriesError: naming the folders without one and the option that fixes it.
    """
    if override is not None:
        if not Path(override).exists() and (
            override.startswith((".", "/", "~")) or not _HUB_ID_RE.match(override)
        ):
            raise SeriesError(f"--tokenizer {override!r} is neither a file, a folder nor a "
                              "Hub id")
        return
    missing = [c for c in checkpoints if not has_tokenizer(c)]
    if missing:
        shown = ", ".join(c.location for c in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise SeriesError(
            f"{len(missing)} checkpoint folder(s) hold no tokenizer ({shown}{more}); save "
            "one beside the weights (tokenizer.save_pretrained) or pass --tokenizer "
            "NAME_OR_PATH (a Hub name, a folder, or a tokenizer.json file)"
        )


# --- the Hub -------------------------------------------------------------------------


def hub_offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def hub_revision_names(repo_id: str, *, list_refs: RefLister | None = None,
                       cache_dir: str | Path | None = None) -> tuple[list[str], str]:
    """The names of a Hub repository's revisions (branches and tags) and where the list
    came from: ``"hub"``, or ``"cache"`` when the Hub cannot be reached.

    Args:
        list_refs: ``huggingface_hub.list_repo_refs`` when ``None`` (not called when
            ``HF_HUB_OFFLINE`` is set); a given one is always asked.
        cache_dir: the Hugging Face cache to fall back on (the default cache when ``None``).

    Raises:
        SeriesError: the Hub answered that the repository does not exist or is gated.
        HubUnavailableError: the Hub cannot be reached and the cache holds no revision
            of the repository.
    """
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if list_refs is None and hub_offline_env():
        reason = "HF_HUB_OFFLINE is set"
    else:
        if list_refs is None:
            from huggingface_hub import list_repo_refs as list_refs
        try:
            refs = list_refs(repo_id)
        except GatedRepoError as exc:
            raise SeriesError(f"the Hugging Face Hub model {repo_id!r} is gated: accept its "
                              "terms on the Hub and log in (hf auth login)") from exc
        except RepositoryNotFoundError as exc:
            raise SeriesError(f"the Hugging Face Hub has no model {repo_id!r}") from exc
        except Exception as exc:  # noqa: BLE001 - any network failure means unreachable
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        else:
            names = [r.name for r in (*refs.branches, *getattr(refs, "tags", ()))]
            return list(dict.fromkeys(names)), "hub"
    names = cached_revision_names(repo_id, cache_dir)
    if not names:
        raise HubUnavailableError.listing([repo_id], reason)
    logger.warning("cannot reach the Hugging Face Hub (%s): the revisions of %s are the %d "
                   "in the local cache", reason, repo_id, len(names))
    return names, "cache"


def cached_revision_names(repo_id: str, cache_dir: str | Path | None = None) -> list[str]:
    """Names (refs) of a model repository's revisions in the Hugging Face cache."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir)
    except (CacheNotFound, OSError):
        return []
    return sorted({ref for repo in info.repos
                   if repo.repo_id == repo_id and repo.repo_type == "model"
                   for rev in repo.revisions for ref in rev.refs})


def is_cached(ckpt: Checkpoint) -> bool:
    """Whether a Hub checkpoint's config is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    hit = try_to_load_from_cache(ckpt.location, "config.json", revision=ckpt.revision)
    return isinstance(hit, str)


def hub_reachable(repo_id: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Ask the Hub about ``repo_id``. Returns ``(reachable, reason)``.

    Raises:
        SeriesError: the Hub answered that the repository does not exist.
    """
    if hub_offline_env():
        return False, "HF_HUB_OFFLINE is set"
    from huggingface_hub import model_info
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        model_info(repo_id, timeout=timeout)
    except RepositoryNotFoundError as exc:
        raise SeriesError(f"the Hugging Face Hub has no model {repo_id!r}") from exc
    except Exception as exc:  # noqa: BLE001 - any network failure means unreachable
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def check_hub_access(checkpoints: list[Checkpoint]) -> bool:
    """Preflight for Hub checkpoints, before any work. Returns ``local_files_only``.

    Raises:
        HubUnavailableError: the Hub is unreachable and none of the requested Hub
            checkpoints is cached; the message says how to run on local checkpoints.
    """
    hub = [c for c in checkpoints if c.source == "hub"]
    if not hub:
        return False
    uncached = [c for c in hub if not is_cached(c)]
    if not uncached:
        return True
    ok, reason = hub_reachable(uncached[0].location)
    if ok:
        return False
    if len(uncached) == len(hub):
        models = sorted({c.model for c in hub})
        raise HubUnavailableError(
            f"cannot reach the Hugging Face Hub ({reason}) and none of the {len(hub)} "
            f"requested checkpoints of {', '.join(models)} is in the local cache.\n"
            f"{local_advice(models[0])}"
        )
    logger.warning(
        "Hub unreachable (%s): %d of %d checkpoints are cached; the others will be "
        "recorded as failures", reason, len(hub) - len(uncached), len(hub),
    )
    return True
