#!/usr/bin/env python
"""Wall time of the offline default, stage by stage, from scratch in a scratch folder.

Runs exactly the commands a new user runs (the README's quick start), split so each
stage is timed on its own:

1. ``train_suite.py --preset tiny``: train the three small models;
2. ``run_experiments.py --preset tiny --layers all --resamples 20 --signatures
   embedding,weights,landscape,gradients``: the four signature families over the 54
   checkpoints (the suite is trained, so nothing is retrained);
3. ``analyze_results.py``: statistics, summary.md, figures;
4. the same ``run_experiments.py`` again: a rerun that only resumes.

Target: the whole offline default within ten minutes on a two-core CPU. With
``--smoke``, the same stages for the first look (``--preset smoke``: two models, 300
steps, the default families), whose target is two minutes.

    python bench/bench_offline_default.py [--smoke] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 600.0
SMOKE_TARGET_S = 120.0


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="work in DIR and keep it (default: a temporary folder)")
    p.add_argument("--smoke", action="store_true",
                   help="the first look (--preset smoke) instead of the offline default")
    args = p.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="toposig-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    runs, out = work / "runs", work / "results"
    py = sys.executable
    preset = "smoke" if args.smoke else "tiny"
    target = SMOKE_TARGET_S if args.smoke else TARGET_S
    analyse = ["--preset", preset, "--suite-dir", str(runs), "--out", str(out),
               "--no-progress"]
    if not args.smoke:
        analyse += ["--layers", "all", "--resamples", "20",
                    "--signatures", "embedding,weights,landscape,gradients"]
    stages = [
        ("train the smoke suite (2 models, 300 steps)" if args.smoke
         else "train the tiny suite (3 models, 1,000 steps)",
         [py, "src/train_suite.py", "--preset", preset, "--suite-dir", str(runs),
          "--no-progress"]),
        ("signatures: 14 checkpoints, the default families" if args.smoke
         else "signatures: 54 checkpoints, four families",
         [py, "src/run_experiments.py", *analyse]),
        ("analysis: statistics, summary.md, figures",
         [py, "src/analyze_results.py", "--results", str(out)]),
    ]
    try:
        times = [(label, timed(cmd, ROOT)) for label, cmd in stages]
        rerun = timed([py, "src/run_experiments.py", *analyse], ROOT)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    total = sum(t for _, t in times)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"{'stage':<48}{'seconds':>9}{'share':>8}")
    for label, t in times:
        print(f"{label:<48}{t:>9.1f}{t / total:>8.0%}")
    print(f"{'total':<48}{total:>9.1f}  (target <= {target:.0f} s: "
          f"{'met' if total <= target else 'missed'})")
    print(f"{'rerun of the signatures (everything resumed)':<48}{rerun:>9.1f}")
    return 0 if total <= target else 1


if __name__ == "__main__":
    sys.exit(main())
