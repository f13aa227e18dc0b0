"""The weight stage through the pipeline: model-folder and checkpoint-file series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_series, neox_config
from safetensors.torch import load_file

import analyze_results
import run_experiments
from toposig.families.weights import WeightsFamily
from toposig.features import weights
from toposig.model import embedding as embedding_stage
from toposig.model import weight_stage
from toposig.run import tasks
from toposig.run.store import load_arrays

QUIET = ["--no-progress"]
LINEAR_SUFFIXES = ("attention.query_key_value.weight", "attention.dense.weight",
                   "mlp.dense_h_to_4h.weight", "mlp.dense_4h_to_h.weight")


def records_of(out: Path) -> list[dict]:
    return json.loads((out / "data" / "all_results.json").read_text())


@pytest.fixture(scope="module")
def neox_series(tmp_path_factory) -> Path:
    """Three random GPT-NeoX checkpoints (2 layers, hidden 32), no tokenizer."""
    root = tmp_path_factory.mktemp("neox_weights")
    return make_series(root, [0, 50, 100], None, config=neox_config(vocab=300))


@pytest.fixture
def no_texts(tmp_path, monkeypatch):
    """No WikiText anywhere: a stage that needed texts would stop with an error."""
    monkeypatch.setenv("TOPOSIG_DATASETS_DIR", str(tmp_path / "empty"))


def test_weight_stage_on_a_model_folder_series(neox_series, tmp_path, no_texts, capsys):
    out = tmp_path / "out"
    args = ["--models", str(neox_series), "--signatures", "weights", "--out", str(out), *QUIET]
    assert run_experiments.main(args) == 0
    recs = records_of(out)
    assert [r["step"] for r in recs] == [0, 50, 100]
    for r in recs:
        assert r["families"] == ["weights"] and "perplexity" not in r
        names = [m["name"] for m in r["weights"]["matrices"]]
        assert names == [f"gpt_neox.layers.{i}.{s}" for i in range(2) for s in LINEAR_SUFFIXES]
        # Cross-check with the weights read straight from the checkpoint's file.
        tensors = load_file(Path(r["model"]) / r["location"] / "model.safetensors")
        w_max = max(float(tensors[n].abs().max()) for n in names)
        assert r["weights"]["w_max"] == pytest.approx(w_max, rel=1e-7)
        for m in r["weights"]["matrices"]:
            want = weights.neural_persistence(tensors[m["name"]].numpy(), w_max)
            assert m["np_normalized"] == pytest.approx(want["np_normalized"], abs=1e-12)
            assert m["n_rows_used"] == min(200, m["shape"][0])
        f = r["features"]
        assert f["np_mean"] == pytest.approx(
            np.mean([m["np_normalized"] for m in r["weights"]["matrices"]]))
        arrays = load_arrays(out, r["weights"]["arrays_file"])
        assert set(arrays) == {f"{n}:h{q}" for n in names for q in (0, 1)}
        assert r["num_parameters"] > 0
    # The checkpoints are independent random draws: NP differs between them.
    assert len({r["features"]["np_mean"] for r in recs}) == 3
    summary = capsys.readouterr().out
    assert "NP mean" in summary and "perplexity" not in summary

    calls = []
    real = weight_stage.analyse_weights
    weight_stage.analyse_weights = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        assert run_experiments.main(args) == 0  # resumes: nothing recomputed
        assert calls == []
        assert run_experiments.main([*args, "--force"]) == 0
        assert len(calls) == 3
    finally:
        weight_stage.analyse_weights = real
    # issue 57: a weights-only run carries no embedding settings (the run's own apart)
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["settings"] is None and config["settings_hash"] is None
    assert config["weight_settings"] and config["weights_hash"].startswith("w")
    own = {"layers", "pca_dim"}  # the embedding's own settings (the rest are the run's)
    assert not [k for k, v in config.items() if isinstance(v, dict) and own & set(v)]


def test_settings_are_built_once_and_only_for_the_families_asked_for(neox_series, tmp_path,
                                                                   no_texts, monkeypatch):
    """Issue 57: every family's settings were built and validated twice a run, the ones
    not asked for too; a resumed run built the defaults again for each record it read."""
    from collections import Counter

    from toposig import config as cfg

    built: Counter[str] = Counter()
    real = cfg.Settings.__post_init__

    def counting(self):
        built[type(self).__name__] += 1
        return real(self)

    monkeypatch.setattr(cfg.Settings, "__post_init__", counting)
    args = ["--models", str(neox_series), "--signatures", "weights", "--out",
            str(tmp_path / "out"), *QUIET]
    assert run_experiments.main(args) == 0
    assert built == {"RunSettings": 1, "WeightsFamily": 1}
    built.clear()
    assert run_experiments.main(args) == 0  # resumed: three finished records read
    assert built == {"RunSettings": 1, "WeightsFamily": 1}

def test_include_exclude_and_bad_patterns(neox_series, tmp_path, no_texts, capsys):
    out = tmp_path / "out"
    base = ["--models", str(neox_series), "--signatures", "weights", "--out", str(out), *QUIET]
    assert run_experiments.main([*base, "--weight-include", "mlp", "--weight-exclude",
                                 "4h_to_h"]) == 0
    hashes = {r["weights"]["settings_hash"] for r in records_of(out)}
    assert hashes == {WeightsFamily(include=("mlp",), exclude=("4h_to_h",)).hash_of(None,
                                                                                   "float32")}
    assert hashes != {WeightsFamily().hash_of(None, "float32")}
    names = [m["name"] for m in records_of(out)[0]["weights"]["matrices"]]
    assert names == [f"gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight" for i in range(2)]
    other = tmp_path / "embeddings"  # other weight settings: a study of their own
    assert run_experiments.main([*base, "--weight-include", "embed_in"]) == 2
    assert "holds weights records made with settings hash" in capsys.readouterr().err
    assert run_experiments.main([*base, "--weight-include", "embed_in", "--out",
                                 str(other)]) == 0
    assert [m["name"] for m in records_of(other)[0]["weights"]["matrices"]] == [
        "gpt_neox.embed_in.weight"]
    assert run_experiments.main([*base, "--weight-include", "(unclosed"]) == 2
    assert "not a regular expression" in capsys.readouterr().err
    assert run_experiments.main([*base, "--signatures", "weights,spectra"]) == 2


def test_one_load_serves_both_families(tiny_series, wikitext_dir, tmp_path, monkeypatch):
    loads = []
    real = tasks.load_model
    monkeypatch.setattr(tasks, "load_model",
                        lambda *a, **k: loads.append(a[0].step) or real(*a, **k))
    out = tmp_path / "out"
    args = ["--models", str(tiny_series), "--out", str(out), "--n-texts", "40",
            "--max-length", "32", *QUIET]
    assert run_experiments.main(args) == 0
    assert loads == [0, 10, 100]
    for r in records_of(out):
        assert r["families"] == ["embedding", "weights"]
        assert r["perplexity"] > 1 and "h1_n_features" in r["features"]
        assert "np_mean" in r["features"] and r["weights"]["n_matrices"] == 8
    # Adding the weights to an embedding-only run computes only the weights.
    out2 = tmp_path / "out2"
    assert run_experiments.main([*args[:-1], "--out", str(out2), "--signatures", "embedding",
                                 *QUIET]) == 0
    emb = json.loads((out2 / "data" / "all_results.json").read_text())
    assert all(r["families"] == ["embedding"] for r in emb)
    monkeypatch.setattr(embedding_stage, "analyse_checkpoint",
                        lambda *a, **k: pytest.fail("redone"))
    assert run_experiments.main([*args[:-1], "--out", str(out2), *QUIET]) == 0
    both = records_of(out2)
    assert [r["perplexity"] for r in both] == [r["perplexity"] for r in emb]
    assert all("np_mean" in r["features"] for r in both)


@pytest.fixture
def pt_series(tmp_path) -> Path:
    """A hand-written training loop's checkpoints: an MLP whose weights grow, losses stored,
    in every file style, plus one damaged file."""
    root = tmp_path / "mlp_run"
    root.mkdir()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5))
    styles = [
        ("step_000000.pt", lambda sd, loss: {"model_state_dict": sd, "loss": loss}),
        ("step_000100.pt", lambda sd, loss: {"state_dict": sd, "val_loss": torch.tensor(loss)}),
        ("epoch=1-step=200.ckpt", lambda sd, loss: {"state_dict": sd, "val_loss": loss}),
        ("ckpt-300.pth", lambda sd, loss: {"model": sd, "loss": loss}),
        ("ckpt-400.bin", lambda sd, loss: {"model": sd, "loss": loss}),
    ]
    for i, (name, wrap) in enumerate(styles):
        with torch.no_grad():
            net[0].weight[: 8 * (i + 1)] *= 1.5  # more and more rows stand out
        torch.save(wrap(net.state_dict(), 3.0 - 0.5 * i), root / name)
    (root / "step_000500.pt").write_bytes(b"truncated")
    return root


def test_a_folder_of_pt_files_end_to_end(pt_series, tmp_path, no_texts, capsys):
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(pt_series), "--out", str(out), *QUIET]) == 1
    recs = records_of(out)
    assert [r["step"] for r in recs] == [0, 100, 200, 300, 400]
    assert [r["loss"] for r in recs] == [3.0, 2.5, 2.0, 1.5, 1.0]
    assert [r["loss_key"] for r in recs] == ["loss", "val_loss", "val_loss", "loss", "loss"]
    assert all(r["weights"]["n_matrices"] == 2 for r in recs)
    config = json.loads((out / "data" / "config.json").read_text())
    assert [(f["step"], f["family"]) for f in config["failures"]] == [(500, "weights")]
    assert "is damaged or not a PyTorch checkpoint" in config["failures"][0]["error"]
    assert "FAILED (1)" in capsys.readouterr().out

    assert analyze_results.main(["--results", str(out)]) == 0
    stats = json.loads((out / "data" / "statistics.json").read_text())
    assert stats["target"] == "loss"
    assert stats["correlations"]["pooled"]["weight_max_abs"]["spearman_r"] == pytest.approx(-1)
    assert set(stats["weight_wasserstein"]["mlp_run"][0]) >= {
        "step_from", "step_to", "weight_h0_wasserstein", "weight_h1_wasserstein"}
    figures = sorted(p.stem for p in (out / "plots").glob("*.png"))
    assert figures == ["controls_summary", "correlation_heatmap",
                       "neural_persistence_evolution", "np_vs_loss_scatter",
                       "prediction_comparison", "training_curves",
                       "vr_persistence_evolution"]  # one model: no scaling figure
    # five checkpoints: too few for a three-segment phase fit, and said so
    assert "not drawn: phase_fits (needs 6 or more checkpoints" in capsys.readouterr().out
    assert analyze_results.main(["--results", str(out), "--target", "perplexity"]) == 2


def test_embedding_on_plain_files_is_refused_before_work(pt_series, tmp_path, capsys):
    code = run_experiments.main(["--models", str(pt_series), "--signatures", "embedding,weights",
                                 "--out", str(tmp_path / "o"), *QUIET])
    assert code == 2
    assert "hold weights only" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_heavy_tail_baselines_in_records_and_older_records_are_recomputed(
        neox_series, tmp_path, no_texts, caplog):
    """Each matrix carries weightwatcher's metrics, the checkpoint their means; a weight
    record written before they existed is computed again, the others are reused."""
    from toposig.features import heavy_tail

    out = tmp_path / "out"
    args = ["--models", str(neox_series), "--signatures", "weights", "--out", str(out), *QUIET]
    assert run_experiments.main(args) == 0
    rec = records_of(out)[0]
    tensors = load_file(Path(rec["model"]) / rec["location"] / "model.safetensors")
    alphas = []
    for m in rec["weights"]["matrices"]:
        want = heavy_tail.heavy_tail_features(tensors[m["name"]].numpy())
        assert m["ww_pl_alpha"] == pytest.approx(want["ww_pl_alpha"], rel=1e-12)
        assert m["spectral_norm"] == pytest.approx(want["spectral_norm"], rel=1e-12)
        assert "frobenius_norm" not in m  # it is l2_norm
        alphas.append(want["ww_pl_alpha"])
    assert rec["features"]["weight_alpha_mean"] == pytest.approx(np.mean(alphas), rel=1e-12)
    for name in ("weight_alpha_weighted_mean", "weight_spectral_norm_mean",
                 "weight_stable_rank_mean"):
        assert np.isfinite(rec["features"][name])

    # Make step 50's record look like one written before the baselines existed.
    files = sorted((out / "records").glob("*/*/step000050.json"))
    assert len(files) == 1
    old = json.loads(files[0].read_text())
    for name in ("weight_alpha_mean", "weight_alpha_weighted_mean",
                 "weight_spectral_norm_mean", "weight_stable_rank_mean"):
        del old["features"][name]
    files[0].write_text(json.dumps(old))
    calls = []
    real = weight_stage.analyse_weights
    weight_stage.analyse_weights = (lambda ckpt, *a, **k: calls.append(ckpt.step)
                                    or real(ckpt, *a, **k))
    try:
        with caplog.at_level("INFO", logger="toposig.run.store"):
            assert run_experiments.main(args) == 0
    finally:
        weight_stage.analyse_weights = real
    assert calls == [50]
    assert "predates weight_spectral_norm_mean" in caplog.text
    again = records_of(out)
    assert "weight_alpha_mean" in again[1]["features"]
    assert again[1]["features"] == records_of(out)[1]["features"]
    assert json.loads(files[0].read_text())["features"]["weight_alpha_mean"] == pytest.approx(
        again[1]["features"]["weight_alpha_mean"])
