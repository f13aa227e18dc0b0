"""Checkpoint series behind one interface: Hub revisions and local model folders.

A *series* is a list of :class:`Checkpoint` of one model, ordered by training step.

- A Hugging Face Hub id (``EleutherAI/pythia-70m``) with steps gives one checkpoint per
  step at ``revision="step<N>"`` (Pythia's branch names).
- A local folder holding ``step<N>/`` or ``checkpoint-<N>/`` sub-folders in Hugging
  Face format (what ``save_pretrained`` and the HF Trainer write) is a series whose
  steps are read from the names.
- A single model folder (with ``config.json``) is a series of one.
- A plain PyTorch checkpoint file (``.pt``, ``.pth``, ``.bin``, ``.ckpt``,
  ``.safetensors``: a state dict, see :mod:`toposig.checkpoint_files`) is a series of
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
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint_files import (
    CHECKPOINT_SUFFIXES,
    discover_files,
    is_checkpoint_file,
    step_from_name,
)

logger = logging.getLogger(__name__)

SEED_STEPS: tuple[int, ...] = (
    0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
    1000, 2000, 5000, 10000, 33000, 66000, 100000, 143000,
)  # fmt: skip
PYTHIA_ALL_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512) + tuple(
    range(1000, 143001, 1000)
)
NAMED_SCHEDULES: dict[str, tuple[int, ...]] = {"seed": SEED_STEPS, "all": PYTHIA_ALL_STEPS}
EXPERIMENT_A_MODELS: tuple[str, ...] = (
    "EleutherAI/pythia-70m",
    "EleutherAI/pythia-160m",
    "EleutherAI/pythia-410m",
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "vocab.txt", "spiece.model")
MIN_VOCAB = 16  # transformers 5 builds an empty tokenizer from a bare config: refuse it
_STEP_DIR_RE = re.compile(r"^(?:step|checkpoint-)(\d+)$")
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")


class SeriesError(ValueError):
    """A model argument or step list cannot be turned into a checkpoint series."""


class HubUnavailableError(RuntimeError):
    """The Hub cannot be reached and the requested checkpoints are not cached."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of one model.

    Attributes:
        model: the model as the user named it (Hub id or local series folder).
        label: short unique name used for files (``pythia-70m``).
        step: training step, or ``None`` for a lone model folder without one.
        source: ``"hub"``, ``"local"`` (a model folder) or ``"file"`` (a state-dict file).
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
    def name(self) -> str:
        """File stem of this checkpoint's records: ``step000100`` or ``final``."""
        return "final" if self.step is None else f"step{self.step:06d}"

    def describe(self) -> str:
        where = f"@{self.revision}" if self.revision else ""
        step = "-" if self.step is None else self.step
        return f"{self.label} step {step} ({self.location}{where})"


def parse_steps(values: list[str] | None) -> tuple[int, ...] | None:
    """``--steps`` values: a named schedule (``seed``, ``all``) or integers; ``None`` if unset."""
    if not values:
        return None
    if len(values) == 1 and values[0] in NAMED_SCHEDULES:
        return NAMED_SCHEDULES[values[0]]
    steps = []
    for v in values:
        if not v.isdigit():
            raise SeriesError(
                f"--steps takes non-negative integers or one of {sorted(NAMED_SCHEDULES)}, "
                f"got {v!r}"
            )
        steps.append(int(v))
    return tuple(sorted(set(steps)))


def is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def discover_steps(folder: Path) -> dict[int, Path]:
    """Sub-folders ``step<N>`` / ``checkpoint-<N>`` holding a model, keyed by step."""
    found: dict[int, Path] = {}
    for child in sorted(folder.iterdir()):
        m = _STEP_DIR_RE.match(child.name)
        if m and child.is_dir() and is_model_folder(child):
            step = int(m.group(1))
            if step in found:
                raise SeriesError(f"{folder} holds two checkpoints of step {step}: "
                                  f"{found[step].name} and {child.name}")
            found[step] = child
    return found


def _label_of(model: str) -> str:
    return Path(model.rstrip("/")).name or model


def resolve_series(model: str, steps: tuple[int, ...] | None) -> list[Checkpoint]:
    """Turn one ``--models`` value and the ``--steps`` into a checkpoint series.

    Args:
        model: Hub id or local folder.
        steps: requested steps, or ``None`` for the default (the seed's 19 steps on the
            Hub; every step found in a local folder).

    Raises:
        SeriesError: not a folder nor a valid Hub id; a folder with no model; steps
            asked for that a local series does not have.
    """
    label = _label_of(model)
    path = Path(model).expanduser()
    if path.is_file():
        return _file_series(model, path, steps)
    if path.exists():
        return _local_series(model, label, path, steps)
    if model.startswith((".", "/", "~")) or not _HUB_ID_RE.match(model):
        raise SeriesError(
            f"model {model!r} is neither an existing local folder nor a Hugging Face Hub id "
            "(like EleutherAI/pythia-70m)"
        )
    return [
        Checkpoint(model, label, s, "hub", model, revision=f"step{s}")
        for s in (steps if steps is not None else SEED_STEPS)
    ]


