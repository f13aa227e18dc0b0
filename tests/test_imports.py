"""The package's imports point one way: no import cycle between its modules (counting
imports inside functions and under TYPE_CHECKING), and no private name (``_x``) imported
from another file."""

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
# own layer or a lower one.
LAYERS = [("config", "records", "files", "version", "schedule"), ("features",), ("sources",),
          ("model",), ("run",), ("analysis",), ("report",), ("in_memory",), ("live",),
          ("integrations", "cli", "__init__")]


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = "__init__" if len(parts) == 1 else parts[1]
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_every_module_is_in_a_layer_and_imports_point_down():
    edges, _ = graph()
    upward = [f"{a} -> {b}" for a, targets in edges.items() for b in targets
              if layer_of(b) > layer_of(a)]
    assert upward == []
