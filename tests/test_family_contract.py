"""The contract every signature family keeps, as scikit-learn's ``parametrize_with_checks``
runs every estimator through one set of checks: each registered family, on a series of
tiny checkpoints, is run, resumed, refused on changed settings, analysed (its topology
tested beyond the baselines it declares), tabled with its columns, compared with itself
and within and beyond the tolerances its features' kinds give, drawn over training,
measured in memory and live, and every feature it declares is documented in
docs/measures.md. The family of docs/development.md's "Adding a signature family", the
whole file as written there, is registered and run through the same contract.

A family that a consumer leaves out (the table, the controls, ``toposig compare``, the
figures, ``measure``, the monitor) fails here, naming the family and the check.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import causal_lm

import analyze_results
import run_experiments
import toposig
from toposig.analysis.compare import Tolerances, compare_results
from toposig.config import RunSettings, SettingsError
from toposig.families import registry
from toposig.families.base import Kind, Scope, SignatureFamily
from toposig.model.training import byte_tokenizer
from toposig.run.compare_folders import load_results_folder
from toposig.run.store import load_arrays

ROOT = Path(__file__).resolve().parents[1]
STEPS = (0, 10, 20, 30, 40)
N_TEXTS = 12
BUILTIN = [c.name for c in registry.families()]  # the package's own, at collection
# settings that keep a family's run over the series short (the LLC's sampler: seconds, not a
# minute, a checkpoint); every other family runs with its defaults
QUICK: dict[str, dict[str, object]] = {
    "llc": {"chains": 2, "draws": 12, "batch": 8, "n_windows": 16}}


def quick_options(name: str) -> list[str]:
    """The command-line options of the family's :data:`QUICK` settings."""
    cls = registry.get(name) if registry.is_registered(name) else None
    given = QUICK.get(name, {})
    options = {f.name: how.option for f, how in cls.statements()} if cls else {}
    return [word for field, value in given.items() for word in (options[field], str(value))]


def quick_family(name: str, run: RunSettings) -> SignatureFamily:
    """The family with its settings in the contract's runs: seeded by ``run``, with its
    :data:`QUICK` settings."""
    return registry.get(name).seeded(run, **QUICK.get(name, {}))


@dataclass(frozen=True)
class Work:
    """The series every family is run on, and its texts."""

    series: Path
    texts: Path
    root: Path

    def run_settings(self) -> RunSettings:
        return RunSettings(texts=str(self.texts), n_texts=N_TEXTS, max_length=16)

    def args(self, name: str, out: Path, *extra: str) -> list[str]:
        return ["--models", str(self.series), "--signatures", name, "--texts",
                str(self.texts), "--n-texts", str(N_TEXTS), "--max-length", "16",
                "--out", str(out), "--no-progress", *quick_options(name), *extra]


@pytest.fixture(scope="module")
def contract_series(tmp_path_factory) -> Work:
    """Five checkpoints of a byte-level GPT-NeoX with a stored loss each, and 60 texts
    of over 100 characters (enough token windows for the loss probes' defaults)."""
    root = tmp_path_factory.mktemp("contract")
    series = root / "series"
    for i, step in enumerate(STEPS):
        folder = series / f"step{step}"
        causal_lm("gpt_neox", seed=i, hidden=16).save_pretrained(folder)
        byte_tokenizer().save_pretrained(folder)
        (folder / "trainer_state.json").write_text(json.dumps(
            {"global_step": step, "val_loss": 5.5 - 0.4 * i + 0.05 * (i % 2)}))
    words = ("the", "model", "learns", "a", "shape", "of", "language", "over", "many",
             "steps", "while", "its", "loss", "falls", "and", "rises", "again", "slowly")
    lines = [" ".join(words[(7 * i + 3 * j) % len(words)] for j in range(24))
             for i in range(60)]
    texts = root / "texts.txt"
    texts.write_text("\n".join(f"{i}: {line}" for i, line in enumerate(lines)) + "\n")
    return Work(series, texts, root)


_RUNS: dict[str, Path] = {}


def measured(contract_series: Work, name: str) -> Path:
    """The family's run over the series and its analysis (once per family)."""
    if name not in _RUNS:
        out = contract_series.root / f"out-{name}"
        assert run_experiments.main(contract_series.args(name, out)) == 0, name
        assert analyze_results.main(["--out", str(out), "--design-runs", "0",
                                     "--dpi", "30"]) == 0, name
        _RUNS[name] = out
    return _RUNS[name]


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def entries(out: Path) -> list[dict]:
    return json.loads((out / "data" / "all_results.json").read_text())


