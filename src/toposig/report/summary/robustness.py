"""Part C of the summary: every feature × model (and pooled) under each control, which
features survive every one, the stability over text resamples, and the calibrated tests
with their design checks and power."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from toposig.analysis.inference import CALIBRATED, UNCALIBRATED
from toposig.families.registry import groups as feature_groups
from toposig.records import Record
from toposig.records.controlled import TREND_KINDS, ControlledTest, FeatureSummary
from toposig.records.statistics import (
    Statistics,
    stability_of,
)
from toposig.report.summary.cells import (
    CONTROL_NAMES,
    DASH,
    Absent,
    Part,
    bootstrap_text,
    controlled_section,
    finite,
    fmt_ci,
    fmt_count,
    fmt_p,
    fmt_percent,
    fmt_rho,
    fmt_value,
    interval_text,
    md_code,
    md_table,
    n_text,
    or_unknown,
    short_reason,
    survives,
    targets_text,
)


def baselines_text() -> str:
    """Each feature group's baselines, from the registry: ``weight topology:
    `weight_l2_norm`, ...; ...``."""
    return "; ".join(f"{g.label}: " + ", ".join(f"`{b}`" for b in g.baselines)
                     for g in feature_groups() if g.baselines)


def _trend_cells(e: ControlledTest) -> list[str]:
    """Detrended and partial-first-difference ρ and Holm p (within a model; a dash pooled)
    and the noise floor (below / above / a dash without resamples)."""
    floor = e.below_noise_floor
    return [*_trend_pair(e, "detrended"), *_trend_pair(e, "pfd"),
            DASH if floor is None else ("below" if floor else "above")]


def _trend_pair(e: ControlledTest, kind: str) -> list[str]:
    """A calibrated control's ρ (marked where its sign is opposite to the raw ρ's) and
    Holm p (marked where the test is uncalibrated for its design)."""
    test = e.trend(kind)
    rho = fmt_rho(test.r)
    if e.sign_against_raw(kind) == "opposite":
        rho += " (opposite to raw)"
    p = fmt_p(test.holm_p)
    if e.calibration.get(TREND_KINDS[kind]) == UNCALIBRATED and p != DASH:
        p += " (uncalibrated)"
    return [rho, p]


def _rho_ci(entry: ControlledTest) -> str:
    """``ρ [lo, hi]``, or whichever part is defined, or a dash."""
    parts = [fmt_rho(entry.spearman_r), fmt_ci(entry.ci_low, entry.ci_high)]
    parts = [x for x in parts if x != DASH]
    return " ".join(parts) or DASH


def _robustness(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    controlled = controlled_section(statistics)
    features = controlled.features()
    if not features:
        raise Absent("no feature was tested")
    trend = controlled.n_tests_by_control is not None  # with the detrended controls
    headers = ["Feature", "Model", "Target", "n", "ρ [95% CI]", "Holm p", "Partial r",
               "Partial Holm p", "First-diff ρ", "First-diff Holm p", "Baseline",
               "Beyond-baseline r", "Beyond-baseline Holm p",
               *(["Detrended ρ", "Detrended Holm p", "Partial-diff ρ", "Partial-diff Holm p",
                  "Noise floor"] if trend else []), "Survives"]
    rows = []
    for f, m, e in controlled.every_entry(features):
        if finite(e.partial_r):
            partial = fmt_rho(e.partial_r)
        else:
            partial = f"undefined: {short_reason(e.partial_undefined)}"
        rows.append([md_code(f), m, e.target or DASH, fmt_count(e.n),
                     _rho_ci(e), fmt_p(e.holm_p), partial, fmt_p(e.partial_holm_p),
                     fmt_rho(e.diff_r), fmt_p(e.diff_holm_p),
                     md_code(e.baseline) if e.baseline else DASH,
                     fmt_rho(e.beyond_r), fmt_p(e.beyond_holm_p),
                     *(_trend_cells(e) if trend else []), survives(e)])
    ns = [e.n for tests in controlled.per_model.values() for e in tests.values()]
    caption = (f"Every feature × model (and pooled) against its target "
               f"({targets_text(controlled)}; per model {n_text(ns)} checkpoints): "
               f"Spearman ρ with {bootstrap_text(statistics)} (separately for each test); "
               "partial Spearman controlling for log(1 + step) (pooled: also log parameters); "
               "Spearman of first differences between consecutive checkpoints; beyond the "
               "baseline: partial Spearman of first differences controlling for the first "
               "differences of the best baseline of the same space, the one that leaves the "
               f"feature least, of those the records have ({baselines_text()}; — where not "
               "applicable); a "
               f"control is survived when its Holm p < {controlled.level} with "
               "the raw ρ's sign.")
    if trend:
        caption += (" Within each model, the two controls tried on simulated runs "
                    "(`toposig.analysis.trend_controls`): detrended ρ, of each series' "
                    "deviation from its own REML smoothing spline in log(1 + step), and "
                    "partial-diff ρ, of first differences regressed on a smooth function of "
                    f"log step, each with a p from {or_unknown(controlled.n_surrogates)} "
                    "phase-randomised surrogates (Holm as above; survived at either sign); "
                    "noise floor: below when fewer than half the feature's consecutive "
                    "changes exceed 1.96 × their bootstrap-resample standard errors (then it "
                    "cannot survive in that model). The plain first differences and the "
                    "partial on log step are not calibrated under shared deceleration "
                    "(`bench/bench_controls_calibration.py`); the detrended controls are.")
    return [caption, "", *md_table(headers, rows)]


def _survivors(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    summary = controlled_section(statistics).summary
    if not summary:
        raise Absent("the controlled analysis holds no per-feature summary")

    def names(pred: Callable[[FeatureSummary], bool]) -> str:
        hits = [md_code(f) for f, s in summary.items() if pred(s)]
        return ", ".join(hits) if hits else "none"

    every = names(lambda s: bool(s.n_models) and s.all_controls == s.n_models)
    raw = names(lambda s: s.in_every_model("raw"))
    pooled = names(lambda s: any(s.pooled.get(c) for c in ("detrended",
                                                           "partial_first_differences")))
    within = names(lambda s: s.in_every_model("first_differences")
                   and s.in_every_model("beyond_baseline"))
    undefined = names(lambda s: bool(s.partial_undefined))
    if len(summary) > 1 and all(s.partial_undefined for s in summary.values()):
        undefined = f"all {len(summary)} features"
    text = (f"Features significant in every model under all controls: {every}. "
            f"Features significant in every model on the raw test (Holm) alone: {raw}. "
            f"Features significant pooled over models (a meta-analysis of the within-model "
            f"detrended or partial-difference tests, calibrated for their designs; the "
            f"pooled raw and trend-level correlations are descriptions, not tests): "
            f"{pooled}. "
            f"Features whose checkpoint-to-checkpoint changes track the target beyond their "
            f"space's plain norm in every model (first differences and beyond-baseline): "
            f"{within}. "
            f"Features whose partial correlation is undefined in at least one model (the "
            f"target or the feature is a monotone function of the step, so that control "
            f"cannot be passed there): {undefined}.")
    return [text]


STABILITY_FEATURES = ("h0_total_persistence", "h1_total_persistence",
                      "h1_persistence_entropy", "h1_n_features", "h0_total_persistence_scaled",
                      "h1_total_persistence_scaled")


def _stability(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    section = stability_of(statistics)
    if section is None or not section.per_model:
        raise Absent("the run had no bootstrap resamples of the texts (--resamples B)")
    headers = ["Feature", "Model", "Median bootstrap s.e.", "Median |change|",
               "Change / s.e.", "Resolved changes", "Range / s.e.", "Pairs"]
    rows = []
    for f in STABILITY_FEATURES:
        for model, table in section.per_model.items():
            e = table.get(f)
            if e is None:
                continue
            rows.append([md_code(f), model, fmt_value(e.median_se),
                         fmt_value(e.median_abs_change), fmt_value(e.change_to_se),
                         fmt_percent(e.resolved_share), fmt_value(e.range_to_se),
                         fmt_count(e.n_pairs)])
    if not rows:
        raise Absent("no PH feature carries a bootstrap spread")
    caption = ("Bootstrap over texts: each checkpoint's PH features recomputed on resamples of "
               "the analysed texts (the same resamples at every checkpoint); s.e. = their "
               "standard deviation; a change between consecutive checkpoints is resolved "
               "when |ΔF| > 1.96·sqrt(se_a² + se_b²); range / s.e. compares the whole "
               "trajectory with the noise; descriptive, no test.")
    return [caption, "", *md_table(headers, rows)]


def _interval_cell(e: ControlledTest, kind: str) -> str:
    test = e.trend(kind)
    parts = [fmt_rho(test.r), fmt_ci(test.ci_low, test.ci_high)]
    parts = [x for x in parts if x != DASH]
    text = " ".join(parts) or DASH
    if e.sign_against_raw(kind) == "opposite":
        text += " (opposite to raw)"
    return text


def _design_cells(e: ControlledTest, control: str) -> list[str]:
    """Null rate (with the status where uncalibrated) and the minimum detectable
    coupling at alpha and at Holm's strictest level."""
    check = (e.design or {}).get(control)
    if check is None:
        return [DASH, DASH]
    if check.status not in (CALIBRATED, UNCALIBRATED):  # no simulation was run
        return ["not checked", DASH]
    rate = f"{check.null_rate:.3f}" if finite(check.null_rate) else DASH
    if check.status != CALIBRATED:
        rate += " (uncalibrated)"
    return [rate, f"{_mdc(check.mdc)} ({_mdc(check.mdc_holm)})"]


