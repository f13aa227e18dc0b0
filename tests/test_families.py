"""The family registry and what a family class derives from its fields: one class per
family, keys of its own, options, validation, the config.json view and the settings hash
stated once; and no module outside toposig/families/ that lists families by hand."""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

import pytest

from toposig.config import RunSettings, SettingsError
from toposig.families import registry
from toposig.families.base import FamilyInputs, Texts
from toposig.families.embedding import EmbeddingFamily
from toposig.families.gradients import GradientsFamily
from toposig.families.interlayer import InterlayerFamily
from toposig.families.landscape import LandscapeFamily
from toposig.families.weights import WeightsFamily
from toposig.sources.corpus import texts_fingerprint

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "toposig"


def test_one_class_per_family_with_keys_of_its_own():
    # the package's families: one a module of families/, in the order its __init__
    # imports them (no list of names to keep: a new family is its file and that line)
    init = (Path(registry.__file__).parent / "__init__.py").read_text(encoding="utf-8")
    modules = re.findall(r"^import toposig\.families\.(\w+)", init, re.M)
    assert [registry.get(n).__module__ for n in registry.names()] == [
        f"toposig.families.{m}" for m in modules]
    assert {"embedding", "weights", "landscape", "gradients", "interlayer"} <= set(
        registry.names())
    classes = registry.families()
    keys = [k for c in classes for k in (c.settings_key, c.hash_key)]
    assert len(keys) == len(set(keys))
    assert all(registry.by_key(c.hash_key) is c and registry.by_key(c.settings_key) is c
               for c in classes)
    assert registry.default_names() == ("embedding", "weights")
    weights_only = registry.weights_only_names()
    assert "weights" in weights_only and not {"embedding", "landscape", "gradients",
                                              "interlayer"} & set(weights_only)
    assert [c.name for c in registry.run_order(registry.names())][0] == "weights"
    assert [c.name for c in registry.run_order(["embedding", "weights"])] == [
        "weights", "embedding"]


def test_defaults_are_seeded_as_the_run_and_given_settings_are_kept():
    run = RunSettings(seed=7, maxdim=2, ph_backend="ripser", max_length=64)
    given = LandscapeFamily(res=5)
    out = registry.settings_for(run, ["landscape", "weights", "gradients", "interlayer"],
                                {"landscape": given, "weights": None})
    assert list(out) == ["weights", "landscape", "gradients", "interlayer"]  # registry order
    assert out["landscape"] is given
    assert out["weights"] == WeightsFamily(seed=7, maxdim=2, ph_backend="ripser")
    assert out["gradients"] == GradientsFamily(seed=7, maxdim=2, ph_backend="ripser")
    assert out["interlayer"] == InterlayerFamily(max_length=64)
    assert "embedding" not in out  # only the families asked for are built
    with pytest.raises(TypeError, match="landscape settings must be a LandscapeFamily"):
        registry.settings_for(run, ["landscape"], {"landscape": GradientsFamily()})


def test_the_hashes_are_those_the_committed_records_are_keyed_by():
    """Stated once, derived from the fields: the settings hashes of the committed
    reference (results/) are the ones its config.json and record folders have."""
    from toposig.sources.corpus import load_texts, probe_texts

    config = json.loads((ROOT / "results" / "data" / "config.json").read_text())
    run = RunSettings.from_dict(config["settings"])  # an older layout: the run's in it
    texts = load_texts(run.texts, run.n_texts, run.min_chars)
    assert texts_fingerprint(texts) == config["texts_sha256"]
    families = {c.name: c.from_dict(config[c.settings_key])
                for c in registry.families() if config.get(c.hash_key)}
    inputs = FamilyInputs(texts, probe_texts(run.texts, run.min_chars), run, families)
    got = inputs.hashes(config["dtype"])
    assert got == {c.name: config[c.hash_key] for c in registry.families()
                   if config.get(c.hash_key)}
    assert got == {"embedding": "945195e2ce8e", "weights": "w9c0bc8fc8d6",
                   "landscape": "l6ad4df6e3b6", "gradients": "g9cfc6a256d7"}
    assert all((ROOT / "results" / "records" / h).is_dir() for h in got.values())


