#!/usr/bin/env python
"""The across-seeds test (:func:`toposig.analysis.ensembles.across_seeds`) on simulated
ensembles whose answer is known: how often its interval excludes 0 when the feature
carries nothing beyond the loss at the fraction (the null rate), and how often it does
when the feature carries a share of what sets the final loss (the power), per number of
seeds.

Each ensemble: the loss at the fraction ``L ~ N(0, 1)``, a baseline ``0.5 L + N(0, 1)``,
the feature ``2 L + N(0, 1)`` (strongly tied to the loss at the fraction, as every
feature of a training run is), and the final loss ``L + c · feature + N(0, 1)``; the test
is given the loss and the baseline. ``c = 0`` is the null.

    PYTHONPATH=src python bench/bench_across_seeds.py [--null 1000] [--runs 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from toposig.analysis.ensembles import across_seeds


def simulated(rng: np.random.Generator, n: int, coupling: float):
    loss_at = rng.normal(size=n)
    base = 0.5 * loss_at + rng.normal(size=n)
    feat = 2.0 * loss_at + rng.normal(size=n)
    final = loss_at + coupling * feat + rng.normal(size=n)
    return feat, final, loss_at, base


def rate(n_seeds: int, coupling: float, runs: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([across_seeds(*simulated(rng, n_seeds, coupling), n_bootstrap=2000,
                                       seed=i).beyond_loss for i in range(runs)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--null", type=int, default=1000, help="null ensembles per size")
    ap.add_argument("--runs", type=int, default=200, help="ensembles per coupling")
    ap.add_argument("--seeds", type=int, nargs="+", default=[8, 12, 20])
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(f"{'seeds':>5} {'null rate':>9} " + " ".join(f"{'power c=' + str(c):>11}"
                                                      for c in (1.0, 1.5, 3.0)))
    for n in args.seeds:
        null = rate(n, 0.0, args.null, 2026 + n)
        power = [rate(n, c, args.runs, 3 + n + int(10 * c)) for c in (1.0, 1.5, 3.0)]
        print(f"{n:>5} {null:>9.3f} " + " ".join(f"{p:>11.2f}" for p in power), flush=True)
    print(f"({args.null} null and {args.runs} coupled ensembles per row, 2,000 bootstrap "
          f"resamples each; {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
