"""The fast set (``pytest -m "not slow"``): its list names real tests, and is applied."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from slow_list import LIST, SLOW_FIXTURES, durations, exists, node_id, read_list, split

PROJECT = Path(__file__).resolve().parents[1]


def test_every_listed_test_exists():
    listed = read_list()
    assert listed, f"{LIST} lists no test"
    assert [node for node in listed if not exists(node)] == []
    assert not exists("tests/test_slow_list.py::test_gone[a]")
    assert not exists("tests/test_gone.py::test_x")


def test_node_ids_and_the_budget():
    assert node_id("tests.test_slow_list", "test_x[a-b]") == "tests/test_slow_list.py::test_x[a-b]"
    assert node_id("tests.test_slow_list.TestY", "test_z") == \
        "tests/test_slow_list.py::TestY::test_z"
    with pytest.raises(ValueError, match="no test file"):
        node_id("tests.nope", "test_x")
    times = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 10.0}
    assert split(times, 6.0) == {"d": 10.0}
    assert split(times, 3.0) == {"c": 3.0, "d": 10.0}


def test_reports_combine_by_the_longest_time(tmp_path):
    """A fast run's report moves a fixture's set-up onto a test a full run found quick."""
    case = '<testcase classname="tests.test_slow_list" name="{}" time="{}"/>'
    full, fast = tmp_path / "full.xml", tmp_path / "fast.xml"
    full.write_text(f"<testsuites><testsuite>{case.format('test_a', 9)}"
                    f"{case.format('test_b', 0.5)}</testsuite></testsuites>")
    fast.write_text(f"<testsuites><testsuite>{case.format('test_a', 1)}"
                    f"{case.format('test_b', 8)}</testsuite></testsuites>")
    node = "tests/test_slow_list.py::test_{}"
    assert durations(full) == {node.format("a"): 9.0, node.format("b"): 0.5}
    assert durations(full, fast) == {node.format("a"): 9.0, node.format("b"): 8.0}
    gone = tmp_path / "gone.xml"  # a test file renamed since the report: skipped, said
    gone.write_text('<testsuites><testsuite><testcase classname="tests.test_gone" '
                    'name="test_x" time="5"/></testsuite></testsuites>')
    assert durations(full, gone) == durations(full)


def test_every_slow_fixture_exists():
    sources = "".join(p.read_text(encoding="utf-8") for p in PROJECT.glob("tests/*.py"))
    for name in SLOW_FIXTURES:
        assert re.search(rf"@pytest\.fixture[^\n]*\n(@[^\n]*\n)*def {name}\(", sources), name


def test_the_listed_tests_are_marked_slow():
    """A listed test, and a test that is not listed but uses a slow fixture
    (``statistics_pair``), are collected by ``-m slow`` and not by ``-m "not slow"``."""
    node = sorted(read_list())[0]
    by_fixture = "tests/test_cpu_stability.py::test_the_rounded_statistics_do_not_move"
    paths = sorted({node.split("::")[0], by_fixture.split("::")[0]})

    def collected(marks: str) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m",
                              marks, "-p", "no:cacheprovider", *paths], cwd=PROJECT,
                             capture_output=True, text=True)
        return [ln for ln in out.stdout.splitlines() if "::" in ln]

    slow, fast = collected("slow"), collected("not slow")
    assert node in slow and by_fixture in slow
    assert node not in fast and by_fixture not in fast