def own_features(cls: type[SignatureFamily], entry: dict) -> dict[str, float]:
    """The entry's checkpoint features that ``cls`` declares."""
    return {k: v for k, v in entry["features"].items()
            if registry.family_of(k) is cls and isinstance(v, (int, float))}


# -------------------------------------------------------------------------------- the checks

def check_runs_and_resumes(contract_series: Work, name: str) -> None:
    cls = registry.get(name)
    out = measured(contract_series, name)
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["signatures"] == [name] and config[cls.hash_key], name
    assert config[cls.settings_key] == json.loads(json.dumps(
        quick_family(name, contract_series.run_settings()).to_dict()))
    for other in registry.families():  # a family the run does not compute: nothing of it
        if other is not cls:
            assert config.get(other.settings_key) is None, (name, other.name)
    recs = entries(out)
    assert [(e["step"], e["families"]) for e in recs] == [(s, [name]) for s in STEPS]
    assert all(own_features(cls, e) for e in recs), f"{name}: no feature of its own"
    before = {k: v for k, v in files(out).items() if not k.startswith("plots/")}
    assert run_experiments.main(contract_series.args(name, out)) == 0  # resumed: nothing to do
    after = {k: v for k, v in files(out).items() if not k.startswith("plots/")}
    assert after == before, f"{name}: a rerun of a finished study changed files"


def changed_option(cls: type[SignatureFamily]) -> tuple[str, str, str] | None:
    """(option, value, field) of a hashed setting of the family's own changed to another
    allowed value, or None when it has none."""
    base = cls()
    for f, how in cls.statements():
        if not (how.option and how.hashed) or isinstance(f.default, (bool, tuple)):
            continue
        default = f.default
        if isinstance(default, str):
            choices = tuple(how.cli.get("choices", ()))
            candidates = [c for c in choices if c != default]
        elif isinstance(default, int):
            candidates = [default + 1, default + 2, default - 1]
        elif isinstance(default, float):
            candidates = [default * 2, default / 2]
        else:
            continue
        for value in candidates:
            try:
                other = cls.from_dict({**base.to_dict(), f.name: value})
            except (SettingsError, TypeError):
                continue
            if other.hash_of("t", "float32") != base.hash_of("t", "float32"):
                return how.option, str(value), f.name
    return None


def check_refuses_changed_settings(contract_series: Work, name: str, capsys) -> None:
    cls = registry.get(name)
    out = measured(contract_series, name)
    changed = changed_option(cls)
    if changed is None:
        assert not [how for _, how in cls.statements() if how.hashed and how.option], name
        return
    option, value, field = changed
    before = files(out)
    assert run_experiments.main(contract_series.args(name, out, option, value)) == 2, name
    err = capsys.readouterr().err
    assert "settings hash" in err and field in err, (name, err)
    assert files(out) == before, f"{name}: a refused run wrote something"


def check_analysed_with_its_baselines(contract_series: Work, name: str) -> None:
    cls = registry.get(name)
    out = measured(contract_series, name)
    stats = json.loads((out / "data" / "statistics.json").read_text())
    declared = {g.name: set(g.names) for g in cls.groups}
    have = set().union(*(own_features(cls, e) for e in entries(out)))
    listed = {f for g, names in stats["features"].items() if g in declared for f in names}
    assert have <= listed, f"{name}: features missing from statistics.json: {have - listed}"
    summary = (out / "summary.md").read_text()
    assert [f for f in sorted(have) if f"`{f}`" not in summary] == [], name
    tested = 0
    for group in cls.groups:
        for table in stats["controlled"]["per_model"].values():
            for feature, entry in table.items():
                if registry.group_of(feature) is not group:
                    continue
                if group.baselines:  # topology, and the gradients' agreement
                    wanted = {b for b in group.baselines if b in have or any(
                        b in e["features"] for e in entries(out))}
                    assert set(entry["beyond_by_baseline"]) == wanted, (name, feature)
                    tested += bool(wanted) and group.topological
                else:
                    assert entry["baseline"] is None, (name, feature)
    assert tested or not any(g.topological for g in cls.groups), \
        f"{name}: no topological feature was tested beyond a baseline"


