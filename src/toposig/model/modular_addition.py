"""A positive control whose transition step is known: grokking on modular addition.

A small transformer learns ``a + b = c (mod p)`` from a fraction of the table under
strong weight decay (Power et al. 2022; Nanda et al. 2023). Full-batch training fits the
training pairs early; accuracy on the held-out pairs stays near 0 for a while (the split
keeps both orders of a pair on one side: :func:`split`) and then climbs to near 1, at a
step that differs from seed to seed. That climb, measured without any topology, is the
ground truth: every checkpoint's
``trainer_state.json`` states the held-out accuracy as
``{"signal": "test_accuracy", "value": ..., "event": "rise", "levels": [0.5, 0.9]}``
(:data:`toposig.records.GROUND_TRUTH`), which the records of its measurements carry and
the analysis places every feature's change-point against
(:mod:`toposig.analysis.ground_truth`). Beside it, the ground truth's ``mechanism``
states Nanda et al.'s progress measures at every checkpoint: the training accuracy
(memorisation), and the restricted and excluded loss in the Fourier basis of the
operands (:mod:`toposig.features.modular_fourier`), from the logits of every pair and
the key frequencies of the run's last checkpoint (written into every checkpoint's
``trainer_state.json`` once the run is trained, from its saved weights, before its
``done.json``).

Each checkpoint is a Hugging Face GPT-NeoX folder with a word-level tokenizer (``0`` ..
``p-1``, ``=``), so the embedding family measures the task's own inputs: the suite folder
holds ``inputs.txt``, one ``a b =`` per line, the same pairs for every seed. The loss
trained is the cross-entropy of the answer ``c`` over the whole vocabulary, what
``model(ids, labels=...)`` returns for ``a b = c`` with every label but the answer masked;
when every run trains on one split (``split_seed``), the suite folder also holds
``train.txt``, those training lines ``a b = c``, on which the ``llc`` family samples that
loss (``--llc-objective answer``; :meth:`ModularConfig.llc_settings`).

Layout: ``<root>/<name>/<name>-seed<k>/step<N>/`` as :mod:`toposig.model.training` writes
suites; a run that is not finished is retrained from its start (a few minutes at most);
a finished one (``done.json``) is kept.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from toposig.checkpoint_steps import scheduled_steps
from toposig.features.modular_fourier import excluded_loss, key_frequencies, restricted_loss
from toposig.files.atomic import atomic_write_bytes, atomic_write_json, make_folder, read_json
from toposig.model.task import TaskConfig, check_task_fields, task_check, task_suite
from toposig.model.training import (
    DONE_FILE,
    TRAIN_THREADS,
    quiet_transformers,
    remove_partial_writes,
    save_checkpoint,
    torch_threads,
    write_inputs_file,
)

logger = logging.getLogger(__name__)

TASK = "modular_addition"
EQUALS = "="
SIGNAL = "test_accuracy"
LEVELS = (0.5, 0.9)  # the ground truth's steps: held-out accuracy reaching 50 % and 90 %
TRAIN_LEVEL = 0.99  # the mechanism's memorisation step: training accuracy reaching 99 %
TEXTS_SEED = 0  # the pairs of inputs.txt: the same for every seed of the suite
TRAIN_FILE = "train.txt"  # the training lines "a b = c" of a suite trained on one split


@dataclass(frozen=True)
class ModularConfig(TaskConfig):
    """A grokking suite: ``seeds`` runs of one transformer on ``a + b mod p``.

    Attributes:
        name: the suite's folder name; its runs are ``<name>-seed<k>``.
        p: the modulus (a prime keeps every ``a`` invertible).
        train_fraction: the share of the unordered pairs ``{a, b}`` trained on, each in
            both orders (split per seed: :func:`split`).
        hidden, layers, heads: the GPT-NeoX shape (intermediate size 4 x hidden).
        steps, checkpoint_every: full-batch AdamW updates, and a checkpoint every so many
            (and at 0 and the last step).
        lr, weight_decay, warmup: AdamW with betas (0.9, 0.98); a linear warm-up over
            ``warmup`` updates, then a constant rate.
        seed, seeds: run ``k`` uses seed ``seed + k`` for its initialisation (and its
            split, unless ``split_seed`` is set).
        split_seed: the seed of the one split every run trains on (so runs differ in their
            initialisation alone, and their training lines are one file); ``None``: each
            run's own seed.
        n_texts: the pairs written to ``inputs.txt`` for the embedding family.
    """

    name: str
    p: int = 59
    train_fraction: float = 0.6
    hidden: int = 64
    layers: int = 1
    heads: int = 4
    steps: int = 1000
    checkpoint_every: int = 20
    lr: float = 2e-3
    weight_decay: float = 2.0
    warmup: int = 10
    seed: int = 0
    seeds: int = 5
    n_texts: int = 200
    split_seed: int | None = None
    description: str = ""

    TASK: ClassVar[str] = TASK
    SIGNAL: ClassVar[str] = SIGNAL

    def __post_init__(self) -> None:
        validate(self)

    def texts(self) -> list[str]:
        return task_texts(self)

    def train(self, root: str | Path = "runs", *, progress: bool = True
              ) -> tuple[Path, list[dict]]:
        return train_modular(self, root, progress=progress)

    def split_of(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Run ``k``'s training and held-out pairs (:func:`split`)."""
        return split(self.p, self.train_fraction,
                     self.seed + k if self.split_seed is None else self.split_seed)

    def llc_settings(self, suite_dir: str | Path) -> dict | None:
        """The ``llc`` family's settings for the loss the runs are trained on: the answer
        objective on the suite's ``train.txt`` (written here if missing), when every run
        trains on one split; ``None`` when each run has its own."""
        if self.split_seed is None:
            return None
        lines = [f"{a} {b} {EQUALS} {(a + b) % self.p}" for a, b in self.split_of(0)[0]]
        return {"objective": "answer",
                "texts_file": str(write_inputs_file(suite_dir, lines, self.name, TRAIN_FILE))}


