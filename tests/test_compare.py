"""``toposig compare A B``: two results folders, number by number and by conclusion.

The folders are small copies of the committed reference run (``results/``: every file of
``data/`` and the JSON records of one model in two families), changed by hand the way a
rerun on another CPU, or a real change, would change them.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from pathlib import Path

import pytest

from toposig.analysis.compare import (
    ResultsContent,
    Tolerances,
    classify,
    compare_backtests,
    compare_results,
    compare_trees,
    is_ignored,
)
from toposig.cli.compare import main

RESULTS = Path(__file__).resolve().parents[1] / "results"
EMB, WTS = "945195e2ce8e", "w9c0bc8fc8d6"
MODEL = "tiny-h16-l1"
REC = f"records/{EMB}/{MODEL}/step000100.json"
WREC = f"records/{WTS}/{MODEL}/step000100.json"
ENTRY = ("controlled", "per_model", MODEL, "np_mean")

pytestmark = pytest.mark.skipif(not (RESULTS / "data" / "statistics.json").is_file(),
                                reason="the committed reference results/ are not here")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Folder A: data/ and one model's embedding and weight records (JSON only)."""
    root = tmp_path_factory.mktemp("reference") / "results"
    shutil.copytree(RESULTS / "data", root / "data")
    for family in (EMB, WTS):
        dest = root / "records" / family / MODEL
        dest.mkdir(parents=True)
        for p in (RESULTS / "records" / family / MODEL).glob("step*.json"):
            shutil.copy2(p, dest / p.name)
    return root


@pytest.fixture
def rerun(reference, tmp_path) -> Path:
    """Folder B: a fresh copy of A, to be changed by the test."""
    dest = tmp_path / "rerun"
    shutil.copytree(reference, dest)
    return dest


def edit(path: Path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj, indent=2))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def controlled_entry(stats: dict) -> dict:
    e = stats
    for k in ENTRY:
        e = e[k]
    return e


# --- folders against folders ------------------------------------------------------------------
def test_a_folder_agrees_with_a_copy_of_itself(reference, rerun, capsys):
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 0
    assert "numbers: AGREE" in out and "conclusions: AGREE" in out
    assert "records 36 matched" in out and "all_results 54 matched" in out


def test_a_tight_rtol_catches_a_one_in_a_million_change(reference, rerun, capsys):
    edit(rerun / REC, lambda r: r["features"].__setitem__(
        "h0_total_persistence", r["features"]["h0_total_persistence"] * (1 + 1e-6)))
    rc, out, _ = run(capsys, reference, rerun, "--rtol", "1e-9")
    assert rc == 1
    assert f"records/{EMB}/{MODEL}/step000100.features.h0_total_persistence" in out
    assert "numbers: DIFFER, 1 beyond tolerance" in out
    assert "conclusions: AGREE" in out
    # the same change is float32 noise to the default tolerance
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 0, out


def test_cross_cpu_sized_noise_everywhere_passes_the_defaults(reference, rerun, capsys):
    """Every continuous number of every record moved by up to 1e-5 relative (what
    training amplifies float32 rounding to by step 1,000, README) still agrees."""
    rng = random.Random(0)

    def jitter(obj, key=None):
        if isinstance(obj, dict):
            return {k: jitter(v, k) for k, v in obj.items()}
        if isinstance(obj, list):
            return [jitter(v, key) for v in obj]
        if isinstance(obj, float) and classify(key, None, obj, obj) == "continuous":
            return obj * (1 + rng.uniform(-1e-5, 1e-5))
        return obj

    for p in (rerun / "records").rglob("*.json"):
        p.write_text(json.dumps(jitter(json.loads(p.read_text()))))
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 0, out
    rc, out, _ = run(capsys, reference, rerun, "--rtol", "1e-7")
    assert rc == 1 and "records/" in out


