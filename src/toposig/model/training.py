"""The project's own model suites: byte-level GPT-NeoX models trained from scratch.

A suite is a family of ``GPTNeoXForCausalLM`` models (Pythia's architecture) trained on
WikiText-2 raw with a byte-level tokenizer, each saving checkpoints as Hugging Face model
folders ``<suite>/<model>/step<N>/``: exactly the local-series layout the pipeline reads.

The loop is nanoGPT's: settings as plain values, AdamW, linear warm-up then cosine decay
(the learning rate is a pure function of the step), gradient clipping, random contiguous
windows of the training text drawn from one seeded generator. Dropout is 0, so the
state that determines the future of a run is exactly the weights, the optimizer state,
the generator state and the step; that is what is saved at every checkpoint, so a run
killed at any moment resumes to bit-identical final weights.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from toposig.checkpoint_steps import scheduled_steps
from toposig.defaults import preset_names  # noqa: F401 - still toposig.model.training's
from toposig.files.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_with,
    make_folder,
    read_json,
    remove_file,
)
from toposig.files.locks import exclusive
from toposig.files.names import UnsafeNameError, check_name
from toposig.model.preset_file import (  # re-exported: the light part of a preset
    TrainingConfigError,
    check_seeds,
    read_preset,
)
from toposig.sources import corpus

logger = logging.getLogger(__name__)

EOS = "<|endoftext|>"
BYTE_VOCAB = 257  # 256 bytes + EOS
MODEL_VOCAB = 264  # padded to a multiple of 8, as Pythia pads its vocabulary
STATE_FILE = "_resume_state.pt"
DONE_FILE = "done.json"
LOG_FILE = "train_log.jsonl"
INPUTS_FILE = "inputs.txt"  # a task suite's texts to measure (toposig.model.presets)


# --- tokenizer -----------------------------------------------------------------------


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (ByteLevel's alphabet)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def byte_tokenizer():
    """A Hugging Face fast tokenizer whose token ids are the UTF-8 bytes (0-255), EOS = 256.

    Saved with ``save_pretrained`` it loads with ``AutoTokenizer``, like Pythia's.
    """
    from tokenizers import Tokenizer, decoders, models
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab[EOS] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS,
                                   model_max_length=1_000_000)


def encode_bytes(text: str) -> np.ndarray:
    """Token ids of ``text`` under :func:`byte_tokenizer`: its UTF-8 bytes, (n,) uint8."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


# --- configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """One model of a suite: name and GPT-NeoX shape (intermediate size 4 x hidden)."""

    name: str
    hidden: int
    layers: int
    heads: int


@dataclass(frozen=True)
class SuiteConfig:
    """A suite: its models and the one training recipe they all follow.

    Attributes:
        steps: optimizer updates per model.
        schedule: ``"pythia"`` (0, 1, 2, 4, ... doubling below ``checkpoint_every``, then
            every ``checkpoint_every``) or ``"regular"`` (every ``checkpoint_every``);
            the last step is always saved.
        lr, min_lr: peak and final learning rate (cosine from peak to final after a
            linear warm-up of ``warmup`` steps).
        val_fraction: tail of the training text held out for the validation loss.
        eval_batches: validation batches per checkpoint (fixed windows).
        seed: the seed of initialisation and data order.
        seeds: how many seeds of every model to train (an ensemble); with more than one,
            model ``m`` is trained as ``m-seed0`` ... ``m-seed<N-1>`` with seeds
            ``seed``, ``seed + 1``, ... (:func:`suite_runs`), and each checkpoint's
            ``trainer_state.json`` names its seed and the model it is a seed of.
    """

    name: str
    models: tuple[ModelSpec, ...]
    context: int = 128
    batch_size: int = 32
    steps: int = 1000
    lr: float = 3e-3
    min_lr: float = 3e-4
    weight_decay: float = 0.01
    warmup: int = 100
    clip: float = 1.0
    schedule: str = "pythia"
    checkpoint_every: int = 100
    seed: int = 42
    seeds: int = 1
    val_fraction: float = 0.05
    eval_batches: int = 8
    description: str = ""

    def __post_init__(self) -> None:
        validate_suite(self)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> SuiteConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise TrainingConfigError(f"unknown suite settings {unknown}; allowed: {sorted(known)}")
        try:
            models = tuple(ModelSpec(**m) for m in d.get("models", ()))
        except TypeError as exc:
            raise TrainingConfigError(f"bad model entry: {exc}; each model needs name, "
                                      "hidden, layers, heads") from exc
        return cls(**{**d, "models": models})