def check_tabled(contract_series: Work, name: str) -> None:
    cls = registry.get(name)
    out = measured(contract_series, name)
    table = toposig.open(out).table()
    rows = table[table["family"] == name]
    assert len(rows) >= len(STEPS), f"{name}: the table has no rows of it"
    have = set().union(*(own_features(cls, e) for e in entries(out)))
    assert have <= set(table.columns), f"{name}: columns missing: {have - set(table.columns)}"
    if cls.matrix_features:
        per_matrix = rows[rows["matrix"].notna()]
        assert len(per_matrix) > 0, f"{name}: no row per matrix"
        values = {f.name for f in cls.matrix_features}
        assert values & set(table.columns), name
    if any(Scope.LAYER in f.scopes for f in cls.all_features()):
        assert rows["layer"].notna().any(), name


# what the defaults of toposig compare allow, as a relative change of a value of size 1
WITHIN = {Kind.CONTINUOUS: 5e-4, Kind.DISCONTINUOUS: 2e-2}
BEYOND = {Kind.CONTINUOUS: 1e-2, Kind.DISCONTINUOUS: 2e-1}


def moved(content, feature: str, kind: Kind, within: bool):
    """A copy of the loaded folder with ``feature`` changed in every record and entry,
    within or beyond what ``toposig compare`` allows a value of its ``kind``."""
    tol = Tolerances()
    out = copy.deepcopy(content)
    for record in [*out.records.values(), *(out.aggregates or ())]:
        features = record.get("features") or {}
        v = features.get(feature)
        if not (isinstance(v, (int, float)) and math.isfinite(v)):
            continue
        if kind == Kind.COUNT:  # within: one more; beyond: three times what is allowed
            features[feature] = v + (tol.count_tol if within else
                                     3 * max(tol.count_tol, tol.count_rtol * abs(v)) + 1)
        else:  # relative changes: half the kind's tolerance, or four times it
            features[feature] = v * (1 + (WITHIN if within else BEYOND)[kind])
    return out


def check_compared_by_its_kinds(contract_series: Work, name: str) -> None:
    cls = registry.get(name)
    out = measured(contract_series, name)
    a = load_results_folder(out)
    same = compare_results(a, load_results_folder(out))
    assert same.agree and same.differences == [], (name, same.worst(3))
    checked = 0
    values = {f: v for e in entries(out) for f, v in own_features(cls, e).items()}
    tried: set[tuple[str, Kind]] = set()  # one feature of each kind of each group
    for feature, value in sorted(values.items()):
        kind, group = registry.kind_of(feature), registry.group_of(feature).name
        if kind is None or not math.isfinite(value) or abs(value) < 1e-2 \
                or (group, kind) in tried:
            continue
        tried.add((group, kind))
        within = compare_results(a, moved(a, feature, kind, True))
        assert within.differences == [], (name, feature, kind, within.worst(2))
        beyond = compare_results(a, moved(a, feature, kind, False))
        assert any(d.path.endswith(f".{feature}") for d in beyond.differences), \
            (name, feature, kind)
        checked += 1
    assert checked, f"{name}: no feature to compare"


def check_drawn_over_training(contract_series: Work, name: str) -> None:
    cls = registry.get(name)
    out = measured(contract_series, name)
    assert (out / "plots" / f"{cls.figure}.png").is_file(), \
        f"{name}: its figure over training, {cls.figure}, was not drawn"
    assert cls.over_training, f"{name}: declares no feature to draw over training"
    assert all(registry.family_of(f) is cls for f in cls.over_training), name
    from matplotlib.figure import Figure as MplFigure

    user = MplFigure()  # and into a user's Axes, from the folder opened
    ax = user.subplots()
    drawn = getattr(toposig.open(out).plot, cls.figure)(ax=ax)
    assert drawn is ax or drawn.figure is user, name  # that Axes, or a panel in its place


