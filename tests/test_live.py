"""Measuring while training: the transformers and Lightning callbacks, the project's own
trainer and a hand-written loop write the offline pipeline's records (equal to what the
pipeline computes from the checkpoints saved at the same steps), leave the training's
weights bit for bit as they are without them, log through the trainer's own logging,
and survive a failing measurement."""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import pytest
import torch
from conftest import records_of
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

import analyze_results
import run_experiments
import train_suite
from toposig.checkpoint_steps import is_scheduled, scheduled_steps
from toposig.features import homology
from toposig.live.monitor import LiveRunExistsError, Schedule, TopologyMonitor, loss_series
from toposig.model import training as T
from toposig.model.training import byte_tokenizer
from toposig.sources.corpus import wikitext_rows

pytestmark = pytest.mark.usefixtures("wikitext_dir")


def tiny_model(seed: int = 0) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=264, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, tie_word_embeddings=False,
        bos_token_id=256, eos_token_id=256, pad_token_id=256))


def byte_blocks(n_bytes: int = 60_000, length: int = 65) -> torch.Tensor:
    data = "\n".join(wikitext_rows("test"))[:n_bytes].encode("utf-8")
    ids = torch.tensor(list(data), dtype=torch.long)
    return ids[: len(ids) // length * length].view(-1, length)


def entries(results: Path) -> dict[int, dict]:
    return {e["step"]: e for e in json.loads((results / "data" / "all_results.json").read_text())}


def assert_same_numbers(live: dict, offline: dict) -> None:
    """The embedding and weight numbers of two aggregate entries agree to float tolerance."""
    assert live["perplexity"] == pytest.approx(offline["perplexity"], rel=1e-6)
    if offline.get("loss") is None:
        assert live.get("loss") is None
    else:
        assert live.get("loss") == pytest.approx(offline["loss"], rel=1e-9)
    assert live.get("loss_key") == offline.get("loss_key")
    assert set(live["features"]) == set(offline["features"])
    for name, value in offline["features"].items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(live["features"][name]), name
        else:
            assert live["features"][name] == pytest.approx(value, rel=1e-6, abs=1e-9), name


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def study_hashes(results: Path) -> tuple[str, str]:
    config = json.loads((results / "data" / "config.json").read_text())
    return config["settings_hash"], config["weights_hash"]


# --------------------------------------------------------------------------- schedule


def test_the_schedule_is_pythias_doubling_then_every_k():
    assert scheduled_steps(1000, 100) == [0, 1, 2, 4, 8, 16, 32, 64, *range(100, 1001, 100)]
    assert scheduled_steps(25, 10, "regular") == [0, 10, 20, 25]
    assert [s for s in range(40) if is_scheduled(s, 10, "pythia")] == [0, 1, 2, 4, 8, 10, 20,
                                                                       30]
    assert T.checkpoint_steps(1000, 100) == scheduled_steps(1000, 100)
    s = Schedule(every_n_steps=8, doubling=True)
    assert [k for k in range(20) if s.due(k)] == [0, 1, 2, 4, 8, 16]
    assert [k for k in range(20) if Schedule(5, initial=False).due(k)] == [5, 10, 15]
    assert [k for k in range(20) if Schedule().due(k)] == [0]  # saves are the trainer's
    with pytest.raises(ValueError, match="every_n_steps"):
        Schedule(every_n_steps=0)
    with pytest.raises(ValueError, match="doubling"):
        Schedule(doubling=True)


# ------------------------------------------------------------- transformers Trainer


def hf_train(out_dir: Path, results: Path | None, max_steps: int = 12, **callback):
    from transformers import Trainer, TrainingArguments

    from toposig.integrations import TopologyCallback

    tok = byte_tokenizer()
    model = tiny_model()
    train = [{"input_ids": b, "labels": b} for b in byte_blocks()]
    args = TrainingArguments(
        output_dir=str(out_dir), max_steps=max_steps, per_device_train_batch_size=8,
        learning_rate=3e-3, logging_steps=2, save_steps=6, seed=0, use_cpu=True,
        disable_tqdm=True, report_to=["tensorboard"] if results else [],
        dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, processing_class=tok)
    callback_obj = None
    if results is not None:
        callback_obj = TopologyCallback(out=results, **callback).attach(trainer)
    trainer.train()
    return trainer, callback_obj


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    trainer, callback = hf_train(root / "run", root / "live", every_n_steps=4, doubling=True,
                                 background=True)  # the other Trainer tests: in the foreground
    return root, trainer, callback


def test_trainer_callback_records_equal_the_offline_pipeline_on_the_saved_checkpoints(hf_run):
    root, trainer, callback = hf_run
    live = entries(root / "live")
    assert sorted(live) == [0, 1, 2, 4, 6, 8, 12]  # doubling, every 4, and the saves (6, 12)
    assert run_experiments.main(["--models", str(root / "run"), "--out", str(root / "offline"),
                                 "--no-progress"]) == 0
    offline = entries(root / "offline")
    assert sorted(offline) == [6, 12]
    for step in offline:
        assert_same_numbers(live[step], offline[step])
    assert study_hashes(root / "live") == study_hashes(root / "offline")
    # the loss kept is what the saved checkpoint's trainer_state.json stores
    assert live[12]["loss_key"] == "log_history.loss"
    assert live[12]["source"] == "memory" and live[12]["model_label"] == "run"


def test_trainer_callback_logs_through_trainer_log_and_tensorboard(hf_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, trainer, callback = hf_run
    logged = {h["step"]: h for h in trainer.state.log_history
              if "topology/h1_total_persistence" in h}
    assert sorted(logged) == [0, 1, 2, 4, 6, 8, 12]
    assert logged[12]["topology/np_mean"] == pytest.approx(
        entries(root / "live")[12]["features"]["np_mean"])
    assert "topology/experimental/final_loss_default" in logged[12]
    # one short line in the console: the headline numbers and the decision, no phases
    # nor standard errors (issue 37, row 12: they made a dict of about 25 keys)
    assert len(logged[12]) <= 10 and not any("phase" in k for k in logged[12])
    events = list((root / "run").rglob("events.out.tfevents*"))
    assert events
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "train/topology/h1_total_persistence" in tags
    assert [e.step for e in acc.Scalars("train/topology/rankme")] == [0, 1, 2, 4, 6, 8, 12]
    assert (root / "live" / "live" / "run" / "topology.png").is_file()
    signal = json.loads((root / "live" / "live" / "run" / "signal.json").read_text())
    assert [s["step"] for s in signal] == [0, 1, 2, 4, 6, 8, 12]
    assert signal[-1]["forecast"]["final_step"] == 12
    assert "experimental" in signal[-1]["caveat"]


def test_trainer_weights_are_bit_identical_with_and_without_the_callback(hf_run,
                                                                         tmp_path):
    _, with_callback, _ = hf_run
    without, _ = hf_train(tmp_path / "plain", None)
    assert same_weights(with_callback.model, without.model)
    assert [h.get("loss") for h in without.state.log_history if "loss" in h] == \
        [h.get("loss") for h in with_callback.state.log_history if "loss" in h]


def test_analyze_results_draws_the_usual_figures_of_a_live_folder(hf_run, tmp_path):
    import shutil

    root, _, _ = hf_run
    folder = shutil.copytree(root / "live", tmp_path / "live")
    assert analyze_results.main(["--results", str(folder)]) == 0
    drawn = {p.name for p in (folder / "plots").glob("*.png")}
    assert {"perplexity_curves.png", "topological_evolution.png",
            "neural_persistence_evolution.png", "phase_fits.png"} <= drawn


def test_an_unattached_callback_logs_to_log_history_and_says_so(tmp_path):
    from transformers import Trainer, TrainingArguments

    from toposig.integrations import TopologyCallback

    tok = byte_tokenizer()
    args = TrainingArguments(output_dir=str(tmp_path / "r"), max_steps=2,
                             per_device_train_batch_size=4, save_strategy="no", use_cpu=True,
                             disable_tqdm=True, report_to=[])
    cb = TopologyCallback(out=tmp_path / "live", families=["weights"], label="plain")
    trainer = Trainer(model=tiny_model(), args=args, processing_class=tok,
                      train_dataset=[{"input_ids": b, "labels": b} for b in byte_blocks()[:16]],
                      callbacks=[cb])
    with pytest.warns(UserWarning, match="attach"):
        trainer.train()
    assert [h["step"] for h in trainer.state.log_history if "topology/np_mean" in h] == [0]


def test_saves_and_evaluations_at_an_epochs_end_are_measured(tmp_path):
    from transformers import Trainer, TrainingArguments

    from toposig.integrations import TopologyCallback

    blocks = [{"input_ids": b, "labels": b} for b in byte_blocks()[:16]]
    args = TrainingArguments(output_dir=str(tmp_path / "r"), num_train_epochs=2,
                             per_device_train_batch_size=8, save_strategy="epoch",
                             eval_strategy="epoch", use_cpu=True, disable_tqdm=True,
                             report_to=[])
    trainer = Trainer(model=tiny_model(), args=args, processing_class=byte_tokenizer(),
                      train_dataset=blocks, eval_dataset=blocks[:8])
    cb = TopologyCallback(out=tmp_path / "live", families=["weights"]).attach(trainer)
    trainer.train()
    assert sorted(cb.monitor.measured) == [0, 2, 4]
    assert entries(tmp_path / "live")[4]["loss_key"] == "log_history.eval_loss"


def test_a_callback_both_passed_and_attached_measures_once(tmp_path):
    from transformers import Trainer, TrainingArguments

    from toposig.integrations import TopologyCallback

    args = TrainingArguments(output_dir=str(tmp_path / "r"), max_steps=2,
                             per_device_train_batch_size=4, save_strategy="no", use_cpu=True,
                             disable_tqdm=True, report_to=[])
    cb = TopologyCallback(out=tmp_path / "live", families=["weights"], every_n_steps=1)
    trainer = Trainer(model=tiny_model(), args=args, processing_class=byte_tokenizer(),
                      train_dataset=[{"input_ids": b, "labels": b} for b in byte_blocks()[:8]],
                      callbacks=[cb])
    cb.attach(trainer)
    trainer.train()
    assert sum(c is cb for c in trainer.callback_handler.callbacks) == 1
    assert [h["step"] for h in trainer.state.log_history if "topology/np_mean" in h] == [0, 1, 2]


def test_a_failing_measurement_is_recorded_and_training_goes_on(tmp_path, monkeypatch):
    from toposig.model import weight_stage

    real = weight_stage.analyse_weights

    def flaky(ckpt, *a, **kw):
        if ckpt.step == 4:
            raise RuntimeError("weights exploded")
        return real(ckpt, *a, **kw)

    monkeypatch.setattr(weight_stage, "analyse_weights", flaky)
    trainer, cb = hf_train(tmp_path / "run", tmp_path / "live", max_steps=8, every_n_steps=4)
    assert trainer.state.global_step == 8
    failed = json.loads(next((tmp_path / "live" / "records").glob(
        "w*/run/step000004.json")).read_text())
    assert failed["status"] == "failed" and "weights exploded" in failed["error"]
    result = next(r for r in cb.monitor.results if r.step == 4)
    assert result.failures and result.entry is not None
    assert result.entry.families == ("embedding",)
    assert sorted(entries(tmp_path / "live")) == [0, 4, 6, 8]
    assert "np_mean" in entries(tmp_path / "live")[8]["features"]


# ---------------------------------------------------------------- Lightning


def lightning_train(tmp: Path, with_callback: bool):
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from toposig.integrations import LightningTopologyCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_model()

        def training_step(self, batch, batch_idx):
            loss = self.model(input_ids=batch, labels=batch).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    class SaveModelAt(pl.Callback):
        """Saves the wrapped model as a model folder at the given steps."""

        def __init__(self, folder: Path, steps: set[int], tokenizer):
            self.folder, self.steps, self.tokenizer = folder, steps, tokenizer

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step in self.steps:
                target = self.folder / f"step{trainer.global_step}"
                pl_module.model.save_pretrained(target)
                self.tokenizer.save_pretrained(target)

    pl.seed_everything(0, verbose=False)
    module = Module()
    loader = torch.utils.data.DataLoader(byte_blocks(), batch_size=8, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    tok = byte_tokenizer()
    callbacks = [SaveModelAt(tmp / "saved", {3, 6}, tok)]
    if with_callback:
        callbacks.append(LightningTopologyCallback(tok, out=tmp / "live", every_n_steps=3,
                                                   label="pl"))
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", callbacks=callbacks,
                         logger=TensorBoardLogger(tmp / "tb"), enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False,
                         log_every_n_steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, loader)
    return module, callbacks


def test_lightning_callback_records_equal_the_offline_pipeline_and_weights_are_unchanged(
        tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    module, callbacks = lightning_train(tmp_path / "a", with_callback=True)
    plain, _ = lightning_train(tmp_path / "b", with_callback=False)
    assert same_weights(module.model, plain.model)
    live = entries(tmp_path / "a" / "live")
    assert sorted(live) == [0, 3, 6]
    assert run_experiments.main(["--models", str(tmp_path / "a" / "saved"), "--out",
                                 str(tmp_path / "offline"), "--no-progress"]) == 0
    offline = entries(tmp_path / "offline")
    for step in (3, 6):
        live[step]["loss"], live[step]["loss_key"] = None, None  # no trainer_state saved
        assert_same_numbers(live[step], offline[step])
    assert study_hashes(tmp_path / "a" / "live") == study_hashes(tmp_path / "offline")
    events = list((tmp_path / "a" / "tb").rglob("events.out.tfevents*"))
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert [e.step for e in acc.Scalars("topology/h1_total_persistence")] == [0, 3, 6]


# ------------------------------------------------------ the project's own trainer


def test_the_projects_trainer_measures_through_the_same_path(tmp_path):
    preset = tmp_path / "mini.json"
    preset.write_text(json.dumps({
        "name": "mini", "models": [{"name": "m-h16", "hidden": 16, "layers": 1, "heads": 2}],
        "context": 32, "batch_size": 8, "steps": 8, "warmup": 2, "checkpoint_every": 4,
        "eval_batches": 2}))
    assert train_suite.main(["--preset", str(preset), "--suite-dir", str(tmp_path / "runs"),
                             "--measure-out", str(tmp_path / "live"), "--no-progress"]) == 0
    assert train_suite.main(["--preset", str(preset), "--suite-dir", str(tmp_path / "plain"),
                             "--no-progress"]) == 0
    for step in (4, 8):
        a = (tmp_path / "runs" / "mini" / "m-h16" / f"step{step}" / "model.safetensors")
        b = (tmp_path / "plain" / "mini" / "m-h16" / f"step{step}" / "model.safetensors")
        assert a.read_bytes() == b.read_bytes()
    assert run_experiments.main(["--models", str(tmp_path / "runs" / "mini" / "m-h16"),
                                 "--out", str(tmp_path / "offline"), "--no-progress"]) == 0
    live, offline = entries(tmp_path / "live"), entries(tmp_path / "offline")
    assert sorted(live) == sorted(offline) == [0, 1, 2, 4, 8]
    for step in offline:
        assert_same_numbers(live[step], offline[step])
        assert live[step]["loss_key"] == "val_loss"
    assert (tmp_path / "live" / "live" / "m-h16" / "topology.png").is_file()


# ----------------------------------------------------------- a hand-written loop


def test_a_hand_written_loop_measures_when_due_and_refuses_to_mix_two_trainings(tmp_path):
    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:40]
    model = tiny_model()
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                              schedule=Schedule(every_n_steps=2), label="loop")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = byte_blocks(20_000)
    measured = []
    for step in range(5):
        if (r := monitor(model, step, loss=None, final_step=4)) is not None:
            measured.append(r.step)
        loss = model(input_ids=data[step:step + 4], labels=data[step:step + 4]).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert measured == [0, 2, 4]
    assert model.training
    assert monitor(model, 4) is None  # measured already
    monitor.finish()  # the training ends: its label may be taken
    fresh = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts, label="loop")
    with pytest.raises(LiveRunExistsError, match="overwrite=True"):
        fresh(tiny_model(), 0)
    resumed = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts, label="loop",
                              schedule=Schedule(every_n_steps=2))
    resumed.start(4)  # a resumed training may go on writing
    assert resumed.measure(model, 6).entry.step == 6
    resumed.finish()
    again = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts, label="loop",
                            overwrite=True)
    again(tiny_model(), 0)  # starts afresh: the earlier training's records are gone
    assert sorted(entries(tmp_path / "live")) == [0]
    assert len(list((tmp_path / "live" / "records").rglob("step*.json"))) == 2
    config = json.loads((tmp_path / "live" / "data" / "config.json").read_text())
    assert config["steps"]["loop"] == [0]


