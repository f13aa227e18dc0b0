"""results/summary.md: every table present (or a note saying why not), numbers equal to the
statistics they were taken from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import records_of

from toposig.analysis.compute import compute_statistics
from toposig.analysis.correlations import by_model
from toposig.report import summary as report
from toposig.run.results_folder import arrays_reader
from toposig.run.store import atomic_write_json

DATA = Path(__file__).resolve().parents[1] / "results" / "data"

HEADINGS = (
    "A1. Training trajectories",
    "A2. Cross-model comparison at the final checkpoint",
    "A3. Topological vs spectral features: correlation with the target",
    "Table 1. Model configurations",
    "Table 2. Weight-row H0 total persistence vs loss",
    "Table 3. Mean neural persistence vs loss",
    "Table 4. Weight-row H1 total persistence vs loss",
    "Table 5. Final-loss prediction from early checkpoints",
    "Table 6. Phase transitions",
    "Table 7. Scaling of final-checkpoint features with model size",
    "Table 8. Weight-feature trajectory of the largest model",
    "C1. Robustness of every feature's correlation",
    "C2. Features that survive every control",
    "C3. Stability of the embedding topology over text resamples",
    "C4. Calibrated tests: intervals, calibration on each run's design, power",
    "D1. Curvature, loss-landscape and gradient features vs the target",
    "D2. Final-loss prediction from early checkpoints, feature by feature",
)
"""Every summary's tables, in the order of their parts (the tests index them so)."""

LONG = (HEADINGS[0], HEADINGS[11], HEADINGS[14])  # A1, C1, C4: a row per checkpoint or test
PRINTED = (*(h for h in HEADINGS if h not in LONG), *LONG)
"""The order the summary prints them in: the long tables last, in an appendix."""


# ------------------------------------------------------------------ formats, written out
# independently of the module: the test fails if report.py changes a format silently.

def rho(x) -> str:
    return "—" if x is None else f"{x:+.3f}"


def pval(x) -> str:
    return "—" if x is None else f"{x:.2g}"


def ci(lo, hi) -> str:
    return "—" if lo is None or hi is None else f"[{lo:+.3f}, {hi:+.3f}]"


# ------------------------------------------------------------------ parsing the markdown

