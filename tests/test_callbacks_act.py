"""Callbacks that act: ``stop_on_signal`` stops a transformers Trainer or a Lightning fit
when the stop-or-scale signal says stop, logs why, and the Lightning callback keeps its
state in checkpoints. The signal is forced (``online.stop_or_scale`` replaced) so that the
tests are deterministic and fast."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch
from test_live import byte_blocks, tiny_model

from toposig.analysis import online
from toposig.live.monitor import STOP_DECISIONS, stop_reason
from toposig.model.training import byte_tokenizer

pytestmark = pytest.mark.usefixtures("wikitext_dir")

REASON = "forced for the test"


def force_signal(monkeypatch, decision: str, from_step: int) -> None:
    """Make every signal from ``from_step`` on carry ``decision`` (with :data:`REASON`);
    before it, no forecast."""

    def fake(steps, losses, features, final_step, **kwargs) -> online.Signal:
        last = int(max(steps))
        fc = None
        if last >= from_step:
            fc = online.FinalLossForecast(float(final_step or last), None, None, decision=decision,
                                 decision_reason=REASON)
        return online.Signal(last, len(steps), None, {}, fc)

    monkeypatch.setattr(online, "stop_or_scale", fake)


def hf_fit(tmp: Path, max_steps: int = 8, **callback):
    from transformers import Trainer, TrainingArguments

    from toposig.integrations import TopologyCallback

    args = TrainingArguments(output_dir=str(tmp / "run"), max_steps=max_steps,
                             per_device_train_batch_size=4, save_strategy="no",
                             use_cpu=True, disable_tqdm=True, report_to=[], seed=0)
    trainer = Trainer(model=tiny_model(), args=args, processing_class=byte_tokenizer(),
                      train_dataset=[{"input_ids": b, "labels": b}
                                     for b in byte_blocks(20_000)[:64]])
    cb = TopologyCallback(out=tmp / "live", families=["weights"], label="hf",
                          every_n_steps=1, **callback).attach(trainer)
    trainer.train()
    return trainer, cb


def test_only_the_stop_decisions_mean_stop():
    assert {"stop: plateaued", "stop: getting worse"} == STOP_DECISIONS
    assert stop_reason(None) is None
    signal = online.Signal(3, 4, None, {}, online.FinalLossForecast(
        8.0, None, None, default=2.5, default_low=2.0, default_high=3.0,
        decision="stop: getting worse"))
    assert stop_reason(signal).startswith("stop: getting worse (default forecast")
    signal = online.Signal(3, 4, None, {}, online.FinalLossForecast(8.0, None, None,
                                                           decision="continue"))
    assert stop_reason(signal) is None


def test_hf_without_stop_on_signal_trains_to_max_steps(tmp_path, monkeypatch):
    force_signal(monkeypatch, "stop: plateaued", 3)
    trainer, cb = hf_fit(tmp_path)
    assert trainer.state.global_step == 8
    assert cb.stopped_at is None and cb.stop_reason is None
    assert cb.monitor.stop_reason == f"stop: plateaued ({REASON})"  # logged, not acted on


def test_hf_stops_at_the_step_after_a_measurement_that_says_stop(tmp_path, monkeypatch,
                                                                  caplog):
    force_signal(monkeypatch, "stop: getting worse", 3)
    with caplog.at_level(logging.WARNING, logger="toposig.integrations.hf_trainer"):
        trainer, cb = hf_fit(tmp_path, stop_on_signal=True)
    # step 3 is measured as step 4 begins; the Trainer stops once step 4 is done
    assert trainer.state.global_step == 4
    assert cb.stopped_at == 3
    assert cb.stop_reason == f"stop: getting worse ({REASON})"
    assert sorted(cb.monitor.measured) == [0, 1, 2, 3, 4]  # the last step at the end
    lines = [r.getMessage() for r in caplog.records if "stopping training" in r.getMessage()]
    assert len(lines) == 1 and "step 3" in lines[0] and REASON in lines[0]


def test_hf_a_decision_to_continue_does_not_stop(tmp_path, monkeypatch):
    force_signal(monkeypatch, "continue", 1)
    trainer, cb = hf_fit(tmp_path, stop_on_signal=True)
    assert trainer.state.global_step == 8
    assert cb.stopped_at is None


# -- Lightning ----------------------------------------------------------------------


def lightning_fit(tmp: Path, max_steps: int = 8, ckpt_path: Path | None = None, **callback):
    pl = pytest.importorskip("lightning.pytorch", reason="lightning is not installed")

    from toposig.integrations import LightningTopologyCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_model()

        def training_step(self, batch, batch_idx):
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    pl.seed_everything(0, verbose=False)
    loader = torch.utils.data.DataLoader(byte_blocks(20_000)[:64], batch_size=4)
    cb = LightningTopologyCallback(byte_tokenizer(), out=tmp / "live", every_n_steps=1,
                                   families=["weights"], label="pl", **callback)
    trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", callbacks=[cb],
                         logger=False, enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, default_root_dir=tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), loader, ckpt_path=ckpt_path)
    return trainer, cb


def test_lightning_without_stop_on_signal_trains_to_max_steps(tmp_path, monkeypatch):
    force_signal(monkeypatch, "stop: plateaued", 3)
    trainer, cb = lightning_fit(tmp_path)
    assert trainer.global_step == 8 and cb.stopped_at is None


def test_lightning_a_decision_to_continue_does_not_stop(tmp_path, monkeypatch):
    force_signal(monkeypatch, "continue", 1)
    trainer, cb = lightning_fit(tmp_path, stop_on_signal=True)
    assert trainer.global_step == 8 and cb.stopped_at is None


def test_lightning_stops_after_the_step_that_says_stop_and_a_resumed_fit_remembers(
        tmp_path, monkeypatch, caplog):
    force_signal(monkeypatch, "stop: plateaued", 3)
    with caplog.at_level(logging.WARNING, logger="toposig.integrations.lightning_callback"):
        trainer, cb = lightning_fit(tmp_path, stop_on_signal=True)
    assert trainer.global_step == 3 and trainer.should_stop
    assert cb.stopped_at == 3 and cb.stop_reason == f"stop: plateaued ({REASON})"
    assert any("stopping training at step 3" in r.getMessage() and REASON in r.getMessage()
               for r in caplog.records)

    ckpt = tmp_path / "stopped.ckpt"
    trainer.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=False)["callbacks"][cb.state_key]
    assert saved == {"measured": [0, 1, 2, 3], "final_step": 8, "stopped_at": 3,
                     "stop_reason": cb.stop_reason}

    # resumed with stop_on_signal: it remembers the stop and stops at once
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toposig.integrations.lightning_callback"):
        again, cb2 = lightning_fit(tmp_path, ckpt_path=ckpt, stop_on_signal=True)
    assert again.global_step == 3
    assert cb2.stopped_at == 3 and cb2.stop_reason == cb.stop_reason
    assert any("stops at once" in r.getMessage() for r in caplog.records)

    # resumed without it: training goes on from step 3, without measuring 0-3 again
    on, cb3 = lightning_fit(tmp_path, ckpt_path=ckpt)
    assert on.global_step == 8
    assert sorted(cb3.monitor.measured) == list(range(9))
    assert [r.step for r in cb3.monitor.results] == [4, 5, 6, 7, 8]
    assert cb3.stopped_at == 3  # the record of the earlier stop is kept


def test_lightning_state_round_trips_and_a_resume_from_before_the_stop_forgets_it(tmp_path):
    pytest.importorskip("lightning.pytorch", reason="lightning is not installed")
    from toposig.integrations import LightningTopologyCallback

    tok = byte_tokenizer()
    cb = LightningTopologyCallback(tok, out=tmp_path / "live", label="a")
    cb.load_state_dict({"measured": [0, 5], "final_step": 10, "stopped_at": 5,
                        "stop_reason": "stop: plateaued (x)"})
    assert cb.state_dict() == {"measured": [0, 5], "final_step": 10, "stopped_at": 5,
                               "stop_reason": "stop: plateaued (x)"}
    assert cb.state_key != LightningTopologyCallback(tok, out=tmp_path / "live",
                                                     label="b").state_key

    class FakeTrainer:
        def __init__(self):
            self.global_step, self.is_global_zero, self.world_size = 2, False, 1
            self.should_stop = False

    trainer = FakeTrainer()
    cb.stop_on_signal = True
    cb.on_train_start(trainer, None)  # not the main process: nothing measured
    assert cb.stopped_at is None and cb.stop_reason is None and not trainer.should_stop