def check_measured_in_memory_and_live(contract_series: Work, name: str) -> None:
    from transformers import AutoModelForCausalLM

    from toposig.live.monitor import TopologyMonitor

    cls = registry.get(name)
    out = measured(contract_series, name)
    step = STEPS[-1]
    model = AutoModelForCausalLM.from_pretrained(contract_series.series / f"step{step}").eval()
    run = contract_series.run_settings()  # its texts file: texts and probe texts, as a run
    given = {name: quick_family(name, run)}
    m = toposig.measure(model, byte_tokenizer(), families=[name], settings=run,
                        family_settings=given, progress=False)
    stored = next(e for e in entries(out) if e["step"] == step)
    got, want = own_features(cls, m.entry), own_features(cls, stored)
    if cls.relates_checkpoints:  # one step in memory: what it measured, not yet related
        kept = load_arrays(out, stored[name]["arrays_file"])
        assert m.arrays[name].keys() == kept.keys() and got == {}, name
        for k, array in kept.items():
            np.testing.assert_allclose(m.arrays[name][k], array, rtol=1e-6, atol=1e-9)
    else:
        assert got.keys() == want.keys(), name
        for k in want:  # the same model, measured where it is: the same numbers
            assert got[k] == pytest.approx(want[k], rel=1e-6, abs=1e-9), (name, k)
    monitor = TopologyMonitor(byte_tokenizer(), contract_series.root / f"live-{name}",
                              families=[name], settings=run, family_settings=given, label="live",
                              progress=False, figure_interval_s=1e9)
    # the last two steps live: a family that relates checkpoints relates them as the run
    for live_step in STEPS[-2:] if cls.relates_checkpoints else STEPS[-1:]:
        live_model = AutoModelForCausalLM.from_pretrained(
            contract_series.series / f"step{live_step}").eval()
        result = monitor.measure(live_model, live_step)
    monitor.finish()
    assert result.entry is not None, (name, result.failures)
    assert name in result.entry.families and own_features(cls, result.entry.to_json())
    live = own_features(cls, result.entry.to_json())
    assert live.keys() == want.keys(), name
    if cls.relates_checkpoints:
        for k in want:
            assert live[k] == pytest.approx(want[k], rel=1e-6, abs=1e-9), (name, k)


def check_documented(name: str, page: Path = ROOT / "docs" / "measures.md") -> None:
    cls = registry.get(name)
    text = page.read_text(encoding="utf-8")
    missing = [f.name for f in cls.all_features() if f.name not in text]
    assert missing == [], f"{name}: features not in {page.name}: {missing}"


def check_declarations(name: str) -> None:
    cls = registry.get(name)
    assert registry.declaration_problems(cls) == [], name
    assert cls.groups, f"{name}: declares no feature"
    for group in cls.groups:
        assert not group.topological or group.baselines, (name, group.name)


CHECKS = ("runs_and_resumes", "refuses_changed_settings", "analysed_with_its_baselines",
          "tabled", "compared_by_its_kinds", "drawn_over_training",
          "measured_in_memory_and_live")


# ----------------------------------------------------------------------- every registered one

@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_declares_what_it_is(name):
    check_declarations(name)
    check_documented(name)


def test_the_measures_page_lists_every_feature_as_the_registry_declares_it():
    from toposig.families.catalog import BEGIN, END, feature_catalog

    page = (ROOT / "docs" / "measures.md").read_text(encoding="utf-8")
    assert BEGIN in page and END in page
    held = page[page.index(BEGIN):page.index(END) + len(END)]
    assert held == feature_catalog(), (
        "docs/measures.md's table of features is not the registry's: run "
        "`python -m toposig.families.catalog --write docs/measures.md`")