def test_the_signal_uses_one_kind_of_loss_throughout():
    mixed = records_of([{"model_label": "m", "mean_nll": 5.0},
                        {"model_label": "m", "mean_nll": 4.0, "loss": 3.9},
                        {"model_label": "m", "mean_nll": 3.5, "loss": 3.4}])
    assert loss_series(mixed) == [5.0, 4.0, 3.5]
    assert loss_series(records_of([{"model_label": "m", "loss": 2.0},
                                   {"model_label": "m", "loss": 1.0, "mean_nll": 1.1}])) \
        == [2.0, 1.0]


def test_a_monitor_refuses_bad_options(tmp_path):
    with pytest.raises(ValueError, match="families"):
        TopologyMonitor(byte_tokenizer(), tmp_path, families=["spectra"])
    with pytest.raises(ValueError, match="label"):
        TopologyMonitor(byte_tokenizer(), tmp_path, label="../escape")


def readme_example(marker: str) -> str:
    """The python block after ``<!-- tested: tests/test_live.py marker -->`` in the
    documentation's page on training (docs/training.md)."""
    page = Path(__file__).resolve().parents[1] / "docs" / "training.md"
    text = page.read_text(encoding="utf-8")
    block = text.split(f"<!-- tested: tests/test_live.py {marker} -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def readme_trainer_example() -> str:
    return readme_example("trainer-example")


def test_the_readmes_trainer_example_runs_and_logs_to_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code = readme_trainer_example()
    shrunk = (code.replace("max_steps=1000", "max_steps=4")
              .replace("save_steps=500", "save_steps=2")
              .replace("128 * 4000", "128 * 64")
              .replace('"runs/live-demo"', repr(str(tmp_path / "runs")))
              .replace('"results/live-demo"', repr(str(tmp_path / "results"))))
    assert shrunk.count(str(tmp_path)) == 2 and "max_steps=4" in shrunk
    assert len(code.strip().splitlines()) <= 16
    exec(compile(shrunk, "README trainer example", "exec"), {})
    assert sorted(entries(tmp_path / "results")) == [0, 2, 4]  # step 0 and every save
    events = list((tmp_path / "runs").rglob("events.out.tfevents*"))
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert "train/topology/h1_total_persistence" in acc.Tags()["scalars"]


def test_the_readmes_lightning_and_loop_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup = readme_trainer_example().split("args = ", 1)[0].replace("128 * 4000", "128 * 64")
    namespace: dict = {}
    exec(compile(setup, "README trainer example, its first lines", "exec"), namespace)
    for marker, results in (("lightning-example", "results/live-lightning"),
                            ("loop-example", "results/live-loop")):
        code = (readme_example(marker).replace("max_steps=300", "max_steps=4")
                .replace("total = torch.optim.AdamW(model.parameters(), lr=1e-3), 300",
                         "total = torch.optim.AdamW(model.parameters(), lr=1e-3), 4")
                .replace("every_n_steps=50", "every_n_steps=2"))
        assert "300" not in code, marker
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, f"README {marker}", "exec"), namespace)
        assert sorted(entries(tmp_path / results)) == [0, 1, 2, 4], marker
    assert not (tmp_path / "lightning_logs").exists()  # Lightning's logs stay in runs/


