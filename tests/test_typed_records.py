"""Typed records and statistics (issue 27): one definition of a record and of the
statistics, validated on read, used by the run, the analysis, the report and
``load_results``; what was read is what is written back, byte for byte."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from pathlib import Path

import pytest

from toposig.analysis.compute import compute_statistics, records_digest
from toposig.analysis.table import results_table
from toposig.families import registry
from toposig.records import (
    CheckpointId,
    Correlation,
    DeclaredQuality,
    GroundTruth,
    Record,
    RecordError,
    Resampled,
    Statistics,
    StatisticsError,
    record_stem,
)
from toposig.results import Results
from toposig.run.results_folder import load_entries
from toposig.run.store import DamagedResultsError, ResultStore

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
FIXTURE = ROOT / "tests" / "fixtures" / "mini_results"
STATISTICS = [RESULTS / "data" / "statistics.json",
              *sorted((RESULTS / "seeds").glob("*/data/statistics.json")),
              RESULTS / "seed004" / "data" / "statistics.json",
              RESULTS / "ensemble" / "data" / "statistics.json"]


def entries(folder: Path = RESULTS) -> list[dict]:
    return json.loads((folder / "data" / "all_results.json").read_text())


# --- records --------------------------------------------------------------------------

@pytest.mark.parametrize("folder", [RESULTS, FIXTURE], ids=["results", "fixture"])
def test_every_committed_entry_reads_as_a_record_that_gives_its_json_back(folder):
    for entry in entries(folder):
        rec = Record.from_json(entry)
        assert rec.to_json() == entry and rec == Record.from_json(entry)
        assert json.dumps(rec.to_json(), sort_keys=True) == json.dumps(entry, sort_keys=True)
        assert rec.checkpoint == CheckpointId(
            entry["model"], entry["model_label"], entry["step"], entry["source"],
            entry["location"], entry["revision"], entry["checkpoint_fingerprint"])
        assert rec.checkpoint.stem == record_stem(entry["step"])
        assert list(rec.families) == entry["families"]
        assert dict(rec.features) == entry["features"]
        assert (rec.perplexity, rec.mean_nll, rec.loss, rec.loss_key) == (
            entry["perplexity"], entry["mean_nll"], entry["loss"], entry["loss_key"])
        assert rec.num_parameters == entry["num_parameters"]
        assert rec.layer == entry["layer"]
        assert list(rec.layer_names) == entry.get("layer_names", [])
        assert {str(k): dict(v) for k, v in rec.layers.items()} == entry["layer_features"]
        assert [m.name for m in rec.matrices] == [m["name"] for m in
                                                  entry["weights"]["matrices"]]
        assert len(rec.matrices) == entry["weights"]["n_matrices"]
        assert rec.matrices[0].features["np"] == entry["weights"]["matrices"][0]["np"]
        assert rec.parts["embedding"].settings_hash == entry["settings_hash"]
        for family in ("weights", "landscape", "gradients"):
            part = entry[family]
            assert rec.parts[family].settings_hash == part["settings_hash"]
            assert rec.parts[family].arrays_file == part["arrays_file"]
            assert dict(rec.parts[family].settings) == part.get("settings", {})
        assert rec.provenance.schema_version == entry["schema_version"]
        assert rec.provenance.ph_backend == entry["ph_backend"]


def test_each_familys_record_file_reads_as_a_record_of_that_family():
    seen = set()
    for path in sorted((FIXTURE / "records").glob("*/*/*.json")):
        raw = json.loads(path.read_text())
        rec = Record.from_json(raw, where=str(path))
        family = raw.get("family", "embedding")
        seen.add(family)
        assert rec.families == (family,) and family in rec.parts
        assert rec.parts[family].arrays_file == raw.get("arrays_file")
        assert rec.checkpoint.stem == path.stem and rec.to_json() == raw
        if family == "weights":
            assert [m.name for m in rec.matrices] == [m["name"] for m in raw["matrices"]]
            assert rec.loss == raw["checkpoint_loss"]
    config = json.loads((FIXTURE / "data" / "config.json").read_text())
    assert seen == set(config["signatures"])  # every family the fixture's run computed


def test_a_record_prints_in_one_short_line():
    rec = Record.from_json(entries()[-1])
    text = repr(rec)
    assert "\n" not in text and len(text) < 160, text
    assert text.startswith("Record(tiny-h64-l3 step 1000 [embedding, weights, landscape, "
                           "gradients]: 81 features, perplexity 6.367")
    failed = Record.from_json({"status": "failed", "family": "weights", "model": "m",
                               "model_label": "m", "step": 5, "error": "OSError: gone"})
    assert repr(failed) == "Record(m step 5 [weights]: failed: OSError: gone)"


def test_a_record_keeps_its_own_json_and_its_typed_fields_show_that_json():
    entry = entries()[0]
    rec = Record.from_json(entry)
    entry["features"]["rankme"] = -1.0  # the caller's dict is not the record's
    assert rec.features["rankme"] != -1.0 and rec.json["features"]["rankme"] != -1.0
    with pytest.raises(TypeError):
        rec["perplexity"]  # type: ignore[index]  # no mapping view: read the types
    assert rec != entry and not isinstance(rec, Mapping)
    with pytest.raises(TypeError):
        rec.json["perplexity"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        rec.features["rankme"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        rec.layers[0]["rankme"] = 1.0  # type: ignore[index]
    out = rec.to_json()
    out["features"].clear()
    assert rec.to_json()["features"] and Record.from_json(rec) is rec
    # the typed fields are views of the record's JSON, never a second copy that can differ
    assert rec.features is not None and rec.features == rec.json["features"]
    assert rec.layers[0] == rec.json["layer_features"]["0"]
    owned = entries()[1]
    taken = Record.from_json(owned, copy_json=False)  # JSON just parsed, handed over
    assert taken.json is not None and taken.json["features"] is owned["features"]


def damaged(change) -> dict:
    entry = copy.deepcopy(entries()[0])
    change(entry)
    return entry


DAMAGE = {
    "no model": (lambda e: e.pop("model"), "has no model"),
    "model a number": (lambda e: e.update(model=3), "names the model 3"),
    "status unknown": (lambda e: e.update(status="done"), "status 'done'"),
    "step negative": (lambda e: e.update(step=-1), "step -1"),
    "step a string": (lambda e: e.update(step="ten"), "step 'ten'"),
    "features a list": (lambda e: e.update(features=[1, 2]), "'features'"),
    "feature a string": (lambda e: e["features"].update(rankme="high"), "'features'"),
    "perplexity a string": (lambda e: e.update(perplexity="7"), "'perplexity'"),
    "unknown family": (lambda e: e.update(families=["embedding", "Vibes!"]), "families"),
    "layer a string": (lambda e: e.update(layer="3"), "layer '3'"),
    "layer keys not indices": (lambda e: e.update(layer_features={"top": {}}),
                               "layer_features"),
    "layer features not numbers": (lambda e: e["layer_features"]["0"].update(x="y"),
                                   "layer_features"),
    "weights part a list": (lambda e: e.update(weights=[]), "weights part"),
    "weights hash a number": (lambda e: e["weights"].update(settings_hash=5),
                              "weights settings_hash 5"),
    "matrix without a name": (lambda e: e["weights"]["matrices"][0].pop("name"),
                              "matrix without a name"),
    "loss_key a number": (lambda e: e.update(loss_key=3), "loss_key 3"),
    "no step": (lambda e: e.pop("step"), "has no step"),
    "an empty label": (lambda e: e.update(model_label=""), "names the model ''"),
    "no label": (lambda e: e.pop("model_label"), "has no model_label"),
    "shape a number": (lambda e: e["weights"]["matrices"][0].update(shape=5), "of shape 5"),
    "shape a string": (lambda e: e["weights"]["matrices"][0].update(shape="64x64"),
                       "of shape '64x64'"),
    "matrix value a list": (lambda e: e["weights"]["matrices"][0].update(np=[1.0]),
                            "matrix gpt_neox"),
    "layer names a number": (lambda e: e.update(layer_names=5), "layer_names"),
    "timings a list": (lambda e: e.update(timings_s=[1.0]), "embedding timings_s"),
    "layer key --1": (lambda e: e.update(layer_features={"--1": {}}), "layer_features"),
    "layer key a superscript": (lambda e: e.update(layer_features={"\u00b2": {}}),
                                "layer_features"),
    "layer key -1": (lambda e: e.update(layer_features={"-1": {}}), "layer_features"),
    "layer -1": (lambda e: e.update(layer=-1), "layer -1"),
    "step past int64": (lambda e: e.update(step=10**30), "below 2**63"),
    "arrays file absolute": (lambda e: e.update(arrays_file="/tmp/x.npz"),
                             "arrays file '/tmp/x.npz'"),
    "weights arrays file climbing": (
        lambda e: e["weights"].update(arrays_file="records/../../../x.npz"),
        "arrays file 'records/../../../x.npz'"),
    "resampled a list": (lambda e: e.update(features_resampled=[1.0]), "features_resampled"),
    "resampled std a string": (
        lambda e: e.update(features_resampled={"rankme": {"std": "wide"}}),
        "features_resampled of rankme"),
    "quality without a column": (lambda e: e.update(quality={"higher_is_better": True}),
                                 "declares the quality"),
    "quality direction a string": (
        lambda e: e.update(quality={"column": "acc", "higher_is_better": "yes"}),
        "declares the quality"),
    "hidden size a float": (lambda e: e.update(hidden_size=16.5), "hidden_size 16.5"),
    "settings hash a number": (lambda e: e.update(settings_hash=7), "settings_hash 7"),
}


def test_every_field_the_analysis_reads_is_typed():
    """What the analysis and the report read of a record, each from its own JSON key:
    the bootstrap spread, a declared quality and a ground truth, the model's shape, any
    quality measure by name and each family's arrays."""
    entry = {**entries()[-1],
             "features_resampled": {"rankme": {"mean": 5.0, "std": 0.2, "p2_5": 4.6,
                                               "p97_5": 5.4}},
             "quality": {"column": "test_accuracy", "higher_is_better": True},
             "ground_truth": {"signal": "test_accuracy", "value": 0.75, "event": "rise",
                              "levels": [0.5, 0.9]},
             "test_accuracy": 0.75}
    rec = Record.from_json(entry)
    assert rec.resampled["rankme"] == Resampled(mean=5.0, std=0.2, low=4.6, high=5.4)
    assert rec.quality == DeclaredQuality("test_accuracy", higher_is_better=True)
    assert rec.ground_truth == GroundTruth("test_accuracy", 0.75, "rise", (0.5, 0.9))
    assert (rec.num_layers, rec.hidden_size) == (entry["num_layers"], entry["hidden_size"])
    assert rec.settings_hash == entry["settings_hash"]
    assert (rec.model_label, rec.step, rec.ok) == (entry["model_label"], entry["step"], True)
    for name in ("perplexity", "mean_nll", "loss", "test_accuracy"):
        assert rec.measure(name) == entry[name], name
    assert rec.measure("location") is None and rec.measure("nothing") is None  # no number
    assert rec.arrays_file() == entry["arrays_file"]
    for family in ("weights", "landscape", "gradients"):
        assert rec.arrays_file(family) == entry[family]["arrays_file"]
    committed = entries()[0]  # the reference run has 20 resamples of the texts
    spread = Record.from_json(committed).resampled
    assert spread and {k: (s.mean, s.std, s.low, s.high) for k, s in spread.items()} == {
        k: (s["mean"], s["std"], s["p2_5"], s["p97_5"])
        for k, s in committed["features_resampled"].items()}
    assert Record.from_json({k: v for k, v in committed.items()
                             if k != "features_resampled"}).resampled == {}


