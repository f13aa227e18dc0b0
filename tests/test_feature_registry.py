"""The feature registry (toposig.features.registry): every feature the package computes
is registered with its family, and the analysis classifies features by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toposig.analysis import controls, correlations
from toposig.features.registry import (
    FEATURES,
    family_by_convention,
    feature_info,
)
from toposig.records import FeatureFamily

RESULTS = Path(__file__).resolve().parents[1] / "results"


def recorded_feature_names(entries: list[dict]) -> set[str]:
    names: set[str] = set()
    for e in entries:
        names |= set(e.get("features") or {})
        for layer in (e.get("layer_features") or {}).values():
            names |= set(layer)
    return names


def test_every_feature_of_the_reference_results_is_registered():
    entries = json.loads((RESULTS / "data" / "all_results.json").read_text())
    names = recorded_feature_names(entries)
    assert len(names) > 75
    assert sorted(n for n in names if feature_info(n) is None) == []


def test_every_feature_measure_gives_with_every_family_and_h2_is_registered():
    from conftest import causal_lm

    import toposig
    from toposig.config import EmbeddingSettings, GradientSettings, LandscapeSettings
    from toposig.model.training import byte_tokenizer

    texts = [f"text {i}: " + "the quick brown fox jumps over the lazy dog " * (1 + i % 3)
             for i in range(16)]
    m = toposig.measure(causal_lm("gpt2", seed=0), byte_tokenizer(), texts,
                        families=["embedding", "weights", "landscape", "gradients"],
                        settings=EmbeddingSettings(n_texts=16, maxdim=2), progress=False,
                        family_settings={
                            "landscape": LandscapeSettings(n_windows=2, window=8, res=3,
                                                           trace_samples=2),
                            "gradients": GradientSettings(n_windows=8, window=8,
                                                          proj_dim=16, maxdim=2)})
    names = recorded_feature_names([m.entry])
    assert any(n.startswith("h2_") for n in names) and "hessian_eig_2" in names
    assert sorted(n for n in names if feature_info(n) is None) == []


def test_the_registry_and_the_naming_convention_agree_on_every_registered_name():
    """So that classifying by the registry changed no statistic of the committed results,
    and imported names (classified by the convention) land where the package's would."""
    disagree = {n: (f.family, family_by_convention(n)) for n, f in FEATURES.items()
                if f.family != family_by_convention(n)}
    assert disagree == {}
    for name in ("hessian_eig_1", "hessian_eig_12", "np_seed_layer_3"):
        assert feature_info(name).family == family_by_convention(name), name


def test_names_the_package_does_not_compute_are_not_registered_but_still_classified():
    for name in ("hessian_eig_0", "h1_total", "accuracy", "grad_h1_foo", "weight_h1_totals"):
        assert feature_info(name) is None, name
    assert correlations.feature_family("accuracy") == FeatureFamily.OTHER
    assert correlations.feature_family("h1_custom_score") == FeatureFamily.EMBEDDING_TOPOLOGICAL
    assert correlations.feature_family("weight_h1_custom") == FeatureFamily.WEIGHT_TOPOLOGICAL
    # an imported weight statistic is one (as before the registry, it has no baselines)
    assert correlations.feature_family("weight_sparsity") == FeatureFamily.WEIGHT_STATISTICS
    assert controls.baselines_of("weight_sparsity") == ()


@pytest.mark.parametrize("name, family, baselines", [
    ("h1_total_persistence", FeatureFamily.EMBEDDING_TOPOLOGICAL, controls.EMBEDDING_BASELINES),
    ("weight_h1_total", FeatureFamily.WEIGHT_TOPOLOGICAL, controls.WEIGHT_BASELINES),
    ("np_seed_layer_4", FeatureFamily.WEIGHT_TOPOLOGICAL, controls.WEIGHT_BASELINES),
    ("weight_alpha_mean", FeatureFamily.WEIGHT_STATISTICS, ()),
    ("landscape_basin_depth", FeatureFamily.LANDSCAPE_TOPOLOGICAL,
     (controls.LANDSCAPE_BASELINE,)),
    ("grad_h0_total_persistence", FeatureFamily.GRADIENT_TOPOLOGICAL,
     (controls.GRADIENT_BASELINE,)),
    ("grad_norm_mean", FeatureFamily.GRADIENT_STATISTICS, ()),
    ("hessian_eig_3", FeatureFamily.CURVATURE, ()),
    ("rankme", FeatureFamily.EMBEDDING_SPECTRAL, ()),
    ("mean_norm", FeatureFamily.OTHER, ()),
])
def test_the_analysis_classifies_and_controls_by_the_registry(name, family, baselines):
    assert correlations.feature_family(name) == family
    assert controls.baselines_of(name) == baselines
    assert correlations.is_weight_feature(name) == (family in (FeatureFamily.WEIGHT_TOPOLOGICAL,
                                                        FeatureFamily.WEIGHT_STATISTICS))


def test_every_entry_says_what_it_is():
    assert all(f.description and f.unit and f.name == n for n, f in FEATURES.items())
    info = FEATURES["h1_total_persistence"]
    assert info.signature == "embedding" and info.unit == "distance"
    assert FEATURES["weight_alpha_mean"].signature == "weights"
