"""analyze_results.py end to end on a small committed results folder (tests/fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import records_of
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
    # landscape and gradients
    "loss_probe_evolution", "loss_landscapes",
}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mini") / "results"
    shutil.copytree(FIXTURE, out)
    assert analyze_results.main(["--results", str(out), "--analysis-seed", "0",
                                 "--design-runs", "20"]) == 0
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
        assert (row["Spearman ρ"], row["p"], row["95% CI"], row["Holm p"]) == (
            rho(e["spearman_r"]), pval(e["spearman_p"]), ci(e["ci_low"], e["ci_high"]),
            pval(e["holm_p"]))
    robust = table(md, HEADINGS[11])  # C1: every feature x model
    assert len(robust) == sum(len(v) for v in expected.values())
    for row in robust:
        e = expected[row["Model"]][row["Feature"].strip("`")]
        assert row["Holm p"] == pval(e["holm_p"])
        assert row["First-diff ρ"] == rho(e["diff_r"])
    calibrated = table(md, HEADINGS[14])  # C4: the calibrated tests, their design and power
    assert len(calibrated) == len(robust)
    for row in calibrated:
        e = expected[row["Model"]][row["Feature"].strip("`")]
        assert row["Detrended ρ [95% CI]"].startswith(rho(e["detrended_r"]))
        assert row["Partial-diff Holm p"] == pval(e["pfd_holm_p"])
        check = (e.get("design") or {}).get("detrended")
        if check is None:  # a pooled test undefined: no model calibrated for its design
            assert row["Detrended null rate"] == "—" and e["detrended_r"] is None
            continue
        assert row["Detrended null rate"].startswith(f"{check['null_rate']:.3f}")
        assert ("(uncalibrated)" in row["Detrended null rate"]) == \
            (check["status"] != "calibrated")
    scaling = {r["Feature"].strip("`"): r for r in table(md, HEADINGS[9])}  # Table 7
    fit = statistics["scaling"]["fits"]["final_loss"]
    assert scaling["final_loss"]["Exponent b"] == rho(fit["b"])
    assert scaling["final_loss"]["p"] == pval(fit["spearman_p"])
    stability = table(md, HEADINGS[13])  # C3: changes against the resampling spread
    for row in stability:
        e = statistics["stability"][row["Model"]][row["Feature"].strip("`")]
        assert row["Resolved changes"] == f"{100 * e['resolved_share']:.1f}%"


def test_stability_counts_changes_beyond_the_resampling_noise():
    from toposig.analysis.compute import stability_analysis

    values = [0.0, 0.5, 10.0, 10.2, 30.0]  # changes 0.5, 9.5, 0.2, 19.8 against se = 1
    recs = [{"model_label": "m", "step": i, "features": {"h1_total_persistence": v},
             "features_resampled": {"h1_total_persistence": {"std": 1.0}}}
            for i, v in enumerate(values)]
    e = stability_analysis(records_of(recs))["m"]["h1_total_persistence"]
    assert e["resolved_share"] == 0.5  # 1.96 * sqrt(2) = 2.77: two of four changes exceed it
    assert e["median_se"] == 1.0 and e["range_to_se"] == 30.0 and e["n_pairs"] == 4
    assert stability_analysis(records_of([{**r, "features_resampled": None}
                                          for r in recs])) == {}
