"""Issue 60: design checks are remembered by what determines them, so an analysis run
again does not simulate the same designs again; the statistics are the same with the
cache as without, and a cache made by other code, or damaged, is not used."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from test_controls import records_for

from toposig.analysis import controls, design_cache, inference
from toposig.analysis.design_cache import DesignCache
from toposig.analyze import analyze, design_cache_path, read_design_cache

TARGETS = {"driven": "perplexity", "trend": "perplexity", "noise": "perplexity"}
FIXTURE = Path(__file__).parent / "fixtures" / "mini_results"


def controlled(cache: DesignCache | None, design_runs: int = 20) -> dict:
    return controls.controlled_correlations(records_for(n=24), TARGETS, n_resamples=50,
                                            n_surrogates=49, design_runs=design_runs,
                                            design_cache=cache)


def test_the_statistics_are_the_same_with_a_cold_a_warm_and_no_cache():
    plain = controlled(None)
    cold = DesignCache()
    assert controlled(cold) == plain
    assert cold.hits == 0 and cold.misses > 0
    warm = DesignCache.from_json(json.loads(json.dumps(cold.to_json())))
    assert controlled(warm) == plain
    assert warm.misses == 0 and warm.hits == cold.misses
    assert warm.to_json() == cold.to_json()  # it keeps what it used, no more


def test_a_warm_cache_simulates_nothing(monkeypatch):
    cold = DesignCache()
    controlled(cold)
    calls = []
    real = inference.simulate_design
    monkeypatch.setattr(inference, "simulate_design",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    controlled(DesignCache.from_json(cold.to_json()))
    assert calls == []
    controlled(DesignCache())
    assert calls  # the check fails without the cache


def test_a_cached_check_is_used_only_for_its_own_design():
    """A planted check under another key changes nothing; under the design's own key it
    would be used, which is why the key covers every input."""
    cold = DesignCache()
    plain = controlled(cold)
    stored = cold.to_json()
    key = next(iter(stored["checks"]))
    forged = dict(stored["checks"][key], status="uncalibrated", why="planted")
    other = dict(stored, checks={k.replace(k[:8], "0" * 8): v for k, v in
                                 stored["checks"].items()} | {"f" * 32 + ":x:1:-": forged})
    assert controlled(DesignCache.from_json(other)) == plain
    design = inference.fit_design([1.0, 2, 4, 3, 5, 7, 6, 8, 9, 11, 10, 12],
                                  [12.0, 11, 9, 10, 8, 6, 7, 5, 4, 2, 3, 1], range(12))
    keys = {design_cache.design_key(design, seed, 20, 10) for seed in (0, 1)}
    keys.add(design_cache.design_key(design, 0, 40, 20))
    assert len(keys) == 3


def test_a_cache_of_other_code_is_not_used(monkeypatch):
    cold = DesignCache()
    controlled(cold)
    stored = cold.to_json()
    monkeypatch.setattr(design_cache, "code_fingerprint", lambda: "changed-code")
    again = DesignCache.from_json(stored)
    controlled(again)
    assert again.hits == 0


@pytest.mark.parametrize("content", ["{not json", '{"checks": []}',
                                     '{"version": 1, "code": "%s", "checks": {"k": 3}}'])
def test_a_damaged_cache_file_is_said_and_left_out(content, tmp_path, caplog):
    path = design_cache_path(tmp_path)
    path.parent.mkdir()
    path.write_text(content.replace("%s", design_cache.code_fingerprint()))
    with caplog.at_level(logging.WARNING, logger="toposig.analysis"):
        cache = read_design_cache(tmp_path)
    assert "is not a sound design-check cache" in caplog.text
    assert cache.get("k") is None


def test_a_link_or_a_fifo_in_place_of_the_cache_is_not_read(tmp_path, caplog):
    path = design_cache_path(tmp_path)
    path.parent.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(DesignCache().to_json()))
    path.symlink_to(outside)
    with caplog.at_level(logging.WARNING, logger="toposig.analysis"):
        read_design_cache(tmp_path)
    path.unlink()
    os.mkfifo(path)
    read_design_cache(tmp_path)  # would block for ever if it were read
    assert caplog.text.count("not a plain file") == 2


def test_an_analysis_says_its_stages_and_reuses_its_checks(tmp_path, caplog):
    """End to end on the mini fixture: the first analysis simulates and keeps its
    checks, the second reuses them all and writes the same statistics; a damaged cache
    is said, simulated again and written anew; a link in its place is replaced, not
    followed."""
    folder = tmp_path / "mini"
    shutil.copytree(FIXTURE, folder)
    with caplog.at_level(logging.INFO, logger="toposig.analysis"):
        analyze(folder, plots=False, design_runs=10)
    for stage in ("correlations ...", "controls (", "controls: model 1 of",
                  "Wasserstein distances"):
        assert stage in caplog.text
    made = (folder / "data" / "statistics.json").read_bytes()
    checks = json.loads(design_cache_path(folder).read_text())["checks"]
    assert checks
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="toposig.analysis"):
        analyze(folder, plots=False, design_runs=10)
    said = [ln for ln in caplog.text.splitlines() if "controls: model" in ln]
    assert said and all(", 0 designs simulated" in ln for ln in said), said
    assert "reused, 0 designs" in said[-1] and " 0 reused" not in said[-1]
    assert (folder / "data" / "statistics.json").read_bytes() == made
    design_cache_path(folder).write_text("{damaged")
    analyze(folder, plots=False, design_runs=10)
    assert (folder / "data" / "statistics.json").read_bytes() == made
    assert json.loads(design_cache_path(folder).read_text())["checks"] == checks
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    design_cache_path(folder).unlink()
    design_cache_path(folder).symlink_to(outside)
    analyze(folder, plots=False, design_runs=10)
    assert outside.read_text() == "{}" and not design_cache_path(folder).is_symlink()