def test_a_model_with_dropout_is_measured_in_eval_mode_and_its_modes_are_restored(tmp_path):
    import toposig

    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:40]
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=264, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, hidden_dropout=0.3,
        attention_dropout=0.3))
    model.train()
    model.gpt_neox.layers[0].eval()  # a frozen block kept in eval mode
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                              families=["embedding"], label="drop")
    live = monitor.measure(model, 0).entry
    assert model.training and not model.gpt_neox.layers[0].training
    assert model.gpt_neox.layers[1].training
    reference = toposig.measure(model.eval(), byte_tokenizer(), texts, families=["embedding"])
    assert live.perplexity == pytest.approx(reference.perplexity, rel=1e-9)


def test_a_resumed_training_drops_the_records_its_abandoned_continuation_left(tmp_path):
    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:20]
    model = tiny_model()

    def monitor():
        return TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                               families=["weights"], label="r",
                               schedule=Schedule(every_n_steps=1))

    first = monitor()
    for step in range(7):
        first(model, step)
    first.finish()  # killed, in effect: the resumed training takes the label
    resumed = monitor()
    resumed.start(3)  # resumed from the checkpoint at step 3
    assert sorted(entries(tmp_path / "live")) == list(range(7))  # aggregates: next write
    resumed(model, 4)
    assert sorted(entries(tmp_path / "live")) == [0, 1, 2, 3, 4]
    config = json.loads((tmp_path / "live" / "data" / "config.json").read_text())
    assert config["steps"]["r"] == [0, 1, 2, 3, 4]
    signal = json.loads((tmp_path / "live" / "live" / "r" / "signal.json").read_text())
    assert [h["step"] for h in signal] == [0, 1, 2, 3, 4]


