"""Part B of the summary: the seed paper's tables 1 to 8 (it measured small GPTs it
trained), computed for the models of this study."""

from __future__ import annotations

from collections.abc import Mapping

from toposig.analysis.correlations import by_model
from toposig.records import Record
from toposig.records.controlled import ControlledTest
from toposig.records.sections import Phases
from toposig.records.statistics import (
    Statistics,
    models_of,
    phases_of,
    prediction_of,
    scaling_of,
)
from toposig.report.summary.cells import (
    DASH,
    Absent,
    Part,
    absent_note,
    bootstrap_text,
    computed,
    controlled_section,
    count_text,
    finite,
    fmt_ci,
    fmt_count,
    fmt_improvement,
    fmt_loss,
    fmt_p,
    fmt_params,
    fmt_percent,
    fmt_r2,
    fmt_rho,
    fmt_step,
    fmt_value,
    fraction_label,
    label_of,
    md_code,
    md_table,
    model_summaries,
    n_text,
    ok_records,
    present_features,
    quality_cell,
)

LARGEST_MODEL_FEATURES = ("np_mean", "np_std", "np_seed_mean", "weight_h0_total")


def _configurations(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    models = model_summaries(statistics)
    groups = by_model(ok_records(records))
    arch = [("hidden_size", "Hidden"), ("num_layers", "Layers"),
            ("num_attention_heads", "Heads")]
    last = {label: recs[-1] for label, recs in groups.items() if recs}
    arch = [(k, h) for k, h in arch if any(finite(r.measure(k)) for r in last.values())]
    quality = [q for q in ("loss", "perplexity")
               if any(finite(m.final_quality.get(q)) for m in models.values())]
    headers = ["Model", "Parameters", *(h for _, h in arch), "Checkpoints", "Final step",
               *(label_of(f"final_{q}") for q in quality)]
    rows = []
    for label, m in models.items():
        r = last.get(label)
        rows.append([label, fmt_params(m.num_parameters),
                     *(fmt_count(r.measure(k) if r else None) for k, _ in arch),
                     fmt_count(m.n_checkpoints), fmt_step(m.final_step),
                     *(quality_cell(m, q) for q in quality)])
    return [f"Models analysed (n = {len(models)}; sizes and final quality from "
            "`statistics.models`, architecture from the last record of each model; final "
            "loss is the checkpoint's stored loss); descriptive, no test.", "",
            *md_table(headers, rows)]


def _controlled_entries(statistics: Statistics | Mapping, feature: str
                        ) -> list[tuple[str, ControlledTest]]:
    """``[(model or "pooled", test), ...]`` of one feature's controlled tests."""
    rows = controlled_section(statistics).entries(feature)
    if not rows:
        raise Absent(f"no record has `{feature}` (the weight stage did not run, or its "
                      "feature was not computed)")
    return rows


def _feature_vs_target(statistics: Statistics | Mapping, feature: str, what: str) -> list[str]:
    entries = _controlled_entries(statistics, feature)
    targets = sorted({e.target for _, e in entries if e.target})
    headers = ["Model", "n", "Spearman ρ", "p", "95% CI", "Holm p"]
    rows = [[m, fmt_count(e.n), fmt_rho(e.spearman_r), fmt_p(e.spearman_p),
             fmt_ci(e.ci_low, e.ci_high), fmt_p(e.holm_p)]
            for m, e in entries]
    caption = (f"Spearman ρ between {what}, {md_code(feature)}, and {' / '.join(targets) or '?'} "
               f"across checkpoints, per model and pooled "
               f"({n_text([e.n for _, e in entries])}); two-sided p; "
               f"{bootstrap_text(statistics)}.")
    return [caption, "", *md_table(headers, rows)]


def _weight_h0(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    return _feature_vs_target(statistics, "weight_h0_total",
                              "weight-row H0 total persistence (sum over weight matrices of "
                              "the Vietoris-Rips H0 total persistence of their rows)")


def _weight_h1(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    return _feature_vs_target(statistics, "weight_h1_total",
                              "weight-row H1 total persistence (loops among weight rows, "
                              "summed over matrices)")


def _direction(entry: ControlledTest) -> str:
    target = entry.target or "target"
    rho = entry.spearman_r
    if not finite(rho):
        return "undefined"
    if not entry.significant.get("raw"):
        return "not significant (Holm)"
    if rho < 0:
        return f"NP ↑ as {target} ↓"
    return f"NP ↓ as {target} ↓" if rho > 0 else "flat"


def _neural_persistence(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    controlled_section(statistics)
    rows = []
    ns = []
    targets = set()
    for feature, name in (("np_seed_mean", "seed's"), ("np_mean", "ours")):
        try:
            entries = _controlled_entries(statistics, feature)
        except Absent:
            continue
        for m, e in entries:
            ns.append(e.n)
            targets.add(e.target)
            rows.append([m, f"{md_code(feature)} ({name})", fmt_count(e.n),
                         fmt_rho(e.spearman_r), fmt_p(e.spearman_p),
                         fmt_ci(e.ci_low, e.ci_high), fmt_p(e.holm_p), _direction(e)])
    if not rows:
        raise Absent("no record has neural persistence (`np_mean` / `np_seed_mean`)")
    headers = ["Model", "NP variant", "n", "Spearman ρ", "p", "95% CI", "Holm p",
               "Direction"]
    caption = (f"Spearman ρ between mean neural persistence over weight matrices and "
               f"{' / '.join(sorted(t for t in targets if t)) or '?'} across checkpoints "
               f"({n_text(ns)}); `np_seed_mean`: per-matrix max scaling, p = 1, / (n − 1) "
               "(the seed's); `np_mean`: global max scaling, p = 2, / sqrt(n − 1) (Rieck et "
               f"al.); {bootstrap_text(statistics)}; direction only where Holm p < 0.05.")
    return [caption, "", *md_table(headers, rows)]


def _prediction(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pred = computed(prediction_of(statistics), "prediction")
    if not pred.fractions:
        raise Absent("the prediction section holds no training fraction")
    methods = list(pred.methods or next(iter(pred.fractions.values())).mae)
    if not methods:
        raise Absent("the prediction section names no method")
    others = [m for m in methods if m != "loss_only"]
    headers = ["Train fraction", *(f"{m} MAE" for m in methods),
               *(f"{m} vs loss_only" for m in others), "Models"]
    rows = []
    for key, fr in pred.fractions.items():
        n = fr.n_models
        n_vals = sorted({v for v in n.values() if finite(v)})
        n_text = (str(n_vals[0]) if len(n_vals) == 1
                  else ", ".join(f"{m}: {n.get(m, DASH)}" for m in methods))
        rows.append([fraction_label(key), *(fmt_loss(fr.mae.get(m)) for m in methods),
                     *(fmt_improvement(fr.improvement_over_loss_only.get(m)) for m in others),
                     n_text])
    caption = (f"Mean absolute error (nats) of each model's predicted final loss from the "
               f"checkpoints with step ≤ fraction × final step "
               f"({count_text(len(pred.true_final_loss), 'model')}; "
               f"true final loss: the stored loss at the last checkpoint); topology feature "
               f"{md_code(pred.feature or '?')}; ridge is leave-one-model-out with a "
               "cross-validated penalty (— with fewer than 6 models); improvement "
               "= (MAE_loss_only − MAE) / MAE_loss_only; no significance test.")
    return [caption, "", *md_table(headers, rows)]


def _collapse_table(phases: Phases) -> list[str]:
    """The embedding cloud's dip and regrowth per model, its scale beside it."""
    rows = [[m, md_code(f), fmt_value(d.first), fmt_value(d.min), fmt_step(d.min_step),
             fmt_value(d.last), fmt_value(d.depth), fmt_value(d.regrowth)]
            for m, v in phases.per_model.items() for f, d in v.collapse.items()]
    if not rows:
        return []
    caption = ("Collapse and regrowth of the embedding cloud, with its scale beside it: each "
               "feature's first value, its minimum and the step of it, its last value, "
               "depth = minimum / first and regrowth = last / minimum. The median pairwise "
               "distance is the cloud's scale; `*_scaled` features are computed on the cloud "
               "divided by it, so a dip that they do not share is a change of scale; no "
               "test.")
    return [caption, "", *md_table(["Model", "Feature", "First", "Minimum", "At step", "Last",
                                  "Depth", "Regrowth"], rows), ""]


def _phases(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    phases = computed(phases_of(statistics), "phases")
    if not phases.per_model:
        raise Absent("the statistics' `phases` section is empty")
    out: list[str] = []
    roc = {m: v.np_rate_of_change for m, v in phases.per_model.items()
           if v.np_rate_of_change is not None}
    if roc:
        first = next(iter(roc.values()))
        headers = ["Model", "Peak |ΔNP| step", "Peak fraction", "Diminishing-returns step",
                   "Diminishing fraction"]
        rows = [[m, fmt_step(r.peak_step), fmt_percent(r.peak_fraction),
                 fmt_step(r.diminishing_step), fmt_percent(r.diminishing_fraction)]
                for m, r in roc.items()]
        out += [f"Change of `{first.feature or 'np_mean'}` between consecutive checkpoints "
                f"({count_text(len(roc), 'model')}): "
                "the step with the largest |ΔNP|, and the first later step where |ΔNP| < "
                f"{fmt_value(first.threshold)} × the peak; fractions of the final step; no "
                "test.", "", *md_table(headers, rows), ""]
    else:
        out += ["Neural-persistence rate of change: " + absent_note(
            "no model has `np_mean` or `np_seed_mean` (the weight stage did not run)")[0], ""]
    rows = []
    for m, v in phases.per_model.items():
        for f, fit in v.piecewise.items():
            if fit.reason:
                rows.append([m, md_code(f), DASH, DASH, DASH, DASH, fit.reason])
                continue
            rows.append([m, md_code(f), ", ".join(fmt_step(b) for b in fit.breakpoint_steps),
                         ", ".join(f"{s:+.3g}" if finite(s) else DASH for s in fit.slopes),
                         fmt_r2(fit.r2), fmt_count(fit.n), ""])
    if rows:
        ns = [fit.n for v in phases.per_model.values() for fit in v.piecewise.values()]
        out += [f"Continuous three-segment least-squares fit of each feature against log(1 + "
                f"step) per model ({n_text(ns)} checkpoints; exhaustive breakpoint search), "
                "breakpoints converted back to steps, slopes per unit log(1 + step); no test.",
                "", *md_table(["Model", "Feature", "Breakpoint steps", "Segment slopes", "R²", "n",
                             "Note"], rows)]
    else:
        out += ["Three-segment fits: " + absent_note(
            "no model has six or more checkpoints with a phase feature")[0]]
    collapse_rows = _collapse_table(phases)
    return out + ([""] + collapse_rows if collapse_rows else [])


def _scaling(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    sc = computed(scaling_of(statistics), "scaling")
    if not sc.fits:
        raise Absent("the scaling section holds no fit")
    headers = ["Feature", "Exponent b", "R²", "Spearman ρ", "p", "n", "Model", "Note"]
    rows = [[md_code(f), fmt_rho(fit.b), fmt_r2(fit.r2), fmt_rho(fit.spearman_r),
             fmt_p(fit.spearman_p), fmt_count(fit.n), fit.model or DASH,
             fit.reason or fit.note or ""] for f, fit in sc.fits.items()]
    size_text = ", ".join(f"{m} {fmt_params(n)}" for m, n in sc.num_parameters.items())
    caption = (f"Power law f(N) = a·N^b of each feature's final-checkpoint value against "
               f"parameter count N "
               f"({count_text(len(sc.num_parameters) or sc.n_models or 0, 'model')}"
               + (f": {size_text}" if size_text else "")
               + "); b and R² from the log-log least-squares fit (R² in the original "
               "space); Spearman ρ of value vs N with two-sided p (exact permutation for n ≤ 8).")
    return [caption, "", *md_table(headers, rows)]


def _largest_model(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    groups = by_model(ok_records(records))
    if not groups:
        raise Absent("no finished per-checkpoint record was given")
    models = models_of(statistics) or {}
    sizes = {label: (models[label].num_parameters if label in models else None)
             or recs[-1].num_parameters for label, recs in groups.items()}
    known = {k: v for k, v in sizes.items() if finite(v)}
    label = max(known, key=lambda k: known[k]) if known else list(groups)[-1]
    recs = groups[label]
    feats = present_features(recs, LARGEST_MODEL_FEATURES)
    if not feats:
        raise Absent(f"the largest model `{label}` has no neural persistence or weight-row "
                      "feature (the weight stage did not run)")
    quality = [q for q in ("loss", "perplexity") if any(finite(r.measure(q)) for r in recs)]
    headers = ["Step", *(label_of(q) for q in quality), *(label_of(f) for f in feats)]
    rows = [[fmt_step(r.step),
             *(fmt_loss(r.measure(q)) if q == "loss" else fmt_value(r.measure(q))
               for q in quality),
             *(fmt_value(r.features.get(f)) for f in feats)] for r in recs]
    size = fmt_params(known[label]) if label in known else "unknown"
    return [f"The seed's Table 8 validated on Pythia-14m (7 checkpoints); this table is the "
            f"trajectory of the largest model this run contains, `{label}` ({size} parameters, "
            f"n = {len(recs)} checkpoints), values from its records; descriptive, no test.", "",
            *md_table(headers, rows)]


PART = Part(
    "Part B. Weight-space topology over training",
    "The seed paper's tables (it measured small GPTs it trained), computed for the "
    "models of this study.",
    (("Table 1. Model configurations", _configurations),
     ("Table 2. Weight-row H0 total persistence vs loss", _weight_h0),
     ("Table 3. Mean neural persistence vs loss", _neural_persistence),
     ("Table 4. Weight-row H1 total persistence vs loss", _weight_h1),
     ("Table 5. Final-loss prediction from early checkpoints", _prediction),
     ("Table 6. Phase transitions", _phases),
     ("Table 7. Scaling of final-checkpoint features with model size", _scaling),
     ("Table 8. Weight-feature trajectory of the largest model", _largest_model)))
