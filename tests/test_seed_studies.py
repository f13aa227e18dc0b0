"""The committed re-analysis of the seed studies' published measurements (results/seeds/)
is what its README's commands make: imported, analysed and backtested again here, the
statistics, summaries and backtests are the committed bytes."""

from __future__ import annotations

from pathlib import Path

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
            assert (out / name / rel).read_bytes() == (SEEDS / name / rel).read_bytes(), \
                f"{name}/{rel}"
    folders = [str(out / "seed-a"), str(out / "seed-b")]
    for backtest, flags in BACKTESTS.items():
        assert backtest_main([*folders, *flags, "--json", str(out / backtest)]) == 0
        assert (out / backtest).read_bytes() == (SEEDS / "data" / backtest).read_bytes(), \
            backtest
