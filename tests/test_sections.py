"""Typed sections of statistics.json (toposig.records.sections): read by attribute,
damaged ones refused with a message naming what is wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toposig.records import Statistics, StatisticsError
from toposig.records.controlled import CONTROLS, TREND_KINDS
from toposig.records.sections import Distances, Scaling, SectionError, Stability
from toposig.records.statistics import scaling_of, stability_of
from toposig.report.plots_controls import has_positive_controls
from toposig.report.plots_ensembles import has_ensembles
from toposig.report.summary import summary_markdown

RESULTS = Path(__file__).resolve().parents[1] / "results"


def committed() -> dict:
    return json.loads((RESULTS / "data" / "statistics.json").read_text(encoding="utf-8"))


def test_the_committed_sections_read_by_attribute():
    raw = committed()
    st = Statistics.from_json(raw)
    assert st.scaling is not None and st.scaling.n_models == 3
    fit = st.scaling.fits["final_loss"]
    assert fit.b == raw["scaling"]["fits"]["final_loss"]["b"] and fit.model == "a*N^b"
    assert st.scaling.num_parameters == raw["scaling"]["num_parameters"]
    model, table = next(iter(raw["stability"].items()))
    row = st.stability.per_model[model]["h1_total_persistence"]
    assert row.n_pairs == table["h1_total_persistence"]["n_pairs"]
    assert row.resolved_share == table["h1_total_persistence"]["resolved_share"]
    assert scaling_of(raw) == st.scaling and stability_of(raw) == st.stability
    assert scaling_of({}) is None and stability_of({}) is None


@pytest.mark.parametrize(("section", "damage", "message"), [
    ("scaling", {"fits": {"rankme": {"b": "steep"}}}, "b is 'steep', not a number"),
    ("scaling", {"fits": {"rankme": {"n": -1}}}, "n is -1, not a count"),
    ("scaling", {"fits": ["rankme"]}, "scaling fits is list, not an object"),
    ("stability", {"m": {"rankme": {"n_pairs": 1.5}}}, "n_pairs is 1.5, not a count"),
    ("stability", {"m": ["rankme"]}, "stability of m is list"),
])
def test_a_damaged_section_is_refused_and_named(section, damage, message):
    raw = committed() | {section: damage}
    with pytest.raises(StatisticsError, match=f"{section} section .*{message}"):
        Statistics.from_json(raw)
    parse = {"scaling": Scaling, "stability": Stability}[section]
    with pytest.raises(SectionError, match=message):
        parse.from_json(damage)


def test_the_summary_notes_a_damaged_section_and_draws_the_rest():
    raw = committed() | {"scaling": {"fits": {"rankme": {"b": "steep"}}}}
    md = summary_markdown(raw, [])
    assert "its statistics are malformed (SectionError: scaling fit of rankme: b is " \
           "'steep', not a number)" in md
    assert "Median bootstrap s.e." in md  # the stability table is still there


def test_the_phases_read_by_attribute_and_a_damaged_fit_is_named():
    raw = committed()
    st = Statistics.from_json(raw)
    model, held = next(iter(raw["phases"].items()))
    fit = st.phases.per_model[model].piecewise["h1_total_persistence"]
    assert fit.breakpoints == tuple(held["piecewise_log_step"]["h1_total_persistence"][
        "breakpoints"]) and fit.usable
    roc = st.phases.per_model[model].np_rate_of_change
    assert roc is not None and roc.peak_step == held["np_rate_of_change"]["peak_step"]
    assert len(roc.changes) == len(held["np_rate_of_change"]["changes"])
    damaged = raw | {"phases": {model: {"piecewise_log_step": {"rankme": {"slopes": "up"}}}}}
    with pytest.raises(StatisticsError, match="phases of .* fit of rankme: slopes is 'up'"):
        Statistics.from_json(damaged)


def test_the_predictions_read_by_attribute_and_a_damaged_forecast_is_named():
    raw = committed()
    st = Statistics.from_json(raw)
    held = raw["prediction"]["fractions"]["0.2"]
    fr = st.prediction.fractions["0.2"]
    assert fr.mae == held["mae"] and fr.n_models == held["n_models"]
    model = next(iter(held["per_model"]))
    assert fr.per_model[model]["loss_only"].prediction == \
        held["per_model"][model]["loss_only"]["prediction"]
    assert st.prediction.methods == tuple(raw["prediction"]["methods"])
    feature = next(iter(raw["prediction_by_feature"]))
    assert st.prediction_by_feature.per_feature[feature]["0.5"].mae == \
        raw["prediction_by_feature"][feature]["0.5"]["mae"]
    damaged = raw | {"prediction": {"fractions": {"0.2": {"n_models": {"ridge": 0.5}}}}}
    with pytest.raises(StatisticsError, match="prediction at 0.2 n_models: ridge is 0.5"):
        Statistics.from_json(damaged)


def test_the_distances_read_by_dimension_and_an_unknown_key_is_named():
    raw = committed()
    st = Statistics.from_json(raw)
    model, rows = next(iter(raw["wasserstein"].items()))
    first = st.wasserstein.per_model[model][0]
    assert first.linf[1] == rows[0]["h1_wasserstein"]
    assert first.l2[0] == rows[0]["h0_wasserstein_persim_l2"]
    assert first.gap == rows[0]["step_to"] - rows[0]["step_from"]
    weights = st.weight_wasserstein.per_model[model][0]
    assert weights.linf[0] == raw["weight_wasserstein"][model][0]["weight_h0_wasserstein"]
    assert weights.l2 == {}
    with pytest.raises(SectionError, match="'h1_wasserstein_l3' is not a distance"):
        Distances.from_json({"m": [{"step_from": 0, "step_to": 1, "h1_wasserstein_l3": 1}]})


# --- controlled -----------------------------------------------------------------------

def _every_test(raw_controlled: dict):
    for label, tests in raw_controlled["per_model"].items():
        for feature, test in tests.items():
            yield label, feature, test
    for feature, test in raw_controlled["pooled"].items():
        yield "pooled", feature, test


@pytest.mark.parametrize("folder", ["", "seed004", "ensemble", "grokking", "induction"])
def test_every_controlled_test_reads_its_own_keys(folder):
    """Each typed field is the JSON key it names (checked key by key against the file, not
    against the reader), so a grouping mistake in the reader fails here."""
    raw = json.loads((RESULTS / folder / "data" / "statistics.json").read_text())["controlled"]
    typed = Statistics.from_json(json.loads(
        (RESULTS / folder / "data" / "statistics.json").read_text())).controlled
    assert typed is not None and typed.level == raw["alpha"]
    assert dict(typed.n_tests_by_control or {}) == raw["n_tests_by_control"]
    assert list(typed.controls) == list(CONTROLS) == raw["controls"]
    n = 0
    for label, feature, j in _every_test(raw):
        t = (typed.pooled if label == "pooled" else typed.per_model[label])[feature]
        assert (t.scope, t.target, t.n, t.baseline) == (j["scope"], j["target"], j["n"],
                                                        j["baseline"])
        assert t.under("raw") == (j["spearman_r"], j["holm_p"])
        assert t.under("partial_log_step") == (j["partial_r"], j["partial_holm_p"])
        assert t.under("first_differences") == (j["diff_r"], j["diff_holm_p"])
        assert t.under("beyond_baseline") == (j["beyond_r"], j["beyond_holm_p"])
        for kind, control in TREND_KINDS.items():
            trend = t.trend(kind)
            assert t.under(control) == (j[f"{kind}_r"], j[f"{kind}_holm_p"])
            assert (trend.p, trend.ci_low, trend.ci_high, trend.undefined) == (
                j[f"{kind}_p"], j[f"{kind}_ci_low"], j[f"{kind}_ci_high"],
                j[f"{kind}_undefined"])
            assert list(trend.edf) == j.get(f"{kind}_edf", [])
            assert trend.models == j.get(f"{kind}_models")
        assert dict(t.significant) == j["significant"]
        assert dict(t.calibration) == j["calibration"]
        assert list(t.partial_controls) == j["partial_controls"]
        assert {b: dict(v) for b, v in t.beyond_by_baseline.items()} == j["beyond_by_baseline"]
        assert (t.design is None) == ("design" not in j)
        for control, check in (t.design or {}).items():
            want = j["design"][control]
            assert (check.status, check.null_rate, check.mdc, check.mdc_holm,
                    dict(check.power)) == (want["status"], want["null_rate"], want["mdc"],
                                           want["mdc_holm"], want["power"])
        n += 1
    assert n == sum(len(v) for v in raw["per_model"].values()) + len(raw["pooled"]) > 50
    for feature, s in raw["summary"].items():
        summary = typed.summary[feature]
        assert {c: summary.significant[c] for c in CONTROLS} == {
            c: s[f"significant_{c}"] for c in CONTROLS}
        assert dict(summary.pooled) == s["pooled"]
        assert summary.in_every_model("raw") == (s["n_models"] > 0
                                                 and s["significant_raw"] == s["n_models"])


@pytest.mark.parametrize(("damage", "message"), [
    (lambda c: c["per_model"]["tiny-h16-l1"]["rankme"].update(detrended_r="-0.4"),
     "controlled test of tiny-h16-l1 rankme: detrended_r is '-0.4', not a number"),
    (lambda c: c["pooled"]["rankme"].update(significant={"raw": "yes"}),
     "pooled controlled test of rankme significant: raw is 'yes', not true or false"),
    (lambda c: c["pooled"]["rankme"]["design"].update(detrended=[0.05]),
     "design of detrended is list, not an object"),
    (lambda c: c["summary"]["rankme"].update(significant_raw=-1),
     "controlled summary of rankme: significant_raw is -1, not a count"),
    (lambda c: c.update(n_tests_by_control="many"), "n_tests_by_control is str"),
])
def test_a_damaged_controlled_section_is_refused_and_named(damage, message):
    raw = committed()
    damage(raw["controlled"])
    with pytest.raises(StatisticsError, match="controlled section that does not read: .*"
                                              + re.escape(message)):
        Statistics.from_json(raw)
    md = summary_markdown(raw, [])  # the summary notes it and draws the rest
    assert re.search(r"its statistics are malformed \(SectionError: [^)]*"
                     + re.escape(message), md)
    assert "Median bootstrap s.e." in md


def test_an_unknown_control_is_named():
    test = Statistics.from_json(committed()).controlled.pooled["rankme"]
    with pytest.raises(KeyError, match="no control 'partial'; these are raw, "):
        test.under("partial")
    with pytest.raises(KeyError, match="no trend-level control 'partial'"):
        test.trend("partial")


# --- seed ensembles and positive controls ----------------------------------------------

def _statistics(folder: str) -> tuple[dict, Statistics]:
    raw = json.loads((RESULTS / folder / "data" / "statistics.json").read_text())
    return raw, Statistics.from_json(json.loads(json.dumps(raw)))


@pytest.mark.parametrize("folder", ["ensemble", "grokking", "induction"])
def test_the_ensembles_read_their_own_keys(folder):
    raw, st = _statistics(folder)
    j, ens = raw["ensembles"], st.ensembles
    assert ens is not None and list(ens.fractions) == j["fractions"]
    assert (ens.level, ens.n_bootstrap, ens.calibrated_seeds, ens.expected_by_chance) == (
        j["level"], j["n_bootstrap"], j["calibrated_seeds"], j["expected_by_chance"])
    for g, info in j["groups"].items():
        group = ens.groups[g]
        assert (list(group.labels), list(group.seeds), group.n_seeds, list(group.steps),
                group.final_step, dict(group.fraction_steps), group.final_loss.sd) == (
            info["labels"], info["seeds"], info["n_seeds"], info["steps"],
            info["final_step"], info["fraction_steps"], info["final_loss"]["sd"])
    cells = 0
    for feature, by_fraction in j["across_seeds"].items():
        for key, by_group in by_fraction.items():
            for g, c in by_group.items():
                t = ens.across_seeds[feature][key][g]
                assert (t.r, t.ci_low, t.ci_high, t.baseline, t.advantage_low, t.n_seeds,
                        t.beyond_loss, t.calibrated) == (
                    c["r"], c["ci_low"], c["ci_high"], c["baseline"], c["advantage_low"],
                    c["n_seeds"], c["beyond_loss"], c["calibrated"])
                cells += 1
            v = j["verdict"][feature][key]
            verdict = ens.verdict[feature][key]
            assert (verdict.sizes_tested, verdict.sizes_beyond,
                    verdict.predicts_beyond_loss) == (v["sizes_tested"], v["sizes_beyond"],
                                                      v["predicts_beyond_loss"])
    assert cells > 50
    for q, pairs in j["between_sizes"].items():
        assert [(d.smaller, d.larger, d.difference, d.within_spread)
                for d in ens.between_sizes[q]] == [
            (p["from"], p["to"], p["difference"], p["within_spread"]) for p in pairs]
    for q, by_group in j["seed_spread"].items():
        for g, s in by_group.items():
            assert (ens.seed_spread[q][g].mean, ens.seed_spread[q][g].text_sd) == (
                s["mean"], s["text_sd"])


@pytest.mark.parametrize("folder", ["grokking", "induction"])
def test_the_positive_controls_read_their_own_keys(folder):
    raw, st = _statistics(folder)
    j, pc = raw["positive_controls"], st.positive_controls
    assert pc is not None and (pc.signal, pc.event, list(pc.events)) == (
        j["signal"], j["event"], j["events"])
    assert (None if pc.levels is None else list(pc.levels)) == j["levels"]
    for label, run in j["runs"].items():
        got = pc.runs[label]
        assert (got.seed, got.seed_group, list(got.steps), list(got.signal),
                dict(got.event_steps)) == (run["seed"], run["seed_group"], run["steps"],
                                           run["signal"], run["event_steps"])
    for feature, by_event in j["alignment"].items():
        for event, a in by_event.items():
            got = pc.alignment[feature][event]
            assert (list(got.leads), list(got.apart), list(got.hits), got.n_runs,
                    got.hit_rate, got.hit_p, got.hit_holm_p, got.permutation_p,
                    got.median_lead) == (a["leads"], a["apart"], a["hits"], a["n_runs"],
                                         a["hit_rate"], a["hit_p"], a.get("hit_holm_p"),
                                         a["permutation_p"], a["median_lead"])
            assert got.n_hits == sum(1 for h in a["hits"] if h)


@pytest.mark.parametrize(("folder", "section", "damage", "message"), [
    ("ensemble", "ensembles",
     lambda s: s["groups"]["ens-h8-l1"].update(seeds=[0, "one"]),
     "seed group ens-h8-l1: seeds is [0, 'one'], not a list of whole numbers"),
    ("ensemble", "ensembles",
     lambda s: s["across_seeds"]["rankme"]["0.2"]["ens-h8-l1"].update(beyond_loss="no"),
     "across seeds of rankme of 0.2 ens-h8-l1: beyond_loss is 'no', not true or false"),
    ("ensemble", "ensembles", lambda s: s["between_sizes"].update(loss={"from": "a"}),
     "between sizes of loss is dict, not a list"),
    ("grokking", "positive_controls",
     lambda s: s["alignment"]["rankme"]["0.5"].update(hits=[1, 0]),
     "alignment of rankme 0.5: hits is [1, 0], not a list of true or false"),
    ("grokking", "positive_controls",
     lambda s: s["runs"]["grokking-seed0"].update(event_steps={"0.5": -3}),
     "ground-truth run grokking-seed0 event_steps: 0.5 is -3, not a count"),
])
def test_a_damaged_ensemble_or_positive_control_is_refused_and_named(folder, section, damage,
                                                                     message):
    raw, _ = _statistics(folder)
    damage(raw[section])
    with pytest.raises(StatisticsError, match=f"{section} section that does not read: "
                                              + re.escape(message)):
        Statistics.from_json(raw)
    md = summary_markdown(raw, [])  # the summary notes it and draws the rest
    assert f"its statistics are malformed (SectionError: {message})" in md
    applies = {"ensembles": has_ensembles, "positive_controls": has_positive_controls}
    assert not applies[section]([], raw, None)  # and draws no figure of it
    assert applies[section]([], _statistics(folder)[1], None)
