#!/usr/bin/env python
"""The README's two commands, timed from a fresh clone as a new user runs them.

Clones the checkout (its committed ``HEAD``) beside it, so that ``../shared`` is beside
the clone as it is beside the checkout, then runs ``bash demo.sh`` (set up, get the
data, run the offline default, analyse it, compare it with ``results/``) and ``bash
.ci/run`` (set up afresh and run the tests) one after the other, each from its own
clean clone, and prints the wall time of each and the last lines it printed. Nothing in
the checkout is touched; the clones are removed unless ``--keep``.

    python bench/bench_two_commands.py [--only demo|ci] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"demo": ["bash", "demo.sh"], "ci": ["bash", ".ci/run"]}


def timed_in_clone(name: str, keep: bool) -> tuple[float, int, list[str]]:
    """Wall seconds, exit status and last output lines of one command in a fresh clone."""
    clone = ROOT.parent / f"bench-two-commands-{name}"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if ".venv" not in p)
    start = time.perf_counter()
    done = subprocess.run(COMMANDS[name], cwd=clone, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if not keep:
        shutil.rmtree(clone, ignore_errors=True)
    return wall, done.returncode, (done.stdout + done.stderr).strip().splitlines()[-4:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(COMMANDS), default=None)
    parser.add_argument("--keep", action="store_true", help="keep the clones")
    args = parser.parse_args(argv)
    print(f"{datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}, HEAD {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}")  # noqa: E501
    status = 0
    for name in ([args.only] if args.only else list(COMMANDS)):
        wall, rc, tail = timed_in_clone(name, args.keep)
        print(f"\n{' '.join(COMMANDS[name])}: {wall / 60:.1f} min ({wall:.0f} s), exit {rc}")
        for line in tail:
            print(f"  {line[:160]}")
        status |= rc
    return status


if __name__ == "__main__":
    sys.exit(main())
