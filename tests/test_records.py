"""The record vocabulary (records.py) and the figure convention (report/style.py)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from conftest import records_of

from toposig.analysis.correlations import feature_group, feature_names, is_probe, signature_of
from toposig.config import SettingsError
from toposig.families import registry
from toposig.families.registry import parse_signatures
from toposig.records import (
    IDENTITY,
    SCHEMA_VERSION,
    Family,
    record_family,
    record_header,
)
from toposig.report import figures, style

IDENT = {"model": "runs/m", "model_label": "m", "step": 4, "source": "local",
         "location": "runs/m/step4", "revision": None, "checkpoint_fingerprint": "abc",
         "extra": "not part of the identity"}


def test_a_family_is_its_plain_name_in_records_options_and_json():
    assert Family("weights") == "weights" and f"{Family('landscape')}" == "landscape"
    assert json.loads(json.dumps({Family("embedding"): [Family("gradients")]})) == {
        "embedding": ["gradients"]}
    assert type(json.loads(json.dumps(Family("weights")))) is str
    for bad in ("Weights", "2d", "", "a-b", None, 3):
        with pytest.raises(ValueError, match="not a signature family's name"):
            Family(bad)
    assert parse_signatures("weights, embedding,weights") == ("weights", "embedding")
    with pytest.raises(SettingsError, match="embedding, weights, landscape, gradients"):
        parse_signatures("embedding,topology")


@pytest.mark.parametrize(("family", "status", "tagged"), [
    ("embedding", "ok", False),  # schema 2's embedding records have no family field
    ("embedding", "failed", True),
    ("weights", "ok", True),
    ("gradients", "failed", True),
])
def test_every_record_starts_with_one_header(family, status, tagged):
    header = record_header(family, IDENT, status)
    keys = ["schema_version", "status", *(["family"] if tagged else []), *IDENTITY]
    assert list(header) == keys
    assert header["schema_version"] == SCHEMA_VERSION and header["status"] == status
    assert record_family(header) == family
    assert type(header.get("family", "")) is str  # written as a plain string


def test_the_committed_records_have_the_header_record_header_writes():
    root = Path(__file__).resolve().parents[1] / "results" / "records"
    seen = set()
    for path in sorted(root.glob("*/*/step000000.json")):
        record = json.loads(path.read_text())
        family = record_family(record)
        seen.add(family)
        header = record_header(family, record, record["status"])
        assert list(record)[:len(header)] == list(header), path
        assert {k: record[k] for k in header} == header, path
    config = json.loads((root.parent / "data" / "config.json").read_text())
    assert seen == set(config["signatures"])  # the reference run's families, all of them


def test_feature_groups_name_their_family_and_label():
    cases = {"h1_total_persistence": ("embedding_topological", "embedding"),
             "rankme": ("embedding_spectral", "embedding"),
             "np_mean": ("weight_topological", "weights"),
             "weight_std": ("weight_statistics", "weights"),
             "hessian_trace": ("curvature", "landscape"),
             "landscape_n_minima": ("landscape_topological", "landscape"),
             "grad_h1_total_persistence": ("gradient_topological", "gradients"),
             "grad_norm_mean": ("gradient_statistics", "gradients"),
             "grad_cosine_mean": ("gradient_agreement", "gradients"),
             "llc_mean": ("llc", "llc"),
             "zigzag_h0_n_bars": ("interlayer_topological", "interlayer"),
             "layer_knn_overlap": ("interlayer_statistics", "interlayer"),
             "mean_norm": ("other", "embedding")}
    for name, (group, family) in cases.items():
        assert feature_group(name).name == group and signature_of(name) == family, name
    assert {registry.owner(g).name for g in registry.groups()} == set(registry.names())
    assert [g.name for g in registry.groups() if registry.owner(g).probes_loss] == [
        "curvature", "landscape_topological", "gradient_topological", "gradient_statistics",
        "gradient_agreement", "llc"]
    assert [n for n in cases if is_probe(n)] == ["hessian_trace", "landscape_n_minima",
                                                 "grad_h1_total_persistence", "grad_norm_mean",
                                                 "grad_cosine_mean", "llc_mean"]
    assert feature_group("np_mean").label == "weight topology"
    assert str(feature_group("np_mean")) == "weight_topological"
    # feature_names groups in the registry's group order, the unknown last
    records = records_of([{"model_label": "m", "features": {n: 1.0 for n in
                                                            reversed(list(cases))}}])
    assert [feature_group(n).name for n in feature_names(records)] == [
        g for g, _ in cases.values()]


def test_the_package_version_is_pyprojects():
    import re

    import toposig
    from toposig.run.pipeline import package_versions

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = re.search(r'^version = "([^"]+)"$', pyproject.read_text(), re.M).group(1)
    assert toposig.__version__ == declared == package_versions()["toposig"]


# ------------------------------------------------------------------------ figure style


def test_every_figure_follows_the_one_convention():
    assert len(figures.ALL_FIGURES) == 25
    for name, fig in figures.ALL_FIGURES.items():
        assert isinstance(fig, style.Figure) and fig.name == name
        assert fig.__doc__ and fig.__name__.startswith("plot_")
        assert fig.applies([], {}, None) is False, name  # nothing to draw from nothing


def test_a_figure_draws_under_the_style_and_leaves_global_settings_alone(tmp_path):
    seen = {}

    def draw(records, statistics, arrays, ax):
        seen.update(size=plt.rcParams["figure.titlesize"], records=records,
                    statistics=statistics, arrays=arrays, ax=ax)
        fig, _ = style.subplots(target=ax)
        return fig

    fig = style.figure("demo")(draw)
    before = plt.rcParams["figure.titlesize"]
    arrays = dict  # any record -> arrays accessor; handed to the drawing as it is
    path = fig(None, None, tmp_path / "demo.png", arrays)
    assert path == tmp_path / "demo.png" and path.is_file()
    assert seen == {"size": style.RC_PARAMS["figure.titlesize"], "records": [],
                    "statistics": {}, "arrays": arrays, "ax": None}
    assert plt.rcParams["figure.titlesize"] == before
    assert style.applicable(style.registry(fig), [], {}, None) == ["demo"]
    with pytest.raises(ValueError, match="two figures named demo"):
        style.registry(fig, fig)