def test_a_bar_count_off_by_one_passes_and_off_by_five_does_not(reference, rerun, capsys):
    n = json.loads((reference / REC).read_text())["features"]["h1_n_features"]
    edit(rerun / REC, lambda r: r["features"].__setitem__("h1_n_features", n + 1))
    assert run(capsys, reference, rerun)[0] == 0
    edit(rerun / REC, lambda r: r["features"].__setitem__("h1_n_features", n + 5))
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 1
    assert "step000100.features.h1_n_features" in out and "count" in out
    assert run(capsys, reference, rerun, "--count-tol", "5")[0] == 0


def test_a_p_value_that_keeps_its_decision_passes(reference, rerun, capsys):
    stats = rerun / "data" / "statistics.json"
    e = controlled_entry(json.loads(stats.read_text()))
    assert e["significant"]["raw"] and e["holm_p"] < 1e-3
    edit(stats, lambda s: controlled_entry(s).__setitem__("holm_p", 0.01))
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 0, out


def test_a_p_value_that_flips_significance_is_a_conclusion_change(reference, rerun, capsys):
    def flip(s):
        e = controlled_entry(s)
        e["holm_p"] = 0.2
        e["significant"]["raw"] = False

    edit(rerun / "data" / "statistics.json", flip)
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 1
    path = f"statistics.controlled.per_model.{MODEL}.np_mean.significant.raw"
    assert f"{path}: significance: A significant (-), B not significant" in out
    assert re.search(r"conclusions: DIFFER, 1 of [\d,]+ changed", out)


def test_a_flip_in_the_p_value_alone_is_still_a_conclusion_change(reference, rerun, capsys):
    edit(rerun / "data" / "statistics.json",
         lambda s: controlled_entry(s).__setitem__("holm_p", 0.2))
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 1
    assert "by the Holm p-values" in out and "conclusions: DIFFER" in out


def test_a_missing_record_is_reported(reference, rerun, capsys):
    (rerun / WREC).unlink()
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 1
    assert f"records/{WTS}/{MODEL}/step000100" in out
    assert "only in A" in out and "records 35 matched (1 only in A, 0 only in B)" in out


def test_a_missing_aggregate_entry_is_reported(reference, rerun, capsys):
    edit(rerun / "data" / "all_results.json",
         lambda entries: entries.pop(next(i for i, e in enumerate(entries)
                                          if e["model_label"] == MODEL and e["step"] == 200)))
    rc, out, _ = run(capsys, rerun, reference)
    assert rc == 1
    assert f"all_results/{MODEL}/step000200" in out and "only in B" in out


def test_timings_clocks_and_hosts_are_ignored(reference, rerun, capsys):
    def retime(r):
        r["timings_s"] = {k: v * 3 for k, v in r["timings_s"].items()}
        r["finished_at"] = "2030-01-01T00:00:00+00:00"
        r["device"] = "cuda:0"
        r["location"] = "/elsewhere/step100"
        r["checkpoint_fingerprint"] = "0123456789abcdef"

    edit(rerun / REC, retime)
    edit(rerun / "data" / "config.json", lambda c: c["last_run"].update(
        started_at="2030-01-01T00:00:00+00:00", wall_s=1e6, platform="another box"))
    edit(rerun / "data" / "statistics.json",
         lambda s: s.__setitem__("records_sha256", "f" * 64))
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 0, out
    assert "another box" in out  # shown as context, not compared


def test_ignore_patterns_skip_what_the_user_names(reference, rerun, capsys):
    edit(rerun / "data" / "statistics.json", lambda s: s["prediction"]["fractions"]["0.2"][
        "mae"].__setitem__("ridge", 9.0))
    (rerun / WREC).unlink()
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 1 and "statistics.prediction.fractions.0.2.mae.ridge" in out
    rc, out, _ = run(capsys, reference, rerun, "--ignore", "*.ridge*",
                     "--ignore", f"records/{WTS}/*")
    assert rc == 0, out
    assert "and *.ridge*, records/" in out


