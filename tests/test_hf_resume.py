"""A transformers Trainer resumed from a checkpoint (``trainer.train(resume_from_checkpoint=
...)``) goes on with the TopologyCallback's state: the checkpoint's trainer_state.json
keeps it (``stateful_callbacks``), and the resumed training writes the same live series
(the same label), measures no step twice and loses none, and remembers a stop on the
signal. The documentation of this behaviour is docs/training.md."""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from pathlib import Path

import pytest
from test_callbacks_act import REASON, force_signal
from test_live import byte_blocks, tiny_model

from toposig.model.training import byte_tokenizer

pytestmark = pytest.mark.usefixtures("wikitext_dir")

STATE_KEY = "TopologyCallback"


def fit(run: Path, live: Path, *, resume: Path | None = None, max_steps: int = 6,
        save_steps: int = 3, restore: bool = False, **callback):
    """A tiny Trainer writing checkpoints to ``run`` and live records to ``live``,
    measuring every 2 steps and at saves (weights only); resumed from ``resume``."""
    from transformers import Trainer, TrainingArguments

    from toposig.integrations import TopologyCallback

    args = TrainingArguments(output_dir=str(run), max_steps=max_steps,
                             per_device_train_batch_size=4, save_steps=save_steps,
                             logging_steps=1, use_cpu=True, disable_tqdm=True, report_to=[],
                             seed=0, restore_callback_states_from_checkpoint=restore)
    trainer = Trainer(model=tiny_model(), args=args, processing_class=byte_tokenizer(),
                      train_dataset=[{"input_ids": b, "labels": b}
                                     for b in byte_blocks(20_000)[:64]])
    options = {"every_n_steps": 2, **callback}
    cb = TopologyCallback(out=live, families=["weights"], **options).attach(trainer)
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    return trainer, cb


def saved_state(checkpoint: Path) -> dict:
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return state["stateful_callbacks"][STATE_KEY]


def entries(live: Path) -> dict[int, dict]:
    data = json.loads((live / "data" / "all_results.json").read_text())
    return {e["step"]: e for e in data}


def signal_steps(live: Path, label: str) -> list[int]:
    return [h["step"] for h in json.loads((live / "live" / label / "signal.json").read_text())]


