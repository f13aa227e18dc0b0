"""One study per results folder: runs that do not belong are refused before any work,
aggregates and figures describe every record the folder holds, a rerun changes no file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import neox_config, save_checkpoint

import analyze_results
import run_experiments
from toposig.model.training import byte_tokenizer
from toposig.run.study import Study, StudyMismatchError, merge_study

FAST = ["--n-texts", "12", "--max-length", "24", "--no-progress"]


def series(root: Path, name: str, steps=(0, 10), seed: int = 0) -> Path:
    cfg = neox_config(hidden=8, layers=1, heads=2, vocab=264)
    for i, step in enumerate(steps):
        save_checkpoint(root / name / f"step{step}", cfg, byte_tokenizer(), seed=seed + i)
    return root / name


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".toposig.lock"}


@pytest.fixture()
def study(tmp_path, wikitext_dir):
    """A results folder holding the study of one two-checkpoint series ``a``."""
    a = series(tmp_path / "runs", "a")
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(a), "--out", str(out), *FAST]) == 0
    return tmp_path, out


def test_a_model_the_study_does_not_hold_is_refused_and_nothing_changes(study, capsys):
    tmp_path, out = study
    b = series(tmp_path / "runs", "b", seed=5)
    before = files(out)
    assert run_experiments.main(["--models", str(b), "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err
    assert "holds the study of a" in err and "brings b" in err
    assert f"--out {out.parent / 'NAME'}" in err and "--extend" in err  # beside it
    assert files(out) == before


def test_extend_adds_a_model_and_the_aggregates_cover_both(study):
    tmp_path, out = study
    b = series(tmp_path / "runs", "b", seed=5)
    assert run_experiments.main(["--models", str(b), "--out", str(out), "--extend",
                                 *FAST]) == 0
    entries = json.loads((out / "data" / "all_results.json").read_text())
    assert [(e["model_label"], e["step"]) for e in entries] == [
        ("a", 0), ("a", 10), ("b", 0), ("b", 10)]
    config = json.loads((out / "data" / "config.json").read_text())
    assert list(config["models"]) == ["a", "b"]
    assert config["steps"] == {"a": [0, 10], "b": [0, 10]}
    assert (out / "data" / "a_results.json").is_file()


def test_other_settings_for_a_family_the_study_has_are_refused_naming_them(study, capsys):
    tmp_path, out = study
    before = files(out)
    args = ["--models", str(tmp_path / "runs" / "a"), "--out", str(out), *FAST]
    args[args.index("12")] = "10"  # --n-texts 10
    assert run_experiments.main(args) == 2
    err = capsys.readouterr().err
    assert "holds embedding records made with settings hash" in err
    assert "n_texts: 12 there, 10 here" in err
    assert files(out) == before


def test_a_label_taken_by_another_existing_model_is_refused(study, capsys):
    tmp_path, out = study
    other = series(tmp_path / "elsewhere", "a", seed=9)
    assert run_experiments.main(["--models", str(other), "--out", str(out), *FAST]) == 2
    assert "its 'a' is" in capsys.readouterr().err


def test_a_partial_rerun_keeps_the_whole_study_in_the_aggregates(study):
    tmp_path, out = study
    before = files(out / "data")
    a = tmp_path / "runs" / "a"
    # one step of the series only, and the weights family only: nothing to compute
    assert run_experiments.main(["--models", str(a), "--out", str(out), "--steps", "10",
                                 "--signatures", "weights", *FAST]) == 0
    assert files(out / "data") == before


def test_a_new_family_joins_the_study_and_stays_when_a_later_run_leaves_it_out(study):
    tmp_path, out = study
    a = str(tmp_path / "runs" / "a")
    assert run_experiments.main(["--models", a, "--out", str(out), "--signatures",
                                 "gradients", "--gradient-windows", "8", "--gradient-dim",
                                 "8", *FAST]) == 0
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["signatures"] == ["embedding", "weights", "gradients"]
    assert config["settings_hash"] and config["weights_hash"] and config["gradients_hash"]
    with_all = files(out / "data")
    entries = json.loads(with_all["all_results.json"])
    assert all(e["families"] == ["embedding", "weights", "gradients"] for e in entries)
    assert run_experiments.main(["--models", a, "--out", str(out), *FAST]) == 0
    assert files(out / "data") == with_all


def test_a_rerun_of_a_finished_study_and_its_analysis_change_no_file(study):
    tmp_path, out = study
    assert analyze_results.main(["--results", str(out)]) == 0
    before = files(out)
    assert run_experiments.main(["--models", str(tmp_path / "runs" / "a"), "--out", str(out),
                                 *FAST]) == 0
    assert analyze_results.main(["--results", str(out)]) == 0
    after = files(out)
    assert sorted(after) == sorted(before)
    assert [k for k in before if after[k] != before[k]] == []


def test_figures_that_no_longer_apply_are_removed_and_nothing_else(study):
    _, out = study
    plots = out / "plots"
    plots.mkdir(parents=True)
    (plots / "loss_landscapes.png").write_bytes(b"from an earlier run with the landscape")
    (plots / "my_notes.png").write_bytes(b"the user's own file")
    assert analyze_results.main(["--results", str(out)]) == 0
    assert not (plots / "loss_landscapes.png").exists()
    assert (plots / "my_notes.png").read_bytes() == b"the user's own file"
    assert (plots / "summary_figure.png").is_file()


def test_a_preset_for_another_study_is_refused_before_training(study, capsys):
    tmp_path, out = study
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({
        "name": "p", "models": [{"name": "p-h8", "hidden": 8, "layers": 1, "heads": 2}],
        "context": 16, "batch_size": 2, "steps": 2, "warmup": 1, "checkpoint_every": 1}))
    assert run_experiments.main(["--preset", str(preset), "--suite-dir",
                                 str(tmp_path / "suites"), "--out", str(out), *FAST]) == 2
    assert "brings p-h8" in capsys.readouterr().err
    assert not (tmp_path / "suites" / "p").exists()


def test_the_study_check_and_merge_study_as_functions(tmp_path):
    out = tmp_path / "out"
    Study.load(out).check({"x": "hub/x"}, {"weights": "w1"})  # an empty folder takes anything
    (out / "data").mkdir(parents=True)
    (out / "data" / "config.json").write_text("[1, 2]")
    with pytest.raises(StudyMismatchError, match="not a toposig run configuration"):
        Study.load(out).check({"x": "hub/x"})
    old = {"models": {"x": "hub/x"}, "steps": {"x": [0, 100]}, "signatures": ["weights"],
           "weights_hash": "w1", "weight_settings": {"max_rows": 200}}
    (out / "data" / "config.json").write_text(json.dumps(old))
    with pytest.raises(StudyMismatchError, match="brings y"):
        Study.load(out).check({"y": "hub/y"})
    Study.load(out).check({"y": "hub/y"}, extend=True)
    with pytest.raises(StudyMismatchError, match="its 'x' is 'hub/x'"):
        Study.load(out).check({"x": "hub/other-x"}, extend=True)
    with pytest.raises(StudyMismatchError, match="max_rows: 200 there, 50 here"):  # named
        Study.load(out).check({"x": "hub/x"}, {"weights": "w2"},
                       {"weights": {"max_rows": 50}})
    new = {"models": {"x": "hub/x"}, "steps": {"x": [10, 100]}, "signatures": ["embedding"],
           "settings_hash": "e1", "settings": {}, "weights_hash": None}
    merged = merge_study(old, new)
    assert merged["steps"] == {"x": [0, 10, 100]}
    assert merged["signatures"] == ["embedding", "weights"]
    assert (merged["weights_hash"], merged["settings_hash"]) == ("w1", "e1")


def test_a_part_of_the_study_keeps_the_labels_the_study_gave_its_models(tmp_path, wikitext_dir,
                                                                        capsys):
    """runs/x/run and runs/y/run are x-run and y-run together; x alone is still x-run."""
    x, y = series(tmp_path / "x", "run"), series(tmp_path / "y", "run", seed=5)
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(x), str(y), "--out", str(out), *FAST]) == 0
    before = files(out / "data")
    capsys.readouterr()
    assert run_experiments.main(["--models", str(x), "--out", str(out), *FAST]) == 0
    assert "computed: 0  skipped (already done): 2" in capsys.readouterr().out
    assert files(out / "data") == before
    # and the order on the command line does not reorder the study
    assert run_experiments.main(["--models", str(y), str(x), "--out", str(out), *FAST]) == 0
    assert files(out / "data") == before


def test_a_hub_model_label_is_not_taken_by_a_local_folder(tmp_path):
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "data" / "config.json").write_text(json.dumps({
        "models": {"pythia-70m": "EleutherAI/pythia-70m"},
        "model_sources": {"pythia-70m": "hub"}}))
    local = tmp_path / "pythia-70m"
    local.mkdir()
    with pytest.raises(StudyMismatchError, match="its 'pythia-70m' is 'EleutherAI/pythia-70m'"):
        Study.load(out).check({"pythia-70m": str(local)}, sources={"pythia-70m": "local"})
    Study.load(out).check({"pythia-70m": "EleutherAI/pythia-70m"}, sources={"pythia-70m": "hub"})


def test_a_retrained_series_is_not_mixed_with_its_old_records(study, capsys):
    tmp_path, out = study
    a = tmp_path / "runs" / "a"
    import shutil

    shutil.rmtree(a)
    series(tmp_path / "runs", "a", steps=(0,), seed=7)  # retrained, and shorter
    before = files(out)
    assert run_experiments.main(["--models", str(a), "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err
    assert "would mix two trainings" in err and "records" in err
    assert files(out) == before


def test_a_preset_with_other_settings_is_refused_before_training(tmp_path, wikitext_dir,
                                                                 capsys):
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({
        "name": "p", "models": [{"name": "p-h8", "hidden": 8, "layers": 1, "heads": 2}],
        "context": 16, "batch_size": 2, "steps": 2, "warmup": 1, "checkpoint_every": 1}))
    suites, out = tmp_path / "suites", tmp_path / "out"
    args = ["--preset", str(preset), "--suite-dir", str(suites), "--out", str(out),
            "--signatures", "weights", "--no-progress"]
    assert run_experiments.main(args) == 0
    import shutil

    shutil.rmtree(suites)  # a rerun would have to train again
    assert run_experiments.main([*args, "--weight-max-rows", "50"]) == 2
    assert "max_rows: 200 there, 50 here" in capsys.readouterr().err
    assert not suites.exists()


def test_a_run_reads_the_study_once(study, monkeypatch):
    """The folder's config.json is read and validated once per run, whatever the run
    checks (labels, widening, models, settings, the records of other checkpoints)."""
    import toposig.run.study as study_module

    tmp_path, out = study
    reads: list[Path] = []
    real = study_module.read_json

    def counting(path, *args, **kwargs):
        if Path(path).name == "config.json":
            reads.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(study_module, "read_json", counting)
    assert run_experiments.main(["--models", str(tmp_path / "runs" / "a"), "--out",
                                 str(out), "--extend", "--layers", "0,-1", *FAST]) == 0
    assert reads == [out / "data" / "config.json"]


def test_a_preset_run_reads_the_study_once_and_reconciles_it_before_training(
        tmp_path, wikitext_dir, monkeypatch):
    """With --preset the study is read, and the run reconciled with it, before the suite
    trains (a mismatch is refused then, not after training), and not again when the
    trained checkpoints are measured; a second run that widens the embedding's layers
    (--extend) is checked, once trained, to cover every checkpoint of the study."""
    import toposig.run.study as study_module

    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({
        "name": "p", "models": [{"name": "p-h8", "hidden": 8, "layers": 1, "heads": 2}],
        "context": 16, "batch_size": 2, "steps": 2, "warmup": 1, "checkpoint_every": 1}))
    suites, out = tmp_path / "suites", tmp_path / "out"
    args = ["--preset", str(preset), "--suite-dir", str(suites), "--out", str(out),
            "--no-progress", "--n-texts", "12", "--max-length", "16"]
    reads: list[Path] = []
    real = study_module.read_json

    def counting(path, *a, **kw):
        if Path(path).name == "config.json" and Path(path).parent.name == "data":
            reads.append(Path(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(study_module, "read_json", counting)
    assert run_experiments.main(args) == 0  # a new folder: nothing to read
    assert reads == []
    assert run_experiments.main([*args, "--extend", "--layers", "0,-1"]) == 0
    assert reads == [out / "data" / "config.json"]
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["settings"]["layers"] == [0, -1] and config["last_run"]["n_computed"] == 3