def test_a_label_the_study_gives_another_model_is_refused_before_anything_is_removed(
        tmp_path, tiny_series):
    assert run_experiments.main(["--models", str(tiny_series), "--steps", "0",
                                 "--signatures", "weights", "--out", str(tmp_path / "r"),
                                 "--no-progress"]) == 0
    label = json.loads((tmp_path / "r" / "data" / "config.json").read_text())["models"]
    (name,) = label
    before = sorted(p.name for p in (tmp_path / "r").rglob("*.json"))
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "r", families=["weights"],
                              label=name, overwrite=True, extend=True)
    from toposig.run.study import StudyMismatchError

    with pytest.raises(StudyMismatchError, match="another label"):
        monitor(tiny_model(), 0)
    assert sorted(p.name for p in (tmp_path / "r").rglob("*.json")) == before


def test_a_damaged_signal_file_is_written_afresh_and_a_bad_step_refused(tmp_path):
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", families=["weights"],
                              label="s", schedule=Schedule(every_n_steps=1))
    path = tmp_path / "live" / "live" / "s" / "signal.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"s": 5}')
    model = tiny_model()
    monitor(model, 0)
    monitor(model, 1)
    assert [h["step"] for h in json.loads(path.read_text())] == [0, 1]
    with pytest.raises(ValueError, match="non-negative integer"):
        monitor.measure(model, -1)