def _local_series(
    model: str, label: str, path: Path, steps: tuple[int, ...] | None
) -> list[Checkpoint]:
    if is_model_folder(path):
        m = _STEP_DIR_RE.match(path.name)
        step = int(m.group(1)) if m else None
        if steps is not None and (step is None or step not in steps):
            raise SeriesError(f"{model!r} is a single model folder; --steps does not apply to it")
        return [Checkpoint(model, label, step, "local", str(path.resolve()))]
    found = discover_steps(path)
    source = "local"
    if not found:
        try:
            found = discover_files(path)
        except ValueError as exc:
            raise SeriesError(str(exc)) from exc
        source = "file"
    if not found:
        raise SeriesError(
            f"folder {model!r} holds no model: expected config.json in it, sub-folders "
            "named step<N>/ or checkpoint-<N>/ that hold one, or checkpoint files "
            f"({', '.join(CHECKPOINT_SUFFIXES)}) with the step in their names"
        )
    if None in found:  # a lone checkpoint file without a step
        if steps is not None:
            raise SeriesError(f"{model!r} holds one checkpoint file with no step in its "
                              "name; --steps does not apply to it")
        return [Checkpoint(model, label, None, source, str(found[None].resolve()))]
    chosen = _choose_steps(model, sorted(found), steps)
    return [Checkpoint(model, label, s, source, str(found[s].resolve())) for s in chosen]


def _choose_steps(model: str, available: list[int], steps: tuple[int, ...] | None) -> list[int]:
    if steps is None:
        return available
    missing = [s for s in steps if s not in available]
    if missing:
        raise SeriesError(
            f"steps {missing} are not in local series {model!r}; it has steps {available}"
        )
    return list(steps)


def _file_series(model: str, path: Path, steps: tuple[int, ...] | None) -> list[Checkpoint]:
    if not is_checkpoint_file(path):
        raise SeriesError(
            f"{model!r} is a file but not a checkpoint file ({', '.join(CHECKPOINT_SUFFIXES)}); "
            "the embedding stage reads model folders in Hugging Face format (config.json "
            "plus weights) or a folder of step<N>/ sub-folders"
        )
    step = step_from_name(path.name)
    if steps is not None and (step is None or step not in steps):
        raise SeriesError(f"{model!r} is a single checkpoint file; --steps does not apply to it")
    label = path.name[: -len(path.suffix)] if path.suffix else path.name
    return [Checkpoint(model, label, step, "file", str(path.resolve()))]


def unique_labels(series: list[list[Checkpoint]]) -> list[list[Checkpoint]]:
    """Rename labels that collide across series (two folders named ``run``)."""
    seen: dict[str, int] = {}
    out = []
    for ckpts in series:
        if not ckpts:
            out.append(ckpts)
            continue
        label = ckpts[0].label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}-{seen[label]}"
            ckpts = [Checkpoint(c.model, label, c.step, c.source, c.location, c.revision)
                     for c in ckpts]
        out.append(ckpts)
    return out


def fingerprint(ckpt: Checkpoint) -> str | None:
    """Identity of a local checkpoint's files (names, sizes, modification times).

    A record is reused only while this matches, so a checkpoint that was retrained or
    replaced in place is analysed again. Hub revisions are identified by their name.
    """
    if ckpt.source == "hub":
        return None
    import hashlib

    h = hashlib.sha256()
    where = Path(ckpt.location)
    for f in [where] if where.is_file() else sorted(where.iterdir()):
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


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
            "Run on local checkpoints instead, for example:\n"
            "  python src/run_experiments.py --models path/to/run   "
            "# a folder of step<N>/ or checkpoint-<N>/ model folders\n"
            "or, on a machine that can reach the Hub, download them first "
            "(hf download EleutherAI/pythia-70m --revision step1000)."
        )
    logger.warning(
        "Hub unreachable (%s): %d of %d checkpoints are cached; the others will be "
        "recorded as failures", reason, len(hub) - len(uncached), len(hub),
    )
    return True


# --- loading -------------------------------------------------------------------------


def load_model(ckpt: Checkpoint, torch_dtype, device: str, *, local_files_only: bool = False,
               trust_remote_code: bool = False):
    """Load a checkpoint as a causal LM in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM

    source, revision = ckpt.load_source
    model = AutoModelForCausalLM.from_pretrained(
        source,
        revision=revision,
        dtype=torch_dtype,
        local_files_only=local_files_only,
        trust_remote_code=trust_remote_code,
    )
    return model.to(device).eval()


def load_tokenizer(ckpt: Checkpoint, override: str | None = None, *,
                   local_files_only: bool = False, trust_remote_code: bool = False):
    """The checkpoint's tokenizer, or ``override`` (Hub name, folder, or tokenizer.json file).

    Padding is on the right with the EOS token when the tokenizer has no pad token.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if override and Path(override).is_file():
        tok = PreTrainedTokenizerFast(tokenizer_file=override)
        if tok.eos_token is None:
            if "<|endoftext|>" not in tok.get_vocab():
                raise SeriesError(
                    f"tokenizer file {override!r} defines no EOS token; pass a tokenizer folder"
                )
            tok.eos_token = "<|endoftext|>"
    else:
        source, revision = (override, None) if override else ckpt.load_source
        tok = AutoTokenizer.from_pretrained(
            source, revision=revision, local_files_only=local_files_only,
            trust_remote_code=trust_remote_code,
        )
    if len(tok) < MIN_VOCAB:
        raise SeriesError(f"the tokenizer for {ckpt.describe()} has only {len(tok)} tokens: "
                          "the checkpoint carries no usable tokenizer; pass --tokenizer")
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise SeriesError(f"tokenizer of {ckpt.describe()} has neither pad nor EOS token")
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return tok
