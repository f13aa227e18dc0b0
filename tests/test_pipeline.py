"""The three stages end to end on local random-weight series with the real texts and tokenizer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import PROJECT, make_series, neox_config, pythia_tokenizer, save_checkpoint

import analyze_results
import extract_embeddings
import run_experiments
from toposig.analysis.correlations import signature_of
from toposig.model import embedding as embedding_stage
from toposig.run import pipeline
from toposig.run import plan as planning

SEVEN_FIGURES = ["summary_figure", "topological_evolution", "spectral_evolution",
                 "topology_vs_perplexity", "topo_vs_spectral_correlations", "wasserstein_rate",
                 "perplexity_curves"]
FAST = ["--n-texts", "40", "--max-length", "32", "--no-progress"]
VOLATILE = {"timings_s", "finished_at"}


def records_of(out: Path) -> list[dict]:
    return json.loads((out / "data" / "all_results.json").read_text())


def stable(records: list[dict]) -> list[dict]:
    out = []
    for r in records:
        r = {k: v for k, v in r.items() if k not in VOLATILE}
        if "weights" in r:
            r["weights"] = {k: v for k, v in r["weights"].items() if k not in VOLATILE}
        out.append(r)
    return out


@pytest.fixture(scope="module")
def full_run(tiny_series, wikitext_dir, tmp_path_factory):
    """The default protocol (200 WikiText texts, 128 tokens) over the three-checkpoint series."""
    out = tmp_path_factory.mktemp("full_run")
    code = run_experiments.main(["--models", str(tiny_series), "--out", str(out), "--no-progress"])
    return out, code


def test_local_series_runs_end_to_end(full_run, capsys):
    out, code = full_run
    assert code == 0
    recs = records_of(out)
    assert [r["step"] for r in recs] == [0, 10, 100]
    for r in recs:
        assert r["status"] == "ok" and r["source"] == "local"
        assert r["n_texts"] == 200 and r["layer"] == r["num_layers"] == 2
        assert r["n_loss_tokens"] == r["n_input_tokens"] - 200
        assert r["perplexity"] == pytest.approx(np.exp(r["mean_nll"]))
        f = r["features"]
        assert f["h0_n_features"] == 199  # n - 1 finite H0 bars for 200 distinct points
        assert f["h1_n_features"] > 0 and f["pca_components"] == 32  # min(50, n-1, d=32)
        assert r["ph_backend"] in ("giotto-ph", "ripser", "gudhi")
        with np.load(out / r["arrays_file"]) as z:
            assert set(z.files) == {"layer2_h0", "layer2_h1"}
            assert len(z["layer2_h1"]) == f["h1_n_features"]
    per_model = json.loads((out / "data" / "tiny_series0_results.json").read_text())
    assert stable(per_model) == stable(recs)
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["last_run"]["packages"]["torch"] and config["last_run"]["device"] == "cpu"
    assert config["last_run"]["n_computed"] == 3 and config["failures"] == []
    assert config["run_settings"]["n_texts"] == 200 and config["n_texts"] == 200
    assert "n_texts" not in config["settings"]  # the run's, not the embedding's


def test_analysis_writes_statistics_and_the_seven_figures(full_run, capsys):
    out, _ = full_run
    assert analyze_results.main(["--results", str(out)]) == 0
    statistics = json.loads((out / "data" / "statistics.json").read_text())
    corr = statistics["correlations"]
    assert set(corr["per_model"]) == {"tiny_series0"}
    assert corr["pooled"]["h1_total_persistence"]["n"] == 3
    w = statistics["wasserstein"]["tiny_series0"]
    assert [(x["step_from"], x["step_to"]) for x in w] == [(0, 10), (10, 100)]
    assert all(x["h1_wasserstein"] > 0 and x["h1_wasserstein_persim_l2"] >= x["h1_wasserstein"]
               for x in w)
    for name in SEVEN_FIGURES:
        png = out / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "strongest pooled Spearman" in capsys.readouterr().out
    # Three checkpoints of one model: the extra analyses say why they are empty.
    assert statistics["controlled"]["per_model"]["tiny_series0"]["np_mean"]["n"] == 3
    assert "three or more model sizes" in statistics["scaling"]["reason"]
    assert statistics["phases"]["tiny_series0"]["piecewise_log_step"] == {}
    assert set(statistics["prediction"]["fractions"]) == {"0.2", "0.3", "0.5"}


def test_second_run_skips_everything(full_run, tiny_series):
    out, _ = full_run
    before = stable(records_of(out))
    t0 = time.perf_counter()
    plan = planning.plan_run([str(tiny_series)], None, run_experiments_settings([]))
    outcome = pipeline.execute(plan, out, progress=False)
    assert outcome.computed == 0 and outcome.skipped == 3
    assert time.perf_counter() - t0 < 10
    assert stable(records_of(out)) == before


def test_dry_run_prints_the_plan_and_writes_nothing(tiny_series, wikitext_dir, tmp_path,
                                                    capsys, monkeypatch):
    """``--dry-run``: the plan (models x checkpoints x families) and a rough estimate,
    exit 0, no results folder made and no model loaded."""
    from toposig.run import tasks

    def refused(*args, **kwargs):
        raise AssertionError("a dry run loaded a model")

    monkeypatch.setattr(tasks, "load_model", refused)
    monkeypatch.setattr(embedding_stage, "load_model", refused)
    out = tmp_path / "results" / "new"
    code = run_experiments.main(["--models", str(tiny_series), "--out", str(out),
                                 "--dry-run", *FAST])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert not out.exists() and not out.parent.exists()
    assert ("plan: 1 model(s) x 3 checkpoint(s) x 2 families (embedding, weights) = 6 "
            f"measurement(s) of 3 checkpoint(s), into {out}") in printed
    assert "already done (skipped): 0; to compute: 6 (embedding 3, weights 3)" in printed
    assert "estimate: about " in printed and "rough" in printed
    assert "docs/performance.md" in printed and "dry run: nothing was loaded" in printed


def test_a_dry_run_of_a_preset_trains_nothing_and_writes_nothing(tmp_path, capsys):
    """With --preset, the plan comes from the preset's schedule: nothing is trained, and
    neither the suite folder (not even a task's inputs.txt) nor --out is made."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    assert run_experiments.main(["--preset", "grokking", "--suite-dir", str(runs),
                                 "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("plan: 8 model(s) x 41 checkpoint(s) x 2 families")
    assert f"first trains 8 of 8 run(s) into {runs / 'grokking'}" in printed
    assert not runs.exists() and not out.exists()


def test_a_run_prints_its_plan_and_a_dry_run_counts_what_is_done(full_run, tiny_series,
                                                                 capsys):
    """A run prints its plan before it starts; a dry run of a finished folder says every
    checkpoint is done and skipped, with nothing left to estimate, and changes nothing."""
    out, _ = full_run
    before = sorted(p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file())
    capsys.readouterr()
    assert run_experiments.main(["--models", str(tiny_series), "--out", str(out),
                                 "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "already done (skipped): 6; to compute: 0" in printed
    assert "estimate" not in printed
    assert sorted(p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()) == before
    assert run_experiments.main(["--models", str(tiny_series), "--out", str(out),
                                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("plan: 1 model(s) x 3 checkpoint(s) x 2 families")
    assert "already done (skipped): 6; to compute: 0" in printed


def test_a_checkpoint_replaced_in_place_is_analysed_again(tiny_series, wikitext_dir, tmp_path,
                                                          tokenizer_file):
    series = tmp_path / "series"
    shutil.copytree(tiny_series, series)
    args = ["--models", str(series), *FAST, "--out", str(tmp_path / "out")]
    assert run_experiments.main(args) == 0
    before = {r["step"]: r for r in records_of(tmp_path / "out")}
    shutil.rmtree(series / "step10")
    save_checkpoint(series / "step10", neox_config(), pythia_tokenizer(tokenizer_file), seed=99)
    plan = planning.plan_run([str(series)], None, run_experiments_settings(FAST[:-1]))
    outcome = pipeline.execute(plan, tmp_path / "out", progress=False)
    assert (outcome.computed, outcome.skipped) == (1, 2)
    after = {r["step"]: r for r in records_of(tmp_path / "out")}
    assert after[10]["perplexity"] != before[10]["perplexity"]
    assert stable([after[0], after[100]]) == stable([before[0], before[100]])


def run_experiments_settings(extra: list[str]):
    from toposig.cli.options import settings_from_args

    return settings_from_args(run_experiments.build_parser().parse_args(extra))


def test_pythia14m_shaped_model_with_the_real_tokenizer_all_layers(tmp_path, wikitext_dir,
                                                                    tokenizer_file):
    model_dir = save_checkpoint(tmp_path / "pythia-14m-random" / "step0",
                                neox_config(hidden=128, layers=6, heads=4))
    out = tmp_path / "out"
    code = run_experiments.main(["--models", str(model_dir.parent), "--tokenizer",
                                 str(tokenizer_file), "--layers", "all", "--out", str(out),
                                 "--n-texts", "60", "--no-progress"])
    assert code == 0
    (rec,) = records_of(out)
    assert rec["num_layers"] == 6 and rec["hidden_size"] == 128
    assert rec["num_parameters"] == pytest.approx(14_067_712)
    assert sorted(rec["layer_features"], key=int) == [str(i) for i in range(7)]
    embedding = {k: v for k, v in rec["features"].items() if signature_of(k) != "weights"}
    assert rec["layer_features"]["6"] == embedding
    # untrained: perplexity is near the vocabulary size
    assert 5_000 < rec["perplexity"] < 500_000


def test_interrupted_run_resumes_and_matches_an_uninterrupted_one(tiny_series, wikitext_dir,
                                                                   tmp_path, monkeypatch):
    args = ["--models", str(tiny_series), *FAST]
    assert run_experiments.main([*args, "--out", str(tmp_path / "straight")]) == 0

    real = embedding_stage.analyse_checkpoint
    calls = []

    def interrupt_on_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(embedding_stage, "analyse_checkpoint", interrupt_on_second)
    resumed = tmp_path / "resumed"
    assert run_experiments.main([*args, "--out", str(resumed)]) == 130
    # written on the way out: the first checkpoint, and the second's finished weights
    assert [r["families"] for r in records_of(resumed)] == [["embedding", "weights"],
                                                            ["weights"]]
    assert_aggregates_are_the_records(resumed)
    monkeypatch.setattr(embedding_stage, "analyse_checkpoint", real)

    counted = []
    monkeypatch.setattr(embedding_stage, "analyse_checkpoint",
                        lambda *a, **k: counted.append(1) or real(*a, **k))
    assert run_experiments.main([*args, "--out", str(resumed)]) == 0
    assert len(counted) == 2  # only the rest
    for name in ("all_results.json", "tiny_series0_results.json"):
        a = json.loads((tmp_path / "straight" / "data" / name).read_text())
        b = json.loads((resumed / "data" / name).read_text())
        assert stable(a) == stable(b)
    assert_aggregates_are_the_records(resumed)


def assert_aggregates_are_the_records(out: Path) -> None:
    """``all_results.json`` and the per-model files hold exactly the finished records on
    disk, each checkpoint's families merged (checked against the record files directly)."""
    config = json.loads((out / "data" / "config.json").read_text())
    dirs = {"embedding": out / "records" / config["settings_hash"],
            "weights": out / "records" / config["weights_hash"]}
    finished: dict[tuple, dict] = {}
    for family, d in dirs.items():
        for p in d.glob("*/*.json"):
            rec = json.loads(p.read_text())
            if rec["status"] == "ok":
                finished.setdefault((p.parent.name, p.stem), {})[family] = rec
    entries = records_of(out)
    assert sorted((e["model_label"], f"step{e['step']:06d}") for e in entries) == sorted(finished)
    for e in entries:
        recs = finished[(e["model_label"], f"step{e['step']:06d}")]
        assert e["families"] == [f for f in dirs if f in recs]
        emb, w = recs.get("embedding", {}), recs.get("weights", {})
        assert e["features"] == {**emb.get("features", {}), **w.get("features", {})}
        assert {k: v for k, v in e.items() if k in emb and k != "features"} == {
            k: v for k, v in emb.items() if k != "features"}
        if w:
            assert e["weights"]["matrices"] == w["matrices"]
        per_model = json.loads((out / "data" / f"{e['model_label']}_results.json").read_text())
        assert e in per_model


def test_aggregates_are_written_at_start_and_end_and_rebuilt_when_stale(
        tiny_series, wikitext_dir, tmp_path, monkeypatch):
    from toposig.run.store import ResultStore

    writes = []
    real = ResultStore.write_aggregates
    monkeypatch.setattr(ResultStore, "write_aggregates",
                        lambda self, recs, cfg: writes.append(len(recs)) or real(self, recs, cfg))
    out = tmp_path / "out"
    args = ["--models", str(tiny_series), "--out", str(out), *FAST]
    assert run_experiments.main(args) == 0
    assert writes == [0, 3]  # not once per checkpoint
    assert_aggregates_are_the_records(out)
    clean = stable(records_of(out))
    # a run killed before its final write leaves stale aggregates: the next start rebuilds
    (out / "data" / "all_results.json").write_text("[]")
    (out / "data" / "tiny_series0_results.json").unlink()
    writes.clear()
    assert run_experiments.main(args) == 0
    assert writes == [3] and stable(records_of(out)) == clean
    assert_aggregates_are_the_records(out)


def test_killed_process_loses_no_finished_record(tiny_series, wikitext_dir, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, str(PROJECT / "src" / "run_experiments.py"), "--models",
           str(tiny_series), "--out", str(out), *FAST]
    env = dict(os.environ, PYTHONPATH=str(PROJECT / "src"))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob("records/*/*/step000000.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = list(out.glob("records/*/*/*.json"))
    assert finished, "the run was killed before its first record"
    for f in finished:
        assert json.loads(f.read_text())["status"] == "ok"
    assert run_experiments.main(["--models", str(tiny_series), "--out", str(out), *FAST]) == 0
    assert [r["step"] for r in records_of(out)] == [0, 10, 100]
    assert not list(out.glob("records/**/*.tmp"))
    assert_aggregates_are_the_records(out)


# --- bad input ------------------------------------------------------------------------


@pytest.fixture
def damaged_series(tmp_path, tokenizer_file):
    """step0 fine, step1 corrupt weights file, step2 NaN weights, step3 fine."""
    tok = pythia_tokenizer(tokenizer_file)
    root = make_series(tmp_path / "damaged", [0, 1, 2, 3], tok)
    (root / "step1" / "model.safetensors").write_bytes(b"not a safetensors file at all")
    from transformers import GPTNeoXForCausalLM

    nan_model = GPTNeoXForCausalLM.from_pretrained(root / "step2")
    with torch.no_grad():
        nan_model.base_model.layers[0].mlp.dense_4h_to_h.weight.fill_(float("nan"))
    nan_model.save_pretrained(root / "step2")
    return root


def test_failed_checkpoints_are_recorded_and_the_run_goes_on(damaged_series, wikitext_dir,
                                                             tokenizer_file, tmp_path, capsys):
    out = tmp_path / "out"
    code = run_experiments.main(["--models", str(damaged_series), "--out", str(out), *FAST])
    assert code == 1
    assert [r["step"] for r in records_of(out)] == [0, 3]
    failed = {(r["family"], r["step"]): r
              for r in (json.loads(p.read_text()) for p in out.glob("records/*/damaged/*.json"))
              if r["status"] == "failed"}
    assert set(failed) == {("embedding", 1), ("weights", 1), ("embedding", 2), ("weights", 2)}
    assert "non-finite hidden states" in failed["embedding", 2]["error"]
    assert "NaN or infinite weights" in failed["weights", 2]["error"]
    assert failed["embedding", 1]["error"] and failed["weights", 1]["error"]
    summary = capsys.readouterr().out
    assert "FAILED (4)" in summary
    assert "damaged step 1 [weights]" in summary and "damaged step 2 [embedding]" in summary
    config = json.loads((out / "data" / "config.json").read_text())
    assert sorted((f["family"], f["step"]) for f in config["failures"]) == sorted(failed)

    # repaired: the next run retries only the failed checkpoints
    tok = pythia_tokenizer(tokenizer_file)
    for step in (1, 2):
        shutil.rmtree(damaged_series / f"step{step}")
        save_checkpoint(damaged_series / f"step{step}", neox_config(), tok, seed=10 + step)
    plan = planning.plan_run([str(damaged_series)], None, run_experiments_settings(FAST[:-1]))
    outcome = pipeline.execute(plan, out, progress=False)
    assert (outcome.computed, outcome.skipped, outcome.failures) == (2, 2, [])


def test_uncached_hub_checkpoint_offline_is_a_recorded_failure(tiny_series, wikitext_dir,
                                                                tmp_path, monkeypatch, capsys):
    """A revision the cache knows of (its refs) but holds no files for."""
    from toposig.sources import checkpoints

    monkeypatch.setattr(checkpoints, "hub_revision_names",
                        lambda repo, **kw: (["main", "step0", "step1"], "cache"))
    monkeypatch.setattr(planning, "check_hub_access", lambda ckpts: True)
    out = tmp_path / "out"
    code = run_experiments.main(["--models", str(tiny_series), "EleutherAI/pythia-70m",
                                 "--steps", "0", "--out", str(out), *FAST])
    assert code == 1
    assert [r["model_label"] for r in records_of(out)] == ["tiny_series0"]
    assert "pythia-70m step 0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "/no/such/run"], "no such folder: '/no/such/run' (a local path"),
        (["--steps", "7"], "steps [7] are not in local series"),
        (["--n-texts", "2"], "--n-texts must be at least 3, got 2"),
        (["--device", "gpu0"], "--device must be auto, cpu, cuda, cuda:N or mps, got 'gpu0'"),
        (["--steps", "last"], "--steps takes non-negative integers, 'all' or one of"),
        (["--max-length", "1"], "--max-length must be at least 2 tokens, got 1"),
    ],
)
def test_bad_arguments_fail_before_any_work(tiny_series, wikitext_dir, tmp_path, capsys,
                                            argv, message):
    out = tmp_path / "out"
    if "--models" not in argv:
        argv = ["--models", str(tiny_series), *argv]
    assert run_experiments.main([*argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_checkpoint_without_tokenizer_fails_before_any_work(tmp_path, wikitext_dir, capsys):
    save_checkpoint(tmp_path / "run" / "step5", neox_config())
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tmp_path / "run"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hold no tokenizer" in err and "--tokenizer" in err
    assert not out.exists()


def test_short_texts_file_fails_before_any_work(tiny_series, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("one\ntwo\nthree\n")
    out = tmp_path / "out"
    code = run_experiments.main(["--models", str(tiny_series), "--texts", str(texts),
                                 "--out", str(out)])
    assert code == 2
    assert "has 3 non-empty lines, but --n-texts asks for 200" in capsys.readouterr().err
    assert not out.exists()


def test_texts_file_run(tiny_series, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"Sentence number {i} is about topic {i % 7}." for i in range(30)))
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tiny_series), "--texts", str(texts),
                                 "--n-texts", "30", "--steps", "0", "--out", str(out),
                                 "--no-progress"]) == 0
    assert records_of(out)[0]["n_texts"] == 30


def test_extract_embeddings_one_checkpoint(tiny_series, wikitext_dir, tmp_path, capsys):
    code = extract_embeddings.main(["--models", str(tiny_series), "--steps", "10", *FAST[:-1],
                                    "--out", str(tmp_path)])
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["step"] == 10 and rec["features"]["h0_n_features"] == 39
    assert list(tmp_path.glob("records/*/tiny_series0/step000010.json"))
    assert extract_embeddings.main(["--models", str(tiny_series), *FAST[:-1]]) == 2
    assert "choose one with --steps" in capsys.readouterr().err
    # a link where its record's folder goes: one error line, not a traceback (a review)
    linked = tmp_path / "linked"
    (linked / "records").mkdir(parents=True)
    (linked / "records" / next(tmp_path.glob("records/*")).name).symlink_to(tmp_path)
    assert extract_embeddings.main(["--models", str(tiny_series), "--steps", "10",
                                    *FAST[:-1], "--out", str(linked)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a symbolic link inside" in err


@pytest.mark.parametrize("script", ["run_experiments.py", "extract_embeddings.py",
                                    "analyze_results.py"])
def test_every_script_explains_itself(script):
    res = subprocess.run([sys.executable, str(PROJECT / "src" / script), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    assert "usage:" in res.stdout and len(res.stdout) > 400


def test_default_run_without_hub_stops_fast_with_advice(tmp_path, wikitext_dir):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "empty-cache"))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(PROJECT / "src" / "run_experiments.py"),
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert time.perf_counter() - t0 < 60
    assert res.returncode == 2
    assert "cannot reach the Hugging Face Hub" in res.stderr
    assert "EleutherAI/pythia-160m" in res.stderr and "--models path/to/run" in res.stderr


def test_records_and_aggregates_are_compact_and_the_config_indented(tmp_path):
    """Programs read the records and data/*_results.json (compact: the C encoder, one
    line); people read config.json (indented)."""
    series = make_series(tmp_path / "s", [0, 10], None, config=neox_config(hidden=16, vocab=64))
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(series), "--signatures", "weights",
                                 "--no-progress", "--out", str(out)]) == 0
    compact = [*(out / "data").glob("*_results.json"), *(out / "records").rglob("*.json")]
    assert len(compact) == 4  # all_results, the model's, two records
    for path in compact:
        text = path.read_text()
        assert text.count("\n") == 1 and ", " not in text and json.loads(text)
    config = (out / "data" / "config.json").read_text()
    assert config.count("\n") > 20 and json.loads(config)
