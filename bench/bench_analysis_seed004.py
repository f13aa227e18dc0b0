#!/usr/bin/env python
"""How long ``toposig analyze`` takes on a copy of the committed ``results/seed004`` (255
checkpoints, 5 models, 81 features), and where the time goes (issue 60: at most 2
minutes on 2 cores).

The folder's tracked files are copied into a temporary folder (its committed
``data/design_checks.json`` with them) and analysed as a user would: ``toposig analyze
--out COPY``, which reuses the committed design checks, and, unless ``--warm-only``,
``--fresh-designs``, which simulates every design again (the plain way). Each run's
stages are read from its log lines; the statistics are compared with the committed ones
byte for byte. Nothing is written into ``results/``.

    python bench/bench_analysis_seed004.py [--warm-only]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "results/seed004"
STAGE = re.compile(r"INFO toposig\.analysis: (?P<stage>[^.]+?(?: \([^)]*\))?): "
                   r"(?:\d+ in )?(?P<seconds>[\d.]+) s$")


def copy_tracked(folder: str, into: Path) -> Path:
    """The tracked files of ``folder`` (its figures left out) copied under ``into``."""
    names = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in names:
        if "/plots/" in name:
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, target)
    return into / folder


def analysed(folder: Path, *flags: str) -> tuple[float, list[tuple[str, float]]]:
    """Wall seconds of ``toposig analyze --out folder`` and its stages' seconds."""
    (folder / "data" / "statistics.json").unlink(missing_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "toposig.cli.main", "analyze", "--out",
                           str(folder), *flags], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": str(ROOT / "src")})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"analyze failed ({done.returncode}):\n{done.stderr[-2000:]}")
    stages = [(m["stage"], float(m["seconds"])) for line in done.stderr.splitlines()
              if (m := STAGE.search(line))]
    same = ((folder / "data" / "statistics.json").read_bytes()
            == (ROOT / FOLDER / "data" / "statistics.json").read_bytes())
    stages.append(("statistics the committed ones, byte for byte", float(same)))
    return wall, stages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm-only", action="store_true",
                        help="only the analysis that reuses the committed design checks")
    args = parser.parse_args(argv)
    print(f"{date.today()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {FOLDER}")
    runs = [("reusing the committed design checks", ())]
    if not args.warm_only:
        runs.append(("every design simulated again (--fresh-designs)", ("--fresh-designs",)))
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_tracked(FOLDER, Path(tmp))
        for name, flags in runs:
            wall, stages = analysed(folder, *flags)
            walls.append(wall)
            print(f"\n{name}: {wall:.1f} s wall")
            for stage, seconds in stages:
                shown = ("yes" if seconds else "NO") if stage.startswith("statistics") \
                    else f"{seconds:.1f} s"
                print(f"  {stage:<70} {shown}")
    if len(walls) == 2:
        print(f"\nreuse / fresh: {walls[0] / walls[1]:.2f}x the time "
              f"({walls[1] / walls[0]:.1f}x faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
