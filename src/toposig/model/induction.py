"""A positive control whose transition step is known: induction heads.

A two-layer, attention-only transformer trained on text learns to continue a sequence
it has seen earlier in its context: a previous-token head in the first layer and an
induction head in the second, which attends to the token after the previous occurrence
of the current one and copies it (Olsson et al. 2022). The in-context score measures
that ability without any topology: the mean loss on the second copy of a repeated
random block minus the mean loss on its first copy (:func:`in_context_score`), about 0
before the heads form and several nats below 0 after. It drops within a narrow window
of training, at a step that differs from seed to seed; that drop is the ground truth:
every checkpoint's ``trainer_state.json`` states the score as
``{"signal": "in_context_score", "value": ..., "event": "fall", "levels": [-0.5, -1]}``
(:data:`toposig.records.GROUND_TRUTH`), and the analysis places every feature's
change-point against the first checkpoints at which the score comes down to fixed levels
(:data:`LEVELS`; not a fraction of its final value, which moves with when training
stops; :mod:`toposig.analysis.ground_truth`). Beside it, the ground truth's
``mechanism`` names the heads (Olsson et al.): the largest prefix-matching score of any
head on the same sequences (how much of its attention goes to the token after the
current token's earlier copy; :func:`toposig.model.heads.prefix_matching`), an event
when it reaches :data:`PREFIX_LEVEL`, and the copying score of that head's OV circuit
(:func:`toposig.model.heads.copying_score`), an event when it reaches
:data:`COPYING_LEVEL`.

The text is WikiText-2 (the split the project's suites train on: never the analysed
validation split) at the byte level, in short windows (a context of 32 bytes: the time
until the heads form grows with the context's length), each holding one random block
of letters and digits written twice at random places, so that a repeat exists in every
window but its distance does not (a head that looks a fixed distance back does not
help). The MLPs are there, since the checkpoints are Hugging Face GPT-NeoX folders, but
their weights are zero and never trained, so each block adds nothing but attention
(:func:`attention_only`); the weight family leaves them out
(:data:`WEIGHT_EXCLUDE`), as ``run --preset induction`` does by default.

The embedding family measures the task's own inputs: the suite folder holds
``inputs.txt``, one line per text, a 16-byte span of WikiText-2 validation written
twice, the same lines for every seed.

Layout: ``<root>/<name>/<name>-seed<k>/step<N>/`` as :mod:`toposig.model.training` writes
suites; a run that is not finished is retrained from its start (minutes at most); a
finished one (``done.json``) is kept.
"""

from __future__ import annotations

import json
import logging
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from toposig.checkpoint_steps import scheduled_steps
from toposig.files.atomic import atomic_write_bytes, atomic_write_json, make_folder, read_json
from toposig.model.heads import head_scores
from toposig.model.task import TaskConfig, check_task_fields, task_check, task_suite
from toposig.model.training import (
    DONE_FILE,
    MODEL_VOCAB,
    TRAIN_THREADS,
    TrainingConfigError,
    byte_tokenizer,
    load_training_text,
    remove_partial_writes,
    save_checkpoint,
    torch_threads,
)
from toposig.sources import corpus

logger = logging.getLogger(__name__)

TASK = "induction"
SIGNAL = "in_context_score"
LEVELS = (-0.5, -1.0)  # the ground truth's steps: the score coming down to them, nats
PREFIX_LEVEL = 0.3  # the largest head's prefix-matching score (about 0.08 untrained)
COPYING_LEVEL = 0.9  # that head's copying score (Σ Re λ / Σ |λ|; about 0 untrained)
# the blocks' bytes: letters and digits, ids 48..57, 65..90, 97..122 of the byte tokenizer
ALPHABET = np.frombuffer((string.ascii_letters + string.digits).encode("ascii"), np.uint8)
WEIGHT_EXCLUDE = r"\.mlp\."  # the zero MLP matrices, left out of the weight family
PROBE_SEED = 0  # the in-context score's sequences: the same for every seed and checkpoint
TEXTS_SEED = 0  # the spans of inputs.txt
INPUT_SPAN = 16  # bytes of text per input line, written twice