def test_a_control_that_one_version_has_and_the_other_not_is_named(reference, rerun, capsys):
    def drop(s):
        for scope in (*s["controlled"]["per_model"].values(), s["controlled"]["pooled"]):
            for entry in scope.values():
                entry["significant"].pop("first_differences")
        s["controlled"]["controls"].remove("first_differences")

    edit(rerun / "data" / "statistics.json", drop)
    rc, out, _ = run(capsys, reference, rerun, "--show", "1000")
    assert rc == 1
    assert (f"statistics.controlled.per_model.{MODEL}.np_mean.significant.first_differences: "
            "missing: A not significant, B absent") in out
    # listed after the numbers: a key on one side only is the least telling difference
    assert "keys missing" in out


def test_json_holds_the_whole_comparison(reference, rerun, capsys, tmp_path):
    edit(rerun / REC, lambda r: r.__setitem__("perplexity", r["perplexity"] * 1.01))
    target = tmp_path / "cmp.json"
    rc, _, _ = run(capsys, reference, rerun, "--json", target)
    assert rc == 1
    doc = json.loads(target.read_text())
    assert doc["numbers_agree"] is False and doc["conclusions_agree"] is True
    (d,) = doc["differences"]
    assert d["path"] == f"records/{EMB}/{MODEL}/step000100.perplexity"
    assert d["kind"] == "continuous" and d["b"] == pytest.approx(d["a"] * 1.01)
    assert doc["tolerances"]["rtol"] == 1e-3 and doc["tolerances"]["atol"] == 1e-6
    assert "timings_s" in doc["ignored_keys"]


def test_two_json_files_are_compared_as_documents(reference, rerun, capsys):
    edit(rerun / "data" / "statistics.json",
         lambda s: controlled_entry(s)["significant"].__setitem__("raw", False))
    rc, out, _ = run(capsys, reference / "data" / "statistics.json",
                     rerun / "data" / "statistics.json")
    assert rc == 1
    assert f"statistics.controlled.per_model.{MODEL}.np_mean.significant.raw" in out
    rc, _, err = run(capsys, reference / "data" / "statistics.json", rerun)
    assert rc == 2 and "not one of each" in err


# --- bad input ----------------------------------------------------------------------------------
def test_a_missing_folder_exits_2(reference, tmp_path, capsys):
    rc, _, err = run(capsys, reference, tmp_path / "nowhere")
    assert rc == 2 and "nowhere: no such folder" in err


