#!/usr/bin/env python
"""The cost of measuring while training (toposig.integrations, toposig train --measure-out).

1. Overhead on the ``tiny`` suite: the project's trainer trains the suite once without
   measuring and once measuring embedding + weights in memory (the live monitor, the
   integrations' code path), at two cadences: every checkpoint of the suite's schedule
   (``toposig train --measure-out``'s default, 18 per model: 0, 1, 2, 4, ..., 64, then
   every 100), every 200 steps (6 per model), and step 0 plus every 500 steps (3 per
   model: what the Trainer callback does by default, measuring at step 0 and at every
   save, with the Trainer's default ``save_steps=500``). Prints the training time
   of each, the time spent measuring, and the overhead as a share of training time.
2. One measurement of a Pythia-70m-shaped model (GPT-NeoX, hidden 512, 6 layers, 8
   heads, vocabulary 50,304, random weights) in memory, against the straightforward way
   of getting the same record: save the checkpoint and run the offline pipeline on it.

    python bench/bench_live.py [--skip-suite] [--skip-70m] [--families embedding,weights]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.cli.train import live_measurement  # noqa: E402
from toposig.families.registry import parse_signatures  # noqa: E402
from toposig.model import training as T  # noqa: E402


def train_tiny(root: Path, measure_out: Path | None, families, every: int | None
               ) -> tuple[float, float, int]:
    """Train the tiny suite into ``root``; returns (wall s, measuring s, measurements)."""
    config = T.load_suite_config("tiny")
    hook = None
    spent = [0.0, 0]
    if measure_out is not None:
        inner = live_measurement(str(measure_out), families, root / config.name, config.steps,
                                 every=every)

        def hook(spec, model, step, info):
            t0 = time.perf_counter()
            inner(spec, model, step, info)
            if every is None or step % every == 0 or step == config.steps:
                spent[0] += time.perf_counter() - t0
                spent[1] += 1

    t0 = time.perf_counter()
    T.train_suite(config, root, progress=False, on_checkpoint=hook)
    return time.perf_counter() - t0, spent[0], spent[1]


def suite_overhead(families) -> None:
    print("1. tiny suite (3 models x 1,000 steps), embedding + weights measured in memory")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base, _, _ = train_tiny(tmp / "plain", None, families, None)
        print(f"   no measuring: training {base:.1f} s")
        for name, every in (
                ("every checkpoint of the schedule (18 per model)", None),
                ("every 200 steps (6 per model)", 200),
                ("the Trainer callback's default: step 0 and each save at the Trainer's "
                 "default save_steps=500 (3 per model)", 500)):
            wall, spent, n = train_tiny(tmp / f"m{every}", tmp / f"live{every}", families,
                                        every)
            print(f"   {name}: {n} measurements, {spent:.1f} s measuring "
                  f"({spent / n:.2f} s each), wall {wall:.1f} s: overhead "
                  f"{100 * spent / (wall - spent):.1f}% of training time "
                  f"(wall vs no measuring: {100 * (wall / base - 1):+.1f}%)")


def pythia70m_cost(families) -> None:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from toposig.config import RunSettings
    from toposig.live.monitor import TopologyMonitor
    from toposig.model.training import byte_tokenizer
    from toposig.run.pipeline import execute
    from toposig.run.plan import plan_run

    print("2. one Pythia-70m-shaped model (GPT-NeoX 512 x 6, vocabulary 50,304), CPU")
    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=50304, hidden_size=512, num_hidden_layers=6,
                           num_attention_heads=8, intermediate_size=2048,
                           max_position_embeddings=2048, rotary_pct=0.25,
                           use_parallel_residual=True, tie_word_embeddings=False)
    model = GPTNeoXForCausalLM(config)
    n = sum(p.numel() for p in model.parameters())
    tok = byte_tokenizer()  # byte ids fit the vocabulary; the cost is the model's
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        monitor = TopologyMonitor(tok, tmp / "live", families=families, label="p70m")
        live = []
        for step in (1000, 2000):  # the first warms up torch's thread pools and caches
            t0 = time.perf_counter()
            result = monitor.measure(model, step)
            live.append(time.perf_counter() - t0)
        assert result.entry is not None, result.failures
        emb, weights = (part.timings_s.get("total", float("nan"))
                        if (part := result.entry.parts.get(f)) else float("nan")
                        for f in ("embedding", "weights"))
        print(f"   {n:,} parameters; in memory: {live[1]:.2f} s per measurement (first "
              f"{live[0]:.2f} s; embedding {emb:.2f} s, weights {weights:.2f} s, the rest "
              "bookkeeping, signal and figure)")
        t0 = time.perf_counter()
        for step in (1000, 2000):
            folder = tmp / "series" / f"step{step}"
            model.save_pretrained(folder)
            tok.save_pretrained(folder)
        saved = (time.perf_counter() - t0) / 2
        plan = plan_run([str(tmp / "series")], None, RunSettings(device="cpu"),
                        signatures=families)
        t1 = time.perf_counter()
        execute(plan, tmp / "offline", progress=False)
        offline = (time.perf_counter() - t1) / 2
        total = saved + offline
        print(f"   saved then analysed offline: {total:.2f} s per checkpoint (save {saved:.2f} "
              f"s, pipeline {offline:.2f} s): in memory takes {live[1] / total:.2f}x the time")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skip-suite", action="store_true")
    p.add_argument("--skip-70m", action="store_true")
    p.add_argument("--families", default="embedding,weights")
    args = p.parse_args()
    families = parse_signatures(args.families)
    if not args.skip_suite:
        suite_overhead(families)
    if not args.skip_70m:
        pythia70m_cost(families)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
