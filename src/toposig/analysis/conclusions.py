"""Whether two results folders support the same conclusions: for every feature, model and
control the decision ``statistics.json`` states, and for backtest tables each method's
error, the best method and the stop rule's action (:mod:`toposig.analysis.comparison` has
the rules; :func:`toposig.analysis.compare.compare_results` asks these)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from toposig.analysis.comparison import (
    CONTROL_TESTS,
    DEFAULT_TOLERANCES,
    ConclusionChange,
    MethodAgreement,
    Tolerances,
    is_nan,
)


# --- conclusions ------------------------------------------------------------------------------
def _sign(r: object) -> str:
    if not isinstance(r, (int, float)) or isinstance(r, bool) or is_nan(r) or r == 0:
        return "?"
    return "+" if r > 0 else "-"


def _in_words(flag: bool | None, r: object) -> str:
    if flag is None:
        return "not applicable"
    if not flag:
        return "not significant"
    return "significant" if r is None else f"significant ({_sign(r)})"


def _decisions(entry: object, control: str, alpha: float) -> tuple[str, str]:
    """One entry's conclusion under one control, in words (``significant (+)``,
    ``significant (-)``, ``not significant``, ``not applicable``; ``absent`` without the
    entry or, when the entry states its decisions, without this one): as the file
    states it (its ``significant.<control>`` flag, derived when it has no flags at all)
    and as its Holm-adjusted p-value supports it (p < alpha, with the raw rho's sign
    where the project's rule asks for it; ``not applicable`` without a p-value)."""
    if not isinstance(entry, dict):
        return "absent", "absent"
    r_key, p_key, same_sign = CONTROL_TESTS.get(control, ("", "", False))
    r = entry.get(r_key) if r_key else None
    p = entry.get(p_key) if p_key else None
    derived: bool | None = None
    if isinstance(p, (int, float)) and not isinstance(p, bool) and not is_nan(p):
        derived = p < alpha and (not same_sign
                                 or _sign(r) == _sign(entry.get("spearman_r")) != "?")
    flags = entry.get("significant")
    if isinstance(flags, dict):
        stated = _in_words(flags[control], r) if control in flags else "absent"
    else:
        stated = _in_words(derived, r)
    return stated, _in_words(derived, r)


def _controls(stats: Mapping) -> list[str]:
    """The controls a ``statistics.json`` states decisions for, in its order."""
    c = stats.get("controlled") or {}
    names = list(c.get("controls") or [])
    for scope in (*(c.get("per_model") or {}).values(), c.get("pooled") or {}):
        for entry in scope.values():
            flags = entry.get("significant") if isinstance(entry, dict) else None
            if isinstance(flags, dict):
                names.extend(flags)
            break  # every entry of a file has the same flags
    return list(dict.fromkeys(names or CONTROL_TESTS))


def compare_conclusions(stats_a: Mapping | None, stats_b: Mapping | None,
                        alpha: float = 0.05, prefix: str = "statistics"
                        ) -> tuple[int, list[ConclusionChange]]:
    """Compare the significance decisions of two ``statistics.json``: for every feature,
    per model (``controlled.per_model.<model>.<feature>``) and pooled
    (``controlled.pooled.<feature>``), under every control either file states
    (``significant.<control>``: raw, partial on log step, first differences, beyond the
    baseline, and whatever later versions add): significant with which sign, not
    significant, or not applicable. A decision changes when the stated flags differ, or
    when the Holm-adjusted p-values support different decisions although the flags agree
    (a file edited by hand, or written by another version). A model, feature or control
    on one side only is a change (``what="missing"``).

    Returns:
        ``(number of decisions compared, the changes)``.
    """
    stats_a, stats_b = stats_a or {}, stats_b or {}
    ca, cb = stats_a.get("controlled") or {}, stats_b.get("controlled") or {}
    if not ca and not cb:
        return 0, []
    controls = list(dict.fromkeys([*_controls(stats_a), *_controls(stats_b)]))
    scopes: list[tuple[str, Mapping, Mapping]] = []
    pm_a, pm_b = ca.get("per_model") or {}, cb.get("per_model") or {}
    for m in [*pm_a, *(m for m in pm_b if m not in pm_a)]:
        scopes.append((f"per_model.{m}", pm_a.get(m) or {}, pm_b.get(m) or {}))
    scopes.append(("pooled", ca.get("pooled") or {}, cb.get("pooled") or {}))
    n, changes = 0, []
    for scope, fa, fb in scopes:
        for feature in [*fa, *(f for f in fb if f not in fa)]:
            ea, eb = fa.get(feature), fb.get(feature)
            for control in controls:
                n += 1
                (sa, pa), (sb, pb) = (_decisions(ea, control, alpha),
                                      _decisions(eb, control, alpha))
                path = f"{prefix}.controlled.{scope}.{feature}.significant.{control}"
                what = "missing" if "absent" in (sa, sb) else "significance"
                if sa != sb:
                    changes.append(ConclusionChange(path, what, sa, sb,
                                                    _detail(ea, eb, control)))
                elif pa != pb:
                    changes.append(ConclusionChange(
                        path, what, pa, pb, "by the Holm p-values (the stated flags agree): "
                        + _detail(ea, eb, control)))
    return n, changes


def _detail(ea: object, eb: object, control: str) -> str:
    r, p, _ = CONTROL_TESTS.get(control, ("", "", False))
    if not r:
        return ""
    parts = []
    for side, e in (("A", ea), ("B", eb)):
        if isinstance(e, dict):
            parts.append(f"{side}: {r}={_fmt(e.get(r))} {p}={_fmt(e.get(p))}")
    return "; ".join(parts)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# --- backtests ---------------------------------------------------------------------------------
def is_backtest_table(obj: object) -> bool:
    """Whether ``obj`` is a backtest table (``toposig backtest --json``): ``{"rows":
    [{model, fraction, method, forecast, final, ...}, ...], ...}``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("rows"), list) or not obj["rows"]:
        return False
    need = ("model", "fraction", "method", "forecast", "final")
    return all(isinstance(r, dict) and all(k in r for k in need) for r in obj["rows"])


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _method_errors(rows: Iterable[dict]
                   ) -> dict[tuple[float | None, str], tuple[float, float, int]]:
    """``(fraction, method) -> (MAE, its own error, number of forecasts)``; fraction
    ``None``: over every fraction (the table's ``summary``)."""
    groups: dict[tuple[float | None, str], list[dict]] = {}
    for r in rows:
        if _finite(r.get("forecast")) and _finite(r.get("final")) and _finite(r.get("fraction")):
            groups.setdefault((float(r["fraction"]), str(r["method"])), []).append(r)
            groups.setdefault((None, str(r["method"])), []).append(r)
    out = {}
    for key, rs in groups.items():
        errs = [abs(r["forecast"] - r["final"]) for r in rs]
        mae = sum(errs) / len(errs)
        if len(errs) > 1:  # the standard error of the mean absolute error
            err = math.sqrt(sum((e - mae) ** 2 for e in errs) / (len(errs) - 1) / len(errs))
        else:  # one forecast: its own 95% interval, as one standard error
            half = [(r["high"] - r["low"]) / 2 / 1.96 for r in rs
                    if _finite(r.get("low")) and _finite(r.get("high"))]
            err = half[0] if half else 0.0
        out[key] = (mae, err, len(errs))
    return out


def _frac(fraction: float | None) -> str:
    return "all" if fraction is None else f"{fraction:g}"


def compare_backtests(table_a: Mapping, table_b: Mapping, tol: Tolerances = DEFAULT_TOLERANCES,
                      name: str = "backtest") -> tuple[list[MethodAgreement],
                                                       list[ConclusionChange], int]:
    """Compare two backtest tables by the conclusions they support.

    - Per fraction of training (and over all fractions) and method: the MAE of its
      final-loss forecasts on both sides. They agree when ``|MAE_A - MAE_B|`` is within
      the larger of the two sides' own errors, the standard error of the MAE (the spread
      of the absolute errors over sqrt(n); for a single forecast, its 95% interval's
      half-width / 1.96), plus the continuous tolerance.
    - Per fraction (and over all): the best method, the one with the smallest MAE; a
      different best method is a change, noted as a near tie when the two best MAEs are
      within their own errors.
    - Per run and cutoff of ``decisions`` (the stop rule), the ``action`` taken.

    Returns:
        ``(per-method agreement, the conclusion changes, conclusions compared)``.
    """
    ma, mb = _method_errors(table_a.get("rows") or []), _method_errors(table_b.get("rows") or [])
    agreements: list[MethodAgreement] = []
    changes: list[ConclusionChange] = []
    for key in [*ma, *(k for k in mb if k not in ma)]:
        fraction, method = key
        a, b = ma.get(key), mb.get(key)
        where = f"{name}.mae[{_frac(fraction)}, {method}]"
        if a is None or b is None:
            agreements.append(MethodAgreement(
                name, fraction, method, a[0] if a else None, b[0] if b else None,
                a[1] if a else None, b[1] if b else None, a[2] if a else 0, b[2] if b else 0,
                False))
            changes.append(ConclusionChange(where, "missing", "present" if a else "absent",
                                            "present" if b else "absent"))
            continue
        allowed = max(a[1], b[1]) + tol.atol + tol.rtol * max(a[0], b[0])
        agree = abs(a[0] - b[0]) <= allowed
        agreements.append(MethodAgreement(name, fraction, method, a[0], b[0], a[1], b[1],
                                          a[2], b[2], agree))
        if not agree:
            changes.append(ConclusionChange(
                where, "backtest MAE", f"{a[0]:.4g} ± {a[1]:.2g}", f"{b[0]:.4g} ± {b[1]:.2g}",
                f"|Δ| = {abs(a[0] - b[0]):.3g} > {allowed:.3g}"))
    fractions = list(dict.fromkeys(f for f, _ in [*ma, *mb]))
    for fraction in fractions:
        best_a, best_b = _best(ma, fraction), _best(mb, fraction)
        if best_a and best_b and best_a[0] != best_b[0]:
            tie = abs(best_a[1] - best_b[1]) <= max(best_a[2], best_b[2])
            changes.append(ConclusionChange(
                f"{name}.best[{_frac(fraction)}]", "best method", best_a[0], best_b[0],
                f"MAE {best_a[1]:.4g} vs {best_b[1]:.4g}"
                + (" (within their own errors: a near tie)" if tie else "")))
    da = {(d.get("model"), d.get("fraction")): d.get("action")
          for d in table_a.get("decisions") or [] if isinstance(d, dict)}
    db = {(d.get("model"), d.get("fraction")): d.get("action")
          for d in table_b.get("decisions") or [] if isinstance(d, dict)}
    for key in [*da, *(k for k in db if k not in da)]:
        if da.get(key) != db.get(key):
            changes.append(ConclusionChange(
                f"{name}.decisions[{key[0]}, {_frac(key[1])}].action", "stop rule",
                str(da.get(key, "absent")), str(db.get(key, "absent"))))
    return agreements, changes, len(agreements) + len(fractions) + len({*da, *db})


def _best(m: Mapping[tuple[float | None, str], tuple[float, float, int]],
          fraction: float | None) -> tuple[str, float, float] | None:
    cands = [(mae, method, err) for (f, method), (mae, err, _) in m.items() if f == fraction]
    if not cands:
        return None
    mae, method, err = min(cands)
    return method, mae, err