def sections(md: str) -> dict[str, str]:
    """``### heading`` -> the text up to the next ``##``/``###`` heading."""
    out = {}
    for block in re.split(r"^(?=#{2,3} )", md, flags=re.M):
        m = re.match(r"### (.+)\n", block)
        if m:
            out[m.group(1).strip()] = block[m.end():]
    return out


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every markdown table in ``text`` as a list of {header: cell} rows."""
    found, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append([c.strip().replace("\\|", "|")
                            for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
            continue
        if current:
            header, _sep, *rows = current
            assert set("".join(_sep)) <= {"-", ":"}, _sep
            assert all(len(r) == len(header) for r in rows), header
            found.append([dict(zip(header, r, strict=True)) for r in rows])
            current = []
    return found


def table(md: str, heading: str, index: int = 0) -> list[dict[str, str]]:
    return tables(sections(md)[heading])[index]


# ------------------------------------------------------------------ inputs

@pytest.fixture(scope="module")
def real() -> tuple[dict, list[dict], str]:
    statistics = json.loads((DATA / "statistics.json").read_text(encoding="utf-8"))
    records = json.loads((DATA / "all_results.json").read_text(encoding="utf-8"))
    return statistics, records, report.summary_markdown(statistics, records)


def weight_records(steps=(0, 10, 20, 50, 100, 200, 400, 600, 800, 1000), seed=0) -> list[dict]:
    """Weights-only records (no arrays, no perplexity): 3 models x 10 checkpoints."""
    rng = np.random.default_rng(seed)
    out = []
    for m, (label, hidden, layers) in enumerate([("w-h8", 8, 1), ("w-h16", 16, 2),
                                                 ("w-h32", 32, 2)]):
        for step in steps:
            t = float(np.log1p(step) / np.log1p(max(steps)))
            noise = lambda s: float(s * rng.normal())  # noqa: E731
            out.append({
                "model": f"runs/{label}", "model_label": label, "step": step, "status": "ok",
                "loss": 5.5 - (3 + 0.3 * m) * t + noise(0.03),
                "num_parameters": 1000 * 4**m, "num_layers": layers, "hidden_size": hidden,
                "features": {
                    "np_mean": 0.4 + 0.4 * t + noise(0.02), "np_std": 0.05 + noise(0.005),
                    "np_seed_mean": 0.3 + 0.2 * t + noise(0.02),
                    "weight_h0_total": 100 * (m + 1) * (1 + t) + noise(1),
                    "weight_h1_total": 2 + 3 * t + noise(0.3),
                    "weight_l2_norm": 10 + 5 * t + m + noise(0.1),
                    "hessian_eig_1": 50 * (1 + t) + noise(2), "hessian_trace": 400 * t + noise(9),
                    "landscape_basin_depth": 3 + t + noise(0.2),
                    "grad_h0_total_persistence": 30 - 10 * t + noise(1),
                    "grad_norm_mean": 5 - 2 * t + noise(0.1),
                },
            })
    return out


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[dict, list[dict], str]:
    records = weight_records()
    folder = tmp_path_factory.mktemp("results")
    statistics = compute_statistics(records, n_bootstrap=200, arrays=arrays_reader(folder))
    atomic_write_json(folder / "statistics.json", statistics, root=folder)  # as from disk
    statistics = json.loads((folder / "statistics.json").read_text(encoding="utf-8"))
    return statistics, records, report.summary_markdown(statistics, records)


# ------------------------------------------------------------------ structure

def assert_every_heading(md: str) -> dict[str, str]:
    found = sections(md)
    assert list(found) == list(PRINTED)
    assert tuple(report.HEADINGS) == PRINTED
    for heading, body in found.items():
        assert tables(body) or "Absent because" in body or heading.startswith("C2"), heading
    return found


def test_real_run_renders_every_table(real):
    statistics, records, md = real
    found = assert_every_heading(md)
    assert "Absent because" not in md
    for heading in HEADINGS:
        if not heading.startswith("C2"):  # C2 is a paragraph
            assert tables(found[heading]), heading
    # one trajectory table per model, one row per checkpoint
    trajectories = tables(found[HEADINGS[0]])
    groups = by_model(records_of(records))
    assert len(trajectories) == len(groups) == len(statistics["models"])
    for rows, recs in zip(trajectories, groups.values(), strict=True):
        assert [r["Step"] for r in rows] == [str(rec.json["step"]) for rec in recs]
        assert [r["Loss"] for r in rows] == [f"{rec.json['loss']:.4f}" for rec in recs]
    assert "Pythia-14m" in found[HEADINGS[10]]
    assert md.endswith("\n") and "\n\n\n" not in md


def test_real_seed_paper_numbers_equal_the_statistics(real):
    statistics, _, md = real
    controlled = statistics["controlled"]
    for heading, feature in ((HEADINGS[4], "weight_h0_total"), (HEADINGS[6], "weight_h1_total")):
        rows = {r["Model"]: r for r in table(md, heading)}
        expected = {**controlled["per_model"], "pooled": controlled["pooled"]}
        assert set(rows) == set(expected)
        for model, row in rows.items():
            e = expected[model][feature]
            assert e["target"] == "loss"
            assert row["Spearman ρ"] == rho(e["spearman_r"])
            assert row["p"] == pval(e["spearman_p"])
            assert row["95% CI"] == ci(e["ci_low"], e["ci_high"])
            assert row["Holm p"] == pval(e["holm_p"])
            assert row["n"] == str(e["n"])
    np_rows = table(md, HEADINGS[5])
    assert {r["NP variant"].split()[0] for r in np_rows} == {"`np_mean`", "`np_seed_mean`"}
    for row in np_rows:
        feature = row["NP variant"].split()[0].strip("`")
        e = (controlled["pooled"] if row["Model"] == "pooled"
             else controlled["per_model"][row["Model"]])[feature]
        assert (row["Spearman ρ"], row["p"]) == (rho(e["spearman_r"]), pval(e["spearman_p"]))

    fits = statistics["scaling"]["fits"]
    scaling_rows = table(md, HEADINGS[9])
    assert [r["Feature"].strip("`") for r in scaling_rows] == list(fits)
    for row in scaling_rows:
        fit = fits[row["Feature"].strip("`")]
        assert row["Exponent b"] == rho(fit["b"])
        assert row["R²"] == f"{fit['r2']:.3f}"
        assert row["Spearman ρ"] == rho(fit["spearman_r"])
        assert row["p"] == pval(fit["spearman_p"])

    fractions = statistics["prediction"]["fractions"]
    pred_rows = table(md, HEADINGS[7])
    assert len(pred_rows) == len(fractions)
    for row, fr in zip(pred_rows, fractions.values(), strict=True):
        for method, value in fr["mae"].items():
            assert row[f"{method} MAE"] == (report.fmt_loss(None) if value is None
                                            else f"{value:.4f}")
        assert row["combined vs loss_only"] == \
            f"{100 * fr['improvement_over_loss_only']['combined']:+.1f}%"

    phase_rows = {r["Model"]: r for r in table(md, HEADINGS[8])}
    for model, ph in statistics["phases"].items():
        roc = ph["np_rate_of_change"]
        assert phase_rows[model]["Peak |ΔNP| step"] == str(round(roc["peak_step"]))
        assert phase_rows[model]["Diminishing-returns step"] == \
            str(round(roc["diminishing_step"]))
        assert phase_rows[model]["Diminishing fraction"] == \
            f"{100 * roc['diminishing_fraction']:.1f}%"
    breakpoints = table(md, HEADINGS[8], index=1)
    for row in breakpoints:
        fit = statistics["phases"][row["Model"]]["piecewise_log_step"][row["Feature"].strip("`")]
        assert row["Breakpoint steps"] == ", ".join(str(round(b))
                                                    for b in fit["breakpoint_steps"])
        assert row["R²"] == f"{fit['r2']:.3f}"


def test_real_seed_report_and_robustness_numbers_equal_the_statistics(real):
    statistics, _, md = real
    corr = statistics["correlations"]
    for row in table(md, HEADINGS[2]):
        feature = row["Feature"].strip("`")
        for model, per in corr["per_model"].items():
            c = per[feature]
            assert row[f"{model} ρ (p)"] == f"{rho(c['spearman_r'])} ({pval(c['spearman_p'])})"
        c = corr["pooled"][feature]
        assert row["pooled ρ (p)"] == f"{rho(c['spearman_r'])} ({pval(c['spearman_p'])})"

    final = {r["Model"]: r for r in table(md, HEADINGS[1])}
    for model, m in statistics["models"].items():
        assert final[model]["Final loss"] == f"{m['final_loss']:.4f}"
        assert final[model]["Parameters"] == f"{m['num_parameters']:,}"

    controlled = statistics["controlled"]
    rows = table(md, HEADINGS[11])
    assert len(rows) == controlled["n_tests"]
    for row in rows:
        feature = row["Feature"].strip("`")
        e = (controlled["pooled"] if row["Model"] == "pooled"
             else controlled["per_model"][row["Model"]])[feature]
        assert row["Holm p"] == pval(e["holm_p"])
        assert row["Partial Holm p"] == pval(e["partial_holm_p"])
        assert row["First-diff ρ"] == rho(e["diff_r"])
        assert row["First-diff Holm p"] == pval(e["diff_holm_p"])
        if e["partial_r"] is None:
            assert row["Partial r"].startswith("undefined: ")
        else:
            assert row["Partial r"] == rho(e["partial_r"])
        if e["spearman_r"] is not None:
            assert row["ρ [95% CI]"].startswith(rho(e["spearman_r"]))
        survived = [k for k, v in e["significant"].items() if v]
        assert (row["Survives"] == "none") == (not survived)

    summary = controlled["summary"]
    robust = [f for f, s in summary.items() if s["n_models"] and s["all_controls"] == s["n_models"]]
    sentence = sections(md)[HEADINGS[12]]
    expected = ", ".join(f"`{f}`" for f in robust) if robust else "none"
    assert f"Features significant in every model under all controls: {expected}." in sentence


# ------------------------------------------------------------------ synthetic weights-only run

def test_synthetic_weights_only_run(synthetic):
    statistics, records, md = synthetic
    found = assert_every_heading(md)
    assert statistics["target"] == "loss"
    assert "Absent because" in found[HEADINGS[2]]  # no embedding features
    for heading in (*HEADINGS[:2], *HEADINGS[3:12]):
        assert tables(found[heading]), heading
    config = {r["Model"]: r for r in table(md, HEADINGS[3])}
    assert config["w-h32"]["Hidden"] == "32" and config["w-h16"]["Layers"] == "2"
    for row in table(md, HEADINGS[4]):
        e = (statistics["controlled"]["pooled"] if row["Model"] == "pooled"
             else statistics["controlled"]["per_model"][row["Model"]])["weight_h0_total"]
        assert (row["Spearman ρ"], row["p"], row["Holm p"]) == \
            (rho(e["spearman_r"]), pval(e["spearman_p"]), pval(e["holm_p"]))
    fits = statistics["scaling"]["fits"]
    for row in table(md, HEADINGS[9]):
        assert row["Exponent b"] == rho(fits[row["Feature"].strip("`")]["b"])
    largest = table(md, HEADINGS[10])
    assert "`w-h32`" in found[HEADINGS[10]]
    w32 = by_model(records_of(records))["w-h32"]
    assert [r["NP mean"] for r in largest] == \
        [f"{rec.json['features']['np_mean']:.4g}" for rec in w32]


def test_loss_probe_tables_equal_the_statistics(synthetic):
    statistics, _, md = synthetic
    rows = {r["Feature"].strip("`"): r for r in table(md, HEADINGS[15])}
    assert list(rows) == ["hessian_eig_1", "hessian_trace", "landscape_basin_depth",
                          "grad_h0_total_persistence", "grad_norm_mean"]
    assert rows["landscape_basin_depth"]["Family"] == "landscape topology"
    controlled = statistics["controlled"]
    for f, row in rows.items():
        assert row["Target"] == "loss"
        for m, e in controlled["per_model"].items():
            assert row[f"{m} ρ (Holm p)"] == f"{rho(e[f]['spearman_r'])} ({pval(e[f]['holm_p'])})"
        assert controlled["pooled"][f]["baseline"] == {
            "landscape_basin_depth": "hessian_trace",
            "grad_h0_total_persistence": "grad_norm_mean"}.get(f)
    by_feature = statistics["prediction_by_feature"]
    assert set(by_feature) == {"np_mean", "weight_h0_total", "hessian_eig_1", "hessian_trace",
                               "landscape_basin_depth", "grad_h0_total_persistence",
                               "grad_norm_mean"}
    pred = table(md, HEADINGS[16])
    assert len(pred) == 3 * len(by_feature)
    for row in pred:
        fr = by_feature[row["Feature"].strip("`")][str(float(row["Train fraction"][:-1]) / 100)]
        assert row["topology_only MAE"] == f"{fr['mae']['topology_only']:.4f}"
        assert row["ridge MAE"] == report.fmt_loss(fr["mae"]["ridge"])  # None (few models): -
    # with neural persistence as the feature, table D2 repeats table 5
    np_rows = [r for r in pred if r["Feature"] == "`np_mean`"]
    assert [r["combined MAE"] for r in np_rows] == \
        [r["combined MAE"] for r in table(md, HEADINGS[7])]


# ------------------------------------------------------------------ missing sections

@pytest.mark.parametrize("statistics", [
    {},
    {"target": "loss", "scaling": {"reason": "needs three or more model sizes, found 1"},
     "prediction": {"reason": "no neural persistence or H1 feature to predict from"},
     "phases": {}, "controlled": {"per_model": {}, "pooled": {}, "summary": {}}},
    {"models": {"m": {"num_parameters": None}}, "correlations": {"per_model": {}},
     "controlled": "not a mapping", "phases": {"m": None}, "scaling": {"fits": {}},
     "prediction": {"fractions": {"0.2": {}}}},
])
def test_missing_or_broken_sections_give_notes(statistics):
    md = report.summary_markdown(statistics, [])
    found = assert_every_heading(md)
    assert "Absent because" in found[HEADINGS[0]]
    if isinstance(statistics.get("scaling"), dict) and statistics["scaling"].get("reason"):
        assert "needs three or more model sizes, found 1" in found[HEADINGS[9]]
        assert "no neural persistence or H1 feature" in found[HEADINGS[7]]


def test_partial_sections_with_one_model(synthetic):
    statistics, records, _ = synthetic
    one = [r for r in records if r["model_label"] == "w-h8"]
    stats_one = {k: v for k, v in statistics.items() if k not in ("phases", "prediction")}
    stats_one["scaling"] = {"reason": "needs three or more model sizes, found 1"}
    md = report.summary_markdown(stats_one, one)
    found = assert_every_heading(md)
    assert "needs three or more model sizes" in found[HEADINGS[9]]
    assert "no `phases` section" in found[HEADINGS[8]]
    assert tables(found[HEADINGS[10]])  # the only model is the largest


# ------------------------------------------------------------------ helpers and the writer

def test_formats_and_short_reasons():
    assert report.fmt_step(99.99999999999997) == "100"
    assert report.fmt_step(143000.0) == "143000"
    assert report.fmt_step(None) == "—"
    assert report.fmt_count(51.0) == "51" and report.fmt_count(2.5) == "2.5"  # a median
    assert report.fmt_count(float("nan")) == "—"
    assert report.fmt_rho(-0.59) == "-0.590" and report.fmt_p(5.2e-06) == "5.2e-06"
    assert report.fmt_ci(-0.796, -0.35) == "[-0.796, -0.350]"
    assert report.fmt_value(59994.03) == "59994.0" and report.fmt_value(4.5512) == "4.551"
    assert report.short_reason("the target is a monotone function of the step: no ...") == \
        "target monotone in step"
    assert report.short_reason(None) == "too few points"


def test_write_summary_writes_the_markdown_atomically(tmp_path, synthetic):
    statistics, records, md = synthetic
    from toposig.analyze import write_summary

    path = write_summary(tmp_path / "results", statistics, records)
    assert path == tmp_path / "results" / "summary.md"
    assert path.read_text(encoding="utf-8") == md
    assert [p.name for p in path.parent.iterdir()] == ["summary.md"]  # no temporary left


def test_part_titles_say_what_the_study_is(real, synthetic):
    """Issue 37, row 11: a user's own run opened with "Part A. Seed report tables (...
    Pythia checkpoints)": the titles named the seeds' studies, not this one."""
    for _, _, md in (real, synthetic):
        parts = [line for line in md.splitlines() if line.startswith("## Part ")]
        assert "## Part A. Embedding-space topology over training" in parts
        assert "## Part B. Weight-space topology over training" in parts
        assert not any("Seed report" in p or "Seed paper" in p for p in parts)
        assert "reproduced from this run" not in md
        assert md.count("computed for the models of this study") == 2