@pytest.mark.parametrize("progress", [True, False])
def test_the_first_measurement_shows_a_progress_bar_unless_turned_off(tmp_path, capsys,
                                                                      progress):
    texts = [f"text {i}: " + "the quick brown fox jumps " * (2 + i % 3) for i in range(12)]
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                              families=["embedding"], label="bar", progress=progress)
    model = tiny_model()
    monitor.measure(model, 0)
    first = capsys.readouterr().err
    monitor.measure(model, 1)
    later = capsys.readouterr().err
    monitor.finish()
    assert ("measuring bar at step 0" in first) is progress
    assert "1/1" in first if progress else first == ""
    assert "measuring bar" not in later  # only the first measurement, which reads the texts


# --------------------------------------------------------------------------- cost

class CountingTokenizer:
    """A byte tokenizer that counts its calls."""

    def __init__(self):
        self.inner, self.calls = byte_tokenizer(), 0
        self.marker = "delegated"

    def __len__(self):
        return len(self.inner)

    def __call__(self, texts, **options):
        self.calls += 1
        return self.inner(texts, **options)


def test_a_live_run_tokenizes_its_texts_once_and_again_when_the_vocabulary_grows():
    from toposig.live.measurement import RememberingTokenizer

    counting = CountingTokenizer()
    remembering = RememberingTokenizer(counting)
    texts = ["the first text", "a second one"]
    first = remembering(texts, max_length=8, truncation=True)
    assert remembering(list(texts), max_length=8, truncation=True) is first
    assert counting.calls == 1
    remembering(texts, max_length=4, truncation=True)  # other options: other tokens
    assert counting.calls == 2
    counting.inner.add_tokens(["<new>"])  # a token added between two measurements
    remembering(texts, max_length=8, truncation=True)
    assert counting.calls == 3
    remembering(texts, max_length=8, truncation=True, extra=[1])  # cannot be a key
    remembering(texts, max_length=8, truncation=True, extra=[1])
    assert counting.calls == 5
    counting.truncation_side = "left"  # a setting that changes the ids
    remembering(texts, max_length=8, truncation=True)
    assert counting.calls == 6
    assert remembering(iter(texts), max_length=8, truncation=True) is not None  # a generator
    assert counting.calls == 6  # the same texts, read once
    for n in range(RememberingTokenizer.KEPT + 2):  # a bounded memory
        remembering([f"text {n}"], max_length=8)
    assert len(remembering._made) == RememberingTokenizer.KEPT
    assert remembering.marker == "delegated" and len(remembering) == len(counting.inner)
    remembering.marker = "set through"  # attributes set go to the tokenizer
    assert counting.marker == "set through"