def test_only_settings_that_change_the_numbers_enter_the_hash():
    run = RunSettings()
    base = FamilyInputs(["a", "b"], ["p"], run, {})

    def h(family, inputs=base, dtype="float32"):
        return family.settings_hash(inputs, dtype)

    assert h(WeightsFamily()) == h(WeightsFamily(ph_backend="ripser"))
    assert h(WeightsFamily()) != h(WeightsFamily(max_rows=50))
    assert h(GradientsFamily()) == h(GradientsFamily(chunk_size=2))
    assert h(LandscapeFamily()) != h(LandscapeFamily(res=5))
    # the texts a family reads, and its precision when it is keyed by it
    other = FamilyInputs(["a", "c"], ["q"], run, {})
    assert h(WeightsFamily(), other) == h(WeightsFamily())  # reads no texts
    assert h(LandscapeFamily(), other) != h(LandscapeFamily())
    assert h(InterlayerFamily(), other) != h(InterlayerFamily())
    assert h(InterlayerFamily(), dtype="bfloat16") != h(InterlayerFamily())
    assert h(LandscapeFamily(), dtype="bfloat16") == h(LandscapeFamily())
    # a tokenizer given for the run: in the hash of every family that runs the model,
    # and nothing added when none is given (the committed hashes stay what they were)
    tok = FamilyInputs(["a", "b"], ["p"], RunSettings(tokenizer="gpt2"), {})
    for fam in (EmbeddingFamily(), LandscapeFamily(), GradientsFamily(), InterlayerFamily()):
        assert h(fam, tok) != h(fam), fam.name
    assert h(WeightsFamily(), tok) == h(WeightsFamily())
    assert h(WeightsFamily()).startswith("w") and h(LandscapeFamily()).startswith("l")


def test_the_options_are_derived_from_the_fields():
    p = argparse.ArgumentParser()
    RunSettings.add_options(p)
    for cls in registry.families():
        cls.add_options(p)
    options = {o for a in p._actions for o in a.option_strings}
    for cls in (RunSettings, *registry.families()):
        for f, how in cls.statements():
            if how.option:
                assert how.option in options, (cls.__name__, f.name)
    args = p.parse_args(["--weight-max-rows", "50", "--seed", "3", "--maxdim", "2",
                         "--weight-exclude", "mlp", "attn", "--probe-length", "16",
                         "--layers", "0,-1", "--save-hidden"])
    run = RunSettings.from_args(args)
    assert run.seed == 3 and run.maxdim == 2
    weights = WeightsFamily.from_args(args, run)
    assert weights == WeightsFamily(max_rows=50, seed=3, maxdim=2, exclude=("mlp", "attn"))
    # one --probe-length for both probes; from_run fields take the run's option
    assert LandscapeFamily.from_args(args, run).window == 16
    assert GradientsFamily.from_args(args, run).window == 16
    embedding = EmbeddingFamily.from_args(args, run)
    assert embedding.layers == (0, -1) and embedding.save_hidden and embedding.maxdim == 2


@pytest.mark.parametrize("make, says", [
    (lambda: WeightsFamily(max_rows=2), "--weight-max-rows must be at least 3, got 2"),
    (lambda: WeightsFamily(max_rows=3.0), "--weight-max-rows must be at least 3"),
    (lambda: WeightsFamily(seed=-1), "--seed must be an integer from 0 to 2**32 - 1"),
    (lambda: WeightsFamily(include=["("]), "--weight-include '(' is not a regular"),
    (lambda: LandscapeFamily(res=4), "--landscape-res must be an odd number >= 3"),
    (lambda: LandscapeFamily(dirs="up"), "--landscape-dirs must be one of"),
    (lambda: LandscapeFamily(top_k=1), "--landscape-dirs hessian needs the top two"),
    (lambda: LandscapeFamily(lanczos_maxiter=0), "lanczos_maxiter must be at least 1"),
    (lambda: LandscapeFamily(span=float("inf")), "--landscape-span must be a positive"),
    (lambda: GradientsFamily(maxdim=3), "--maxdim must be one of (0, 1, 2)"),
    (lambda: InterlayerFamily(k=0), "--interlayer-k must be at least 1, got 0"),
    (lambda: InterlayerFamily(max_length=1), "--max-length must be at least 2 tokens"),
    (lambda: EmbeddingFamily(layers="first"), "--layers must be last, all"),
    (lambda: RunSettings(device="tpu"), "--device must be auto, cpu, cuda, cuda:N or mps"),
    (lambda: RunSettings(batch_size=0), "--batch-size must be auto or at least 1"),
    (lambda: RunSettings(n_texts=True), "--n-texts must be at least 3, got True"),
])
def test_a_bad_value_is_refused_naming_its_option_and_what_is_allowed(make, says):
    with pytest.raises(SettingsError) as err:
        make()
    assert says in str(err.value)


