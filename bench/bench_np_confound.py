#!/usr/bin/env python
"""Neural persistence against its known confound on committed records (issue 58):
for each model of a results folder, Spearman's rho between ``np_mean`` and the spread
``weight_std_over_max_mean`` recomputes from the records' matrices (mean over matrices
of the weights' standard deviation over the largest absolute weight), in levels and in
first differences along training.

    python bench/bench_np_confound.py [results/seed004]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv or sys.argv[1:] or ["results/seed004"])[0])
    entries = json.loads((folder / "data" / "all_results.json").read_text())
    series: dict[str, list[tuple[int, float, float]]] = {}
    for e in entries:
        matrices = e.get("matrices") or (e.get("weights") or {}).get("matrices")
        if not matrices or "np_mean" not in e["features"]:
            continue
        w_max = e["features"]["weight_max_abs"]
        spread = float(np.mean([m["std"] / w_max for m in matrices]))
        series.setdefault(e["model_label"], []).append((e["step"], e["features"]["np_mean"],
                                                        spread))
    print(f"{'model':<18} {'checkpoints':>11} {'rho levels':>11} {'rho differences':>16}")
    for label, rows in series.items():
        rows.sort()
        _, np_mean, spread = (np.array(c) for c in zip(*rows, strict=True))
        print(f"{label:<18} {len(rows):>11} {spearmanr(np_mean, spread).statistic:>11.3f} "
              f"{spearmanr(np.diff(np_mean), np.diff(spread)).statistic:>16.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
