"""The features the families declare (toposig.families.registry): every feature the
package computes is declared by its family, with its group, unit and kind, and the
analysis classifies features by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toposig.analysis import controls, correlations
from toposig.families import registry
from toposig.families.base import Kind, Scope

RESULTS = Path(__file__).resolve().parents[1] / "results"


def recorded_feature_names(entries: list[dict]) -> set[str]:
    names: set[str] = set()
    for e in entries:
        names |= set(e.get("features") or {})
        for layer in (e.get("layer_features") or {}).values():
            names |= set(layer)
    return names


def recorded_matrix_values(entries: list[dict]) -> set[str]:
    return {k for e in entries for m in (e.get("weights") or {}).get("matrices") or ()
            for k in m if k not in ("name", "shape")}


def test_every_feature_of_the_reference_results_is_declared():
    entries = json.loads((RESULTS / "data" / "all_results.json").read_text())
    names = recorded_feature_names(entries)
    assert len(names) > 75
    assert sorted(n for n in names if registry.feature(n) is None) == []
    values = recorded_matrix_values(entries)
    assert len(values) > 30
    assert sorted(n for n in values if registry.matrix_feature(n) is None) == []


def test_every_feature_measure_gives_with_every_family_and_h2_is_declared():
    from conftest import causal_lm

    import toposig
    from toposig.config import RunSettings
    from toposig.families.gradients import GradientsFamily
    from toposig.families.landscape import LandscapeFamily
    from toposig.model.training import byte_tokenizer

    texts = [f"text {i}: " + "the quick brown fox jumps over the lazy dog " * (1 + i % 3)
             for i in range(16)]
    m = toposig.measure(causal_lm("gpt2", seed=0), byte_tokenizer(), texts,
                        families=["embedding", "weights", "landscape", "gradients",
                                  "interlayer"],
                        settings=RunSettings(n_texts=16, maxdim=2), progress=False,
                        family_settings={
                            "landscape": LandscapeFamily(n_windows=2, window=8, res=3,
                                                         trace_samples=2),
                            "gradients": GradientsFamily(n_windows=8, window=8,
                                                         proj_dim=16, maxdim=2)})
    names = recorded_feature_names([m.entry])
    assert any(n.startswith("h2_") for n in names) and "hessian_eig_2" in names
    assert "zigzag_h0_n_bars" in names and "layer_knn_overlap" in names
    assert sorted(n for n in names if registry.feature(n) is None) == []
    assert sorted(n for n in recorded_matrix_values([m.entry])
                  if registry.matrix_feature(n) is None) == []


def test_the_groups_prefixes_agree_with_every_declared_name():
    """So that an imported name (classified by the prefixes) lands where the package's
    own would: every declared checkpoint feature's name starts with a prefix of its own
    group, or with no group's prefix before it."""
    for group in registry.groups():
        for f in group.features:
            first = next((g for g in registry.groups()
                          if g.prefixes and f.name.startswith(g.prefixes)), None)
            assert first is None or first is group, (f.name, group.name, first.name)
    for name in ("hessian_eig_1", "hessian_eig_12", "np_seed_layer_3"):
        assert registry.feature(name) is not None, name


def test_names_the_package_does_not_compute_are_not_declared_but_still_classified():
    for name in ("hessian_eig_0", "h1_total", "accuracy", "grad_h1_foo", "weight_h1_totals"):
        assert registry.feature(name) is None, name
    assert correlations.feature_group("accuracy").name == "other"
    assert correlations.feature_group("h1_custom_score").name == "embedding_topological"
    assert correlations.feature_group("weight_h1_custom").name == "weight_topological"
    # an imported weight statistic is one (as before the registry, it has no baselines)
    assert correlations.feature_group("weight_sparsity").name == "weight_statistics"
    assert controls.baselines_of("weight_sparsity") == ()


EMBEDDING = ("mean_norm", "effective_rank_cov", "rankme")
WEIGHTS = ("weight_l2_norm", "weight_spectral_norm_mean", "weight_alpha_mean",
           "weight_alpha_weighted_mean", "weight_std_over_max_mean")


