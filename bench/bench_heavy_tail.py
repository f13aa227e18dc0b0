#!/usr/bin/env python
"""weightwatcher's heavy-tail metrics: ``toposig.features.heavy_tail`` against weightwatcher.

Every weight matrix of a Pythia-70m-shaped checkpoint (6 layers of 1536x512, 512x512,
2048x512 and 512x2048: 24 matrices, random N(0, 0.02) weights, float32):

1. the whole per-matrix computation: :func:`heavy_tail.heavy_tail_features` (SVD, as
   weightwatcher, and the faster Gram eigenvalues) against ``WeightWatcher.analyze()``
   with its defaults on an ``nn.Sequential`` of the same ``nn.Linear`` layers;
2. the power-law fit alone, on the same eigenvalues: :func:`heavy_tail.powerlaw_alpha`
   against weightwatcher's ``WW_powerlaw.WWFit`` (its Python loop over candidate xmin).

Prints the times, the ratios, and the largest differences in alpha, xmin and D (the
SVD path should give 0). Needs weightwatcher and torch.

    python bench/bench_heavy_tail.py [--repeats 3] [--layers 6] [--scale 0.02] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.features import heavy_tail  # noqa: E402

PYTHIA_70M_LAYER = (("attention.query_key_value", (1536, 512)),
                    ("attention.dense", (512, 512)),
                    ("mlp.dense_h_to_4h", (2048, 512)),
                    ("mlp.dense_4h_to_h", (512, 2048)))


def best_of(fns: dict, repeats: int) -> tuple[dict[str, float], dict[str, object]]:
    """Least wall time of each function over ``repeats`` rounds, the functions taking
    turns within a round (the machine's load then weighs on all alike), and the last
    results."""
    best = dict.fromkeys(fns, float("inf"))
    out: dict[str, object] = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS/LAPACK and torch threads (1: steadier on a shared machine)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits  # scikit-learn's dependency

    with threadpool_limits(args.threads):
        run(args)


def run(args: argparse.Namespace) -> None:

    logging.disable(logging.WARNING)  # weightwatcher logs "CUDA not available" at import
    import torch
    import weightwatcher
    from weightwatcher.WW_powerlaw import WWFit

    torch.set_num_threads(args.threads)

    rng = np.random.default_rng(args.seed)
    mats = [(rng.standard_normal(shape) * args.scale).astype(np.float32)
            for _ in range(args.layers) for _, shape in PYTHIA_70M_LAYER]
    model = torch.nn.Sequential()
    for m in mats:
        lin = torch.nn.Linear(m.shape[1], m.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(m))
        model.append(lin)
    print(f"{len(mats)} matrices of Pythia-70m shapes, N(0, {args.scale}²) float32; "
          f"torch {torch.__version__} threads {torch.get_num_threads()}, "
          f"CUDA {torch.cuda.is_available()}, weightwatcher {weightwatcher.__version__}")

    def ww_analyze():
        with contextlib.redirect_stdout(io.StringIO()):  # its small-n fit prints
            return weightwatcher.WeightWatcher(model=model).analyze()

    times, res = best_of({
        "ww": ww_analyze,
        "svd": lambda: [heavy_tail.heavy_tail_features(m) for m in mats],
        "gram": lambda: [heavy_tail.heavy_tail_features(m, method="gram") for m in mats],
        "esd": lambda: [heavy_tail.esd(m) for m in mats],
    }, args.repeats)
    t_ww, t_svd, t_gram, t_esd = (times[k] for k in ("ww", "svd", "gram", "esd"))
    details, ours, gram, evals = (res[k] for k in ("ww", "svd", "gram", "esd"))

    print(f"\n1. per matrix, all 24 (best of {args.repeats})")
    print(f"   weightwatcher analyze()            {t_ww:8.3f} s")
    print(f"   heavy_tail_features, svd           {t_svd:8.3f} s   "
          f"{t_ww / t_svd:5.1f}x faster   (of which esd {t_esd:.3f} s)")
    print(f"   heavy_tail_features, gram          {t_gram:8.3f} s   "
          f"{t_ww / t_gram:5.1f}x faster")
    rows = details.sort_values("layer_id")
    for label, res in (("svd", ours), ("gram", gram)):
        diffs = {key: max(abs(r[ours_key] - w) / abs(w)
                          for r, w in zip(res, rows[ww_key], strict=True))
                 for key, ours_key, ww_key in (("alpha", "ww_pl_alpha", "alpha"),
                                               ("xmin", "ww_pl_xmin", "xmin"),
                                               ("D", "ww_pl_ks_distance", "D"))}
        print(f"   {label}: largest relative difference to weightwatcher: "
              + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))

    def ww_fits():
        return [WWFit(e[e > heavy_tail.EVALS_THRESH]) for e in evals]

    times, res = best_of({
        "ww": ww_fits,
        "ours": lambda: [heavy_tail.powerlaw_alpha(e) for e in evals],
    }, args.repeats)
    t_wwfit, t_fit = times["ww"], times["ours"]
    fits, ours_fit = res["ww"], res["ours"]
    same = all(f.alpha == o["alpha"] and f.xmin == o["xmin"] and o["D"] == f.D
               for f, o in zip(fits, ours_fit, strict=True))
    print("\n2. the power-law fit alone, on the 24 ESDs (512 eigenvalues each)")
    print(f"   weightwatcher WWFit                {t_wwfit:8.3f} s")
    print(f"   powerlaw_alpha                     {t_fit:8.3f} s   "
          f"{t_wwfit / t_fit:5.1f}x faster   bitwise equal alpha, xmin, D: {same}")


if __name__ == "__main__":
    main()
