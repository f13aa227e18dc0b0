"""toposig.load_results: every result of a folder as one tidy table, checked value by value
against the aggregate entries it comes from; the --export files read back equal."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

import analyze_results
import toposig
from toposig.analysis.table import results_table
from toposig.features import homology, spectral, weights
from toposig.run.results_folder import export_table

FIXTURE = Path(__file__).parent / "fixtures" / "mini_results"


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    return json.loads((FIXTURE / "data" / "all_results.json").read_text())


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return toposig.load_results(FIXTURE)


def same(a, b) -> bool:
    return (a is None and pd.isna(b)) or math.isclose(a, b, rel_tol=0, abs_tol=0)


def test_one_row_per_model_step_family_and_layer_or_matrix(entries, table):
    expected = sum(len(e["layer_features"]) + len(e["weights"]["matrices"]) + 1 + 2
                   for e in entries)
    assert len(table) == expected
    keys = table[["model", "step", "family", "layer", "matrix"]].astype(str)
    assert not keys.duplicated().any()
    assert list(table.columns[:8]) == ["model", "model_path", "step", "revision", "family",
                                       "layer", "matrix", "settings_hash"]
    assert str(table["step"].dtype) == "Int64" and str(table["layer"].dtype) == "Int64"


def test_every_value_is_the_entry_value(entries, table):
    indexed = table.set_index(["model", "step", "family"])
    for e in entries:
        rows = indexed.loc[(e["model_label"], e["step"], "embedding")]
        for layer, values in e["layer_features"].items():
            row = rows[rows["layer"] == int(layer)].iloc[0]
            assert all(same(v, row[k]) for k, v in values.items())
            assert row["settings_hash"] == e["settings_hash"]
            assert same(e["perplexity"], row["perplexity"]) and same(e["loss"], row["loss"])
        w = indexed.loc[(e["model_label"], e["step"], "weights")]
        for m in e["weights"]["matrices"]:
            row = w[w["matrix"] == m["name"]].iloc[0]
            assert same(m["np_normalized"], row["np_normalized"])
            assert same(m["h0_total_persistence"], row["h0_total_persistence"])
        overall = w[w["matrix"].isna()].iloc[0]
        assert same(e["features"]["np_mean"], overall["np_mean"])
        assert overall["settings_hash"] == e["weights"]["settings_hash"]
        for family, key in (("landscape", "hessian_eig_1"),
                            ("gradients", "grad_h0_total_persistence")):
            row = indexed.loc[(e["model_label"], e["step"], family)]
            assert same(e["features"][key], row[key])
            assert pd.isna(row["np_mean"]) and pd.isna(row["rankme"])


def test_records_without_layer_features_give_the_analysed_layer():
    entry = {"status": "ok", "model_label": "m", "model": "runs/m", "step": 5,
             "families": ["embedding"],
             "layer": 3, "settings_hash": "abc", "perplexity": 9.0,
             "features": {"rankme": 4.0, "h1_total_persistence": 2.0}}
    table = results_table([entry])
    assert table[["layer", "rankme", "h1_total_persistence"]].iloc[0].tolist() == [3, 4.0, 2.0]
    assert results_table([]).empty


def test_export_writes_csv_and_parquet_that_read_back_equal(tmp_path, table):
    out = tmp_path / "results"
    shutil.copytree(FIXTURE, out)
    assert analyze_results.main(["--results", str(out), "--no-plots", "--design-runs", "0",
                                 "--export", "csv", "--export", "parquet"]) == 0
    parquet = pd.read_parquet(out / "data" / "results_table.parquet")
    pd.testing.assert_frame_equal(parquet, table, check_dtype=False)
    csv = pd.read_csv(out / "data" / "results_table.csv")
    assert csv.shape == table.shape and list(csv.columns) == list(table.columns)
    assert csv["np_mean"].equals(table["np_mean"].astype(float))
    with pytest.raises(ValueError, match="the formats are csv, parquet"):
        export_table(table, tmp_path / "t.xlsx")


def test_the_public_names_are_the_library_functions():
    assert toposig.vietoris_rips is homology.vietoris_rips
    assert toposig.diagram_features is homology.diagram_features
    assert toposig.spectral_features is spectral.spectral_features
    assert toposig.neural_persistence is weights.neural_persistence
    assert toposig.weight_signatures is weights.weight_signatures
    assert set(toposig.__all__) <= set(dir(toposig))
    with pytest.raises(AttributeError):
        toposig.not_a_name  # noqa: B018


def test_analyze_refuses_an_unknown_figure_format_before_any_work(tmp_path, capsys):
    assert analyze_results.main(["--results", str(tmp_path / "none"), "--formats",
                                 "png,jpg"]) == 2
    assert "figure formats are png, pdf, svg" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
