#!/usr/bin/env python
"""A run's bookkeeping cost against its checkpoint count: linear, not quadratic.

Runs :func:`toposig.run.pipeline.execute` on synthetic weight-family results (an executor
that hands back a realistic record, 24 matrices with their features and row diagrams,
for each checkpoint at once, so only the bookkeeping is timed: the record and arrays
writes, the aggregates, the run config) for N and 10 N checkpoints, and prints the time
per checkpoint and the ratio of the totals (linear: about 10).

For comparison it times the previous way of keeping the aggregates, rewriting
``all_results.json`` and the per-model files after every checkpoint, on the same
records for N and 3 N checkpoints (at 10 N it takes too long to wait for): that grows
with the square of the checkpoint count (about 9x for 3x).

    python bench/bench_bookkeeping.py [--n 100 1000] [--old 100 300] [--matrices 24]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.config import RunSettings  # noqa: E402
from toposig.families.base import FamilyInputs  # noqa: E402
from toposig.families.weights import WeightsFamily  # noqa: E402
from toposig.model.placement import Placement  # noqa: E402
from toposig.records import CheckpointOutput, record_header  # noqa: E402
from toposig.run import pipeline  # noqa: E402
from toposig.run import plan as planning  # noqa: E402
from toposig.run.store import ResultStore  # noqa: E402
from toposig.sources.checkpoints import Checkpoint, checkpoint_identity  # noqa: E402

FEATURES = ("np_mean", "np_std", "np_min", "np_max", "np_seed_mean", "np_seed_std",
            "weight_h0_total", "weight_h1_total", "weight_h0_count", "weight_h1_count",
            "weight_l2_norm", "weight_std", "weight_max_abs", "weight_mean_abs")
MATRIX_FIELDS = ("np", "np_normalized", "np_seed", "l2_norm", "std", "max_abs", "mean_abs",
                 *(f"h{q}_{f}" for q in (0, 1) for f in (
                     "n_features", "total_persistence", "mean_persistence",
                     "max_persistence", "std_persistence", "persistence_entropy",
                     "n_significant")))


def synthetic_output(ckpt: Checkpoint, n_matrices: int, rng: np.random.Generator
                     ) -> CheckpointOutput:
    """A weight record and row diagrams shaped like a 6-layer model's."""
    matrices = [{"name": f"layers.{i // 4}.m{i % 4}.weight", "shape": [128, 512],
                 "rows_used": 128, **{f: float(rng.random()) for f in MATRIX_FIELDS}}
                for i in range(n_matrices)]
    record = {**record_header("weights", checkpoint_identity(ckpt)),
              "checkpoint_loss": float(rng.random()),
              "checkpoint_loss_key": "val_loss", "num_parameters": 14_000_000,
              "n_matrices": n_matrices, "w_max": 1.0, "ph_backend": "giotto-ph",
              "device": "cpu", "features": {f: float(rng.random()) for f in FEATURES},
              "matrices": matrices, "timings_s": {"total": 0.0}}
    arrays = {f"{m['name']}:h{q}": rng.random((40, 2)) for m in matrices for q in (0, 1)}
    return CheckpointOutput(record, arrays)


class InstantExecutor:
    """Hands back a synthetic result for every task at once."""

    def __init__(self, n_matrices: int):
        self.n_matrices = n_matrices
        self.rng = np.random.default_rng(0)

    def run(self, tasks, plan, emit, done) -> None:
        for task in tasks:
            emit(task, "weights", synthetic_output(task.ckpt, self.n_matrices, self.rng))
            done(task)


def synthetic_plan(n: int) -> planning.RunPlan:
    ckpts = [Checkpoint("bench/model", "model", s * 100, "hub", "bench/model", f"step{s * 100}")
             for s in range(n)]
    inputs = FamilyInputs([], [], RunSettings(), {"weights": WeightsFamily()})
    return planning.RunPlan(ckpts, inputs, Placement(), "giotto-ph", True,
                            {"weights": "wbench00000"}, families=[("weights",)] * n)


def time_run(n: int, n_matrices: int) -> tuple[float, list[dict], dict]:
    with tempfile.TemporaryDirectory() as out:
        plan = synthetic_plan(n)
        t0 = time.perf_counter()
        outcome = pipeline.execute(plan, out, progress=False,
                                   executor=InstantExecutor(n_matrices))
        return time.perf_counter() - t0, outcome.records, outcome.config


def time_old_way(records: list[dict], config: dict) -> float:
    """Rewrite the aggregates after every checkpoint, as the pipeline used to."""
    with tempfile.TemporaryDirectory() as out:
        store = ResultStore(out, "wbench00000")
        t0 = time.perf_counter()
        for k in range(1, len(records) + 1):
            store.write_aggregates(records[:k], config)
        return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs=2, default=[100, 1000], metavar=("SMALL", "LARGE"))
    p.add_argument("--old", type=int, nargs=2, default=[100, 300], metavar=("SMALL", "LARGE"))
    p.add_argument("--matrices", type=int, default=24)
    args = p.parse_args()
    print(f"synthetic weight records, {args.matrices} matrices each\n")
    print("now: records as each checkpoint finishes, aggregates at start and end")
    print(f"{'checkpoints':>12} {'run (s)':>9} {'per ckpt (ms)':>14}")
    runs = {}
    for n in sorted(set(args.n) | set(args.old)):
        runs[n] = time_run(n, args.matrices)
        if n in args.n:
            print(f"{n:>12} {runs[n][0]:>9.2f} {1000 * runs[n][0] / n:>14.2f}")
    (small, large), (o_small, o_large) = args.n, args.old
    print(f"{large} / {small} checkpoints: x{runs[large][0] / runs[small][0]:.1f} "
          f"(linear: x{large / small:.0f})\n")
    print("before: the aggregates rewritten after every checkpoint (that part alone)")
    print(f"{'checkpoints':>12} {'aggregates (s)':>15} {'per ckpt (ms)':>14}")
    old = {}
    for n in (o_small, o_large):
        old[n] = time_old_way(runs[n][1], runs[n][2])
        print(f"{n:>12} {old[n]:>15.2f} {1000 * old[n] / n:>14.2f}")
    print(f"{o_large} / {o_small} checkpoints: x{old[o_large] / old[o_small]:.1f} "
          f"(quadratic: x{(o_large / o_small) ** 2:.0f})")


if __name__ == "__main__":
    main()