@pytest.mark.parametrize("name", DAMAGE)
def test_an_unsound_record_is_refused_saying_why(name):
    change, says = DAMAGE[name]
    with pytest.raises(RecordError) as err:
        Record.from_json(damaged(change), where="all_results.json entry 0")
    assert str(err.value).startswith("all_results.json entry 0: the record ")
    assert says in str(err.value)


@pytest.mark.parametrize("name", ["no model", "feature a string", "unknown family",
                                  "matrix without a name"])
def test_a_damaged_entry_is_an_error_naming_the_file_and_the_entry(tmp_path, name):
    folder = tmp_path / "res"
    (folder / "data").mkdir(parents=True)
    good = entries()
    good[3] = damaged(DAMAGE[name][0])
    (folder / "data" / "all_results.json").write_text(json.dumps(good))
    with pytest.raises(DamagedResultsError) as err:
        load_entries(folder)
    message = str(err.value)
    assert message.startswith(str(folder / "data" / "all_results.json"))
    label, step = good[3]["model_label"], good[3]["step"]
    assert f"entry 3 ({label} step {step})" in message and DAMAGE[name][1] in message


@pytest.mark.parametrize("change, says", [
    (lambda es: es.append(copy.deepcopy(es[5])), "entry 54 (tiny-h16-l1 step 16) repeats "
                                                 "the checkpoint of entry 5"),
    (lambda es: es[0].update(model_label=".."), "entry 0 (.. step 0) cannot be read: model "
                                                "label '..'"),
    (lambda es: es[0].update(model_label="a/b"), "entry 0 (a/b step 0) cannot be read: "
                                                 "model label 'a/b'"),
], ids=["a repeated checkpoint", "label ..", "label with a slash"])
def test_an_aggregate_with_a_repeated_checkpoint_or_an_unsafe_label_is_refused(
        tmp_path, change, says):
    raw = entries()
    change(raw)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "all_results.json").write_text(json.dumps(raw))
    with pytest.raises(DamagedResultsError) as err:
        load_entries(tmp_path)
    assert says in str(err.value), str(err.value)