def test_a_monitor_tokenizes_its_texts_once_over_its_measurements(tmp_path):
    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:20]
    counting = CountingTokenizer()
    counting.pad_token_id, counting.eos_token_id = 256, 256
    monitor = TopologyMonitor(counting, tmp_path / "live", texts=texts, label="once",
                              families=["embedding"], figure_interval_s=3600)
    model = tiny_model()
    for step in (0, 1, 2):
        monitor.measure(model, step)
    monitor.finish()
    assert counting.calls == 1


def test_a_live_measurement_imports_neither_scikit_learn_nor_pyplot(tmp_path):
    """What keeps the callback cheap (issue 37, row 12): a live measurement's diagrams come
    from the default backend's C++ core (giotto-ph's since issue 38), so the process never
    imports scikit-learn (1.7 s), and the live figure uses matplotlib without pyplot."""
    import subprocess
    import sys

    code = f"""
import json, sys, torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
from toposig.live.monitor import TopologyMonitor
from toposig.model.training import byte_tokenizer
from toposig.sources.corpus import wikitext_rows
torch.manual_seed(0)
model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=264, hidden_size=32, num_hidden_layers=2,
    num_attention_heads=4, intermediate_size=128, max_position_embeddings=128))
texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:30]
monitor = TopologyMonitor(byte_tokenizer(), {str(tmp_path / "live")!r}, texts=texts,
                          label="cost", figure_interval_s=0)
monitor(model, 0)
monitor(model, 1)
monitor.finish()
print(json.dumps({{m: m in sys.modules for m in ("sklearn", "matplotlib.pyplot")}}))
"""
    src = Path(__file__).resolve().parents[1] / "src"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(src)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "sklearn": False, "matplotlib.pyplot": False}
    assert (tmp_path / "live" / "live" / "cost" / "topology.png").stat().st_size > 0
    records = list((tmp_path / "live" / "records").rglob("step*.json"))
    backends = {json.loads(p.read_text()).get("ph_backend") for p in records} - {None}
    assert backends == {homology.resolve_backend("auto")}, backends


