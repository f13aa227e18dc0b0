#!/usr/bin/env python
"""``toposig import`` of a big table: rows per minute, fresh and again, against the old way.

Writes a CSV of N rows (100 models, N / 100 steps each, a loss and three features), then
times, as whole ``toposig import`` processes:

- a fresh import into a new folder (every record written, flushed together, then the
  aggregates and config.json);
- the same import again into that folder (records that hold their bytes are kept);
- with ``--old``, the previous way on the first ``--old`` rows: each record through the
  one-file writer, indented JSON and one fsync per record (what issue 36 row 15 measured
  at 1-2 hours for a million rows).

The target (issue 36): at least 100,000 rows a minute on 2 cores.

    python bench/bench_import.py [--rows 100000] [--old 10000]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def write_table(path: Path, rows: int, models: int = 100) -> None:
    rng = random.Random(0)
    steps = max(rows // models, 1)
    with path.open("w") as f:
        f.write("model,step,loss,h1_total_persistence,np_mean,effective_rank\n")
        for m in range(models):
            for s in range(steps):
                f.write(f"m{m},{s * 10},{2 + 3 / (1 + s) ** 0.5},{rng.random()},"
                        f"{rng.random()},{rng.random() * 40}\n")


def timed_import(table: Path, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "toposig.cli.main", "import", str(table), "--out",
                    str(out), "--no-progress"], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def old_way(table: Path, out: Path) -> float:
    """Each record through atomic_write_json (indented, one fsync each), as before."""
    from toposig.analysis.correlations import feature_group
    from toposig.files.atomic import atomic_write_json
    from toposig.run.importer import entry_of, import_digest
    from toposig.sources.imports import read_rows

    t0 = time.perf_counter()
    rows = read_rows([table])
    digest = import_digest(rows)
    for r in rows:
        e = entry_of(r, digest, feature_group)
        atomic_write_json(out / "records" / f"import-{digest}" / r.label
                          / f"step{r.step:06d}.json", e, root=out)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--old", type=int, default=10_000,
                   help="rows for the old way (0: skip it)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "table.csv"
        write_table(table, args.rows)
        out = Path(tmp) / "out"
        fresh = timed_import(table, out)
        again = timed_import(table, out)
        print(f"rows: {args.rows:,} ({os.cpu_count()} CPUs)")
        print(f"fresh import:  {fresh:7.1f} s  {args.rows / fresh * 60:>10,.0f} rows/min")
        print(f"again:         {again:7.1f} s  {args.rows / again * 60:>10,.0f} rows/min")
        if args.old:
            small = Path(tmp) / "small.csv"
            write_table(small, args.old)
            old = old_way(small, Path(tmp) / "old")
            print(f"old way ({args.old:,} rows): {old:.1f} s  "
                  f"{args.old / old * 60:,.0f} rows/min (records only)")
            ratio = (args.rows / fresh) / (args.old / old)
            print(f"a fresh import writes {ratio:.1f}x the rows per minute of the old way")
        print("target: >= 100,000 rows/min")


if __name__ == "__main__":
    main()
