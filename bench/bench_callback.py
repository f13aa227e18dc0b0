#!/usr/bin/env python
"""The cost of the ``transformers`` callback on the docs' own example (docs/training.md).

Runs the page's ``Trainer`` example as written (1,000 steps, a checkpoint every 500: the
callback measures at steps 0, 500 and 1,000, its default cadence at the Trainer's default
``save_steps``),
and the same example without the callback line, each as a whole process in a fresh
folder, and prints: the wall time of each, the measurements made, the time spent inside
them (the records' own timings, and the monitor's bookkeeping around them), the
overhead as a share of the training without the callback, and the console lines the
callback added per measurement. The target (issue 37, row 12): at most 10 % of the
training time, and one console line per measurement.

    python bench/bench_callback.py [--steps N] [--save-steps K] [--repeats 1] [--keep]

``--steps 300 --save-steps 100`` is the denser cadence the page used before 2026-11-29
(four measurements in a 15-s training).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "training.md"
MARKER = "<!-- tested: tests/test_live.py trainer-example -->"
CALLBACK = 'TopologyCallback(out="results/live-demo"'


# Put before the example's code when it runs with the callback: the seconds spent importing
# toposig (after torch and transformers, which the example imports anyway) and inside the
# callback's events, printed at exit. On this machine the wall time of a whole run varies
# by more than the callback costs, so this in-process count is the precise figure.
TIMER = """
import atexit as _atexit, json as _json, time as _time
import torch, transformers.trainer
_t0 = _time.perf_counter()
import toposig.integrations.hf_trainer as _hf
_spent = {"import_s": _time.perf_counter() - _t0, "events_s": 0.0}
def _timed(name):
    event = getattr(_hf.TopologyCallback, name)
    def timed(*args, **kwargs):
        t = _time.perf_counter()
        try:
            return event(*args, **kwargs)
        finally:
            _spent["events_s"] += _time.perf_counter() - t
    setattr(_hf.TopologyCallback, name, timed)
for _name in [n for n in dir(_hf.TopologyCallback) if n.startswith("on_")]:
    _timed(_name)
_atexit.register(lambda: print("CALLBACK_SECONDS", _json.dumps(_spent)))
"""

# Put before the example's code in both runs: the seconds of trainer.train(), printed at exit.
TRAIN_TIMER = """
import atexit as _atexit2, time as _time2
import transformers as _tf
_train = _tf.Trainer.train
_took = {}
def _timed_train(self, *args, **kwargs):
    t = _time2.perf_counter()
    try:
        return _train(self, *args, **kwargs)
    finally:
        _took["train_s"] = _time2.perf_counter() - t
_tf.Trainer.train = _timed_train
_atexit2.register(lambda: print("TRAIN_SECONDS", _took.get("train_s")))
"""


def example(steps: int | None, with_callback: bool, background: bool = False,
            threads: int | None = None, save_steps: int | None = None) -> str:
    code = PAGE.read_text().split(MARKER, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    for option, value in (("max_steps", steps), ("save_steps", save_steps)):
        if value is not None:
            code, n = re.subn(rf"{option}=\d+", f"{option}={value}", code)
            if n != 1:
                sys.exit(f"the page's example has no single {option}= to change")
    if threads is not None:  # a training that leaves cores free (as a GPU's, or one
        code = f"import torch\ntorch.set_num_threads({threads})\n" + code  # data-bound)
    if not with_callback:
        return TRAIN_TIMER + "\n".join(line for line in code.splitlines()
                                       if CALLBACK not in line)
    if background:
        code = code.replace(CALLBACK, CALLBACK + ", background=True")
    return TRAIN_TIMER + TIMER + code


def train_seconds(lines: list[str]) -> float:
    """The TRAIN_TIMER's count of one run: the seconds of ``trainer.train()``."""
    found = [line for line in lines if line.startswith("TRAIN_SECONDS ")]
    return float(found[-1].split(" ", 1)[1])


def callback_seconds(lines: list[str]) -> dict[str, float]:
    """The TIMER's count of one run: ``import_s`` and ``events_s``."""
    found = [line for line in lines if line.startswith("CALLBACK_SECONDS ")]
    return json.loads(found[-1].split(" ", 1)[1])


