"""Did a rerun reproduce a results folder? Two folders' numbers, compared number by number.

Training is not bitwise reproducible across CPU models (float32 kernels round
differently), so a rerun of the quick start on another machine gives slightly different
numbers. This module says whether two results trees agree *within the noise that
rounding explains*, and separately whether the conclusions they support agree. It is
pure: the trees come in already loaded (a :class:`ResultsContent`, which
:func:`toposig.run.compare_folders.load_results_folder` reads from a folder), a
:class:`Comparison` goes out.

What is compared, and how (one rule per kind of number, :func:`classify`):

- **continuous** values (persistence, spectra, perplexity, losses, fits, MAEs):
  ``|a - b| <= atol + rtol * max(|a|, |b|)``.
- **discontinuous** values, continuous but not smooth functions of the weights: the
  statistics of a persistence diagram (``h*_mean_persistence``, ``..._std_...``,
  ``..._max_...``, ``..._total_...``, entropies, Wasserstein distances, the loss
  surface's merge tree), the bootstrap spreads (``features_resampled``) and what the
  statistics derive from them (``stability``, ``phases``):
  ``|a - b| <= atol + disc_rtol * max(|a|, |b|)``, ``disc_rtol = 50 * rtol`` unless given.
  A bar that rounding makes or removes moves a mean bar length by that bar's share (one
  of 40 bars: 2.6 % in the emulated rerun below).
- **count** values (persistence bar counts ``*_n_features``, ``*_n_significant``,
  ``*_count``, basins and saddles, ``n_*``, ``num_*`` and any JSON integer; and the
  bootstrap ``mean``/``std``/percentiles of a count): ``|a - b| <= max(count_tol,
  count_rtol * max(|a|, |b|))``.
- **correlation** coefficients (``*_r``, ``r2``, bootstrap ``ci_low``/``ci_high``):
  absolute, ``|a - b| <= corr_tol``: they are bounded and rank-based, so a change of one
  near-tied pair of checkpoints moves them by a fixed step whatever their size.
- **p-values** (``*_p``, Holm-adjusted ``*holm_p``): by the decision they support,
  ``p < alpha`` on both sides or on neither, never digit by digit.
- **decision** (booleans: ``significant.<control>``) and **exact** values (strings,
  identities such as ``step``, ``seed``, ``schema_version``, and every leaf under a
  ``settings`` block): equal.
- **missing**: a record, entry, file or key on one side only; **structure**: a list of
  another length, or a dict on one side and a number on the other. Always a difference.
- A number that is NaN or infinite agrees only with the same value (NaN with NaN,
  ``inf`` with ``inf``), whatever its kind: no tolerance is relative to an infinity.
- **ignored**: what is not a result (clocks, timings, hosts, devices, package versions,
  paths, content fingerprints): :data:`IGNORED_KEYS`, :data:`IGNORED_SUFFIXES` and
  :data:`IGNORED_PATHS`, the one place that lists them.

Why the default tolerances (:class:`Tolerances`) are what they are. What a rerun of the
quick start on another CPU model gives: float32 kernels round differently, training
amplifies that from about 1e-8 relative at step 0 to about 1e-5 by step 1,000 (README,
"How exactly does it reproduce?"); measured by the project on another host, perplexity
within 3.8e-6 relative, 20 of the 259 numeric values of a record beyond 1e-3 relative,
H1 bar counts within +-1. Measured again for this module by rerunning the whole quick
start (training included) with AVX2 instead of AVX-512 kernels (``ATEN_CPU_CAPABILITY=
avx2 MKL_ENABLE_INSTRUCTIONS=AVX2``, the way an older CPU rounds) and comparing it with
the committed reference: of 20,034 continuous values in the 216 records, the median
moved by 1.1e-7 relative, the 99th percentile by 1.2e-4, 248 by more than 1e-4 and 8 by
more than 1e-3 (bootstrap standard deviations over 20 resamples, and the mean and std
H1 bar of one weight matrix whose bar count changed); none of the 3,510 checkpoint
features moved by more than 6.8e-4; perplexity by at most 1.6e-6; 3 of 4,590 counts by
1; every one of 2,156 significance decisions the same. Beyond tolerance in
``statistics.json``: the leave-one-model-out ridge forecasts (an ill-conditioned fit on
three models, which the README already says changes with rounding), a few stability
ratios and phase slopes by up to 6x, and per-model Spearman rho by one rank swap.

- ``rtol = 1e-3``: 100x the typical amplified rounding (1e-5), above every checkpoint
  feature of the emulated rerun, and still catching any change a reader would see in
  the third digit. The values that are not smooth functions of the weights (a mean bar
  length when a bar appears, a bootstrap spread, an ill-conditioned fit) can move
  beyond it across CPUs; they are listed, grouped by key, and whether they change
  anything is what the conclusions comparison answers.
- ``atol = rtol * 1e-3 = 1e-6``: a floor for values near 0 (a basin's height 0.0 against
  3e-7, a tiny basin or H1 bar that rounding makes on one side). The values here are
  sums and differences of float32 numbers of order 0.01-100 (losses of a few nats whose
  round-off is about 3e-7); the smallest nonzero continuous values of the reference run
  are about 1e-4, so the floor only acts on values that are zero or rounding-sized. It
  follows ``rtol`` unless given, so ``rtol = 1e-9`` alone makes a tight comparison.
- ``count_tol = 1``, ``count_rtol = 0.01``: a bar whose length is at the rounding level
  (a near-zero H1 bar, a near-tie at the median for ``n_significant``) appears on one
  side only, so counts differ by +-1 across CPUs; sums over many matrices
  (``weight_h1_count``) may gather several, hence the 1% share of large counts. +5 on a
  count of ~100 is beyond both.
- ``corr_tol = 0.04``: a near-tied pair of checkpoints whose order rounding swaps moves a
  Spearman rho by at most 12/(n^2 - 1), 0.037 with the quick start's 18 checkpoints per
  model (0.004 pooled over 54); the emulated rerun moved four per-model rho by 0.021 and
  one bootstrap CI end by 0.030. Tables print correlations to two or three decimals.
- ``alpha = 0.05``: the level of the project's tests (``controlled.alpha``).

The **conclusions** (:func:`compare_conclusions`): for every feature, per model and
pooled, and every control of ``statistics.json`` → ``controlled`` (raw, partial on log
step, first differences, beyond the baseline), the decision the study states:
significant with a positive or a negative correlation, not significant, or not
applicable. The decision is the stored ``significant.<control>`` flag (Holm-adjusted
p < alpha with the same sign as the raw rho); where a file has no flag, it is derived by
that rule. And for backtest tables (a JSON ``{"rows": [{model, fraction, method,
forecast, low, high, final}], "decisions": [...]}`` as ``toposig backtest`` writes,
:func:`compare_backtests`): whether each method's MAE agrees within its own error (its
standard error), whether the best method at each fraction is the same, and whether the
stop rule takes the same action at each cutoff.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase

from toposig.families.base import Kind
from toposig.families.registry import kind_of

__all__ = [
    "IGNORED_KEYS", "IGNORED_SUFFIXES", "IGNORED_PATHS", "EXACT_KEYS", "KINDS", "ATOL_PER_RTOL",
    "Tolerances", "Difference", "ConclusionChange", "MethodAgreement", "Coverage",
    "Comparison", "ResultsContent", "classify", "is_ignored", "compare_trees",
    "compare_conclusions", "compare_backtests", "compare_documents", "compare_results",
    "is_backtest_table", "document_problem",
]

# --- what is not a result: the one list --------------------------------------------------
IGNORED_KEYS: frozenset[str] = frozenset({
    # clocks and timings
    "timings_s", "finished_at", "started_at", "created_at", "wall_s", "last_run",
    # where and with what it ran
    "host", "hostname", "platform", "device", "device_name", "python", "packages",
    "torch", "ph_backend", "batch_size",
    # paths and fingerprints of the inputs (checkpoints are matched by label and step)
    "location", "arrays_file", "path", "records_sha256", "checkpoint_fingerprint",
    "fingerprint",
})
"""Keys skipped wherever they occur, with everything under them."""

IGNORED_SUFFIXES: tuple[str, ...] = ("_time_s", "_seconds", "_fingerprint", "_path")
"""Key endings skipped wherever they occur."""

IGNORED_PATHS: tuple[str, ...] = (
    "records/*.model",            # the model as given: a path here, another path there
    "all_results/*.model",
    "statistics.models.*.model",
    "config.models.*",            # label -> path as given
    "*.lanczos.residuals",        # the eigensolver's diagnostics, not results
    "*.lanczos.n_hvp",
)
"""Paths skipped (``fnmatch`` patterns on the dotted paths of :class:`Difference`)."""

EXACT_KEYS: frozenset[str] = frozenset({
    "schema_version", "seed", "step", "steps", "final_step", "checkpoint_steps",
    "num_parameters", "num_layers", "hidden_size", "layer", "shape", "trace_samples",
    "settings_hash", "status", "model_label", "family", "families",
})
"""Integer identities compared exactly (other integers are counts). Every leaf under a
``settings`` block (``settings``, ``*_settings``, ``training_suite``) is exact too."""

KINDS = ("continuous", "discontinuous", "count", "correlation", "p-value", "decision",
         "exact", "missing", "structure")
# Values that are not smooth functions of the weights: a statistic of a persistence
# diagram changes by a bar's share when rounding makes or removes a bar; a bootstrap
# spread, a stability ratio or a phase fit's slope follows such values. A feature a family
# declares says its own kind (toposig.families.registry.kind_of); these patterns are for
# the names no family declares (an imported table's, the statistics' distances).
_DISCONTINUOUS_KEY = re.compile(r"(^|_)h\d_(total|mean|std|max|min)_persistence(_scaled)?$"
                                r"|persistence_entropy|_wasserstein|^landscape_")
_MATRICES = re.compile(r"\.matrices\[")  # a weight matrix's values in a record
_KIND_WORDS = {Kind.COUNT: "count", Kind.CONTINUOUS: "continuous",
               Kind.DISCONTINUOUS: "discontinuous"}
_DISCONTINUOUS_PATH = ("features_resampled", "statistics.stability.", "statistics.phases.",
                       "statistics.wasserstein", "statistics.weight_wasserstein")

_CORRELATION_KEYS = frozenset({"r", "rho", "r2", "ci_low", "ci_high"})
_SUMMARY_LEAVES = frozenset({"mean", "std", "median", "min", "max", "p2_5", "p97_5",
                             "p5", "p95", "low", "high"})
# control -> (its correlation, its Holm-adjusted p, whether significance needs the raw
# rho's sign): the project's rule (toposig.analysis.controls), to derive a decision where
# a file states none and to check the stated one against its p-value
_CONTROL_TESTS: dict[str, tuple[str, str, bool]] = {
    "raw": ("spearman_r", "holm_p", False),
    "partial_log_step": ("partial_r", "partial_holm_p", True),
    "first_differences": ("diff_r", "diff_holm_p", True),
    "beyond_baseline": ("beyond_r", "beyond_holm_p", True),
    "detrended": ("detrended_r", "detrended_holm_p", False),
    "partial_first_differences": ("pfd_r", "pfd_holm_p", False),
}


ATOL_PER_RTOL = 1e-3
"""Without an explicit ``atol``, the floor is ``rtol * ATOL_PER_RTOL``: a value smaller
than 1e-3 in magnitude is held to the precision ``rtol`` gives a value of 1e-3, so a
tighter ``rtol`` tightens the floor too."""


DISC_PER_RTOL = 50.0
"""The tolerance of discontinuous values, as a multiple of ``rtol`` (5e-2 by default)."""

@dataclass(frozen=True)
class Tolerances:
    """How far two numbers may differ and still agree (module docstring: why these).
    ``atol=None`` means ``rtol * ATOL_PER_RTOL`` (1e-6 with the default ``rtol``)."""

    rtol: float = 1e-3
    atol: float | None = None
    count_tol: float = 1.0
    count_rtol: float = 0.01
    corr_tol: float = 0.04
    alpha: float = 0.05
    disc_rtol: float | None = None

    def __post_init__(self) -> None:
        if self.atol is None and isinstance(self.rtol, (int, float)):
            object.__setattr__(self, "atol", self.rtol * ATOL_PER_RTOL)
        if self.disc_rtol is None and isinstance(self.rtol, (int, float)):
            object.__setattr__(self, "disc_rtol", self.rtol * DISC_PER_RTOL)
        for name in ("rtol", "atol", "count_tol", "count_rtol", "corr_tol", "disc_rtol"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v)
                                           and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {v!r}")
        if isinstance(self.alpha, bool) or not (isinstance(self.alpha, (int, float))
                                                and 0 < self.alpha < 1):
            raise ValueError(f"alpha must lie in (0, 1), not {self.alpha!r}")

    def describe(self, kind: str) -> str:
        """The rule for ``kind`` in words."""
        return {
            "continuous": f"|Δ| <= {self.atol:g} + {self.rtol:g}·max(|a|,|b|)",
            "discontinuous": f"|Δ| <= {self.atol:g} + {self.disc_rtol:g}·max(|a|,|b|)",
            "count": f"|Δ| <= max({self.count_tol:g}, {self.count_rtol:g}·max(|a|,|b|))",
            "correlation": f"|Δ| <= {self.corr_tol:g}",
            "p-value": f"same decision at p < {self.alpha:g}",
            "decision": "equal",
            "exact": "equal",
            "missing": "present on both sides",
            "structure": "same shape on both sides",
        }[kind]


SEVERITY = {0: "a record, entry or file on one side only",
            1: "a decision, p-value decision or exact value that changed",
            2: "a number beyond its tolerance",
            3: "a key on one side only, or a value of another shape"}
"""How serious each :class:`Difference` is: the order in which they are listed (then by
how far beyond the tolerance). Keys on one side only come last: they usually mean that
the two folders were written by different versions, which the first of them shows."""


@dataclass(frozen=True)
class Difference:
    """One number (or key, record, file) that differs beyond its tolerance.

    ``path``: where (``records/<hash>/<model>/step000100.features.h1_n_features``,
    ``all_results/<model>/step000100...``, ``statistics.controlled.pooled.np_mean.diff_r``);
    ``a``, ``b``: the two values (``None`` where absent); ``kind``: one of :data:`KINDS`;
    ``tolerance``: the rule that was exceeded; ``excess``: ``|a - b|`` over what the rule
    allows (``inf`` for decisions, missing values and the like); ``note``: anything else
    worth saying; ``severity``: see :data:`SEVERITY`.
    """

    path: str
    kind: str
    a: object
    b: object
    tolerance: str
    excess: float
    note: str = ""
    severity: int = 2

    @property
    def field(self) -> str:
        """The last key of the path, without list positions (what to group by)."""
        last = re.split(r"[./]", self.path)[-1]
        return re.sub(r"\[.*?\]", "", last) or self.path


@dataclass(frozen=True)
class ConclusionChange:
    """A conclusion that differs: ``what`` is ``significance``, ``backtest MAE``,
    ``best method`` or ``missing``; ``a``/``b`` the conclusion on each side in words."""

    path: str
    what: str
    a: str
    b: str
    detail: str = ""


@dataclass(frozen=True)
class MethodAgreement:
    """One method's backtest MAE at one fraction of training (``None``: over all of
    them), on both sides, with its own error (the standard error of the MAE) and the
    number of forecasts, and whether the two agree within that error."""

    table: str
    fraction: float | None
    method: str
    mae_a: float | None
    mae_b: float | None
    err_a: float | None
    err_b: float | None
    n_a: int
    n_b: int
    agree: bool


@dataclass(frozen=True)
class Coverage:
    """How many items of one source (records, aggregate entries, files) both sides have."""

    matched: int = 0
    only_a: int = 0
    only_b: int = 0


@dataclass
class Comparison:
    """Everything :func:`compare_results` found.

    ``compared``: per kind, how many values were compared; ``compared_by_source`` the
    same per source (``records``, ``all_results``, ``statistics``, ``config``, other
    files); ``ignored``: how many keys were skipped (:data:`IGNORED_KEYS`);
    ``coverage``: matched and one-sided records, entries and files; ``differences``:
    beyond tolerance; ``conclusions_compared`` / ``conclusion_changes``: the
    significance decisions and backtest conclusions; ``backtest``: each method's MAE
    on both sides.
    """

    tolerances: Tolerances = field(default_factory=Tolerances)
    ignore: tuple[str, ...] = ()
    compared: Counter = field(default_factory=Counter)
    compared_by_source: Counter = field(default_factory=Counter)
    ignored: int = 0
    coverage: dict[str, Coverage] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)
    conclusions_compared: int = 0
    conclusion_changes: list[ConclusionChange] = field(default_factory=list)
    backtest: list[MethodAgreement] = field(default_factory=list)

    @property
    def numbers_agree(self) -> bool:
        return not self.differences

    @property
    def conclusions_agree(self) -> bool:
        return not self.conclusion_changes

    @property
    def agree(self) -> bool:
        """Everything within tolerance and every conclusion the same."""
        return self.numbers_agree and self.conclusions_agree

    def worst(self, n: int | None = None) -> list[Difference]:
        """The differences, worst first (by :data:`SEVERITY`, then by how far beyond
        their tolerance), at most ``n``."""
        ranked = sorted(self.differences, key=lambda d: (d.severity, -d.excess))
        return ranked if n is None else ranked[:n]

    def by_field(self) -> list[tuple[str, str, str, int, float]]:
        """The differences grouped by ``(source, kind, field)`` (the path's last key),
        the largest groups first: ``(source, kind, field, count, largest excess)``."""
        groups: dict[tuple[str, str, str], list[float]] = {}
        for d in self.differences:
            source = re.split(r"[./]", d.path, maxsplit=1)[0]
            key = d.field if d.severity else "(on one side only)"
            groups.setdefault((source, d.kind, key), []).append(d.excess)
        return sorted(((*k, len(v), max(v)) for k, v in groups.items()),
                      key=lambda g: (-g[3], g[0], g[2]))

    def to_dict(self) -> dict:
        """Plain JSON-able dict of the whole comparison."""
        return {
            "numbers_agree": self.numbers_agree,
            "conclusions_agree": self.conclusions_agree,
            "tolerances": asdict(self.tolerances),
            "rules": {k: self.tolerances.describe(k) for k in KINDS},
            "ignored_keys": sorted(IGNORED_KEYS),
            "ignored_suffixes": list(IGNORED_SUFFIXES),
            "ignored_paths": list(IGNORED_PATHS),
            "ignored_by_caller": list(self.ignore),
            "compared": dict(self.compared),
            "compared_by_source": dict(self.compared_by_source),
            "ignored": self.ignored,
            "coverage": {k: asdict(v) for k, v in self.coverage.items()},
            "n_differences": len(self.differences),
            "differences_by_field": [
                {"source": g[0], "kind": g[1], "field": g[2], "count": g[3],
                 "largest_excess": None if math.isinf(g[4]) else g[4]}
                for g in self.by_field()],
            "differences": [_jsonable(asdict(d)) for d in self.worst()],
            "conclusions_compared": self.conclusions_compared,
            "conclusion_changes": [asdict(c) for c in self.conclusion_changes],
            "backtest": [_jsonable(asdict(m)) for m in self.backtest],
        }


# --- classification ------------------------------------------------------------------------
def is_ignored(key: str, path: str, extra: Sequence[str] = ()) -> bool:
    """Whether the value under ``key`` at ``path`` is not a result (and is skipped):
    :data:`IGNORED_KEYS`, :data:`IGNORED_SUFFIXES`, :data:`IGNORED_PATHS`, and the
    caller's own ``extra`` path patterns."""
    return (key in IGNORED_KEYS or key.endswith(IGNORED_SUFFIXES)
            or any(fnmatchcase(path, p) for p in (*IGNORED_PATHS, *extra)))


def _is_count_key(key: str) -> bool:
    return (key == "n" or key.startswith(("n_", "num_")) or "_n_" in key
            or key.endswith(("_n", "_count")))


def _is_p_key(key: str) -> bool:
    return key in ("p", "p_value", "pvalue") or key.endswith(("_p", "_pvalue"))


def _is_correlation_key(key: str) -> bool:
    return key in _CORRELATION_KEYS or key.endswith(("_r", "_rho"))


def classify(key: str | None, parent: str | None, a: object, b: object,
             exact: bool = False, path: str = "") -> str:
    """The kind of a leaf (one of :data:`KINDS` but ``missing``/``structure``) by its key,
    its parent's key (the bootstrap ``mean`` of a count is a count), its path (what lies
    under ``features_resampled`` or the statistics' ``stability`` and ``phases`` is
    discontinuous) and its values."""
    if isinstance(a, bool) or isinstance(b, bool):
        return "decision"
    numeric = all(isinstance(v, (int, float)) or v is None for v in (a, b))
    if exact or not numeric or (a is None and b is None):
        return "exact"
    k = key or ""
    if k in EXACT_KEYS:
        return "exact"
    if _is_p_key(k):
        return "p-value"
    if _is_correlation_key(k):
        return "correlation"
    if k in _SUMMARY_LEAVES and parent and (kind_of(parent) == Kind.COUNT
                                            or _is_count_key(parent)):
        return "count"  # the bootstrap mean or spread of a count
    declared = kind_of(k, matrix=_MATRICES.search(path) is not None)
    if declared is not None:  # a feature: the kind its family declares
        if declared == Kind.COUNT:
            return "count"
        if any(part in path for part in _DISCONTINUOUS_PATH):
            return "discontinuous"
        return _KIND_WORDS[declared]
    if _is_count_key(k):
        return "count"
    if isinstance(a, int) and isinstance(b, int):
        return "count"
    if _DISCONTINUOUS_KEY.search(k) or any(part in path for part in _DISCONTINUOUS_PATH):
        return "discontinuous"
    return "continuous"


# --- tree comparison -------------------------------------------------------------------------
def _isnan(v: object) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _leaf(out: Comparison, source: str, path: str, kind: str, a: object, b: object) -> None:
    tol = out.tolerances
    out.compared[kind] += 1
    out.compared_by_source[source] += 1
    if a == b or (_isnan(a) and _isnan(b)):
        return
    rule = tol.describe(kind)
    if kind in ("exact", "decision"):
        out.differences.append(Difference(path, kind, a, b, rule, math.inf, severity=1))
        return
    if a is None or b is None or _isnan(a) or _isnan(b):
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


def _jsonable(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in d.items()}


# --- conclusions ------------------------------------------------------------------------------
def _sign(r: object) -> str:
    if not isinstance(r, (int, float)) or isinstance(r, bool) or _isnan(r) or r == 0:
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
    r_key, p_key, same_sign = _CONTROL_TESTS.get(control, ("", "", False))
    r = entry.get(r_key) if r_key else None
    p = entry.get(p_key) if p_key else None
    derived: bool | None = None
    if isinstance(p, (int, float)) and not isinstance(p, bool) and not _isnan(p):
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
    return list(dict.fromkeys(names or _CONTROL_TESTS))


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
    r, p, _ = _CONTROL_TESTS.get(control, ("", "", False))
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


def compare_backtests(table_a: Mapping, table_b: Mapping, tol: Tolerances = Tolerances(),
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


def compare_documents(a: object, b: object, name: str, tol: Tolerances = Tolerances(),
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


def compare_results(a: ResultsContent, b: ResultsContent, tol: Tolerances = Tolerances(),
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
