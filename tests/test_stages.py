"""The stage registry: one stage per family, in one place, and no caller that names a
family where it could ask the registry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toposig.config import (
    EmbeddingSettings,
    GradientSettings,
    LandscapeSettings,
    WeightSettings,
    family_hash,
    settings_hash,
    weights_hash,
)
from toposig.records import DEFAULT_FAMILIES, FAMILIES, Family
from toposig.sources.corpus import texts_fingerprint
from toposig.stages.base import StageInputs
from toposig.stages.registry import (
    DEFAULT_STAGES,
    STAGES,
    by_key,
    complete_settings,
    hashes,
    run_order,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "toposig"


def test_one_stage_per_family_with_keys_of_its_own():
    assert tuple(STAGES) == FAMILIES
    keys = [k for s in STAGES.values() for k in (s.settings_key, s.hash_key)]
    assert len(keys) == len(set(keys))
    assert all(by_key(s.hash_key) is s and by_key(s.settings_key) is s
               for s in STAGES.values())
    assert DEFAULT_STAGES == DEFAULT_FAMILIES


def test_the_weights_run_first_and_the_embedding_last():
    order = [s.family for s in run_order(FAMILIES)]
    assert order[0] == Family.WEIGHTS and order[-1] == Family.EMBEDDING
    assert [s.family for s in run_order(["embedding", "weights"])] == ["weights", "embedding"]


def test_defaults_are_seeded_as_the_run_and_given_settings_are_kept():
    run = EmbeddingSettings(seed=7, maxdim=2, ph_backend="ripser")
    given = LandscapeSettings(res=5)
    out = complete_settings(run, {Family.LANDSCAPE: given, Family.WEIGHTS: None})
    assert out[Family.EMBEDDING] is run and out[Family.LANDSCAPE] is given
    assert out[Family.WEIGHTS] == WeightSettings(seed=7, ph_backend="ripser")
    assert out[Family.GRADIENTS] == GradientSettings(seed=7, maxdim=2, ph_backend="ripser")
    with pytest.raises(TypeError, match="landscape settings must be a LandscapeSettings"):
        complete_settings(run, {Family.LANDSCAPE: GradientSettings()})


def test_each_stage_hashes_as_the_config_module_defines_it():
    run = EmbeddingSettings()
    inputs = StageInputs(["a text", "another"], ["probe text"], complete_settings(run))
    got = hashes(["embedding", "weights", "landscape", "gradients"], inputs, "float32")
    probe = texts_fingerprint(["probe text"])
    assert got == {
        Family.EMBEDDING: settings_hash(run, texts_fingerprint(["a text", "another"]),
                                        "float32"),
        Family.WEIGHTS: weights_hash(WeightSettings()),
        Family.LANDSCAPE: family_hash(Family.LANDSCAPE, LandscapeSettings(), probe),
        Family.GRADIENTS: family_hash(Family.GRADIENTS, GradientSettings(), probe)}
    assert list(hashes(["gradients", "embedding"], inputs, "float32")) == [
        Family.EMBEDDING, Family.GRADIENTS]


# What names one family: its Family member, its settings class, its config.json keys.
FAMILY_NAMES = re.compile(
    r"Family\.[A-Z]+\b|\b(Embedding|Weight|Landscape|Gradient)Settings\b|"
    r"\b(weight|landscape|gradient)_settings\b|\b(weights|landscape|gradients)_hash\b|"
    r"\b(PROBE|MODEL)_FAMILIES\b|\bHASH_KEYS\b|\bSETTINGS_KEYS\b")


def family_names(folder: Path) -> list[str]:
    """``path:line: text`` of each line of ``folder``'s modules that names a family."""
    return [f"{p.relative_to(folder)}:{i}: {line.strip()}"
            for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.parts
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if FAMILY_NAMES.search(line)]


def test_the_pipeline_and_the_live_monitor_ask_the_registry():
    """run/ and live/ name no family: each iterates the registry. (The embedding's
    settings are also the run's, so ``EmbeddingSettings`` is allowed as a type.)"""
    found = [line for folder in ("run", "live") for line in family_names(SRC / folder)
             if not re.search(r"\bEmbeddingSettings\b", line) or "Family." in line]
    assert found == []


def test_the_check_finds_a_family_named_by_hand(tmp_path):
    (tmp_path / "m.py").write_text("x = plan.hash_of(Family.WEIGHTS)\ny = 1\n")
    (tmp_path / "n.py").write_text("def f(weight_settings): ...\n")
    assert len(family_names(tmp_path)) == 2
