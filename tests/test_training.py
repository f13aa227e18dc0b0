"""The project's own model suites: schedules, tokenizer, trainer, resume, presets, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import train_suite
from toposig.model import training as T


def suite(name="unit", steps=20, **kw) -> T.SuiteConfig:
    models = kw.pop("models", (T.ModelSpec("small-a", 16, 1, 2), T.ModelSpec("small-b", 24, 1, 2)))
    base = dict(name=name, models=models, steps=steps, context=32, batch_size=8,
                checkpoint_every=10, warmup=4, eval_batches=2)
    return T.SuiteConfig(**{**base, **kw})


def test_checkpoint_schedules():
    pythia = [0, 1, 2, 4, 8, 16, 32, 64, *range(100, 1001, 100)]
    assert T.checkpoint_steps(1000, 100, "pythia") == pythia
    assert T.checkpoint_steps(5000, 100, "regular") == list(range(0, 5001, 100))
    assert len(T.checkpoint_steps(5000, 100, "regular")) == 51
    assert T.checkpoint_steps(25, 10, "regular") == [0, 10, 20, 25]  # the last step always
    assert T.checkpoint_steps(3, 10, "pythia") == [0, 1, 2, 3]


def test_learning_rate_warms_up_then_decays_to_min():
    c = suite(steps=100, warmup=10, lr=1e-2, min_lr=1e-3)
    lrs = [T.lr_at(s, c) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[9] == pytest.approx(1e-2)
    assert all(a >= b - 1e-15 for a, b in zip(lrs[9:], lrs[10:], strict=False))
    assert T.lr_at(100, c) == pytest.approx(1e-3)


def test_byte_tokenizer_ids_are_utf8_bytes(tmp_path):
    T.byte_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    text = " = Valkyria Chronicles III = \nnaïve café 日本 "
    ids = tok(text)["input_ids"]
    assert ids == list(T.encode_bytes(text))
    assert tok.decode(ids) == text
    assert tok.eos_token_id == 256 and tok.pad_token_id == 256 and len(tok) == T.BYTE_VOCAB


@pytest.fixture(scope="module")
def trained(tmp_path_factory, wikitext_dir):
    root = tmp_path_factory.mktemp("runs")
    c = suite()
    suite_dir, results = T.train_suite(c, root, progress=False)
    return c, suite_dir, results


def test_twenty_step_run_writes_exactly_the_scheduled_checkpoints(trained):
    c, suite_dir, results = trained
    expected = [0, 1, 2, 4, 8, 10, 20]
    for spec, res in zip(c.models, results, strict=True):
        folders = sorted(int(p.name[4:]) for p in (suite_dir / spec.name).glob("step*"))
        assert folders == expected and res.checkpoints == expected
        for step in expected:
            folder = suite_dir / spec.name / f"step{step}"
            model = AutoModelForCausalLM.from_pretrained(folder)
            tok = AutoTokenizer.from_pretrained(folder)
            assert type(model).__name__ == "GPTNeoXForCausalLM"
            assert model.config.hidden_size == spec.hidden
            assert tok("ab")["input_ids"] == [97, 98]
            state = json.loads((folder / "trainer_state.json").read_text())
            assert state["step"] == step and math.isfinite(state["val_loss"])
        log = [json.loads(ln) for ln in (suite_dir / spec.name / "train_log.jsonl").open()]
        assert [r["step"] for r in log] == list(range(1, 21))
        assert all({"loss", "grad_norm", "lr"} <= set(r) for r in log)
    config = json.loads((suite_dir / "config.json").read_text())
    assert config["corpus_split"] in ("train", "test")
    assert config["config"]["steps"] == 20


def test_finished_models_are_not_retrained(trained):
    c, suite_dir, _ = trained
    before = (suite_dir / "small-a" / "step20" / "model.safetensors").stat().st_mtime_ns
    _, again = T.train_suite(c, suite_dir.parent, progress=False)
    assert all(r.skipped for r in again)
    assert (suite_dir / "small-a" / "step20" / "model.safetensors").stat().st_mtime_ns == before


def test_other_settings_in_the_same_folder_are_refused(trained):
    c, suite_dir, _ = trained
    with pytest.raises(T.TrainingConfigError, match="trained with other settings"):
        T.train_suite(suite(steps=30), suite_dir.parent, progress=False)


def test_kill_and_resume_gives_bit_identical_weights(tmp_path, wikitext_dir):
    c = suite(name="resume", models=(T.ModelSpec("m", 16, 2, 2),), steps=25)
    _, (straight,) = T.train_suite(c, tmp_path / "straight", progress=False)
    with pytest.raises(T.StopTraining):
        T.train_suite(c, tmp_path / "killed", progress=False, stop_at=17)
    model_dir = tmp_path / "killed" / "resume" / "m"
    assert not (model_dir / T.DONE_FILE).exists()
    (model_dir / ".step20.abc123").mkdir()  # what a kill inside save_checkpoint leaves
    (model_dir / "._resume_state.pt.xyz").write_bytes(b"partial")
    T.train_suite(c, tmp_path / "killed", progress=False)
    assert not list(model_dir.glob(".*"))
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "straight" / "resume" / "m" / "step25")
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "killed" / "resume" / "m" / "step25")
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    log_a = (tmp_path / "straight" / "resume" / "m" / "train_log.jsonl").read_text()
    log_b = (tmp_path / "killed" / "resume" / "m" / "train_log.jsonl").read_text()
    assert log_a == log_b


def test_loss_after_200_steps_is_clearly_below_the_start(tmp_path, wikitext_dir):
    c = suite(name="learn", models=(T.ModelSpec("m", 32, 1, 2),), steps=200, context=64,
              batch_size=16, checkpoint_every=200, warmup=20)
    suite_dir, (res,) = T.train_suite(c, tmp_path, progress=False)
    start = json.loads((suite_dir / "m" / "step0" / "trainer_state.json").read_text())["val_loss"]
    assert start == pytest.approx(math.log(T.MODEL_VOCAB), abs=0.3)  # untrained: ~uniform
    assert res.final_val_loss < start - 1.5  # byte-level text is far from uniform


@pytest.mark.parametrize("bad, message", [
    (dict(models=(T.ModelSpec("m", 30, 1, 4),)), "4 heads do not divide hidden size 30"),
    (dict(models=(T.ModelSpec("m", 12, 1, 4),)), "head size 3 must be even"),
    (dict(models=()), "has no models"),
    (dict(schedule="weekly"), "schedule must be 'pythia' or 'regular'"),
    (dict(warmup=50), "warmup must be within 0..steps"),
])
def test_inconsistent_settings_are_refused(bad, message):
    with pytest.raises(T.TrainingConfigError, match=message):
        suite(**bad)


def test_unknown_preset_and_unknown_keys(tmp_path):
    with pytest.raises(T.TrainingConfigError, match="unknown preset 'huge'.*seed004, smoke, tiny"):
        T.load_suite_config("huge")
    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"name": "x", "models": [], "learning_rate": 1}))
    with pytest.raises(T.TrainingConfigError, match=r"unknown suite settings \['learning_rate'\]"):
        T.load_suite_config(str(f))


def test_presets_match_their_protocols():
    tiny = T.load_suite_config("tiny")
    params = [T.count_parameters(m, tiny) for m in tiny.models]
    assert max(params) / min(params) >= 10
    seed = T.load_suite_config("seed004")
    assert [(m.hidden, m.layers, m.heads) for m in seed.models] == [
        (8, 1, 1), (16, 1, 2), (24, 2, 2), (32, 3, 4), (48, 3, 4)]
    assert (seed.context, seed.batch_size, seed.steps, seed.lr, seed.weight_decay,
            seed.warmup, seed.clip, seed.seed) == (128, 64, 5000, 3e-3, 0.01, 200, 1.0, 42)
    assert len(T.checkpoint_steps(seed.steps, seed.checkpoint_every, seed.schedule)) == 51


def test_the_smoke_preset_is_a_first_look(tmp_path, capsys):
    """Issue 60: two small models, seven checkpoints each, and its plan says so before
    anything is trained (bench/bench_offline_default.py --smoke times it: under 2 min)."""
    from toposig.cli.main import main as toposig

    smoke = T.load_suite_config("smoke")
    params = [T.count_parameters(m, smoke) for m in smoke.models]
    assert len(params) == 2 and min(params) > 5_000 and max(params) < 50_000
    assert T.checkpoint_steps(smoke.steps, smoke.checkpoint_every, smoke.schedule) == [
        0, 50, 100, 150, 200, 250, 300]
    assert toposig(["run", "--preset", "smoke", "--out", str(tmp_path / "out"),
                    "--suite-dir", str(tmp_path / "runs"), "--dry-run"]) == 0
    assert "2 model(s) x 7 checkpoint(s)" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())
    import re
    import shlex

    from toposig.cli.analyze import build_parser as analyze_parser
    from toposig.cli.run import build_parser as run_parser

    page = (Path(__file__).resolve().parents[1] / "docs" / "quickstart.md").read_text(
        encoding="utf-8")  # its block, as written, names this preset and one folder
    block = next(b for b in re.findall(r"```bash\n(.*?)```", page, flags=re.S)
                 if "--preset smoke" in b)
    run_line, analyze_line = [shlex.split(ln)[2:] for ln in block.splitlines() if ln.strip()]
    args = run_parser().parse_args(run_line)
    assert args.preset == "smoke"
    assert analyze_parser().parse_args(analyze_line).results == args.out


def test_corpus_too_short_for_one_batch_is_refused_before_training(tmp_path, monkeypatch):
    short = T.TrainingText(np.zeros(100, np.uint8), np.zeros(50, np.uint8), "test", "x", 150)
    monkeypatch.setattr(T, "load_training_text", lambda frac: short)
    with pytest.raises(T.TrainingConfigError, match="fewer than one batch needs"):
        T.train_suite(suite(), tmp_path, progress=False)
    assert not (tmp_path / "unit").exists()


def test_training_never_uses_the_validation_split(monkeypatch, wikitext_dir):
    asked = []
    real = T.corpus.wikitext_rows
    monkeypatch.setattr(T.corpus, "wikitext_rows", lambda split: asked.append(split) or real(split))
    text = T.load_training_text(0.05)
    assert "validation" not in asked and text.split in ("train", "test")


def test_train_suite_script_reports_bad_preset(capsys):
    assert train_suite.main(["--preset", "huge"]) == 2
    assert "unknown preset 'huge'" in capsys.readouterr().err


def test_run_experiments_preset_trains_then_analyses(tmp_path, wikitext_dir):
    import run_experiments

    preset = tmp_path / "mini.json"
    cfg = suite(name="mini", steps=12, checkpoint_every=6).to_dict()
    preset.write_text(json.dumps(cfg))
    out = tmp_path / "results"
    argv = ["--preset", str(preset), "--suite-dir", str(tmp_path / "runs"), "--out", str(out),
            "--n-texts", "30", "--max-length", "32", "--no-progress"]
    assert run_experiments.main(argv) == 0
    records = json.loads((out / "data" / "all_results.json").read_text())
    assert sorted({r["model_label"] for r in records}) == ["small-a", "small-b"]
    assert [r["step"] for r in records if r["model_label"] == "small-a"] == [0, 1, 2, 4, 6, 12]
    assert all(r["hidden_size"] in (16, 24) and r["perplexity"] > 1 for r in records)
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["training_suite"]["corpus_split"] in ("train", "test")
    assert config["training_suite"]["config"]["name"] == "mini"


def test_preset_and_models_together_are_refused(tmp_path, capsys):
    import run_experiments

    assert run_experiments.main(["--preset", "tiny", "--models", "x",
                                 "--out", str(tmp_path / "o")]) == 2
    assert "leave out --models" in capsys.readouterr().err


def test_a_shipped_presets_name_means_the_preset_whatever_files_are_here(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").write_text("not a preset")
    assert T.load_suite_config("tiny").name == "tiny"
    (tmp_path / "mine.json").write_text(json.dumps({"name": "mine", "models": [
        {"name": "m", "hidden": 8, "layers": 1, "heads": 2}]}))
    assert T.load_suite_config("mine.json").name == "mine"