def test_a_folder_that_is_not_a_results_folder_exits_2(reference, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, _, err = run(capsys, tmp_path / "empty", reference)
    assert rc == 2 and "not a results folder" in err


def test_damaged_json_exits_2_naming_the_file(reference, rerun, capsys):
    stats = rerun / "data" / "statistics.json"
    stats.write_text(stats.read_text()[:1000])
    rc, _, err = run(capsys, reference, rerun)
    assert rc == 2 and str(stats) in err and "cannot be read as JSON" in err
    (rerun / REC).write_text("[1, 2]")
    stats.write_text("{}")
    rc, _, err = run(capsys, reference, rerun)
    assert rc == 2 and str(rerun / REC) in err and "not a JSON object" in err


DAMAGE = {  # issue 36, row 9: each was a traceback with exit 1, "the runs differ"
    "a controlled section that is a string": (
        "statistics", lambda t: t.replace('"controlled": {', '"controlled": "x", "_": {', 1),
        "controlled section is a str"),
    "5,000-deep JSON": ("statistics", lambda t: "[" * 5000 + "]" * 5000, "nested too deep"),
    "a 400-digit integer": ("statistics", lambda t: t.replace('{', '{"n": ' + "9" * 400 + ",",
                                                             1),
                            "an integer of 400 digits at n"),
    "a feature's entry that is a number": (
        "statistics", lambda t: json.dumps(
            (d := json.loads(t)) | {"controlled": d["controlled"] | {
                "pooled": d["controlled"]["pooled"] | {"zz": 5}}}),
        "controlled.pooled.zz is not an object"),
    "a backtest table with decisions 5": (
        "backtest", lambda t: t.replace('"decisions": [', '"decisions": 5, "_": [', 1),
        "its decisions is not a list of objects"),
    # found by a review: damage inside the entries, each a traceback with exit 1
    "a decision's model that is a list": (
        "backtest", lambda t: t.replace('"decisions": [{"model": "m"',
                                        '"decisions": [{"model": []', 1),
        "its decisions[0].model is a list, not text"),
    "a decision's fraction that is text": (
        "backtest", lambda t: t.replace('"fraction": 0.2, "action"', '"fraction": "x", '
                                        '"action"', 1),
        "its decisions[0].fraction is a str, not a number"),
    "a control that is an object": (
        "statistics", lambda t: json.dumps(
            (d := json.loads(t)) | {"controlled": d["controlled"] | {
                "controls": [{}, *d["controlled"]["controls"][1:]]}}),
        "its controlled.controls is not a list of names"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_input_is_an_error_naming_the_file_not_a_difference(case, reference, rerun,
                                                                     tmp_path, capsys):
    which, damage, message = DAMAGE[case]
    if which == "backtest":  # a folder's backtest table, and two tables given as files
        table = {"rows": [{"model": "m", "fraction": 0.2, "method": "naive",
                           "forecast": 1.0, "final": 1.1}],
                 "decisions": [{"model": "m", "fraction": 0.2, "action": "stop"}]}
        for folder in (reference, rerun):
            (folder / "data" / "backtest.json").write_text(json.dumps(table))
        path = rerun / "data" / "backtest.json"
        (tmp_path / "a.json").write_text(json.dumps(table))
    else:
        path = rerun / "data" / "statistics.json"
        shutil.copy(reference / "data" / "statistics.json", tmp_path / "a.json")
    try:
        path.write_text(damage(path.read_text()))
        assert path.read_text() != (tmp_path / "a.json").read_text()
        for a, b in ((reference, rerun), (tmp_path / "a.json", path)):
            rc, out, err = run(capsys, a, b)
            assert (rc, out) == (2, "")
            assert err.startswith(f"error: {path}: ") and message in err, err
            assert "Traceback" not in err and len(err) < 400
    finally:
        (reference / "data" / "backtest.json").unlink(missing_ok=True)


@pytest.mark.parametrize("option", [["--rtol", "-1"], ["--atol", "nan"], ["--alpha", "1.5"],
                                    ["--count-tol", "inf"], ["--rtol", "x"]])
def test_bad_options_exit_2(reference, capsys, option):
    rc, _, err = run(capsys, reference, reference, *option)
    assert rc == 2 and err


# --- the pure rules -----------------------------------------------------------------------------
@pytest.mark.parametrize("key, parent, value, kind", [
    ("h1_n_features", "features", 103.0, "count"),
    ("weight_h1_count", "features", 53.0, "count"),
    ("landscape_n_minima", "features", 4.0, "count"),
    ("mean", "h1_n_features", 53.1, "count"),
    ("mean", "h1_total_persistence", 0.42, "continuous"),
    ("n_loss_tokens", None, 25097, "count"),
    ("perplexity", None, 22.3, "continuous"),
    ("holm_p", None, 0.01, "p-value"),
    ("pearson_log_p", None, 0.2, "p-value"),
    ("partial_r", None, -0.3, "correlation"),
    ("ci_low", None, -0.9, "correlation"),
    ("raw", "significant", True, "decision"),
    ("step", None, 100, "exact"),
    ("shape", None, 48, "exact"),
    ("ph_backend", None, "giotto-ph", "exact"),
])
def test_each_number_gets_its_kind(key, parent, value, kind):
    assert classify(key, parent, value, value) == kind


def test_the_ignore_list_covers_what_is_not_a_result():
    for key in ("timings_s", "finished_at", "last_run", "device", "host", "records_sha256",
                "checkpoint_fingerprint", "location", "load_time_s"):
        assert is_ignored(key, f"x.{key}")
    assert is_ignored("model", "records/h/m/step000100.model")
    assert not is_ignored("model", "statistics.scaling.fits.final_loss.model")
    assert not is_ignored("perplexity", "records/h/m/step000100.perplexity")


def test_tolerances_by_kind():
    tol = Tolerances()
    cmp = compare_trees(
        {"a": 1.0, "near0": 0.0, "h1_n_features": 100.0, "spearman_r": 0.50, "diff_p": 0.04,
         "weight_h1_count": 1000, "label": "x"},
        {"a": 1.0005, "near0": 5e-7, "h1_n_features": 101.0, "spearman_r": 0.535,
         "diff_p": 0.001, "weight_h1_count": 1009, "label": "x"}, "t")
    assert cmp.numbers_agree, cmp.differences
    cmp = compare_trees(
        {"a": 1.0, "near0": 0.0, "h1_n_features": 100.0, "spearman_r": 0.50, "diff_p": 0.04,
         "weight_h1_count": 1000, "label": "x", "gone": 1},
        {"a": 1.002, "near0": 5e-6, "h1_n_features": 102.0, "spearman_r": 0.55,
         "diff_p": 0.06, "weight_h1_count": 1011, "label": "y"}, "t")
    kinds = {d.path: d.kind for d in cmp.differences}
    assert kinds == {"t.a": "continuous", "t.near0": "continuous",
                     "t.h1_n_features": "count", "t.spearman_r": "correlation",
                     "t.diff_p": "p-value", "t.weight_h1_count": "count", "t.label": "exact",
                     "t.gone": "missing"}
    worst = cmp.worst(1)[0]
    assert worst.excess == float("inf")
    assert tol.atol == 1e-6 and Tolerances(rtol=1e-9).atol == pytest.approx(1e-12)


def test_an_infinity_agrees_only_with_itself(reference, rerun, capsys):
    """Issue 36, row 8: the allowed difference rtol * max(|a|, |b|) is infinite when one
    side is, so 2.0 against Infinity used to agree; infinities agree only with themselves,
    whatever the kind of the number."""
    inf = float("inf")
    for key in ("a", "h1_n_features", "weight_h1_count", "spearman_r", "diff_p"):
        for x, y in ((2.0, inf), (4.0, -inf), (inf, -inf), (-inf, 0.0)):
            cmp = compare_trees({key: x}, {key: y}, "t")
            assert not cmp.numbers_agree, (key, x, y)
            assert [d.note for d in cmp.differences] == ["infinite on one side only"
                                                         if math.isfinite(x) or math.isfinite(y)
                                                         else "infinities of opposite signs"]
        assert compare_trees({key: inf}, {key: inf}, "t").numbers_agree
        assert compare_trees({key: -inf}, {key: -inf}, "t").numbers_agree
    # from the files, as the issue found it: exit 1, the number named
    edit(rerun / "data" / "statistics.json",
         lambda s: s["models"][MODEL].__setitem__("final_loss", inf))
    rc, out, _ = run(capsys, reference / "data" / "statistics.json",
                     rerun / "data" / "statistics.json")
    assert rc == 1 and f"statistics.models.{MODEL}.final_loss" in out


def test_lists_of_named_items_are_matched_by_name():
    a = {"matrices": [{"name": "q", "np": 1.0}, {"name": "k", "np": 2.0}]}
    b = {"matrices": [{"name": "k", "np": 2.0}, {"name": "q", "np": 1.0}]}
    assert compare_trees(a, b, "r").numbers_agree
    b["matrices"][0]["np"] = 3.0
    (d,) = compare_trees(a, b, "r").differences
    assert d.path == "r.matrices[k].np"
    # names that cannot be keys: by position
    odd = [{"name": [1], "np": 1.0}]
    assert compare_trees({"m": odd}, {"m": odd}, "r").numbers_agree
    (d,) = compare_trees({"m": [1.0, 2.0]}, {"m": [1.0]}, "r").differences
    assert d.kind == "structure" and d.path == "r.m"


def test_records_of_one_side_only_and_files_are_missing_differences():
    a = ResultsContent(records={("h", "m", "step000001"): {"x": 1.0}},
                       files=frozenset({"data/config.json"}))
    b = ResultsContent(records={("h", "m", "step000002"): {"x": 1.0}})
    cmp = compare_results(a, b)
    assert {d.path for d in cmp.differences} == {
        "data/config.json", "records/h/m/step000001", "records/h/m/step000002"}
    assert cmp.coverage["records"].only_a == 1 and cmp.coverage["records"].only_b == 1


# --- backtest tables -----------------------------------------------------------------------------
def backtest_table(shift: dict[str, float] | None = None) -> dict:
    """Three runs, two fractions, two methods: ``power_law`` off by about 0.05 nats,
    ``latest`` by about 0.2; ``shift`` adds to a method's forecasts."""
    shift = shift or {}
    rows = []
    for i, model in enumerate(("m1", "m2", "m3")):
        for fraction in (0.2, 0.5):
            for method, err in (("power_law", 0.05), ("latest", 0.2)):
                f = 2.0 + err * (1 + 0.1 * i) + shift.get(method, 0.0)
                rows.append({"model": model, "fraction": fraction, "method": method,
                             "forecast": f, "low": f - 0.1, "high": f + 0.1, "final": 2.0})
    decisions = [{"model": m, "fraction": 0.5, "action": "continue"} for m in ("m1", "m2")]
    return {"rows": rows, "decisions": decisions}


def test_backtests_agree_when_maes_move_within_their_error():
    agreements, changes, n = compare_backtests(backtest_table(),
                                               backtest_table({"power_law": 0.001}))
    assert not changes and n > 0
    assert all(m.agree for m in agreements)
    assert {(m.fraction, m.method) for m in agreements} >= {(0.2, "power_law"),
                                                             (None, "latest")}


def test_backtest_mae_beyond_its_error_and_a_new_best_method_are_changes():
    _, changes, _ = compare_backtests(backtest_table(), backtest_table({"power_law": 0.3}))
    whats = {(c.what, c.path) for c in changes}
    assert ("backtest MAE", "backtest.mae[0.2, power_law]") in whats
    assert ("best method", "backtest.best[all]") in whats
    best = next(c for c in changes if c.path == "backtest.best[0.5]")
    assert (best.a, best.b) == ("power_law", "latest")


def test_a_backtest_table_in_the_folder_is_compared_by_conclusion(reference, rerun, capsys):
    (reference / "data" / "backtest.json").write_text(json.dumps(backtest_table()))
    try:
        changed = backtest_table({"power_law": 0.3})
        changed["decisions"][0]["action"] = "stop (plateau)"
        (rerun / "data" / "backtest.json").write_text(json.dumps(changed))
        rc, out, _ = run(capsys, reference, rerun)
    finally:
        (reference / "data" / "backtest.json").unlink()
    assert rc == 1
    assert "data/backtest.best[0.5]: best method: A power_law, B latest" in out
    assert "data/backtest.decisions[m1, 0.5].action: stop rule" in out
    assert "method MAEs agree within their own error" in out


# --- the real thing ----------------------------------------------------------------------------
def test_the_reference_results_agree_with_themselves(capsys):
    rc, out, _ = run(capsys, RESULTS, RESULTS)
    assert rc == 0
    assert "records 216 matched" in out and "conclusions: AGREE, all" in out


def test_a_diagram_statistic_that_a_bar_moved_passes_a_smooth_value_does_not(
        reference, rerun, capsys):
    # one H1 bar fewer among 40 moves the mean bar length by a few percent: as on another CPU
    edit(rerun / WREC, lambda r: r["matrices"][0].update(
        h1_mean_persistence=r["matrices"][0]["h1_mean_persistence"] * 1.026))
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 0, out
    rc, out, _ = run(capsys, reference, rerun, "--disc-rtol", "1e-2")
    assert rc == 1 and "h1_mean_persistence" in out
    edit(rerun / WREC, lambda r: r["matrices"][0].update(
        l2_norm=r["matrices"][0]["l2_norm"] * 1.026))  # a norm is smooth in the weights
    rc, out, _ = run(capsys, reference, rerun)
    assert rc == 1 and "l2_norm" in out
    assert classify("h1_mean_persistence", None, 1.0, 1.0) == "discontinuous"
    assert classify("std", "h0_total_persistence", 1.0, 1.0,
                    path="records/x/m/step1.features_resampled.h0_total_persistence.std"
                    ) == "discontinuous"
    assert classify("perplexity", None, 1.0, 1.0) == "continuous"
