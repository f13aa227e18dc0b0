"""The prepared GPU script (``bench/bench_gpu_410m.py``) runs end to end on a CPU at a
small shape (``--cpu-dry-run``): ready for the day a device is lent."""

from __future__ import annotations

import subprocess
import sys

from conftest import PROJECT


def test_the_gpu_script_runs_on_a_cpu_and_prints_its_table():
    done = subprocess.run([sys.executable, str(PROJECT / "bench" / "bench_gpu_410m.py"),
                           "--cpu-dry-run"], capture_output=True, text=True,
                          timeout=600, cwd=PROJECT)
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout.split("family     what", 1)[1]
    for family in ("embedding", "weights"):
        assert f"\n{family} " in table
    assert "embedding + weights:" in table and "at most 3 s" in table
    assert "the stage settled on batch" in done.stdout