def test_a_measurement_in_the_foreground_leaves_no_thread_working_beside_the_training(
        tmp_path):
    """A thread left working after a measurement competes with the training for the
    cores: one that imported matplotlib for the figure slowed the next steps by about
    0.6 s on 2 cores (2026-11-29), more than importing it when drawing costs."""
    import threading

    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:30]
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts, label="t")
    before = set(threading.enumerate())
    monitor(tiny_model(), 0)
    started = [t.name for t in set(threading.enumerate()) - before
               if t.is_alive() and not t.name.startswith("tqdm")]
    monitor.finish()
    assert started == []
    assert (tmp_path / "live" / "live" / "t" / "topology.png").stat().st_size > 0


def test_a_figure_whose_drawing_code_cannot_be_imported_is_logged_not_raised(
        tmp_path, monkeypatch, caplog):
    import sys

    from toposig.live.figure import LiveFigure

    monkeypatch.setitem(sys.modules, "toposig.report.live_figure", None)  # ImportError
    figure = LiveFigure(tmp_path / "topology.png", tmp_path)
    with caplog.at_level("WARNING"):
        figure.draw([], None, force=True)
    assert "could not draw" in caplog.text
    assert not (tmp_path / "topology.png").exists()


# ------------------------------------------------ measuring while training goes on


def test_the_trainer_callback_measures_in_the_background_when_asked(hf_run, tmp_path):
    _, _, callback = hf_run
    assert callback.monitor.results and all(r.background for r in callback.monitor.results)
    _, foreground = hf_train(tmp_path / "run", tmp_path / "live", max_steps=4,
                             every_n_steps=4)
    assert foreground.monitor.results
    assert not any(r.background for r in foreground.monitor.results)


def global_rng_states() -> tuple:
    import random

    import numpy as np

    return torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()


def test_a_measurement_draws_nothing_from_the_global_random_generators(tmp_path):
    """A measurement on the worker thread does not restore the global generators (that
    would rewind the training's draws), so it must not draw from them at all."""
    from toposig.config import RunSettings
    from toposig.in_memory import measure_families, measure_inputs
    from toposig.records import Family
    from toposig.sources.checkpoints import Checkpoint

    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:30]
    families = (Family("embedding"), Family("weights"))
    inputs = measure_inputs(RunSettings(), texts, families)
    ckpt = Checkpoint(model="m", label="m", step=0, source="memory", location="<in memory>")
    model, kept = tiny_model(), []
    before = global_rng_states()
    measure_families(model, byte_tokenizer(), ckpt, families, inputs,
                     lambda family, result: kept.append(result), restore_rngs=False)
    after = global_rng_states()
    assert len(kept) == 2 and not any(isinstance(r, BaseException) for r in kept)
    assert torch.equal(before[0], after[0])
    assert (before[1] == after[1]).all()
    assert before[2] == after[2]


def test_a_background_measurement_is_of_the_weights_at_its_step(tmp_path):
    """submit() copies the weights at once: changing the model afterwards (the training
    going on) does not reach the measurement, which equals one made with the training
    waiting."""
    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:30]
    model = tiny_model()
    back = TopologyMonitor(byte_tokenizer(), tmp_path / "back", texts=texts, label="m",
                           figure_interval_s=3600, background=True)
    fore = TopologyMonitor(byte_tokenizer(), tmp_path / "fore", texts=texts, label="m",
                           figure_interval_s=3600, background=False)
    for step in (0, 1):
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.01)
        fore.measure(model, step)
        back.submit(model, step)
        with torch.no_grad():  # the training moves on while the worker measures
            for p in model.parameters():
                p.add_(0.5)
    done = back.collect(wait=True)
    assert [r.step for r in done] == [0, 1] and all(r.background for r in done)
    back.finish()
    fore.finish()
    got, want = entries(tmp_path / "back"), entries(tmp_path / "fore")
    assert sorted(got) == sorted(want) == [0, 1]
    for step in (0, 1):
        assert got[step]["features"] == want[step]["features"], step
        assert got[step]["perplexity"] == want[step]["perplexity"]