def validate(c: ModularConfig) -> None:
    """Raise :class:`TrainingConfigError` naming the first bad value."""
    check_task_fields(c)
    need = task_check(c)
    # p + 1 tokens: the measurement refuses tokenizers of fewer than 16 (an empty one)
    need(c.p >= 17 and all(c.p % d for d in range(2, int(c.p ** 0.5) + 1)),
         f"p must be a prime of at least 17, got {c.p}")
    need(0 < c.train_fraction < 1, f"train_fraction must be in (0, 1), got {c.train_fraction}")
    n_unordered = c.p * (c.p + 1) // 2
    need(1 <= int(c.train_fraction * n_unordered) < n_unordered,
         f"train_fraction {c.train_fraction} leaves no pair on one side of the split")
    need(1 <= c.n_texts <= c.p * c.p, f"n_texts must be within 1..{c.p * c.p}")
    need(c.split_seed is None or (type(c.split_seed) is int and 0 <= c.split_seed < 2 ** 32),
         f"split_seed must be null or an integer in 0..2^32-1, got {c.split_seed!r}")


# --- the task ------------------------------------------------------------------------


def tokenizer(p: int):
    """A word-level Hugging Face fast tokenizer: ``"0"`` .. ``"p-1"`` are ids 0 .. p-1,
    ``"="`` is p (also end of text and padding)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {str(i): i for i in range(p)} | {EQUALS: p}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=EQUALS))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EQUALS, pad_token=EQUALS,
                                   unk_token=EQUALS)


def split(p: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training and held-out pairs of one seed: two ``(n, 2)`` int64 arrays of
    ``(a, b)``, sorted. A seeded random ``fraction`` of the ``p (p + 1) / 2`` unordered
    pairs ``{a, b}`` is trained on, each in both orders, and the rest is held out: were
    ``(a, b)`` and ``(b, a)`` split apart, a model that memorised one would answer the
    other (addition commutes) and the held-out accuracy would rise with memorisation
    alone, long before the model has learnt the operation."""
    a, b = np.triu_indices(p)
    order = np.random.default_rng(seed).permutation(len(a))
    n_train = int(fraction * len(a))

    def both_orders(idx: np.ndarray) -> np.ndarray:
        pairs = np.concatenate([np.stack([a[idx], b[idx]], 1), np.stack([b[idx], a[idx]], 1)])
        return np.unique(pairs, axis=0).astype(np.int64)

    return both_orders(order[:n_train]), both_orders(order[n_train:])


