"""Issue 36, rows 1-4: every file of a results folder goes through one writer
(:mod:`toposig.files.atomic`), which opens each folder below the root the caller was given
without following a link, so nothing is ever written outside it.

Three layers: the writer itself (links, files in a folder's place, names outside the
root); a scan that finds no other write in the package but the few listed, each with its
reason; and every command that writes (run, analyze, import, plot, live monitoring,
export, backtest, compare) with each of its folders replaced by a link to a folder
outside, which must stay as it was.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from toposig.cli.analyze import main as analyze_main
from toposig.cli.backtest import main as backtest_main
from toposig.cli.compare import main as compare_main
from toposig.cli.import_tables import main as import_main
from toposig.cli.plot import main as plot_main
from toposig.files.atomic import (
    LinkedFolderError,
    atomic_write_bytes,
    atomic_write_json,
    make_folder,
    remove_file,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "toposig"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file below ``folder`` (links not followed)."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def elsewhere_with(tmp_path: Path, name: str = "elsewhere") -> Path:
    """A folder outside every results folder, holding one file of its owner's."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "theirs.txt").write_text("not toposig's")
    return folder


def link_in_place(folder: Path, target: Path) -> None:
    """Replace ``folder`` (if there) by a link to ``target``, its files moved there."""
    if folder.is_dir():
        for p in folder.iterdir():
            shutil.move(str(p), target / p.name)
        folder.rmdir()
    folder.symlink_to(target, target_is_directory=True)


# ------------------------------------------------------------------------ the writer


def test_a_write_through_a_linked_folder_is_refused_at_any_depth(tmp_path):
    root, outside = tmp_path / "root", elsewhere_with(tmp_path)
    (root / "a").mkdir(parents=True)
    for linked in (root / "a" / "b", root / "c"):
        linked.symlink_to(outside)
    before = snapshot(outside)
    for path in (root / "a" / "b" / "x.json", root / "a" / "b" / "deeper" / "x.json",
                 root / "c" / "x.json"):
        with pytest.raises(LinkedFolderError, match="is a symbolic link inside"):
            atomic_write_json(path, {"x": 1}, root=root)
        with pytest.raises(LinkedFolderError):
            make_folder(root, path.parent)
        with pytest.raises(LinkedFolderError):
            remove_file(path.parent / "theirs.txt", root=root)
    assert snapshot(outside) == before


def test_the_root_may_be_a_link_and_the_final_name_is_replaced_not_followed(tmp_path):
    outside = elsewhere_with(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    root = tmp_path / "root"
    root.symlink_to(real)  # the user's choice of folder: followed
    atomic_write_bytes(root / "sub" / "f.txt", b"one", root=root)
    assert (real / "sub" / "f.txt").read_bytes() == b"one"
    planted = real / "sub" / "g.txt"
    planted.symlink_to(outside / "theirs.txt")
    atomic_write_bytes(root / "sub" / "g.txt", b"two", root=root)
    assert planted.read_bytes() == b"two" and not planted.is_symlink()
    assert (outside / "theirs.txt").read_text() == "not toposig's"
    assert sorted(p.name for p in (real / "sub").iterdir()) == ["f.txt", "g.txt"]


def test_a_file_in_a_folders_place_and_names_outside_the_root_are_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "data").write_text("a file")
    with pytest.raises(LinkedFolderError, match="is a file where toposig keeps a folder"):
        atomic_write_json(root / "data" / "x.json", {}, root=root)
    for path in (tmp_path / "x.json", root / ".." / "x.json", root):
        with pytest.raises(LinkedFolderError):
            atomic_write_json(path, {}, root=root)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_a_fifo_where_a_record_goes_is_replaced_not_read(tmp_path):
    """A review found the batch writer blocking for ever on a FIFO planted where a
    record goes (it opened the old file to compare its bytes)."""
    import os

    from toposig.files.atomic import many_files

    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "step000000.json")
    with many_files(root, root) as write:
        assert write("step000000.json", b"{}") is True
        assert write("step000001.json", b"{}") is True
    with many_files(root, root) as write:
        assert write("step000000.json", b"{}") is False  # the same bytes: kept
    assert (root / "step000000.json").read_bytes() == b"{}"