_KINDS = {"int": (int,), "float": (int, float), "str": (str,)}


def check_field_types(obj, where: str) -> None:
    """Every int / float / str field of a config (a suite, a model, a task) holds a value
    of that kind (a finite number; ``True`` is not a number)."""
    for f in fields(obj):
        kinds = _KINDS.get(str(f.type))
        value = getattr(obj, f.name)
        if kinds is None:
            continue
        ok = isinstance(value, kinds) and not isinstance(value, bool)
        if ok and isinstance(value, float):
            ok = math.isfinite(value)
        if not ok:
            kind = {"int": "an integer", "float": "a finite number", "str": "a string"}
            raise TrainingConfigError(f"{where}: {f.name} must be {kind[str(f.type)]}, "
                                      f"got {value!r}")


def validate_suite(c: SuiteConfig) -> None:
    """Raise :class:`TrainingConfigError` naming the first bad value."""
    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise TrainingConfigError(f"suite {c.name!r}: {msg}")

    check_field_types(c, f"suite {c.name!r}")
    for m in c.models:
        check_field_types(m, f"suite {c.name!r}, model {m.name!r}")

    try:  # names become folders: nothing that could step out of the suite folder
        check_name(c.name, "suite name")
        for m in c.models:
            check_name(m.name, "model name")
    except UnsafeNameError as exc:
        raise TrainingConfigError(str(exc)) from exc
    need(bool(c.models), "has no models")
    names = [m.name for m in c.models]
    need(len(set(names)) == len(names), f"model names repeat: {names}")
    for m in c.models:
        need(m.hidden > 0 and m.layers > 0 and m.heads > 0,
             f"model {m.name!r}: hidden, layers and heads must be positive")
        need(m.hidden % m.heads == 0,
             f"model {m.name!r}: {m.heads} heads do not divide hidden size {m.hidden}")
        need((m.hidden // m.heads) % 2 == 0,
             f"model {m.name!r}: head size {m.hidden // m.heads} must be even (rotary "
             "embeddings rotate pairs)")
    need(c.context >= 2, f"context must be at least 2, got {c.context}")
    need(c.batch_size >= 1, f"batch_size must be at least 1, got {c.batch_size}")
    need(c.steps >= 1, f"steps must be at least 1, got {c.steps}")
    need(c.schedule in ("pythia", "regular"),
         f"schedule must be 'pythia' or 'regular', got {c.schedule!r}")
    need(c.checkpoint_every >= 1, f"checkpoint_every must be >= 1, got {c.checkpoint_every}")
    need(0 < c.min_lr <= c.lr, f"need 0 < min_lr <= lr, got {c.min_lr}, {c.lr}")
    need(0 <= c.warmup <= c.steps, f"warmup must be within 0..steps, got {c.warmup}")
    need(0 < c.val_fraction < 0.5, f"val_fraction must be in (0, 0.5), got {c.val_fraction}")
    need(c.eval_batches >= 1, f"eval_batches must be at least 1, got {c.eval_batches}")
    need(c.clip > 0, f"clip must be positive, got {c.clip}")
    need(c.seeds >= 1, f"seeds must be at least 1, got {c.seeds}")
    need(c.seed >= 0 and c.seed + c.seeds <= 2**63,
         f"seeds {c.seed}..{c.seed + c.seeds - 1} must be non-negative 64-bit integers")
    try:  # a seed's folder name must be safe too
        for run in suite_runs(c):
            check_name(run.spec.name, "model name")
    except UnsafeNameError as exc:
        raise TrainingConfigError(str(exc)) from exc


@dataclass(frozen=True)
class TrainingRun:
    """One model of a suite trained from one seed.

    Attributes:
        spec: the model's shape, named as its folder (``m``, or ``m-seed<k>`` in an
            ensemble).
        seed: the seed of initialisation and data order.
        seed_group: the model it is a seed of (``m``), or ``None`` outside an ensemble.
    """

    spec: ModelSpec
    seed: int
    seed_group: str | None = None


def suite_runs(c: SuiteConfig) -> list[TrainingRun]:
    """The runs a suite trains, model by model and seed by seed: with ``seeds`` = 1 each
    model once, under its own name with the suite's seed (as before ensembles existed);
    otherwise ``m-seed0`` ... with seeds ``seed``, ``seed + 1``, ..."""
    if c.seeds == 1:
        return [TrainingRun(m, c.seed) for m in c.models]
    return [TrainingRun(replace(m, name=f"{m.name}-seed{k}"), c.seed + k, m.name)
            for m in c.models for k in range(c.seeds)]


def load_suite_config(name_or_path: str) -> SuiteConfig:
    """A preset by name (``toposig/presets/<name>.json``, shipped with the package) or a
    JSON file of one.

    Raises:
        TrainingConfigError: unknown preset, unreadable file, or bad settings (a task
            preset, such as ``grokking``, is read by
            :func:`toposig.model.presets.load_preset`).
    """
    data = read_preset(name_or_path)
    if "task" in data:
        raise TrainingConfigError(f"--preset {name_or_path!r} is a {data['task']} task, not "
                                  "a suite of language models (toposig.model.presets.load_preset "
                                  "reads both)")
    return SuiteConfig.from_dict(data)


_Seeded = TypeVar("_Seeded")  # a SuiteConfig, or a task's config (it has name and seeds)


def with_seeds(c: _Seeded, seeds: int | None) -> _Seeded:
    """The suite with ``seeds`` seeds of every model (``--seeds``): ``c`` itself when
    ``seeds`` is ``None`` or the suite's own number; otherwise renamed ``<name>-seeds<N>``,
    so that it trains into its own folder beside the preset's.

    Raises:
        TrainingConfigError: ``seeds`` below 1, or a seed's name that is not safe.
    """
    if seeds is None or seeds == c.seeds:
        return c
    check_seeds(seeds)
    return replace(c, name=f"{c.name}-seeds{seeds}", seeds=seeds)


# --- schedules -----------------------------------------------------------------------


def checkpoint_steps(total: int, every: int, kind: str = "pythia") -> list[int]:
    """Steps at which a checkpoint is saved (after that many updates), always incl. 0 and total.

    ``pythia``: 0, 1, 2, 4, ... (powers of two below ``every``), then every ``every``.
    ``regular``: 0, every, 2 every, ... (:func:`toposig.checkpoint_steps.scheduled_steps`).
    """
    return scheduled_steps(total, every, kind)


def lr_at(step: int, c: SuiteConfig) -> float:
    """Learning rate of update ``step`` (0-based): linear warm-up, then cosine to min_lr."""
    if step < c.warmup:
        return c.lr * (step + 1) / c.warmup
    span = max(1, c.steps - c.warmup)
    progress = min(1.0, (step - c.warmup) / span)
    return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + math.cos(math.pi * progress))


