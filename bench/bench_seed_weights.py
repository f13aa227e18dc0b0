#!/usr/bin/env python
"""The weight stage on the seed paper's 255 checkpoints, against the seed's extraction.

The seed paper (../shared/seeds/seed-paper.md, section 3.2) computes at each checkpoint,
for every weight matrix: neural persistence (the H0 diagram of the bipartite graph of
|W| under a descending filtration, normalised by |V| - 1, its equation 1) and
Vietoris-Rips H0/H1 of the matrix's rows (at most 200 rows, subsampled) with ripser,
summed over matrices. Its code is not available; ``seed_extraction`` below is that
description written plainly and efficiently (the H0 deaths of a descending filtration
are the edges of a maximum spanning tree: ``scipy.sparse.csgraph``; ripser as the seed
used it), so the baseline is not slowed by a Python loop.

Ours is what a user runs: ``python src/run_experiments.py --models <the suite's model
folders> --signatures weights`` into a fresh folder, which computes far more per matrix
(neural persistence normalised both ways, row homology, the heavy-tail baselines of
weightwatcher, spectral norms) and writes a record per checkpoint atomically.

Both run as whole processes with the same thread count (``--threads``, default 1, set
through the OpenMP/BLAS environment variables and torch), alternating, and the bench
prints the wall and CPU seconds of each and their ratio (issue 38's target: ours at most
0.8x the seed's wall time).

The checkpoints: ``runs/seed004`` (``python src/train_suite.py --preset seed004``: 36 to
54 min on 2 cores), or ``--suite``.

    python bench/bench_seed_weights.py [--suite runs/seed004] [--threads 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkpoint_folders(suite: Path) -> list[Path]:
    """Every ``<model>/step<N>/`` folder of a trained suite, in order."""
    return sorted(p for p in suite.glob("*/step*") if p.is_dir()
                  and (p / "model.safetensors").is_file())


def seed_extraction(folder: Path, max_points: int = 200, seed: int = 42) -> dict[str, float]:
    """The seed paper's features of one checkpoint: mean NP over the weight matrices (its
    equation 1) and Vietoris-Rips H0/H1 total persistence of each matrix's rows, summed.

    The matrices are the 2-D weights of the state dict but the input embedding (the
    linear layers' weights, as the seed's own small GPT had them)."""
    import numpy as np
    from ripser import ripser
    from safetensors.numpy import load_file
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree

    rng = np.random.default_rng(seed)
    nps, tp0, tp1 = [], 0.0, 0.0
    for name, w in load_file(folder / "model.safetensors").items():
        if w.ndim != 2 or "embed_in" in name:
            continue
        a = np.abs(w.astype(np.float64))
        a = a / a.max()
        n_out, n_in = a.shape
        # descending filtration: a component dies when an edge of weight d joins it, born
        # at 1; the deaths are the maximum spanning tree's edges (minimum of 2 - |w|)
        rows, cols = np.indices(a.shape)
        graph = coo_matrix((2.0 - a.ravel(), (rows.ravel(), n_out + cols.ravel())),
                           shape=(n_out + n_in, n_out + n_in))
        deaths = 2.0 - minimum_spanning_tree(graph).data
        nps.append(float(np.sum(1.0 - deaths)) / (n_out + n_in - 1))
        points = w if n_out <= max_points else w[rng.choice(n_out, max_points, replace=False)]
        dgms = ripser(points, maxdim=1)["dgms"]
        for k, d in enumerate(dgms):
            life = d[:, 1] - d[:, 0]
            total = float(life[np.isfinite(life)].sum())
            if k == 0:
                tp0 += total
            else:
                tp1 += total
    return {"np_mean": float(np.mean(nps)), "tp0": tp0, "tp1": tp1}


def thread_env(threads: int) -> dict[str, str]:
    keys = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    return {**os.environ, **dict.fromkeys(keys, str(threads)),
            "PYTHONPATH": str(ROOT / "src")}


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ours(suite: Path, threads: int) -> tuple[float, float, Path]:
    """The weight stage over the suite, as a user runs it, into a fresh folder."""
    work = Path(tempfile.mkdtemp(prefix="bench-seed-weights-"))
    models = sorted({f.parent.resolve() for f in checkpoint_folders(suite)})
    argv = [sys.executable, str(ROOT / "src" / "run_experiments.py"),
            "--models", *map(str, models), "--signatures", "weights",
            "--out", str(work / "out"), "--no-progress"]
    wall, cpu = timed(argv, thread_env(threads), work)
    return wall, cpu, work


def seed(suite: Path, threads: int) -> tuple[float, float]:
    """The seed's extraction over the suite, in a process of its own."""
    argv = [sys.executable, __file__, "--worker", str(suite)]
    return timed(argv, thread_env(threads), ROOT)


def records_seconds(out: Path) -> float:
    """The seconds the weight records say their family took (the checkpoint's load too)."""
    total = 0.0
    for path in (out / "records").rglob("step*.json"):
        total += float((json.loads(path.read_text()).get("timings_s") or {}).get("total") or 0)
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=Path, default=ROOT / "runs" / "seed004")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:  # the seed's extraction, in its own process
        import warnings

        # no torch: the extraction needs none, and its import (1-2 s) would slow the
        # baseline; the threads are the environment's (thread_env)
        warnings.filterwarnings("ignore", module="ripser")  # a square matrix's hint
        rows = [seed_extraction(f) for f in checkpoint_folders(args.worker)]
        print(json.dumps({"checkpoints": len(rows)}))
        return 0
    folders = checkpoint_folders(args.suite)
    if not folders:
        sys.exit(f"no checkpoints under {args.suite}: python src/train_suite.py --preset "
                 "seed004 trains them (36 to 54 min on 2 cores)")
    print(f"# {date.today()}, {platform.node()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; {len(folders)} checkpoints of {args.suite}, "
          f"{args.threads} thread(s)")
    mine, theirs = [], []
    for _ in range(args.repeats):  # alternating, so drift in the machine's load is shared
        wall, cpu, work = ours(args.suite, args.threads)
        made = len(list((work / "out" / "records").rglob("step*.json")))
        if made != len(folders):
            sys.exit(f"ours wrote {made} records for {len(folders)} checkpoints ({work})")
        inside = records_seconds(work / "out")
        shutil.rmtree(work, ignore_errors=True)
        mine.append((wall, cpu, inside))
        theirs.append(seed(args.suite, args.threads))
        print(f"  ours {wall:.1f} s wall, {cpu:.1f} s CPU (the records' own timings "
              f"{inside:.1f} s); the seed's way {theirs[-1][0]:.1f} s wall, "
              f"{theirs[-1][1]:.1f} s CPU")
    ours_wall = statistics.median(m[0] for m in mine)
    seed_wall = statistics.median(t[0] for t in theirs)
    print(f"RATIO ours / the seed's extraction, wall: {ours_wall / seed_wall:.2f}x "
          f"({ours_wall:.1f} s against {seed_wall:.1f} s; medians; target at most 0.8x)")
    print(f"ours: wall above CPU {statistics.median(m[0] - m[1] for m in mine):.1f} s; "
          f"the seed's: {statistics.median(t[0] - t[1] for t in theirs):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
