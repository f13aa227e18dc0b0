#!/usr/bin/env python
"""The install and a first run, as docs/install.md describes them, timed from scratch.

In a fresh folder outside the checkout: a new virtual environment; ``pip install -r
requirements.txt -r requirements-ray.txt`` of the checkout (the README's install, which
CI performs), timed, and the environment's size on disk; then, from that folder, with
the installed ``toposig``: ``toposig run --preset tiny`` and ``toposig analyze``, timed,
with the data from ``TOPOSIG_DATASETS_DIR`` (default: the checkout's ``datasets/``).
Prints the date, the machine and each figure, the numbers docs/install.md states.

    python bench/bench_install.py [--keep DIR] [--no-run]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def timed(argv: list[str], cwd: Path, env: dict) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keep", default=None, help="work in this folder and keep it")
    p.add_argument("--no-run", action="store_true", help="time the install only")
    args = p.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-install-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"# {date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}; in {work}")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    venv = work / "venv"
    made = timed([sys.executable, "-m", "venv", str(venv)], work, env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    installed = timed([*pip, "-r", str(ROOT / "requirements.txt"), "-r",
                       str(ROOT / "requirements-ray.txt")], ROOT, env)
    gib = size_of(venv) / 2**30
    print(f"virtual environment: {made:.1f} s; pip install -r requirements.txt -r "
          f"requirements-ray.txt: {installed:.0f} s ({installed / 60:.1f} min); the "
          f"environment: {gib:.2f} GiB")
    if not args.no_run:
        run_env = {**env, "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}",
                   "TOPOSIG_DATASETS_DIR": os.environ.get("TOPOSIG_DATASETS_DIR",
                                                          str(ROOT / "datasets"))}
        here = work / "project"
        here.mkdir(exist_ok=True)
        ran = timed(["toposig", "run", "--preset", "tiny", "--no-progress"], here, run_env)
        analysed = timed(["toposig", "analyze"], here, run_env)
        print(f"toposig run --preset tiny (training included): {ran:.0f} s; "
              f"toposig analyze: {analysed:.0f} s")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