# --- data ----------------------------------------------------------------------------


@dataclass
class TrainingText:
    """The encoded training text split into a training part and a held-out tail."""

    train: np.ndarray
    val: np.ndarray
    split: str
    source: str
    n_bytes: int


def load_training_text(val_fraction: float) -> TrainingText:
    """WikiText-2 train when reachable, otherwise test; never the analysed validation split."""
    try:
        rows, split = corpus.wikitext_rows("train"), "train"
    except corpus.DataMissingError:
        rows, split = corpus.wikitext_rows("test"), "test"
        logger.warning("WikiText-2 train split not available: training on the test split "
                       "(the analysed texts come from the validation split)")
    data = encode_bytes("\n".join(rows) + "\n")
    n_val = int(len(data) * val_fraction)
    return TrainingText(data[: len(data) - n_val], data[len(data) - n_val:], split,
                        f"wikitext-2-raw-v1 {split}", len(data))


def check_text_fits(text: TrainingText, c: SuiteConfig) -> None:
    """Raise before any training if the text cannot fill one batch or one eval window."""
    need = c.batch_size * (c.context + 1)
    if len(text.train) < need:
        raise TrainingConfigError(
            f"the training text has {len(text.train)} bytes, fewer than one batch needs "
            f"({c.batch_size} x {c.context + 1} = {need})")
    if len(text.val) < c.context + 1:
        raise TrainingConfigError(
            f"the held-out text has {len(text.val)} bytes, fewer than one window "
            f"({c.context + 1}); raise val_fraction or use a longer text")


