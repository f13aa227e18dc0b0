#!/usr/bin/env python
"""Time the installed Vietoris-Rips backends (H0 + H1) and check they agree exactly.

Confirms the order of ``toposig.features.homology.BACKEND_PREFERENCE`` that ``--ph-backend auto``
uses. Gaussian clouds, best of ``--repeats`` runs after a warm-up. First, what each backend
costs a fresh process to import and run once (the cost a training callback pays: ripser's
and giotto-ph's C++ cores are loaded without their wrappers' import of scikit-learn),
median of 3.

    python bench/bench_ph_backends.py [--sizes 200 1000] [--dim 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from toposig.features import homology  # noqa: E402


def first_use_seconds(backend: str) -> float:
    """Seconds a fresh interpreter that has toposig's homology module loaded spends on its
    first diagram by ``backend`` (median of 3 processes)."""
    code = ("import time, numpy as np; from toposig.features import homology; "
            "t = time.perf_counter(); homology.vietoris_rips("
            f"np.random.default_rng(0).normal(size=(20, 3)), backend={backend!r}); "
            "print(time.perf_counter() - t)")
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "PATH": "/usr/bin:/bin"}
    return statistics.median(
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=env).stdout) for _ in range(3))


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
    print("\nfirst use in a fresh process (import + one 20-point cloud), beyond NumPy/SciPy:")
    for b in backends:
        print(f"  {b:<10} {first_use_seconds(b) * 1000:10.0f} ms")
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
