"""The fifth family, ``interlayer`` (H0 zigzag persistence over the layers): end to end
through run and analyze, from toposig.measure, its numbers against the zigzag computed
from the hidden states directly, and the diff that added it (its own files, and in
shared files only lines that register it)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import causal_lm, pythia_tokenizer

import analyze_results
import run_experiments
import toposig
from toposig.families.interlayer import InterlayerFamily
from toposig.features.zigzag import FEATURE_NAMES, knn_graph, summarize, zigzag_h0
from toposig.model.training import byte_tokenizer
from toposig.run.store import load_arrays

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--no-progress", "--n-texts", "12", "--max-length", "24", "--interlayer-k", "3"]


@pytest.fixture(scope="module")
def measured(tiny_series, wikitext_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("interlayer") / "out"
    args = ["--models", str(tiny_series), "--signatures", "embedding,interlayer",
            "--out", str(out), *FAST]
    assert run_experiments.main(args) == 0
    return out


def test_records_hold_the_barcode_and_its_scalars(measured):
    recs = json.loads((measured / "data" / "all_results.json").read_text())
    assert [r["step"] for r in recs] == [0, 10, 100]
    config = json.loads((measured / "data" / "config.json").read_text())
    assert config["signatures"] == ["embedding", "interlayer"]
    assert config["interlayer_hash"].startswith("i")
    assert config["interlayer_settings"] == {"k": 3, "max_length": 24}
    for r in recs:
        assert r["families"] == ["embedding", "interlayer"]
        assert set(FEATURE_NAMES) <= set(r["features"])
        bars = load_arrays(measured, r["interlayer"]["arrays_file"])["h0_bars"]
        n_layers = len(r["layer_names"])  # the embedding's hidden states: the same ones
        assert bars.shape[1] == 2 and bars.max() <= 2 * n_layers - 2
        assert summarize(bars, n_layers).features() == {
            k: r["features"][k] for k in FEATURE_NAMES}


def test_the_numbers_are_the_zigzag_of_the_hidden_states(tiny_series, tokenizer_file):
    """From toposig.measure; the hidden states taken with a plain forward pass."""
    import torch
    from transformers import GPTNeoXForCausalLM

    texts = [f"text {i}: " + "the quick brown fox jumps over the lazy dog " * (1 + i % 3)
             for i in range(10)]
    model = GPTNeoXForCausalLM.from_pretrained(tiny_series / "step10").eval()
    tok = pythia_tokenizer(tokenizer_file)
    m = toposig.measure(model, tok, texts, families=("interlayer",), progress=False,
                        family_settings={"interlayer": InterlayerFamily(k=1)})
    pooled = []
    with torch.no_grad():
        for t in texts:
            ids = tok(t, return_tensors="pt", truncation=True, max_length=128)
            hidden = model(**ids, output_hidden_states=True).hidden_states
            pooled.append([h[0].mean(0).numpy() for h in hidden])
    clouds = [np.stack([p[layer] for p in pooled]) for layer in range(len(pooled[0]))]
    bars = zigzag_h0([knn_graph(c, 1) for c in clouds])
    assert len(bars) > 1  # not a trivial barcode, which any k would give
    np.testing.assert_array_equal(m.arrays["interlayer"]["h0_bars"], bars)
    assert m.features["zigzag_h0_n_bars"] == len(bars)
    assert "interlayer" in repr(m)


def test_it_is_analysed_with_the_other_families(measured):
    assert analyze_results.main(["--out", str(measured)]) == 0
    stats = json.loads((measured / "data" / "statistics.json").read_text())
    assert "zigzag_h0_n_bars" in json.dumps(stats)
    summary = (measured / "summary.md").read_text()
    assert "inter-layer topology" in summary
    # drawn: its rows in the correlation heatmap and the controls figure
    from toposig.records import Statistics
    from toposig.report.plots import _heatmap_features

    rows = dict(_heatmap_features(Statistics.from_json(stats).correlations))
    assert "zigzag_h0_n_bars" in rows["inter-layer topology"]
    assert (measured / "plots" / "correlation_heatmap.png").is_file()


def test_with_the_embedding_it_is_tabled_and_compared_as_its_kinds_say(measured, tmp_path):
    """Issue 57's defects: the table dropped the family (no zigzag_* columns beside the
    embedding's), and compare judged its diagram statistics as continuous, 50 times
    stricter than the embedding's."""
    import copy

    from toposig.analysis.compare import compare_results
    from toposig.run.compare_folders import load_results_folder

    table = toposig.open(measured).table()
    assert {"zigzag_h0_n_bars", "zigzag_h0_entropy", "layer_knn_overlap"} <= set(table.columns)
    rows = table[table["family"] == "interlayer"]
    assert len(rows) == 3 and rows["zigzag_h0_entropy"].notna().all()
    assert rows["settings_hash"].str.startswith("i").all()
    a = load_results_folder(measured)
    assert compare_results(a, load_results_folder(measured)).differences == []

    def moved(feature: str, relative: float, base=a):
        b = copy.deepcopy(base)
        for rec in [*b.records.values(), *b.aggregates]:
            if feature in rec.get("features", {}):
                rec["features"][feature] = rec["features"][feature] * (1 + relative) + 0.0
        return compare_results(base, b)

    # 3-NN graphs of 12 texts are connected, one bar, whose entropy is 0: moving it moves
    # nothing. The same records with an entropy of 0.7 (several bars) test the tolerance.
    spread = copy.deepcopy(a)
    for rec in [*spread.records.values(), *spread.aggregates]:
        if "zigzag_h0_entropy" in rec.get("features", {}):
            rec["features"]["zigzag_h0_entropy"] = 0.7
    assert moved("zigzag_h0_entropy", 1e-7, spread).differences == []
    # within a diagram statistic's 5e-2, beyond compare's 1e-3 for a continuous feature
    assert moved("zigzag_h0_entropy", 2e-2, spread).differences == []
    assert [d.kind for d in moved("zigzag_h0_entropy", 0.2, spread).differences] == [
        "discontinuous"] * 6
    # the mean span (2 layers here; the entropy of one bar is 0): within a diagram
    # statistic's 5e-2, beyond it in every record and entry (3 + 3)
    assert moved("zigzag_h0_mean_span", 2e-2).differences == []
    assert [d.kind for d in moved("zigzag_h0_mean_span", 0.2).differences] == [
        "discontinuous"] * 6


