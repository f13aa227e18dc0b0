"""Prefetching, eviction and the executors, against a folder-backed stand-in for the Hub.

``FolderHub`` has ``snapshot_download``'s signature. Its repositories are folders
``hub/<org>/<name>/<revision>/``; what it downloads lands in a real Hugging Face cache
layout (content-addressed blobs, snapshot links, refs), so the real eviction code,
which asks ``huggingface_hub`` to delete a revision, runs on it unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import FolderHub, make_series, neox_config, pythia_tokenizer

from toposig.run import pipeline
from toposig.run import plan as planning
from toposig.run.executors import RayExecutor, SerialExecutor, make_executor
from toposig.run.tasks import TaskFailure
from toposig.sources.checkpoints import Checkpoint
from toposig.sources.fetch import Prefetcher, evict_snapshot, hub_snapshot

FAST = ["--n-texts", "40", "--max-length", "32"]
VOLATILE = {"timings_s", "finished_at"}
REPO = "fake-org/tiny"
STEPS = (0, 10, 100)


@pytest.fixture(scope="module")
def hub_root(tiny_series, tmp_path_factory) -> Path:
    """The tiny series published on the fake Hub as revisions step0, step10, step100."""
    root = tmp_path_factory.mktemp("fake_hub")
    for step in STEPS:
        shutil.copytree(tiny_series / f"step{step}", root / REPO / f"step{step}")
    return root


def fast_settings():
    from run_experiments import build_parser
    from toposig.cli.options import settings_from_args

    return settings_from_args(build_parser().parse_args(FAST))


def hub_plan(tiny_series, local_files_only: bool = False):
    """A plan over the Hub checkpoints, built from the local series' plan (same texts)."""
    plan = planning.plan_run([str(tiny_series)], None, fast_settings())
    ckpts = [Checkpoint(REPO, "tiny", s, "hub", REPO, f"step{s}") for s in STEPS]
    return dataclasses.replace(plan, checkpoints=ckpts, local_files_only=local_files_only)


def features_by_step(out: Path) -> dict:
    recs = json.loads((out / "data" / "all_results.json").read_text())
    return {r["step"]: (r.get("perplexity"), r["features"], r.get("status")) for r in recs}


def stable(out: Path) -> list[dict]:
    recs = json.loads((out / "data" / "all_results.json").read_text())
    out_recs = []
    for r in recs:
        r = {k: v for k, v in r.items() if k not in VOLATILE}
        if isinstance(r.get("weights"), dict):
            r["weights"] = {k: v for k, v in r["weights"].items() if k not in VOLATILE}
        out_recs.append(r)
    return out_recs


# ------------------------------------------------------------------------ the prefetcher

def test_prefetcher_keeps_order_and_overlaps_the_next_fetch():
    started: dict[int, float] = {}

    def fetch(i: int) -> int:
        started[i] = time.perf_counter()
        time.sleep(0.05)
        return i * 10

    seen, finished = [], {}
    for item, result in Prefetcher(range(5), fetch, ahead=1):
        seen.append((item, result))
        time.sleep(0.1)  # the caller's work on this item
        finished[item] = time.perf_counter()
    assert seen == [(i, i * 10) for i in range(5)]
    for i in range(4):  # item i + 1 was being fetched while item i was worked on
        assert started[i + 1] < finished[i]


def test_prefetcher_without_lookahead_fetches_only_on_demand():
    started: dict[int, float] = {}
    finished: dict[int, float] = {}

    def fetch(i):
        started[i] = time.perf_counter()
        return i

    for item, _ in Prefetcher(range(3), fetch, ahead=0):
        time.sleep(0.02)
        finished[item] = time.perf_counter()
    assert all(started[i + 1] > finished[i] for i in range(2))


def test_prefetcher_hands_a_failed_fetch_to_the_caller_and_goes_on():
    def fetch(i):
        if i == 1:
            raise OSError("network down")
        return i

    out = list(Prefetcher([0, 1, 2], fetch))
    assert out[0] == (0, 0) and out[2] == (2, 2)
    assert isinstance(out[1][1], OSError)
    with pytest.raises(ValueError, match="ahead"):
        Prefetcher([], fetch, ahead=-1)


# ------------------------------------------------------------------- hub_snapshot, evict

def test_hub_snapshot_uses_the_cache_and_downloads_only_what_is_missing(hub_root, tmp_path):
    hub = FolderHub(hub_root, tmp_path / "cache")
    ckpt = Checkpoint(REPO, "tiny", 10, "hub", REPO, "step10")
    first = hub_snapshot(ckpt, download=hub)
    assert first.downloaded and (first.path / "model.safetensors").is_file()
    assert (first.path / "config.json").is_file()
    again = hub_snapshot(ckpt, download=hub)
    assert not again.downloaded and again.path == first.path
    assert [rev for rev, _ in hub.downloads] == ["step10"]


