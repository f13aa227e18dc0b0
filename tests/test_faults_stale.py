"""Faults that leave something stale or damaged behind: nothing stale is trusted silently.

- a checkpoint rewritten in place with its old size and modification time is hashed
  again, and a malformed entry of the file-hash cache is rehashed, never an error;
- SIGTERM stops a run as Ctrl-C does (the aggregates rewritten from every finished
  record), and the analysis rebuilds aggregates that a harder kill left behind;
- a damaged ``all_results.json`` or ``config.json``, an export onto a folder and a
  read-only results folder are clean errors naming the file, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROJECT, neox_config, save_checkpoint

import analyze_results
import run_experiments
from toposig.cli.run import Terminated, sigterm_as_interrupt
from toposig.files.content_hash import cache_path, content_fingerprint, file_sha256
from toposig.model.training import byte_tokenizer
from toposig.records import record_stem

SRC = PROJECT / "src"
FAST = ["--n-texts", "12", "--max-length", "24", "--no-progress"]
STEPS = (0, 10, 20)


# --- row 6: the file-hash cache ------------------------------------------------------

def test_a_rewrite_with_the_old_size_and_mtime_is_hashed_again(tmp_path):
    """Before: the cache was keyed by size and mtime only, and answered the old hash."""
    f = tmp_path / "step_000100.pt"
    f.write_bytes(b"a" * 4096)
    before = content_fingerprint(f)
    st = f.stat()
    time.sleep(0.05)  # past the file system's timestamp granularity
    f.write_bytes(b"b" * 4096)  # same size, in place (same inode)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the old modification time back
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    after = content_fingerprint(f)
    assert after != before
    assert after == content_fingerprint(f)  # and the new hash is cached from now on
    (tmp_path / "copy").mkdir()
    f2 = tmp_path / "copy" / f.name
    f2.write_bytes(b"b" * 4096)
    assert content_fingerprint(f2) == after  # the fingerprint of the new bytes


def test_a_file_replaced_by_a_rename_is_hashed_again(tmp_path):
    f = tmp_path / "w.pt"
    f.write_bytes(b"a" * 100)
    st = f.stat()
    before = content_fingerprint(f)
    other = tmp_path / "other.pt"
    other.write_bytes(b"c" * 100)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, f)  # a new inode under the old name, size and mtime
    assert content_fingerprint(f) != before


def _cache_key(f: Path) -> str:
    return str(f.resolve())


@pytest.mark.parametrize("damage", [
    "no sha256", "sha256 not a string", "sha256 not hex", "entry a list", "entry a string",
    "stamp a string", "cache a list", "cache a string", "cache not json", "cache not utf-8",
])
def test_a_malformed_cache_entry_is_rehashed_and_rewritten(tmp_path, damage):
    """Before: an entry with the right stamp and no sha256 raised KeyError on every call;
    one whose sha256 was a number gave a wrong fingerprint."""
    f = tmp_path / "w.pt"
    f.write_bytes(b"weights" * 100)
    good = content_fingerprint(f)
    cache = json.loads(cache_path().read_text())
    entry = cache[_cache_key(f)]
    bad = {"no sha256": {"stamp": entry["stamp"]},
           "sha256 not a string": {"stamp": entry["stamp"], "sha256": 5},
           "sha256 not hex": {"stamp": entry["stamp"], "sha256": "../../etc/passwd"},
           "entry a list": [entry["stamp"], entry["sha256"]],
           "entry a string": entry["sha256"],
           "stamp a string": {"stamp": "now", "sha256": entry["sha256"]}}
    if damage in bad:
        cache_path().write_text(json.dumps({**cache, _cache_key(f): bad[damage]}))
    else:
        cache_path().write_bytes({"cache a list": b"[1, 2, 3]", "cache a string": b'"x"',
                                  "cache not json": b"{not json",
                                  "cache not utf-8": b"\xff\xfe{}"}[damage])
    assert content_fingerprint(f) == good
    repaired = json.loads(cache_path().read_text())[_cache_key(f)]
    assert repaired["sha256"] == file_sha256(f)
    assert isinstance(repaired["stamp"], list) and f.stat().st_size in repaired["stamp"]


# --- a small finished study, copied by each test that damages it ----------------------

@pytest.fixture(scope="module")
def study(tmp_path_factory, wikitext_dir) -> Path:
    """A results folder of one series (steps 0, 10, 20; embedding and weights), run once."""
    root = tmp_path_factory.mktemp("stale")
    model = root / "model"
    save_checkpoint(model, neox_config(hidden=8, layers=1, heads=2, vocab=264),
                    byte_tokenizer())
    for step in STEPS:
        shutil.copytree(model, root / "run" / f"step{step}")
    out = root / "out"
    assert run_experiments.main(["--models", str(root / "run"), "--out", str(out),
                                 *FAST]) == 0
    return out


@pytest.fixture
def folder(study, tmp_path) -> Path:
    """A private copy of :func:`study` (times kept)."""
    out = tmp_path / "out"
    shutil.copytree(study, out)
    return out


def record_keys(out: Path) -> set[tuple[str, str]]:
    """(label, stem) of every finished record file under ``out/records``."""
    keys = set()
    for path in (out / "records").glob("*/*/*.json"):
        if json.loads(path.read_text()).get("status") == "ok":
            keys.add((path.parent.name, path.stem))
    return keys


def entry_keys(out: Path) -> set[tuple[str, str]]:
    entries = json.loads((out / "data" / "all_results.json").read_text())
    return {(e["model_label"], record_stem(e["step"])) for e in entries}


def analyse(out: Path, *extra: str) -> int:
    return analyze_results.main(["--results", str(out), "--no-plots", *extra])


# --- row 7: SIGTERM, and aggregates older than their records --------------------------

def test_sigterm_raises_keyboard_interrupt_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as caught, sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
    assert isinstance(caught.value, Terminated)
    assert signal.getsignal(signal.SIGTERM) == before


def test_sigterm_rewrites_the_aggregates_like_ctrl_c(tmp_path, wikitext_dir):
    """Before: SIGTERM killed the run at once, and all_results.json (written before the
    first checkpoint) listed none of the records it had finished."""
    model = tmp_path / "model"
    save_checkpoint(model, neox_config(hidden=8, layers=1, heads=2, vocab=264),
                    byte_tokenizer())
    steps = (0, 10, 20, 30, 40, 50)
    for step in steps:
        shutil.copytree(model, tmp_path / "run" / f"step{step}")
    out = tmp_path / "out"
    driver = tmp_path / "driver.py"
    driver.write_text(  # each stored family result is followed by half a second's pause
        "import sys, time\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        "import toposig.run.pipeline as pipeline\n"
        "real = pipeline._store_result\n"
        "def slow(*args, **kwargs):\n"
        "    real(*args, **kwargs)\n"
        "    time.sleep(0.5)\n"
        "pipeline._store_result = slow\n"
        "import run_experiments\n"
        "sys.exit(run_experiments.main(sys.argv[1:]))\n")
    env = dict(os.environ, PYTHONPATH=str(SRC), TOPOSIG_DATASETS_DIR=str(wikitext_dir))
    proc = subprocess.Popen([sys.executable, str(driver), "--models", str(tmp_path / "run"),
                             "--out", str(out), *FAST], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline \
            and not any((out / "records").glob("*/*/step*.json")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "interrupted: every finished checkpoint is saved" in err
    assert "Traceback" not in err
    done = record_keys(out)
    assert 0 < len(done) < len(steps)  # the signal landed mid-run
    assert entry_keys(out) == done


def test_the_analysis_rebuilds_aggregates_that_miss_records(folder, caplog):
    """A run killed before its last rewrite of the aggregates: before, the analysis read
    them as they were and left the missing checkpoint out without a word."""
    agg = folder / "data" / "all_results.json"
    entries = json.loads(agg.read_text())
    assert len(entries) == len(STEPS)
    agg.write_text(json.dumps(entries[:-1], indent=2) + "\n")
    assert analyse(folder) == 0
    assert "the aggregates were rebuilt from the records" in caplog.text
    assert json.loads(agg.read_text()) == entries
    stats = json.loads((folder / "data" / "statistics.json").read_text())
    assert stats["models"]["run"]["steps"] == list(STEPS)
    assert json.loads((folder / "data" / "run_results.json").read_text()) == entries


def test_the_analysis_rebuilds_aggregates_older_than_a_changed_record(folder, caplog):
    """A record rewritten after the aggregates (a --force run killed before its rewrite):
    the aggregate's entry is replaced by the record's."""
    config = json.loads((folder / "data" / "config.json").read_text())
    path = folder / "records" / config["settings_hash"] / "run" / "step000010.json"
    record = json.loads(path.read_text())
    record["perplexity"] = 1234.5
    path.write_text(json.dumps(record, indent=2) + "\n")
    agg = folder / "data" / "all_results.json"
    old = path.stat().st_mtime_ns - 10**9
    os.utime(agg, ns=(old, old))
    assert analyse(folder) == 0
    assert "records are newer than it" in caplog.text
    assert [e["perplexity"] for e in json.loads(agg.read_text())][1] == 1234.5


def test_a_folder_shipped_with_its_records_alone_is_read_without_a_warning(folder, caplog):
    """No aggregates at all (a folder committed or shared with its records, as
    results/seed004): they are written from the records, and that is no warning."""
    import logging

    agg = folder / "data" / "all_results.json"
    entries = json.loads(agg.read_text())
    for path in (folder / "data").glob("*_results.json"):
        path.unlink()
    with caplog.at_level(logging.INFO, logger="toposig.run.aggregates"):
        assert analyse(folder) == 0
    assert json.loads(agg.read_text()) == entries
    assert "written from the finished records" in caplog.text
    assert not [r for r in caplog.records
                if r.name == "toposig.run.aggregates" and r.levelno >= logging.WARNING]


def test_sound_aggregates_are_not_rewritten(folder, caplog):
    agg = folder / "data" / "all_results.json"
    before = agg.read_bytes(), agg.stat().st_mtime_ns
    for path in (folder / "records").rglob("*.json"):  # a copy that made records newer
        os.utime(path)
    assert analyse(folder) == 0
    assert (agg.read_bytes(), agg.stat().st_mtime_ns) == before
    assert "rebuilt" not in caplog.text


# --- row 13: damaged aggregates and study files ---------------------------------------

def assert_clean_error(capsys, path: Path) -> str:
    err = capsys.readouterr().err
    assert f"error: {path}" in err, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("content", [
    "{not json", '{"model_label": "run"}', "[1, 2]", '[{"step": 0, "status": "ok"}]',
    '[{"model_label": "run", "status": "ok"}]', '[{"model_label": 3, "step": 0, "status": "ok"}]',
    '[{"model_label": "run", "step": "ten", "status": "ok"}]', b"\xff\xfe",
])
@pytest.mark.parametrize("with_config", [True, False])
def test_a_damaged_aggregate_is_an_error_naming_it(folder, capsys, content, with_config):
    """Before: tracebacks (AttributeError, KeyError) or a JSON message without the file."""
    agg = folder / "data" / "all_results.json"
    agg.write_bytes(content if isinstance(content, bytes) else content.encode())
    if not with_config:
        (folder / "data" / "config.json").unlink()
    assert analyse(folder) == 2
    assert_clean_error(capsys, agg)


def test_an_aggregate_that_is_a_folder_is_an_error_naming_it(folder, capsys):
    agg = folder / "data" / "all_results.json"
    agg.unlink()
    agg.mkdir()
    assert analyse(folder) == 2
    assert "is a folder" in assert_clean_error(capsys, agg)


@pytest.mark.parametrize("content", [
    None, "[]", '"config"', "{broken", '{"models": ["run"]}', '{"models": {"run": 1}}',
    '{"models": {"../x": "run"}}', '{"models": {"run": "run"}, "steps": {"run": "all"}}',
    '{"models": {"run": "run"}, "settings_hash": "../../etc"}',
])
def test_a_damaged_config_is_an_error_naming_it(folder, capsys, content):
    """Before: the analysis never looked at config.json; now that it reads the study to
    check the aggregates, a damaged one (a folder, not an object, wrong types) is named."""
    config = folder / "data" / "config.json"
    config.unlink()
    if content is None:
        config.mkdir()
    else:
        config.write_text(content)
    assert analyse(folder) == 2
    assert_clean_error(capsys, config)


# --- row 14: an export onto a folder, a read-only results folder ----------------------

@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_an_export_onto_a_folder_is_refused_before_anything_is_written(folder, capsys, fmt):
    """Before: the statistics and summary were written, then a traceback."""
    target = folder / "data" / f"results_table.{fmt}"
    target.mkdir()
    (target / "keep").write_text("mine")
    assert analyse(folder, "--export", fmt) == 2
    assert "is a folder" in assert_clean_error(capsys, target)
    assert not (folder / "data" / "statistics.json").exists()
    assert not (folder / "summary.md").exists()
    assert (target / "keep").read_text() == "mine"


def test_a_read_only_results_folder_is_refused_naming_it(folder, capsys, monkeypatch):
    """Before: data/statistics.json was written, then a PermissionError traceback."""
    if os.geteuid() == 0:  # root writes anyway: make the check see what others would
        import toposig.cli.analyze as cli

        real = os.access
        monkeypatch.setattr(cli.os, "access", lambda p, mode: False if Path(p) == folder
                            else real(p, mode))
    else:
        os.chmod(folder, 0o555)
    try:
        assert analyse(folder) == 2
    finally:
        os.chmod(folder, 0o755)
    assert "is not writable" in assert_clean_error(capsys, folder)
    assert not (folder / "data" / "statistics.json").exists()


def test_a_write_refused_midway_is_an_error_naming_the_file(folder, capsys, monkeypatch):
    """A write the permission check could not foresee (root, a read-only mount, a full
    disk): before, a PermissionError traceback."""
    import toposig.analyze as stage3

    def refuse(path, data, root) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(stage3, "atomic_write_bytes", refuse)
    assert analyse(folder) == 2
    err = assert_clean_error(capsys, folder / "summary.md")
    assert "Permission denied" in err and str(folder) in err


def test_ctrl_c_in_the_analysis_is_one_line_and_leaves_whole_files(folder, capsys,
                                                                    monkeypatch):
    """Issue 36, row 17: Ctrl-C in `analyze` printed a KeyboardInterrupt traceback."""
    import toposig.analyze as stage3

    def interrupt(path, data, root) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(stage3, "atomic_write_bytes", interrupt)
    assert analyse(folder) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"interrupted: each file of {folder} is whole")
    json.loads((folder / "data" / "statistics.json").read_text())  # written whole
    assert not list(folder.rglob(".*.tmp"))  # no temporary left behind


# --- issue 36, row 5: one entry, one training --------------------------------------------

def test_an_entry_is_never_built_from_records_of_two_trainings(study, folder, tmp_path,
                                                                caplog):
    """A retrained checkpoint whose run was killed (SIGKILL) after its weights record and
    before its embedding record: before, the analysis rebuilt one entry from both, exit 0.
    Now that checkpoint is left out, named, and the next run recomputes the stale family."""
    from toposig.records import record_family
    from toposig.sources.checkpoints import Checkpoint, fingerprint

    models = study.parent / "run"  # the study's own series, put back as it was below
    kept = tmp_path / "step20-first-training"
    shutil.move(models / "step20", kept)
    try:
        save_checkpoint(models / "step20", neox_config(hidden=8, layers=1, heads=2,
                                                       vocab=264), byte_tokenizer(), seed=1)
        new = fingerprint(Checkpoint("run", "run", 20, "local", str(models / "step20")))
        (weights,) = [p for p in (folder / "records").glob("*/run/step000020.json")
                      if record_family(json.loads(p.read_text())) == "weights"]
        record = json.loads(weights.read_text())
        assert new != record["checkpoint_fingerprint"]
        weights.write_text(json.dumps({**record, "checkpoint_fingerprint": new}))  # killed
        assert analyse(folder) == 0
        assert "run step000020: its records come from 2 trainings" in caplog.text
        assert entry_keys(folder) == {("run", "step000000"), ("run", "step000010")}
        assert run_experiments.main(["--models", str(models), "--out", str(folder),
                                     *FAST]) == 0
    finally:
        shutil.rmtree(models / "step20", ignore_errors=True)
        shutil.move(kept, models / "step20")
    assert entry_keys(folder) == {("run", record_stem(s)) for s in STEPS}
    entries = json.loads((folder / "data" / "all_results.json").read_text())
    assert entries[-1]["checkpoint_fingerprint"] == new
    prints = {json.loads(p.read_text())["checkpoint_fingerprint"]
              for p in (folder / "records").glob("*/run/step000020.json")}
    assert prints == {new}


def test_a_full_disk_is_an_error_naming_the_file(folder, capsys, monkeypatch):
    """Issue 36, row 17: a full disk (ENOSPC, raised where the bytes reach the disk)
    gave an error naming no file; docs/robustness.md promises `error: <file>: <reason>`."""
    import errno

    import toposig.files.atomic as writer

    def full(fd) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer.os, "fsync", full)
    assert analyse(folder) == 2
    err = assert_clean_error(capsys, folder / "data" / "statistics.json")
    assert "No space left on device" in err
    assert not list(folder.rglob(".*.tmp"))  # no temporary left behind
