#!/usr/bin/env python
"""What reading a results folder as typed, validated records costs, at the Pythia suite's
scale.

Builds ``data/all_results.json`` for M models x N checkpoints (default 8 x 154, the
Pythia suite's revisions) from a committed entry of ``results/`` whose weight part is
widened to K matrices (default 96: a 24-layer model's four matrices per block), then times

- ``json.load`` of the file: the plain read every way has to do;
- :func:`toposig.run.aggregates.read_aggregate`: the read, each entry checked
  (:func:`toposig.records.entry_problem`);
- :func:`toposig.run.results_folder.load_entries`: the same, each entry made a
  :class:`toposig.records.Record` (what ``toposig analyze`` and ``toposig.open`` do),

and prints each time, per checkpoint and as a ratio to the plain read, at N and 2 N
checkpoints per model (linear: the ratio of the totals is about 2).

    python bench/bench_typed_records.py [--models 8] [--checkpoints 154] [--matrices 96]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from toposig.run.aggregates import read_aggregate  # noqa: E402
from toposig.run.results_folder import load_entries  # noqa: E402


def folder(tmp: Path, models: int, checkpoints: int, matrices: int) -> Path:
    """A results folder holding only ``data/all_results.json`` at that scale."""
    template = json.loads((ROOT / "results" / "data" / "all_results.json").read_text())[-1]
    base = template["weights"]["matrices"]
    template["weights"]["matrices"] = [dict(base[i % len(base)], name=f"layers.{i}.weight")
                                       for i in range(matrices)]
    template["weights"]["n_matrices"] = matrices
    entries = []
    for m in range(models):
        for step in range(checkpoints):
            e = copy.deepcopy(template)
            e["model_label"], e["model"], e["step"] = f"model-{m}", f"runs/model-{m}", step
            entries.append(e)
    out = tmp / f"r{models}x{checkpoints}"
    (out / "data").mkdir(parents=True)
    (out / "data" / "all_results.json").write_text(json.dumps(entries, indent=2))
    return out


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=8)
    p.add_argument("--checkpoints", type=int, default=154)
    p.add_argument("--matrices", type=int, default=96)
    args = p.parse_args()
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (args.checkpoints, 2 * args.checkpoints):
            root = folder(Path(tmp), args.models, n, args.matrices)
            path = root / "data" / "all_results.json"
            size = path.stat().st_size / 2**20
            plain = best_of(lambda path=path: json.loads(path.read_text()))
            checked = best_of(lambda path=path: read_aggregate(path))
            typed = best_of(lambda root=root: load_entries(root))
            k = args.models * n
            print(f"{args.models} models x {n} checkpoints ({k} entries, {args.matrices} "
                  f"matrices each, {size:.0f} MiB):")
            for name, t in (("json.load", plain), ("read_aggregate (checked)", checked),
                            ("load_entries (Records)", typed)):
                print(f"  {name:<26} {t:7.2f} s  {1e3 * t / k:6.2f} ms/checkpoint  "
                      f"{t / plain:5.2f}x the plain read")
            totals.append(typed)
    print(f"load_entries at 2N / at N: {totals[1] / totals[0]:.2f} (linear: 2)")


if __name__ == "__main__":
    main()
