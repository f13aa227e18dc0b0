"""Faults and hostile input: nothing lost, nothing overwritten, nothing deleted.

One test (or a few) per case of the fault-injection battery: path-like names, colliding
labels, a kill during training, damaged records and arrays, two runs at once, stray
temporaries, options that are not checked before work, messages that do not name the
culprit; and a property test that kills a small run (training, signatures, analysis) at
random points and checks that finishing it gives what an uninterrupted run gives.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import PROJECT, neox_config, save_checkpoint

import analyze_results
import extract_embeddings
import run_experiments
import train_suite
from toposig.analyze import analyze
from toposig.files.locks import exclusive
from toposig.model.training import byte_tokenizer

SRC = PROJECT / "src"
FAST = ["--n-texts", "12", "--max-length", "24", "--no-progress"]
MICRO = {"name": "micro", "models": [{"name": "m8", "hidden": 8, "layers": 1, "heads": 2},
                                     {"name": "m16", "hidden": 16, "layers": 1, "heads": 2}],
         "steps": 40, "checkpoint_every": 10, "context": 32, "batch_size": 8, "warmup": 5,
         "eval_batches": 2}


def env_for(datasets: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(SRC), TOPOSIG_DATASETS_DIR=str(datasets))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """One tiny GPT-NeoX model folder with the byte tokenizer."""
    folder = tmp_path_factory.mktemp("model") / "m"
    save_checkpoint(folder, neox_config(hidden=8, layers=1, heads=2, vocab=264), byte_tokenizer())
    return folder


def series(root: Path, model_folder: Path, steps=(0, 10)) -> Path:
    for s in steps:
        shutil.copytree(model_folder, root / f"step{s}")
    return root


# 1 ------------------------------------------------------------------ path-like names

@pytest.mark.parametrize("suite, model", [("..", "m"), (".", "m"), ("ok", ".."),
                                          ("ok", "a/b"), ("ok", ".hidden")])
def test_path_like_preset_names_are_refused_and_nothing_outside_is_touched(
        tmp_path, suite, model, capsys, wikitext_dir):
    parent = tmp_path / "parent"
    (parent / "runs").mkdir(parents=True)
    (parent / ".keep-me").write_text("a file beside the suite folder")
    (parent / ".hidden-dir").mkdir()
    preset = tmp_path / "bad.json"
    preset.write_text(json.dumps({**MICRO, "name": suite, "models": [
        {"name": model, "hidden": 8, "layers": 1, "heads": 2}]}))
    assert train_suite.main(["--preset", str(preset), "--suite-dir",
                             str(parent / "runs")]) == 2
    assert "cannot be a folder name" in capsys.readouterr().err
    assert run_experiments.main(["--preset", str(preset), "--suite-dir", str(parent / "runs"),
                                 "--out", str(tmp_path / "out")]) == 2
    assert (parent / ".keep-me").is_file() and (parent / ".hidden-dir").is_dir()
    assert list((parent / "runs").iterdir()) == []


# 2 ---------------------------------------------------------------- colliding labels

def test_labels_are_unique_and_never_leave_their_folder(tmp_path, model_folder, wikitext_dir,
                                                        capsys):
    a = series(tmp_path / "a" / "series", model_folder)
    b = series(tmp_path / "b" / "series", model_folder)
    c = series(tmp_path / "c" / "series-2", model_folder)
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(a), str(b), str(c), "--out", str(out),
                                 "--signatures", "weights", *FAST]) == 0
    recs = json.loads((out / "data" / "all_results.json").read_text())
    labels = sorted({r["model_label"] for r in recs})
    assert labels == ["a-series", "b-series", "series-2"]
    w_dir = next((out / "records").iterdir())
    assert sorted(p.name for p in w_dir.iterdir()) == labels
    # a path ending in '..' is the folder it resolves to, not a label '..'
    dotted = str(c / "step0" / "..")
    assert run_experiments.main(["--models", dotted, "--out", str(tmp_path / "out2"),
                                 "--signatures", "weights", *FAST]) == 0
    recs = json.loads((tmp_path / "out2" / "data" / "all_results.json").read_text())
    assert {r["model_label"] for r in recs} == {"series-2"}
    (w2,) = (tmp_path / "out2" / "records").iterdir()
    assert [p.name for p in w2.iterdir()] == ["series-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c", "out", "out2"]
    # the same model twice is refused, naming both
    assert run_experiments.main(["--models", str(a), str(a / "step0" / ".."), "--out",
                                 str(tmp_path / "out3"), *FAST]) == 2
    assert "are the same model" in capsys.readouterr().err


# 3 ---------------------------------------------------------- a kill during training

def kill_when(proc: subprocess.Popen, ready, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and not ready():
        time.sleep(0.02)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_killed_training_resumes_with_a_whole_log(tmp_path, wikitext_dir):
    preset = tmp_path / "micro.json"
    preset.write_text(json.dumps({**MICRO, "models": MICRO["models"][:1]}))
    script = [sys.executable, str(SRC / "train_suite.py"), "--preset", str(preset),
              "--no-progress", "--suite-dir"]
    env = env_for(wikitext_dir)
    subprocess.run([*script, str(tmp_path / "straight")], env=env, check=True,
                   capture_output=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*script, str(killed)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    kill_when(proc, lambda: (killed / "micro" / "m8" / "step20").is_dir())
    subprocess.run([*script, str(killed)], env=env, check=True, capture_output=True)
    log = "micro/m8/train_log.jsonl"
    assert (killed / log).read_text() == (tmp_path / "straight" / log).read_text()
    steps = [json.loads(line)["step"] for line in (killed / log).read_text().splitlines()]
    assert steps == list(range(1, 41))


def test_a_torn_last_log_line_is_dropped_on_resume(tmp_path):
    from toposig.model.training import _truncate_log

    log = tmp_path / "train_log.jsonl"
    log.write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "loss": 4.9}\n{"step": 3, "lo')
    _truncate_log(log, 2, root=log.parent)
    assert log.read_text() == '{"step": 1, "loss": 5.0}\n{"step": 2, "loss": 4.9}\n'


def test_the_trainer_cleans_only_its_own_temporaries(tmp_path):
    from toposig.model.training import STATE_FILE, remove_partial_writes

    (tmp_path / ".step10.abc123").mkdir()
    (tmp_path / f".{STATE_FILE}.xyz").write_text("partial")
    (tmp_path / ".done.json.q1.tmp").write_text("partial")
    (tmp_path / ".gitkeep").write_text("")
    (tmp_path / ".notes").mkdir()
    remove_partial_writes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gitkeep", ".notes"]


# 4 ------------------------------------------------------- damaged records and arrays

def test_damaged_arrays_and_records_are_recomputed_with_a_warning(tmp_path, model_folder,
                                                                 wikitext_dir, caplog):
    run = series(tmp_path / "run", model_folder, steps=(0, 10, 20))
    out = tmp_path / "out"
    args = ["--models", str(run), "--out", str(out), *FAST]
    assert run_experiments.main(args) == 0
    config = json.loads((out / "data" / "config.json").read_text())
    emb = out / "records" / config["settings_hash"] / "run"
    npz = emb / "step000000.npz"
    good_npz = npz.read_bytes()
    npz.write_bytes(good_npz[: len(good_npz) // 2])  # truncated
    (emb / "step000010.npz").write_bytes(b"garbage, not a zip archive")
    (emb / "step000020.json").write_text('"hello"')  # valid JSON, not an object
    with pytest.raises(Exception, match="step000000.npz.*rerun run_experiments.py"):
        analyze(out, plots=False)
    caplog.clear()
    assert run_experiments.main(args) == 0
    text = caplog.text
    assert "step000000.npz: not a readable .npz archive" in text
    assert "step000010.npz: not a readable .npz archive" in text
    assert "step000020.json: it holds a str, not a JSON object" in text
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["last_run"]["n_computed"] == 3
    for name in ("step000000.npz", "step000010.npz"):
        with zipfile.ZipFile(emb / name) as z:
            assert z.testzip() is None
    assert analyze_results.main(["--results", str(out), "--no-plots"]) == 0


# 5 ------------------------------------------------------------------ two runs at once

def test_a_second_run_on_a_busy_folder_is_refused_naming_the_holder(tmp_path, model_folder,
                                                                   wikitext_dir):
    run = series(tmp_path / "run", model_folder)
    out = tmp_path / "out"
    env = env_for(wikitext_dir)
    cmd = [sys.executable, str(SRC / "run_experiments.py"), "--models", str(run), "--out",
           str(out), *FAST]
    with exclusive(out, "results folder"):
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2
        assert f"in use by another toposig run (process {os.getpid()})" in res.stderr
        analysis = subprocess.run([sys.executable, str(SRC / "analyze_results.py"),
                                   "--results", str(out)], env=env, capture_output=True,
                                  text=True, timeout=120)
        assert analysis.returncode == 2 and "in use by another toposig run" in analysis.stderr
    assert not (out / "data").exists()  # the refused runs wrote nothing
    assert subprocess.run(cmd, env=env, capture_output=True, timeout=120).returncode == 0


def test_a_second_training_into_a_busy_suite_folder_is_refused(tmp_path, wikitext_dir):
    preset = tmp_path / "micro.json"
    preset.write_text(json.dumps(MICRO))
    with exclusive(tmp_path / "runs" / "micro", "suite folder"):
        res = subprocess.run([sys.executable, str(SRC / "train_suite.py"), "--preset",
                              str(preset), "--suite-dir", str(tmp_path / "runs")],
                             env=env_for(wikitext_dir), capture_output=True, text=True,
                             timeout=120)
    assert res.returncode == 2 and "suite folder" in res.stderr and "in use" in res.stderr
    assert not (tmp_path / "runs" / "micro" / "m8").exists()


# 6 ------------------------------------------------------------ stray temporaries

def test_stray_temporaries_are_cleaned_at_start_and_nothing_else(tmp_path, model_folder,
                                                                wikitext_dir):
    run = series(tmp_path / "run", model_folder)
    out = tmp_path / "out"
    args = ["--models", str(run), "--out", str(out), *FAST]
    assert run_experiments.main(args) == 0
    h = json.loads((out / "data" / "config.json").read_text())["settings_hash"]
    strays = [out / "data" / ".all_results.json.k3j2.tmp",
              out / "records" / h / "run" / ".step000000.json.x9.tmp",
              out / "plots" / ".summary_figure.png.a1.tmp"]
    keep = [out / "data" / "my-notes.tmp", out / ".hidden", out / "records" / h / "run" / "x"]
    for p in strays + keep:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("left by a kill" if p in strays else "the user's")
    assert run_experiments.main(args) == 0
    assert not any(p.exists() for p in strays)
    assert all(p.read_text() == "the user's" for p in keep)


def test_a_figure_that_fails_midway_leaves_the_old_one_whole(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from toposig.report.style import save_figure

    target = tmp_path / "plots" / "f.png"
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    save_figure(fig, target)
    before = target.read_bytes()

    def broken(self, f, **kw):
        f.write(b"\x89PNG half an image")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken)
    fig, _ = plt.subplots()
    with pytest.raises(OSError, match="disk full"):
        save_figure(fig, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.png"]


# 8 ------------------------------------------------- options checked before any work

@pytest.mark.parametrize("extra, message", [
    (["--seed", "-1"], "--seed must be an integer from 0"),
    (["--seed", "99999999999"], "--seed must be an integer from 0"),
    (["--signatures", "landscape", "--landscape-span", "inf"], "--landscape-span must be a "
     "positive finite number"),
    (["--executor", "ray", "--gpus-per-task", "nan"], "--gpus-per-task must be a number"),
    (["--executor", "ray", "--cpus-per-task", "inf"], "--cpus-per-task must be a number"),
    (["--executor", "ray", "--ray-address", "127.0.0.1:9"], "--ray-address '127.0.0.1:9': "
     "nothing answers"),
    (["--revision-pattern", "(a)(b)"], "exactly one capturing group"),
])
def test_bad_options_fail_before_any_work(tmp_path, model_folder, wikitext_dir, extra,
                                          message, capsys):
    pytest.importorskip("ray") if "ray" in extra else None
    run = series(tmp_path / "run", model_folder)
    out = tmp_path / "out"
    t0 = time.perf_counter()
    assert run_experiments.main(["--models", str(run), "--out", str(out), *FAST,
                                 *extra]) == 2
    assert time.perf_counter() - t0 < 15
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("field, value, message", [
    ("steps", "ten", "steps must be an integer, got 'ten'"),
    ("lr", None, "lr must be a finite number"),
    ("context", 3.5, "context must be an integer"),
    ("batch_size", True, "batch_size must be an integer"),
])
def test_bad_preset_values_fail_before_any_work(tmp_path, field, value, message, capsys,
                                                wikitext_dir):
    preset = tmp_path / "bad.json"
    preset.write_text(json.dumps({**MICRO, field: value}))
    assert train_suite.main(["--preset", str(preset), "--suite-dir",
                             str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# 9 ------------------------------------------------- messages that name the culprit

def test_messages_name_the_file_and_the_option(tmp_path, model_folder, capsys, wikitext_dir):
    run = series(tmp_path / "run", model_folder)
    binary = tmp_path / "texts.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    base = ["--models", str(run), "--out", str(tmp_path / "out"), *FAST]
    assert run_experiments.main([*base, "--texts", str(binary)]) == 2
    err = capsys.readouterr().err
    assert f"--texts {str(binary)!r} is not UTF-8 text" in err
    assert run_experiments.main([*base, "--texts", str(tmp_path)]) == 2
    assert "is a folder; it takes a plain-text file" in capsys.readouterr().err
    bad_preset = tmp_path / "preset.json"
    bad_preset.write_bytes(b"\xff\xfe\x00garbage")
    assert train_suite.main(["--preset", str(bad_preset)]) == 2
    assert f"--preset {str(bad_preset)!r} is not a UTF-8 text file" in capsys.readouterr().err
    pt = tmp_path / "x.pt"
    pt.write_bytes(os.urandom(512))
    assert extract_embeddings.main(["--models", str(pt)]) == 2
    assert "plain state-dict files" in capsys.readouterr().err


def test_a_garbage_checkpoint_file_is_a_failure_that_says_damaged(tmp_path, wikitext_dir):
    import torch

    (tmp_path / "run").mkdir()
    torch.save({"layer.weight": torch.randn(4, 4)}, tmp_path / "run" / "step_1.pt")
    (tmp_path / "run" / "step_2.pt").write_bytes(os.urandom(512))
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tmp_path / "run"), "--out", str(out),
                                 "--no-progress"]) == 1
    config = json.loads((out / "data" / "config.json").read_text())
    (failure,) = config["failures"]
    assert failure["step"] == 2 and "is damaged or not a PyTorch checkpoint" in failure["error"]


# --------------------------------------------- property: killed anywhere, finished same

def snapshot(root: Path) -> dict:
    """What a run under ``root`` leaves, less what legitimately differs between two runs
    (timings, dates, the run's own folder in paths)."""
    suite_dir, out = root / "runs", root / "out"
    volatile = {"timings_s", "finished_at", "last_run", "checkpoint_fingerprint",
                "records_sha256"}  # a digest of records that hold the volatile fields

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if k not in volatile}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    snap: dict = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file() or p.name == ".toposig.lock":
            continue
        rel = str(p.relative_to(out))
        if p.suffix == ".json":
            snap[rel] = clean(json.loads(p.read_text().replace(str(root), "<run>")))
        elif p.suffix == ".npz":
            with np.load(p) as z:
                snap[rel] = {k: z[k].tobytes() for k in z.files}
        elif p.suffix == ".md":
            snap[rel] = [ln.replace(str(root), "<run>") for ln in p.read_text().splitlines()
                         if "records SHA-256" not in ln]
        else:
            snap[rel] = p.read_bytes()
    for log in sorted(suite_dir.rglob("train_log.jsonl")):
        snap[str(log.relative_to(suite_dir.parent))] = log.read_text()
    snap.pop("data/config.json", None)  # run facts: computed/skipped counts, times
    return snap


