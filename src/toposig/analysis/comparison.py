"""The rules of a comparison of two results folders: what is not a result, the kinds of
numbers and the tolerance of each, and what a comparison records (its differences and
changed conclusions). :mod:`toposig.analysis.compare` applies them.

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase

from toposig.families.base import Kind
from toposig.families.registry import kind_of

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
CONTROL_TESTS: dict[str, tuple[str, str, bool]] = {
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


DEFAULT_TOLERANCES = Tolerances()
"""The tolerances a comparison uses unless told others (the module docstring: why)."""


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


def is_nan(v: object) -> bool:
    """Whether ``v`` is a float NaN."""
    return isinstance(v, float) and math.isnan(v)


def _jsonable(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in d.items()}