def sample_batch(data: torch.Tensor, c: SuiteConfig,
                 gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random contiguous windows: inputs and next-byte targets, (batch, context) int64."""
    starts = torch.randint(0, len(data) - c.context - 1, (c.batch_size,), generator=gen)
    windows = torch.stack([data[s : s + c.context + 1] for s in starts.tolist()]).long()
    return windows[:, :-1], windows[:, 1:]


def eval_windows(val: torch.Tensor, c: SuiteConfig) -> torch.Tensor:
    """Fixed, evenly spaced validation windows, (eval_batches x batch, context + 1)."""
    n = c.eval_batches * c.batch_size
    starts = np.linspace(0, len(val) - c.context - 1, n).astype(np.int64)
    return torch.stack([val[s : s + c.context + 1] for s in starts.tolist()]).long()


# --- model ---------------------------------------------------------------------------


def model_config(spec: ModelSpec, c: SuiteConfig):
    """Pythia's conventions at the spec's size: partial rotary 0.25, parallel residual,
    untied embeddings, intermediate 4 x hidden, no dropout."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=MODEL_VOCAB, hidden_size=spec.hidden, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, intermediate_size=4 * spec.hidden,
        max_position_embeddings=c.context, use_parallel_residual=True,
        tie_word_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0,
        bos_token_id=256, eos_token_id=256, pad_token_id=256,
    )


def count_parameters(spec: ModelSpec, c: SuiteConfig) -> int:
    from transformers import GPTNeoXForCausalLM

    with torch.device("meta"):
        return sum(p.numel() for p in GPTNeoXForCausalLM(model_config(spec, c)).parameters())