def test_only_failed_entries_say_what_to_do(tmp_path):
    failed = {"status": "failed", "family": "weights", "model": "m", "model_label": "m",
              "step": 3, "error": "OSError"}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "all_results.json").write_text(json.dumps([failed]))
    from toposig.run.results_folder import ResultsMissingError

    with pytest.raises(ResultsMissingError, match=r"no finished checkpoint to analyse \(only "
                                                  r"1 failed ones\); a run of the same"):
        load_entries(tmp_path)


def test_arrays_are_never_read_from_outside_the_records_folder(tmp_path):
    from toposig.run.store import load_arrays

    for name in ("/etc/hosts.npz", "records/../../x.npz", "records/h/m/../../../x.npz",
                 "../results/records/h/m/step000000.npz"):
        with pytest.raises(DamagedResultsError, match="not records/<hash>/<model>/<step>.npz"):
            load_arrays(tmp_path, name)


def test_load_entries_gives_the_files_finished_entries_as_records_in_order(tmp_path):
    raw = entries()
    records = load_entries(RESULTS)
    assert all(isinstance(r, Record) for r in records)
    assert [r.to_json() for r in records] == raw
    assert records_digest(records) == records_digest(raw)
    failed = {"status": "failed", "family": "weights", "model": "m", "model_label": "m",
              "step": 3, "error": "OSError"}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "all_results.json").write_text(json.dumps([failed, *raw[:2]]))
    assert [r.to_json() for r in load_entries(tmp_path)] == raw[:2]


