#!/usr/bin/env python
"""Which grokking settings grok (issue 59): a small sweep of the modular-addition task,
trained exactly as ``--preset grokking`` trains (``toposig.model.modular_addition``: its
split, model, loss and AdamW with a 10-step warm-up), without checkpoints.

For each configuration (training fraction, lr, weight decay) and each seed, prints the
step at which the training accuracy first reaches 99 %, the last step whose held-out
accuracy is below 0.1 before it first reaches 50 %, the steps at which it first reaches
50 % and 90 %, and its value at the end. Runs are evaluated every ``--every`` steps.

    python bench/sweep_grokking.py [--configs 0.4,3e-3,1 0.4,2e-3,1] [--seeds 0,1]
        [--split-seed 0] [--steps 6000] [--every 100] [--jsonl out.jsonl]

A configuration is ``fraction,lr,weight_decay``. About 25 to 40 ms a step at one
thread (p = 59, hidden 64). At the default of one thread, as the preset trains
(``TRAIN_THREADS``), seed ``k`` here is the preset's run ``k`` step for step (two sweeps
side by side use the two cores); ``--threads`` sets another count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Trace:
    """One run's accuracies: ``(step, training accuracy, held-out accuracy)`` rows."""

    rows: list[tuple[int, float, float]]

    def first(self, column: int, level: float) -> int | None:
        return next((r[0] for r in self.rows if r[column] >= level), None)

    def plateau_end(self) -> int | None:
        """The last step before held-out accuracy first reaches 50 % at which it is still
        below 0.1, after the training accuracy first reaches 99 %."""
        fitted, rise = self.first(1, 0.99), self.first(2, 0.5)
        if fitted is None:
            return None
        return max((s for s, _, held in self.rows
                    if fitted <= s and (rise is None or s < rise) and held < 0.1), default=None)


def train(fraction: float, lr: float, weight_decay: float, seed: int, split_seed: int | None,
          steps: int, every: int) -> Trace:
    import torch
    from transformers import GPTNeoXForCausalLM

    from toposig.model.modular_addition import (
        ModularConfig,
        answer_loss,
        evaluate,
        inputs,
        model_config,
    )

    c = ModularConfig(name="sweep", train_fraction=fraction, lr=lr, weight_decay=weight_decay,
                      steps=steps, seed=seed, seeds=1, split_seed=split_seed)
    torch.manual_seed(seed)
    train_pairs, held_pairs = c.split_of(0)
    x_train, y_train = inputs(train_pairs, c.p)
    x_held, y_held = inputs(held_pairs, c.p)
    model = GPTNeoXForCausalLM(model_config(c))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                            betas=(0.9, 0.98))
    rows = []
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            rows.append((step, evaluate(model, x_train, y_train, c.p)[1],
                         evaluate(model, x_held, y_held, c.p)[1]))
        if step == steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / max(c.warmup, 1))
        loss = answer_loss(model, x_train, y_train)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return Trace(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["0.4,3e-3,1"],
                        help="fraction,lr,weight_decay ... (default: %(default)s)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated (default: %(default)s)")
    parser.add_argument("--split-seed", type=int, default=0,
                        help="one split for every seed; -1: each seed its own")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jsonl", help="append every run's trace to this file")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    split_seed = None if args.split_seed < 0 else args.split_seed
    print("fraction  lr      wd   seed  fitted  plateau-end  t50    t90    final held-out  s")
    for spec in args.configs:
        fraction, lr, wd = (float(v) for v in spec.split(","))
        for seed in (int(s) for s in args.seeds.split(",")):
            t0 = time.perf_counter()
            trace = train(fraction, lr, wd, seed, split_seed, args.steps, args.every)
            seconds = time.perf_counter() - t0
            if args.jsonl:
                with open(args.jsonl, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"fraction": fraction, "lr": lr, "weight_decay": wd,
                                          "seed": seed, "split_seed": split_seed,
                                          "rows": trace.rows}) + "\n")
            print(f"{fraction:<9g} {lr:<7g} {wd:<4g} {seed:<5d} {trace.first(1, 0.99)!s:<7} "
                  f"{trace.plateau_end()!s:<12} {trace.first(2, 0.5)!s:<6} "
                  f"{trace.first(2, 0.9)!s:<6} {trace.rows[-1][2]:<15.3f} {seconds:.0f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
