"""Correlations a reviewer would accept: uncertainty, multiple testing, and confounds.

Every quantity that drifts during training correlates with the loss, so a raw Spearman
ρ between a feature and perplexity says little on its own. For each feature × model this
module adds:

- a 95% interval of Spearman ρ from phase-randomised surrogates, which respects the
  checkpoints' autocorrelation (a bootstrap over checkpoints does not);
- Holm's step-down correction across every feature × model tested, separately for each
  control;
- the partial Spearman correlation controlling for training progress, log(1 + step)
  (pooled over models, also for model size, log(num_parameters)): the Pearson
  correlation of the rank residuals after regressing each rank vector on the ranks of
  the controls, with a t-test;
- the Spearman correlation of first differences between consecutive checkpoints: two
  series that merely share a trend lose their correlation here;
- beyond the best baseline: the partial Spearman correlation of first differences
  controlling for the first differences of each non-topological baseline of the same
  space (:func:`baselines_of`: norms, effective rank, the heavy-tail exponent), the
  result being the baseline that leaves the feature least (the largest p): does the
  feature track the loss's checkpoint-to-checkpoint changes beyond what every plain
  quantity already does?
- within each model, the two controls of :mod:`toposig.analysis.trend_controls` that
  were tried on simulated runs where the truth is known: the **detrended** correlation
  (each series' deviation from its own smooth trend in log(1 + step)) and **partial
  first differences** (first differences regressed on a smooth function of log step),
  each with a surrogate p-value and interval that respect autocorrelation, its
  calibration and power on simulations of its own design, and a pooled test over models
  that takes the model as its unit (:mod:`toposig.analysis.inference`). Plain first
  differences and the partial correlation on log step are kept for comparison; the
  simulations show they are not calibrated (shared deceleration passes them), and pooled
  over checkpoints no correlation is a test;
- the **noise floor**: with bootstrap resamples of the texts (``features_resampled``), a
  feature whose consecutive changes mostly lie within 1.96 · sqrt(se_a² + se_b²) of
  re-measuring the same checkpoints is flagged ``below_noise_floor`` in that model, and
  cannot survive there.

Pure functions on arrays and records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from toposig.analysis import correlations, design_cache, inference, trend_controls
from toposig.analysis.correlations import MIN_POINTS, by_model, correlation, feature_values
from toposig.analysis.design_cache import DesignCache
from toposig.records import Record

ALPHA = 0.05
N_BOOTSTRAP = 1000
CONTROLS = ("raw", "partial_log_step", "first_differences", "beyond_baseline", "detrended",
            "partial_first_differences")
# (p-value key, Holm-adjusted key, control) of each Holm family
HOLM_FAMILIES = (("spearman_p", "holm_p", "raw"), ("partial_p", "partial_holm_p",
                                                   "partial_log_step"),
                 ("diff_p", "diff_holm_p", "first_differences"),
                 ("beyond_p", "beyond_holm_p", "beyond_baseline"),
                 ("detrended_p", "detrended_holm_p", "detrended"),
                 ("pfd_p", "pfd_holm_p", "partial_first_differences"))
N_SURROGATES = 999
DESIGN_RUNS = inference.NULL_RUNS  # null runs per test's design (power: half as many per coupling)
NOISE_FLOOR_SHARE = 0.5  # below the floor: fewer than half the changes resolved


def baselines_of(feature: str) -> tuple[str, ...]:
    """The baselines a feature is tested beyond, the space's plain norm first: those its
    feature group declares (:attr:`~toposig.families.base.FeatureGroup.baselines`) when it
    is topological: for weight-space topology (``np_*``, ``weight_h*``) the Frobenius norm
    of the weights, the mean spectral norm, the mean heavy-tail exponent alpha and the mean
    weighted alpha of the matrices (the field's standard weight diagnostics, as
    weightwatcher computes them, where the records have them); for embedding-space
    topology (``h*_``) the mean norm of the hidden states and their effective rank (the
    covariance's entropy rank, and RankMe); for the loss surface's merge tree
    (``landscape_*``) the Hessian trace; for gradient-space topology (``grad_h*``) the
    mean gradient norm; for the inter-layer zigzag (``zigzag_*``) how much each text's
    neighbours persist from layer to layer; for the gradients' agreement (the mean cosine
    between examples' gradients, not topological) the gradient noise scale, which
    predicts it. ``()`` for the baselines themselves and every other feature."""
    return correlations.feature_group(feature).baselines


def baseline_of(feature: str) -> str | None:
    """The plain norm of a feature's space (the first of :func:`baselines_of`)."""
    return next(iter(baselines_of(feature)), None)


def _clean(*arrays: Sequence[float | None]) -> list[np.ndarray]:
    """Float arrays with every position where any array is missing or non-finite dropped."""
    arrs = [np.array([np.nan if v is None else v for v in a], dtype=np.float64) for a in arrays]
    keep = np.logical_and.reduce([np.isfinite(a) for a in arrs])
    return [a[keep] for a in arrs]


def bootstrap_spearman_ci(x: Sequence[float], y: Sequence[float], n_resamples: int = N_BOOTSTRAP,
                          seed: int = 0, level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI of Spearman ρ, resampling (x, y) pairs with replacement.

    It treats checkpoints as independent, and under autocorrelation it covers too seldom
    (``tests/test_inference.py``); the analysis uses
    :func:`toposig.analysis.trend_controls.raw_surrogate_interval` instead, and this
    stays for comparison.

    Resamples in which either variable is constant (ρ undefined) are left out; ``None``
    when fewer than three pairs or fewer than half the resamples are usable.
    """
    xa, ya = _clean(x, y)
    n = xa.size
    if n < MIN_POINTS:
        return None, None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    rx = sps.rankdata(xa[idx], axis=1)
    ry = sps.rankdata(ya[idx], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    ok = den > 0
    if ok.sum() < n_resamples / 2:
        return None, None
    rho = (rx * ry).sum(axis=1)[ok] / den[ok]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(rho, [tail, 100 - tail])
    return float(lo), float(hi)


def partial_spearman(x: Sequence[float], y: Sequence[float],
                     *controls_: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """Spearman correlation of x and y controlling for one or more variables, with p.

    Ranks of x and y are each regressed on the ranks of the controls (with intercept);
    the result is the Pearson correlation of the residuals, tested with
    t = r·sqrt(df/(1−r²)), df = n − 2 − (number of controls). Returns ``(r, p, n)``;
    ``(None, None, n)`` when undefined (too few points, or x or y is fully explained by
    the controls' ranks, e.g. a loss that falls monotonically with the step).
    """
    arrays = _clean(x, y, *controls_)
    xa, ya, zs = arrays[0], arrays[1], arrays[2:]
    n = xa.size
    k = len(zs)
    if n < MIN_POINTS + k:
        return None, None, n
    design = np.column_stack([np.ones(n), *(sps.rankdata(z) for z in zs)])
    rx, ry = sps.rankdata(xa), sps.rankdata(ya)
    res_x = rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]
    res_y = ry - design @ np.linalg.lstsq(design, ry, rcond=None)[0]
    den = math.sqrt(float(res_x @ res_x) * float(res_y @ res_y))
    if den < 1e-9 * n:  # x or y is (rank-)explained by the controls: nothing left
        return None, None, n
    r = max(-1.0, min(1.0, float(res_x @ res_y) / den))
    df = n - 2 - k
    if abs(r) >= 1.0:
        return r, 0.0, n
    t = r * math.sqrt(df / (1 - r * r))
    return r, float(2 * sps.t.sf(abs(t), df)), n


def first_difference_spearman(x: Sequence[float], y: Sequence[float]) -> dict:
    """Spearman (and Pearson) of consecutive differences of two step-ordered series.

    Pairs are formed only between consecutive checkpoints where both values exist.
    """
    xa, ya = _clean(x, y)
    return correlation(np.diff(xa).tolist(), np.diff(ya).tolist())


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone); ``None`` stays ``None``."""
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def controlled_correlations(records: Sequence[Record], targets: dict[str, str],
                            n_resamples: int = N_BOOTSTRAP, seed: int = 0,
                            n_surrogates: int = N_SURROGATES,
                            design_runs: int = DESIGN_RUNS,
                            design_cache: DesignCache | None = None,
                            progress: Callable[[str], None] | None = None) -> dict:
    """Every feature × model correlation with its target, under each control.

    Args:
        records: the checkpoints' records (their features and quality measures).
        targets: feature name -> the record field it is correlated with (``perplexity``
            for embedding features, ``loss`` for weight features).
        n_resamples: bootstrap resamples per correlation.
        seed: seeds the bootstrap and the surrogates (each test gets its own stream).
        n_surrogates: surrogates per detrended and partial-first-difference p-value.
        design_runs: simulated null runs of each test's design (0: none).
        design_cache: design checks from an earlier analysis, by what determines them
            (:mod:`toposig.analysis.design_cache`): a design whose checks it holds is not
            simulated again, and the checks made here are added to it. The result is the
            same with it as without.
        progress: called with a line of progress after each model's tests.

    Returns:
        ``{"per_model": {label: {feature: entry}}, "pooled": {feature: entry},
        "summary": {feature: {...}}, ...}``
        where an entry holds ``target``, ``n``, Spearman/Pearson r and p, ``ci_low`` /
        ``ci_high``, ``holm_p``, ``partial_r`` / ``partial_p`` / ``partial_holm_p``,
        ``diff_r`` / ``diff_p`` / ``diff_holm_p``, ``beyond_*``, ``detrended_*`` and
        ``pfd_*`` (within one model only; ``None`` pooled), ``below_noise_floor`` and
        ``significant`` under each control (Holm-adjusted p < 0.05; the same sign as the
        raw ρ for the trend-level controls; either sign for the detrended and partial
        first-difference controls, whose fluctuations may run against the trend).
        Holm's correction runs within each control over its defined tests
        (``n_tests_by_control``).
        ``summary`` counts, per feature, the models where it stays significant. The
        pooled tests (all models' checkpoints together, when there are several models)
        share the Holm family; pooled, the partial control is defined even when each
        model's quality is monotone in its step, because models differ at equal steps.
    """
    groups = by_model(records)
    cache = design_cache if design_cache is not None else DesignCache()
    per_model: dict[str, dict[str, dict]] = {}
    flat: list[dict] = []
    # each within-model trend test's design (simulated only when a check is not cached),
    # and whether it is calibrated there
    designs = _Designs(design_runs, cache)
    usable: dict[tuple[str, str, str], bool] = {}
    checks: list[tuple[dict, str, _Check | None]] = []
    for m_index, (label, recs) in enumerate(groups.items()):
        per_model[label] = {}
        for f_index, (feature, target) in enumerate(targets.items()):
            stream = _stream(seed, m_index, f_index)
            entry = _controlled_entry([recs], feature, target, n_resamples, stream,
                                      n_surrogates)
            design = (inference.fit_design(feature_values(recs, feature),
                                           [r.measure(target) for r in recs],
                                           [r.step for r in recs])
                      if design_runs else None)
            if design is not None:
                entry["design_fit"] = design.summary()
                designs.add((label, feature), design, stream)
            for kind in trend_controls.KINDS:
                if entry[f"{kind}_r"] is None:
                    continue
                key = (label, feature, kind)
                rule = inference.design_rule(kind, entry[f"{kind}_steps"],
                                             entry[f"{kind}_edf"], entry[f"{kind}_n"])
                check = None if design is None else _Check(((label, feature),), kind, rule)
                usable[key] = (designs.check(check, 1)["status"] == inference.CALIBRATED
                               if check is not None else rule is None)
                checks.append((entry, kind, check))
            per_model[label][feature] = entry
            flat.append(entry)
        if progress is not None:
            progress(f"model {m_index + 1} of {len(groups)} ({label}): {len(targets)} "
                     f"features tested; design checks {cache.hits} reused, "
                     f"{designs.simulated} designs simulated")
    pooled: dict[str, dict] = {}
    if len(groups) > 1:
        for f_index, (feature, target) in enumerate(targets.items()):
            entry = _controlled_entry(list(groups.values()), feature, target,
                                      n_resamples, _stream(seed, len(groups), f_index),
                                      n_surrogates)
            for kind in trend_controls.KINDS:
                use = [label for label in groups if usable.get((label, feature, kind))]
                entry |= _pooled_trend_test(groups, use, feature, target, kind, seed,
                                            f_index, n_surrogates)
                members = tuple((label, feature) for label in use)
                if entry[f"{kind}_r"] is not None and all(designs.has(m) for m in members):
                    checks.append((entry, kind, _Check(members, kind, None, pooled=True)))
            pooled[feature] = entry
            flat.append(entry)
    n_tests_by_control = {}
    for key, out, control in HOLM_FAMILIES:
        # a test that is not calibrated for any design (pooled checkpoints) is not in a
        # family: its p is a description
        members = [e for e in flat if control in _TESTED[e["scope"]]]
        for entry, adj in zip(members, holm([e[key] for e in members]), strict=True):
            entry[out] = adj
        for entry in flat:
            if control not in _TESTED[entry["scope"]]:
                entry[out] = None
        n_tests_by_control[control] = sum(e[key] is not None for e in members)
    for entry, kind, check in checks:
        control = _CONTROL_OF[kind]
        if check is not None:
            made = designs.check(check, max(n_tests_by_control[control], 1))
        else:  # no simulation (design_runs=0, or no design): the rule alone
            rule = inference.design_rule(kind, entry[f"{kind}_steps"], entry[f"{kind}_edf"],
                                         entry[f"{kind}_n"])
            made = {"status": inference.UNCALIBRATED if rule else "not checked", "why": rule}
        entry.setdefault("design", {})[control] = made
    for entry in flat:
        for kind in trend_controls.KINDS:  # only needed to check the design
            entry.pop(f"{kind}_steps", None)
    for entry in flat:
        entry["calibration"] = _calibration(entry)
        entry["significant"] = _significance(entry)
    return {
        "alpha": ALPHA,
        "n_bootstrap": n_resamples,
        "n_surrogates": n_surrogates,
        "ci_method": CI_METHOD.format(n=n_surrogates),
        "pooled_method": POOLED_METHOD,
        "design_method": DESIGN_METHOD.format(
            null=design_runs, power=max(design_runs // 2, 1),
            couplings=", ".join(f"{c:g}" for c in inference.COUPLINGS),
            s=inference.DESIGN_SURROGATES) if design_runs else None,
        "pooled": pooled,
        "seed": seed,
        "controls": list(CONTROLS),
        "n_tests": len(flat),
        "n_tests_by_control": n_tests_by_control,
        "targets": dict(targets),
        "per_model": per_model,
        "summary": _summary(per_model, pooled, targets),
    }


CI_METHOD = ("95% interval from {n} phase-randomised surrogates: tanh(atanh(r) ± t(n − 3) · "
             "s), s the surrogates' root-mean-square Fisher z (respects autocorrelation); "
             "none pooled over checkpoints")
POOLED_METHOD = ("fixed-effect meta-analysis over models of the within-model detrended and "
                 "partial-first-difference statistics: weighted mean Fisher z (weights "
                 "k − 3) against the same mean of the models' own surrogates; the pooled "
                 "raw, partial, first-difference and beyond-baseline correlations are "
                 "descriptions (checkpoints of several models are not independent units)")
DESIGN_METHOD = ("per test, simulations of its own design (both series' REML trends in "
                 "log step plus AR(1) noise of the residuals' sd and lag-one "
                 "autocorrelation): {null} null runs and {power} runs at each coupling "
                 "({couplings}), {s} surrogates each; uncalibrated when the null rate "
                 "exceeds alpha with a one-sided binomial p < 0.01; mdc = the smallest "
                 "coupling found with 80% power (at alpha, and at alpha / the Holm "
                 "family's size)")
# which controls are tests (calibrated for some design) in each scope
_TESTED = {"model": set(CONTROLS),
           "pooled": {"detrended", "partial_first_differences"}}
_CONTROL_OF = {"detrended": "detrended", "pfd": "partial_first_differences"}


@dataclass(frozen=True)
class _Check:
    """One design check to make: of one model's design (``members`` of one) or of the
    pool of several models' (``members`` in the pool's order, ``rule`` ``None``), for
    control ``kind``, given the design rule's verdict on the real data."""

    members: tuple[tuple[str, str], ...]
    kind: str
    rule: str | None
    pooled: bool = False


class _Designs:
    """The fitted designs of one analysis, by (model, feature), simulated only when a
    check of theirs is not in the cache (each at most once)."""

    def __init__(self, design_runs: int, cache: DesignCache) -> None:
        self.design_runs = design_runs
        self.cache = cache
        self._design: dict[tuple[str, str], tuple[inference.Design, int]] = {}
        self._key: dict[tuple[str, str], str] = {}
        self._draws: dict[tuple[str, str], dict[str, inference.Draws]] = {}
        self.simulated = 0

    def add(self, member: tuple[str, str], design: inference.Design, seed: int) -> None:
        self._design[member] = (design, seed)
        self._key[member] = design_cache.design_key(design, seed, self.design_runs,
                                                    self._power_runs)

    def has(self, member: tuple[str, str]) -> bool:
        return member in self._design

    @property
    def _power_runs(self) -> int:
        return max(self.design_runs // 2, 1)

    def _simulated(self, member: tuple[str, str], kind: str) -> inference.Draws:
        if member not in self._draws:
            design, seed = self._design[member]
            self._draws[member] = {k: inference.simulate_design(
                design, k, seed, null_runs=self.design_runs, power_runs=self._power_runs)
                for k in trend_controls.KINDS}
            self.simulated += 1
        return self._draws[member][kind]

    def check(self, check: _Check, holm_tests: int) -> dict:
        """The design check's JSON (:meth:`toposig.records.controlled.DesignCheck.to_json`)
        at a Holm family of ``holm_tests``: from the cache, else simulated and cached."""
        keys = [self._key[m] for m in check.members]
        key = (design_cache.pooled_key(keys, check.kind, holm_tests) if check.pooled
               else design_cache.check_key(keys[0], check.kind, holm_tests, check.rule))
        if (found := self.cache.get(key)) is not None:
            return found
        draws = [self._simulated(m, check.kind) for m in check.members]
        sims = inference.pooled_draws(draws) if check.pooled else draws[0]
        made = inference.design_check(sims, holm_tests=holm_tests, rule=check.rule).to_json()
        self.cache.put(key, made)
        return made


def _pooled_trend_test(groups: dict[str, list[Record]], use: list[str], feature: str,
                       target: str, kind: str, seed: int, f_index: int,
                       n_surrogates: int) -> dict:
    """The fixed-effect pooled test of one within-model control over the models ``use``
    (those where it is defined and calibrated for its design;
    :func:`toposig.analysis.inference.pooled_test`), each model's statistic and surrogates
    as its own entry computed them (the same seed)."""
    rs, surr, ks = [], [], []
    for m_index, (label, recs) in enumerate(groups.items()):
        if label not in use:
            continue
        got = trend_controls.draws(kind, feature_values(recs, feature),
                                   [r.measure(target) for r in recs],
                                   [r.step for r in recs],
                                   seed=_stream(seed, m_index, f_index),
                                   n_surrogates=n_surrogates)
        if got is not None:
            rs.append(got[0])
            surr.append(got[1])
            ks.append(got[2])
    res = inference.pooled_test(rs, surr, ks)
    out = {f"{kind}_models": len(rs)}
    if res is None:
        return out | {f"{kind}_r": None, f"{kind}_p": None, f"{kind}_ci_low": None,
                      f"{kind}_ci_high": None,
                      f"{kind}_undefined": f"defined and calibrated in {len(rs)} model(s); "
                                           "a pooled test needs two"}
    return out | {f"{kind}_r": res.r, f"{kind}_p": res.p, f"{kind}_ci_low": res.ci_low,
                  f"{kind}_ci_high": res.ci_high, f"{kind}_undefined": None}


def _controlled_entry(groups: list[list[Record]], feature: str, target: str, n_resamples: int,
                      seed: int, n_surrogates: int = N_SURROGATES) -> dict:
    """One feature's tests over the records of one model, or pooled over several models
    (then first differences are taken within each model and concatenated)."""
    recs = [r for g in groups for r in g]
    x = feature_values(recs, feature)
    y = [r.measure(target) for r in recs]
    step_values = [r.step for r in recs]
    steps = [math.log1p(s) if s is not None else None for s in step_values]
    raw = correlation(x, y)
    if len(groups) == 1:  # checkpoints of one run: an interval that respects autocorrelation
        lo, hi = trend_controls.raw_surrogate_interval(
            x, y, step_values, seed=seed, n_surrogates=n_surrogates)
    else:  # pooled checkpoints are not independent units: a description, no interval
        lo = hi = None
    controlled = [steps]
    sizes = [r.num_parameters for r in recs]
    if len(groups) > 1 and all(v is not None for v in sizes) and len(set(sizes)) > 1:
        controlled.append([math.log(v) for v in sizes])  # pooled: model size too
    pr, pp, _ = partial_spearman(x, y, *controlled)
    why = None
    if pr is None and raw["n"] >= MIN_POINTS + 1:
        why = _why_partial_undefined(x, y, steps)
    diff = correlation(*_within_model_diffs(groups, feature, target))
    # beyond the best baseline: the partial test against each baseline the records have;
    # the one that leaves the feature least (the largest p) is the result
    beyond = {}
    for b in baselines_of(feature):
        if any(v is not None for v in feature_values(recs, b)):
            r_b, p_b, _ = partial_spearman(*_within_model_diffs(groups, feature, target, b))
            beyond[b] = {"r": r_b, "p": p_b}
    baseline = beyond_r = beyond_p = None
    defined = [b for b in beyond if beyond[b]["p"] is not None]
    if defined:  # a baseline too sparse to test against is listed, not chosen
        baseline = max(defined, key=lambda b: beyond[b]["p"])
        beyond_r, beyond_p = beyond[baseline]["r"], beyond[baseline]["p"]
    elif beyond:
        baseline = next(iter(beyond))
    trend: dict = {f"{key}_{field}": None for key in trend_controls.KINDS
                   for field in ("r", "p", "ci_low", "ci_high", "undefined")}
    if len(groups) == 1:
        for key, fn in (("detrended", trend_controls.detrended_correlation),
                        ("pfd", trend_controls.partial_first_differences)):
            res = fn(x, y, step_values, seed=seed, n_surrogates=n_surrogates)
            for field in ("r", "p", "ci_low", "ci_high"):
                trend[f"{key}_{field}"] = res[field]
            trend[f"{key}_undefined"] = res.get("reason")
            if res["r"] is not None:
                trend[f"{key}_n"] = res["n"]
                trend[f"{key}_edf"] = [res["edf_x"], res["edf_y"]]
                trend[f"{key}_steps"] = trend_controls.paired_series(x, y, step_values)[2]
    return {
        "scope": "model" if len(groups) == 1 else "pooled",
        **trend,
        "below_noise_floor": noise_floor(recs, feature) if len(groups) == 1 else None,
        "target": target,
        "n": raw["n"],
        "spearman_r": raw.get("spearman_r"),
        "spearman_p": raw.get("spearman_p"),
        "pearson_r": raw.get("pearson_r"),
        "pearson_p": raw.get("pearson_p"),
        "ci_low": lo,
        "ci_high": hi,
        "partial_r": pr,
        "partial_p": pp,
        "partial_undefined": why,
        "partial_controls": ["log(1 + step)", "log(num_parameters)"][: len(controlled)],
        "diff_r": diff.get("spearman_r"),
        "diff_p": diff.get("spearman_p"),
        "diff_n": diff["n"],
        "baseline": baseline,
        "beyond_r": beyond_r,
        "beyond_p": beyond_p,
        "beyond_by_baseline": beyond,
    }


def noise_floor(records: Sequence[Record], feature: str) -> bool | None:
    """Whether a feature's checkpoint-to-checkpoint changes lie below its re-measurement
    noise in one model: fewer than half its consecutive changes exceed
    1.96 · sqrt(se_a² + se_b²), se the standard deviation over bootstrap resamples of the
    texts (``features_resampled``). ``None`` without resamples of the feature."""
    vals = [(r.features.get(feature),
             spread.std if (spread := r.resampled.get(feature)) else None) for r in records]
    vals = [(v, se) for v, se in vals if v is not None and se is not None]
    if len(vals) < 2:
        return None
    v = np.array([a for a, _ in vals], dtype=np.float64)
    se = np.array([b for _, b in vals], dtype=np.float64)
    resolved = np.abs(np.diff(v)) > 1.96 * np.sqrt(se[:-1] ** 2 + se[1:] ** 2)
    return bool(np.mean(resolved) < NOISE_FLOOR_SHARE)


def _within_model_diffs(groups: list[list[Record]], feature: str, target: str,
                        *more: str) -> list[list[float]]:
    """Consecutive differences of the feature, the target (and any further features),
    taken within each model over checkpoints where all of them exist, concatenated."""
    out: list[list[float]] = [[] for _ in range(2 + len(more))]
    for g in groups:
        series = _clean(feature_values(g, feature), [r.measure(target) for r in g],
                        *(feature_values(g, m) for m in more))
        for acc, a in zip(out, series, strict=True):
            acc.extend(np.diff(a).tolist())
    return out


def _why_partial_undefined(x, y, z) -> str:
    xa, ya, za = _clean(x, y, z)
    rz = sps.rankdata(za)
    for name, a in (("the target", ya), ("the feature", xa)):
        if np.ptp(a) == 0:
            return f"{name} is constant"
        if abs(sps.spearmanr(a, rz).statistic) > 1 - 1e-9:
            return f"{name} is a monotone function of the step: no variation is left " \
                   "once training progress is controlled for"
    return "no variation left after the control"


def _stream(seed: int, *keys: int) -> int:
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1)[0])


def _calibration(e: dict) -> dict[str, str]:
    """Per control, whether it is a calibrated test here: for the detrended and partial
    first-difference controls the status its own design's simulations gave (``"not
    checked"`` without them); for the others, why they are not."""
    design = e.get("design") or {}
    out = {}
    for control in CONTROLS:
        if control in ("detrended", "partial_first_differences"):
            out[control] = (design[control]["status"] if control in design
                            else "not checked")
        elif e["scope"] == "pooled":
            out[control] = inference.NOT_CALIBRATED_POOLED
        else:
            out[control] = inference.NOT_CALIBRATED_TREND
    return out


def _significance(e: dict) -> dict[str, bool | None]:
    """Per control: ``True`` where its Holm-adjusted p < alpha (with the raw sign, for the
    trend-level controls; either sign for the detrended and partial first-difference
    ones, which must also be calibrated for their design); ``None`` where it is not a test
    here (pooled over checkpoints; no baseline; no noise floor)."""
    def sig(p, r) -> bool:
        same_sign = (r is not None and e["spearman_r"] is not None
                     and np.sign(r) == np.sign(e["spearman_r"]))
        return p is not None and p < ALPHA and same_sign

    def calibrated(control: str, p) -> bool:
        status = e["calibration"][control]
        return p is not None and p < ALPHA and status in (inference.CALIBRATED, "not checked")

    if e["scope"] == "pooled":
        return {
            "raw": None, "partial_log_step": None, "first_differences": None,
            "beyond_baseline": None,
            "detrended": calibrated("detrended", e["detrended_holm_p"]),
            "partial_first_differences": calibrated("partial_first_differences",
                                                    e["pfd_holm_p"]),
            "above_noise_floor": None,
        }
    return {
        "raw": e["holm_p"] is not None and e["holm_p"] < ALPHA,
        "partial_log_step": sig(e["partial_holm_p"], e["partial_r"]),
        "first_differences": sig(e["diff_holm_p"], e["diff_r"]),
        # None: not applicable (the feature is itself a baseline, or has none)
        "beyond_baseline": (sig(e["beyond_holm_p"], e["beyond_r"])
                            if e["baseline"] is not None else None),
        "detrended": calibrated("detrended", e["detrended_holm_p"]),
        "partial_first_differences": calibrated("partial_first_differences",
                                                e["pfd_holm_p"]),
        # None: no resamples to measure the floor with
        "above_noise_floor": (None if e["below_noise_floor"] is None
                              else not e["below_noise_floor"]),
    }


def _summary(per_model: dict[str, dict[str, dict]], pooled: dict[str, dict],
             targets: dict[str, str]) -> dict:
    """Per feature: in how many models it is significant under each control."""
    out = {}
    for feature, target in targets.items():
        entries = [t[feature] for t in per_model.values() if feature in t]
        out[feature] = {
            "target": target,
            "n_models": len(entries),
            **{f"significant_{c}": sum(bool(e["significant"][c]) for e in entries)
               for c in CONTROLS},
            "all_controls": sum(all(v for v in e["significant"].values() if v is not None)
                                for e in entries),
            "partial_undefined": sum(e["partial_undefined"] is not None for e in entries),
            "below_noise_floor": sum(bool(e["below_noise_floor"]) for e in entries),
            "pooled": pooled[feature]["significant"] if feature in pooled else None,
        }
    return out
