"""Seed ensembles end to end: training N seeds of each model, the seed in every record
and in the table, the across-seeds section on a table whose answer is computed
independently, and the small preset through run + analyze."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import records_of
from safetensors.torch import load_file
from scipy import stats as sps

import analyze_results
import run_experiments
from toposig.analysis import controls
from toposig.analysis.ensembles import FRACTIONS, ensemble_analysis, fraction_step, seed_runs
from toposig.analysis.table import results_table
from toposig.model import training as T
from toposig.records import Record, RecordError
from toposig.run.results_folder import load_entries, load_results


def suite(**kw) -> T.SuiteConfig:
    base = dict(name="ens-unit", models=(T.ModelSpec("m", 8, 1, 1),), steps=6, context=16,
                batch_size=4, checkpoint_every=3, warmup=2, eval_batches=1,
                schedule="regular")
    return T.SuiteConfig(**{**base, **kw})


def test_one_seed_trains_as_before_and_more_seeds_get_their_own_names():
    one = suite()
    assert [(r.spec.name, r.seed, r.seed_group) for r in T.suite_runs(one)] == [("m", 42, None)]
    three = suite(seeds=3, seed=7, models=(T.ModelSpec("a", 8, 1, 1), T.ModelSpec("b", 8, 1, 1)))
    assert [(r.spec.name, r.seed, r.seed_group) for r in T.suite_runs(three)] == [
        ("a-seed0", 7, "a"), ("a-seed1", 8, "a"), ("a-seed2", 9, "a"),
        ("b-seed0", 7, "b"), ("b-seed1", 8, "b"), ("b-seed2", 9, "b")]
    # a suite folder trained before ensembles existed (no "seeds" saved) still resumes
    assert "seeds" not in T.suite_fingerprint(one, "test")["config"]
    assert T.suite_fingerprint(three, "test")["config"]["seeds"] == 3


def test_with_seeds_renames_the_suite_and_refuses_nonsense():
    c = suite()
    assert T.with_seeds(c, None) is c and T.with_seeds(c, 1) is c
    five = T.with_seeds(c, 5)
    assert (five.name, five.seeds) == ("ens-unit-seeds5", 5)
    with pytest.raises(T.TrainingConfigError, match="at least 1"):
        T.with_seeds(c, 0)
    with pytest.raises(T.TrainingConfigError, match="seeds must be at least 1"):
        suite(seeds=0)
    with pytest.raises(T.TrainingConfigError, match="model name"):  # too long with -seedN
        suite(seeds=2, models=(T.ModelSpec("m" * 250, 8, 1, 1),))


def test_seeds_differ_in_weights_and_name_their_seed(tmp_path, wikitext_dir):
    c = suite(seeds=2)
    suite_dir, results = T.train_suite(c, tmp_path, progress=False)
    assert [r.name for r in results] == ["m-seed0", "m-seed1"]
    w0 = load_file(suite_dir / "m-seed0" / "step6" / "model.safetensors")
    w1 = load_file(suite_dir / "m-seed1" / "step6" / "model.safetensors")
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)
    state = json.loads((suite_dir / "m-seed1" / "step3" / "trainer_state.json").read_text())
    assert (state["seed"], state["seed_group"]) == (43, "m")
    config = json.loads((suite_dir / "config.json").read_text())
    assert config["seeds"] == {"m-seed0": {"seed": 42, "seed_group": "m"},
                               "m-seed1": {"seed": 43, "seed_group": "m"}}
    # seed 42 of an ensemble is the single-seed suite's model, step for step
    _, (single,) = T.train_suite(suite(), tmp_path / "single", progress=False)
    assert single.final_val_loss == results[0].final_val_loss


def entry(label, group, seed, step, loss, features) -> dict:
    return {"schema_version": 3, "status": "ok", "model": f"runs/{label}", "model_label": label,
            "step": step, "source": "local", "location": f"runs/{label}/step{step}",
            "revision": None, "checkpoint_fingerprint": None, "seed": seed,
            "seed_group": group, "loss": loss, "num_parameters": 100 if group == "s" else 400,
            "features": features}


def precision_partial(x, y, *controls) -> float:
    """Partial Spearman from the inverse of the rank correlation matrix (independent of
    the projection the module uses)."""
    ranks = np.vstack([sps.rankdata(v) for v in (x, y, *controls)])
    p = np.linalg.inv(np.corrcoef(ranks))
    return float(-p[0, 1] / np.sqrt(p[0, 0] * p[1, 1]))


def simulated_ensemble(n_seeds=9, steps=(0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)):
    rng = np.random.default_rng(11)
    records, truth = [], {}
    for group in ("s", "l"):
        for k in range(n_seeds):
            label = f"{group}-seed{k}"
            quality, late = rng.normal(size=2)  # late: shows in the loss only late
            for step in steps:
                loss = (5 - step / 40 + 0.1 * quality + 0.3 * (step / 100) ** 3 * late
                        + 0.02 * rng.normal())
                feats = {"h1_total_persistence": late + 0.3 * rng.normal(),
                         "weight_h0_total": rng.normal(),
                         "weight_l2_norm": rng.normal(), "rankme": rng.normal()}
                records.append(entry(label, group, 42 + k, step, loss, feats))
                truth[(label, step)] = (loss, feats)
    return records, truth


def test_the_section_equals_an_independent_computation_on_a_table():
    records, truth = simulated_ensemble()
    features = ["h1_total_persistence", "weight_h0_total", "rankme", "weight_l2_norm"]

    def baselines(f):
        return {"h1_total_persistence": ("rankme",),
                "weight_h0_total": ("weight_l2_norm",)}.get(f, ())

    out = ensemble_analysis(records_of(records), features, baselines, n_bootstrap=300)
    assert list(out["groups"]) == ["s", "l"]  # ordered by size
    s = out["groups"]["s"]
    assert s["seeds"] == list(range(42, 51)) and s["final_step"] == 100
    assert s["fraction_steps"] == {"0.2": 20, "0.3": 30, "0.5": 50}
    for f in features:
        for frac in FRACTIONS:
            step = fraction_step(list(range(0, 101, 10)), frac)
            for g in ("s", "l"):
                labels = [f"{g}-seed{k}" for k in range(9)]
                x = [truth[(lb, step)][1][f] for lb in labels]
                final = [truth[(lb, 100)][0] for lb in labels]
                at = [truth[(lb, step)][0] for lb in labels]
                cell = out["across_seeds"][f][f"{frac:g}"][g]
                assert cell["r_loss_only"] == pytest.approx(precision_partial(x, final, at),
                                                            abs=1e-10)
                if baselines(f):
                    b = [truth[(lb, step)][1][baselines(f)[0]] for lb in labels]
                    assert cell["baseline"] == baselines(f)[0]
                    assert cell["r"] == pytest.approx(precision_partial(x, final, at, b),
                                                      abs=1e-10)
                else:
                    assert cell["baseline"] is None and cell["r"] == cell["r_loss_only"]
                if cell["ci_low"] is not None:  # None: most resamples undefined
                    assert cell["ci_low"] <= cell["r"] <= cell["ci_high"]
    # 9 seeds are too few for the interval to hold its size: shown, in no verdict
    assert all(c["calibrated"] is False for c in out["across_seeds"]["rankme"]["0.2"].values())
    assert out["verdict"]["rankme"]["0.2"]["sizes_tested"] == 0
    assert out["verdict"]["rankme"]["0.2"]["sizes_too_few_seeds"] == 2
    # the seed-to-seed spread of the final loss is the SD over seeds
    finals = [truth[(f"l-seed{k}", 100)][0] for k in range(9)]
    assert out["seed_spread"]["loss"]["l"]["sd"] == pytest.approx(np.std(finals, ddof=1))
    pair = out["between_sizes"]["loss"][0]
    assert (pair["from"], pair["to"]) == ("s", "l")
    assert pair["difference"] == pytest.approx(finals[0] - truth[("s-seed0", 100)][0])


def test_a_feature_carrying_the_final_quality_is_found_and_noise_is_not():
    """The simulated h1 carries what sets each seed's final loss beyond its loss at f (a
    quality that shows in the loss only late): found in both sizes; the pure-noise
    weight feature is not."""
    records, _ = simulated_ensemble(n_seeds=14)
    out = ensemble_analysis(records_of(records), ["h1_total_persistence", "weight_h0_total"],
                            lambda f: (), n_bootstrap=400)
    assert out["verdict"]["h1_total_persistence"]["0.5"]["predicts_beyond_loss"]
    assert not any(v["predicts_beyond_loss"]
                   for v in out["verdict"]["weight_h0_total"].values())
    assert 0 < out["expected_by_chance"] < 1


def test_records_without_seeds_make_no_section_and_bad_seeds_are_refused():
    records, _ = simulated_ensemble()
    plain = [{k: v for k, v in r.items() if k not in ("seed", "seed_group")} for r in records]
    assert seed_runs(records_of(plain)) == {}
    assert ensemble_analysis(records_of(plain), ["rankme"], controls.baselines_of) == {}
    with pytest.raises(RecordError, match="seed"):
        Record.from_json({**records[0], "seed": -1})
    with pytest.raises(RecordError, match="seed_group"):
        Record.from_json({**records[0], "seed_group": ""})
    rec = Record.from_json(records[0])
    assert (rec.checkpoint.seed, rec.checkpoint.seed_group) == (42, "s")
    table = results_table(records[:3])
    assert table["seed"].tolist() == [42, 42, 42] and table["seed_group"].tolist() == ["s"] * 3


def test_the_small_ensemble_preset_runs_and_analyses(tmp_path, wikitext_dir):
    out = tmp_path / "res"
    assert run_experiments.main(["--preset", "ensemble-small", "--suite-dir",
                                 str(tmp_path / "runs"), "--out", str(out), "--no-progress",
                                 "--n-texts", "40"]) == 0
    table = load_results(out)
    assert sorted(table["seed"].dropna().unique().tolist()) == [42, 43, 44, 45, 46]
    assert set(table["seed_group"].dropna()) == {"enss-h8-l1"}
    assert {r.checkpoint.seed for r in load_entries(out)} == {42, 43, 44, 45, 46}
    assert analyze_results.main(["--out", str(out), "--design-runs", "0"]) == 0
    stats = json.loads((out / "data" / "statistics.json").read_text())
    assert stats["ensembles"]["groups"]["enss-h8-l1"]["n_seeds"] == 5
    assert list(stats["controlled"]["per_model"]) == ["enss-h8-l1-seed0"]  # the first seed
    summary = (out / "summary.md").read_text()
    assert "Within-model controls (parts A to C): a seed ensemble" in summary
    assert "## Part E. Seed ensembles" in summary and "E2. The seed-to-seed spread" in summary
    assert (out / "plots" / "seed_ensemble.png").is_file()
    # and into a notebook user's own Axes, as every report figure
    import toposig
    from toposig.report.style import subplots

    fig, (left, right) = subplots(1, 2)
    res = toposig.open(out)
    assert "seed_ensemble" in res.plot.names()
    drawn = res.plot.seed_ensemble(ax=right)
    assert drawn.get_figure(root=True) is fig and not left.has_data()


def test_seeds_are_told_apart_and_merged_in_a_legend_only_past_its_size():
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D

    from toposig.report.panels import (
        MAX_LEGEND_MODELS,
        compact_handles,
        legend_label,
        model_styles,
    )

    labels = ["a-seed0", "a-seed1", "b-seed0", "b-seed1", "c"]
    styles = model_styles(labels)
    assert len({styles[lb].color for lb in labels}) == len(labels)  # every seed its own
    assert styles["a-seed0"].marker != styles["a-seed1"].marker
    # beside other sizes a seed is a shade of its size's colour: the same hue order
    a0, a1, b0 = (to_rgb(styles[lb].color) for lb in ("a-seed0", "a-seed1", "b-seed0"))
    assert max(a0) == a0[0] or max(a0) == a0[2]  # tab10 blue, darker or lighter
    assert b0[0] > b0[2] and a1[2] > a1[0]  # tab10 orange vs blue
    assert model_styles(["x", "y"]) == {k: v for k, v in zip(
        ["x", "y"], model_styles(["x", "y", "z"]).values(), strict=False)}  # as before
    handles = [Line2D([], [], color=styles[lb].color, label=lb) for lb in labels]
    assert [h.get_label() for h in compact_handles(handles)] == labels  # they fit
    many = [f"m-seed{k}" for k in range(MAX_LEGEND_MODELS + 1)] + ["c"]
    handles = [Line2D([], [], label=lb) for lb in many]
    assert [h.get_label() for h in compact_handles(handles)] == [
        f"m ({MAX_LEGEND_MODELS + 1} seeds)", "c"]
    assert legend_label("a-seed0", "ρ = 0.1", 3) == "a-seed0: ρ = 0.1"
    assert legend_label("a-seed0", "ρ = 0.1", 36) == "a-seed0"


def test_the_readme_ensemble_commands_name_real_presets_and_options():
    """docs/analysis.md's seed-ensemble block, read as written: every run_experiments.py line
    parses with the command's own parser and names a preset that loads, with its seeds."""
    import re
    import shlex
    from pathlib import Path

    from toposig.cli.run import build_parser

    readme = (Path(__file__).resolve().parents[1] / "docs" / "analysis.md").read_text(
        encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
                 if "--preset ensemble" in b)
    lines = [ln.split("#")[0] for ln in block.splitlines() if "run_experiments.py" in ln]
    assert len(lines) == 2
    seeds = []
    for line in lines:
        args = build_parser().parse_args(shlex.split(line)[2:])
        suite = T.with_seeds(T.load_suite_config(args.preset), args.seeds)
        seeds.append((suite.name, suite.seeds))
    assert seeds == [("ensemble", 20), ("tiny-seeds5", 5)]


