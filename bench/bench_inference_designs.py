#!/usr/bin/env python
"""Null rate, power and minimum detectable coupling of every calibrated control, within one
model and pooled over models, on every simulated design; and the coverage of the intervals.

Designs (``toposig.analysis.simulate``): three grids (Pythia's 19 log-spaced checkpoints,
seed B's 51 linear ones, Pythia's full 154-revision list), five trends (a power law and an
exponential in the step; warm-up + cosine to 10 %, the same with a final anneal to 0, and
warm-up + linear decay, each the loss curve of its learning-rate schedule), ARMA(1, 1)
noise (AR 0.5, MA 0.3) at three levels (0.5 %, 5 % and 20 % of the trend's drop). Each run
is a feature and a loss sharing the trend; under the null their noises are independent,
with a coupling c they are correlated with correlation c. A test counts as significant
when p < 0.05 and the design rule (``toposig.analysis.inference.design_rule``) does not
rule it out, as the analysis reports it. The pooled test combines ``--models`` models of
different sizes (``toposig.analysis.inference.pooled_test``).

Prints per control x grid x trend x noise: the share of null runs the design rule rules
out, the null rate within a model and pooled among the runs that are not ruled out (``*``
outside the binomial 99 % interval of 0.05 over those runs; a dash where every run is
ruled out: the analysis reports those tests as uncalibrated), the power at couplings 0.3,
0.5, 0.7 and 0.9 and the minimum detectable coupling (80 % power) within and pooled; then
the null rate over all designs; then the coverage of the 95 % intervals of a Spearman
ρ on AR(1) pairs, from surrogates (``trend_controls.surrogate_interval``) and from the
percentile bootstrap over checkpoints it replaced.

    python bench/bench_inference_designs.py [--runs 200] [--models 3] [--surrogates 99]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.analysis import controls, inference, simulate, trend_controls  # noqa: E402

GRIDS = {"pythia19": simulate.PYTHIA_STEPS, "linear51": simulate.LINEAR_STEPS,
         "pythia154": simulate.PYTHIA_ALL_STEPS}
NOISES = (0.005, 0.05, 0.2)
AR, MA = 0.5, 0.3
COUPLINGS = inference.COUPLINGS


def rates(draws: inference.Draws) -> list[float]:
    """Per coupling (the null first): under the null, the share of the runs where the test
    is defined and not ruled out that are reported significant (NaN where every run is
    ruled out: those are reported as uncalibrated); with a coupling, the share of all runs
    reported significant (a run ruled out finds nothing), the power a user has."""
    rep = draws.reported()
    out = []
    for j, (row, ruled) in enumerate(zip(rep, draws.flagged, strict=True)):
        ok = np.isfinite(row) & ~ruled if j == 0 else np.ones(row.shape, dtype=bool)
        vals = np.nan_to_num(row[ok])
        out.append(float(np.mean(vals)) if ok.any() else math.nan)
    return out


def _rate(value: float, n: int) -> str:
    """A null rate, starred outside the binomial 99 % interval of 0.05 over ``n`` runs."""
    if not math.isfinite(value) or n == 0:
        return "  —   "
    lo, hi = sps.binom.interval(0.99, n, 0.05)
    return f"{value:5.3f}" + ("*" if not lo <= round(value * n) <= hi else " ")


def coverage(n: int, phi: float, coupling: float, runs: int, n_surrogates: int,
             seed: int) -> tuple[float, float]:
    """Coverage of the true Spearman ρ by the surrogate interval and by the percentile
    bootstrap, on stationary AR(1) pairs with noise correlation ``coupling``."""
    rng = np.random.default_rng(seed)
    e_y = simulate.ar1(rng, n, phi, runs)
    e_x = coupling * e_y + math.sqrt(1 - coupling ** 2) * simulate.ar1(rng, n, phi, runs)
    truth = 6 / math.pi * math.asin(coupling / 2)  # Spearman's ρ of a Gaussian pair
    steps = np.arange(n, dtype=np.float64)
    hit_s = hit_b = 0
    for i in range(runs):
        lo, hi = trend_controls.raw_surrogate_interval(e_x[i], e_y[i], steps, seed=i,
                                                       n_surrogates=n_surrogates)
        hit_s += lo is not None and lo <= truth <= hi
        blo, bhi = controls.bootstrap_spearman_ci(e_x[i], e_y[i], seed=i)
        hit_b += blo is not None and blo <= truth <= bhi
    return hit_s / runs, hit_b / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="simulated runs per coupling")
    ap.add_argument("--models", type=int, default=3, help="models in the pooled test")
    ap.add_argument("--surrogates", type=int, default=inference.DESIGN_SURROGATES)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(f"{args.runs} runs per coupling, {args.surrogates} surrogates each, pooled over "
          f"{args.models} models; ARMA(1, 1) noise, AR {AR}, MA {MA}")
    totals: dict[tuple[str, str], list[float]] = {}
    for control in ("detrended", "partial_first_differences"):
        print(f"\n{control}\n{'grid':10s} {'trend':13s} {'noise':>5s} {'ruled':>5s} | "
              f"{'null':>6s} {'pooled':>6s} | power within (0.3 0.5 0.7 0.9)  | "
              f"{'mdc':>5s} {'pooled':>6s}")
        for g_index, (grid, steps) in enumerate(GRIDS.items()):
            for t_index, trend in enumerate(simulate.TRENDS):
                for n_index, noise in enumerate(NOISES):
                    cell = inference.simulate_cell(
                        steps, trend=trend, noise=noise, ar=AR, ma=MA, n_models=args.models,
                        runs=args.runs, couplings=COUPLINGS, seed=100 * g_index
                        + 10 * t_index + n_index, n_surrogates=args.surrogates)[control]
                    within, pooled = rates(cell.within), rates(cell.pooled)
                    ruled = float(np.mean(cell.within.flagged[0]))
                    n_within = int((np.isfinite(cell.within.p_values()[0])
                                    & ~cell.within.flagged[0]).sum())
                    n_pooled = int(np.isfinite(cell.pooled.p_values()[0]).sum())
                    for key, v, n in (("within", within[0], n_within),
                                      ("pooled", pooled[0], n_pooled)):
                        if math.isfinite(v):
                            totals.setdefault((control, key), []).append((v * n, n))
                    levels = (0.0, *COUPLINGS)
                    mdc = inference.minimum_detectable(levels, [0.0, *within[1:]])
                    pmdc = inference.minimum_detectable(levels, [0.0, *pooled[1:]])
                    print(f"{grid:10s} {trend:13s} {noise:5.3f} {ruled:5.2f} | "
                          f"{_rate(within[0], n_within)} {_rate(pooled[0], n_pooled)} | "
                          + " ".join(f"{v:5.2f}" if math.isfinite(v) else "  —  "
                                     for v in within[1:])
                          + f"          | {_mdc(mdc):>5s} {_mdc(pmdc):>6s}", flush=True)
    print("\nnull rate over the runs of all designs where the test is not ruled out:")
    for (control, key), values in totals.items():
        hits, n = (sum(v) for v in zip(*values, strict=True))
        print(f"  {control:26s} {key:6s} {hits / n:.4f} ({int(round(hits))} of {n})")
    print("\ncoverage of 95 % intervals of Spearman ρ on AR(1) pairs "
          f"({args.runs} runs a cell): surrogate / percentile bootstrap")
    for n in (19, 51):
        for phi in (0.0, 0.3, 0.6, 0.8):
            cells = [coverage(n, phi, c, args.runs, 199, 1000 * n + int(100 * phi)
                              + int(10 * c)) for c in (0.0, 0.4, 0.8)]
            print(f"  n {n:3d} AR {phi:.1f}: " + "   ".join(
                f"c {c:.1f}: {s:.3f} / {b:.3f}" for c, (s, b) in zip((0.0, 0.4, 0.8), cells,
                                                                  strict=True)), flush=True)
    print(f"\nrun time: {time.perf_counter() - t0:.1f} s")


def _mdc(value: float | None) -> str:
    return "> 0.9" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
