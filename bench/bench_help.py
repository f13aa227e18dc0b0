#!/usr/bin/env python
"""``toposig COMMAND --help``: how long each command takes to answer, as a whole process.

For every command, the median of ``--repeats`` runs of ``python -m toposig.cli.main
COMMAND --help`` (a fresh interpreter each time, as a user's shell starts one), the lines
it prints and its number of examples; against a bare ``python -c pass`` and against
importing what help used to load (torch, SciPy, matplotlib: 3.5-6.3 s on this machine,
issue 37 row 8). The target: every command under 0.5 s on a 2-core CPU.

    python bench/bench_help.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from toposig.cli.main import COMMANDS  # noqa: E402

TARGET_S = 0.5


def timed(argv: list[str], repeats: int) -> tuple[float, str]:
    """Median wall seconds of ``repeats`` runs of ``argv``, and the last run's stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    times, out = [], ""
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        times.append(time.perf_counter() - t0)
        out = done.stdout
    return statistics.median(times), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    print(f"# {date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}")
    bare, _ = timed([sys.executable, "-c", "pass"], args.repeats)
    heavy, _ = timed([sys.executable, "-c", "import torch, scipy.stats, matplotlib.pyplot"],
                     max(1, args.repeats // 2))
    print(f"bare interpreter: {bare:.3f} s; importing torch, SciPy, matplotlib (what help "
          f"used to load): {heavy:.2f} s")
    print(f"{'command':<10}{'median s':>10}{'lines':>7}{'examples':>10}  under {TARGET_S} s")
    worst = 0.0
    for command in COMMANDS:
        seconds, out = timed([sys.executable, "-m", "toposig.cli.main", command, "--help"],
                             args.repeats)
        examples = sum(line.startswith(f"  toposig {command} ") for line in out.splitlines())
        worst = max(worst, seconds)
        print(f"{command:<10}{seconds:>10.3f}{len(out.splitlines()):>7}{examples:>10}  "
              f"{'yes' if seconds < TARGET_S else 'NO'}")
    print(f"slowest: {worst:.3f} s ({heavy / worst:.0f}x faster than loading what help "
          "used to load)")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