def test_offline_uncached_fails_at_once_without_touching_the_network(hub_root, tmp_path):
    hub = FolderHub(hub_root, tmp_path / "cache", delay_s=5.0)
    ckpt = Checkpoint(REPO, "tiny", 0, "hub", REPO, "step0")
    t0 = time.perf_counter()
    with pytest.raises(FileNotFoundError, match="offline"):
        hub_snapshot(ckpt, local_files_only=True, download=hub)
    assert time.perf_counter() - t0 < 1.0 and hub.downloads == []


def test_evict_snapshot_removes_one_revision_and_keeps_shared_files(hub_root, tmp_path):
    hub = FolderHub(hub_root, tmp_path / "cache")
    a = hub_snapshot(Checkpoint(REPO, "tiny", 0, "hub", REPO, "step0"), download=hub).path
    b = hub_snapshot(Checkpoint(REPO, "tiny", 10, "hub", REPO, "step10"), download=hub).path
    b_files = {p.name: p.read_bytes() for p in b.iterdir()}
    # the tokenizer is the same file in both revisions: one blob, two links
    assert (a / "tokenizer.json").resolve() == (b / "tokenizer.json").resolve()
    freed = evict_snapshot(a)
    assert not a.exists() and freed > 0
    assert {p.name: p.read_bytes() for p in b.iterdir()} == b_files
    assert (b / "model.safetensors").resolve() != (a / "model.safetensors")
    blobs = list((b.parents[1] / "blobs").iterdir())
    assert len(blobs) == len(b_files)  # step0's own weights blob is gone, nothing else


# -------------------------------------------------------------- the serial executor

def test_prefetched_hub_run_equals_the_local_run(tiny_series, hub_root, wikitext_dir, tmp_path):
    local_out, hub_out = tmp_path / "local", tmp_path / "hub"
    local_plan = planning.plan_run([str(tiny_series)], None, fast_settings())
    pipeline.execute(local_plan, local_out, progress=False)
    hub = FolderHub(hub_root, tmp_path / "cache", delay_s=0.2)
    outcome = pipeline.execute(hub_plan(tiny_series), hub_out, progress=False,
                               executor=SerialExecutor(download=hub))
    assert outcome.computed == 3 and not outcome.failures
    assert [rev for rev, _ in hub.downloads] == ["step0", "step10", "step100"]
    assert features_by_step(hub_out) == features_by_step(local_out)
    recs = json.loads((hub_out / "data" / "all_results.json").read_text())
    assert {(r["source"], r["location"], r["revision"]) for r in recs} == {
        ("hub", REPO, f"step{s}") for s in STEPS}
    # without --evict the downloads stay in the cache
    assert len(hub.snapshots()) == 3


def test_evict_removes_only_finished_checkpoints_files(tiny_series, hub_root, wikitext_dir,
                                                      tmp_path):
    out = tmp_path / "out"
    hub = FolderHub(hub_root, tmp_path / "cache", delay_s=0.2)
    commits = {f"step{s}": hashlib.sha1(f"{REPO}@step{s}".encode()).hexdigest()
               for s in STEPS}
    plan = hub_plan(tiny_series)
    evicted, present_at_evict = [], []

    def checked_evict(path: Path) -> int:
        step = int(next(r for r, c in commits.items() if c == path.name)[4:])
        name = f"step{step:06d}.json"
        # this checkpoint's records are written before its files go
        assert (out / "records" / plan.hash_of("embedding") / "tiny" / name).is_file()
        assert (out / "records" / plan.hash_of("weights") / "tiny" / name).is_file()
        present_at_evict.append(set(hub.snapshots()))
        freed = evict_snapshot(path)
        for other in hub.snapshots():  # what is left (the prefetched next) is intact
            for f in (path.parent / other).iterdir():
                assert f.resolve().is_file()
        evicted.append(step)
        return freed

    executor = SerialExecutor(download=hub, evict=True, evict_files=checked_evict)
    outcome = pipeline.execute(plan, out, progress=False, executor=executor)
    assert not outcome.failures and evicted == list(STEPS)
    assert all(len(s) <= 2 for s in present_at_evict)  # never more than two on disk
    blobs = hub._repo(REPO) / "blobs"  # huggingface_hub drops an emptied repo folder
    assert hub.snapshots() == [] and not (blobs.is_dir() and any(blobs.iterdir()))
    # overlap: each next download started before the previous checkpoint was finished
    starts = dict(hub.downloads)
    assert starts["step10"] < starts["step100"]


def test_evict_leaves_checkpoints_that_were_already_cached(tiny_series, hub_root, wikitext_dir,
                                                          tmp_path):
    hub = FolderHub(hub_root, tmp_path / "cache")
    for s in STEPS:
        hub_snapshot(Checkpoint(REPO, "tiny", s, "hub", REPO, f"step{s}"), download=hub)
    calls = []
    executor = SerialExecutor(download=hub, evict=True, evict_files=calls.append)
    outcome = pipeline.execute(hub_plan(tiny_series, local_files_only=True), tmp_path / "out",
                               progress=False, executor=executor)
    assert not outcome.failures and calls == [] and len(hub.snapshots()) == 3


