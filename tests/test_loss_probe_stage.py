"""The landscape and gradient families through run_experiments and analyze_results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import pythia_tokenizer

import analyze_results
import run_experiments
from toposig.model import loss_probes
from toposig.model.loss_probes import batch_loss, probe_windows
from toposig.run.store import load_arrays
from toposig.sources.corpus import probe_texts

# Small enough for the test suite: 2 windows of 16 tokens, a 5 x 5 grid, 6 gradients.
FAST = ["--no-progress", "--probe-length", "16", "--landscape-windows", "2",
        "--landscape-res", "5", "--trace-samples", "2", "--gradient-windows", "6",
        "--gradient-dim", "8", "--lanczos-tol", "0.05"]


def records_of(out: Path) -> list[dict]:
    return json.loads((out / "data" / "all_results.json").read_text())


@pytest.fixture(scope="module")
def probed(tiny_series, wikitext_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("probed") / "out"
    args = ["--models", str(tiny_series), "--signatures", "landscape,gradients",
            "--out", str(out), *FAST]
    assert run_experiments.main(args) == 0
    return out, args


def test_records_hold_both_families(probed):
    out, _ = probed
    recs = records_of(out)
    assert [r["step"] for r in recs] == [0, 10, 100]
    for r in recs:
        f = r["features"]
        assert r["families"] == ["landscape", "gradients"]
        assert f["hessian_eig_1"] >= f["hessian_eig_2"]
        assert f["landscape_n_minima"] >= 1 and f["landscape_n_saddles"] == (
            f["landscape_n_minima"] - 1)
        assert f["grad_h0_n_features"] == 5  # 6 points: 5 finite H0 bars
        assert f["grad_norm_mean"] > 0 and -1 <= f["grad_cosine_mean"] <= 1
        assert r["landscape"]["lanczos"]["n_hvp"] > 0
        assert r["landscape"]["settings"]["lanczos_tol"] == 0.05
        grid = load_arrays(out, r["landscape"]["arrays_file"])["grid"]
        assert grid.shape == (5, 5)
        assert grid[2, 2] == pytest.approx(r["landscape"]["probe_loss"])
        g = load_arrays(out, r["gradients"]["arrays_file"])
        assert g["projected"].shape == (6, 8) and g["h0"].shape == (6, 2)  # one bar infinite


def test_the_probed_loss_is_the_checkpoints_loss_on_the_seeded_windows(probed, tiny_series,
                                                                       tokenizer_file):
    from transformers import GPTNeoXForCausalLM

    out, _ = probed
    rec = records_of(out)[1]
    tok = pythia_tokenizer(tokenizer_file)
    ids = probe_windows(tok, probe_texts(None, 100), 2, 16, seed=42)
    model = GPTNeoXForCausalLM.from_pretrained(tiny_series / "step10").eval()
    with torch.no_grad():
        expected = float(model(ids, labels=ids).loss)  # the definition's owner
        assert float(batch_loss(model, ids)) == expected
    assert rec["landscape"]["probe_loss"] == pytest.approx(expected, rel=1e-5)


def test_a_rerun_resumes_and_other_settings_are_new_records(probed, monkeypatch):
    out, args = probed
    monkeypatch.setattr(loss_probes, "analyse_landscape", lambda *a, **k: pytest.fail("redone"))
    monkeypatch.setattr(loss_probes, "analyse_gradients", lambda *a, **k: pytest.fail("redone"))
    assert run_experiments.main(args) == 0
    hashes = {p.name for p in (out / "records").iterdir()}
    assert len(hashes) == 2 and {h[0] for h in hashes} == {"l", "g"}


def test_random_directions_and_the_analysis(probed, tiny_series, tmp_path, capsys):
    out, _ = probed
    other = tmp_path / "random"
    assert run_experiments.main(["--models", str(tiny_series), "--out", str(other),
                                 "--landscape-dirs", "random", "--signatures", "landscape",
                                 *FAST]) == 0
    assert "Hess" in capsys.readouterr().out
    recs = records_of(other)
    assert all("grad_norm_mean" not in r["features"] for r in recs)
    assert analyze_results.main(["--results", str(out)]) == 0
    stats = json.loads((out / "data" / "statistics.json").read_text())
    groups = stats["features"]
    assert "hessian_eig_1" in groups["curvature"]
    assert "landscape_basin_depth" in groups["landscape_topological"]
    assert "grad_h0_total_persistence" in groups["gradient_topological"]
    assert "grad_norm_mean" in groups["gradient_statistics"]
    summary = (out / "summary.md").read_text()
    assert "hessian_trace" in summary and "grad_h1_total_persistence" in summary
    assert (out / "plots" / "loss_landscapes.png").is_file()


@pytest.mark.parametrize("bad, message", [
    (["--landscape-res", "4"], "odd"),
    (["--landscape-dirs", "hessian", "--hessian-k", "1"], "hessian-k"),
    (["--landscape-span", "0"], "positive"),
    (["--lanczos-tol", "1"], "--lanczos-tol"),
    (["--gradient-windows", "2"], "gradient-windows"),
])
def test_bad_probe_settings_are_refused_before_work(tiny_series, tmp_path, capsys, bad,
                                                    message):
    args = ["--models", str(tiny_series), "--signatures", "landscape,gradients",
            "--out", str(tmp_path / "x"), "--no-progress", *bad]
    assert run_experiments.main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_failing_family_is_recorded_and_the_others_finish(tiny_series, wikitext_dir,
                                                            tmp_path, monkeypatch, capsys):
    def broken(*a, **k):
        raise FloatingPointError("3 of 25 loss-surface points are not finite")

    monkeypatch.setattr(loss_probes, "analyse_landscape", broken)
    out = tmp_path / "out"
    args = ["--models", str(tiny_series), "--signatures", "landscape,gradients", "--out",
            str(out), "--steps", "0", *FAST]
    assert run_experiments.main(args) == 1
    assert "[landscape]: FloatingPointError" in capsys.readouterr().out
    config = json.loads((out / "data" / "config.json").read_text())
    assert [f["family"] for f in config["failures"]] == ["landscape"]
    (rec,) = records_of(out)
    assert rec["families"] == ["gradients"] and "grad_norm_mean" in rec["features"]
    monkeypatch.undo()
    assert run_experiments.main(args) == 0  # the failure is retried, the rest resumed
    assert records_of(out)[0]["families"] == ["landscape", "gradients"]
