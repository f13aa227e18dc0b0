#!/usr/bin/env python
"""What the analysis' optional parts cost, on the committed reference folders.

1. The design check (each detrended and partial-difference test simulated on its own
   design, ``--design-runs``): the statistics ``toposig analyze`` writes for
   ``results/``, with the default number of design runs and with none, and the cost per
   feature x model.
2. A seed ensemble's within-model controls on the first seed of each size (the default)
   or on every seed (``--seed-controls all``): the statistics of
   ``results/ensemble``, its time and the size of the statistics as written (skipped
   with ``--no-ensemble``: the second takes about seven minutes on two cores).

Nothing is written into the folders.

    python bench/bench_analysis_cost.py [--no-ensemble]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from toposig.analyze import folder_statistics  # noqa: E402
from toposig.run.results_folder import load_entries  # noqa: E402


def timed_statistics(folder: Path, **options) -> tuple[float, dict]:
    """Seconds and the statistics ``toposig analyze`` would write (nothing is written)."""
    records = load_entries(folder)
    t0 = time.perf_counter()
    statistics = folder_statistics(folder, records, **options).to_json()
    return time.perf_counter() - t0, statistics


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-ensemble", action="store_true")
    args = p.parse_args()
    print(f"# {date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    with_design, stats = timed_statistics(ROOT / "results")
    without, _ = timed_statistics(ROOT / "results", design_runs=0)
    tests = len(stats["correlations"]["per_model"]) * len(stats["correlations"]["pooled"])
    print(f"1. results/ statistics: {without:.1f} s without the design check, "
          f"{with_design:.1f} s with it ({(with_design - without) / tests:.2f} s per "
          f"feature x model, {tests} of them)")
    if not args.no_ensemble:
        for controls in ("first", "all"):
            seconds, stats = timed_statistics(ROOT / "results" / "ensemble",
                                              seed_controls=controls)
            size = len(json.dumps(stats, indent=2))
            print(f"2. results/ensemble, --seed-controls {controls}: {seconds:.0f} s, "
                  f"statistics {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