def test_offline_run_records_uncached_checkpoints_as_failures(tiny_series, hub_root,
                                                             wikitext_dir, tmp_path):
    hub = FolderHub(hub_root, tmp_path / "cache", delay_s=5.0)
    hub_snapshot(Checkpoint(REPO, "tiny", 10, "hub", REPO, "step10"), download=FolderHub(
        hub_root, tmp_path / "cache"))
    t0 = time.perf_counter()
    outcome = pipeline.execute(hub_plan(tiny_series, local_files_only=True), tmp_path / "out",
                               progress=False, executor=SerialExecutor(download=hub))
    assert time.perf_counter() - t0 < 30 and hub.downloads == []
    failed = {(f["step"], f["family"]) for f in outcome.failures}
    assert failed == {(s, fam) for s in (0, 100) for fam in ("embedding", "weights")}
    assert all("not in the local Hugging Face cache" in f["error"] for f in outcome.failures)
    assert features_by_step(tmp_path / "out")[10][2] == "ok"


# ------------------------------------------------------------------------------- Ray

def test_make_executor_validates_before_any_work():
    assert isinstance(make_executor("serial"), SerialExecutor)
    with pytest.raises(ValueError, match="--executor"):
        make_executor("dask")
    with pytest.raises(ValueError, match="cpus-per-task"):
        RayExecutor(cpus_per_task=0)
    with pytest.raises(ValueError, match="gpus-per-task"):
        RayExecutor(gpus_per_task=1.5)


def test_task_failure_pickles_with_its_description():
    import pickle

    try:
        raise KeyError("missing.weight")
    except KeyError as exc:
        failure = TaskFailure.from_exception(exc)
    back = pickle.loads(pickle.dumps(failure))
    assert (back.error_type, back.message) == ("KeyError", "'missing.weight'")
    assert "raise KeyError" in back.traceback_text


def test_ray_run_equals_the_serial_run_and_a_failing_task_costs_only_itself(
        tiny_series, wikitext_dir, tmp_path, tokenizer_file):
    pytest.importorskip("ray")
    series = tmp_path / "series"
    shutil.copytree(tiny_series, series)
    make_series(series, [200], pythia_tokenizer(tokenizer_file), neox_config())
    (series / "step200" / "model.safetensors").write_bytes(b"not a safetensors file")
    plan = planning.plan_run([str(series)], None, fast_settings())
    serial = pipeline.execute(plan, tmp_path / "serial", progress=False)
    ray_run = pipeline.execute(plan, tmp_path / "ray", progress=False,
                               executor=RayExecutor(cpus_per_task=1, num_cpus=2))
    for outcome in (serial, ray_run):
        assert outcome.computed == 4
        assert {(f["step"], f["family"]) for f in outcome.failures} == {
            (200, "embedding"), (200, "weights")}
    assert stable(tmp_path / "ray") == stable(tmp_path / "serial")
    assert [r["step"] for r in stable(tmp_path / "ray")] == [0, 10, 100]
    failed = json.loads((tmp_path / "ray" / "records" / plan.hash_of("weights") / "series" /
                         "step000200.json").read_text())
    assert failed["status"] == "failed" and failed["error_type"]
    # a rerun through Ray resumes like a serial one: only the failed checkpoint is retried
    again = pipeline.execute(plan, tmp_path / "ray", progress=False,
                             executor=RayExecutor(cpus_per_task=1, num_cpus=2))
    assert (again.computed, again.skipped) == (1, 3)


def test_a_workers_share_of_cores_caps_torch_and_every_blas_pool_while_it_runs(
        tmp_path, monkeypatch):
    """run_task with num_threads: torch's threads and the BLAS / OpenMP pools of NumPy
    and SciPy (threadpoolctl) are that share while the task runs; the BLAS pools are
    given back after (torch's threads, and with them its OpenMP pool, stay the worker's)."""
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    from toposig.run import tasks

    series = make_series(tmp_path / "s", [0], None, config=neox_config(hidden=16, vocab=64))
    plan = planning.plan_run([str(series)], None, fast_settings(), ["weights"])
    seen = {}

    def spy(ckpt, todo, plan, emit):
        seen["torch"] = torch.get_num_threads()
        seen["pools"] = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}

    monkeypatch.setattr(tasks, "load_once", spy)
    before_torch = torch.get_num_threads()
    with threadpool_limits(limits=2):  # a pool larger than the share, as on a big node
        before = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
        tasks.run_task(plan, plan.checkpoints[0], ("weights",), num_threads=1)
        after = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    torch.set_num_threads(before_torch)
    assert seen["torch"] == 1
    assert seen["pools"] and set(seen["pools"].values()) == {1}, seen["pools"]
    blas = [k for k in before if k != "openmp"]
    assert blas and all(after[k] == before[k] == 2 for k in blas)
