"""The README and the documentation in docs/: every code block is run by a test or marked
illustrative, every link resolves, no machine's own paths, and the site builds strictly."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
PAGES = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- (tested: (?P<test>tests/\S+\.py)[^>]*|illustrative[^>]*)-->")


def blocks(page: Path) -> list[tuple[int, str | None, str]]:
    """(line, marker before it or None, code) of each fenced block of a page."""
    lines = page.read_text(encoding="utf-8").split("\n")
    out, fence, start, code = [], False, 0, []
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if not fence:
                before = [x for x in lines[:i] if x.strip()][-1:]
                marker = before[0] if before and MARKER.fullmatch(before[0].strip()) else None
                start, code = i + 1, []
            else:
                out.append((start, marker, "\n".join(code)))
            fence = not fence
        elif fence:
            code.append(line)
    assert not fence, f"{page}: a code block is not closed"
    return out


def block_after(page: Path, marker: str) -> str:
    return next(code for _, m, code in blocks(page) if m and marker in m)


def test_every_code_block_is_tested_or_marked_illustrative():
    unmarked, untested = [], []
    for page in PAGES:
        for line, marker, _ in blocks(page):
            rel = page.relative_to(PROJECT)
            if marker is None:
                unmarked.append(f"{rel}:{line}")
                continue
            m = MARKER.fullmatch(marker.strip())
            if m.group("test"):
                test = PROJECT / m.group("test")
                source = test.read_text(encoding="utf-8") if test.is_file() else ""
                if page.name not in source:
                    untested.append(f"{rel}:{line} ({m.group('test')} never reads {page.name})")
    assert unmarked == [], "blocks neither tested nor marked '<!-- illustrative -->'"
    assert untested == []


def test_no_page_names_a_path_of_one_machine():
    found = [f"{p.relative_to(PROJECT)}: {m.group(0)}" for p in PAGES
             for m in re.finditer(r"(/work/|/root/|/home/|/Users/)\S*", p.read_text())]
    assert found == []


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) and GitHub give a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lstrip("#").strip()).lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s]+", "-", text).strip("-")


def test_the_readmes_links_resolve():
    """The README is not part of the site, so the site's strict build does not check it."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = PROJECT / path
        if not page.exists():
            broken.append(target)
        elif anchor:
            headings = [slug(h) for h in page.read_text().split("\n") if h.startswith("#")]
            if anchor not in headings:
                broken.append(target)
    assert broken == []


def test_the_readmes_python_example_runs(capsys):
    code = block_after(PROJECT / "README.md", "tests/test_docs.py")
    exec(compile(code, "README.md example", "exec"), {})
    perplexity, h1, np_mean = (float(x) for x in capsys.readouterr().out.split())
    assert perplexity > 1 and h1 >= 0 and 0 < np_mean < 1


def test_the_random_series_example_makes_a_series(tmp_path, monkeypatch):
    page = PROJECT / "docs" / "running.md"
    code = next(c for _, m, c in blocks(page)
                if m and "tests/test_docs.py" in m and "save_pretrained" in c)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/running.md random series", "exec"), {})
    assert sorted(p.name for p in (tmp_path / "runs" / "random").iterdir()) == [
        "step0", "step100", "step1000"]


def test_the_load_results_example_gives_the_table_it_says():
    page = PROJECT / "docs" / "running.md"
    code = next(c for _, m, c in blocks(page) if m and "load_results" in c and "tested" in m)
    rows, cols = map(int, re.search(r"(\d+) x (\d+) for results/", code).groups())
    import toposig

    assert toposig.load_results(PROJECT / "results").shape == (rows, cols)


def build_site(project: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``project`` as CI runs it (not silenced: a silenced
    build hid the warnings that strict mode aborts on)."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra: pip install -r "
                                             "requirements.txt")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    return subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(site)],
                          cwd=project, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The project's site, built once for the tests that read it."""
    site = tmp_path_factory.mktemp("built") / "site"
    done = build_site(PROJECT, site)
    assert done.returncode == 0, done.stderr[-3000:]
    return site


def test_the_site_builds_strictly(built_site):
    """mkdocs with mkdocstrings: a broken link, a missing page or an API reference to a
    name that no longer exists fails the build (the development extra installs it)."""
    assert (built_site / "api" / "index.html").is_file()