def record_steps(live: Path, label: str) -> list[int]:
    return sorted({int(p.stem.removeprefix("step"))
                   for p in (live / "records").glob(f"*/{label}/step*.json")})


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A training to step 6 (checkpoints at 3 and 6) measured at 0, 2, 3, 4, 6."""
    root = tmp_path_factory.mktemp("hf-resume")
    trainer, cb = fit(root / "run", root / "live")
    assert sorted(cb.monitor.measured) == [0, 2, 3, 4, 6]
    return root


@pytest.fixture
def copy(trained, tmp_path) -> Path:
    """The trained folders, to be resumed (the checkpoints and the live records)."""
    for name in ("run", "live"):
        shutil.copytree(trained / name, tmp_path / name)
    return tmp_path


def test_the_checkpoint_keeps_the_callbacks_state(trained):
    saved = saved_state(trained / "run" / "checkpoint-3")
    # written before step 3 is measured (the save comes first): step 3 is pending
    assert saved["attributes"] == {"checkpoint_state": {
        "label": "run", "measured": [0, 2], "pending": 3, "stopped_at": None,
        "stop_reason": None}}
    assert saved["args"]["label"] == "run" and saved["args"]["out"] == str(trained / "live")
    assert saved["args"]["every_n_steps"] == 2 and saved["args"]["families"] == ["weights"]
    last = saved_state(trained / "run" / "checkpoint-6")["attributes"]["checkpoint_state"]
    assert last["measured"] == [0, 2, 3, 4] and last["pending"] == 6


def test_a_resumed_training_goes_on_with_the_same_series(copy):
    before = entries(copy / "live")
    # another output_dir, whose name would be another label: the checkpoint's is kept
    trainer, cb = fit(copy / "resumed", copy / "live", resume=copy / "run" / "checkpoint-3")
    assert trainer.state.global_step == 6
    assert cb.monitor.label == "run" and cb.checkpoint_state["measured"] == [0, 2]
    assert sorted(cb.monitor.measured) == [0, 2, 3, 4, 6]
    assert [r.step for r in cb.monitor.results] == [4, 6]  # nothing measured twice
    after = entries(copy / "live")
    assert sorted(after) == [0, 2, 3, 4, 6]
    assert {e["model_label"] for e in after.values()} == {"run"}
    assert record_steps(copy / "live", "run") == [0, 2, 3, 4, 6]
    assert record_steps(copy / "live", "resumed") == []
    assert signal_steps(copy / "live", "run") == [0, 2, 3, 4, 6]
    config = json.loads((copy / "live" / "data" / "config.json").read_text())
    assert config["steps"] == {"run": [0, 2, 3, 4, 6]}
    for step in (0, 2, 3):  # kept as they were
        assert after[step]["features"] == before[step]["features"]
    logged = [h["step"] for h in trainer.state.log_history
              if "topology/np_mean" in h and h["step"] > 3]
    assert logged == [4, 6]
    # and the next checkpoint carries the state on
    saved = saved_state(copy / "resumed" / "checkpoint-6")["attributes"]["checkpoint_state"]
    assert saved["label"] == "run" and saved["measured"] == [0, 2, 3, 4]


def test_a_step_due_at_the_checkpoint_but_never_written_is_measured_on_resuming(copy):
    # killed between writing checkpoint-3 and measuring step 3
    for path in (copy / "live" / "records").glob("*/run/step000003.*"):
        path.unlink()
    trainer, cb = fit(copy / "run", copy / "live", resume=copy / "run" / "checkpoint-3")
    assert [r.step for r in cb.monitor.results] == [3, 4, 6]
    assert sorted(cb.monitor.measured) == [0, 2, 3, 4, 6]
    assert record_steps(copy / "live", "run") == [0, 2, 3, 4, 6]
    assert sorted(entries(copy / "live")) == [0, 2, 3, 4, 6]


def test_a_checkpoint_without_the_callbacks_state_is_resumed_as_before(copy):
    path = copy / "run" / "checkpoint-3" / "trainer_state.json"
    state = json.loads(path.read_text())
    del state["stateful_callbacks"][STATE_KEY]  # written without the callback
    path.write_text(json.dumps(state))
    trainer, cb = fit(copy / "run", copy / "live", resume=copy / "run" / "checkpoint-3")
    assert trainer.state.global_step == 6  # the save at step 6 finds its entry
    assert cb.checkpoint_state is None
    assert [r.step for r in cb.monitor.results] == [4, 6]
    assert record_steps(copy / "live", "run") == [0, 2, 3, 4, 6]
    assert STATE_KEY in json.loads(
        (copy / "run" / "checkpoint-6" / "trainer_state.json").read_text())["stateful_callbacks"]


def test_the_trainers_own_restore_rebuilds_a_working_callback_and_says_so(copy):
    from toposig.integrations import TopologyCallback

    # the copy is rebuilt from the checkpoint's options: the results folder it names is
    # the one the checkpoint's training wrote (here, moved with the copy)
    path = copy / "run" / "checkpoint-3" / "trainer_state.json"
    state = json.loads(path.read_text())
    state["stateful_callbacks"][STATE_KEY]["args"]["out"] = str(copy / "live")
    path.write_text(json.dumps(state))
    with pytest.warns(UserWarning) as caught:  # a copy, and so not attached either
        trainer, given = fit(copy / "resumed", copy / "elsewhere",
                             resume=copy / "run" / "checkpoint-3", restore=True)
    said = [str(w.message) for w in caught]
    assert any("restore_callback_states_from_checkpoint" in m for m in said)
    assert any("not attached" in m for m in said)
    (cb,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, TopologyCallback)]
    assert cb is not given and given.monitor is None  # the Trainer's copy did the work
    assert cb.monitor.label == "run" and cb.out == copy / "live"
    assert [r.step for r in cb.monitor.results] == [4, 6]
    assert record_steps(copy / "live", "run") == [0, 2, 3, 4, 6]


def test_a_stop_on_the_signal_is_remembered_by_a_resumed_training(tmp_path, monkeypatch,
                                                                   caplog):
    force_signal(monkeypatch, "stop: plateaued", 3)
    options = {"every_n_steps": 1, "max_steps": 8, "save_steps": 4}
    trainer, cb = fit(tmp_path / "run", tmp_path / "live", stop_on_signal=True, **options)
    assert trainer.state.global_step == 4 and cb.stopped_at == 3  # checkpoint-4 saved
    saved = saved_state(tmp_path / "run" / "checkpoint-4")["attributes"]["checkpoint_state"]
    assert saved["stopped_at"] == 3 and saved["stop_reason"] == f"stop: plateaued ({REASON})"
    checkpoint = tmp_path / "run" / "checkpoint-4"

    # with stop_on_signal: it stops again, after the one step a Trainer always takes
    with caplog.at_level(logging.WARNING, logger="toposig.integrations.hf_trainer"):
        again, cb2 = fit(tmp_path / "run", tmp_path / "live", resume=checkpoint,
                         stop_on_signal=True, **options)
    assert again.state.global_step == 5
    assert cb2.stopped_at == 3 and cb2.stop_reason == cb.stop_reason
    assert any("stops after its first step" in r.getMessage() for r in caplog.records)
    assert [r.step for r in cb2.monitor.results] == [5]

    # without it: training goes on to the end, measuring each step once
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on, cb3 = fit(tmp_path / "run", tmp_path / "live", resume=checkpoint, **options)
    assert on.state.global_step == 8
    assert sorted(cb3.monitor.measured) == list(range(9))
    assert [r.step for r in cb3.monitor.results] == [5, 6, 7, 8]
    assert cb3.stopped_at == 3  # the record of the earlier stop is kept
    assert record_steps(tmp_path / "live", "run") == list(range(9))
