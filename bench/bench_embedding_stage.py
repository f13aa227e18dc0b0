#!/usr/bin/env python
"""Time one Pythia-14m-shaped checkpoint through the whole embedding stage.

Compares the full stage (load tokenizer and model from disk, tokenize, one forward pass
with pooled hidden states of every layer and the token loss, PCA, Vietoris-Rips H0/H1,
spectral features, record and diagrams written atomically) with a bare batched forward
pass of the same tokens through the already-loaded model (``model(input_ids,
attention_mask)``, logits for every position; target: ratio <= 1.5), and with the plain
way of getting what the stage needs, the forward pass with labels and every hidden state
(``model(..., labels=..., output_hidden_states=True)``; target: ratio <= 1.0).

    python bench/bench_embedding_stage.py [--repeats 3] [--n-texts 200] [--max-length 128]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
TOKENIZER_FILE = ROOT.parent / "shared" / "data" / "pythia-tokenizer" / "20B_tokenizer.json"

from toposig.config import RunSettings  # noqa: E402
from toposig.model.forward import tokenize  # noqa: E402
from toposig.run.pipeline import execute  # noqa: E402
from toposig.run.plan import plan_run  # noqa: E402
from toposig.sources.corpus import load_texts  # noqa: E402


def make_pythia14m(folder: Path) -> Path:
    """A random-weight model of Pythia-14m's shape, with the Pythia tokenizer."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=128, num_hidden_layers=6,
                        num_attention_heads=4, intermediate_size=512,
                        max_position_embeddings=2048, tie_word_embeddings=False)
    torch.manual_seed(0)
    GPTNeoXForCausalLM(cfg).save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_FILE), eos_token="<|endoftext|>",
                            bos_token="<|endoftext|>").save_pretrained(folder)
    return folder


@torch.inference_mode()
def bare_forward(model, ids: torch.Tensor, mask: torch.Tensor, batch_size: int) -> None:
    for i in range(0, ids.shape[0], batch_size):
        model(input_ids=ids[i : i + batch_size], attention_mask=mask[i : i + batch_size])


@torch.inference_mode()
def plain_forward(model, ids: torch.Tensor, mask: torch.Tensor, batch_size: int) -> None:
    """The plain way of getting what the stage needs from the model: its own loss and
    every hidden state, ``model(..., labels=..., output_hidden_states=True)``."""
    for i in range(0, ids.shape[0], batch_size):
        b, m = ids[i : i + batch_size], mask[i : i + batch_size]
        model(input_ids=b, attention_mask=m, labels=b.masked_fill(m == 0, -100),
              output_hidden_states=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--n-texts", type=int, default=200)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    settings = RunSettings(n_texts=args.n_texts, max_length=args.max_length,
                           batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_pythia14m(Path(tmp) / "pythia-14m-random" / "step0")
        texts = load_texts(None, args.n_texts, settings.min_chars)

        tok = AutoTokenizer.from_pretrained(folder)
        tok.pad_token = tok.eos_token
        ids, mask = tokenize(tok, texts, args.max_length)
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        bare_forward(model, ids[:4], mask[:4], 4)  # warm-up

        bare, plain, stage = [], [], []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            bare_forward(model, ids, mask, args.batch_size)
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            plain_forward(model, ids, mask, args.batch_size)
            plain.append(time.perf_counter() - t0)

            plan = plan_run([str(folder.parent)], None, settings)
            t0 = time.perf_counter()
            outcome = execute(plan, Path(tmp) / f"results{r}", progress=False)
            stage.append(time.perf_counter() - t0)
            assert outcome.computed == 1 and not outcome.failures
        timings = outcome.records[0]["timings_s"]

    b, s = statistics.median(bare), statistics.median(stage)
    f = statistics.median(plain)
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}")
    print(f"checkpoint: Pythia-14m shape (6 x 128, vocab 50304), {args.n_texts} WikiText-2 "
          f"texts, <= {args.max_length} tokens ({int(mask.sum())} tokens), batch "
          f"{args.batch_size}, median of {args.repeats}")
    print(f"{'':<44}{'seconds':>10}")
    print(f"{'bare batched forward (logits, all positions)':<44}{b:>10.2f}")
    print(f"{'the same with labels and hidden states':<44}{f:>10.2f}")
    print(f"{'whole embedding stage':<44}{s:>10.2f}")
    for part in ("load", "forward", "features"):
        print(f"{'  of which ' + part:<44}{timings[part]:>10.2f}")
    print(f"ratio stage / bare forward: {s / b:.2f}  (target <= 1.5)")
    print(f"ratio stage / forward with labels and hidden states: {s / f:.2f}  "
          f"(target <= 1.0, issue 38)")
    return 0 if s / b <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
