"""Hostile input that once hung or crashed: a catastrophic ``--revision-pattern``, huge or
oddly separated texts files, ``measure`` without texts, a negative ``analyze --seed``."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
import tracemalloc
from collections.abc import Iterator

import pytest
from conftest import causal_lm

import analyze_results
import extract_embeddings
import run_experiments
import toposig
from toposig.cli.main import main as toposig_main
from toposig.model.training import byte_tokenizer
from toposig.sources import checkpoint_files, corpus
from toposig.sources import revisions as rv

# Names on which a backtracking engine takes exponential time for the patterns below.
HOSTILE = ["a" * 60 + "b", "step1", "epoch3-it700"]


class Hung(Exception):
    """The code under test ran past the watchdog."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise :class:`Hung` in the test if the block runs longer than ``seconds`` (``re``
    checks for signals while it backtracks, so a hang fails the test instead of the run)."""
    def fire(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def short_limit(monkeypatch):
    """A 0.3 s limit on matching, to keep the tests fast (raising=False: so that without
    the limit the tests fail on the watchdog rather than on the fixture)."""
    monkeypatch.setattr(rv, "PATTERN_SECONDS", 0.3, raising=False)


# row 12 ------------------------------------------------ a catastrophic --revision-pattern

def test_a_catastrophic_pattern_is_refused_within_its_time_limit(short_limit):
    t0 = time.perf_counter()
    with watchdog(20), pytest.raises(rv.RevisionError) as err:
        rv.parse_revisions(HOSTILE, rv.compile_pattern(r"(a|aa)+$"))
    assert time.perf_counter() - t0 < 3
    msg = str(err.value)
    assert "--revision-pattern '(a|aa)+$'" in msg and "backtracks catastrophically" in msg
    assert "simpler pattern" in msg


def test_nested_plus_on_a_long_name_finishes(short_limit):
    """The issue's example: ``(a+)+$`` either reads the names at once (``regex`` does not
    backtrack on it) or is refused within the limit; it never hangs."""
    t0 = time.perf_counter()
    with watchdog(20):
        try:
            revs = rv.parse_revisions(HOSTILE, rv.compile_pattern(r"(a+)+$"))
        except rv.RevisionError as exc:
            assert "backtracks catastrophically" in str(exc)
        else:
            assert [r.name for r in revs] == ["step1"]
    assert time.perf_counter() - t0 < 3


def test_without_the_regex_module_the_alarm_bounds_re(short_limit, monkeypatch):
    monkeypatch.setattr(rv, "_regex", None, raising=False)
    t0 = time.perf_counter()
    with (watchdog(20),
          pytest.raises(rv.RevisionError, match=r"'\(a\+\)\+\$' took more than 0.3 s")):
        rv.parse_revisions(HOSTILE, rv.compile_pattern(r"(a+)+$"))
    assert time.perf_counter() - t0 < 3
    revs = rv.parse_revisions(HOSTILE, rv.compile_pattern(r"epoch\d+-it(\d+)"))
    assert [(r.name, r.step) for r in revs] == [("step1", 1), ("epoch3-it700", 700)]


def test_a_normal_pattern_still_selects_the_right_revisions():
    names = ["main", "epoch1-it100", "epoch2-it300", "epoch2-it200", "step50", "x" * 300]
    pattern = rv.compile_pattern(r"epoch\d+-it(\d+)")
    revs = rv.parse_revisions(names, pattern)
    assert [(r.name, r.step, r.scheme) for r in revs] == [
        ("step50", 50, "step<N>"), ("epoch1-it100", 100, "pattern"),
        ("epoch2-it200", 200, "pattern"), ("epoch2-it300", 300, "pattern")]
    chosen = rv.select(revs, rv.parse_selection(["200", "300"], None, pattern.pattern), "s")
    assert [r.name for r in chosen] == ["epoch2-it200", "epoch2-it300"]
    assert rv.compile_pattern(r"(x+)").fullmatch("x" * (rv.MAX_NAME_CHARS + 1)) is None
    assert checkpoint_files.step_from_name("epoch3-it700.pt", pattern) == 700


def test_checkpoint_file_names_are_bounded_too(short_limit):
    with watchdog(20), pytest.raises(rv.RevisionError, match="backtracks catastrophically"):
        checkpoint_files.step_from_name("a" * 60 + "b.pt", rv.compile_pattern(r"(a|aa)+$"))


@pytest.mark.parametrize("main", [extract_embeddings.main, run_experiments.main])
def test_the_cli_reports_a_catastrophic_pattern_as_an_input_error(main, tmp_path, capsys,
                                                                  short_limit):
    series = tmp_path / "run"
    (series / HOSTILE[0]).mkdir(parents=True)
    args = {extract_embeddings.main: ["--models", str(series)],
            run_experiments.main: ["--models", str(series), "--out", str(tmp_path / "out"),
                                   "--no-progress"]}[main]
    t0 = time.perf_counter()
    with watchdog(30):
        assert main([*args, "--revision-pattern", "(a|aa)+$"]) == 2
    assert time.perf_counter() - t0 < 15
    err = capsys.readouterr().err
    assert "error: --revision-pattern '(a|aa)+$' took more than" in err
    assert "Traceback" not in err


# row 15 ------------------------------------------------------------------------- texts

def test_a_bom_is_dropped_and_only_newlines_split_texts(tmp_path):
    f = tmp_path / "texts.txt"
    f.write_bytes("\ufefffirst text\r\none\u2028two\u2029three\x85four\x1cfive\x0csix\n"
                  "\n   \nlast\n".encode())
    texts = corpus.read_texts_file(f)
    assert texts == ["first text", "one\u2028two\u2029three\x85four\x1cfive\x0csix", "last"]
    assert corpus.load_texts(str(f), 2, 100) == texts[:2]


def test_a_huge_single_line_is_cut_and_read_in_bounded_memory(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(corpus, "MAX_TEXT_CHARS", 1001)
    monkeypatch.setattr(corpus, "_CHUNK", 4096)
    f = tmp_path / "texts.txt"
    with f.open("wb") as out:
        out.write("€".encode() * 2000 + b"\n")  # cut inside a 3-byte character
        for _ in range(32):
            out.write(b"x" * (1 << 18))  # one 8 MiB line
        out.write(b"\nsecond\n")
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger=corpus.__name__):
            texts = corpus.read_texts_file(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert texts == ["€" * 1001, "x" * 1001, "second"]
    assert peak < 1 << 20  # the 8 MiB line is never held in memory
    assert "2 line(s) longer than 1001 characters were cut" in caplog.text


def test_only_the_lines_used_are_read(tmp_path):
    f = tmp_path / "texts.txt"
    f.write_bytes(b"one\ntwo\nthree\n\xff\xfe not utf-8\n")
    assert corpus.load_texts(str(f), 3, 100) == ["one", "two", "three"]
    assert corpus.probe_texts(str(f), 100, pool=2) == ["one", "two"]
    with pytest.raises(ValueError, match=r"is not UTF-8 text \(byte 14:"):
        corpus.load_texts(str(f), 4, 100)


def test_measure_without_texts_says_so():
    model, tok = causal_lm("gpt_neox", seed=3), byte_tokenizer()
    for texts in ([], ["", "  \n "]):
        with pytest.raises(ValueError, match="no texts were given"):
            toposig.measure(model, tok, texts, families=["embedding"])
    with pytest.raises(ValueError, match="texts is one string"):
        toposig.measure(model, tok, "one text", families=["embedding"])


def test_analyze_refuses_a_negative_seed_naming_it(tmp_path, capsys):
    assert analyze_results.main(["--results", str(tmp_path), "--analysis-seed", "-4"]) == 2
    err = capsys.readouterr().err
    assert "--analysis-seed must be an integer from 0 to 2**32 - 1, got -4" in err
    assert toposig_main(["analyze", "--results", str(tmp_path),
                         "--analysis-seed", str(2**32)]) == 2
    assert "--analysis-seed must be an integer" in capsys.readouterr().err
    # the old spelling still reaches the same check, with a warning naming the new one
    assert toposig_main(["analyze", "--results", str(tmp_path), "--seed", "-4"]) == 2
    err = capsys.readouterr().err
    assert "warning: --seed is deprecated and will be removed; use --analysis-seed" in err
    assert "--analysis-seed must be an integer from 0 to 2**32 - 1, got -4" in err
