#!/usr/bin/env python
"""Training throughput of the project's suites, per model size, on this machine.

Times real optimizer updates (forward, backward, clipping, AdamW) of every model of the
given presets on random byte windows, and prints tokens/s, ms per step and the
projected training time of the preset (its steps x ms per step, without checkpoints).

    python bench/bench_training.py [--presets tiny seed004] [--steps 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.model import training as T  # noqa: E402


def time_model(spec: T.ModelSpec, c: T.SuiteConfig, steps: int) -> float:
    """Seconds per optimizer update, median over ``steps`` after two warm-up updates."""
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(T.model_config(spec, c)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
    data = torch.from_numpy(np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8))
    gen = torch.Generator().manual_seed(0)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        x, y = T.sample_batch(data, c, gen)
        T.loss_of(model, x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["tiny", "seed004"])
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.presets:
        c = T.load_suite_config(name)
        tokens = c.batch_size * c.context
        print(f"\npreset {c.name}: batch {c.batch_size} x context {c.context} = {tokens} "
              f"tokens/step, {c.steps} steps")
        print(f"  {'model':<18}{'params':>10}{'ms/step':>10}{'tokens/s':>12}{'projected':>12}")
        total = 0.0
        for spec in c.models:
            s = time_model(spec, c, args.steps)
            total += s * c.steps
            print(f"  {spec.name:<18}{T.count_parameters(spec, c):>10,}{s * 1e3:>10.1f}"
                  f"{tokens / s:>12,.0f}{s * c.steps / 60:>10.1f} min")
        print(f"  suite, training only: {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