def inputs(pairs: np.ndarray, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[a, b, =]`` of each pair, ``(n, 3)``, and the answers ``(a + b) mod p``."""
    x = np.concatenate([pairs, np.full((len(pairs), 1), p)], axis=1)
    return torch.from_numpy(x).long(), torch.from_numpy((pairs[:, 0] + pairs[:, 1]) % p).long()


def task_texts(c: ModularConfig) -> list[str]:
    """The lines of ``inputs.txt``: ``n_texts`` pairs of the whole table as ``"a b ="``,
    drawn with a fixed seed (the same for every run, so every checkpoint is measured on the
    same inputs, held-out and training pairs alike)."""
    rng = np.random.default_rng(TEXTS_SEED)
    chosen = np.sort(rng.choice(c.p * c.p, size=c.n_texts, replace=False))
    return [f"{i // c.p} {i % c.p} {EQUALS}" for i in chosen]


def answer_logits(model, x: torch.Tensor, p: int) -> torch.Tensor:
    """The scores of the ``p`` answers after ``=``: ``(n, p)``."""
    return model(input_ids=x).logits[:, -1, :p]


@torch.no_grad()
def all_logits(model, p: int) -> np.ndarray:
    """``(p, p, p)`` float64: the score of every answer ``c`` for every pair ``(a, b)``,
    ``[a, b, c]`` (:mod:`toposig.features.modular_fourier`'s layout)."""
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    x, _ = inputs(np.stack([a.ravel(), b.ravel()], 1), p)
    model.eval()
    logits = answer_logits(model, x, p)
    model.train()
    return logits.double().numpy().reshape(p, p, p)


def mechanism(logits: np.ndarray, key: tuple[int, ...], train: np.ndarray,
              train_accuracy: float) -> dict:
    """The ground truth's ``mechanism`` at one checkpoint: the training accuracy
    (memorisation: rises; its event is reaching :data:`TRAIN_LEVEL`) and Nanda et al.'s
    restricted loss (every pair, the logits kept to the key frequencies: falls) and
    excluded loss (the training pairs, the key frequencies taken out: rises), each
    event halfway."""
    return {"train_accuracy": {"value": train_accuracy, "event": "rise",
                               "levels": [TRAIN_LEVEL]},
            "restricted_loss": {"value": restricted_loss(logits, key), "event": "fall"},
            "excluded_loss": {"value": excluded_loss(logits, key, train), "event": "rise"}}


def answer_loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss trained: the mean cross-entropy (nats) of the answers ``y`` after ``x``
    ``(n, 3)``, over the whole vocabulary (``=`` too), what ``model(ids, labels=...)``
    returns for ``[a, b, =, c]`` with every label but ``c`` masked."""
    return F.cross_entropy(model(input_ids=x).logits[:, -1, :], y)


@torch.no_grad()
def evaluate(model, x: torch.Tensor, y: torch.Tensor, p: int) -> tuple[float, float]:
    """The loss trained (:func:`answer_loss`) and the accuracy of the answers to ``x``
    (the best of the ``p`` answers)."""
    model.eval()
    logits = model(input_ids=x).logits[:, -1, :]
    model.train()
    return (float(F.cross_entropy(logits, y)),
            float((logits[:, :p].argmax(1) == y).float().mean()))


def model_config(c: ModularConfig):
    """GPT-NeoX at the config's shape with a vocabulary of ``p + 1`` and room for the three
    tokens; Pythia's conventions (as the trained suites) but one: the residual is
    sequential (the MLP reads what attention wrote), since with Pythia's parallel
    residual a one-layer model's MLP never sees the other operand, and held-out accuracy
    stalled below 40 % in our first runs."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=c.p + 1, hidden_size=c.hidden, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, intermediate_size=4 * c.hidden,
        max_position_embeddings=8, use_parallel_residual=False, tie_word_embeddings=False,
        hidden_dropout=0.0, attention_dropout=0.0,
        bos_token_id=c.p, eos_token_id=c.p, pad_token_id=c.p)


# --- training ------------------------------------------------------------------------


def train_run(c: ModularConfig, k: int, run_dir: Path, tok, progress: bool = True) -> dict:
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
    train_pairs, test_pairs = c.split_of(k)
    x_train, y_train = inputs(train_pairs, c.p)
    x_test, y_test = inputs(test_pairs, c.p)
    model = GPTNeoXForCausalLM(model_config(c))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay,
                            betas=(0.9, 0.98))
    schedule = scheduled_steps(c.steps, c.checkpoint_every, "regular")
    name = f"{c.name}-seed{k}"
    train_mask = np.zeros((c.p, c.p), dtype=bool)
    train_mask[train_pairs[:, 0], train_pairs[:, 1]] = True
    log: list[str] = []
    t0 = time.perf_counter()
    bar = tqdm(total=c.steps, desc=name, unit="step", disable=not progress)
    for step in range(c.steps + 1):
        if step in schedule:
            train_loss, train_acc = evaluate(model, x_train, y_train, c.p)
            test_loss, test_acc = evaluate(model, x_test, y_test, c.p)
            info = {"step": step, "val_loss": test_loss, "train_loss": train_loss,
                    "train_accuracy": train_acc, "test_accuracy": test_acc,
                    "ground_truth": {"signal": SIGNAL, "value": test_acc, "event": "rise",
                                     "levels": list(LEVELS)},
                    "model": name, "suite": c.name, "seed": seed, "seed_group": c.name}
            save_checkpoint(model, tok, run_dir / f"step{step}", info)
            bar.set_postfix(test_accuracy=f"{test_acc:.2f}")
        if step == c.steps:
            break
        for group in opt.param_groups:
            group["lr"] = c.lr * min(1.0, (step + 1) / max(c.warmup, 1))
        loss = answer_loss(model, x_train, y_train)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log.append(json.dumps({"step": step + 1, "loss": loss.item()}))
        bar.update(1)
    bar.close()
    atomic_write_bytes(run_dir / "train_log.jsonl", "".join(f"{ln}\n" for ln in log).encode(),
                       root=run_dir.parent)
    # the mechanism needs the run's key frequencies, those of its last checkpoint; each
    # checkpoint's logits are made again from its saved weights (none are held: p^3
    # values a checkpoint)
    key = key_frequencies(all_logits(model, c.p))
    for step in schedule:
        folder = run_dir / f"step{step}"
        state = read_json(folder / "trainer_state.json")
        state["key_frequencies"] = list(key)
        with quiet_transformers():  # no "Loading weights" bar per checkpoint
            saved = GPTNeoXForCausalLM.from_pretrained(folder)
        state["ground_truth"]["mechanism"] = mechanism(
            all_logits(saved, c.p), key, train_mask, state["train_accuracy"])
        atomic_write_json(folder / "trainer_state.json", state, root=run_dir)
    final = read_json(run_dir / f"step{c.steps}" / "trainer_state.json")
    result = {"name": name, "seed": seed, "seed_group": c.name, "checkpoints": schedule,
              "num_parameters": sum(q.numel() for q in model.parameters()),
              "final_test_accuracy": final["test_accuracy"], "key_frequencies": list(key),
              "final_val_loss": final["val_loss"], "seconds": time.perf_counter() - t0}
    atomic_write_json(done, result, root=run_dir.parent)
    return result