def test_a_run_killed_at_random_points_finishes_as_an_uninterrupted_one(tmp_path, wikitext_dir):
    preset = tmp_path / "micro.json"
    preset.write_text(json.dumps(MICRO))
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        "import analyze_results, run_experiments\n"
        "suite, out = sys.argv[1], sys.argv[2]\n"
        f"rc = run_experiments.main(['--preset', {str(preset)!r}, '--suite-dir', suite,\n"
        "                            '--out', out, '--n-texts', '20', '--max-length', '32',\n"
        "                            '--no-progress'])\n"
        "sys.exit(rc or analyze_results.main(['--results', out, '--design-runs', '10']))\n")
    env = env_for(wikitext_dir)

    kills = []

    def run(name: str, kill_after: float | None = None) -> None:
        cmd = [sys.executable, str(driver), str(tmp_path / name / "runs"),
               str(tmp_path / name / "out")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if kill_after is None:
            assert proc.wait(timeout=300) == 0
            return
        deadline = time.perf_counter() + kill_after
        while proc.poll() is None and time.perf_counter() < deadline:
            time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills.append(kill_after)
        proc.wait()

    t0 = time.perf_counter()
    run("straight")
    full = time.perf_counter() - t0
    rng = random.Random(13)
    # training .. analysis; each killed run resumes with less left to do, so the kills
    # come within the first 60% of an uninterrupted run's time (on a loaded machine a
    # later kill often came after the resumed run had finished)
    for t in sorted(rng.uniform(1.0, 0.6 * full) for _ in range(3)):
        run("killed", kill_after=t)
    run("killed")
    assert len(kills) >= 2, kills  # the kills did land mid-run
    straight, killed = snapshot(tmp_path / "straight"), snapshot(tmp_path / "killed")
    assert sorted(killed) == sorted(straight)
    for key in straight:
        assert killed[key] == straight[key], key


def test_the_download_script_explains_itself_without_downloading():
    res = subprocess.run([sys.executable, str(PROJECT / "datasets" / "download_wikitext.py"),
                          "--help"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1"))
    assert res.returncode == 0 and "usage:" in res.stdout
    assert "wiki.{train,valid,test}.raw" in res.stdout


def test_a_linked_model_folder_in_a_suite_is_refused_with_one_line(tmp_path, capsys,
                                                                   wikitext_dir):
    """The one writer refuses a model folder of a suite that is a link to elsewhere; a
    review found the refusal escaping `train` as a traceback."""
    preset = tmp_path / "micro.json"
    preset.write_text(json.dumps(MICRO))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "runs" / "micro").mkdir(parents=True)
    (tmp_path / "runs" / "micro" / "m8").symlink_to(outside)
    assert train_suite.main(["--preset", str(preset), "--suite-dir",
                             str(tmp_path / "runs"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "m8 is a symbolic link inside" in err
    assert list(outside.iterdir()) == []