class Tags(HTMLParser):
    """The start tags of an HTML page, as (tag, attributes)."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_the_figures_page_shows_the_committed_figures(built_site):
    """Issue 60: the site's figures page shows every figure of the offline default
    (results/plots/), each image in the built site byte for byte the committed file
    (docs/hooks.py takes them from results/ when the site is built), and each with its
    line on how to read it (a paragraph naming the figure)."""
    page = built_site / "figures" / "index.html"
    assert page.is_file(), "no figures page in the site"
    html = page.read_text(encoding="utf-8")
    shown, problems = set(), []
    for tag, attrs in Tags(html).tags:
        if tag != "img":
            continue
        src = attrs.get("src") or ""
        built = (page.parent / src).resolve()
        if src.startswith(("http:", "https:", "//", "/")) or not built.is_file():
            problems.append(f"{src}: not in the built site")
            continue
        committed = PROJECT / built.relative_to(built_site.resolve())
        if not committed.is_file() or committed.read_bytes() != built.read_bytes():
            problems.append(f"{src}: not the committed {committed.relative_to(PROJECT)}")
        if f"<code>{built.stem}</code>" not in html:
            problems.append(f"{src}: no paragraph names {built.stem}")
        shown.add(built.relative_to(built_site.resolve()).as_posix())
    assert problems == []
    offline_default = {p.relative_to(PROJECT).as_posix()
                       for p in (PROJECT / "results" / "plots").glob("*.png")}
    assert offline_default, "no committed figures in results/plots"
    assert sorted(offline_default - shown) == []


def test_the_site_loads_nothing_from_another_host_and_highlights_code(built_site):
    """Issue 60: code is highlighted offline (Pygments at build time, its stylesheet in the
    site), not by the theme's highlight.js from a CDN: no page loads a script or a
    stylesheet from another host, and the code blocks carry Pygments' markup."""
    remote = ("http:", "https:", "//")
    loaded = []
    for page in sorted(built_site.rglob("*.html")):
        for tag, attrs in Tags(page.read_text(encoding="utf-8")).tags:
            url = attrs.get("src") if tag == "script" else (
                attrs.get("href") if tag == "link" and "stylesheet" in (attrs.get("rel") or "")
                else None)
            if url and url.startswith(remote):
                loaded.append(f"{page.relative_to(built_site)}: {url}")
    assert loaded == []
    quickstart = (built_site / "quickstart" / "index.html").read_text(encoding="utf-8")
    assert '<div class="highlight"><pre><span></span><code>' in quickstart
    assert re.search(r'<span class="(nb|w|nv|o)">', quickstart), "no Pygments tokens"
    assert 'class="language-' not in quickstart, "a code block left to a client-side highlighter"
    css = (built_site / "assets" / "pygments.css").read_text(encoding="utf-8")
    assert ".highlight .k " in css
    assert 'href="../assets/pygments.css"' in quickstart


def copy_for_build(copy: Path) -> None:
    """What the site is built from, copied to ``copy``: docs/, src/, mkdocs.yml and the
    committed figures the pages show."""
    shutil.copytree(PROJECT / "docs", copy / "docs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PROJECT / "src", copy / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(PROJECT / "mkdocs.yml", copy / "mkdocs.yml")
    for page in (PROJECT / "docs").glob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\((\.\./results/[^)\s]+)\)", page.read_text()):
            figure = (page.parent / target).resolve().relative_to(PROJECT)
            (copy / figure).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(PROJECT / figure, copy / figure)


def test_the_docs_check_fails_on_a_planted_bad_docstring(tmp_path):
    """Issue 37, row 1: silenced, the check passed while `mkdocs build` (and `mkdocs
    serve`) aborted on docstrings documenting parameters the signature lacks. A copy of
    the project with one such docstring planted in the API reference must fail it."""
    copy = tmp_path / "project"
    copy_for_build(copy)
    results = copy / "src" / "toposig" / "results.py"
    text = results.read_text()
    anchor = "            ``--analysis-seed``).\n"
    assert text.count(anchor) == 1
    results.write_text(text.replace(anchor, anchor + "        no_such_option: planted.\n"))
    done = build_site(copy, tmp_path / "site")
    assert done.returncode != 0
    assert "no_such_option" in done.stderr
    assert "figures.md" not in done.stderr  # the copy lacks nothing else the site needs


# --- stated times and sizes (issue 37, row 2) ------------------------------------------------

QUANTITY = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|seconds?|min|minutes?|hours?"
                      r"|GB|MB|GiB|MiB|kB)(?![\w])")
SOURCE = re.compile(r"\b((?:bench|tests)/[\w/]+\.py)|`--durations`")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
NOT_MEASURED = "<!-- not measured:"


