"""Did a rerun reproduce a results folder? Two folders' numbers, compared number by number,
and the conclusions they support.

Pure: the trees come in already loaded (a :class:`ResultsContent`, which
:func:`toposig.run.compare_folders.load_results_folder` reads from a folder), a
:class:`Comparison` goes out. The rules (what is compared, how, and why the default
tolerances are what they are) are :mod:`toposig.analysis.comparison`'s; the conclusions
:mod:`toposig.analysis.conclusions`'; this module walks the trees, the documents and
whole folders.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from toposig.analysis.comparison import (
    ATOL_PER_RTOL,
    DEFAULT_TOLERANCES,
    EXACT_KEYS,
    IGNORED_KEYS,
    IGNORED_PATHS,
    IGNORED_SUFFIXES,
    KINDS,
    Comparison,
    ConclusionChange,
    Coverage,
    Difference,
    MethodAgreement,
    Tolerances,
    classify,
    is_ignored,
    is_nan,
)
from toposig.analysis.conclusions import (
    compare_backtests,
    compare_conclusions,
    is_backtest_table,
)

__all__ = [
    "IGNORED_KEYS", "IGNORED_SUFFIXES", "IGNORED_PATHS", "EXACT_KEYS", "KINDS", "ATOL_PER_RTOL",
    "Tolerances", "Difference", "ConclusionChange", "MethodAgreement", "Coverage",
    "Comparison", "ResultsContent", "classify", "is_ignored", "compare_trees",
    "compare_conclusions", "compare_backtests", "compare_documents", "compare_results",
    "is_backtest_table", "document_problem",
]


# --- tree comparison -------------------------------------------------------------------------
def _leaf(out: Comparison, source: str, path: str, kind: str, a: object, b: object) -> None:
    tol = out.tolerances
    out.compared[kind] += 1
    out.compared_by_source[source] += 1
    if a == b or (is_nan(a) and is_nan(b)):
        return
    rule = tol.describe(kind)
    if kind in ("exact", "decision"):
        out.differences.append(Difference(path, kind, a, b, rule, math.inf, severity=1))
        return
    if a is None or b is None or is_nan(a) or is_nan(b):
        out.differences.append(Difference(path, kind, a, b, rule, math.inf,
                                          "defined on one side only"))
        return
    if math.isinf(a) or math.isinf(b):  # unequal: no tolerance relative to an infinity
        out.differences.append(Difference(
            path, kind, a, b, rule, math.inf, "infinities of opposite signs"
            if math.isinf(a) and math.isinf(b) else "infinite on one side only"))
        return
    if kind == "p-value":
        if (a < tol.alpha) != (b < tol.alpha):
            out.differences.append(Difference(path, kind, a, b, rule, math.inf,
                                              "significance at alpha flips", severity=1))
        return
    delta = abs(a - b)
    scale = max(abs(a), abs(b))
    if kind == "count":
        allowed = max(tol.count_tol, tol.count_rtol * scale)
    elif kind == "correlation":
        allowed = tol.corr_tol
    elif kind == "discontinuous":
        allowed = tol.atol + tol.disc_rtol * scale
    else:
        allowed = tol.atol + tol.rtol * scale
    if delta > allowed:
        excess = delta / allowed if allowed > 0 else math.inf
        rel = f"relative {delta / scale:.3g}" if scale > 0 else ""
        out.differences.append(Difference(path, kind, a, b, rule, excess, rel))


def _list_key(items: Sequence[object]) -> tuple[str, ...] | None:
    """Fields that name the dicts of a list (matched by name rather than position)."""
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for keys in (("name",), ("model", "fraction", "method"), ("model", "fraction"),
                 ("step_from", "step_to"), ("model_label", "step")):
        if all(all(k in x and isinstance(x[k], (str, int, float, type(None)))
                   for k in keys) for x in items):
            names = [tuple(x[k] for k in keys) for x in items]
            if len(set(map(repr, names))) == len(names):
                return keys
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def compare_trees(a: object, b: object, path: str = "", *, out: Comparison | None = None,
                  source: str = "", key: str | None = None, parent: str | None = None,
                  exact: bool = False) -> Comparison:
    """Compare two JSON-like trees (dicts, lists, numbers, strings) leaf by leaf, each leaf
    under the rule of its kind (:func:`classify`), skipping what :func:`is_ignored`
    says is not a result. Lists of named dicts (``name``; ``model``/``fraction``/
    ``method``; ``step_from``/``step_to``) are matched by name, other lists by position
    (a length that differs is a ``structure`` difference). Adds to ``out`` (a new
    :class:`Comparison` if none) and returns it."""
    out = Comparison() if out is None else out
    source = source or path.split(".", 1)[0].split("/", 1)[0] or "tree"
    if isinstance(a, dict) and isinstance(b, dict):
        sub_exact = exact or (key is not None and (
            key == "settings" or key.endswith("_settings") or key == "training_suite"))
        for k in [*a, *(k for k in b if k not in a)]:
            kp = _join(path, str(k))
            if is_ignored(str(k), kp, out.ignore):
                out.ignored += 1
                continue
            if k not in a or k not in b:
                present = a.get(k) if k in a else b.get(k)
                out.differences.append(Difference(
                    kp, "missing", "present" if k in a else None,
                    "present" if k in b else None, out.tolerances.describe("missing"),
                    math.inf, f"the key is only in {'A' if k in a else 'B'}, where it is "
                    f"{_brief(present)!r}", severity=3))
                continue
            compare_trees(a[k], b[k], kp, out=out, source=source, key=str(k), parent=key,
                          exact=sub_exact)
        return out
    if isinstance(a, list) and isinstance(b, list):
        names = _list_key(a) if _list_key(b) == _list_key(a) else None
        if names:
            ma = {tuple(x[k] for k in names): x for x in a}
            mb = {tuple(x[k] for k in names): x for x in b}
            for n in [*ma, *(n for n in mb if n not in ma)]:
                label = ", ".join(map(str, n))
                np_ = f"{path}[{label}]"
                if n not in ma or n not in mb:
                    out.differences.append(Difference(
                        np_, "missing", "present" if n in ma else None,
                        "present" if n in mb else None, out.tolerances.describe("missing"),
                        math.inf, f"only in {'A' if n in ma else 'B'}", severity=0))
                    continue
                compare_trees(ma[n], mb[n], np_, out=out, source=source, key=key,
                              parent=parent, exact=exact)
            return out
        if len(a) != len(b):
            out.differences.append(Difference(
                path, "structure", f"{len(a)} items", f"{len(b)} items",
                out.tolerances.describe("structure"), math.inf, severity=3))
            return out
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            compare_trees(x, y, f"{path}[{i}]", out=out, source=source, key=key,
                          parent=parent, exact=exact)
        return out
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        out.differences.append(Difference(
            path, "structure", _brief(a), _brief(b), out.tolerances.describe("structure"),
            math.inf, severity=3))
        return out
    _leaf(out, source, path, classify(key, parent, a, b, exact, path), a, b)
    return out


def _brief(v: object) -> object:
    if isinstance(v, dict):
        return f"{{{len(v)} keys}}"
    if isinstance(v, list):
        return f"[{len(v)} items]"
    return v





# --- damaged input -----------------------------------------------------------------------------
_FLOAT_BITS = 1024  # an integer of more bits than this is beyond every float


def _shape_problem(doc: Mapping) -> str | None:
    """What is wrong with the sections compare reads by shape: ``controlled`` (a
    ``statistics.json``) and ``rows``/``decisions`` (a backtest table)."""
    if "controlled" in doc and doc["controlled"] is not None:
        c = doc["controlled"]
        if not isinstance(c, dict):
            return f"its controlled section is a {type(c).__name__}, not an object"
        if not (isinstance(c.get("controls", []), list)
                and all(isinstance(x, str) for x in c.get("controls", []))):
            return "its controlled.controls is not a list of names"
        scopes = [("pooled", c.get("pooled") or {})]
        per_model = c.get("per_model") or {}
        if not isinstance(per_model, dict):
            return "its controlled.per_model is not an object"
        scopes += [(f"per_model.{m}", v) for m, v in per_model.items()]
        for where, scope in scopes:
            if not isinstance(scope, dict):
                return f"its controlled.{where} is not an object"
            for feature, entry in scope.items():
                if entry is not None and not isinstance(entry, dict):
                    return f"its controlled.{where}.{feature} is not an object"
                flags = (entry or {}).get("significant")
                if flags is not None and not isinstance(flags, dict):
                    return f"its controlled.{where}.{feature}.significant is not an object"
    for key, fields in _TABLE_FIELDS.items():
        if key not in doc:
            continue
        if not (isinstance(doc[key], list) and all(isinstance(r, dict) for r in doc[key])):
            return f"its {key} is not a list of objects"
        for i, r in enumerate(doc[key]):
            for name, kinds in fields.items():
                v = r.get(name)
                if isinstance(v, bool) or not isinstance(v, kinds):
                    return (f"its {key}[{i}].{name} is a {type(v).__name__}, not "
                            f"{_KIND_NAMES[kinds]}")
    return None


# The fields of a backtest table compare reads by value, and what each must be.
_TEXT, _NUMBER = (str, type(None)), (int, float, type(None))
_KIND_NAMES = {_TEXT: "text", _NUMBER: "a number"}
_TABLE_FIELDS = {
    "rows": {"model": _TEXT, "method": _TEXT, "fraction": _NUMBER, "forecast": _NUMBER,
             "final": _NUMBER, "low": _NUMBER, "high": _NUMBER},
    "decisions": {"model": _TEXT, "fraction": _NUMBER, "action": _TEXT},
}


def document_problem(doc: object) -> str | None:
    """Why a JSON document cannot be compared, or ``None``: an integer beyond every float
    (named by its path and digit count), or a section compare reads by shape that has
    another (``controlled`` of a ``statistics.json``; ``rows``/``decisions`` of a backtest
    table). The walk is iterative: any depth the JSON parser accepted is fine."""
    stack: list[tuple[str, object]] = [("", doc)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > _FLOAT_BITS:
            return (f"holds an integer of {len(str(abs(v)))} digits at {path or 'the top'}, "
                    "beyond any floating-point number")
        if isinstance(v, dict):
            stack += [(_join(path, str(k)), x) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(f"{path}[{i}]", x) for i, x in enumerate(v)]
    return _shape_problem(doc) if isinstance(doc, Mapping) else None


# --- whole folders --------------------------------------------------------------------------------
def _step_name(step: object) -> str:
    return f"step{step:06d}" if isinstance(step, int) and not isinstance(step, bool) \
        else f"step{step}"


def _keyed_entries(entries: Sequence[dict]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for i, e in enumerate(entries):
        key: tuple = (str(e.get("model_label", f"entry{i}")), _step_name(e.get("step")))
        while key in out:  # a duplicate entry: compared with the other side's duplicate
            key = (*key, "dup")
        out[key] = e
    return out


def _matched(out: Comparison, source: str, ka: Iterable, kb: Iterable,
             where: Callable[[object], str]) -> list:
    """The keys on both sides, in A's order; one-sided keys recorded as ``missing``;
    keys whose path the caller ignores (``out.ignore``) left out."""
    la, lb = list(ka), list(kb)
    if out.ignore:
        keep = [k for k in la if not any(fnmatchcase(where(k), p) for p in out.ignore)]
        keep_b = [k for k in lb if not any(fnmatchcase(where(k), p) for p in out.ignore)]
        out.ignored += len(la) - len(keep) + len(lb) - len(keep_b)
        la, lb = keep, keep_b
    sa, sb = set(la), set(lb)
    only_a = [k for k in la if k not in sb]
    only_b = [k for k in lb if k not in sa]
    both = [k for k in la if k in sb]
    out.coverage[source] = Coverage(len(both), len(only_a), len(only_b))
    for k, side in [*((k, "A") for k in only_a), *((k, "B") for k in only_b)]:
        out.differences.append(Difference(
            where(k), "missing", "present" if side == "A" else None,
            "present" if side == "B" else None, out.tolerances.describe("missing"),
            math.inf, f"only in {side}", severity=0))
    return both


def _stem(name: str) -> str:
    return name[:-5] if name.endswith(".json") else name


def compare_documents(a: object, b: object, name: str, tol: Tolerances = DEFAULT_TOLERANCES,
                      out: Comparison | None = None, ignore: Sequence[str] = ()
                      ) -> Comparison:
    """Compare two JSON documents: number by number (:func:`compare_trees`, paths
    starting with ``name``), and by their conclusions when they have any: the
    significance decisions of a ``statistics.json`` (one with ``controlled``) and the
    MAEs, best methods and stop-rule actions of a backtest table. A document that is a
    backtest table on one side only is a conclusion change. ``ignore``: path patterns
    (``fnmatch``) to skip besides :data:`IGNORED_KEYS` and the like."""
    out = Comparison(tolerances=tol, ignore=tuple(ignore)) if out is None else out
    compare_trees(a, b, name, out=out, source=name)
    if isinstance(a, dict) and isinstance(b, dict) and ("controlled" in a or "controlled" in b):
        n, changes = compare_conclusions(a, b, tol.alpha, prefix=name)
        out.conclusions_compared += n
        out.conclusion_changes.extend(changes)
    bt_a, bt_b = is_backtest_table(a), is_backtest_table(b)
    if bt_a and bt_b:
        agreements, changes, n = compare_backtests(a, b, tol, name)
        out.backtest.extend(agreements)
        out.conclusions_compared += n
        out.conclusion_changes.extend(changes)
    elif bt_a or bt_b:
        out.conclusions_compared += 1
        out.conclusion_changes.append(ConclusionChange(
            name, "missing", "backtest table" if bt_a else "not a backtest table",
            "backtest table" if bt_b else "not a backtest table"))
    return out


@dataclass
class ResultsContent:
    """One results folder, loaded: what :func:`compare_results` compares
    (:func:`toposig.run.compare_folders.load_results_folder` reads it from disk).

    ``records``: ``(settings-hash folder, model label, checkpoint name) -> record``;
    ``aggregates``: the entries of ``data/all_results.json`` (``None`` without the
    file); ``statistics``, ``config``: ``data/statistics.json``, ``data/config.json``
    (``None`` without); ``other``: every other JSON file, by its path relative to the
    folder (``data/backtest.json``; the per-model ``data/<label>_results.json`` copies of
    the aggregates excepted), backtest tables among them; ``files``: the relative paths
    of every JSON file of ``data/`` and of the folder's top level.
    """

    records: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    aggregates: list[dict] | None = None
    statistics: dict | None = None
    config: dict | None = None
    other: dict[str, object] = field(default_factory=dict)
    files: frozenset[str] = frozenset()


def compare_results(a: ResultsContent, b: ResultsContent, tol: Tolerances = DEFAULT_TOLERANCES,
                    ignore: Sequence[str] = ()) -> Comparison:
    """Compare two loaded results folders.

    Number by number: which JSON files each has (``data/*.json`` and any at the top),
    every record matched by (settings-hash folder, model, checkpoint), every aggregate
    entry of ``all_results.json`` matched by (model label, step), ``statistics.json``,
    ``config.json`` and every other JSON file both have (a backtest table among them).
    By conclusions: the significance decisions of the two ``statistics.json``
    (:func:`compare_conclusions`) and the backtest tables (:func:`compare_backtests`).
    Per-model ``<label>_results.json`` files are checked for presence only (they repeat
    ``all_results.json``); ``.npz`` diagrams are not compared (their summaries are the
    record features); a record, entry or file on one side only is a ``missing``
    difference. ``ignore``: path patterns (``fnmatch``, e.g. ``*.ridge*`` or
    ``records/l*``) to skip besides :data:`IGNORED_KEYS` and the like."""
    out = Comparison(tolerances=tol, ignore=tuple(ignore))
    _matched(out, "files", sorted(a.files), sorted(b.files), str)
    for key in _matched(out, "records", sorted(a.records), sorted(b.records),
                        lambda k: "records/" + "/".join(k)):
        compare_trees(a.records[key], b.records[key], "records/" + "/".join(key), out=out,
                      source="records")
    if a.aggregates is not None and b.aggregates is not None:
        ea, eb = _keyed_entries(a.aggregates), _keyed_entries(b.aggregates)
        for key in _matched(out, "all_results", ea, eb,
                            lambda k: "all_results/" + "/".join(k)):
            compare_trees(ea[key], eb[key], "all_results/" + "/".join(key), out=out,
                          source="all_results")
    if a.statistics is not None and b.statistics is not None:
        compare_documents(a.statistics, b.statistics, "statistics", tol, out)
    if a.config is not None and b.config is not None:
        compare_trees(a.config, b.config, "config", out=out, source="config")
    for name in [n for n in a.other if n in b.other]:
        compare_documents(a.other[name], b.other[name], _stem(name), tol, out)
    for name in [*(n for n in a.other if n not in b.other),
                 *(n for n in b.other if n not in a.other)]:
        doc = a.other.get(name, b.other.get(name))
        if is_backtest_table(doc):
            out.conclusions_compared += 1
            out.conclusion_changes.append(ConclusionChange(
                _stem(name), "missing", "backtest table" if name in a.other else "absent",
                "backtest table" if name in b.other else "absent"))
    return out
