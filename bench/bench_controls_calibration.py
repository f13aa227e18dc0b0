#!/usr/bin/env python
"""Calibration and power of the confound controls on simulated runs where the truth is known.

Each run is a feature and a loss that share only a decelerating trend in the step (a power
law ``(1 + s/scale)^-0.5``, scale = max step / 100, or an exponential ``exp(-s/scale)``,
scale = max step / 10; the feature's amplitude is -0.5 times the loss's) plus AR(1) noise
over checkpoints (``toposig.analysis.simulate``), on the two published step grids
(Pythia's 19 log-spaced checkpoints, seed B's 51 linear ones). Under the null
(coupling 0) the noises are independent, and a control should come out significant
(p < 0.05) in 5 % of runs; with a coupling (the noises correlated) it should come out
significant, with the coupling's sign, as often as possible.

Prints, per grid x trend x noise (sd / trend amplitude) x AR x coupling, the fraction of
runs significant under:

- ``raw``: Spearman of the levels (t-approximation p);
- ``fd``: Spearman of plain first differences (``controls.first_difference_spearman``);
- ``pls``: the existing partial Spearman on log(1 + step) (``controls.partial_spearman``;
  undefined, counted as not significant, when a series is monotone in the step);
- ``pfd-lin``: first differences partialled linearly on the midpoint's log step
  (``trend_controls.partial_first_differences(covariate="linear")``);
- ``detr-gcv``: the detrended control with the trend's smoothness by GCV;
- ``detr``: the detrended control (REML), the default;
- ``pfd``: first differences partialled on a smooth function of log step, the default.

The last four use the surrogate p-value of ``trend_controls``. Under the null the binomial
99 % interval of a rate of 0.05 over N runs is printed for reference.

    python bench/bench_controls_calibration.py [--sims 400] [--surrogates 199]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.analysis import controls, simulate, trend_controls  # noqa: E402

ALPHA = 0.05
GRIDS = {"pythia19": simulate.PYTHIA_STEPS, "linear51": simulate.LINEAR_STEPS}
NOISES = (0.005, 0.05, 0.2)
ARS = (0.0, 0.3, 0.7)
COLUMNS = ("raw", "fd", "pls", "pfd-lin", "detr-gcv", "detr", "pfd")


def significant(steps: np.ndarray, x: np.ndarray, y: np.ndarray, seed: int,
                n_surrogates: int, sign: float) -> list[bool]:
    """Whether each control calls the run significant (with the coupling's sign if any)."""
    def ok(r, p) -> bool:
        return p is not None and p < ALPHA and (sign == 0 or (r is not None and r * sign > 0))

    raw = sps.spearmanr(x, y)
    fd = controls.first_difference_spearman(x, y)
    pr, pp, _ = controls.partial_spearman(x, y, np.log1p(steps))
    kw = {"seed": seed, "n_surrogates": n_surrogates}
    new = (trend_controls.partial_first_differences(x, y, steps, covariate="linear", **kw),
           trend_controls.detrended_correlation(x, y, steps, smoothing="gcv", **kw),
           trend_controls.detrended_correlation(x, y, steps, **kw),
           trend_controls.partial_first_differences(x, y, steps, **kw))
    return [ok(raw.statistic, raw.pvalue), ok(fd["spearman_r"], fd["spearman_p"]), ok(pr, pp),
            *(ok(res["r"], res["p"]) for res in new)]


def cell(grid: str, trend: str, noise: float, ar: float, coupling: float, sims: int,
         n_surrogates: int) -> np.ndarray:
    steps = np.asarray(GRIDS[grid], dtype=np.float64)
    rng = np.random.default_rng([len(steps), len(trend), int(1000 * noise), int(10 * ar),
                                 int(10 * coupling)])
    x, y = simulate.simulate_run(steps, rng, noise=noise, ar=ar, coupling=coupling,
                                 trend=trend, size=sims)
    hits = np.zeros(len(COLUMNS))
    for i in range(sims):
        hits += significant(steps, x[i], y[i], i, n_surrogates, np.sign(coupling))
    return hits / sims


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=400, help="simulated runs per cell")
    ap.add_argument("--surrogates", type=int, default=199, help="surrogates per p-value")
    args = ap.parse_args()
    lo, hi = sps.binom.interval(0.99, args.sims, ALPHA)
    t0 = time.perf_counter()
    header = f"{'grid':9s} {'trend':5s} {'noise':>5s} {'ar':>4s} {'coup':>4s} | " + \
        " ".join(f"{c:>8s}" for c in COLUMNS)
    print(f"{args.sims} runs per cell, {args.surrogates} surrogates per p-value; "
          f"null: a calibrated control lies in [{lo / args.sims:.3f}, {hi / args.sims:.3f}] "
          "(binomial 99 %)")
    for title, couplings, noises, ars in (("NULL (coupling 0): rate of p < 0.05", (0.0,),
                                           NOISES, ARS),
                                          ("POWER: rate of p < 0.05 with the coupling's sign",
                                           (0.3, 0.6), (0.05,), (0.3, 0.7))):
        print(f"\n{title}\n{header}")
        for grid in GRIDS:
            for trend in simulate.TRENDS:
                for noise in noises:
                    for ar in ars:
                        for coupling in couplings:
                            rates = cell(grid, trend, noise, ar, coupling, args.sims,
                                         args.surrogates)
                            flags = ["*" if coupling == 0 and not lo <= r * args.sims <= hi
                                     else " " for r in rates]
                            print(f"{grid:9s} {trend:5s} {noise:5.3f} {ar:4.1f} {coupling:4.1f} | "
                                  + " ".join(f"{r:7.3f}{f}" for r, f in
                                             zip(rates, flags, strict=True)), flush=True)
    print("\n* outside the binomial 99 % interval of a calibrated test")
    print(f"run time: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
