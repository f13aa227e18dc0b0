#!/usr/bin/env python
"""The GPU path end to end on Pythia-410m-shaped checkpoints (random weights: no Hub here).

Builds a local series of two checkpoints (``step0``, ``step1000``; GPT-NeoX, hidden 1024,
24 layers, 16 heads, vocabulary 50,304: Pythia-410m's shape) with the Pythia tokenizer,
then times ``toposig run`` (the pipeline, as a researcher runs it) with the embedding and
weight families on ``--device auto``:

1. the default: 200 texts of at most 128 tokens, ``--batch-size auto`` (one batch on a
   GPU), every hidden state (``--layers all``);
2. batch back-off: ``--n-texts N --max-length 2048`` with ``--batch-size N``, a first batch
   too large for the card, so that the stage halves it until it fits (the records say
   which batch size the stage settled on).

3. with ``--probes``: the loss probes (landscape and gradients) on one checkpoint.

It prints each run's wall time and, per checkpoint, the record's timings, device, dtype and
batch size, then a table of each family's seconds per checkpoint. Needs a CUDA GPU (it
runs on a CPU too, slowly, for a dry run: --cpu-dry-run).

    python bench/bench_gpu_410m.py [--n-long 1600] [--probes] [--skip-default] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
TOKENIZER = next((p for p in (ROOT / "datasets" / "pythia-tokenizer" / "20B_tokenizer.json",
                              ROOT.parent / "shared" / "data" / "pythia-tokenizer"
                              / "20B_tokenizer.json") if p.is_file()), None)


def series(root: Path, hidden: int, layers: int, heads: int) -> Path:
    """``root/step0`` and ``root/step1000``: random-weight Pythia-shaped checkpoints."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER),
                                        eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>")
    config = GPTNeoXConfig(
        vocab_size=50304, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=4 * hidden,
        max_position_embeddings=2048, use_parallel_residual=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25})
    for seed, step in enumerate((0, 1000)):
        torch.manual_seed(seed)
        GPTNeoXForCausalLM(config).save_pretrained(root / f"step{step}")
        tokenizer.save_pretrained(root / f"step{step}")
    return root


def run(args: list[str]) -> float:
    from toposig.cli.main import main

    t = time.perf_counter()
    rc = main(["run", *args])
    if rc not in (0, None):
        raise SystemExit(f"toposig run {' '.join(args)} exited {rc}")
    return time.perf_counter() - t


TABLE: list[tuple[str, str, float]] = []  # (family, what, seconds per checkpoint)


def report(out: Path, title: str, wall: float) -> None:
    entries = json.loads((out / "data" / "all_results.json").read_text())
    print(f"{title}: {wall:.1f} s for {len(entries)} checkpoints")
    TABLE.append(("embedding", "200 texts <= 128 tokens, every layer",
                  max(e["timings_s"]["total"] for e in entries)))
    TABLE.append(("weights", f"{entries[0]['weights']['n_matrices']} matrices",
                  max(e["weights"]["timings_s"]["total"] for e in entries)))
    for e in entries:
        t = {k: round(v, 2) for k, v in e["timings_s"].items()}
        w = {k: round(v, 2) for k, v in e["weights"]["timings_s"].items()}
        print(f"  step {e['step']}: device {e['device']} dtype {e['dtype']} batch "
              f"{e['batch_size']} texts {e['n_texts']} tokens {e['n_input_tokens']}; "
              f"embedding {t}; weights {w} ({e['weights']['n_matrices']} matrices, "
              f"{e['weights']['ph_backend']}); perplexity {e['perplexity']:.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-long", type=int, default=1600,
                   help="texts of the back-off run (at most 2048 tokens each)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--probes", action="store_true",
                   help="also time the loss probes (landscape, gradients) on one checkpoint")
    p.add_argument("--skip-default", action="store_true",
                   help="only the back-off run (and --probes)")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="a 2-layer, 64-wide model on the CPU: checks the script, times nothing")
    args = p.parse_args()
    if TOKENIZER is None:
        raise SystemExit("no Pythia tokenizer in datasets/ or ../shared/data/")
    shape = (64, 2, 2) if args.cpu_dry_run else (1024, 24, 16)
    device = ["--device", "cpu"] if args.cpu_dry_run else ["--device", "auto"]
    with tempfile.TemporaryDirectory() as tmp:
        base = args.out or Path(tmp)
        t = time.perf_counter()
        models = series(Path(tmp) / "p410m", *shape)
        print(f"built two {shape[1]}-layer checkpoints in {time.perf_counter() - t:.1f} s")
        if not args.skip_default:
            out = base / "default"
            wall = run(["--models", str(models), "--signatures", "embedding,weights",
                        *device, "--layers", "all", "--out", str(out)])
            report(out, "default (200 texts x <=128 tokens, --batch-size auto, --layers all)",
                   wall)
        if args.probes:
            out = base / "probes"
            wall = run(["--models", str(models), "--signatures", "landscape,gradients",
                        *device, "--steps", "1000", "--out", str(out)])
            e = json.loads((out / "data" / "all_results.json").read_text())[0]
            timings = {f: {k: round(v, 2) for k, v in e[f]["timings_s"].items()}
                       for f in ("landscape", "gradients")}
            print(f"loss probes (landscape + gradients, one checkpoint): {wall:.1f} s; "
                  f"landscape {timings['landscape']}; gradients {timings['gradients']}")
            TABLE.append(("landscape", "curvature + 13 x 13 surface, 4 windows",
                          timings["landscape"]["total"]))
            TABLE.append(("gradients", "64 per-example gradients",
                          timings["gradients"]["total"]))
        out = base / "backoff"
        n = 40 if args.cpu_dry_run else args.n_long
        wall = run(["--models", str(models), "--signatures", "embedding", *device,
                    "--n-texts", str(n), "--max-length", "2048", "--batch-size", str(n),
                    "--steps", "1000", "--out", str(out)])
        report_backoff = json.loads((out / "data" / "all_results.json").read_text())[0]
        print(f"back-off ({n} texts x <=2048 tokens, first batch {n}): {wall:.1f} s; the "
              f"stage settled on batch {report_backoff['batch_size']} "
              f"({report_backoff['n_input_tokens']} tokens, timings "
              f"{ {k: round(v, 2) for k, v in report_backoff['timings_s'].items()} })")
        TABLE.append(("embedding", f"{n} texts <= 2048 tokens, back-off",
                      report_backoff["timings_s"]["total"]))
    print(f"\n{'family':<11}{'what':<42}{'s / checkpoint':>15}  (the slowest checkpoint)")
    for family, what, seconds in TABLE:
        print(f"{family:<11}{what:<42}{seconds:>15.2f}")
    per = {f: max(s for g, w, s in TABLE if g == f and "back-off" not in w)
           for f in ("embedding", "weights") if any(g == f for g, _, _ in TABLE)}
    if len(per) == 2:
        print(f"embedding + weights: {sum(per.values()):.2f} s a checkpoint "
              f"(issue 38's target on an H100: at most 3 s)")


if __name__ == "__main__":
    main()