def test_the_catalog_writes_its_table_into_a_page(tmp_path):
    from toposig.families import catalog

    page = tmp_path / "measures.md"
    page.write_text(f"# Page\n\n{catalog.BEGIN}\n| stale |\n{catalog.END}\n\nAfter.\n",
                    encoding="utf-8")
    assert catalog.main(["--write", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == (
        f"# Page\n\n{catalog.feature_catalog()}\n\nAfter.\n")
    with pytest.raises(ValueError, match="no .* block"):
        catalog.with_catalog("# a page without the markers\n")


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_runs_and_resumes(contract_series, name):
    check_runs_and_resumes(contract_series, name)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_is_refused_on_changed_settings(contract_series, name, capsys):
    check_refuses_changed_settings(contract_series, name, capsys)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_is_analysed_with_its_baselines(contract_series, name):
    check_analysed_with_its_baselines(contract_series, name)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_is_tabled(contract_series, name):
    check_tabled(contract_series, name)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_is_compared_by_its_kinds(contract_series, name):
    check_compared_by_its_kinds(contract_series, name)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_is_drawn_over_training(contract_series, name):
    check_drawn_over_training(contract_series, name)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_family_is_measured_in_memory_and_live(contract_series, name):
    check_measured_in_memory_and_live(contract_series, name)


# ------------------------------------------------------------------- the documented example

def documented_family_source() -> str:
    """The whole file of the family docs/development.md shows."""
    page = ROOT / "docs" / "development.md"
    from test_docs import block_after

    return block_after(page, "tests/test_family_contract.py")


@pytest.fixture()
def documented_family(tmp_path):
    """The documented file saved as a module and imported: it registers its family; the
    family is unregistered afterwards. Once the package has a family of that name (the
    example became one of its own), the page must show that family's file as it is, and
    the registered class is the one tried."""
    source = documented_family_source()
    declared = re.search(r'name: ClassVar\[str\] = "(\w+)"', source)
    assert declared, "the documented family declares no name"
    if registry.is_registered(declared.group(1)):
        own = registry.get(declared.group(1))
        file = Path(inspect.getfile(own)).read_text(encoding="utf-8")
        assert file.rstrip("\n") == source.rstrip("\n"), (
            f"docs/development.md shows a family the package has ({own.__module__}), but "
            "not its file as it is")
        yield own
        return
    path = tmp_path / "sparsity_family.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sparsity_family", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparsity_family"] = module
    try:
        spec.loader.exec_module(module)
        yield module.SparsityFamily
    finally:
        if registry.is_registered("sparsity"):
            registry.unregister("sparsity")
        sys.modules.pop("sparsity_family", None)
        _RUNS.pop("sparsity", None)


def test_the_documented_family_keeps_the_contract_with_no_other_change(
        contract_series, documented_family, capsys, tmp_path):
    name = documented_family.name
    assert registry.get(name) is documented_family
    check_declarations(name)
    check_documented(name, ROOT / "docs" / "development.md")
    for check in CHECKS:
        fn = globals()[f"check_{check}"]
        if check == "refuses_changed_settings":
            fn(contract_series, name, capsys)
        else:
            fn(contract_series, name)
    # its options come from its fields: on toposig run's --help
    from toposig.cli.run import build_parser

    assert "--sparsity-tol" in build_parser().format_help()


def test_the_example_is_what_the_page_says_and_registering_it_twice_is_refused(
        documented_family):
    source = documented_family_source()
    assert "register(SparsityFamily)" in source.splitlines()[-1]
    assert registry.register(documented_family) is documented_family  # the same: nothing
    twin = type("SparsityFamily", (documented_family,), {"__module__": "elsewhere"})
    with pytest.raises(registry.RegistryError, match="registered already"):
        registry.register(twin)


def test_an_opt_in_family_is_computed_only_when_asked_for(documented_family):
    """The documented family needs no model and is not default_on: neither a model folder
    nor a plain checkpoint file gets it without --signatures (the plain file's default
    took every family that needs no model, opt-in or not)."""
    name = documented_family.name
    assert not documented_family.runs_model and not documented_family.default_on
    assert name not in registry.default_names() and name not in registry.weights_only_names()
    assert "weights" in registry.weights_only_names()


def test_a_family_that_breaks_a_declaration_is_refused_saying_which():
    from dataclasses import dataclass
    from typing import ClassVar

    from toposig.families.base import Feature, FeatureGroup

    @dataclass(frozen=True)
    class Broken(SignatureFamily):
        name: ClassVar[str] = "broken"
        groups: ClassVar[tuple] = (
            FeatureGroup("broken_topological", "broken", (Feature("b_x", "x", "1"),),
                         topological=True),
            FeatureGroup("embedding_spectral", "again", (Feature("rankme", "x", "1"),)))

    problems = registry.declaration_problems(Broken)
    assert any("no compute()" in p for p in problems)
    assert any("names no baseline" in p for p in problems)
    assert any("'embedding_spectral' is declared twice" in p for p in problems)
    assert any("'rankme' is another family's" in p for p in problems)
    with pytest.raises(registry.RegistryError, match="cannot be registered"):
        registry.register(Broken)
    assert not registry.is_registered("broken")


def test_no_family_is_left_registered_by_the_contract():
    assert [c.name for c in registry.families()] == BUILTIN
