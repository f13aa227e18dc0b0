#!/usr/bin/env python
"""Time the installed Vietoris-Rips backends (H0 + H1) and check they agree exactly.

Confirms the order of ``toposig.features.homology.BACKEND_PREFERENCE`` that ``--ph-backend auto``
uses. Gaussian clouds, best of ``--repeats`` runs after a warm-up.

    python bench/bench_ph_backends.py [--sizes 200 1000] [--dim 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.features import homology  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    p.add_argument("--dim", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-slow", action="store_true",
                   help="skip gudhi on clouds over 500 points (minutes)")
    args = p.parse_args()

    backends = homology.available_backends()
    print(f"installed, in auto order: {backends}; auto picks {homology.resolve_backend('auto')}")
    ok = True
    for n in args.sizes:
        cloud = np.random.default_rng(n).normal(size=(n, args.dim))
        times, reference = {}, None
        for b in backends:
            if args.skip_slow and b == "gudhi" and n > 500:
                continue
            homology.vietoris_rips(cloud[:20], backend=b)  # warm-up, imports
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                dgms, _ = homology.vietoris_rips(cloud, maxdim=1, backend=b)
                best = min(best, time.perf_counter() - t0)
            times[b] = best
            if reference is None:
                reference = dgms
            elif not all(np.array_equal(x, y) for x, y in zip(dgms, reference, strict=True)):
                print(f"  MISMATCH: {b} differs from {backends[0]} on {n} points")
                ok = False
        fastest = min(times, key=times.get)
        print(f"\n{n} x {args.dim} points, H0+H1 ({len(reference[1])} H1 bars); "
              "identical diagrams" if ok else "")
        for b, t in sorted(times.items(), key=lambda kv: kv[1]):
            print(f"  {b:<10} {t * 1000:10.1f} ms   x{t / times[fastest]:6.1f} of fastest")
        if fastest != homology.resolve_backend("auto"):
            print(f"  note: fastest here is {fastest}, auto picks "
                  f"{homology.resolve_backend('auto')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