def _mdc(value) -> str:
    return f"{value:.2f}" if finite(value) else "> 0.9"


def reading(e: ControlledTest) -> str:
    """What a test row says, in words: an association under a calibrated control, or
    "no association above X" (X the smallest coupling a calibrated control would have
    found with 80 % power at Holm's strictest level), or why it says nothing."""
    sig, calib, design = e.significant, e.calibration, e.design or {}
    found = [kind for kind, control in TREND_KINDS.items() if sig.get(control)]
    if found:
        opposite = [CONTROL_NAMES[TREND_KINDS[k]] for k in found
                    if e.sign_against_raw(k) == "opposite"]
        text = f"association ({', '.join(CONTROL_NAMES[TREND_KINDS[k]] for k in found)})"
        return text + (f", opposite in sign to the raw ρ ({', '.join(opposite)})"
                       if opposite else "")
    usable = [design[c] for c in TREND_KINDS.values()
              if c in design and calib.get(c) == CALIBRATED]
    if not usable:
        if any(calib.get(c) == UNCALIBRATED for c in design):
            return "no calibrated test for this design"
        if e.scope == "pooled" and e.detrended.models is not None:
            n = max(e.detrended.models or 0, e.pfd.models or 0)
            return f"no pooled test: calibrated in {n} model(s)"
        return "not tested"
    mdcs = [c.mdc_holm for c in usable if finite(c.mdc_holm)]
    if not mdcs:
        return "none found; below 80 % power even at coupling 0.9"
    return f"no association above {min(m for m in mdcs if m is not None):.2f}"