def test_only_an_empty_folder_is_removed_and_never_a_links_target(tmp_path):
    from toposig.files.atomic import remove_empty_folder

    root, outside = tmp_path / "root", elsewhere_with(tmp_path)
    (root / "full").mkdir(parents=True)
    (root / "full" / "f").write_text("kept")
    (root / "empty").mkdir()
    (root / "link").symlink_to(outside)
    assert remove_empty_folder(root / "full", root=root) is False
    assert remove_empty_folder(root / "link", root=root) is False
    assert remove_empty_folder(root / "gone", root=root) is False
    assert remove_empty_folder(root / "empty", root=root) is True
    assert sorted(p.name for p in root.iterdir()) == ["full", "link"]
    assert (root / "link").is_symlink() and snapshot(outside) == {"theirs.txt":
                                                                  b"not toposig's"}
    with pytest.raises(LinkedFolderError):
        remove_empty_folder(root / "link" / "x", root=root)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    root = tmp_path / "root"
    atomic_write_bytes(root / "d" / "f", b"old", root=root)

    def fail(f) -> None:
        f.write(b"half")
        raise OSError("disk full")

    from toposig.files.atomic import atomic_write_with
    with pytest.raises(OSError, match="disk full"):
        atomic_write_with(root / "d" / "f", fail, root=root)
    assert snapshot(root) == {"d/f": b"old"}


def test_a_folder_swapped_for_a_link_while_it_is_made_is_not_written_through(tmp_path,
                                                                            monkeypatch):
    """The race a check-then-open by name loses: the writer makes ``data/``, and before
    it opens it someone puts a link in its place. The open (``O_NOFOLLOW``) refuses it."""
    import os

    root, outside = tmp_path / "root", elsewhere_with(tmp_path)
    root.mkdir()
    real_mkdir = os.mkdir

    def mkdir_then_swap(name, mode=0o777, *, dir_fd=None):
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.rmdir(root / name)
        (root / name).symlink_to(outside)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    with pytest.raises(LinkedFolderError, match="data is a symbolic link inside"):
        atomic_write_json(root / "data" / "x.json", {}, root=root)
    assert snapshot(outside) == {"theirs.txt": b"not toposig's"}


# ------------------------------------------------------------ no other writer


# A call that writes a file or changes the folder tree, by the name called.
WRITE_CALLS = frozenset({
    "write_text", "write_bytes", "mkdir", "makedirs", "unlink", "rmdir", "touch", "rmtree",
    "copyfile", "copytree", "move", "symlink_to", "hardlink_to", "savefig", "to_csv",
    "to_parquet", "save_pretrained", "mkstemp", "mkdtemp", "savez", "savez_compressed",
    "savetxt", "tofile", "to_pickle", "chmod", "save_file",
})
# Called on these modules only (``str.replace``, ``list.remove``... are not writes).
WRITE_CALLS_OF = {"os": {"replace", "rename", "remove", "open", "mkdir", "makedirs",
                         "unlink", "rmdir", "symlink", "link", "truncate"},
                  "shutil": {"copy", "copy2", "move", "rmtree", "copyfile", "copytree"},
                  "torch": {"save"}, "np": {"save", "savez", "savez_compressed"},
                  "numpy": {"save", "savez", "savez_compressed"}}
# Modules whose open(..., "w") writes as the builtin's does.
OPENERS = {"io", "gzip", "bz2", "lzma", "builtins", "codecs"}
# The writer, and the writes that are not files of a results folder, each with its reason.
WRITER_MODULES = {"toposig/files/atomic.py", "toposig/files/locks.py"}
ALLOWED = {
    # into a buffer, then through the writer
    ("toposig/run/store.py", "np.savez_compressed(buf, **arrays)"),
    ("toposig/run/results_folder.py", "table.to_csv(index=False, lineterminator='\\n')"),
    ("toposig/run/results_folder.py", "table.to_parquet(buf, index=False)"),
    ("toposig/report/style.py",
     "top.savefig(f, dpi=output.dpi, format=fmt, metadata=NO_DATES.get(fmt))"),
    # a notebook's display of a figure: PNG bytes in memory, no file
    ("toposig/report/style.py", "self.savefig(buffer, format='png', bbox_inches='tight')"),
    ("toposig/model/training.py", "torch.save(state, f)"),
    # a trained model's folder: Hugging Face writes many files into a temporary sibling
    # folder, renamed into place (not a results folder; its own trainer made each name)
    ("toposig/model/training.py", "folder.parent.mkdir(parents=True, exist_ok=True)"),
    ("toposig/model/training.py",
     "tempfile.mkdtemp(dir=folder.parent, prefix=f'.{folder.name}.')"),
    ("toposig/model/training.py", "model.save_pretrained(tmp)"),
    ("toposig/model/training.py", "tokenizer.save_pretrained(tmp)"),
    ("toposig/model/training.py", "shutil.rmtree(folder)"),
    ("toposig/model/training.py", "os.replace(tmp, folder)"),
    ("toposig/model/training.py", "shutil.rmtree(tmp, ignore_errors=True)"),
    ("toposig/model/training.py", "shutil.rmtree(leftover, ignore_errors=True)"),
    ("toposig/model/training.py", "leftover.unlink(missing_ok=True)"),
    # the trainer's log, appended line by line and flushed before each resume state
    ("toposig/model/training.py", "log_path.open('a', encoding='utf-8')"),
}