def test_a_model_that_cannot_be_copied_is_measured_with_the_training_waiting(tmp_path,
                                                                            caplog):
    class Uncopyable(GPTNeoXForCausalLM):
        def __deepcopy__(self, memo):
            raise TypeError("no copies of this one")

    model = Uncopyable(tiny_model().config)
    with pytest.raises(ValueError, match="background must be True or False"):
        TopologyMonitor(byte_tokenizer(), tmp_path / "x", background="auto")
    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:20]
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                              families=["weights"], figure_interval_s=3600, background=True)
    with caplog.at_level("WARNING", logger="toposig.live.monitor"):
        monitor.submit(model, 0)
        monitor.submit(model, 1)
    done = monitor.collect()
    assert [r.step for r in done] == [0, 1] and not any(r.background for r in done)
    assert sum("cannot be copied" in r.message for r in caplog.records) == 1
    monitor.finish()


def test_a_first_measurement_failing_in_the_background_is_raised_by_collect(tmp_path,
                                                                           monkeypatch):
    from toposig.live.measurement import LiveMeasurement

    def broken(self, *args, **kwargs):
        raise RuntimeError("cannot measure this model")

    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:20]
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                              families=["weights"], background=True)
    monkeypatch.setattr(LiveMeasurement, "run", broken)
    monitor.submit(tiny_model(), 0)
    with pytest.raises(RuntimeError, match="cannot measure this model"):
        monitor.collect(wait=True)
    assert monitor.collect() == []  # raised once
    monitor.finish()


def test_a_checkpoint_saved_while_measuring_in_the_background_logs_its_steps(tmp_path):
    """The Trainer's checkpoint names a step measured only once its scalars are in the
    log history the checkpoint keeps, each under its own step and epoch."""
    trainer, cb = hf_train(tmp_path / "run", tmp_path / "live", max_steps=12,
                           every_n_steps=5, background=True)
    assert all(r.background for r in cb.monitor.results)
    for ckpt in ("checkpoint-6", "checkpoint-12"):
        saved = json.loads((tmp_path / "run" / ckpt / "trainer_state.json").read_text())
        measured = saved["stateful_callbacks"]["TopologyCallback"]["attributes"][
            "checkpoint_state"]["measured"]
        logged = {h["step"] for h in saved["log_history"] if "topology/rankme" in h}
        assert measured and set(measured) <= logged, (ckpt, measured, logged)
    history = trainer.state.log_history
    # the callback's logging at a step's end leaves the Trainer's own logging of it alone
    assert [h["step"] for h in history if "loss" in h] == [2, 4, 6, 8, 10, 12]
    epochs = {h["step"]: h["epoch"] for h in history if "loss" in h}
    for h in history:
        if "topology/rankme" in h and h["step"] in epochs:
            assert h["epoch"] == epochs[h["step"]], h


def test_a_resized_model_gets_a_new_twin_and_is_refused_as_in_the_foreground(tmp_path):
    """A resized vocabulary needs a new twin (the old one's tensors no longer fit); the
    study then refuses the changed model, in the background as in the foreground: a
    failure recorded, the training going on."""
    texts = [t for t in wikitext_rows("validation") if len(t.strip()) >= 100][:20]
    outcomes = {}
    for background in (True, False):
        monitor = TopologyMonitor(byte_tokenizer(), tmp_path / str(background), texts=texts,
                                  families=["weights"], figure_interval_s=3600,
                                  background=background)
        model = tiny_model()
        monitor.submit(model, 0)
        model.resize_token_embeddings(300)
        monitor.submit(model, 1)
        done = monitor.collect(wait=True)
        assert [r.step for r in done] == [0, 1]
        assert [r.background for r in done] == [background] * 2
        outcomes[background] = [[f.get("error_type") for f in r.failures] for r in done]
        monitor.finish()
    assert outcomes[True] == outcomes[False] == [[], ["StudyMismatchError"]]


def test_the_lightning_callback_refuses_background(tmp_path):
    pytest.importorskip("lightning")
    from toposig.integrations.lightning_callback import LightningTopologyCallback

    with pytest.raises(ValueError, match="Trainer callback only"):
        LightningTopologyCallback(byte_tokenizer(), out=tmp_path / "live", background=True)