def loss_of(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def validation_loss(model, windows: torch.Tensor, batch_size: int) -> float:
    """Mean next-byte loss (nats) over the fixed validation windows."""
    model.eval()
    total = 0.0
    for i in range(0, len(windows), batch_size):
        w = windows[i : i + batch_size]
        total += float(loss_of(model, w[:, :-1], w[:, 1:])) * len(w)
    model.train()
    return total / len(windows)


# --- saving --------------------------------------------------------------------------


TRAIN_THREADS = 1  # torch threads while a task trains: the same run on any number of cores


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with torch's intra-op threads at ``n``, restoring the count after:
    at one thread a training run's float reductions happen in one order, so it gives the
    same weights on any machine of the same CPU kind whatever its cores (issue 59)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Turn off transformers' progress bars for the block, restoring the setting after."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def save_checkpoint(model, tokenizer, folder: Path, info: dict) -> None:
    """Write a model folder atomically: into a temporary sibling, then rename."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        with quiet_transformers():  # no "Writing model shards" bar per checkpoint
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / "trainer_state.json", info, root=tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_state(path: Path, model, opt, gen: torch.Generator, step: int,
               root: Path | None = None) -> None:
    """The trainer's resume state (weights, optimizer, generator), written atomically
    (no folder between ``root``, default ``path``'s folder, and ``path`` followed
    through a link)."""
    state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
             "generator": gen.get_state()}

    def write(f) -> None:
        torch.save(state, f)

    atomic_write_with(path, write, root=path.parent if root is None else root)


# --- training ------------------------------------------------------------------------


@dataclass
class ModelResult:
    name: str
    num_parameters: int
    checkpoints: list[int]
    final_val_loss: float
    trained_steps: int = 0
    seconds: float = 0.0
    skipped: bool = False


class StopTraining(Exception):  # noqa: N818 - a signal, raised by tests to simulate a kill
    """Raised by a ``stop_at`` hook to abandon a run at a given step."""


# Called at every checkpoint with the model (in memory, in train mode), the step and the
# checkpoint's trainer_state (val_loss, ...): the live measurement (toposig train
# --measure-out) hooks in here.
OnCheckpoint = Callable[[ModelSpec, torch.nn.Module, int, dict], None]


def train_model(spec: ModelSpec, c: SuiteConfig, text: TrainingText, model_dir: Path,
                tokenizer, *, stop_at: int | None = None, progress: bool = True,
                on_checkpoint: OnCheckpoint | None = None, seed: int | None = None,
                seed_group: str | None = None) -> ModelResult:
    """Train one model of a suite, resuming from its saved state; skip it if done.

    Args:
        seed: the seed of initialisation and data order (default: the suite's).
        seed_group: in an ensemble, the model this run is a seed of: then every
            checkpoint's ``trainer_state.json`` (and ``done.json``) holds ``seed`` and
            ``seed_group``, which the records of its measurements carry.
        stop_at: raise :class:`StopTraining` just before update ``stop_at`` (tests).
        on_checkpoint: called after each checkpoint is saved, before the resume state
            is (so a run killed in between measures that step again when it resumes);
            it must leave the model, the optimizer and the random generators as it
            found them (:class:`toposig.live.monitor.TopologyMonitor` does).
    """
    from transformers import GPTNeoXForCausalLM

    from toposig.progress import tqdm

    done = model_dir / DONE_FILE
    if done.is_file():
        d = read_json(done)
        return ModelResult(spec.name, d["num_parameters"], d["checkpoints"],
                           d["final_val_loss"], skipped=True)
    suite = model_dir.parent  # the root of every write: a link below it is refused
    make_folder(suite, model_dir)
    remove_partial_writes(model_dir)
    seed = c.seed if seed is None else seed
    seeded = {"seed": seed, "seed_group": seed_group} if seed_group is not None else {}
    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(model_config(spec, c))
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c.lr)
    gen = torch.Generator().manual_seed(seed)
    start = 0
    state_path = model_dir / STATE_FILE
    if state_path.is_file():
        state = torch.load(state_path, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        start = state["step"]
        logger.info("%s: resuming at step %d", spec.name, start)
    log_path = model_dir / LOG_FILE
    _truncate_log(log_path, start, root=suite)

    train = torch.from_numpy(text.train.copy())
    windows = eval_windows(torch.from_numpy(text.val.copy()), c)
    schedule = checkpoint_steps(c.steps, c.checkpoint_every, c.schedule)
    n_params = sum(p.numel() for p in model.parameters())
    recent: list[float] = []
    t0 = time.perf_counter()
    bar = tqdm(total=c.steps, initial=start, desc=spec.name, unit="step", disable=not progress)
    with log_path.open("a", encoding="utf-8") as log:
        for step in range(start, c.steps + 1):
            if step in schedule:
                val = validation_loss(model, windows, c.batch_size)
                info = {"step": step, "val_loss": val, "lr": lr_at(max(step - 1, 0), c),
                        "train_loss_recent": float(np.mean(recent)) if recent else None,
                        "tokens_seen": step * c.batch_size * c.context,
                        "model": spec.name, "suite": c.name, **seeded}
                save_checkpoint(model, tokenizer, model_dir / f"step{step}", info)
                if on_checkpoint is not None:
                    on_checkpoint(spec, model, step, info)
                log.flush()  # every line up to this step on disk before the state says so
                os.fsync(log.fileno())
                save_state(state_path, model, opt, gen, step, root=suite)
                bar.set_postfix(val_loss=f"{val:.3f}")
            if step == c.steps:
                break
            if stop_at is not None and step == stop_at:
                raise StopTraining(f"stopped before update {step}")
            lr = lr_at(step, c)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = sample_batch(train, c, gen)
            loss = loss_of(model, x, y)
            loss.backward()
            loss_value = loss.item()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), c.clip))
            opt.step()
            opt.zero_grad(set_to_none=True)
            recent = (recent + [loss_value])[-50:]
            log.write(json.dumps({"step": step + 1, "loss": loss_value,
                                  "grad_norm": grad_norm, "lr": lr}) + "\n")
            bar.update(1)
    bar.close()
    final = read_json(model_dir / f"step{c.steps}" / "trainer_state.json")["val_loss"]
    atomic_write_json(done, {"name": spec.name, "num_parameters": n_params,
                             "checkpoints": schedule, "final_val_loss": final,
                             "spec": asdict(spec), **seeded}, root=suite)
    remove_file(state_path, root=suite)
    return ModelResult(spec.name, n_params, schedule, final, trained_steps=c.steps - start,
                       seconds=time.perf_counter() - t0)


def write_inputs_file(suite_dir: str | Path, lines: list[str], suite: str,
                      name: str = INPUTS_FILE) -> Path:
    """Write a task suite's ``inputs.txt`` (or another file ``name`` of its lines), one
    text per line, into ``suite_dir`` (made if missing); returns its path. A file that is
    already there with these lines is left as it is.

    Raises:
        TrainingConfigError: the folder's file holds other lines (another suite's), or is
            a link or not a file; nothing is written.
    """
    path = Path(suite_dir) / name
    data = "".join(f"{t}\n" for t in lines).encode("utf-8")
    if path.is_symlink() or (path.exists() and (not path.is_file()
                                                 or path.read_bytes() != data)):
        raise TrainingConfigError(f"{path} holds other lines than suite {suite!r} "
                                  "measures (another suite's?); move it away, or train into "
                                  "another --suite-dir")
    if not path.exists():
        atomic_write_bytes(path, data, root=suite_dir)
    return path


def remove_partial_writes(model_dir: Path) -> None:
    """Delete the temporaries a killed run of this trainer left in its model folder and
    nothing else: ``.step<N>.*`` folders (:func:`save_checkpoint`), ``.<state file>.*``
    (:func:`save_state`) and ``.<name>.*.tmp`` files (atomic JSON writes)."""
    for leftover in model_dir.glob(".*"):
        name = leftover.name
        if leftover.is_dir() and re.fullmatch(r"\.step\d+\..+", name):
            shutil.rmtree(leftover, ignore_errors=True)
        elif leftover.is_file() and (name.startswith(f".{STATE_FILE}.")
                                     or re.fullmatch(r"\..+\.tmp", name)):
            leftover.unlink(missing_ok=True)


def _truncate_log(path: Path, step: int, root: Path) -> None:
    """Keep the log lines up to ``step`` (the state a resumed run restarts from) and drop
    the rest, a torn last line included; the log is rewritten atomically."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(entry, dict) and isinstance(entry.get("step"), int) \
                and entry["step"] <= step:
            kept.append(line)
    atomic_write_bytes(path, "".join(ln + "\n" for ln in kept).encode("utf-8"),
                       root=root)


def suite_fingerprint(c: SuiteConfig, split: str) -> dict:
    """What must match for a suite folder to be resumed, as it reads back from JSON.

    ``seeds`` is left out when it is 1, so that a suite folder trained before ensembles
    existed resumes (it trained exactly the one seed)."""
    config = c.to_dict()
    if config["seeds"] == 1:
        del config["seeds"]
    return json.loads(json.dumps({"config": config, "corpus_split": split}))


def train_suite(c: SuiteConfig, root: str | Path = "runs", *, progress: bool = True,
                stop_at: int | None = None, on_checkpoint: OnCheckpoint | None = None
                ) -> tuple[Path, list[ModelResult]]:
    """Train every model of the suite (every seed of it, :func:`suite_runs`) into
    ``root/<suite>/<model>/step<N>/``.

    Models already finished are not retrained; a model whose run was killed resumes.
    ``on_checkpoint`` is passed to :func:`train_model`.

    Raises:
        TrainingConfigError: the folder holds a suite trained with other settings, or the
            text is too short; raised before any training.
        FolderLockedError: another run is training into the same suite folder.
    """
    text = load_training_text(c.val_fraction)
    check_text_fits(text, c)
    suite_dir = Path(root) / c.name
    with exclusive(suite_dir, "suite folder"):
        return suite_dir, _train_suite_locked(c, text, suite_dir, progress, stop_at,
                                              on_checkpoint)


def _train_suite_locked(c: SuiteConfig, text: TrainingText, suite_dir: Path, progress: bool,
                        stop_at: int | None,
                        on_checkpoint: OnCheckpoint | None) -> list[ModelResult]:
    """:func:`train_suite` once it holds the suite folder's lock."""
    cfg_path = suite_dir / "config.json"
    fingerprint = suite_fingerprint(c, text.split)
    if cfg_path.is_file():
        old = read_json(cfg_path)
        if {k: old.get(k) for k in fingerprint} != fingerprint:
            raise TrainingConfigError(
                f"{suite_dir} holds suite {c.name!r} trained with other settings (or another "
                "corpus split); move it away, or train into another --suite-dir")
    atomic_write_json(cfg_path, root=suite_dir, obj={
        **fingerprint,
        "corpus_source": text.source,
        "corpus_bytes": text.n_bytes,
        "train_bytes": len(text.train),
        "val_bytes": len(text.val),
        "tokenizer": "byte-level (UTF-8 bytes 0-255, EOS 256), model vocabulary 264",
        "parameters": {m.name: count_parameters(m, c) for m in c.models},
        **({"seeds": {r.spec.name: {"seed": r.seed, "seed_group": r.seed_group}
                      for r in suite_runs(c)}} if c.seeds > 1 else {}),
        "checkpoint_steps": checkpoint_steps(c.steps, c.checkpoint_every, c.schedule),
        "torch": torch.__version__,
    })
    tokenizer = byte_tokenizer()
    results = []
    for run in suite_runs(c):
        spec = run.spec
        res = train_model(spec, c, text, suite_dir / spec.name, tokenizer,
                          stop_at=stop_at, progress=progress, on_checkpoint=on_checkpoint,
                          seed=run.seed, seed_group=run.seed_group)
        logger.info("%s: %s, %d parameters, final validation loss %.4f", spec.name,
                    "already trained" if res.skipped else f"trained in {res.seconds:.0f} s",
                    res.num_parameters, res.final_val_loss)
        results.append(res)
    return results
