"""Issue 60: records name their checkpoint relative to the model source, and a folder
written before that (absolute locations of the measuring machine) is rewritten into the
form a run writes today, byte for byte, and still resumes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import neox_config, save_checkpoint

from toposig.files.locks import exclusive
from toposig.run.relocate import main, relative_location, relocate_folder

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("model, location, expected", [
    ("runs/seed004/m", "/old/checkout/runs/seed004/m/step100", "step100"),
    ("./runs/m/", "/old/runs/m/checkpoints/ckpt-100.pt", "checkpoints/ckpt-100.pt"),
    ("runs/m", "/old/runs/m", "."),                       # a lone model folder
    ("runs/m", "/old/runs/m/x/runs/m/step1", "step1"),     # the match nearest the end
    ("/data/m", "/data/m/step5", "step5"),
    ("/data/m", "/elsewhere/step5", "step5"),              # reached through a link
    ("runs/m", "step5", "step5"),                          # already relative
])
def test_an_absolute_location_becomes_relative_to_its_model(model, location, expected):
    assert relative_location(model, location) == expected


def records(out: Path) -> dict[Path, bytes]:
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.glob("records/*/*/*.json"))}


def test_an_old_folder_is_rewritten_as_a_run_writes_it_and_still_resumes(
        tmp_path, wikitext_dir, monkeypatch):
    from run_experiments import main as run
    from toposig.model.training import byte_tokenizer

    monkeypatch.chdir(tmp_path)
    for i, name in enumerate(["step0", "step10"]):
        save_checkpoint(Path("runs/m") / name, neox_config(hidden=8, layers=1, heads=2,
                                                         vocab=264), byte_tokenizer(), seed=i)
    args = ["--models", "runs/m", "--out", "out", "--n-texts", "12", "--max-length", "24",
            "--no-progress"]
    assert run(args) == 0
    today = records(Path("out"))
    locations = {json.loads(b)["location"] for b in today.values()}
    assert locations == {"step0", "step10"}
    # as a run before 2026-12-03 wrote them: the absolute path of the checkpoint
    for rel, text in today.items():
        rec = json.loads(text)
        rec["location"] = str((tmp_path / "runs/m" / rec["location"]).resolve())
        (Path("out") / rel).write_text(json.dumps(rec, separators=(",", ":")))
    assert records(Path("out")) != today
    assert relocate_folder("out") == len(today)
    assert records(Path("out")) == today
    assert relocate_folder("out") == 0  # nothing left to do
    assert run(args) == 0
    # the run kept every record (a recomputed one has another finished_at)
    assert records(Path("out")) == today


def test_a_busy_or_missing_folder_is_refused(tmp_path, capsys):
    (tmp_path / "res" / "records").mkdir(parents=True)
    with exclusive(tmp_path / "res", "results folder"):
        assert subprocess.run(
            [sys.executable, "-m", "toposig.run.relocate", str(tmp_path / "res")],
            capture_output=True, text=True).returncode == 2
    assert main([str(tmp_path / "res")]) == 0
    assert "0 record(s) rewritten" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing")]) == 2
    assert "not a results folder" in capsys.readouterr().err


ABSOLUTE = re.compile(r"(?:^|[\s\"'(`=])(/[\w.-]+(?:/[\w.-]+)+)")
"""A POSIX absolute path of two components or more, where a path starts (not a ratio
such as ``lr/wd`` or a URL's path, which follow a letter or a colon)."""


def absolute_paths(text: str) -> list[str]:
    return ABSOLUTE.findall(text)


def test_the_absolute_path_check_finds_one():
    assert absolute_paths('{"location": "/work/copy/main/runs/tiny/m/step0"}') == \
        ["/work/copy/main/runs/tiny/m/step0"]
    assert absolute_paths("see `/home/me/x.txt`; lr/wd 3e-3/1 https://a.b/c/d") == \
        ["/home/me/x.txt"]


def test_no_committed_file_under_results_names_an_absolute_path():
    """Issue 60: the committed folders say nothing of the measuring machine's disk, and
    name their checkpoints as a run does today (relative to the model source)."""
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    found = {}
    for name in tracked:
        text_file = name.endswith((".json", ".md", ".csv", ".txt"))
        if text_file and (hits := absolute_paths((ROOT / name).read_text(encoding="utf-8"))):
            found[name] = hits[:2]
    assert not found, f"{len(found)} files, e.g. {list(found.items())[:3]}"
