"""The package's imports point one way: no import cycle between its modules (counting
imports inside functions and under TYPE_CHECKING), no private name (``_x``) imported
from another file, every import pointing down the layers; and ``toposig.analysis``,
below ``toposig.run``, is pure: it opens no file."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "toposig"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, str | None]]:
    """(module imported, name imported from it or None) for every import in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("toposig")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("toposig"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, None) if sub in known else (target, alias.name))
    return found


def graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for name, path in mods.items():
        for target, imported in imports(name, path, set(mods)):
            if target in mods and target != name:
                edges[name].add(target)
            if imported and imported.startswith("_") and not imported.startswith("__"):
                private.append(f"{name} imports {target}.{imported}")
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    edges, _ = graph()
    assert len(edges) > 40
    assert cycles(edges) == []


def test_no_module_imports_a_private_name_from_another():
    _, private = graph()
    assert private == []


def test_the_checker_finds_a_cycle_and_a_private_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    edges, _ = graph()
    assert "toposig.run.plan" in edges["toposig.run.pipeline"]
    assert "toposig.cli.options" in edges["toposig.cli.run"]


# The layers of the Layout section (docs/development.md), lowest first: a module may import from its
# own layer or a lower one. analysis/ is pure (data in, statistics out) and sits below run/,
# which reads and writes the results folders.
LAYERS = [("config", "records", "files", "version", "checkpoint_steps", "defaults",
           "progress"), ("features",),
          ("sources",), ("model",), ("families",), ("analysis",), ("run",), ("report",),
          ("in_memory", "results", "analyze"), ("live",), ("integrations", "cli", "__init__")]


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = "__init__" if len(parts) == 1 else parts[1]
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_every_module_is_in_a_layer_and_imports_point_down():
    edges, _ = graph()
    upward = [f"{a} -> {b}" for a, targets in edges.items() for b in targets
              if layer_of(b) > layer_of(a)]
    assert upward == []


def test_analysis_is_below_run_and_report():
    assert layer_of("toposig.analysis.compute") < layer_of("toposig.run.store")
    assert layer_of("toposig.run.results_folder") < layer_of("toposig.analyze")


# Calls that read or write a file (or the folder tree), by the name called: a builtin or
# imported function (``open(p)``, ``read_json(p)``) or a method (``Path.read_text``,
# ``json.load``, ``np.load``, ``df.to_csv``, ...).
FILE_CALLS = frozenset({
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "load", "dump",
    "save", "savez", "savez_compressed", "loadtxt", "savetxt", "genfromtxt", "fromfile",
    "tofile", "memmap", "read_csv", "read_parquet", "read_json", "read_pickle", "read_table",
    "to_csv", "to_parquet", "to_pickle", "savefig", "mkdir", "makedirs", "unlink", "remove",
    "rmdir", "touch", "rmtree", "copyfile", "atomic_write_bytes", "atomic_write_json",
    "load_arrays", "read_aggregate", "load_entries", "load_results",
})
# Modules whose import alone means reading or writing files.
FILE_MODULES = ("toposig.files", "toposig.run", "pickle", "shutil", "tempfile", "glob")


def file_access(source: str) -> list[str]:
    """``line: what`` for every call in ``source`` named in :data:`FILE_CALLS` and every
    import of one of :data:`FILE_MODULES`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = (func.id if isinstance(func, ast.Name)
                    else func.attr if isinstance(func, ast.Attribute) else None)
            if name in FILE_CALLS:
                found.append((node.lineno, f"calls {ast.unparse(func)}"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            found += [(node.lineno, f"imports {n}") for n in names
                      if any(n == m or n.startswith(m + ".") for m in FILE_MODULES)]
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_the_file_check_finds_reads_and_writes():
    snippet = """
import json, pickle
from pathlib import Path
import numpy as np
from toposig.run.store import load_arrays
def f(p, df):
    with open(p) as fh:
        json.load(fh)
    Path(p).read_text()
    np.load(p)
    df.to_csv(p)
    load_arrays(p, {})
    return json.loads("{}"), json.dumps({}), df.rename(columns={})
"""
    assert [line.split(": ", 1)[1] for line in file_access(snippet)] == [
        "imports pickle", "imports toposig.run.store", "calls open", "calls json.load",
        "calls Path(p).read_text", "calls np.load", "calls df.to_csv", "calls load_arrays"]
    assert file_access("import json\nx = json.loads('[1]')\n") == []


def test_no_analysis_module_reads_or_writes_files():
    mods = {n: p for n, p in modules().items() if n.split(".")[:2] == ["toposig", "analysis"]}
    assert len(mods) > 10
    found = [f"{name}:{hit}" for name, path in mods.items()
             for hit in file_access(path.read_text(encoding="utf-8"))]
    assert found == []


# What only reading a file can mean (writes are the report's job: save_figure, plot_all).
READ_CALLS = ("calls open", "read_text", "read_bytes", "load", "read_json", "read_csv",
              "read_parquet", "read_aggregate", "load_entries", "load_results", "loadtxt",
              "genfromtxt", "fromfile", "memmap")


def report_problems(source: str) -> list[str]:
    """``line: what`` of each import of ``toposig.run``/``toposig.files`` (but the one
    writer, ``toposig.files.atomic``, through which the figures are written) and each
    call that reads a file in ``source``."""
    return [hit for hit in file_access(source)
            if "imports toposig.run" in hit
            or ("imports toposig.files" in hit and not hit.endswith("toposig.files.atomic"))
            or (": calls " in hit and any(word in hit.split(": calls ", 1)[1]
                                          for word in READ_CALLS))]


def test_the_report_imports_nothing_from_run_or_files_and_reads_no_file():
    """Figures take the data they draw (records, statistics, an arrays accessor); the
    orchestration that reads a folder is toposig.analyze, above the report."""
    mods = {n: p for n, p in modules().items() if n.split(".")[:2] == ["toposig", "report"]}
    assert len(mods) > 10
    found = [f"{name}:{hit}" for name, path in mods.items()
             for hit in report_problems(path.read_text(encoding="utf-8"))]
    assert found == []
    planted = ("from toposig.run.results_folder import diagrams_of\n"
               "from toposig.files.content_hash import file_sha256\n"
               "import numpy as np\nx = np.load('a.npz')\nfig.savefig('a.png')\n")
    assert report_problems(planted) == [
        "1: imports toposig.run.results_folder", "2: imports toposig.files.content_hash",
        "4: calls np.load"]