@dataclass(frozen=True)
class InductionConfig(TaskConfig):
    """An induction-head suite: ``seeds`` runs of one attention-only transformer.

    Attributes:
        name: the suite's folder name; its runs are ``<name>-seed<k>``.
        hidden, layers, heads: the GPT-NeoX shape (the MLPs are zero: :func:`attention_only`).
        context: tokens (bytes) per training window.
        batch_size: windows per update.
        block_min, block_max: the length in bytes of the random block written twice
            into every window (drawn per window).
        steps, checkpoint_every: AdamW updates, and a checkpoint every so many (and at 0
            and the last step).
        lr, weight_decay, warmup: AdamW with betas (0.9, 0.98); a linear warm-up over
            ``warmup`` updates, then a constant rate.
        probe_sequences, probe_length: the in-context score's sequences, each a random
            block of ``probe_length`` bytes written twice (:func:`probe`).
        val_fraction: the tail of the training text held out for the loss on text.
        eval_windows: held-out windows the loss on text is averaged over.
        seed, seeds: run ``k`` uses seed ``seed + k`` for its initialisation and data.
        n_texts: the lines written to ``inputs.txt`` for the embedding family.
    """

    name: str
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    context: int = 32
    batch_size: int = 32
    block_min: int = 4
    block_max: int = 16
    steps: int = 3600
    checkpoint_every: int = 50
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 100
    probe_sequences: int = 64
    probe_length: int = 8
    val_fraction: float = 0.1
    eval_windows: int = 128
    seed: int = 0
    seeds: int = 5
    n_texts: int = 200
    description: str = ""

    TASK: ClassVar[str] = TASK
    SIGNAL: ClassVar[str] = SIGNAL
    WEIGHT_EXCLUDE: ClassVar[tuple[str, ...]] = (WEIGHT_EXCLUDE,)

    def __post_init__(self) -> None:
        validate(self)

    def texts(self) -> list[str]:
        return task_texts(self)

    def train(self, root: str | Path = "runs", *, progress: bool = True
              ) -> tuple[Path, list[dict]]:
        return train_induction(self, root, progress=progress)

    def llc_settings(self, suite_dir: str | Path) -> dict:
        """The ``llc`` family samples every next byte (its default objective, on the
        suite's ``inputs.txt``) in windows of the training context: the model has
        ``context`` positions, and the default window of 64 tokens is twice that."""
        return {"window": self.context}


def validate(c: InductionConfig) -> None:
    """Raise :class:`TrainingConfigError` naming the first bad value."""
    check_task_fields(c)
    need = task_check(c)
    need(2 <= c.block_min <= c.block_max and 2 * c.block_max <= c.context + 1,
         f"need 2 <= block_min <= block_max and two blocks in a window of {c.context + 1} "
         f"bytes, got {c.block_min}..{c.block_max}")
    need(c.probe_length >= 2 and 2 * c.probe_length <= c.context,
         f"probe_length must be at least 2 and fit twice in the context of {c.context}")
    need(c.batch_size >= 1 and c.probe_sequences >= 1 and c.eval_windows >= 1,
         "batch_size, probe_sequences and eval_windows must be >= 1")
    need(0 < c.val_fraction < 1, f"val_fraction must be in (0, 1), got {c.val_fraction}")
    need(1 <= c.n_texts <= 100_000, f"n_texts must be within 1..100000, got {c.n_texts}")


# --- the task ------------------------------------------------------------------------


def repeat_blocks(windows: torch.Tensor, c: InductionConfig, gen: torch.Generator) -> torch.Tensor:
    """The windows with one random block written twice into each, in place.

    Args:
        windows: (batch, context + 1) int64 token ids (bytes).
        gen: the run's generator: the block's length (``block_min..block_max``), its
            bytes (from :data:`ALPHABET`) and both places come from it.

    Returns:
        ``windows``; in row ``i`` the bytes ``[a, a + n)`` equal ``[b, b + n)``, ``b >= a + n``.
    """
    alphabet = torch.from_numpy(ALPHABET.astype(np.int64))
    width = windows.shape[1]
    for row in windows:
        n = int(torch.randint(c.block_min, c.block_max + 1, (1,), generator=gen))
        block = alphabet[torch.randint(0, len(alphabet), (n,), generator=gen)]
        first = int(torch.randint(0, width - 2 * n + 1, (1,), generator=gen))
        second = int(torch.randint(first + n, width - n + 1, (1,), generator=gen))
        row[first:first + n] = block
        row[second:second + n] = block
    return windows


def probe(c: InductionConfig) -> torch.Tensor:
    """The in-context score's sequences, ``(probe_sequences, 2 * probe_length)`` int64: a
    random block of :data:`ALPHABET` bytes followed by itself, drawn with a fixed seed
    (the same for every run and checkpoint)."""
    rng = np.random.default_rng(PROBE_SEED)
    block = rng.choice(ALPHABET, size=(c.probe_sequences, c.probe_length)).astype(np.int64)
    return torch.from_numpy(np.concatenate([block, block], axis=1))