def test_the_live_monitor_measures_it_while_training(tmp_path):
    from toposig.live.monitor import TopologyMonitor

    model = causal_lm("gpt_neox", seed=0)
    texts = [f"text number {i} " * (1 + i % 4) for i in range(8)]
    monitor = TopologyMonitor(byte_tokenizer(), tmp_path / "live", texts=texts,
                              families=["interlayer"], label="run", progress=False,
                              family_settings={"interlayer": InterlayerFamily(k=1)})
    entry = monitor.measure(model, 0).entry
    monitor.finish()
    assert entry.families == ("interlayer",) and entry.features["zigzag_h0_n_bars"] >= 1
    config = json.loads((tmp_path / "live" / "data" / "config.json").read_text())
    assert config["interlayer_settings"]["k"] == 1


def test_a_bad_k_is_refused_before_any_work(tmp_path, capsys):
    assert run_experiments.main(["--models", str(tmp_path), "--signatures", "interlayer",
                                 "--interlayer-k", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--interlayer-k must be at least 1" in capsys.readouterr().err


def test_measure_runs_it_on_another_architecture():
    m = toposig.measure(causal_lm("gpt2", seed=0), byte_tokenizer(),
                        [f"text number {i} " * (1 + i % 4) for i in range(8)],
                        families=("interlayer",), progress=False)
    assert m.records["interlayer"]["n_layers"] >= 2


def test_it_shares_the_embeddings_forward_pass(monkeypatch):
    """With the embedding family, the texts run through the model once per checkpoint,
    and both families' numbers are those each computes alone."""
    from toposig.model import embedding

    model, texts = causal_lm("gpt2", seed=0), [f"text number {i} " * (1 + i % 4)
                                               for i in range(8)]
    alone = {f: toposig.measure(model, byte_tokenizer(), texts, families=(f,), layers="all",
                                progress=False) for f in ("embedding", "interlayer")}
    calls = []
    real = embedding.forward_pass
    monkeypatch.setattr(embedding, "forward_pass",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    both = toposig.measure(model, byte_tokenizer(), texts, families=("embedding", "interlayer"),
                           layers="all", progress=False)
    assert len(calls) == 1
    for family in ("embedding", "interlayer"):
        mine, own = both.records[family], alone[family].records[family]
        assert {k: v for k, v in mine.items() if k not in ("timings_s", "finished_at")} == \
            {k: v for k, v in own.items() if k not in ("timings_s", "finished_at")}
        for name, array in alone[family].arrays[family].items():
            np.testing.assert_array_equal(both.arrays[family][name], array)


# The files the fifth family owns; in any other file of src/, the commit that added it
# may only add lines that register it (naming it).
OWN = {"src/toposig/features/zigzag.py", "src/toposig/stages/interlayer.py"}
NAMES_IT = re.compile(r"interlayer|INTERLAYER|Interlayer|zigzag|Zigzag")


def added_lines_elsewhere(commit: str) -> list[str]:
    """``path: line`` of each line the commit adds to or removes from ``src/`` outside
    the family's own files that does not name the family."""
    diff = subprocess.run(["git", "show", "--format=", "--unified=0", commit, "--", "src"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return unregistered(diff)


def unregistered(diff: str) -> list[str]:
    out, path = [], None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("--- "):
            continue
        elif path and path not in OWN and line[:1] in "+-" and line[1:].strip() \
                and not NAMES_IT.search(line):
            out.append(f"{path}: {line}")
    return out


def test_the_diff_that_added_it_touches_only_its_own_files():
    found = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "src/toposig/stages/interlayer.py"],
        cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        pytest.skip("no git history here (an installed copy)")
    assert added_lines_elsewhere(found.stdout.split()[-1]) == []


def test_the_diff_check_sees_an_unregistered_line():
    diff = ("+++ b/src/toposig/run/plan.py\n+    x = 1  # a change of its own\n"
            "+++ b/src/toposig/records/vocabulary.py\n+    INTERLAYER = \"interlayer\"\n"
            "+++ b/src/toposig/stages/interlayer.py\n+anything\n")
    assert unregistered(diff) == ["src/toposig/run/plan.py: +    x = 1  # a change of its own"]