def writes_in(source: str) -> list[str]:
    """The calls in ``source`` that write, as written (``ast.unparse``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            mode = [a for a in node.args[1:2] if isinstance(a, ast.Constant)] + \
                [k.value for k in node.keywords if k.arg == "mode"]
            if func.id == "open" and any(isinstance(m, ast.Constant) and
                                         set(str(m.value)) & set("wax+") for m in mode):
                found.append(ast.unparse(node))
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            method = owner not in WRITE_CALLS_OF  # a path's or an object's, not os.open
            module_open = owner in OPENERS or func.attr == "fdopen"  # open(path, mode)
            modes = [*(node.args[1:2] if module_open else node.args[:1]),
                     *(k.value for k in node.keywords if k.arg == "mode")]
            writing_open = (func.attr in ("open", "fdopen") and (method or module_open)
                            and any(isinstance(a, ast.Constant)
                                    and set(str(a.value)) & set("wax+") for a in modes))
            if (func.attr in WRITE_CALLS_OF.get(owner or "", ())
                    or (func.attr in WRITE_CALLS and method) or writing_open):
                found.append(ast.unparse(node))
    return found


def test_the_scan_finds_writes():
    planted = ("import os, shutil\nfrom pathlib import Path\n"
               "p = Path('x')\np.write_text('a')\np.mkdir()\nos.replace('a', 'b')\n"
               "shutil.rmtree('d')\nopen('f', 'w')\np.open('a')\nfig.savefig('x.png')\n"
               "'a'.replace('a', 'b')\n[1].remove(1)\nopen('f')\np.open()\n"
               "p.open(mode='wb')\nopen('f', mode='a')\ngzip.open('f.gz', 'wt')\n"
               "os.fdopen(fd, 'wb')\nnumpy.save('a', x)\ndf.to_pickle('p')\n")
    assert writes_in(planted) == [
        "p.write_text('a')", "p.mkdir()", "os.replace('a', 'b')", "shutil.rmtree('d')",
        "open('f', 'w')", "p.open('a')", "fig.savefig('x.png')", "p.open(mode='wb')",
        "open('f', mode='a')", "gzip.open('f.gz', 'wt')", "os.fdopen(fd, 'wb')",
        "numpy.save('a', x)", "df.to_pickle('p')"]


def test_nothing_in_the_package_writes_but_through_the_writer():
    """A new write must go through :mod:`toposig.files.atomic` (or be listed above with
    its reason): no caller can forget to refuse links."""
    found = {(str(path.relative_to(SRC.parent)), call)
             for path in sorted([*SRC.rglob("*.py"), *SRC.parent.glob("*.py")])
             if str(path.relative_to(SRC.parent)) not in WRITER_MODULES
             for call in writes_in(path.read_text(encoding="utf-8"))}
    assert sorted(found - ALLOWED) == []
    assert sorted(ALLOWED - found) == []  # the list holds no write that is gone


# ------------------------------------------------------- every writer, a link each

CSV = "model,step,loss,h1_total_persistence\n" + "".join(
    f"{m},{s},{(2 + 3 / (1 + s) ** 0.5) * k},{s % 3 + k}\n"
    for m, k in (("a", 1.0), ("b", 1.3)) for s in (0, 10, 20, 40, 80, 160))


@pytest.fixture
def imported(tmp_path) -> Path:
    """A small results folder made by ``toposig import`` (no model needed)."""
    csv = tmp_path / "t.csv"
    csv.write_text(CSV)
    out = tmp_path / "out"
    assert import_main([str(csv), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("linked", ["plots", "data"])
def test_analyze_writes_nothing_through_a_linked_folder(imported, tmp_path, linked, capsys):
    """Rows 1 and 2: with plots/ (or data/) a link to a folder outside, every figure (or
    statistics.json) was written there, exit 0."""
    outside = elsewhere_with(tmp_path)
    (imported / "plots").mkdir(exist_ok=True)
    link_in_place(imported / linked, outside)
    before = snapshot(outside)
    assert analyze_main(["--out", str(imported), "--design-runs", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{imported / linked} is a symbolic link inside" in err and "Traceback" not in err
    assert snapshot(outside) == before


def test_the_writer_refuses_a_linked_plots_folder_without_the_commands_check(
        imported, tmp_path):
    """The analysis checks its folders first; the writer does not rely on that."""
    from toposig.analyze import analyze

    outside = elsewhere_with(tmp_path)
    (imported / "plots").symlink_to(outside)
    with pytest.raises(LinkedFolderError, match="plots is a symbolic link"):
        analyze(imported, design_runs=0)
    assert snapshot(outside) == {"theirs.txt": b"not toposig's"}


@pytest.mark.parametrize("linked", ["data", "records/import-*/a"])
def test_a_second_import_writes_nothing_through_a_linked_folder(imported, tmp_path, linked,
                                                                capsys):
    """Row 3: the same file imported again, with records/import-<h>/<label> or data/
    replaced by links, wrote its records and config.json outside."""
    outside = elsewhere_with(tmp_path)
    (folder,) = imported.glob(linked)
    link_in_place(folder, outside)
    before = snapshot(outside)
    assert import_main([str(tmp_path / "t.csv"), "--out", str(imported)]) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link inside" in err and "Traceback" not in err
    assert snapshot(outside) == before


def test_plot_writes_nothing_through_a_linked_output_folder(imported, tmp_path, capsys,
                                                          monkeypatch):
    """``plot --compare`` makes ``compare-A-vs-B/`` in the working folder; a link planted
    there is not followed. With ``--out`` the folder is the user's, links and all."""
    outside = elsewhere_with(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(imported, other)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "compare-out-vs-other").symlink_to(outside)
    before = snapshot(outside)
    assert plot_main(["--compare", str(imported), str(other)]) == 2
    err = capsys.readouterr().err
    assert "compare-out-vs-other is a symbolic link inside" in err
    assert snapshot(outside) == before
    assert plot_main(["--compare", str(imported), str(other), "--out", "figs"]) == 0
    assert (tmp_path / "figs" / "correlation_heatmap.png").is_file()


