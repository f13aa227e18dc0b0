"""Checkpoint series (Hub ids, local folders, schedules), Hub preflight, text selection."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import neox_config, save_checkpoint

from toposig.sources import checkpoints as ck
from toposig.sources import corpus
from toposig.sources import revisions as rv


def test_named_schedules():
    assert len(rv.PYTHIA_ALL_STEPS) == 154
    assert len(rv.SEED_STEPS) == 19
    assert set(rv.SEED_STEPS) <= set(rv.PYTHIA_ALL_STEPS)
    assert rv.parse_selection(["seed"]).steps == rv.SEED_STEPS
    assert rv.parse_selection(["all"]).every
    assert rv.parse_selection(["1000", "0", "1000"]).steps == (0, 1000)
    assert rv.parse_selection(None).is_default
    with pytest.raises(rv.RevisionError, match="'-5'"):
        rv.parse_selection(["-5"])


def pythia_refs(repo_id):
    """``list_repo_refs`` of a Pythia repository: main and the 154 step branches."""
    names = ["main", *(f"step{s}" for s in rv.PYTHIA_ALL_STEPS)]
    return SimpleNamespace(branches=[SimpleNamespace(name=n) for n in names], tags=[])


def test_hub_series_is_the_repositorys_revisions():
    series = ck.resolve_series("EleutherAI/pythia-70m", rv.StepSelection(steps=(0, 1000, 143000)),
                               list_refs=pythia_refs)
    assert [c.revision for c in series] == ["step0", "step1000", "step143000"]
    assert {c.label for c in series} == {"pythia-70m"}
    assert all(c.source == "hub" for c in series)
    default = ck.resolve_series("EleutherAI/pythia-70m", list_refs=pythia_refs)
    assert [c.step for c in default] == list(rv.SEED_STEPS)
    every = ck.resolve_series("EleutherAI/pythia-70m", rv.parse_selection(["all"]),
                              list_refs=pythia_refs)
    assert len(every) == 154 and every[-1].revision == "step143000"  # main is no step


@pytest.mark.parametrize(("bad", "says"), [
    ("/no/such/folder", "no such folder: '/no/such/folder' (a local path"),
    ("./missing-run", "no such folder: './missing-run'"),
    ("not a model!", "neither an existing local folder nor a Hugging Face Hub id")])
def test_unknown_model_path_is_refused(bad, says):
    with pytest.raises(ck.SeriesError, match=re.escape(says)):
        ck.resolve_series(bad, None)


def test_a_mistyped_local_path_is_no_such_folder_with_the_nearest_names(tmp_path,
                                                                      monkeypatch):
    """Issue 37, row 6: `--models runs/nope` went to the Hub ("cannot reach the Hugging
    Face Hub ... to list the revisions of 'runs/nope'"). A path whose parent folder exists
    here is local; a Hub id's organisation is not a folder here."""
    (tmp_path / "runs" / "tiny-run").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    with pytest.raises(ck.SeriesError) as refused:
        ck.resolve_series("runs/tiny-rum", None, list_refs=no_hub)
    assert str(refused.value).startswith("no such folder: 'runs/tiny-rum'")
    assert str(refused.value).endswith("the nearest names in 'runs': tiny-run")
    assert ck.resolve_series("EleutherAI/pythia-70m", list_refs=pythia_refs)  # still a Hub id


@pytest.fixture(scope="module")
def local_layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    cfg = neox_config(hidden=8, layers=1, heads=1, vocab=32)
    for s in (0, 20, 5):
        save_checkpoint(root / "run" / f"step{s}", cfg)
    for s in (100, 50):
        save_checkpoint(root / "trainer" / f"checkpoint-{s}", cfg)
    (root / "trainer" / "checkpoint-7").mkdir()  # no model inside: ignored
    save_checkpoint(root / "single", cfg)
    (root / "empty").mkdir()
    return root


def test_local_series_discovers_steps_in_order(local_layouts):
    run = ck.resolve_series(str(local_layouts / "run"), None)
    assert [c.step for c in run] == [0, 5, 20]
    assert run[0].location.endswith("step0") and run[0].source == "local"
    trainer = ck.resolve_series(str(local_layouts / "trainer"), None)
    assert [c.step for c in trainer] == [50, 100]
    assert ck.resolve_series(str(local_layouts / "run"), rv.StepSelection(steps=(5,)))[0].step == 5


def test_a_record_names_its_checkpoint_relative_to_the_model_source(local_layouts,
                                                                    monkeypatch, tmp_path):
    """Issue 60: a record's ``location`` is the checkpoint's path inside the model source
    as the run was given it (absolute or relative), never the measuring machine's
    absolute path; the source itself is ``.``, and a checkpoint reached through a link
    out of its source is named alone."""
    import os

    monkeypatch.chdir(local_layouts)
    for model in ("run", str(local_layouts / "run"), "./run/"):
        run = ck.resolve_series(model, None)
        assert [ck.checkpoint_identity(c)["location"] for c in run] == [
            "step0", "step5", "step20"], model
        assert all((Path(model) / c.stored_location).resolve() == Path(c.location)
                   for c in run)
    (one,) = ck.resolve_series("single", None)
    assert one.stored_location == "."
    (tmp_path / "linked").mkdir()
    os.symlink(local_layouts / "single", tmp_path / "linked" / "step40")
    (linked,) = ck.resolve_series(str(tmp_path / "linked"), None)
    assert linked.step == 40 and linked.stored_location == "single"
    assert not any(ck.checkpoint_identity(c)["location"].startswith("/")
                   for c in ck.resolve_series("trainer", None))


def test_single_model_folder_is_a_series_of_one(local_layouts):
    (one,) = ck.resolve_series(str(local_layouts / "single"), None)
    assert one.step is None and one.name == "final"
    (stepped,) = ck.resolve_series(str(local_layouts / "run" / "step20"), None)
    assert stepped.step == 20


def test_missing_local_step_names_the_available_ones(local_layouts):
    with pytest.raises(ck.SeriesError,
                       match=r"steps \[7\] are not in .* it has 3: step0, step5, step20"):
        ck.resolve_series(str(local_layouts / "run"), rv.StepSelection(steps=(5, 7)))


def test_folder_without_models_is_refused(local_layouts):
    with pytest.raises(ck.SeriesError, match="holds no model"):
        ck.resolve_series(str(local_layouts / "empty"), None)


def test_colliding_labels_are_told_apart_by_their_parents(local_layouts, tmp_path):
    save_checkpoint(tmp_path / "run" / "step0", neox_config(hidden=8, layers=1, heads=1, vocab=32))
    a = ck.resolve_series(str(local_layouts / "run"), None)
    b = ck.resolve_series(str(tmp_path / "run"), None)
    labels = [s[0].label for s in ck.assign_labels([a, b])]
    assert labels == [f"{local_layouts.name}-run", f"{tmp_path.name}-run"]
    assert [c.label for c in ck.assign_labels([a])[0]] == ["run"] * 3


def test_unreachable_hub_with_nothing_cached_stops_fast_with_advice(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    t0 = time.perf_counter()
    with pytest.raises(ck.HubUnavailableError) as err:  # HF_HUB_OFFLINE=1 in the tests
        ck.resolve_series("EleutherAI/pythia-70m")
    assert time.perf_counter() - t0 < 10
    msg = str(err.value)
    assert "cannot reach the Hugging Face Hub (HF_HUB_OFFLINE is set)" in msg
    assert "the list of revisions comes from the cache" in msg
    assert "--models path/to/run" in msg


def test_local_series_need_no_hub(local_layouts):
    assert ck.check_hub_access(ck.resolve_series(str(local_layouts / "run"), None)) is False


# --- texts ---------------------------------------------------------------------------


def test_wikitext_selection_follows_the_protocol(wikitext_dir):
    rows = corpus.wikitext_rows("validation")
    assert len(rows) == 3760  # one row per line, as the Hub dataset yields them
    texts = corpus.select_texts(rows, 200, 100)
    assert len(texts) == 200
    assert all(len(t) >= 100 and t == t.strip() for t in texts)
    first = next(r.strip() for r in rows if len(r.strip()) >= 100)
    assert texts[0] == first


def test_missing_wikitext_names_both_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("TOPOSIG_DATASETS_DIR", str(tmp_path))
    with pytest.raises(corpus.DataMissingError) as err:
        corpus.wikitext_rows("validation")
    msg = str(err.value)
    assert str(tmp_path / "wikitext-2-raw-v1" / "wiki.valid.raw") in msg
    assert "download_wikitext.py" in msg and "--texts" in msg and "texts=" in msg
    assert "TOPOSIG_DATASETS_DIR" in msg


def test_texts_file(tmp_path):
    f = tmp_path / "texts.txt"
    f.write_text("first text\n\n  second text  \nthird\n", encoding="utf-8")
    assert corpus.load_texts(str(f), 3, 100) == ["first text", "second text", "third"]
    assert corpus.load_texts(str(f), 2, 100) == ["first text", "second text"]
    with pytest.raises(ValueError, match="has 3 non-empty lines, but --n-texts asks for 5"):
        corpus.load_texts(str(f), 5, 100)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        corpus.load_texts(str(tmp_path / "nope.txt"), 5, 100)


def test_too_few_long_rows():
    with pytest.raises(ValueError, match="only 1 texts of at least 10 characters"):
        corpus.select_texts(["short", "long enough text", ""], 2, 10)
