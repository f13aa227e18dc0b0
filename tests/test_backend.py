"""Importing toposig and drawing its figures leaves the user's matplotlib backend alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "results"

SCRIPT = """
import json, sys
import matplotlib
matplotlib.use("svg")                       # a user's backend, not Agg
import matplotlib.pyplot as plt
import toposig
from toposig.report.figures import ALL_FIGURES
from toposig.report.live_figure import draw_live_figure  # noqa: F401 (imports pyplot)
records = json.load(open(sys.argv[1] + "/data/all_results.json"))
statistics = json.load(open(sys.argv[1] + "/data/statistics.json"))
path = ALL_FIGURES["summary_figure"](records, statistics, sys.argv[2] + "/summary_figure.png",
                                     sys.argv[1])
print(matplotlib.get_backend(), len(plt.get_fignums()), open(path, "rb").read() ==
      open(sys.argv[1] + "/plots/summary_figure.png", "rb").read())
"""


def test_drawing_a_figure_keeps_the_users_backend_and_the_bytes(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(RESULTS), str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(PROJECT / "src"), "PATH": "/usr/bin:/bin",
                               "MPLBACKEND": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    backend, open_figures, same = done.stdout.split()
    assert backend == "svg"  # not switched to Agg
    assert open_figures == "0"  # no pyplot figure (no window) was opened
    assert same == "True"  # the same PNG as the committed reference
