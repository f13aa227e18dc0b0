"""One convention for every command (issue 37, rows 7 and 8): help that answers at once,
starts with examples and groups its options; no abbreviations; the nearest option on a
typo; old spellings that still work with a warning; one meaning per option."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from toposig.cli.main import COMMANDS, main
from toposig.cli.parser import CommandParser, add_deprecated

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("torch", "scipy", "pandas", "matplotlib", "transformers", "huggingface_hub",
         "sklearn", "tqdm", "ripser", "gudhi", "gph", "persim", "datasets")


def parser_of(command: str) -> CommandParser:
    module = importlib.import_module(f"toposig.cli.{COMMANDS[command][0]}")
    parser = module.build_parser(f"toposig {command}")
    assert isinstance(parser, CommandParser)
    return parser


def test_help_imports_nothing_heavy():
    """``toposig COMMAND --help`` loads no torch, SciPy, pandas, matplotlib, ...: what made
    it take 3.5-6.3 s (bench/bench_help.py prints the times)."""
    code = ("import sys, contextlib, io\n"
            "from toposig.cli.main import main\n"
            f"for c in {list(COMMANDS)!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try: main([c, '--help'])\n"
            "        except SystemExit: pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_starts_with_examples_that_parse_and_groups_its_options(command, capsys):
    try:
        code = main([command, "--help"])
    except SystemExit as exit_:  # argparse's way; compare returns the status
        code = exit_.code
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"usage: toposig {command} [options]")
    assert lines[2] == "examples:"
    shown = []
    for line in lines[3:]:
        if not line.startswith(f"  toposig {command} "):
            break
        shown.append(line.strip())
    assert 2 <= len(shown) <= 4
    parser = parser_of(command)
    for example in shown:  # each example is a command line the parser takes
        parser.parse_args(shlex.split(example)[2:])
    groups = [g for g in parser._action_groups if g._group_actions
              and g.title not in ("options", "positional arguments")]
    assert len(groups) >= 2, [g.title for g in parser._action_groups]


@pytest.mark.parametrize("command, typed, meant", [
    ("run", "--model", "--models"),       # an abbreviation argparse used to take
    ("run", "--ouut", "--out"),            # a typo
    ("analyze", "--no-plot", "--no-plots"),
    ("compare", "--jsn", "--json"),
    ("extract", "--layer", "--layers"),
])
def test_abbreviations_are_refused_naming_the_nearest_option(command, typed, meant, capsys):
    args = {"compare": ["a", "b"]}.get(command, [])
    with pytest.raises(SystemExit) as exit_:
        parser_of(command).parse_args([*args, typed, "x"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {typed}" in err
    assert f"{typed}: did you mean {meant}" in err


@pytest.mark.parametrize("command, old, new, value", [
    ("extract", "--model", "models", ["m"]),
    ("extract", "--step", "steps", ["10"]),
    ("extract", "--revision", "revisions", ["step10"]),
    ("backtest", "--out", "json", "b.json"),
    ("analyze", "--seed", "analysis_seed", 3),
])
def test_old_spellings_still_work_with_a_warning(command, old, new, value, capsys):
    positional = {"backtest": ["f"]}.get(command, [])
    given = value if isinstance(value, list) else [str(value)]
    args = parser_of(command).parse_args([*positional, old, *given])
    assert getattr(args, new) == value
    err = capsys.readouterr().err
    assert f"warning: {old} is deprecated and will be removed; use --{new.replace('_', '-')}" \
        in err
    listed = [line for line in parser_of(command).format_help().splitlines()
              if line.startswith("  -")]  # the options' own lines
    assert not any(re.search(rf"{old}(?![\w-])", line) for line in listed)  # not shown


def test_each_option_means_one_thing_across_commands():
    """--out is a folder everywhere, --json a file, --models one or more models, --steps
    training steps, --seed the measurement's seed (the analysis' is --analysis-seed)."""
    seen: dict[str, list[tuple[str, argparse.Action]]] = {}
    for command in COMMANDS:
        for option, action in parser_of(command)._option_string_actions.items():
            if action.help is not argparse.SUPPRESS:
                seen.setdefault(option, []).append((command, action))
    assert {c for c, _ in seen["--out"]} >= {"run", "analyze", "import", "plot", "extract"}
    for command, action in seen["--out"]:
        assert action.metavar == "FOLDER", command
    for command, action in seen["--json"]:
        assert action.metavar == "FILE", command
    assert {c for c, _ in seen["--json"]} == {"backtest", "compare"}
    for option in ("--models", "--steps"):
        assert {c for c, _ in seen[option]} == {"run", "extract"}
        assert all(a.nargs == "+" for _, a in seen[option])
    assert {c for c, _ in seen["--seed"]} == {"run", "extract"}
    assert all(a.default == 42 for _, a in seen["--seed"])


def test_a_command_with_too_few_or_many_examples_is_refused():
    with pytest.raises(ValueError, match="2 to 4 examples"):
        CommandParser("toposig x", "about", ["one"])


def test_a_mistyped_required_option_is_named_with_the_missing_one(capsys):
    """argparse stops at the required option before any unknown one is reported (review)."""
    with pytest.raises(SystemExit):
        parser_of("train").parse_args(["--preest", "tiny"])
    err = capsys.readouterr().err
    assert "the following arguments are required: --preset" in err
    assert "--preest: did you mean --preset?" in err


def test_an_old_spelling_of_an_option_argparse_checks_itself_is_refused():
    parser = CommandParser("toposig x", "about", ["--new 1", "--new 2"])
    parser.add_argument("--new", required=True)
    with pytest.raises(ValueError, match="would bypass argparse's own checks"):
        add_deprecated(parser, "--old", "--new")


def test_a_scripts_examples_are_written_as_the_script_is_run(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["src/extract_embeddings.py"])
    from toposig.cli.extract import build_parser

    assert "  python src/extract_embeddings.py --models " in build_parser().format_help()


SCRIPTS = {"run_experiments.py": "run", "analyze_results.py": "analyze",
           "train_suite.py": "train", "extract_embeddings.py": "extract"}


def test_every_script_and_the_toposig_command_end_through_run_command():
    """Each way a command is started as a process (the scripts in src/, ``python -m
    toposig.cli.compare``, the installed ``toposig``) returns the command's status and
    freezes the collector's objects first (toposig.cli.process: the quick teardown)."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="toposig")
    code = ("import gc, importlib, runpy, sys\n"
            "def started(path, module):\n"
            "    importlib.import_module(module).main = lambda: 7  # the command, stubbed\n"
            "    gc.unfreeze()\n"
            "    try: runpy.run_path(path, run_name='__main__')\n"
            "    except SystemExit as e: return (e.code, gc.get_freeze_count() > 0)\n"
            f"out = {{s: started({str(SRC)!r} + '/' + s, 'toposig.cli.' + c)\n"
            f"       for s, c in {SCRIPTS!r}.items()}}\n"
            "import toposig.cli.compare as compare  # run again as __main__: its own main,\n"
            "sys.argv = ['compare']  # which returns 2 for no folders\n"
            "out['compare'] = started(compare.__file__, 'toposig.cli.compare')\n"
            "import toposig.cli.main as cli\n"
            "cli.main = lambda: 7\n"
            "gc.unfreeze()\n"
            f"status = importlib.import_module({script.module!r}).{script.attr}()\n"
            "out['toposig'] = (status, gc.get_freeze_count() > 0)\n"
            "print(out)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    ended = eval(done.stdout)  # noqa: S307 - our own subprocess's dict of tuples
    assert ended == {**dict.fromkeys([*SCRIPTS, "toposig"], (7, True)), "compare": (2, True)}


def test_a_command_called_in_process_freezes_nothing(capsys):
    """A notebook or test process goes on allocating: a command's ``main`` leaves the
    collector as it was."""
    import gc

    before = gc.get_freeze_count()
    assert main(["--version"]) == 0
    assert gc.get_freeze_count() == before


def _heavy_after(argv: list[str]) -> tuple[int, str, list[str]]:
    """``toposig ARGV`` in a fresh interpreter: its exit status, stderr and the heavy
    modules it had loaded by then."""
    code = ("import sys, contextlib, io, json\n"
            "from toposig.cli.main import main\n"
            "err = io.StringIO()\n"
            "with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: rc = main(sys.argv[1:])\n"
            "    except SystemExit as e: rc = e.code\n"
            f"print(json.dumps([rc, err.getvalue(), sorted(m for m in {HEAVY!r} "
            "if m in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                         text=True, check=True, cwd=SRC.parent,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    rc, err, heavy = json.loads(out.stdout.splitlines()[-1])
    return rc, err, heavy


@pytest.mark.parametrize(("argv", "says"), [
    (["anlyze", "--out", "results"], "did you mean analyze?"),
    (["analyze", "--out", "results/seed04"], "did you mean results/seed004"),
    (["analyze", "--out", "nowhere/at-all"], "nowhere/at-all does not exist"),
    (["analyze", "--out", "results", "--design-runs", "-1"], "--design-runs must be 0 or more"),
    (["analyze", "--out", "results", "--formats", "png,jpg"], "figure formats are png, pdf"),
    (["analyze", "--out", "results", "--dpi", "0"], "--dpi must be an integer between 10"),
    (["run", "--preset", "nope"], "unknown preset 'nope'; presets: "),
    (["run", "--preset", "p" * 300], "unknown preset 'pppp"),  # not "File name too long"
    (["run", "--models", "/nonexistent/x", "--out", "nowhere/x"],
     "no such folder: '/nonexistent/x'"),
    (["run", "--layers", "x", "--out", "nowhere/x"], "--layers must be last, all or"),
    (["run", "--preset", "tiny", "--seeds", "0"], "--seeds must be at least 1, got 0"),
    (["train", "--preset", "bogus"], "unknown preset 'bogus'"),
    (["train", "--preset", "tiny", "--seeds", "-1"], "--seeds must be at least 1"),
    (["extract", "--models", "/nonexistent/x"], "no such folder: '/nonexistent/x'"),
    (["plot", "results/seed04"], "did you mean results/seed004"),
    (["plot", "results", "--dpi", "1"], "--dpi must be an integer between 10"),
    (["backtest", "results/seed04"], "did you mean results/seed004"),
    (["backtest", "results", "--fractions", "0.2,x"], "--fractions must be distinct numbers"),
    (["compare", "results/seed04", "results"], "no such folder; did you mean results/seed004"),
])
def test_an_argument_error_is_said_before_anything_heavy_loads(argv, says):
    """A mistyped command or folder is refused at once (under a second, not the seconds
    torch and transformers take to load), naming what was probably meant."""
    rc, err, heavy = _heavy_after(argv)
    assert rc == 2 and says in err, err
    if argv[0] in COMMANDS:  # one error line, the last
        assert [line for line in err.splitlines() if line.startswith("error: ")] == \
            err.splitlines()[-1:], err
    assert heavy == [], heavy