def test_a_damaged_record_file_is_recomputed_not_an_error_of_the_run(tmp_path, caplog):
    """A record file edited by hand (a weight matrix without its name) is not a record of
    this place: the store reads it as none, with a warning, so the run computes it again;
    before, the merged entry failed the run's own check when the aggregates were written."""
    from toposig.sources.checkpoints import Checkpoint

    root = tmp_path / "res"
    import shutil

    shutil.copytree(FIXTURE, root)
    path = root / "records" / "w9c0bc8fc8d6" / "tiny-h16-l1" / "step000000.json"
    rec = json.loads(path.read_text())
    store = ResultStore(root, "w9c0bc8fc8d6", "weights")
    ckpt = Checkpoint(rec["model"], "tiny-h16-l1", 0, rec["source"], rec["location"])
    assert store.load(ckpt) == rec
    del rec["matrices"][2]["name"]
    path.write_text(json.dumps(rec))
    with caplog.at_level(logging.WARNING):
        assert store.load(ckpt) is None
    assert f"ignoring record {path}: it has a matrix without a name" in caplog.text


def test_json_files_write_typed_objects_and_refuse_other_objects(tmp_path):
    from toposig.files.atomic import atomic_write_json

    rec = Record.from_json(entries()[0])
    atomic_write_json(tmp_path / "r.json", {"record": rec}, root=tmp_path)
    assert json.loads((tmp_path / "r.json").read_text())["record"] == entries()[0]

    class Table:
        def to_json(self) -> str:
            return "not a record"

    with pytest.raises(TypeError, match="not JSON serialisable: Table"):
        atomic_write_json(tmp_path / "t.json", {"table": Table()}, root=tmp_path)