def test_within_model_controls_run_on_the_first_seed_of_each_group_unless_asked():
    """An ensemble's seeds repeat one within-model test on exchangeable runs: by default
    the controls (parts A to C) run on the lowest seed of each group and every model that
    is no seed run; ``seed_controls="all"`` runs them on every seed. The test across
    seeds uses every seed either way."""
    from toposig.analysis.compute import compute_statistics
    from toposig.analysis.ensembles import first_seeds

    records, _ = simulated_ensemble(n_seeds=3)
    plain = [{**entry("solo", None, None, s, 4.0 - s / 50, {"rankme": 1.0 + s / 7}),
              "num_parameters": 50} for s in (0, 10, 20, 30)]
    for r in plain:
        del r["seed"], r["seed_group"]
    # the lowest seed, whichever order the records come in
    shuffled = plain + [r for r in records if r["model_label"] != "s-seed0"] + \
        [r for r in records if r["model_label"] == "s-seed0"]
    for r in shuffled:
        if r.get("seed_group") == "l":
            r["seed"] = {"l-seed0": 9, "l-seed1": 5, "l-seed2": 7}[r["model_label"]]
    kept = first_seeds(records_of(shuffled))
    assert {r.model_label for r in kept} == {"solo", "s-seed0", "l-seed1"}
    assert kept == records_of(
        [r for r in shuffled if r["model_label"] in {"solo", "s-seed0", "l-seed1"}])
    assert first_seeds(records_of(plain)) == records_of(plain)

    first = compute_statistics(shuffled, "loss", n_bootstrap=50, n_surrogates=20,
                               design_runs=0)
    every = compute_statistics(shuffled, "loss", n_bootstrap=50, n_surrogates=20,
                               design_runs=0, seed_controls="all")
    assert first.controlled is not None and every.controlled is not None
    assert set(first.controlled.per_model) == {"solo", "s-seed0", "l-seed1"}
    assert len(every.controlled.per_model) == 7
    assert "controlled_seeds" in first.notes
    assert "controlled_seeds" not in every.notes
    assert first.ensembles == every.ensembles is not None
    with pytest.raises(ValueError, match="seed_controls"):
        compute_statistics(shuffled, "loss", design_runs=0, seed_controls="some")