def _calibrated_tests(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    controlled = controlled_section(statistics)
    tests = [*controlled.per_model.values(), controlled.pooled]
    if not any(e.design is not None for table in tests for e in table.values()):
        raise Absent("these statistics carry no design checks (computed before they "
                      "existed, or with design_runs=0)")
    headers = ["Feature", "Model", "n", "Detrended ρ [95% CI]", "Detrended Holm p",
               "Detrended null rate", "Detrended MDC (Holm)", "Partial-diff ρ [95% CI]",
               "Partial-diff Holm p", "Partial-diff null rate", "Partial-diff MDC (Holm)",
               "Reads as"]
    rows = []
    for f, m, e in controlled.every_entry(list(controlled.targets)):
        rows.append([md_code(f), m, fmt_count(e.n),
                     _interval_cell(e, "detrended"), fmt_p(e.detrended.holm_p),
                     *_design_cells(e, "detrended"),
                     _interval_cell(e, "pfd"), fmt_p(e.pfd.holm_p),
                     *_design_cells(e, "partial_first_differences"), reading(e)])
    caption = ("The two controls that hold their size where simulations say so, per feature "
               "× model and pooled over models (a fixed-effect meta-analysis of the models' "
               "own statistics against their own surrogates). Interval: "
               f"{interval_text(controlled)}. Null rate: the share of simulated null runs "
               "of this test's own design (its fitted trends and noise) with p < "
               f"{controlled.level}; uncalibrated when it exceeds alpha beyond "
               "chance (binomial p < 0.01), and then the test is not counted as significant. "
               "MDC: the smallest coupling between the two series' fluctuations that the "
               "test finds with 80 % power on that design, at alpha and (in brackets) at "
               "alpha / the Holm family's size; > 0.9 when even a coupling of 0.9 is found "
               "less often. Reads as: an association where a calibrated control survives "
               "Holm, else no association above the smallest calibrated MDC (Holm). "
               f"{controlled.design_method or ''}")
    return [caption.strip(), "", *md_table(headers, rows)]


PART = Part(
    "Part C. Robustness",
    "Our controls: does each correlation survive multiple testing, training progress and "
    "shared trends?",
    (("C1. Robustness of every feature's correlation", _robustness),
     ("C2. Features that survive every control", _survivors),
     ("C3. Stability of the embedding topology over text resamples", _stability),
     ("C4. Calibrated tests: intervals, calibration on each run's design, power",
      _calibrated_tests)))
