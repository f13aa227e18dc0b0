"""Revision naming schemes: the parser, step selection, a fake Hub, the cache, local folders."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
from conftest import FolderHub, neox_config, save_checkpoint

from toposig.run import pipeline
from toposig.run import plan as planning
from toposig.run.executors import SerialExecutor
from toposig.sources import checkpoints as ck
from toposig.sources import revisions as rv

# (scheme, names as suites spell them, their steps)
SCHEMES = [
    ("step<N>", ["step0", "step1000", "step143000"], [0, 1000, 143000]),
    ("step<N>-tokens<M>", ["step0-tokens0B", "step1000-tokens4B", "step20000-tokens84B"],
     [0, 1000, 20000]),
    ("step<N>-tokens<M>", ["stage1-step140000-tokens1174B", "stage1-step10000-tokens42B"],
     [10000, 140000]),
    ("step_<N>k", ["step_0k", "step_20k", "step_2000k"], [0, 20000, 2000000]),
    ("ckpt_<N>", ["ckpt_000", "ckpt_100", "ckpt_359"], [0, 100, 359]),
    ("checkpoint-<N>", ["checkpoint-100", "checkpoint-400000"], [100, 400000]),
    ("global_step<N>", ["global_step500", "global_step1000"], [500, 1000]),
    ("iter_<N>", ["iter_0001000", "iter_0002000"], [1000, 2000]),
]


@pytest.mark.parametrize(("scheme", "names", "steps"), SCHEMES)
def test_every_scheme_is_parsed(scheme, names, steps):
    revs = rv.parse_revisions([*names, "main", "v1.0"])
    assert [r.step for r in revs] == steps
    assert {r.scheme for r in revs} == {scheme}
    assert {r.name for r in revs} == set(names)  # main and v1.0 stand for no step


def test_a_user_pattern_comes_first_and_must_match_the_whole_name():
    pat = rv.compile_pattern(r"epoch\d+-it(\d+)")
    assert rv.parse_revision("epoch3-it700", pat).step == 700
    assert rv.parse_revision("epoch3-it700-final", pat) is None
    assert rv.parse_revision("step5", pat).step == 5  # the built-in schemes still apply
    assert rv.parse_revision("step5", rv.compile_pattern(r"step(\d+)")).scheme == "pattern"


@pytest.mark.parametrize(("pattern", "message"), [
    (r"step\d+", "exactly one capturing group"),
    (r"(a)(\d+)", "exactly one capturing group"),
    (r"step(\d+", "not a regular expression"),
])
def test_bad_patterns_are_refused_naming_the_option(pattern, message):
    with pytest.raises(rv.RevisionError, match=f"--revision-pattern.*{message}"):
        rv.parse_selection(None, None, pattern)


def test_two_names_of_one_step_are_refused_only_when_chosen_by_step():
    revs = rv.parse_revisions(["stage1-step1000-tokens5B", "stage2-step1000-tokens5B",
                               "stage1-step0-tokens0B"])
    with pytest.raises(rv.RevisionError, match=r"2 checkpoints of step 1000 \("
                       r"'stage1-step1000-tokens5B', 'stage2-step1000-tokens5B'\).*--revisions"):
        rv.select(revs, rv.StepSelection(every=True), "olmo2")
    assert [r.step for r in rv.select(revs, rv.StepSelection(steps=(0,)), "olmo2")] == [0]
    named = rv.select(revs, rv.StepSelection(revisions=("stage2-step1000-tokens5B",)), "olmo2")
    assert [r.name for r in named] == ["stage2-step1000-tokens5B"]
    with pytest.raises(rv.RevisionError, match="both stand for step 1000"):
        rv.select(revs, rv.StepSelection(revisions=("stage1-step1000-tokens5B",
                                                    "stage2-step1000-tokens5B")), "olmo2")


def test_a_series_with_no_step_name_is_refused_with_a_hint():
    with pytest.raises(rv.RevisionError, match="no checkpoint whose name stands for a "
                       r"training step \('main' match"):
        rv.select(rv.parse_revisions(["main"]), rv.StepSelection(), "gpt2", unparsed=["main"])


def test_a_pattern_whose_group_is_not_a_number_is_an_error():
    with pytest.raises(rv.RevisionError, match="captured 'it700', not a whole number"):
        rv.parse_revision("epoch1-it700", rv.compile_pattern(r"epoch\d+-(it\d+)"))


def test_selection_options_are_checked():
    with pytest.raises(rv.RevisionError, match="give one"):
        rv.parse_selection(["100"], ["step100"])
    with pytest.raises(rv.RevisionError, match="'ten'"):
        rv.parse_selection(["ten"])
    assert rv.parse_selection(None, ["a", "b", "a"]).revisions == ("a", "b")


def test_select_by_step_name_all_and_default():
    revs = rv.parse_revisions(["step0-tokens0B", "step1000-tokens4B", "step2000-tokens8B"])
    by_step = rv.select(revs, rv.StepSelection(steps=(1000,)), "olmo")
    assert [r.name for r in by_step] == ["step1000-tokens4B"]
    named = rv.select(revs, rv.StepSelection(revisions=("step2000-tokens8B", "step0-tokens0B")),
                      "olmo")
    assert [r.step for r in named] == [0, 2000]
    assert len(rv.select(revs, rv.StepSelection(every=True), "olmo")) == 3
    # no seed schedule in this repository: the default is every revision
    assert len(rv.select(revs, rv.StepSelection(), "olmo", default_schedule=rv.SEED_STEPS)) == 3
    with pytest.raises(rv.RevisionError, match=r"steps \[5\] are not in olmo; it has 3"):
        rv.select(revs, rv.StepSelection(steps=(5,)), "olmo")
    with pytest.raises(rv.RevisionError, match="'main' exists but matches no revision scheme"):
        rv.select(revs, rv.StepSelection(revisions=("main",)), "olmo", unparsed=["main"])
    with pytest.raises(rv.RevisionError, match="no checkpoint named 'nope'"):
        rv.select(revs, rv.StepSelection(revisions=("nope",)), "olmo")


# ------------------------------------------------------------- a fake Hub and the cache

@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    from toposig.model.training import byte_tokenizer

    folder = tmp_path_factory.mktemp("one") / "model"
    save_checkpoint(folder, neox_config(hidden=8, layers=1, heads=2, vocab=264),
                    byte_tokenizer())
    return folder


@pytest.fixture(scope="module")
def fake_hub(model_folder, tmp_path_factory):
    """One repository per scheme, ``fake-org/<i>``, each revision the same tiny model."""
    root = tmp_path_factory.mktemp("hub")
    for i, (_, names, _) in enumerate(SCHEMES):
        for name in names:
            shutil.copytree(model_folder, root / "fake-org" / f"suite{i}" / name)
    return root


@pytest.mark.parametrize("i", range(len(SCHEMES)))
def test_hub_series_in_every_scheme(i, fake_hub, tmp_path):
    hub = FolderHub(fake_hub, tmp_path / "cache")
    _, names, steps = SCHEMES[i]
    series = ck.resolve_series(f"fake-org/suite{i}", rv.parse_selection(["all"]),
                               list_refs=hub.list_repo_refs)
    assert [c.step for c in series] == steps
    assert {c.revision for c in series} == set(names)
    one = ck.resolve_series(f"fake-org/suite{i}", rv.parse_selection([str(steps[-1])]),
                            list_refs=hub.list_repo_refs)
    assert [(c.step, c.revision) for c in one] == [(steps[-1], max(names, key=lambda n: (
        rv.parse_revision(n).step)))]


def test_an_unknown_hub_repository_is_refused(fake_hub, tmp_path):
    hub = FolderHub(fake_hub, tmp_path / "cache")
    with pytest.raises(ck.SeriesError, match="has no model 'fake-org/nothing'"):
        ck.resolve_series("fake-org/nothing", list_refs=hub.list_repo_refs)


def test_offline_the_revisions_come_from_the_cache(fake_hub, tmp_path, caplog):
    hub = FolderHub(fake_hub, tmp_path / "cache")
    repo = "fake-org/suite1"  # OLMo-style names
    hub(repo, revision="step1000-tokens4B")
    hub(repo, revision="step0-tokens0B")

    def unreachable(repo_id):
        raise ConnectionError("no route to the Hub")

    series = ck.resolve_series(repo, list_refs=unreachable, cache_dir=tmp_path / "cache")
    assert [(c.step, c.revision) for c in series] == [(0, "step0-tokens0B"),
                                                      (1000, "step1000-tokens4B")]
    assert "the revisions of fake-org/suite1 are the 2 in the local cache" in caplog.text
    with pytest.raises(ck.SeriesError, match=r"steps \[20000\] are not in .*local cache"):
        ck.resolve_series(repo, rv.StepSelection(steps=(20000,)), list_refs=unreachable,
                          cache_dir=tmp_path / "cache")
    with pytest.raises(ck.HubUnavailableError, match="comes from the cache"):
        ck.resolve_series("fake-org/suite4", list_refs=unreachable,
                          cache_dir=tmp_path / "cache")


def test_a_hub_series_with_olmo_revisions_runs_end_to_end(fake_hub, wikitext_dir, tmp_path,
                                                         monkeypatch):
    from toposig.config import RunSettings

    hub = FolderHub(fake_hub, tmp_path / "cache")
    monkeypatch.setattr(planning, "check_hub_access", lambda ckpts: False)  # the fake is up
    plan = planning.plan_run(["fake-org/suite1"], rv.parse_selection(["0", "20000"]),
                             RunSettings(n_texts=12, max_length=24),
                             list_refs=hub.list_repo_refs)
    outcome = pipeline.execute(plan, tmp_path / "out", progress=False,
                               executor=SerialExecutor(download=hub))
    assert not outcome.failures
    recs = json.loads((tmp_path / "out" / "data" / "all_results.json").read_text())
    assert [(r["step"], r["revision"]) for r in recs] == [(0, "step0-tokens0B"),
                                                          (20000, "step20000-tokens84B")]
    assert [rev for rev, _ in hub.downloads] == ["step0-tokens0B", "step20000-tokens84B"]


# -------------------------------------------------------------------- local folders

@pytest.mark.parametrize("i", range(len(SCHEMES)))
def test_local_series_in_every_scheme(i, model_folder, tmp_path):
    _, names, steps = SCHEMES[i]
    for name in names:
        shutil.copytree(model_folder, tmp_path / "run" / name)
    (tmp_path / "run" / "logs").mkdir()
    series = ck.resolve_series(str(tmp_path / "run"))
    assert [c.step for c in series] == steps
    assert [c.location.rsplit("/", 1)[1] for c in series] == sorted(
        names, key=lambda n: rv.parse_revision(n).step)
    named = ck.resolve_series(str(tmp_path / "run"), rv.parse_selection(None, [names[0]]))
    assert [c.step for c in named] == [rv.parse_revision(names[0]).step]


def test_local_names_no_scheme_knows_need_a_pattern(model_folder, tmp_path):
    for name in ("ep1-it100", "ep2-it200"):
        shutil.copytree(model_folder, tmp_path / "run" / name)
    with pytest.raises(ck.SeriesError, match="stand for no step: ep1-it100.*--revision-pattern"):
        ck.resolve_series(str(tmp_path / "run"))
    series = ck.resolve_series(str(tmp_path / "run"), rv.parse_selection(
        None, None, r"ep\d+-it(\d+)"))
    assert [c.step for c in series] == [100, 200]


def test_a_step_folder_without_a_model_is_named_in_a_warning(model_folder, tmp_path, caplog):
    shutil.copytree(model_folder, tmp_path / "run" / "ckpt_1")
    (tmp_path / "run" / "ckpt_2").mkdir()
    assert [c.step for c in ck.resolve_series(str(tmp_path / "run"))] == [1]
    assert "hold no config.json and are left out: ckpt_2" in caplog.text


@pytest.mark.parametrize("names", [["step0-tokens0B", "step1000-tokens4B"],
                                   ["ckpt_0", "ckpt_100"]])
def test_local_olmo_and_amber_series_run_end_to_end(names, tmp_path, wikitext_dir):
    """Done-when: sub-folders named step1000-tokens4B/ or ckpt_<N>/ run end to end."""
    from run_experiments import main
    from toposig.model.training import byte_tokenizer

    for i, name in enumerate(names):
        save_checkpoint(tmp_path / "run" / name, neox_config(hidden=8, layers=1, heads=2,
                                                            vocab=264), byte_tokenizer(), seed=i)
    out = tmp_path / "out"
    assert main(["--models", str(tmp_path / "run"), "--out", str(out), "--n-texts", "12",
                 "--max-length", "24", "--no-progress"]) == 0
    recs = json.loads((out / "data" / "all_results.json").read_text())
    assert [r["step"] for r in recs] == [rv.parse_revision(n).step for n in names]
    assert [r["location"] for r in recs] == names  # relative to the series (issue 60)
    assert all(r["families"] == ["embedding", "weights"] for r in recs)


def test_cli_steps_and_revisions_options(tmp_path, model_folder, capsys):
    from run_experiments import main

    shutil.copytree(model_folder, tmp_path / "run" / "ckpt_5")
    assert main(["--models", str(tmp_path / "run"), "--steps", "5", "--revisions", "ckpt_5",
                 "--out", str(tmp_path / "o")]) == 2
    assert "give one" in capsys.readouterr().err
    assert main(["--models", str(tmp_path / "run"), "--revision-pattern", "ckpt",
                 "--out", str(tmp_path / "o")]) == 2
    assert "exactly one capturing group" in capsys.readouterr().err
    assert main(["--models", str(tmp_path / "run"), "--revisions", "ckpt_6",
                 "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint named 'ckpt_6'" in capsys.readouterr().err


def test_pythia_default_is_the_seed_schedule_offline_too(tmp_path):
    """The Hub default is the seed's steps where the repository has them all."""
    names = ["main", *(f"step{s}" for s in rv.PYTHIA_ALL_STEPS)]
    refs = SimpleNamespace(branches=[SimpleNamespace(name=n) for n in names], tags=[])
    series = ck.resolve_series("EleutherAI/pythia-14m", list_refs=lambda r: refs)
    assert [c.revision for c in series] == [f"step{s}" for s in rv.SEED_STEPS]


def test_a_hub_repository_with_only_main_is_refused_before_any_work(fake_hub, tmp_path):
    (fake_hub / "fake-org" / "only-main").mkdir(parents=True, exist_ok=True)
    hub = FolderHub(fake_hub, tmp_path / "cache")
    with pytest.raises(ck.SeriesError, match="no checkpoint whose name stands for a training "
                       "step.*'main'.*--revision-pattern"):
        ck.resolve_series("fake-org/only-main", list_refs=hub.list_repo_refs)


def test_checkpoint_files_are_named_without_their_suffix(tmp_path):
    import torch

    for step in (10, 20):
        torch.save({"w": torch.ones(2, 2)}, tmp_path / f"ckpt_{step}.pt")
    series = ck.resolve_series(str(tmp_path), rv.parse_selection(None, ["ckpt_20"]))
    assert [c.step for c in series] == [20]
