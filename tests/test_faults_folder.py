"""A results folder is input: names, links and files someone else put there (issue 25).

Each test plants what a hostile or careless hand could leave in a results folder and
checks the harm does not happen: nothing written outside the folder, no model lost or
mixed into another's series, nothing stale or damaged trusted, a clear message instead
of a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from conftest import neox_config, save_checkpoint

import run_experiments
from toposig.files.locks import LOCK_NAME, FolderLockedError, UnsafeLockFileError, exclusive
from toposig.files.names import UnsafeNameError, check_label, series_labels
from toposig.records import record_problem
from toposig.run.store import remove_stale_temporaries
from toposig.run.study import Study, StudyMismatchError

QUIET = ["--signatures", "weights", "--no-progress"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """One tiny GPT-NeoX folder (hidden 8), copied to make series."""
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "m",
                           neox_config(hidden=8, layers=1, heads=2, vocab=64))


@pytest.fixture(scope="module")
def bigger(tmp_path_factory) -> Path:
    """Another model (hidden 16): a different parameter count."""
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "m",
                           neox_config(hidden=16, layers=1, heads=2, vocab=64), seed=3)


def series(root: Path, checkpoint: Path, steps=(0, 10)) -> Path:
    for s in steps:
        shutil.copytree(checkpoint, root / f"step{s}")
    return root


def run(*args: str) -> int:
    return run_experiments.main([*args, *QUIET])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def entries(out: Path) -> list[tuple[str, int]]:
    return [(e["model_label"], e["step"])
            for e in json.loads((out / "data" / "all_results.json").read_text())]


def weight_record(out: Path, label: str, step: int) -> Path:
    found = list((out / "records").glob(f"w*/{label}/step{step:06d}.json"))
    assert len(found) == 1, found
    return found[0]


# 1 ----------------------------------------------------------------- the lock file

@pytest.mark.parametrize("plant", ["symlink", "hardlink", "foreign file"])
def test_a_planted_lock_file_is_refused_and_its_target_untouched(tmp_path, plant):
    victim = tmp_path / "victim.txt"
    victim.write_text("someone's data, not to be truncated\n" * 3)
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    if plant == "symlink":
        lock.symlink_to(victim)
    elif plant == "hardlink":
        os.link(victim, lock)
    else:
        lock.write_text("a file of the user's that happens to carry the name\n" * 2)
    before = victim.read_bytes()
    with pytest.raises(UnsafeLockFileError, match=LOCK_NAME), exclusive(out):
        pass
    assert victim.read_bytes() == before
    if plant == "foreign file":
        assert lock.read_text().startswith("a file of the user's")


def test_a_symlinked_lock_stops_a_run_with_a_message(tmp_path, checkpoint, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(victim)
    assert run("--models", str(series(tmp_path / "run", checkpoint)), "--out", str(out)) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep me"


def test_the_lock_file_is_never_truncated(tmp_path):
    out = tmp_path / "out"
    with exclusive(out):
        held = (out / LOCK_NAME).read_text()
        assert held.strip() == str(os.getpid())
    with exclusive(out):  # reused as it is, not rewritten from empty
        pass
    assert (out / LOCK_NAME).stat().st_size == len(held)



def test_another_thread_waits_for_the_lock_or_is_refused(tmp_path):
    """Re-entrant in one thread, exclusive between threads: a measurement made on a
    worker thread while training goes on must not write the folder alongside the main
    thread."""
    import threading

    out = tmp_path / "out"
    inside, release, order = threading.Event(), threading.Event(), []

    def hold() -> None:
        with exclusive(out):
            order.append("held")
            inside.set()
            release.wait(10)
            order.append("released")

    worker = threading.Thread(target=hold)
    worker.start()
    assert inside.wait(10)
    with (pytest.raises(FolderLockedError, match="another thread of this process"),
          exclusive(out)):  # no wait: refused at once
        pass
    threading.Timer(0.3, release.set).start()
    with exclusive(out, wait_s=10):  # waits until the worker lets go
        order.append("main")
        with exclusive(out):  # and is re-entrant in its own thread
            pass
    worker.join(10)
    assert order == ["held", "released", "main"]


def test_a_forked_child_does_not_inherit_a_lock_another_thread_held(tmp_path):
    """A data loader forked while a measurement's thread holds the folder: the child
    does not count itself a holder (it would write without the file lock)."""
    import threading

    out = tmp_path / "out"
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with exclusive(out):
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    assert inside.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: only this thread; the worker's lock must not let it in
        try:
            with exclusive(out):
                os._exit(1)
        except FolderLockedError:
            os._exit(0)
        os._exit(2)
    _, status = os.waitpid(pid, 0)
    release.set()
    worker.join(10)
    assert os.waitstatus_to_exitcode(status) == 0

# 2, 3 --------------------------------------------- names read back from the folder

def test_a_record_naming_a_path_as_its_model_writes_nothing_outside(tmp_path, checkpoint):
    """A record (of a step the next run does not cover) whose model_label climbs out of
    the folder is ignored, with a warning, and its aggregates stay inside."""
    out = tmp_path / "deep" / "er" / "out"
    models = series(tmp_path / "run", checkpoint)
    assert run("--models", str(models), "--out", str(out)) == 0
    path = weight_record(out, "run", 0)
    rec = json.loads(path.read_text())
    rec["model_label"] = "../../victim/data/all"
    path.write_text(json.dumps(rec))
    before = {p for p in tmp_path.rglob("*")}
    assert run("--models", str(models), "--steps", "10", "--out", str(out)) == 0
    new = {p for p in tmp_path.rglob("*")} - before
    assert all(out in p.parents for p in new), new
    assert not (tmp_path / "deep" / "victim").exists()
    assert entries(out) == [("run", 10)]  # the edited record is not trusted


@pytest.mark.parametrize("edit", [
    {"models": {"../../../../evil": "x"}},
    {"models": {"all": "x"}},
    {"weights_hash": "../../../elsewhere"},
    {"steps": {"run": ["ten"]}},
    {"signatures": "weights"},
])
def test_a_config_json_with_unsafe_names_or_types_is_refused(tmp_path, checkpoint, capsys,
                                                            edit):
    out = tmp_path / "a" / "b" / "c" / "out"
    models = series(tmp_path / "run", checkpoint)
    assert run("--models", str(models), "--out", str(out)) == 0
    config_path = out / "data" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(edit)
    if "models" in edit:
        config["models"].update({"run": str(models)})
    config_path.write_text(json.dumps(config))
    before = snapshot(tmp_path)
    assert run("--models", str(models), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert str(config_path) in err and "Traceback" not in err
    assert snapshot(tmp_path) == before
    with pytest.raises(StudyMismatchError, match="edited or damaged"):
        Study.load(out)


@pytest.mark.parametrize("what", ["folder", "symlink"])
def test_a_config_json_that_is_not_a_file_is_refused(tmp_path, checkpoint, capsys, what):
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    target = tmp_path / "elsewhere.json"
    target.write_text('{"models": {}}')
    if what == "folder":
        (out / "data" / "config.json").mkdir()
    else:
        (out / "data" / "config.json").symlink_to(target)
    assert run("--models", str(series(tmp_path / "run", checkpoint)), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "config.json is not a regular file" in err and "Traceback" not in err
    assert target.read_text() == '{"models": {}}'


# 4 -------------------------------------------------------------- reserved labels

def test_a_model_folder_named_all_does_not_overwrite_the_aggregate(tmp_path, checkpoint):
    a = series(tmp_path / "runs" / "all", checkpoint)
    b = series(tmp_path / "runs" / "other", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(a), str(b), "--out", str(out)) == 0
    assert sorted({label for label, _ in entries(out)}) == ["other", "runs-all"]
    assert len(entries(out)) == 4
    assert json.loads((out / "data" / "runs-all_results.json").read_text())


def test_reserved_labels_are_refused_as_names():
    for label in ("all", "ALL", "All"):
        with pytest.raises(UnsafeNameError, match="reserved"):
            check_label(label)
    assert check_label("all-models") == "all-models"
    assert series_labels(["x/all"], [True], [False]) == ["x-all"]
    with pytest.raises(UnsafeNameError, match="reserved"):
        series_labels(["all"], [True], [False])


# 5 ---------------------------------------------------------------- series identity

def test_another_model_at_a_measured_path_is_refused_before_it_is_written(
        tmp_path, checkpoint, bigger, capsys):
    models = series(tmp_path / "run", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(models), "--out", str(out)) == 0
    shutil.copytree(bigger, models / "step20")  # a different model, new steps
    shutil.copytree(bigger, models / "step30")
    before = snapshot(out)
    assert run("--models", str(models), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "num_parameters" in err and "another model" in err
    assert not list((out / "records").glob("*/run/step000020.json"))
    assert not list((out / "records").glob("*/run/step000030.json"))
    assert {k: v for k, v in snapshot(out).items() if k.startswith("records")} == {
        k: v for k, v in before.items() if k.startswith("records")}
    assert entries(out) == [("run", 0), ("run", 10)]


# 10, 13 --------------------------------------------- damaged and copied records

@pytest.mark.parametrize("damage", [
    {"features": "not a mapping"},
    {"features": {"np_mean": "0.5"}},
    {"step": "ten"},
    {"status": 1},
    {"num_parameters": [1]},
    {"family": "spectra"},
    {"arrays_file": "../../outside.npz"},
])
def test_a_record_with_wrong_types_is_named_and_recomputed(tmp_path, checkpoint, caplog,
                                                           damage):
    models = series(tmp_path / "run", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(models), "--out", str(out)) == 0
    path = weight_record(out, "run", 10)
    good = json.loads(path.read_text())
    path.write_text(json.dumps({**good, **damage}))
    with caplog.at_level(logging.WARNING):
        assert run("--models", str(models), "--out", str(out)) == 0
    assert str(path) in caplog.text
    again = json.loads(path.read_text())
    assert again["features"] == good["features"]  # recomputed, the same numbers
    assert entries(out) == [("run", 0), ("run", 10)]


def test_record_problem_accepts_what_the_pipeline_writes(tmp_path, checkpoint):
    models = series(tmp_path / "run", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(models), "--out", str(out)) == 0
    path = weight_record(out, "run", 0)
    rec = json.loads(path.read_text())
    arrays = str(path.with_suffix(".npz").relative_to(out))
    assert record_problem(rec, family="weights", label="run", stem="step000000",
                          arrays_file=arrays) is None
    assert "not its folder's" in record_problem(rec, label="other")
    assert "a copy" in record_problem(rec, stem="step000010")
    assert "weights record" in record_problem(rec, family="embedding")


def test_a_copied_record_gives_no_duplicate_entry(tmp_path, checkpoint):
    models = series(tmp_path / "run", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(models), "--out", str(out)) == 0
    path = weight_record(out, "run", 0)
    shutil.copy(path, path.with_name("step000000 copy.json"))
    shutil.copy(path, path.with_name("step000099.json"))  # claims step 0 under another name
    assert run("--models", str(models), "--steps", "10", "--out", str(out)) == 0
    assert entries(out) == [("run", 0), ("run", 10)]


def test_a_folder_where_a_record_belongs_fails_that_checkpoint_only(tmp_path, checkpoint,
                                                                    capsys):
    models = series(tmp_path / "run", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(models), "--steps", "0", "--out", str(out)) == 0
    blocker = weight_record(out, "run", 0).with_name("step000010.json")
    blocker.mkdir()
    (blocker / "mine.txt").write_text("the user's")
    assert run("--models", str(models), "--out", str(out)) == 1  # a failure, not a crash
    assert "is a folder where the record" in capsys.readouterr().out
    assert (blocker / "mine.txt").read_text() == "the user's"
    assert entries(out) == [("run", 0)]


# 11 ---------------------------------------------------------- cleanup and links

def test_cleanup_never_follows_a_linked_records_folder(tmp_path):
    out = tmp_path / "out"
    elsewhere = tmp_path / "someone" / "files"
    elsewhere.mkdir(parents=True)
    theirs = elsewhere / ".notes.json.abcd1234.tmp"
    theirs.write_text("not toposig's")
    (out / "records" / "w123").mkdir(parents=True)
    (out / "records" / "w123" / "linked").symlink_to(elsewhere)
    (out / "records" / "linkedhash").symlink_to(elsewhere.parent)
    ours = out / "records" / "w123" / "own"
    ours.mkdir()
    stray = ours / ".step000000.json.k2j3h4g5.tmp"
    stray.write_text("left by a kill")
    user = ours / "notes.tmp"
    user.write_text("the user's")
    removed = remove_stale_temporaries(out)
    assert removed == [stray]
    assert theirs.read_text() == "not toposig's" and user.read_text() == "the user's"


def test_a_linked_model_folder_inside_the_results_is_not_written_through(tmp_path,
                                                                          checkpoint, capsys):
    models = series(tmp_path / "run", checkpoint)
    out = tmp_path / "out"
    assert run("--models", str(models), "--steps", "0", "--out", str(out)) == 0
    folder = weight_record(out, "run", 0).parent
    elsewhere = tmp_path / "elsewhere"
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere)
    before = snapshot(elsewhere)
    code = run("--models", str(models), "--out", str(out))
    assert code == 1
    assert "is a symbolic link inside" in capsys.readouterr().out
    assert snapshot(elsewhere) == before


# 14 ------------------------------------------------------- a folder that cannot be one

@pytest.mark.parametrize("where", ["afile", "afile/sub"])
def test_an_out_that_is_a_file_is_a_clear_error(tmp_path, checkpoint, capsys, where):
    (tmp_path / "afile").write_text("the user's")
    code = run("--models", str(series(tmp_path / "run", checkpoint)), "--out",
               str(tmp_path / where))
    assert code == 2
    err = capsys.readouterr().err
    assert "a file is in its place" in err and "Traceback" not in err
    assert (tmp_path / "afile").read_text() == "the user's"


def test_a_folder_that_cannot_be_written_is_a_clear_error(tmp_path, checkpoint, capsys,
                                                          monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    real_open = os.open

    def read_only(path, flags, *args):
        if str(path).endswith(LOCK_NAME):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)  # as chmod 0o555 does (root ignores it)
    assert run("--models", str(series(tmp_path / "run", checkpoint)), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "cannot write in" in err and "Traceback" not in err


def test_a_full_disk_stops_the_run_naming_the_file(tmp_path, checkpoint, capsys,
                                                   monkeypatch):
    """Issue 36, row 17: a full disk gave an error naming no file (here, a traceback)."""
    import errno

    import toposig.files.atomic as writer

    def full(fd) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer.os, "fsync", full)
    out = tmp_path / "out"
    assert run("--models", str(series(tmp_path / "run", checkpoint)), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}/") and ": No space left on device" in err
    assert "Traceback" not in err