@pytest.mark.parametrize("name, group, baselines", [
    ("h1_total_persistence", "embedding_topological", EMBEDDING),
    ("weight_h1_total", "weight_topological", WEIGHTS),
    ("np_seed_layer_4", "weight_topological", WEIGHTS),
    ("weight_alpha_mean", "weight_statistics", ()),
    ("landscape_basin_depth", "landscape_topological", ("hessian_trace",)),
    ("grad_h0_total_persistence", "gradient_topological",
     ("grad_norm_mean", "grad_noise_scale")),
    ("grad_norm_mean", "gradient_statistics", ()),
    ("grad_noise_scale", "gradient_statistics", ()),
    # not topology, but what the noise scale predicts: tested beyond it
    ("grad_cosine_mean", "gradient_agreement", ("grad_noise_scale",)),
    ("hessian_eig_3", "curvature", ()),
    ("rankme", "embedding_spectral", ()),
    ("mean_norm", "other", ()),
    ("zigzag_h0_entropy", "interlayer_topological", ("layer_knn_overlap",)),
    ("layer_knn_overlap", "interlayer_statistics", ()),
])
def test_the_analysis_classifies_and_controls_by_the_registry(name, group, baselines):
    assert correlations.feature_group(name).name == group
    assert controls.baselines_of(name) == baselines


def test_every_topological_group_names_baselines_its_family_or_another_declares():
    for group in registry.groups():
        if group.topological:
            assert group.baselines, group.name
            for b in group.baselines:
                found = registry.declared_group(b)
                assert found is not None and not found.topological, (group.name, b)


def test_every_feature_says_what_it_is():
    every = [f for c in registry.families() for f in c.all_features()]
    assert len(every) > 120
    assert all(f.description and f.unit and isinstance(f.kind, Kind) for f in every)
    info = registry.feature("h1_total_persistence")
    assert info.unit == "distance" and Scope.LAYER in info.scopes
    assert correlations.signature_of("weight_alpha_mean") == "weights"


@pytest.mark.parametrize("name, kind", [
    ("h1_n_features", Kind.COUNT), ("h1_total_persistence", Kind.DISCONTINUOUS),
    ("h0_persistence_entropy", Kind.DISCONTINUOUS), ("rankme", Kind.CONTINUOUS),
    ("np_mean", Kind.CONTINUOUS), ("weight_h1_count", Kind.COUNT),
    ("landscape_n_minima", Kind.COUNT), ("landscape_basin_depth", Kind.DISCONTINUOUS),
    ("hessian_eig_7", Kind.CONTINUOUS), ("pca_components", Kind.COUNT),
    ("zigzag_h0_n_bars", Kind.COUNT), ("zigzag_h0_entropy", Kind.DISCONTINUOUS),
    ("zigzag_h0_mean_span", Kind.DISCONTINUOUS), ("layer_knn_overlap", Kind.CONTINUOUS),
])
def test_each_feature_declares_how_its_values_behave(name, kind):
    assert registry.kind_of(name) == kind


def test_a_matrix_value_is_looked_up_apart_from_the_checkpoint_features():
    """``std`` and ``np`` are what a weight matrix holds; as keys elsewhere (a bootstrap
    spread's ``std``) they are no feature."""
    assert registry.kind_of("std") is None and registry.kind_of("np") is None
    assert registry.kind_of("std", matrix=True) == Kind.CONTINUOUS
    assert registry.kind_of("ww_num_evals", matrix=True) == Kind.COUNT
    assert registry.kind_of("h1_n_features", matrix=True) == Kind.COUNT


def test_the_summary_names_every_group_s_baselines_from_the_registry():
    from toposig.report.summary.robustness import baselines_text

    text = baselines_text()
    assert "gradient agreement: `grad_noise_scale`" in text
    assert "gradient topology: `grad_norm_mean`, `grad_noise_scale`" in text
    assert "`weight_std_over_max_mean`" in text and "weight statistics" not in text