def test_an_imports_families_share_its_settings_hash_and_quality_alone_is_tabled():
    imported = {"status": "ok", "model": "EleutherAI/pythia-70m", "model_label": "p70m",
                "step": 1000, "source": "imported", "settings_hash": "import-abc",
                "families": ["embedding", "weights"], "perplexity": 30.0,
                "features": {"rankme": 5.0, "np_mean": 0.5}}
    rec = Record.from_json(imported)
    assert {f: p.settings_hash for f, p in rec.parts.items()} == {
        "embedding": "import-abc", "weights": "import-abc"}
    quality_only = {**imported, "families": [], "features": {}}
    table = results_table([quality_only])
    assert table["family"].tolist() == ["embedding"] and table["perplexity"].tolist() == [30.0]


def test_an_imported_target_cannot_take_a_field_the_record_gives_a_meaning():
    from toposig.families import registry
    from toposig.sources.imports import reserved_fields

    checked = {"model", "model_label", "step", "status", "family", "families", "features",
               "layer", "layer_names", "layer_features", "matrices", "loss_key",
               "checkpoint_loss_key", "model_type", "arrays_file", "settings_hash",
               "settings", "timings_s", "error"}
    assert checked | set(registry.names()) <= reserved_fields()  # every family's part too


def test_the_run_refuses_to_write_an_unsound_entry_and_writes_nothing(tmp_path):
    store = ResultStore(tmp_path / "out", "945195e2ce8e")
    bad = damaged(DAMAGE["no model"][0])
    with pytest.raises(RecordError, match="unsound entry for tiny-h16-l1 step 0: it has no "
                                          "model"):
        store.write_aggregates([entries()[1], bad], {"models": {}})
    assert not (tmp_path / "out" / "data").exists()


# --- statistics -----------------------------------------------------------------------