def run(code: str) -> tuple[float, list[str], Path]:
    """Wall seconds, the console lines (stdout and stderr) and the working folder."""
    folder = Path(tempfile.mkdtemp(prefix="bench-callback-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "TOPOSIG_DATASETS_DIR": os.environ.get("TOPOSIG_DATASETS_DIR",
                                                  str(ROOT / "datasets"))}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"the example failed:\n{done.stderr[-3000:]}")
    lines = [line for text in (done.stdout, done.stderr)
             for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return seconds, lines, folder


def measured_seconds(folder: Path) -> tuple[int, float]:
    """The measurements the results folder holds and the seconds its records say they
    took (every family's own timing)."""
    entries = json.loads((folder / "results" / "live-demo" / "data" / "all_results.json")
                         .read_text())
    total = 0.0
    for entry in entries:  # the embedding's timings at the top, each other family's its own
        parts = [entry, *(entry[f] for f in ("weights", "landscape", "gradients", "interlayer")
                          if isinstance(entry.get(f), dict))]
        total += sum(float((part.get("timings_s") or {}).get("total") or 0.0)
                     for part in parts)
    return len(entries), total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None,
                   help="max_steps (default: the page's own)")
    p.add_argument("--save-steps", type=int, default=None,
                   help="save_steps, so the cadence (default: the page's own)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the runs' folders")
    p.add_argument("--background", action="store_true",
                   help="the callback with background=True (a twin measured on a thread)")
    p.add_argument("--train-threads", type=int, default=None,
                   help="torch's threads for the training (default: torch's own, one "
                        "per core); fewer leave cores free for a background measurement")
    args = p.parse_args()
    print(f"# {date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; docs/training.md's Trainer example, "
          f"max_steps {args.steps or 'as written'}, save_steps {args.save_steps or 'as written'}")
    plain, timed = [], []
    for _ in range(args.repeats):  # alternating, so drift in the machine's load is shared
        plain.append(run(example(args.steps, False, threads=args.train_threads,
                                 save_steps=args.save_steps)))
        timed.append(run(example(args.steps, True, args.background, args.train_threads,
                                 args.save_steps)))
    for i, ((a, _, _), (b, _, _)) in enumerate(zip(plain, timed, strict=True)):
        print(f"  pair {i + 1}: {a:.1f} s, {b:.1f} s with the callback (+{b - a:.1f} s)")
    base = statistics.median(s for s, _, _ in plain)
    with_cb = statistics.median(s for s, _, _ in timed)
    # the median of the pairs' differences: a pair shares the machine's load of its minute
    added_s = statistics.median(b - a for (a, _, _), (b, _, _) in zip(plain, timed, strict=True))
    n, inside = measured_seconds(timed[-1][2])
    spent = [callback_seconds(lines) for _, lines, _ in timed]
    own = statistics.median(c["import_s"] + c["events_s"] for c in spent)
    # the callback's own lines (the Trainer's bar redraws are no lines of it)
    added = sum("topology/" in line or "measuring" in line or "toposig" in line
                for line in timed[-1][1]
        if not line.startswith(("CALLBACK_SECONDS ", "TRAIN_SECONDS ")))
    print(f"whole processes: without the callback: {base:.1f} s; with it: {with_cb:.1f} s "
          f"(medians); the pairs' median difference: +{added_s:.1f} s, "
          f"{100 * added_s / base:.1f} % of training")
    trained = [train_seconds(lines) for _, lines, _ in plain]
    with_trained = [train_seconds(lines) + c["import_s"]
                    for (_, lines, _), c in zip(timed, spent, strict=True)]
    for i, (a, b) in enumerate(zip(trained, with_trained, strict=True)):
        print(f"  pair {i + 1}, in the process: trainer.train() {a:.1f} s; with the callback, "
              f"and toposig's import: {b:.1f} s (+{b - a:.1f} s)")
    train_base = statistics.median(trained)
    cost = statistics.median(b - a for a, b in zip(trained, with_trained, strict=True))
    mode = ("in the background (background=True)" if args.background
            else "by default (the training waits)")
    if args.train_threads:
        mode += f", training on {args.train_threads} thread(s)"
    print(f"COST {mode}: trainer.train() {train_base:.1f} s without the callback; the "
          f"callback and toposig's import add {cost:.1f} s, {100 * cost / train_base:.1f} % "
          "(median of the pairs, counted in the process)")
    print(f"inside the callback's events (the training waiting on them) and the import: "
          f"{own:.1f} s (median; import "
          f"{statistics.median(c['import_s'] for c in spent):.2f} s), "
          f"{100 * own / train_base:.1f} % of training")
    print(f"{n} measurements; inside them (the records' timings): {inside:.1f} s, "
          f"{inside / n:.2f} s each, {100 * inside / train_base:.1f} % of training")
    print(f"console lines of the callback: {added} ({added / n:.1f} per measurement)")
    for line in timed[-1][1]:
        if "topology" in line:
            print(f"a logged line: {line[:160]}")
            break
    if args.keep:
        print(f"the runs: {', '.join(str(f) for _, _, f in (*plain, *timed))}")
    else:
        for _, _, folder in (*plain, *timed):
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
