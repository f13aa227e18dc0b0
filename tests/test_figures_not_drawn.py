"""A comparison a study cannot make draws no placeholder figure; the analysis says why."""

from __future__ import annotations

import analyze_results
from toposig.cli.import_tables import main as import_main
from toposig.records import Record
from toposig.report.figures import figures_not_drawn, figures_that_apply
from toposig.run.results_folder import arrays_reader


def test_a_section_holding_only_a_reason_draws_nothing_and_says_why(tmp_path):
    statistics = {"scaling": {"reason": "needs three or more model sizes, found 1"},
                  "prediction": {"per_model": {}}, "controlled": {"per_model": {}}}
    records = [Record.from_json({"model": "m", "model_label": "m", "step": step,
                                 "status": "ok", "loss": 2.0 - step / 1000,
                                 "features": {"np_mean": 0.5 + step / 1000}})
               for step in (0, 10, 100, 1000)]  # checkpoints enough for either figure
    names = [f.name for f in figures_that_apply(records, statistics, arrays_reader(tmp_path))]
    assert "scaling_relationships" not in names
    assert "prediction_comparison" in names and "controls_summary" in names
    assert figures_not_drawn(statistics) == {
        "scaling_relationships": "needs three or more model sizes, found 1"}
    # a damaged section (statistics given as JSON) draws nothing either, and says so
    damaged = {**statistics, "phases": "x", "controlled": {"per_model": "x"}}
    names = [f.name for f in figures_that_apply(records, damaged, arrays_reader(tmp_path))]
    assert "phase_fits" not in names and "controls_summary" not in names
    why = figures_not_drawn(damaged)
    assert why["phase_fits"].startswith("the phases section is damaged: ")
    assert why["controls_summary"].startswith("the controlled section is damaged: ")


def test_the_analysis_lists_the_figures_it_did_not_draw(tmp_path, capsys):
    """A one-model table (imported): no scaling across sizes, nothing to predict from."""
    table = tmp_path / "run.csv"
    rows = ["model,step,loss,my_feature"]
    rows += [f"m,{s},{3.0 - 0.1 * i:.2f},{0.5 + 0.03 * i * (-1) ** i:.3f}"
             for i, s in enumerate((0, 10, 20, 40, 80, 160, 320, 640))]
    table.write_text("\n".join(rows) + "\n")
    folder = tmp_path / "one-model"
    assert import_main([str(table), "--out", str(folder)]) == 0
    (folder / "plots").mkdir(exist_ok=True)
    (folder / "plots" / "scaling_relationships.png").write_bytes(b"an older placeholder")
    assert analyze_results.main(["--out", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "not drawn: scaling_relationships (needs three or more model sizes" in out
    assert "not drawn: prediction_comparison (no neural persistence" in out
    assert not (folder / "plots" / "scaling_relationships.png").exists()
    assert not (folder / "plots" / "prediction_comparison.png").exists()