@pytest.mark.parametrize("path", STATISTICS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_committed_statistics_file_reads_typed_and_gives_its_json_back(path):
    raw = json.loads(path.read_text())
    st = Statistics.from_json(raw, where=str(path))
    assert st.to_json() == raw and st == Statistics.from_json(raw) and st != raw
    assert st.target == raw["target"] and st.records_sha256 == raw["records_sha256"]
    assert list(st.settings_hashes) == raw["settings_hash"]
    assert {k: list(v) for k, v in st.features.items()} == raw["features"]
    assert set(st.features) <= {g.name for g in registry.groups()}
    for label, m in raw["models"].items():
        summary = st.models[label]
        assert (summary.model, summary.n_checkpoints, list(summary.steps)) == (
            m["model"], m["n_checkpoints"], m["steps"])
        assert summary.final_quality["perplexity"] == m["final_perplexity"]
        assert dict(summary.final_features) == m["final_features"]
    for feature, c in raw["correlations"]["pooled"].items():
        assert st.correlations.pooled[feature] == Correlation(
            n=c["n"], spearman_r=c["spearman_r"], spearman_p=c["spearman_p"],
            spearman_p_method=c.get("spearman_p_method"), pearson_r=c["pearson_r"],
            pearson_p=c["pearson_p"], pearson_log_r=c["pearson_log_r"],
            pearson_log_p=c["pearson_log_p"])
    for label, by_feature in raw["correlations"]["per_model"].items():
        assert set(st.correlations.per_model[label]) == set(by_feature)
    for target in raw["correlations_by_target"]:
        assert st.correlations_with(target).target == target
    assert st.correlations_with(st.target) is st.correlations
    assert dict(st.notes) == raw["notes"] and not isinstance(st, Mapping)


def test_statistics_print_in_one_line_and_name_an_unknown_target():
    st = Statistics.from_json(json.loads(STATISTICS[0].read_text()))
    text = repr(st)
    assert "\n" not in text and len(text) < 160
    assert text.startswith("Statistics(3 model(s), 81 features against perplexity; "
                           "strongest pooled ")
    best = st.correlations.strongest(3)
    assert [abs(c.spearman_r) for _, c in best] == sorted(
        (abs(c["spearman_r"]) for c in st.json["correlations"]["pooled"].values()
         if c["spearman_r"] is not None), reverse=True)[:3]
    with pytest.raises(KeyError, match="no correlations with 'accuracy'; these are with "
                                       "perplexity, loss"):
        st.correlations_with("accuracy")


STATISTICS_DAMAGE = {
    "a list": (lambda s: [s], "hold a list"),
    "no target": (lambda s: s.pop("target") and s, "name no target"),
    "target_better odd": (lambda s: s.update(target_better="sideways") or s, "sideways"),
    "models a list": (lambda s: s.update(models=[]) or s, "models that are not an object"),
    "a model without steps": (lambda s: s["models"]["tiny-h16-l1"].pop("steps") and s,
                              "model 'tiny-h16-l1'"),
    "final perplexity a string": (
        lambda s: s["models"]["tiny-h16-l1"].update(final_perplexity="low") or s,
        "final_perplexity = 'low'"),
    "unknown feature family": (lambda s: s["features"].update({"Vibes!": ["x"]}) or s,
                               "features that are not lists"),
    "a correlation without n": (lambda s: s["correlations"]["pooled"]["rankme"].pop("n")
                                and s, "have correlations with the target: they hold a pooled "
                                       "correlation of rankme that has no count n"),
    "a count a float": (lambda s: s["correlations"]["pooled"]["rankme"].update(n=54.0) or s,
                        "pooled correlation of rankme that has no count n of checkpoints"),
    "a coefficient a string": (
        lambda s: s["correlations"]["per_model"]["tiny-h32-l2"]["rankme"].update(
            spearman_r="-0.9") or s, "tiny-h32-l2 correlation of rankme"),
    "by target damaged": (lambda s: s["correlations_by_target"].update(loss=[]) or s,
                          "correlations with loss"),
    "a section a list": (lambda s: s.update(phases=[]) or s, "sections phases"),
    "hashes a string": (lambda s: s.update(settings_hash="945195e2ce8e") or s,
                        "settings_hash"),
}


@pytest.mark.parametrize("name", STATISTICS_DAMAGE)
def test_unsound_statistics_are_refused_saying_why(name):
    change, says = STATISTICS_DAMAGE[name]
    raw = change(json.loads(STATISTICS[0].read_text()))
    with pytest.raises(StatisticsError) as err:
        Statistics.from_json(raw, where="statistics.json")
    assert str(err.value).startswith("statistics.json: the statistics ")
    assert says in str(err.value)


def test_a_folder_whose_statistics_are_damaged_does_not_use_them(tmp_path):
    folder = tmp_path / "res"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "all_results.json").write_bytes(
        (RESULTS / "data" / "all_results.json").read_bytes())
    stored = json.loads(STATISTICS[0].read_text())

    def problem(statistics: dict) -> str | None:
        (folder / "data" / "statistics.json").write_text(json.dumps(statistics))
        return Results(folder)._stored_problem()

    assert problem(stored) is None
    assert isinstance(Results(folder).statistics, Statistics)
    stored["models"]["tiny-h16-l1"]["n_checkpoints"] = "eighteen"
    assert problem(stored) == ("it is damaged (the statistics have a model 'tiny-h16-l1' "
                               "that has no checkpoint count or steps)")
    stored = json.loads(STATISTICS[0].read_text())
    stored["records_sha256"] = None
    assert problem(stored) == "it does not say which records it was computed from"
    deep = "[" * 100_000 + "]" * 100_000  # beyond what the JSON parser recurses into
    (folder / "data" / "statistics.json").write_text('{"target": "perplexity", "x": ' + deep + "}")
    assert Results(folder)._stored_problem().startswith("it cannot be read (RecursionError")


def small_records() -> list[dict]:
    out = []
    for label, offset in (("a", 0.0), ("b", 1.0)):
        for step, ppl in zip((0, 10, 100, 1000), (1000.0, 300.0, 50.0, 20.0), strict=True):
            out.append({"status": "ok", "model": f"runs/{label}", "model_label": label,
                        "step": step, "perplexity": ppl + offset,
                        "features": {"h1_total_persistence": 1.0 / ppl + offset,
                                     "rankme": 5.0 + step % 7, "np_mean": float("nan")}})
    return out


def test_compute_statistics_gives_typed_statistics_the_same_from_records_or_dicts():
    raw = small_records()
    records = [Record.from_json(e) for e in raw]
    typed = compute_statistics(records, n_bootstrap=20, n_surrogates=19)
    plain = compute_statistics(raw, n_bootstrap=20, n_surrogates=19)
    assert isinstance(typed, Statistics) and typed == plain
    assert typed.records_sha256 == records_digest(raw)
    assert typed.models["a"].steps == (0, 10, 100, 1000)
    assert typed.correlations.per_model["a"]["h1_total_persistence"].spearman_r == -1.0
    assert typed.models["b"].final_features["np_mean"] is None  # NaN: strict JSON's null
    json.dumps(typed.to_json(), allow_nan=False)