def train_modular(c: ModularConfig, root: str | Path = "runs", *, progress: bool = True
                  ) -> tuple[Path, list[dict]]:
    """Train every seed of the suite into ``root/<name>/`` and write its ``inputs.txt``
    and ``config.json``; returns the suite folder and each run's ``done.json``. Runs
    train at :data:`TRAIN_THREADS` torch thread (a run is chaotic: at two threads
    another order of float sums gave seed 0 of the earlier preset held-out accuracies up
    to 0.585 apart).

    Raises:
        TrainingConfigError: the folder holds a suite trained with other settings.
        FolderLockedError: another run is training into the same folder.
    """
    about = {
        "tokenizer": f"word-level: '0'..'{c.p - 1}' are ids 0..{c.p - 1}, '=' is {c.p}",
        "seeds": {n: {"seed": c.seed + k, "seed_group": c.name}
                  for k, n in enumerate(c.run_names())},
        "checkpoint_steps": scheduled_steps(c.steps, c.checkpoint_every, "regular"),
        "torch": torch.__version__,
        "torch_threads": TRAIN_THREADS,
    }
    with task_suite(c, root, {"config": c.to_dict()}, about) as suite_dir, \
            torch_threads(TRAIN_THREADS):
        c.write_inputs(suite_dir)
        tok = tokenizer(c.p)
        results = []
        for k, name in enumerate(c.run_names()):
            res = train_run(c, k, suite_dir / name, tok, progress)
            logger.info("%s: held-out accuracy %.3f at step %d", name,
                        res["final_test_accuracy"], c.steps)
            results.append(res)
        return suite_dir, results