def paragraphs(page: Path) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph or table of a page, code blocks left out."""
    out, current, start, fence = [], [], 0, False
    for i, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        if not line.strip():
            if current:
                out.append((start, "\n".join(current)))
            current = []
            continue
        if not current:
            start = i
        current.append(line)
    if current:
        out.append((start, "\n".join(current)))
    return out


def unsourced(page: Path, project: Path = PROJECT) -> list[str]:
    """Each paragraph of ``page`` that states a time or a size (``6 minutes``, ``1.8
    GB``...) without naming the bench or test that measured it (a ``bench/`` or
    ``tests/`` file that exists) and the date it was measured, in the paragraph or the
    one before it (a table's introduction); or that is not marked ``<!-- not measured:
    why -->`` (a limit, a timeout, a target)."""
    found, before = [], ""
    for line, text in paragraphs(page):
        quantities = QUANTITY.findall(text)
        where = f"{before}\n{text}"
        if quantities and NOT_MEASURED not in text:
            sources = [m.group(0) for m in SOURCE.finditer(where)
                       if m.group(1) is None or (project / m.group(1)).is_file()]
            if not sources or not DATE.search(where):
                found.append(f"{page.name}:{line}: {', '.join(quantities[:3])} "
                             f"(source: {sources or 'none'}, date: "
                             f"{'yes' if DATE.search(where) else 'none'})")
        before = text
    return found


def test_every_stated_time_or_size_names_its_source_and_date():
    """A source is the bench or test that prints the number (or pytest's own
    ``--durations``), with the date it was measured."""
    assert [problem for page in PAGES for problem in unsourced(page)] == []


def test_the_check_finds_a_stated_time_without_a_source(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("It takes about 5 minutes on 2 cores.\n\n"
                    "Measured on 2026-11-28 by `bench/bench_help.py`: 0.3 s.\n\n"
                    "<!-- not measured: a limit -->\nA pattern over 2 s is refused.\n\n"
                    "`bench/no_such_bench.py` (2026-11-28) says 3 GB.\n")
    problems = unsourced(page)
    assert [p.split(":")[1] for p in problems] == ["1", "8"]


def test_long_pages_have_a_table_of_contents():
    """Issue 37, row 13: a long page without sub-headings had an empty table of contents."""
    bare = [f"{page.name}: {n} lines, {len(heads)} sections"
            for page in PAGES[1:]
            if (n := len(page.read_text(encoding="utf-8").splitlines())) > 100
            and len(heads := [line for _, text in paragraphs(page)
                              for line in text.splitlines() if line.startswith("## ")]) < 3]
    assert bare == []


def _performance_page():
    import importlib.util
    spec = importlib.util.spec_from_file_location("performance_page",
                                                  PROJECT / "bench" / "performance_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_performance_page_is_generated_from_bench(tmp_path, monkeypatch, capsys):
    """docs/performance.md is what bench/performance.json gives; a page edited by hand,
    or a row without its command, is caught."""
    page = _performance_page()
    assert page.main(["--check"]) == 0, "run python bench/performance_page.py"
    edited = tmp_path / "performance.md"
    edited.write_text(page.PAGE.read_text(encoding="utf-8").replace("| ", "|  ", 1),
                      encoding="utf-8")
    monkeypatch.setattr(page, "PAGE", edited)
    assert page.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    with pytest.raises(ValueError, match="row 2 has no command"):
        page.render({"intro": ["x"], "notes": ["y"],
                     "rows": [{"what": "a", "figures": "1 s", "command": "b"},
                             {"what": "a", "figures": "1 s", "command": " "}]})


# --- the README as a landing page (issue 60) ----------------------------------------------

README_LINES = 150
SENTENCE_WORDS = 50


def long_sentences(page: Path, limit: int = SENTENCE_WORDS) -> list[str]:
    """The prose sentences of ``page`` (code blocks and list-of-links lines left out)
    longer than ``limit`` words, each as its first words."""
    prose = "\n".join(text for _, text in paragraphs(page)
                      if not text.lstrip().startswith(("<!--", "|")))
    sentences = re.split(r"(?<=[.!?:;])\s+(?=[A-Z`*(\[])|\n\s*- ", prose)  # list items too
    return [" ".join(s.split()[:8]) + " ..." for s in sentences if len(s.split()) > limit]


def test_the_readme_is_a_landing_page():
    """At most 150 lines, no sentence over 50 words, no dated measurement: the numbers
    are in docs/, which it links."""
    readme = PROJECT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_LINES
    assert long_sentences(readme) == []
    assert not DATE.search(text), DATE.search(text)


def test_the_landing_page_check_finds_a_long_sentence(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Short one. " + " ".join(["word"] * 60) + ".\n\n```bash\n"
                    + " ".join(["code"] * 80) + "\n```\n")
    assert len(long_sentences(page)) == 1