def test_a_model_too_short_to_test_is_said_once_and_marked(real):
    """Issue 37, row 10: with 3 checkpoints every rho is +-1 with p = 0.33, and nothing
    said the run was too short to test."""
    from conftest import records_of

    from toposig.analysis.compute import compute_statistics

    entries = [{"model_label": "m", "step": s, "perplexity": 10 - s / 10,
                "features": {"f": s + s % 7}} for s in (0, 10, 20)]
    entries += [{"model_label": "n", "step": s, "perplexity": 10 - s / 10,
                 "features": {"f": float(s)}} for s in range(0, 80, 10)]
    records = records_of(entries)
    md = report.summary_markdown(compute_statistics(records, design_runs=0), records)
    assert "Models (2): `m` (3 checkpoints: too short to test), `n`." in md
    assert md.count("Too short to test within a model: `m`. With 3 checkpoints the "
                    "smallest p an exact Spearman test can give is 0.33") == 1
    assert "a test needs at least 5 checkpoints" in md
    assert "too short to test" not in real[2].lower()  # 18 checkpoints a model
    # ... and marked in the tables: each row or column of `m`, with a footnote per table
    tables = [b for b in md.split("\n\n") if b.startswith("|")]
    marked = [t for t in tables if "| m † |" in t]
    assert len(marked) >= 3 and not any(" n †" in t for t in tables)
    assert all("| m |" not in t for t in tables)  # no row of `m` left unmarked
    footnote = "† too few checkpoints to test within the model (`m`: 3; see the header)"
    assert md.count(footnote) == len(marked)
    assert "†" not in real[2]
