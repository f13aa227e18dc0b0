"""Every number in REPORT.md is a value of the committed results, to the precision shown.

A number written with decimals (``-0.973``, ``3.9e-15``, ``11.9%``) must equal, after
rounding to the digits it shows, some value in the committed results: a number of a
``summary.md`` or of a JSON file under ``results/**/data/`` (percentages also match a
fraction, ``11.9%`` ~ ``0.119``). Whole numbers (step counts, sizes, ``5,112``) must
appear in the same files, which is a weaker check because small integers are common.
Ranges written ``a to b`` or ``a–b`` are checked end by end. Figures quoted from the seed
studies are written in parentheses that open with "seed paper:" or "seed report:" and
are not checked.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
REPORT = PROJECT / "REPORT.md"
RESULTS = PROJECT / "results"

# A signed decimal, integer with thousands separators, or scientific number, optionally
# a percentage. Not part of a word or a path (``h0``, ``seed004``, ``step143000``,
# ``pythia-410m``), not a version or a date.
NUMBER = re.compile(
    r"(?<![\w.\-/])([-−+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:e([-−+]?\d+))?(%?)(?![\w/])"
)


def parse_numbers(text: str) -> list[tuple[str, float, float, bool]]:
    """(token, value, half of the last shown digit, is_percent) for every number in text."""
    out = []
    for m in NUMBER.finditer(text):
        sign, whole, frac, exp, pct = m.groups()
        frac = frac or ""
        digits = len(frac) - 1 if frac else 0
        mantissa = Decimal(whole.replace(",", "") + frac)
        if sign in ("-", "−"):
            mantissa = -mantissa
        e = int(exp.replace("−", "-")) if exp else 0
        value = float(mantissa.scaleb(e))
        half = 0.5 * 10.0 ** (e - digits)
        out.append((m.group(0), value, half, pct == "%"))
    return out


def strip_code(md: str) -> str:
    """REPORT.md without fenced code blocks, inline code (commands, names) and the
    parentheses that quote the seed studies' own figures."""
    md = re.sub(r"```.*?```", " ", md, flags=re.S)
    md = re.sub(r"`[^`]*`", " ", md)
    return re.sub(r"\(seed (?:paper|report):[^)]*\)", " ", md)


def json_numbers(obj, out: list[float]) -> None:
    if isinstance(obj, bool):
        return
    if isinstance(obj, int | float):
        out.append(float(obj))
    elif isinstance(obj, dict):
        for v in obj.values():
            json_numbers(v, out)
    elif isinstance(obj, list):
        for v in obj:
            json_numbers(v, out)


def committed(paths: list[Path]) -> list[Path]:
    """Those of ``paths`` that git tracks: a results folder also holds files a run wrote
    and nobody committed (the aggregates of ``results/seed004``), which a clean clone
    does not have. All of them outside a git checkout."""
    import subprocess

    try:
        listed = subprocess.run(["git", "ls-files", "-z", "results"], cwd=PROJECT,
                                capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return paths
    tracked = {PROJECT / name for name in listed.split("\0") if name}
    return [p for p in paths if p in tracked]


def committed_values() -> list[float]:
    """Every number of the committed summaries and analysis JSON files."""
    values: list[float] = []
    for md in committed(sorted(RESULTS.rglob("summary.md"))):
        values += [v for _, v, _, _ in parse_numbers(md.read_text())]
    for path in committed(sorted(RESULTS.rglob("data/*.json"))):
        json_numbers(json.loads(path.read_text()), values)
    return values


def unmatched(text: str, values: list[float]) -> list[str]:
    import numpy as np

    pool = np.unique(np.asarray(values, dtype=float))
    pool = pool[np.isfinite(pool)]
    missing = []
    for token, value, half, pct in parse_numbers(text):
        targets = [value, value / 100] if pct else [value]
        halves = [half, half / 100] if pct else [half]
        ok = False
        for t, h in zip(targets, halves, strict=True):
            if np.any(np.abs(pool - t) <= h * (1 + 1e-9) + 1e-12):
                ok = True
                break
        if not ok:
            missing.append(token)
    return missing


def test_parse_numbers_reads_the_forms_the_report_uses():
    got = [(t, v, h, p) for t, v, h, p in parse_numbers(
        "ρ = −0.973, p = 3.9e-15, 5,112 params, 11.9% better, h0 seed004 step143000 x1.5"
    )]
    assert [g[0] for g in got] == ["−0.973", "3.9e-15", "5,112", "11.9%"]
    assert got[0][1] == pytest.approx(-0.973) and got[0][2] == pytest.approx(5e-4)
    assert got[1][1] == pytest.approx(3.9e-15) and got[1][2] == pytest.approx(5e-17)
    assert got[2][1] == 5112 and got[3][3] is True


def test_quoted_seed_figures_and_code_are_not_checked():
    text = strip_code("ρ = 0.5 (seed paper: 10.6% at 30%) `--seed 7` ```\nrun 3\n``` end")
    assert [t for t, *_ in parse_numbers(text)] == ["0.5"]


def test_checker_rejects_a_number_not_in_the_results():
    values = [-0.97312, 3.94e-15, 0.1192]
    assert unmatched("ρ = −0.973, p = 3.9e-15, 11.9%", values) == []
    assert unmatched("ρ = −0.975, ρ = +0.973", values) == ["−0.975", "+0.973"]
    assert unmatched("12.0%", values) == ["12.0%"]


def test_every_number_in_the_report_is_in_the_committed_results():
    text = strip_code(REPORT.read_text())
    missing = unmatched(text, committed_values())
    assert not missing, f"numbers in REPORT.md not found in results/: {missing}"


TRIPLE = re.compile(r"[-−+]?\d+\.\d+ \[[-−+]?\d+\.\d+, [-−+]?\d+\.\d+\]")


def test_every_interval_in_the_report_is_a_cell_of_a_committed_summary():
    """An estimate with its interval, ``−0.772 [−0.967, −0.102]``, is a far more specific
    claim than a lone number (which a large results folder holds by chance): each must
    appear as written (up to the minus sign's glyph) in a committed ``summary.md``."""
    summaries = "\n".join(md.read_text() for md in committed(sorted(RESULTS.rglob("summary.md"))))
    found = set(TRIPLE.findall(summaries.replace("−", "-")))
    claimed = TRIPLE.findall(strip_code(REPORT.read_text()).replace("−", "-"))
    assert claimed, "the report quotes no interval: the pattern is out of date"
    assert [t for t in claimed if t not in found] == []