def test_the_config_view_reads_back_and_an_older_layout_still_reads():
    w = WeightsFamily(max_rows=50, exclude=("mlp",))
    assert WeightsFamily.from_dict(json.loads(json.dumps(w.to_dict()))) == w
    old = {"settings": {"n_texts": 40, "layers": "all", "pca_dim": 8, "tokenizer": "gpt2",
                        "device": "cpu"}, "dtype": "float32", "texts_sha256": "x"}
    assert EmbeddingFamily.from_dict(old["settings"]) == EmbeddingFamily(layers="all",
                                                                         pca_dim=8)
    view = EmbeddingFamily.study_view(old)
    assert view["pca_dim"] == 8 and view["n_texts"] == 40 and view["tokenizer"] == "gpt2"
    assert "device" not in view  # the run's, and in no hash
    new = {"run_settings": {"n_texts": 12, "texts": None, "min_chars": 100,
                            "tokenizer": None},
           "settings": {"pca_dim": 8}, "dtype": "float32"}
    assert EmbeddingFamily.study_view(new) == {"pca_dim": 8, "texts": None, "n_texts": 12,
                                               "min_chars": 100, "tokenizer": None,
                                               "dtype": "float32"}
    inputs = FamilyInputs(["t"] * 12, [], RunSettings(n_texts=12), {})
    assert set(WeightsFamily().view(inputs, "float32")) == set(WeightsFamily().to_dict())
    assert LandscapeFamily.run_keys() == ("texts", "min_chars", "tokenizer")
    assert InterlayerFamily.texts == Texts.ANALYSED and "dtype" in InterlayerFamily().view(
        inputs, "float32")


# --------------------------------------------------------- no family named by hand elsewhere

def family_lists(source: str) -> list[int]:
    """Lines of ``source`` with a tuple, list, set or dict of two or more family names
    written as strings."""
    names = set(registry.names())
    found = []
    for node in ast.walk(ast.parse(source)):
        items = (node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set))
                 else node.keys if isinstance(node, ast.Dict) else [])
        named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(named) >= 2:
            found.append(node.lineno)
    return found


def test_no_module_outside_the_families_lists_families_by_hand():
    found = [f"{p.relative_to(SRC)}:{line}" for p in sorted(SRC.rglob("*.py"))
             if "families" not in p.relative_to(SRC).parts
             for line in family_lists(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_pipeline_and_the_live_monitor_name_no_particular_family():
    """run/ and live/ ask the registry: they import no family's own module and write no
    family's name (the task presets' weight exclusions are cli/run.py's)."""
    names = set(registry.names())
    found = []
    for folder in ("run", "live"):
        for p in sorted((SRC / folder).rglob("*.py")):
            tree = ast.parse(p.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "toposig.families.") and node.module.rsplit(".", 1)[1] in names:
                    found.append(f"{p.relative_to(SRC)}:{node.lineno}: {node.module}")
                elif isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{p.relative_to(SRC)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_the_checks_find_a_family_named_by_hand():
    assert family_lists("x = ('embedding', 'weights')\ny = {'weights': 1, 'landscape': 2}\n"
                        "z = ['embedding']\n") == [1, 2]
