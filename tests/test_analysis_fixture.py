"""analyze_results.py end to end on a small committed results folder (tests/fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_report import HEADINGS, ci, pval, rho, table

import analyze_results

FIXTURE = Path(__file__).parent / "fixtures" / "mini_results"
EVERY_FIGURE = {
    # embedding space
    "summary_figure", "topological_evolution", "spectral_evolution", "topology_vs_perplexity",
    "topo_vs_spectral_correlations", "wasserstein_rate", "perplexity_curves",
    # weight space
    "neural_persistence_evolution", "vr_persistence_evolution", "np_vs_loss_scatter",
    # both, and the analysis
    "correlation_heatmap", "training_curves", "controls_summary", "phase_fits",
    "scaling_relationships", "prediction_comparison", "betti_curves", "persistence_diagrams",
    "layer_heatmaps",
}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mini") / "results"
    shutil.copytree(FIXTURE, out)
    assert analyze_results.main(["--results", str(out), "--seed", "0"]) == 0
    return out


def test_every_table_and_figure_is_written(analysed):
    figures = {p.stem for p in (analysed / "plots").glob("*.png")}
    assert figures == EVERY_FIGURE
    for p in (analysed / "plots").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000, p
    md = (analysed / "summary.md").read_text(encoding="utf-8")
    for heading in HEADINGS:
        assert f"### {heading}" in md, heading
    assert "_Absent because" not in md


def test_summary_numbers_equal_statistics_json(analysed):
    md = (analysed / "summary.md").read_text(encoding="utf-8")
    statistics = json.loads((analysed / "data" / "statistics.json").read_text())
    controlled = statistics["controlled"]
    expected = {**controlled["per_model"], "pooled": controlled["pooled"]}
    rows = {r["Model"]: r for r in table(md, HEADINGS[4])}  # Table 2: weight-row H0
    assert set(rows) == set(expected)
    for model, row in rows.items():
        e = expected[model]["weight_h0_total"]
        assert (row["Spearman ρ"], row["p"], row["95% bootstrap CI"], row["Holm p"]) == (
            rho(e["spearman_r"]), pval(e["spearman_p"]), ci(e["ci_low"], e["ci_high"]),
            pval(e["holm_p"]))
    robust = table(md, HEADINGS[-2])  # C1: every feature x model
    assert len(robust) == sum(len(v) for v in expected.values())
    for row in robust:
        e = expected[row["Model"]][row["Feature"].strip("`")]
        assert row["Holm p"] == pval(e["holm_p"])
        assert row["First-diff ρ"] == rho(e["diff_r"])
    scaling = {r["Feature"].strip("`"): r for r in table(md, HEADINGS[9])}  # Table 7
    fit = statistics["scaling"]["fits"]["final_loss"]
    assert scaling["final_loss"]["Exponent b"] == rho(fit["b"])
    assert scaling["final_loss"]["p"] == pval(fit["spearman_p"])
