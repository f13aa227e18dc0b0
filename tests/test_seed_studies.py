"""The committed re-analysis of the seed studies' published measurements (results/seeds/)
is what its README's commands make: imported, analysed and backtested again here, the
statistics, summaries, figures and backtests are the committed bytes, or, on a processor
whose floating-point kernels are not those the files were made with, the same but for
the last bits (:func:`differs`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from toposig.analyze import analyze
from toposig.cli.backtest import main as backtest_main
from toposig.cli.import_tables import main as import_main

PROJECT = Path(__file__).resolve().parents[1]
SEEDS = PROJECT / "results" / "seeds"
SOURCES = {
    "seed-a": [f"../shared/data/seed-measurements/seed-a-pythia/pythia-{m}_results.json"
               for m in ("160m", "410m", "70m")],
    "seed-b": ["../shared/data/seed-measurements/seed-b-small-gpts/tda_features.json",
               "--params", "results/seeds/seed-b-params.csv"],
}
BACKTESTS = {"backtest.json": [], "backtest-all-features.json": ["--all-features"]}


def test_the_committed_seed_analyses_regenerate(seed_measurements, tmp_path, monkeypatch):
    monkeypatch.chdir(PROJECT)  # the records name their files as the README's commands do
    out = tmp_path / "seeds"
    for name, files in SOURCES.items():
        assert import_main([*files, "--out", str(out / name)]) == 0
        assert (out / name / "data" / "config.json").read_bytes() == \
            (SEEDS / name / "data" / "config.json").read_bytes()
        analyze(out / name)
        drawn = sorted(p.relative_to(out / name) for p in (out / name / "plots").iterdir())
        assert drawn == sorted(p.relative_to(SEEDS / name)
                               for p in (SEEDS / name / "plots").iterdir())
        for rel in ("data/statistics.json", "summary.md", *map(str, drawn)):
            assert differs(out / name / rel, SEEDS / name / rel) is None, f"{name}/{rel}"
    folders = [str(out / "seed-a"), str(out / "seed-b")]
    for backtest, flags in BACKTESTS.items():
        assert backtest_main([*folders, *flags, "--json", str(out / backtest)]) == 0
        assert differs(out / backtest, SEEDS / "data" / backtest) is None, backtest


# What a processor with other floating-point kernels may change (NumPy's SIMD loops and
# OpenBLAS's kernels are chosen by the processor: AVX-512 ones give other last bits than
# AVX2 ones, and a value rounded for the file can then flip its last digit). On
# 2026-11-29 the machine's new AVX-512 host changed one number of seed-b's statistics
# (2.59198 -> 2.59197, a detrended model's degrees of freedom) and 5 pixels of one figure
# by 1/255; the committed files were made on an AVX2 host.
FLOAT_RTOL = 1e-5  # the files round to 6 significant digits
MAX_PIXELS = 50  # a figure's anti-aliased edges; any drawn change moves far more


def differs(made: Path, committed: Path) -> str | None:
    """``None`` when ``made`` holds ``committed``'s bytes, or differs from them only in
    the last bits: a JSON file whose every float is within :data:`FLOAT_RTOL` and every
    other value equal; a text whose every number is within one unit of its last printed
    digit and every other character equal; a figure of the same size with at most
    :data:`MAX_PIXELS` pixels changed. Otherwise what differs, in words."""
    a, b = made.read_bytes(), committed.read_bytes()
    if a == b:
        return None
    if made.suffix == ".json":
        return _json_differs(json.loads(a), json.loads(b), "")
    if made.suffix == ".md":
        return _text_differs(a.decode("utf-8"), b.decode("utf-8"))
    if made.suffix == ".png":
        import matplotlib.image as mpimg

        x, y = mpimg.imread(made), mpimg.imread(committed)
        if x.shape != y.shape:
            return f"the figure is {x.shape}, not {y.shape}"
        changed = int(np.count_nonzero(np.any(x != y, axis=-1)))
        return None if changed <= MAX_PIXELS else f"{changed} pixels changed"
    return "other bytes"


def _json_differs(a: object, b: object, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path}: other keys"
        return next((d for k in a if (d := _json_differs(a[k], b[k], f"{path}/{k}"))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items, not {len(b)}"
        return next((d for i, (u, v) in enumerate(zip(a, b, strict=True))
                     if (d := _json_differs(u, v, f"{path}[{i}]"))), None)
    if type(a) is float and type(b) is float:
        close = math.isclose(a, b, rel_tol=FLOAT_RTOL, abs_tol=1e-12)
        return None if close else f"{path}: {a!r}, not {b!r}"
    return None if (type(a), a) == (type(b), b) else f"{path}: {a!r}, not {b!r}"


_NUMBER = re.compile(r"[-+−]?\d+(?:\.(\d+))?(?:e[-+]?\d+)?")


def _text_differs(a: str, b: str) -> str | None:
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return "other text"
    for x, y in zip(_NUMBER.finditer(a), _NUMBER.finditer(b), strict=True):
        if x.group() == y.group():
            continue
        unit = 10.0 ** -len(x.group(1) or "")
        u, v = (float(m.group().replace("−", "-")) for m in (x, y))
        if "e" in x.group() or len(x.group(1) or "") != len(y.group(1) or "") \
                or abs(u - v) > 1.0001 * unit:
            return f"{x.group()}, not {y.group()}"
    return None


def test_differs_allows_last_bits_only(tmp_path):
    """:func:`differs` lets through what another processor's kernels change and nothing
    more (each case fails it once: a changed digit beyond rounding, a word, a figure)."""
    def pair(suffix, a, b):
        (tmp_path / f"a{suffix}").write_bytes(a)
        (tmp_path / f"b{suffix}").write_bytes(b)
        return differs(tmp_path / f"a{suffix}", tmp_path / f"b{suffix}")

    assert pair(".json", b'{"x": [2.59198, 3]}', b'{"x": [2.59197, 3]}') is None
    assert pair(".json", b'{"x": [2.5921, 3]}', b'{"x": [2.59197, 3]}') is not None
    assert pair(".json", b'{"x": [2.59198, 4]}', b'{"x": [2.59198, 3]}') is not None
    assert pair(".json", b'{"x": "yes"}', b'{"x": "no"}') is not None
    assert pair(".md", "r = −0.27 (p 0.031)".encode(), "r = −0.28 (p 0.031)".encode()) is None
    assert pair(".md", b"r = 0.27 (p 0.031)", b"r = 0.29 (p 0.031)") is not None
    assert pair(".md", b"r = 0.27 (p 0.031)", b"r = 0.27 (q 0.031)") is not None
    assert pair(".md", b"r = 0.27", b"r = 0.270") is not None
    import matplotlib.pyplot as plt

    image = np.zeros((40, 40, 3))
    for name, changed in (("few", MAX_PIXELS), ("many", MAX_PIXELS + 1)):
        other = image.copy()
        other.reshape(-1, 3)[:changed] = 1.0
        plt.imsave(tmp_path / f"{name}.png", other)
    plt.imsave(tmp_path / "base.png", image)
    assert differs(tmp_path / "few.png", tmp_path / "base.png") is None
    assert differs(tmp_path / "many.png", tmp_path / "base.png") == \
        f"{MAX_PIXELS + 1} pixels changed"
