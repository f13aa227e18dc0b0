"""Issue 60: every committed study folder opens as a fresh clone has it (records, config
and statistics, no aggregates): ``toposig.open`` builds the entries from the records in
memory, quickly, writes nothing, and the stored statistics stand for them."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import toposig
from toposig.run.aggregates import aggregate_path, rebuild_if_stale
from toposig.run.results_folder import ResultsMissingError, load_entries

ROOT = Path(__file__).resolve().parents[1]


def tracked(prefix: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", prefix], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    return [p for p in out.split("\0") if p]


def committed_folders() -> list[str]:
    """Study folders committed without their aggregates."""
    files = set(tracked("results"))
    return sorted(str(Path(p).parent.parent) for p in files
                  if p.endswith("/data/config.json")
                  and str(Path(p).parent / "all_results.json") not in files
                  and str(Path(p).parent / "statistics.json") in files)


def as_cloned(folder: str, tmp_path: Path) -> Path:
    """A copy of the folder's tracked files alone, as a fresh clone holds them."""
    dest = tmp_path / Path(folder).name
    for rel in tracked(folder):
        target = dest / Path(rel).relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    return dest


def test_there_are_committed_folders_to_open():
    if not (ROOT / ".git").exists():
        pytest.skip("not a checkout")
    assert {"results/seed004", "results/grokking", "results/ensemble"} <= set(
        committed_folders())


def measured_folders() -> list[str]:
    return [f for f in committed_folders() if not f.startswith("results/seeds/")]


@pytest.mark.parametrize("folder", measured_folders() if (ROOT / ".git").exists() else [])
def test_a_committed_folder_opens_from_its_records_alone(folder, tmp_path):
    copy = as_cloned(folder, tmp_path)
    assert not aggregate_path(copy).exists()
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    t0 = time.perf_counter()
    results = toposig.open(copy)
    assert results._stored_problem() is None  # the committed statistics are for them
    assert results.statistics.records_sha256 is not None
    assert time.perf_counter() - t0 < 60
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before  # nothing written
    assert len(results.table()) > 0
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()  # a figure of the report, drawn into the notebook's own Axes
    drawn = results.plot.training_curves(ax=ax)
    assert drawn is not None
    axes = drawn.get_axes() if hasattr(drawn, "get_axes") else [drawn]
    assert any(a.get_lines() for a in axes)
    plt.close(fig)
    # the entries built in memory are those a run (or analyze) writes from the records
    assert rebuild_if_stale(copy)
    written = json.loads(aggregate_path(copy).read_text())
    assert [e.to_json() for e in load_entries(copy)] == [e for e in written
                                                        if e["status"] == "ok"]
    assert [e.to_json() for e in results.records] == [e.to_json() for e in load_entries(copy)]


def test_an_import_without_its_records_names_the_command_that_remakes_them(tmp_path):
    """The seed studies' folders are imports: their records are the imported tables, not
    committed; opening one names the import and its files."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a checkout")
    copy = as_cloned("results/seeds/seed-b", tmp_path)
    with pytest.raises(ResultsMissingError, match=r"toposig import \.\./shared/data/seed-"
                                                  r"measurements/seed-b-small-gpts/tda_"
                                                  r"features\.json --out"):
        toposig.open(copy)


def test_a_folder_with_no_records_still_says_what_to_run(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(ResultsMissingError, match="run_experiments.py --out"):
        load_entries(tmp_path)


def test_a_mistyped_folder_gets_the_nearest_names(tmp_path):
    for name in ("seed004", "seeds", "grokking"):
        (tmp_path / name).mkdir()
    with pytest.raises(ResultsMissingError, match=r"did you mean \S*seed004 or \S*seeds\?"):
        load_entries(tmp_path / "seed04")
    with pytest.raises(ResultsMissingError, match="did you mean") as caught:
        toposig.open(tmp_path / "grokin")
    assert str(tmp_path / "grokking") in str(caught.value)
    with pytest.raises(ResultsMissingError, match="first, or pass --out") as caught:
        load_entries(tmp_path / "unrelated")  # nothing near: what to run
    assert "did you mean" not in str(caught.value)
