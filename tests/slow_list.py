"""The tests that ``pytest -m "not slow"`` leaves out, and how that list is made.

``tests/slow_tests.txt`` names them, one per line (``seconds<TAB>node id``), with the time
each took in a full run on a 2-core machine; ``conftest.py`` marks them ``slow``. To make
the list again from a full run::

    python -m pytest --junitxml=/tmp/junit.xml      # one process: the times a test takes alone
    python tests/slow_list.py /tmp/junit.xml --fast-budget 130

which keeps the fastest tests, up to ``--fast-budget`` seconds in all, in the fast set and
lists the rest. A test's time in a JUnit report includes the set-up of the fixtures it
is the first to use, so leaving a slow test out moves its fixture's cost to the next
test that uses it: give the report of a fast run as well (``python -m pytest -m "not
slow" --junitxml=/tmp/fast.xml``, then both files), and each test counts with the
longest time any report gives it.

A fixture shared by several tests (module or session scope) that takes long to build is
named in :data:`SLOW_FIXTURES` instead: every test that uses it is slow, wherever it
runs. ``python -m pytest -m "not slow" --durations=20`` shows a ``setup`` over a few
seconds when one is missing.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LIST = TESTS / "slow_tests.txt"
# Fixture -> seconds to build it on a 2-core CPU (the setup --durations printed, 2026-11-28):
# every test that uses one of them is slow (conftest.py).
SLOW_FIXTURES: dict[str, float] = {
    "statistics_pair": 110.4,  # test_cpu_stability: two runs of a study, with analysis
    "analysed": 89.4,          # test_analysis_fixture: the analysed fixture study
    "probed": 36.4,            # test_loss_probe_stage: landscape and gradients of a series
    "full_run": 24.0,          # test_pipeline, test_plots_analysis: a full run
    "null_cells": 19.0,        # test_inference: the simulated null designs
    "measured": 13.4,          # test_interlayer: a run with the fifth family
    "contract_series": 45.0,   # test_family_contract: every family run through the contract
    "hf_run": 6.2,             # test_live: a Trainer run with the callback
    "built_site": 5.3,         # test_docs: the documentation site, built once (2026-12-03)
}

HEADER = ("# Tests left out of the fast set (pytest -m 'not slow'): seconds in a full run on a\n"
          "# 2-core CPU, then the node id. Made by tests/slow_list.py from a JUnit report.\n")


def read_list(path: Path = LIST) -> dict[str, float]:
    """Node id -> seconds, from ``slow_tests.txt`` (comments and blank lines skipped)."""
    out: dict[str, float] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            seconds, node = line.split("\t", 1)
            out[node] = float(seconds)
    return out


def node_id(classname: str, name: str) -> str:
    """A pytest node id from a JUnit ``classname`` (``tests.test_x`` or
    ``tests.test_x.TestY``) and test ``name``."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (TESTS.parent / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    raise ValueError(f"no test file for {classname!r}")


def durations(*junit: Path) -> dict[str, float]:
    """Node id -> seconds of every test case in JUnit XML reports (the longest, when
    several reports have the test); cases of a test file that no longer exists are
    skipped, saying so."""
    out: dict[str, float] = {}
    for report in junit:
        for case in ET.parse(report).getroot().iter("testcase"):
            try:
                node = node_id(case.get("classname", ""), case.get("name", ""))
            except ValueError as exc:  # a test file renamed or removed since the report
                print(f"{report}: skipped: {exc}", file=sys.stderr)
                continue
            out[node] = max(out.get(node, 0.0), float(case.get("time", 0.0)))
    return out


def exists(node: str) -> bool:
    """Whether the test function of ``node`` is defined in its file (a report may name
    tests renamed or removed since)."""
    path, *scope = node.split("::")
    file = TESTS.parent / path
    if not file.is_file():
        return False
    name = re.sub(r"\[.*\]$", "", scope[-1])
    return re.search(rf"^\s*def {re.escape(name)}\(", file.read_text(encoding="utf-8"),
                     re.M) is not None


def split(times: dict[str, float], fast_budget: float) -> dict[str, float]:
    """The slow tests: all but the fastest ones whose times add up to ``fast_budget``."""
    total, slow = 0.0, {}
    for node, seconds in sorted(times.items(), key=lambda kv: (kv[1], kv[0])):
        if total + seconds <= fast_budget:
            total += seconds
        else:
            slow[node] = seconds
    return slow


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("junit", type=Path, nargs="+",
                   help="JUnit reports: a full run's, and a fast run's (see above)")
    p.add_argument("--fast-budget", type=float, default=130.0,
                   help="seconds the fast set's tests may take in all (default: %(default)s)")
    args = p.parse_args(argv)
    times = {node: t for node, t in durations(*args.junit).items() if exists(node)}
    slow = split(times, args.fast_budget)
    LIST.write_text(HEADER + "".join(f"{s:.1f}\t{n}\n" for n, s in sorted(slow.items())),
                    encoding="utf-8")
    fast = sum(times.values()) - sum(slow.values())
    print(f"{len(slow)} of {len(times)} tests slow ({sum(slow.values()):.0f} s); the fast "
          f"set's {len(times) - len(slow)} take {fast:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