def test_the_files_commands_replace_a_link_where_their_file_goes(imported, tmp_path):
    """``backtest --json``, ``compare --json`` and ``analyze --export``: a link where the
    file goes is replaced by the file, and what it pointed to is left as it was."""
    outside = elsewhere_with(tmp_path)
    before = snapshot(outside)
    for name, command in (
            ("b.json", lambda p: backtest_main([str(imported), "--json", str(p)])),
            ("c.json", lambda p: compare_main([str(imported), str(imported), "--json",
                                               str(p)]))):
        planted = tmp_path / name
        planted.symlink_to(outside / "theirs.txt")
        assert command(planted) == 0
        assert not planted.is_symlink() and json.loads(planted.read_text())
    table = imported / "data" / "results_table.csv"
    table.symlink_to(outside / "theirs.txt")
    assert analyze_main(["--out", str(imported), "--design-runs", "0", "--no-plots",
                         "--export", "csv"]) == 0
    assert not table.is_symlink() and table.read_text().startswith("model")
    assert snapshot(outside) == before


@pytest.mark.parametrize("linked", ["live", "live/r"])
def test_live_monitoring_writes_nothing_through_a_linked_folder(tmp_path, linked):
    """Row 4: with live/ or live/<label> a link, the writer lock, signal.json and
    topology.png were written where it points."""
    from test_faults_live import live_monitor
    from test_live import tiny_model

    outside = elsewhere_with(tmp_path)
    out = tmp_path / "out"
    (out / linked).parent.mkdir(parents=True)
    (out / linked).symlink_to(outside)
    before = snapshot(outside)
    monitor = live_monitor(out)
    with pytest.raises(LinkedFolderError, match="is a symbolic link inside"):
        monitor(tiny_model(), 0)
    assert snapshot(outside) == before


@pytest.mark.parametrize("linked", ["data", "records"])
def test_a_run_writes_nothing_through_a_linked_folder(tmp_path, linked, capsys):
    """The run's records and aggregates (the store refused links before this issue; now
    through the same writer as every other file)."""
    from conftest import neox_config, save_checkpoint

    from run_experiments import main as run_main

    models = tmp_path / "run"
    save_checkpoint(models / "step0", neox_config(hidden=8, layers=1, heads=2, vocab=64))
    outside = elsewhere_with(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / linked).symlink_to(outside)
    before = snapshot(outside)
    code = run_main(["--models", str(models), "--out", str(out), "--signatures", "weights",
                     "--no-progress"])
    assert code != 0
    printed = capsys.readouterr()
    assert "is a symbolic link inside" in printed.out + printed.err
    assert snapshot(outside) == before


def test_plots_default_folder_is_beside_the_first_results_folder(imported, tmp_path,
                                                                 monkeypatch):
    """Issue 37, row 9: `plot --compare A B` wrote compare-A-vs-B/ into the working
    folder (the repository root, when run there)."""
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert plot_main([str(imported), "--figures", "correlation_heatmap"]) == 0
    assert plot_main(["--compare", str(imported), str(imported), "--names", "a,b",
                      "--figures", "correlation_heatmap"]) == 0
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "plots-out" / "correlation_heatmap.png").is_file()
    assert (tmp_path / "compare-a-vs-b" / "correlation_heatmap.png").is_file()
