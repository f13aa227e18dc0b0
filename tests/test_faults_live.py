"""What happens when live monitoring goes wrong in a results folder: a label another
training is writing is refused before anything is removed or written (in another process
or in this one), and a resume that does not belong to the folder's study is refused
before its abandoned steps are removed."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_live import tiny_model

from toposig.families.weights import WeightsFamily
from toposig.files.locks import FolderLockedError
from toposig.live.monitor import Schedule, TopologyMonitor
from toposig.model.training import byte_tokenizer
from toposig.run.study import StudyMismatchError
from toposig.sources.corpus import wikitext_rows

pytestmark = pytest.mark.usefixtures("wikitext_dir")

SRC = Path(__file__).resolve().parents[1] / "src"
SERIES_STEPS = list(range(0, 31, 3))  # 0, 3, ..., 30: a training that went on to step 30
BUSY = "another training is writing it"


def short_texts(n: int = 8) -> list[str]:
    return [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:n]


def live_monitor(out: Path, label: str = "r", families=("weights",), **options
                 ) -> TopologyMonitor:
    """A monitor measuring every step (the options as :class:`TopologyMonitor`'s)."""
    options = {"texts": short_texts(), "schedule": Schedule(every_n_steps=1), **options}
    return TopologyMonitor(byte_tokenizer(), out, families=list(families), label=label,
                           **options)


def snapshot(folder: Path, pattern: str = "*") -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``folder`` matching ``pattern``."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob(pattern)) if p.is_file()}


def written(folder: Path) -> dict[str, bytes]:
    """:func:`snapshot` less the lock files (which name the process holding them)."""
    return {k: v for k, v in snapshot(folder).items() if not k.endswith(".lock")}


def label_records(folder: Path, label: str = "r") -> dict[str, bytes]:
    return {k: v for k, v in snapshot(folder / "records").items()
            if Path(k).parent.name == label}


def steps_of(folder: Path, label: str = "r") -> list[int]:
    entries = json.loads((folder / "data" / "all_results.json").read_text())
    return sorted(e["step"] for e in entries if e["model_label"] == label)


def record_steps(folder: Path, label: str = "r") -> list[int]:
    return sorted({int(Path(k).stem.removeprefix("step")) for k in label_records(folder, label)
                   if k.endswith(".json")})


# ------------------------------------------------ row 8: one writer per label


def test_a_second_monitor_in_this_process_is_refused_before_it_removes_anything(tmp_path):
    out, model = tmp_path / "live", tiny_model()
    first = live_monitor(out)
    for step in range(3):
        first(model, step)
    before = snapshot(out)
    second = live_monitor(out, overwrite=True)  # would remove the first's records
    with pytest.raises(FolderLockedError, match=BUSY) as refused:
        second(tiny_model(1), 0)
    assert str(out) in str(refused.value) and "'r'" in str(refused.value)
    assert "this process" in str(refused.value)
    with pytest.raises(FolderLockedError, match=BUSY):  # nor may it append to the series
        live_monitor(out).start(2)
    assert snapshot(out) == before  # byte for byte, the figure and signal included
    assert first(model, 3).entry.step == 3  # the first goes on writing
    assert steps_of(out) == [0, 1, 2, 3]


def test_a_label_held_by_another_process_is_refused_until_that_process_is_killed(tmp_path):
    out = tmp_path / "live"
    holder = textwrap.dedent(f"""
        import sys, torch
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
        from toposig.live.monitor import Schedule, TopologyMonitor
        from toposig.model.training import byte_tokenizer
        from toposig.sources.corpus import wikitext_rows
        texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:8]
        torch.manual_seed(0)
        model = GPTNeoXForCausalLM(GPTNeoXConfig(
            vocab_size=264, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=128))
        monitor = TopologyMonitor(byte_tokenizer(), {str(out)!r}, texts=texts,
                                  families=["weights"], label="r",
                                  schedule=Schedule(every_n_steps=1))
        for step in range(3):
            monitor(model, step)
        print("ready", flush=True)
        sys.stdin.read()  # training on, until killed
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        before, records_before = snapshot(out), label_records(out)
        assert record_steps(out) == [0, 1, 2]
        with pytest.raises(FolderLockedError, match=BUSY) as refused:
            live_monitor(out, overwrite=True)(tiny_model(1), 0)
        assert f"process {proc.pid}" in str(refused.value)
        assert snapshot(out) == before
        other = live_monitor(out, label="other", extend=True)  # another label: measured
        assert other(tiny_model(2), 0).entry.step == 0
        other.finish()
        assert label_records(out) == records_before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    taker = live_monitor(out, overwrite=True)  # the killed training's lock is taken over
    taker(tiny_model(3), 0)
    assert steps_of(out) == [0] and record_steps(out) == [0]
    assert steps_of(out, "other") == [0]


def test_a_finished_monitors_label_may_be_taken_and_it_no_longer_writes(tmp_path):
    out, model = tmp_path / "live", tiny_model()
    first = live_monitor(out)
    first(model, 0)
    first(model, 1)
    first.finish()
    second = live_monitor(out, overwrite=True)
    second(tiny_model(1), 0)  # starts afresh: the finished training's records go
    assert steps_of(out) == [0] and record_steps(out) == [0]
    before = snapshot(out)
    late = first(model, 2)  # a later measurement of the finished one is refused, logged
    assert late.entry is None and late.failures[0]["error_type"] == "LabelInUseError"
    assert snapshot(out) == before
    second.finish()
    third = live_monitor(out)
    third.start(1)
    del third  # a monitor no longer referenced lets go of the label too
    gc.collect()
    live_monitor(out).start(1)


# ------------------------------------- row 9: a resume is checked before it removes


@pytest.fixture(scope="module")
def trained_to_30(tmp_path_factory) -> Path:
    """A results folder with live records of ``r`` at steps 0, 3, ..., 30 (embedding and
    weights), as a training that went on to step 30 leaves them."""
    out = tmp_path_factory.mktemp("resume") / "live"
    monitor = live_monitor(out, families=("embedding", "weights"),
                           schedule=Schedule(every_n_steps=3))
    model = tiny_model()
    for step in SERIES_STEPS:
        monitor(model, step)
    monitor.finish()
    return out


@pytest.fixture
def folder(trained_to_30, tmp_path) -> Path:
    return Path(shutil.copytree(trained_to_30, tmp_path / "live"))


@pytest.mark.parametrize("other", [
    {"layers": "all"},
    {"family_settings": {"weights": WeightsFamily(max_rows=50)}},
    {"texts": 6},  # six texts, read when the test runs (a skip, not a collection error,
                   # where WikiText-2 is missing)
], ids=["layers", "weight-settings", "texts"])
def test_a_resume_with_settings_outside_the_study_is_refused_before_removing_anything(
        folder, other):
    if "texts" in other:
        other = {"texts": short_texts(other["texts"])}
    before = snapshot(folder)
    assert record_steps(folder) == SERIES_STEPS
    resumed = live_monitor(folder, **{"families": ("embedding", "weights"), **other})
    with pytest.raises(StudyMismatchError, match="settings hash"):
        resumed.start(15)
    assert snapshot(folder) == before  # steps 18..30 all there, unchanged
    with pytest.raises(StudyMismatchError, match="settings hash"):
        resumed.start(15, tiny_model())  # as the callbacks call it: with the model
    assert snapshot(folder) == before
    # the refused monitor holds no label: one with the study's settings may resume
    live_monitor(folder, families=("embedding", "weights")).start(15)


def test_a_resume_in_another_precision_is_refused_before_removing_anything(folder):
    before = written(folder)
    resumed = live_monitor(folder, families=("embedding", "weights"),
                           schedule=Schedule(every_n_steps=3))
    resumed.start(15)  # settings fit; the precision is known with the model only
    assert written(folder) == before
    with pytest.raises(StudyMismatchError, match="dtype"):
        resumed(tiny_model().to(torch.float64), 18)
    assert written(folder) == before


def test_a_resume_with_the_studys_settings_still_drops_the_abandoned_steps(folder):
    kept = {k: v for k, v in snapshot(folder / "records").items()
            if int(Path(k).stem.removeprefix("step")) <= 15}
    resumed = live_monitor(folder, families=("embedding", "weights"),
                           schedule=Schedule(every_n_steps=3))
    resumed.start(15, tiny_model())  # as the callbacks call it
    assert record_steps(folder) == [0, 3, 6, 9, 12, 15]
    assert snapshot(folder / "records") == kept
    resumed(tiny_model(), 18)
    assert steps_of(folder) == [0, 3, 6, 9, 12, 15, 18]
    config = json.loads((folder / "data" / "config.json").read_text())
    assert config["steps"]["r"] == [0, 3, 6, 9, 12, 15, 18]


def test_a_resume_without_the_model_drops_the_abandoned_steps_at_its_first_measurement(
        folder):
    resumed = live_monitor(folder, families=("embedding", "weights"),
                           schedule=Schedule(every_n_steps=3))
    resumed.start(15)
    resumed(tiny_model(), 18)
    assert record_steps(folder) == [0, 3, 6, 9, 12, 15, 18]
    assert steps_of(folder) == [0, 3, 6, 9, 12, 15, 18]
    signal_steps = [h["step"] for h in json.loads(
        (folder / "live" / "r" / "signal.json").read_text())]
    assert signal_steps == [0, 3, 6, 9, 12, 15, 18]
