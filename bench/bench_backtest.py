#!/usr/bin/env python
"""``toposig backtest`` on one long loss curve: time against the curve's length.

Times :func:`toposig.analysis.backtest.backtest` (every method at the default cutoffs,
and the stop rule) on one noisy power-law curve of N points, for several N, fits the
exponent of time ~ N^k on the longest lengths, and times the previous leave-one-out
jackknife (one refit per point: ``JACKKNIFE_GROUPS`` unbounded) at the shorter ones.
Issue 36 measured the old way at 14 s (500 points), 36 s (1,000) and 294 s (5,000).

    python bench/bench_backtest.py [--n 250 500 1000 2000 5000] [--old 250 500 1000]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.analysis import backtest, forecast  # noqa: E402


def curve(n: int) -> backtest.Series:
    steps = np.linspace(0, 100_000, n)
    loss = 2 + 3 / (1 + steps / 100) ** 0.5 + np.random.default_rng(0).normal(0, 0.01, n)
    return backtest.Series(list(steps), list(loss), {})


def seconds(n: int) -> float:
    t0 = time.perf_counter()
    backtest.backtest({"r": curve(n)})
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[250, 500, 1000, 2000, 5000])
    p.add_argument("--old", type=int, nargs="*", default=[250, 500, 1000])
    args = p.parse_args()
    now = {n: seconds(n) for n in args.n}
    groups = forecast.JACKKNIFE_GROUPS
    forecast.JACKKNIFE_GROUPS = 10**9
    try:
        old = {n: seconds(n) for n in args.old}
    finally:
        forecast.JACKKNIFE_GROUPS = groups
    print(f"{'points':>7}{'now (s)':>10}{'old (s)':>10}{'old/now':>9}")
    for n in sorted(set(now) | set(old)):
        a, b = now.get(n), old.get(n)
        ratio = "" if a is None or b is None else f"{b / a:.1f}x"
        print(f"{n:>7}{'-' if a is None else f'{a:.2f}':>10}"
              f"{'-' if b is None else f'{b:.2f}':>10}{ratio:>9}")
    longest = sorted(now)[-3:]
    if len(longest) >= 2:
        k = np.polyfit([math.log(n) for n in longest], [math.log(now[n]) for n in longest], 1)[0]
        print(f"exponent of time ~ N^k over N = {', '.join(map(str, longest))}: k = {k:.2f}")
    if len(old) >= 2:
        ns = sorted(old)
        k = np.polyfit([math.log(n) for n in ns], [math.log(old[n]) for n in ns], 1)[0]
        print(f"the old leave-one-out jackknife: k = {k:.2f}")


if __name__ == "__main__":
    main()