def test_the_records_digest_leaves_out_the_clocks_and_nothing_else():
    """A rerun that reproduces every value (other finished_at and timings_s, at the top
    and in a family's part) has the same digest, so the same statistics.json byte for
    byte; any other change to a record changes it."""
    raw = small_records()
    rerun = copy.deepcopy(raw)
    for entry in rerun:
        entry["finished_at"] = "2030-01-01T00:00:00Z"
        entry["timings_s"] = {"total": 123.0}
        entry["weights"] = {"timings_s": {"weights": 1.0}, "finished_at": "2030"}
    with_parts = copy.deepcopy(raw)
    for entry in with_parts:
        entry["weights"] = {}
    assert records_digest(rerun) == records_digest(with_parts)
    assert records_digest([Record.from_json(e) for e in raw]) == records_digest(raw)
    changed = copy.deepcopy(raw)
    changed[0]["features"]["rankme"] += 1e-12
    assert records_digest(changed) != records_digest(raw)
    renamed = copy.deepcopy(raw)
    renamed[0]["location"] = "elsewhere"
    assert records_digest(renamed) != records_digest(raw)


def test_records_and_statistics_pickle_and_copy_as_what_they_read():
    import pickle

    rec = Record.from_json(entries()[0])
    st = Statistics.from_json(json.loads(STATISTICS[0].read_text()))
    for obj in (rec, st):
        for again in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
            assert type(again) is type(obj) and again == obj and again.to_json() == obj.to_json()
    assert pickle.loads(pickle.dumps(rec)).checkpoint == rec.checkpoint


def test_what_statistics_say_of_themselves_reads_the_same_typed_or_partial():
    from toposig.records.statistics import About, about_of

    raw = json.loads(STATISTICS[0].read_text())
    typed = about_of(Statistics.from_json(raw))
    assert typed == about_of(raw)
    assert (typed.target, typed.target_better, typed.records_sha256) == (
        raw["target"], raw["target_better"], raw["records_sha256"])
    assert list(typed.settings_hashes) == raw["settings_hash"]
    assert dict(typed.notes) == raw["notes"] and typed.sections == set(raw)
    # partial or damaged JSON: a field of the wrong type reads as absent
    assert about_of({"target": 3, "settings_hash": "abc", "notes": ["x"],
                     "ensembles": "broken"}) == About(sections=frozenset(
                         {"target", "settings_hash", "notes", "ensembles"}))


def test_json_tree_makes_plain_strict_json_of_every_kind_of_value():
    """The fast path for exact ``float``/``int``/``str``/``dict``/``list`` and the
    general one (NumPy values, tuples, subclasses, typed records) give plain JSON alike:
    NaN and infinities as ``None`` whatever their type, ``bool`` kept."""
    import math

    import numpy as np

    from toposig.records.vocabulary import json_tree

    class Subclassed(float):
        pass

    value = {"f": 1.5, "nan": math.nan, "inf": -math.inf, "np_nan": np.float64("nan"),
             "np_f": np.float32(0.25), "i": 3, "np_i": np.int64(7), "b": True,
             "np_b": np.bool_(False), "s": "x", "none": None, "t": (1, 2.5, math.inf),
             "arr": np.array([[1.0, np.nan]]), "sub": Subclassed(math.inf),
             "nested": [{"k": [np.float64(2.0), -0.0]}]}
    tree = json_tree(value)
    assert tree == {"f": 1.5, "nan": None, "inf": None, "np_nan": None, "np_f": 0.25,
                    "i": 3, "np_i": 7, "b": True, "np_b": False, "s": "x", "none": None,
                    "t": [1, 2.5, None], "arr": [[1.0, None]], "sub": None,
                    "nested": [{"k": [2.0, -0.0]}]}
    assert type(tree["np_f"]) is float and type(tree["np_i"]) is int
    assert type(tree["np_b"]) is bool
    assert json.loads(json.dumps(tree, allow_nan=False)) == tree