@torch.no_grad()
def token_losses(model, sequences: torch.Tensor) -> np.ndarray:
    """Per-token losses (nats) of predicting tokens ``1..T-1`` of each sequence from the
    tokens before them, ``(n, T - 1)`` float64; the model is left in the mode it was in."""
    was_training = model.training
    model.eval()
    logits = model(input_ids=sequences).logits[:, :-1].float()
    model.train(was_training)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), sequences[:, 1:].reshape(-1),
                           reduction="none")
    return loss.view(len(sequences), -1).double().numpy()


def in_context_score(model, sequences: torch.Tensor) -> float:
    """The mean loss on the second copy of each ``[block, block]`` sequence (its 2nd to
    last token) minus the mean loss on the first copy's predictable tokens (2nd to last),
    in nats; :func:`toposig.analysis.ground_truth.induction_score` of
    :func:`token_losses`, which a test shows this equals."""
    length = sequences.shape[1] // 2
    losses = token_losses(model, sequences)
    return float(losses[:, length:].mean() - losses[:, : length - 1].mean())


def mechanism(model, sequences: torch.Tensor) -> dict:
    """The ground truth's ``mechanism`` at one checkpoint: the largest prefix-matching
    score of any head on ``sequences`` and the copying score of that head
    (:func:`toposig.model.heads.head_scores`); the model is left in its mode."""
    was_training = model.training
    model.eval()
    prefix, copying = head_scores(model, sequences, sequences.shape[1] // 2)
    model.train(was_training)
    best = np.unravel_index(int(np.argmax(prefix)), prefix.shape)
    return {"prefix_matching": {"value": float(prefix[best]), "event": "rise",
                                "levels": [PREFIX_LEVEL]},
            "copying": {"value": float(copying[best]), "event": "rise",
                        "levels": [COPYING_LEVEL]}}


def task_texts(c: InductionConfig) -> list[str]:
    """The lines of ``inputs.txt``: ``n_texts`` spans of :data:`INPUT_SPAN` printable ASCII
    bytes of WikiText-2 validation (no space at either end), each written twice, drawn
    with a fixed seed (the same for every run).

    Raises:
        DataMissingError: WikiText-2 validation is not available.
        TrainingConfigError: it holds fewer such spans than ``n_texts``.
    """
    rows = corpus.wikitext_rows("validation")
    spans = sorted({row[i:i + INPUT_SPAN] for row in rows
                    for i in range(0, max(len(row) - INPUT_SPAN, 0), INPUT_SPAN)
                    if _is_input_span(row[i:i + INPUT_SPAN])})
    if len(spans) < c.n_texts:
        raise TrainingConfigError(f"WikiText-2 validation has {len(spans)} spans for "
                                  f"inputs.txt, fewer than n_texts = {c.n_texts}")
    rng = np.random.default_rng(TEXTS_SEED)
    chosen = np.sort(rng.choice(len(spans), size=c.n_texts, replace=False))
    return [spans[i] * 2 for i in chosen]


def _is_input_span(span: str) -> bool:
    return (len(span) == INPUT_SPAN and span.isascii() and span.isprintable()
            and span == span.strip())


def model_config(c: InductionConfig):
    """GPT-NeoX at the config's shape with the byte vocabulary of the project's suites;
    the residual is sequential and the rotary embedding covers every dimension of a head,
    which a previous-token head needs to tell neighbouring positions apart."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=MODEL_VOCAB, hidden_size=c.hidden, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, intermediate_size=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 1.0},
        max_position_embeddings=c.context, use_parallel_residual=False,
        tie_word_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0,
        bos_token_id=256, eos_token_id=256, pad_token_id=256)


def attention_only(model) -> list[torch.nn.Parameter]:
    """Zero every MLP parameter of a GPT-NeoX model and freeze it (each block then adds
    its attention only); returns the parameters left to train."""
    for layer in model.gpt_neox.layers:
        for p in layer.mlp.parameters():
            p.data.zero_()
            p.requires_grad_(False)
    return [p for p in model.parameters() if p.requires_grad]


# --- training ------------------------------------------------------------------------


def _windows(data: torch.Tensor, starts: torch.Tensor, width: int) -> torch.Tensor:
    return torch.stack([data[s:s + width] for s in starts.tolist()]).long()


def train_run(c: InductionConfig, k: int, run_dir: Path, tok, text, progress: bool = True
              ) -> dict:
    """Train run ``k`` (seed ``c.seed + k``) into ``run_dir``, a checkpoint folder per
    scheduled step; returns its ``done.json``. A finished run is kept; an unfinished one
    is trained again from step 0 (the same seed gives the same run)."""
    from transformers import GPTNeoXForCausalLM

    from toposig.progress import tqdm

    done = run_dir / DONE_FILE
    if done.is_file():
        return read_json(done)
    make_folder(run_dir.parent, run_dir)
    remove_partial_writes(run_dir)
    seed = c.seed + k
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = GPTNeoXForCausalLM(model_config(c))
    trained = attention_only(model)
    model.train()
    opt = torch.optim.AdamW(trained, lr=c.lr, weight_decay=c.weight_decay, betas=(0.9, 0.98))
    train = torch.from_numpy(text.train.copy())
    val = torch.from_numpy(text.val.copy())
    held_out = _windows(val, torch.from_numpy(np.linspace(
        0, len(val) - c.context - 1, c.eval_windows).astype(np.int64)), c.context + 1)
    sequences = probe(c)
    schedule = scheduled_steps(c.steps, c.checkpoint_every, "regular")
    name = f"{c.name}-seed{k}"
    log: list[str] = []
    t0 = time.perf_counter()
    bar = tqdm(total=c.steps, desc=name, unit="step", disable=not progress)
    for step in range(c.steps + 1):
        if step in schedule:
            score = in_context_score(model, sequences)
            losses = token_losses(model, held_out)
            info = {"step": step, "val_loss": float(losses.mean()), SIGNAL: score,
                    "ground_truth": {"signal": SIGNAL, "value": score, "event": "fall",
                                     "levels": list(LEVELS),
                                     "mechanism": mechanism(model, sequences)},
                    "model": name, "suite": c.name, "seed": seed, "seed_group": c.name}
            save_checkpoint(model, tok, run_dir / f"step{step}", info)
            bar.set_postfix(in_context_score=f"{score:.2f}")
        if step == c.steps:
            break
        for group in opt.param_groups:
            group["lr"] = c.lr * min(1.0, (step + 1) / max(c.warmup, 1))
        starts = torch.randint(0, len(train) - c.context - 1, (c.batch_size,), generator=gen)
        x = repeat_blocks(_windows(train, starts, c.context + 1), c, gen)
        logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log.append(json.dumps({"step": step + 1, "loss": loss.item()}))
        bar.update(1)
    bar.close()
    atomic_write_bytes(run_dir / "train_log.jsonl", "".join(f"{ln}\n" for ln in log).encode(),
                       root=run_dir.parent)
    final = read_json(run_dir / f"step{c.steps}" / "trainer_state.json")
    result = {"name": name, "seed": seed, "seed_group": c.name, "checkpoints": schedule,
              "num_parameters": sum(q.numel() for q in trained),
              "final_in_context_score": final[SIGNAL],
              "final_val_loss": final["val_loss"], "seconds": time.perf_counter() - t0}
    atomic_write_json(done, result, root=run_dir.parent)
    return result


def train_induction(c: InductionConfig, root: str | Path = "runs", *, progress: bool = True
                    ) -> tuple[Path, list[dict]]:
    """Train every seed of the suite into ``root/<name>/`` and write its ``inputs.txt``
    and ``config.json``; returns the suite folder and each run's ``done.json``.

    Raises:
        TrainingConfigError: the folder holds a suite trained with other settings.
        FolderLockedError: another run is training into the same folder.
        DataMissingError: WikiText-2 is not available.
    """
    text = load_training_text(c.val_fraction)
    about = {
        "corpus_source": text.source,
        "tokenizer": "byte-level (UTF-8 bytes 0-255, EOS 256), model vocabulary 264",
        "attention_only": f"MLP weights zero and frozen; the weight family leaves out "
                          f"{WEIGHT_EXCLUDE}",
        "seeds": {n: {"seed": c.seed + k, "seed_group": c.name}
                  for k, n in enumerate(c.run_names())},
        "checkpoint_steps": scheduled_steps(c.steps, c.checkpoint_every, "regular"),
        "torch": torch.__version__,
        "torch_threads": TRAIN_THREADS,
    }
    fingerprint = {"config": c.to_dict(), "corpus_split": text.split}
    with task_suite(c, root, fingerprint, about) as suite_dir, torch_threads(TRAIN_THREADS):
        c.write_inputs(suite_dir)
        tok = byte_tokenizer()
        results = []
        for k, name in enumerate(c.run_names()):
            res = train_run(c, k, suite_dir / name, tok, text, progress)
            logger.info("%s: in-context score %.3f at step %d", name,
                        res["final_in_context_score"], c.steps)
            results.append(res)
        return suite_dir, results


