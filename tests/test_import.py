"""toposig import: the seed studies' published tables and documented CSV/Parquet tables
become results folders the analysis reads, values carried exactly, every bad input
refused with the file and row named before anything is written."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from toposig.analysis.correlations import feature_group
from toposig.cli.import_tables import main as import_main
from toposig.run.importer import write_import
from toposig.run.results_folder import load_results
from toposig.run.study import Study, StudyMismatchError
from toposig.sources.imports import ImportFormatError, detect_format, read_rows


def seed_a_files(folder: Path) -> list[Path]:
    return sorted((folder / "seed-a-pythia").glob("pythia-*_results.json"))


def entries(out: Path) -> list[dict]:
    return json.loads((out / "data" / "all_results.json").read_text())


def test_seed_a_values_are_carried_exactly_with_their_provenance(seed_measurements, tmp_path):
    files = seed_a_files(seed_measurements)
    assert [detect_format(f) for f in files] == ["seed-a"] * 3
    out = tmp_path / "seed-a"
    assert import_main([*map(str, files), "--out", str(out)]) == 0
    got = {(e["model_label"], e["step"]): e for e in entries(out)}
    assert len(got) == 57
    for f in files:
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        for i, src in enumerate(json.loads(f.read_text())):
            e = got[(src["model"].split("/")[-1], src["step"])]
            assert e["perplexity"] == src["perplexity"]
            assert e["mean_nll"] == math.log(src["perplexity"])
            assert e["imported"]["derived"] == ["mean_nll"]
            assert (e["imported"]["file"], e["imported"]["sha256"], e["imported"]["row"]) == \
                (str(f), sha, str(i))
            assert e["revision"] == src["checkpoint"]
            assert e["features"]["effective_rank_cov"] == src["effective_rank"]
            assert e["imported"]["columns"]["effective_rank_cov"] == "effective_rank"
            for key in ("h1_total_persistence", "h0_n_features", "participation_ratio",
                        "top_eigenvalue", "pca_variance_explained"):  # unknown ones kept
                assert e["features"][key] == src[key]
            assert "total_time_s" not in e["features"]
            assert e["timings_s"]["total_time_s"] == src["total_time_s"]
            fams = e["imported"]["feature_family"]
            assert fams["h1_total_persistence"] == "embedding_topological"
            assert fams["effective_rank_cov"] == "embedding_spectral"
            record = out / "records" / e["settings_hash"] / e["model_label"] / \
                f"step{e['step']:06d}.json"
            assert json.loads(record.read_text()) == e
    table = load_results(out)
    assert set(table["model"]) == {"pythia-70m", "pythia-160m", "pythia-410m"}
    assert (table["family"] == "embedding").all()


def test_seed_b_names_say_what_the_columns_measure(seed_measurements, tmp_path):
    path = seed_measurements / "seed-b-small-gpts" / "tda_features.json"
    assert detect_format(path) == "seed-b"
    out = tmp_path / "seed-b"
    assert import_main([str(path), "--out", str(out)]) == 0
    src = json.loads(path.read_text())
    got = entries(out)
    assert len(got) == 255
    assert list(json.loads((out / "data" / "config.json").read_text())["models"]) == list(src)
    for e in got:
        row = src[e["model_label"]][int(e["imported"]["row"].rsplit("[", 1)[1][:-1])]
        assert e["step"] == row["step"] and e["loss"] == row["loss"]
        assert e["features"]["np_seed_mean"] == row["neural_persistence_mean"]
        assert e["features"]["weight_h0_total_persistence"] == row["h0_total_persistence"]
        assert e["features"]["np_seed_layer_0"] == row["layer_0_np"]
        assert e["families"] == ["weights"]
    assert feature_group("weight_h0_total_persistence").name == "weight_topological"


def test_a_table_keeps_unknown_columns_and_its_qualities(tmp_path):
    csv = tmp_path / "evals.csv"
    csv.write_text("model,step,loss,accuracy,h1_total_persistence,revision\n"
                   "org/run-a,0,5.5,0.1,2.25,r0\norg/run-a,100,3.25,0.3,1.5,r1\n"
                   "run-b,0,5.75,,2.0,\n")
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out)]) == 0
    got = entries(out)
    assert [(e["model_label"], e["step"], e["loss"]) for e in got] == [
        ("run-a", 0, 5.5), ("run-a", 100, 3.25), ("run-b", 0, 5.75)]
    assert got[0]["features"] == {"accuracy": 0.1, "h1_total_persistence": 2.25}
    assert got[2]["features"]["accuracy"] is None and got[2]["revision"] is None
    assert got[1]["revision"] == "r1" and got[1]["imported"]["row"] == "3"
    parquet = tmp_path / "evals.parquet"
    pd.read_csv(csv).to_parquet(parquet)
    rows = read_rows([parquet])
    assert [r.features["h1_total_persistence"] for r in rows] == [2.25, 1.5, 2.0]


BAD_TABLES = {
    "no step column": ("model,loss\na,1\n", "no 'step' column"),
    "no model column": ("step,loss\n0,1\n", "no 'model' column"),
    "duplicate model x step": ("model,step,loss\na,0,1\na,0,2\n", "row 3: model 'a' step 0 "
                                                                 "is also in"),
    "non-numeric value": ("model,step,loss,f\na,0,1,x\n", "row 2: 'f' is 'x', not a number"),
    "fractional step": ("model,step,loss\na,1.5,1\n", "row 2: 'step' is '1.5'"),
    "negative step": ("model,step,loss\na,-1,1\n", "row 2: 'step' is '-1'"),
    "missing step": ("model,step,loss\na,,1\n", "row 2: 'step' is missing"),
    "header only": ("model,step,loss\n", "the table has no rows"),
    "unsafe label": ("model,step,loss\n..,0,1\n", "row 2: model label '..'"),
    "reserved label": ("model,step,loss\norg/all,0,1\n", "model label 'all' is reserved"),
    "infinite value": ("model,step,loss,f\na,0,1,inf\n", "not a finite number"),
    # issue 36, row 10: a cell more than the header made pandas take the first column as
    # the index, shifting every column (model 'm' at steps 0/10/20 became models 0, 10, 20)
    "a cell more than the header": ("model,step,loss\nm,0,2.0,x\nm,10,1.5,y\nm,20,1.2,z\n",
                                    "row 2 has 4 cells, the header 3"),
    "one row a cell short": ("model,step,loss,f\nm,0,2.0,1\nm,10,1.5\n",
                             "row 3 has 3 cells, the header 4"),
    # issue 36, row 12: a quality outside its domain was imported and correlated
    "perplexity 0": ("model,step,perplexity\nm,0,30\nm,10,0\n",
                     "row 3: 'perplexity' is 0, not a perplexity (exp of a mean token loss"),
    "perplexity negative": ("model,step,perplexity\nm,0,-4\n", "row 2: 'perplexity' is -4"),
    "perplexity below 1": ("model,step,perplexity\nm,0,0.5\n", "row 2: 'perplexity' is 0.5"),
    "negative loss": ("model,step,loss\nm,0,-0.1\n",
                      "row 2: 'loss' is -0.1, not a loss (a mean token loss in nats, >= 0)"),
    "negative mlm loss": ("model,step,mlm_loss\nm,0,-2\n", "row 2: 'mlm_loss' is -2"),
    # issue 36, row 11: a step of 1e300 failed on a 300-digit file name after two records
    # were written; one past 2^53 was rounded
    "a step of 1e300": ("model,step,loss\nm,0,2\nm,10,1.5\nm,1e300,1.2\n",
                        "row 4: 'step' is '1e300', beyond 2^53 - 1"),
    "a step past 2^53": ("model,step,loss\nm,9007199254740993,1\n",
                         "row 2: 'step' is '9007199254740993', beyond 2^53 - 1"),
    "a parameter count past 2^53": ("model,step,loss,num_parameters\nm,0,1,1e17\n",
                                    "row 2: 'num_parameters' is '1e17', beyond 2^53 - 1"),
    # found by a review: a digit Python's isdigit() accepts and int() does not
    "a superscript step": ("model,step,loss\nm,\u00b2,1\n",
                           "row 2: 'step' is '\u00b2', not a number"),
}

BIG = "9" * 400
BAD_JSON = {  # issue 36, row 11: each was a traceback
    "a 400-digit feature": ('{"m": [{"step": 0, "loss": 1.0, "f": ' + BIG + '}]}',
                            "m[0]: 'f' is an integer of 400 digits, beyond any"),
    "a 5,000-digit step": ('{"m": [{"step": ' + "9" * 5000 + ', "loss": 1.0}]}',
                           "not valid JSON (Exceeds the limit"),
    "100,000-deep lists": ('{"m": [{"step": 0, "loss": 1.0, "f": ' + "[" * 100_000
                           + "]" * 100_000 + '}]}', "nested too deep"),
    "a step past 2^53": ('{"m": [{"step": 9007199254740993, "loss": 1.0}]}',
                         "'step' is 9007199254740993, beyond 2^53 - 1"),
    "a step of 1e300": ('{"m": [{"step": 0, "loss": 1.0}, {"step": 1e300, "loss": 1.0}]}',
                        "'step' is 1e+300, beyond 2^53 - 1"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_values_too_large_or_deep_are_refused_before_anything_is_written(case, tmp_path,
                                                                         capsys):
    path = tmp_path / "curves.json"
    path.write_text(BAD_JSON[case][0])
    out = tmp_path / "out"
    assert import_main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and BAD_JSON[case][1] in err, err[:300]
    assert "Traceback" not in err and len(err) < 400
    assert not out.exists()


def test_a_message_quotes_a_few_dozen_characters_of_an_oversized_value(tmp_path, capsys):
    """Issue 36, row 13: a 500 MB cell was refused with all of it in the message."""
    csv = tmp_path / "big.csv"
    csv.write_text("model,step,loss,f\nm,0,2.0," + "x" * 1_000_000 + "\n")
    assert import_main([str(csv), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "row 2: 'f' is 'xxxxxxx" in err and "(1,000,002 characters), not a number" in err
    assert len(err) < 400, len(err)
    long_model = "m" * 10_000
    csv.write_text(f"model,step,loss\n{long_model},0,2.0\n{long_model},0,2.1\n")
    assert import_main([str(csv), "--out", str(tmp_path / "out")]) == 2
    assert len(capsys.readouterr().err) < 400


def test_what_is_not_a_file_is_named_for_what_it_is(tmp_path, capsys):
    """Issue 36, row 14: a folder, a device, a FIFO and a link loop were all 'no such
    file'."""
    import os

    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    for path, says in ((folder, "is a folder, not a file"),
                       (Path("/dev/zero"), "is a device, not a file"),
                       (fifo, "is a FIFO, not a file"),
                       (loop, "is a link that leads nowhere (a loop)"),
                       (tmp_path / "gone.csv", "no such file")):
        assert import_main([str(path), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"{path}: {says}" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_tables_are_refused_naming_file_and_row_before_writing(case, tmp_path, capsys):
    text, message = BAD_TABLES[case]
    csv = tmp_path / "bad.csv"
    csv.write_text(text)
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(csv) in err and message in err, err
    assert not out.exists()


def test_bad_files_and_collisions_across_files(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(ImportFormatError, match="empty.json: the file is empty"):
        read_rows([empty])
    damaged = tmp_path / "d.json"
    damaged.write_text("[{")
    with pytest.raises(ImportFormatError, match="d.json: not valid JSON"):
        read_rows([damaged])
    odd = tmp_path / "odd.json"
    odd.write_text('{"a": 1}')
    with pytest.raises(ImportFormatError, match="not a format toposig imports"):
        read_rows([odd])
    seed_a = tmp_path / "a.json"
    seed_a.write_text(json.dumps([{"model": "x/m", "step": 0, "perplexity": "high"}]))
    with pytest.raises(ImportFormatError, match=r"a.json, row 0: 'perplexity' is 'high'"):
        read_rows([seed_a])
    seed_b = tmp_path / "b.json"
    seed_b.write_text(json.dumps({"m": [{"step": 0, "loss": 1.0}, {"step": 1}]}))
    with pytest.raises(ImportFormatError, match=r"b.json, m\[1\]: no 'loss'"):
        read_rows([seed_b])
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text("model,step,loss\nx/m,0,1\n")
    two.write_text("model,step,loss\ny/m,5,1\n")
    with pytest.raises(ImportFormatError, match="'x/m' and 'y/m' would both be labelled 'm'"):
        read_rows([one, two])
    two.write_text("model,step,loss\nx/m,0,2\n")
    with pytest.raises(ImportFormatError, match="step 0 is also in .*one.csv, row 2"):
        read_rows([one, two])
    with pytest.raises(ImportFormatError, match="--format must be one of"):
        read_rows([one], "excel")
    assert import_main([str(tmp_path / "absent.csv"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_an_imported_folder_is_its_own_study(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("model,step,loss,f\na,0,2,1\na,10,1,3\n")
    out = tmp_path / "out"
    rows = read_rows([csv])
    write_import(out, rows, feature_group)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    write_import(out, read_rows([csv]), feature_group)  # the same import: the same bytes
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    other = tmp_path / "u.csv"
    other.write_text("model,step,loss,f\nb,0,2,1\n")
    with pytest.raises(StudyMismatchError, match="an import of other files"):
        write_import(out, read_rows([other]), feature_group)
    with pytest.raises(StudyMismatchError, match="imported with `toposig import`"):
        Study.load(out).check({"a": "runs/a"})
    run_folder = tmp_path / "run"
    (run_folder / "data").mkdir(parents=True)
    (run_folder / "data" / "config.json").write_text(json.dumps({"models": {"m": "x"}}))
    with pytest.raises(StudyMismatchError, match="the study of a run"):
        write_import(run_folder, rows, feature_group)


def test_the_same_file_with_other_options_is_named_as_such(tmp_path, capsys):
    """Issue 36, row 14: the same file imported with --target and then without it was
    refused as 'an import of other files'."""
    csv = tmp_path / "t.csv"
    csv.write_text("model,step,loss,acc\na,0,2,0.1\na,10,1,0.3\n")
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out), "--target", "acc",
                        "--higher-is-better"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert import_main([str(csv), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds an import of the same file(s), with --target acc, this import (none)" in err
    assert "other files" not in err
    assert import_main([str(csv), "--out", str(out), "--target", "acc",
                        "--higher-is-better", "--params", "a=100"]) == 2
    assert "the same file(s), with other --params" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_killed_imports_records_do_not_stay_beside_the_next_imports(tmp_path, capsys):
    """Issue 36, row 14: an import killed before its config.json left its records, and
    the next import of other files into the folder kept them beside its own: compare
    read both."""
    from toposig.cli.compare import main as compare_main

    first, second = tmp_path / "t.csv", tmp_path / "u.csv"
    first.write_text("model,step,loss,f\na,0,2,1\na,10,1,3\n")
    second.write_text("model,step,loss,f\nb,0,2,1\nb,10,1.5,2\n")
    out, alone = tmp_path / "out", tmp_path / "alone"
    assert import_main([str(first), "--out", str(out)]) == 0
    (out / "data" / "config.json").unlink()  # killed before its last write
    mine = out / "data" / "notes.json"
    mine.write_text('{"the user\'s": true}')
    assert import_main([str(second), "--out", str(out)]) == 0
    assert import_main([str(second), "--out", str(alone)]) == 0
    capsys.readouterr()
    (alone / "data" / "notes.json").write_text(mine.read_text())
    assert compare_main([str(alone), str(out)]) == 0, capsys.readouterr().out
    assert [p.name for p in (out / "records").glob("*/*/")] == ["b"]
    assert not (out / "data" / "a_results.json").exists()
    assert mine.read_text() == '{"the user\'s": true}'
    run = tmp_path / "run"  # a run's records with no study: not an import's to remove
    (run / "records" / "e123" / "m").mkdir(parents=True)
    (run / "records" / "e123" / "m" / "step000000.json").write_text("{}")
    assert import_main([str(second), "--out", str(run)]) == 2
    assert "holds records of a run (records/e123)" in capsys.readouterr().err
    assert (run / "records" / "e123" / "m" / "step000000.json").read_text() == "{}"


def test_the_analysis_runs_on_an_imported_folder(tmp_path):
    from toposig.analyze import analyze

    csv = tmp_path / "t.csv"
    lines = ["model,step,loss,h1_total_persistence,np_mean"]
    for m, scale in (("a", 1.0), ("b", 1.3)):
        for step in (0, 10, 20, 40, 80, 160, 320, 640):
            loss = scale * (2 + 3 * (1 + step) ** -0.5)
            lines.append(f"{m},{step},{loss},{loss * 0.5 + step % 3},{1 / loss}")
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out)]) == 0
    statistics, _ = analyze(out, plots=False, seed=0)
    assert statistics.target == "loss"
    assert statistics.correlations.per_model["a"]["np_mean"].spearman_r == -1.0
    assert (out / "summary.md").is_file()


def test_a_quality_other_than_the_loss_with_its_direction(tmp_path, capsys):
    from toposig.analyze import analyze
    from toposig.cli.backtest import main as backtest_main

    csv = tmp_path / "evals.csv"
    lines = ["model,step,accuracy,np_mean,h1_total_persistence"]
    for m, scale in (("a", 1.0), ("b", 0.8)):
        for step in (0, 10, 20, 40, 80, 160, 320, 640):
            acc = scale * (0.9 - 0.6 * (1 + step) ** -0.5)
            lines.append(f"{m},{step},{acc},{2 * acc + 0.01 * (step % 3)},{1 - acc}")
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out), "--target", "accuracy",
                        "--higher-is-better"]) == 0
    e = entries(out)[0]
    assert e["quality"] == {"column": "accuracy", "higher_is_better": True}
    assert "accuracy" not in e["features"] and e["accuracy"] == pytest.approx(0.3)
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["imported"]["quality"]["column"] == "accuracy"
    statistics, _ = analyze(out, plots=False, seed=0)
    assert statistics.target == "accuracy" and statistics.target_better == "higher"
    assert statistics.models["a"].final_quality["accuracy"] == pytest.approx(
        0.9 - 0.6 * 641 ** -0.5)
    assert statistics.controlled is not None
    assert set(statistics.controlled.targets.values()) == {"accuracy"}
    per_model = statistics.correlations.per_model["a"]
    assert per_model["np_mean"].spearman_r > 0.9  # rises as the model improves
    assert per_model["h1_total_persistence"].spearman_r == -1.0
    assert "higher is better" in (out / "summary.md").read_text()
    assert backtest_main([str(out), "--json", str(tmp_path / "b.json")]) == 2
    assert "no loss to forecast (its quality is 'accuracy')" in capsys.readouterr().err
    # a lower-is-better quality cannot be declared higher-is-better; a missing value is named
    assert import_main([str(csv), "--out", str(tmp_path / "x"), "--target", "loss",
                        "--higher-is-better"]) == 2
    assert import_main([str(csv), "--out", str(tmp_path / "y"), "--higher-is-better"]) == 2
    holes = tmp_path / "holes.csv"
    holes.write_text("model,step,accuracy,f\na,0,,1\n")
    assert import_main([str(holes), "--out", str(tmp_path / "z"), "--target", "accuracy"]) == 2
    assert "row 2: no value of the target 'accuracy'" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_a_target_cannot_overwrite_a_records_fields_and_a_missing_model_is_refused(
        tmp_path, capsys):
    csv = tmp_path / "t.csv"
    csv.write_text("model,step,status\na,0,1\n")
    assert import_main([str(csv), "--out", str(tmp_path / "o"), "--target", "status"]) == 2
    assert "not a quality" in capsys.readouterr().err and not (tmp_path / "o").exists()
    parquet = tmp_path / "t.parquet"
    pd.DataFrame({"model": ["a", None], "step": [0, 1], "loss": [1.0, 2.0]}).to_parquet(
        parquet)
    with pytest.raises(ImportFormatError, match="row 1: 'model' is missing"):
        read_rows([parquet])
    pd.DataFrame({"model": ["a", float("nan")], "step": [0, 1], "loss": [1.0, 2.0]}).to_parquet(
        parquet)
    with pytest.raises(ImportFormatError, match="row 1: 'model' is missing"):
        read_rows([parquet])


def test_parameter_counts_come_with_params(tmp_path, capsys):
    """Seed B's files have no parameter counts; the paper's Table 1 gives them
    (results/seeds/seed-b-params.csv), as a file or as MODEL=N pairs."""
    csv = tmp_path / "t.csv"
    csv.write_text("model,step,loss,np_mean\na,0,3.0,0.5\na,10,2.5,0.6\nb,0,3.1,0.4\n")
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out), "--params", "a=1000,b=2_000"]) == 0
    got = {e["model_label"]: e["num_parameters"] for e in entries(out)}
    assert got == {"a": 1000, "b": 2000}
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["imported"]["num_parameters"] == {"a": 1000, "b": 2000}
    table = tmp_path / "params.csv"
    table.write_text("model,num_parameters\na,1000\nb,2000\n")
    again = tmp_path / "again"
    assert import_main([str(csv), "--out", str(again), "--params", str(table)]) == 0
    assert (again / "data" / "config.json").read_bytes() == \
        (out / "data" / "config.json").read_bytes()
    # other counts into the same folder: another import, refused
    assert import_main([str(csv), "--out", str(out), "--params", "a=1000,b=3000"]) == 2
    assert "holds an import of the same file(s), with other --params" in capsys.readouterr().err
    for bad, why in (("a=1000", "no count for model 'b'"), ("a=1000,b=0", "positive whole"),
                     ("a=1000,b=2000,c=5", "not in the import"), ("a", "is not MODEL=N"),
                     ("a=1,a=2,b=3", "given twice")):
        assert import_main([str(csv), "--out", str(tmp_path / "x"), "--params", bad]) == 2
        assert why in capsys.readouterr().err, bad
    table.write_text("name,count\na,1\n")
    assert import_main([str(csv), "--out", str(tmp_path / "x"), "--params", str(table)]) == 2
    assert "needs the columns" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_seed_b_with_the_papers_parameter_counts(seed_measurements, tmp_path):
    path = seed_measurements / "seed-b-small-gpts" / "tda_features.json"
    params = Path(__file__).resolve().parents[1] / "results" / "seeds" / "seed-b-params.csv"
    out = tmp_path / "seed-b"
    assert import_main([str(path), "--out", str(out), "--params", str(params)]) == 0
    sizes = {e["model_label"]: e["num_parameters"] for e in entries(out)}
    assert sizes == {"tiny-3k": 2936, "small-7k": 7408, "med-21k": 20640,
                     "large-46k": 46368, "xl-97k": 97200}


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, capsys, monkeypatch):
    """Issue 36, row 17: a full disk gave an error naming no file."""
    import errno

    import toposig.files.atomic as writer

    csv = tmp_path / "t.csv"
    csv.write_text("model,step,loss\na,0,2\n")

    def full(*args) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    for call, named in (("write", "records/import-"), ("fsync", "data/all_results.json")):
        with monkeypatch.context() as m:  # a record (written in a batch), an aggregate
            m.setattr(writer.os, call, full)
            assert import_main([str(csv), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert "No space left on device" in err and named in err, err
        assert "Traceback" not in err


def test_an_import_killed_among_its_records_is_repaired_by_the_next(tmp_path, monkeypatch):
    """Issue 36, row 15: the records are no longer flushed one by one; a killed import
    (here after 5 of 12 records) leaves a folder without config.json, and importing the
    same file again gives what an uninterrupted import gives, byte for byte."""
    import toposig.run.importer as importer

    csv = tmp_path / "t.csv"
    csv.write_text("model,step,loss,f\n" + "".join(
        f"{m},{s},{2 + 1 / (1 + s)},{s % 7}\n" for m in ("a", "b") for s in range(0, 60, 10)))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert import_main([str(csv), "--out", str(whole)]) == 0
    real, written = importer._compact, []

    def dies(obj):
        if len(written) == 5:
            raise KeyboardInterrupt
        written.append(obj)
        return real(obj)

    with monkeypatch.context() as m:
        m.setattr(importer, "_compact", dies)
        with pytest.raises(KeyboardInterrupt):
            import_main([str(csv), "--out", str(killed)])
    assert not (killed / "data" / "config.json").exists()
    assert len(list(killed.rglob("step*.json"))) == 5
    (folder,) = killed.glob("records/*/a")
    (folder / ".step000050.json.0badc0de.tmp").write_text('{"cut sh')  # killed mid-write
    assert import_main([str(csv), "--out", str(killed)]) == 0

    def files(folder):
        return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                if p.is_file() and p.name != ".toposig.lock"}

    assert files(killed) == files(whole)
