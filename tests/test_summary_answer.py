"""summary.md answers first: a box with the question, the calibrated verdicts and their
power in its first 40 lines, a table of contents whose links all land, and the long
tables last. The box's numbers are checked against the tables below it, read back from
the markdown (not from the code that wrote the box)."""

from __future__ import annotations

import json
import re
import statistics as stats
from pathlib import Path

import pytest
from test_report import LONG, PRINTED, sections, tables

from toposig.report.summary import summary_markdown
from toposig.report.summary.answer import anchor
from toposig.run.results_folder import load_entries

ROOT = Path(__file__).resolve().parents[1]
C4 = LONG[2]
F3 = "F3. Head to head: whose change-point lies nearest the transition"


def _summary(folder: Path) -> str:
    statistics = json.loads((folder / "data" / "statistics.json").read_text(encoding="utf-8"))
    return summary_markdown(statistics, load_entries(folder))


@pytest.fixture(scope="module")
def tiny() -> str:
    return _summary(ROOT / "results")


@pytest.fixture(scope="module")
def induction() -> str:
    return _summary(ROOT / "results" / "induction")


def _box(md: str) -> str:
    block = md.split("## The answer\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line[2:] for line in block.splitlines() if line.startswith("> "))


def _scope(box: str, name: str) -> str:
    found = re.search(rf"\*\*{name}\.\*\* (.+)", box)
    assert found, f"no line for {name!r} in the box:\n{box}"
    return found.group(1)


def _c4_readings(md: str, pooled: bool) -> list[str]:
    rows = tables(sections(md)[C4])[0]
    return [r["Reads as"] for r in rows if (r["Model"] == "pooled") == pooled]


@pytest.mark.parametrize("which", ["tiny", "induction"])
def test_the_answer_comes_first_and_agrees_with_table_c4(which, request):
    md = request.getfixturevalue(which)
    lines = md.splitlines()
    assert "## The answer" in lines[:40]
    box_end = next(i for i, line in enumerate(lines) if line == "## Contents")
    assert box_end < 40, "the verdicts are not on the first screen"
    box = _box(md)
    assert 5 <= len(box.splitlines()) <= 10
    for name, pooled in (("Within a model", False), ("Pooled over models", True)):
        readings = _c4_readings(md, pooled)
        found = [r for r in readings if r.startswith("association")]
        bounds = [r for r in readings if r.startswith("no association above")
                  or r.startswith("none found")]
        line = _scope(box, name)
        tested = int(re.match(r"(\d+) tests? calibrated", line).group(1))
        assert tested == len(found) + len(bounds), line
        if found:
            assert re.search(rf"an association in {len(found)} tests?[,:]", line), line
        else:
            assert "no association" in line
        if bounds:  # the median of C4's "no association above X", read from its text
            values = [float(r.rsplit(" ", 1)[1]) if r.startswith("no association")
                      else float("inf") for r in bounds]
            median = stats.median(values)
            if median == float("inf") and min(values) == median:
                assert "finds even a coupling of 0.9" in line, line
            else:
                shown = "above 0.9" if median == float("inf") else f"of {median:.2f} or more"
                assert f"fluctuations {shown} (the median over the {len(bounds)} " \
                    "without" in line, line


def test_the_positive_control_line_names_what_f3_marks(induction):
    box = _box(induction)
    line = _scope(box, r"Positive control \(F3\)")
    for row in tables(sections(induction)[F3])[0]:
        feature = row["Feature"]
        if row["Family"].startswith("the ground truth"):  # tested alone, never "detects"
            continue
        detected = any("**detects**" in cell for cell in row.values())
        assert (feature in line) == detected, feature


@pytest.mark.parametrize("which", ["tiny", "induction"])
def test_every_contents_link_lands_and_the_long_tables_are_last(which, request):
    md = request.getfixturevalue(which)
    headings = [h.lstrip("#").strip() for h in md.splitlines() if re.match(r"#{2,3} ", h)]
    anchors = {anchor(h) for h in headings}
    contents = md.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert links and set(links) <= anchors
    body_links = re.findall(r"\]\(#([^)]+)\)", md.split("## Contents\n", 1)[1])
    assert set(body_links) <= anchors
    printed = [h for h in headings if h in PRINTED]
    assert printed[-len(LONG):] == list(LONG)
    assert headings.index("Appendix. The long tables") < headings.index(LONG[0])


def test_anchor_is_githubs():
    assert anchor("Part C. Robustness") == "part-c-robustness"
    assert anchor("C1. Robustness of every feature's correlation") == \
        "c1-robustness-of-every-features-correlation"
    assert anchor("F3. Head to head: whose change-point lies nearest the transition") == \
        "f3-head-to-head-whose-change-point-lies-nearest-the-transition"
