"""``results/summary.md``: the seed studies' tables, reproduced from this run's data.

:func:`summary_markdown` renders markdown from the statistics written by
:func:`toposig.analysis.compute.compute_statistics` and the per-checkpoint records
(``data/all_results.json``). Every number printed is a value of ``statistics`` (or, in
the per-checkpoint trajectory tables, of ``records``), formatted but never recomputed,
so the markdown can be checked against ``statistics.json`` number by number. A section
of the statistics that is missing, or that holds a ``reason`` instead of results, gives
a one-line note saying why its table is absent.

Number formats (the same in every table): correlations (ρ, partial r, first-difference
ρ, bootstrap CI bounds, power-law exponents) ``+.3f``; p-values (raw and Holm) ``.2g``;
R² ``.3f``; losses and MAEs ``.4f``; training steps as integers; parameter counts with
thousands separators; shares of training and improvements as percentages ``.1f``; other
values ``.4g`` (``.1f`` from 1000 up).

Parts:

* A, the seed report: per-model trajectories (A1), the final checkpoints side by side
  (A2), topological vs spectral embedding features' correlations with the target (A3);
* B, the seed paper: tables 1 to 8 (configurations; weight-row H0 total persistence,
  neural persistence and weight-row H1 total persistence against the loss; final-loss
  prediction; phases; scaling with size; the largest model's weight-feature trajectory);
* C, ours: every feature × model (and pooled) under the raw, partial (log step) and
  first-difference tests, and which features survive all of them;
* E, only for a study of seed ensembles (``ensembles`` in the statistics): the test
  across seeds at fixed fractions of training (E1) and the seed-to-seed spread as a
  noise floor (E2).

Nothing here touches the disk: :func:`toposig.analyze.write_summary` writes the summary.
Stage 3 as a whole (reading the folder, computing and writing the statistics, this
summary and the figures) is :func:`toposig.analyze.analyze`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from toposig.analysis.correlations import by_model, feature_group
from toposig.analysis.inference import CALIBRATED, UNCALIBRATED
from toposig.families.embedding import SPECTRUM
from toposig.families.embedding import TOPOLOGY as EMBEDDING_TOPOLOGY
from toposig.families.registry import groups as feature_groups
from toposig.families.registry import owner
from toposig.records import Record, records_from_json
from toposig.records.controlled import TREND_KINDS, Controlled, ControlledTest, FeatureSummary
from toposig.records.ensembles import AcrossSeeds, Verdict
from toposig.records.positive_controls import Alignment
from toposig.records.sections import Phases, SectionError
from toposig.records.statistics import (
    Correlation,
    ModelSummary,
    Statistics,
    StatisticsError,
    about_of,
    controlled_of,
    correlations_of,
    ensembles_of,
    models_of,
    phases_of,
    positive_controls_of,
    prediction_by_feature_of,
    prediction_of,
    scaling_of,
    stability_of,
)

DASH = "—"

HEADINGS: tuple[str, ...] = (
    "A1. Training trajectories",
    "A2. Cross-model comparison at the final checkpoint",
    "A3. Topological vs spectral features: correlation with the target",
    "Table 1. Model configurations",
    "Table 2. Weight-row H0 total persistence vs loss",
    "Table 3. Mean neural persistence vs loss",
    "Table 4. Weight-row H1 total persistence vs loss",
    "Table 5. Final-loss prediction from early checkpoints",
    "Table 6. Phase transitions",
    "Table 7. Scaling of final-checkpoint features with model size",
    "Table 8. Weight-feature trajectory of the largest model",
    "C1. Robustness of every feature's correlation",
    "C2. Features that survive every control",
    "C3. Stability of the embedding topology over text resamples",
    "C4. Calibrated tests: intervals, calibration on each run's design, power",
    "D1. Curvature, loss-landscape and gradient features vs the target",
    "D2. Final-loss prediction from early checkpoints, feature by feature",
)

LABELS: dict[str, str] = {
    "perplexity": "Perplexity",
    "loss": "Loss",
    "mlm_loss": "Masked-LM loss",
    "final_mlm_loss": "Final masked-LM loss",
    "h1_n_features": "H1 bars",
    "h1_total_persistence": "H1 total pers.",
    "h1_persistence_entropy": "H1 pers. entropy",
    "h0_total_persistence": "H0 total pers.",
    "rankme": "RankMe",
    "np_mean": "NP mean",
    "np_std": "NP std",
    "np_seed_mean": "NP mean (seed def.)",
    "weight_h0_total": "Weight H0 total",
    "weight_h1_total": "Weight H1 total",
    "weight_l2_norm": "Weight L2 norm",
    "final_loss": "Final loss",
    "final_perplexity": "Final perplexity",
}

QUALITY_TEXT = {"perplexity": "perplexity measured on the analysed texts",
                "loss": "loss as stored with the checkpoint",
                "mlm_loss": "masked-LM loss (an encoder's) on a seeded 15% of the analysed "
                            "texts' tokens"}
QUALITY = ("perplexity", "loss", "mlm_loss")
TRAJECTORY_FEATURES = ("h1_n_features", "h1_total_persistence", "h1_persistence_entropy",
                       "rankme", "np_mean", "weight_h0_total")
FINAL_FEATURES = ("h1_n_features", "h1_total_persistence", "h1_persistence_entropy", "rankme",
                  "np_mean", "np_seed_mean", "weight_h0_total", "weight_h1_total")
LARGEST_MODEL_FEATURES = ("np_mean", "np_std", "np_seed_mean", "weight_h0_total")
CONTROL_NAMES = {"raw": "raw", "partial_log_step": "partial", "first_differences": "first-diff",
                 "beyond_baseline": "beyond-baseline", "detrended": "detrended",
                 "partial_first_differences": "partial-diff",
                 "above_noise_floor": "above-noise-floor"}


# ---------------------------------------------------------------------------- formats

def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_rho(x) -> str:
    """Correlation-like values (ρ, r, CI bounds, exponents): ``+.3f``."""
    return f"{x:+.3f}" if _finite(x) else DASH


def fmt_p(x) -> str:
    """p-values, raw or adjusted: ``.2g``."""
    return f"{x:.2g}" if _finite(x) else DASH


def fmt_ci(lo, hi) -> str:
    """A confidence interval ``[lo, hi]``, bounds as :func:`fmt_rho`."""
    return f"[{lo:+.3f}, {hi:+.3f}]" if _finite(lo) and _finite(hi) else DASH


def fmt_r2(x) -> str:
    return f"{x:.3f}" if _finite(x) else DASH


def fmt_loss(x) -> str:
    """Losses and mean absolute errors (nats): ``.4f``."""
    return f"{x:.4f}" if _finite(x) else DASH


def fmt_value(x) -> str:
    """Any other value: ``.4g`` below 1000, ``.1f`` from 1000 up."""
    if not _finite(x):
        return DASH
    return f"{x:.1f}" if abs(x) >= 1000 else f"{x:.4g}"


def _fmt_whole(x) -> str:
    """An integer when ``x`` is one (up to float error), else ``.4g``; — when undefined."""
    if not _finite(x):
        return DASH
    r = round(x)
    return str(int(r)) if abs(x - r) <= 1e-6 * max(1.0, abs(x)) else f"{x:.4g}"


def fmt_step(x) -> str:
    """A training step (or a difference of steps), as :func:`_fmt_whole` writes it."""
    return _fmt_whole(x)


def fmt_count(x) -> str:
    """A count (checkpoints, pairs, layers, ...), as :func:`_fmt_whole` writes it."""
    return _fmt_whole(x)


def fmt_params(x) -> str:
    return f"{int(x):,}" if _finite(x) else DASH


def fmt_percent(x) -> str:
    """A share of training (0.3 -> ``30.0%``)."""
    return f"{100 * x:.1f}%" if _finite(x) else DASH


def fmt_improvement(x) -> str:
    """A relative improvement, signed (0.106 -> ``+10.6%``)."""
    return f"{100 * x:+.1f}%" if _finite(x) else DASH


def _label(name: str) -> str:
    return LABELS.get(name, name)


def _code(name: str) -> str:
    return f"`{name}`"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _absent(reason: str) -> list[str]:
    reason = reason.strip().rstrip(".")
    return [f"_Absent because {reason}._"]


def _n_text(ns: Sequence) -> str:
    """``n = 18`` for one distinct count, ``n = 17–18`` for several, ``n = ?`` for none."""
    vals = sorted({int(n) for n in ns if _finite(n)})
    if not vals:
        return "n = ?"
    return f"n = {vals[0]}" if len(vals) == 1 else f"n = {vals[0]}–{vals[-1]}"


def _count(n: int, noun: str) -> str:
    return f"n = {n} {noun}" + ("" if n == 1 else "s")


_S = TypeVar("_S")


class _Absent(Exception):
    """A table cannot be drawn; the message says why."""


def _computed(section: _S | None, name: str) -> _S:
    """A typed section of the statistics (``name``), or :class:`_Absent` when there is
    none or it holds only the reason it was not computed."""
    if section is None:
        raise _Absent(f"the statistics have no `{name}` section")
    if getattr(section, "reason", None):
        raise _Absent(f"`{name}` was not computed: {section.reason}")
    return section


# ---------------------------------------------------------------------------- part A

def _ok_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.ok]


def _present(recs: Sequence[Record], names: Sequence[str]) -> list[str]:
    return [f for f in names if any(_finite(r.features.get(f)) for r in recs)]


def _trajectories(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    groups = by_model(_ok_records(records))
    if not groups:
        raise _Absent("no finished per-checkpoint record was given")
    out: list[str] = []
    for label, recs in groups.items():
        quality = [q for q in QUALITY if any(_finite(r.measure(q)) for r in recs)]
        feats = _present(recs, TRAJECTORY_FEATURES)
        headers = ["Step", *(_label(q) for q in quality), *(_label(f) for f in feats)]
        rows = []
        for r in recs:
            rows.append([fmt_step(r.step),
                         *(fmt_loss(r.measure(q)) if q == "loss" else fmt_value(r.measure(q))
                           for q in quality),
                         *(fmt_value(r.features.get(name)) for name in feats)])
        measured = [QUALITY_TEXT[q] for q in quality]
        out += [f"#### {label}", "",
                f"Per-checkpoint values from the records of `{label}` (n = {len(recs)} "
                f"checkpoints; {'; '.join(measured) or 'no quality measure'}; features: "
                f"{', '.join(_code(x) for x in feats) or 'none'}); descriptive, no test.", "",
                *_table(headers, rows), ""]
    return out[:-1]


def _final_comparison(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    models = _models(statistics)
    feats = [f for f in FINAL_FEATURES
             if any(_finite(m.final_features.get(f)) for m in models.values())]
    quality = [q for q in QUALITY
               if any(_finite(m.final_quality.get(q)) for m in models.values())]
    headers = ["Model", "Parameters", "Final step", *(_label(f"final_{q}") for q in quality),
               *(_label(f) for f in feats)]
    rows = []
    for label, m in models.items():
        rows.append([label, fmt_params(m.num_parameters), fmt_step(m.final_step),
                     *(_quality_cell(m, q) for q in quality),
                     *(fmt_value(m.final_features.get(f)) for f in feats)])
    return [f"Each model's last analysed checkpoint ({_count(len(models), 'model')}; values from "
            "`statistics.models`); descriptive, no test.", "", *_table(headers, rows)]


def _models(statistics: Statistics | Mapping) -> Mapping[str, ModelSummary]:
    """The per-model summaries, or :class:`_Absent` saying why there are none."""
    models = models_of(statistics)
    if models is None:
        raise _Absent("the statistics have no `models` section")
    if not models:
        raise _Absent("the statistics' `models` section is empty")
    return models


def _quality_cell(model: ModelSummary, measure: str) -> str:
    """A model's final quality ``measure``, the loss to its own precision."""
    value = model.final_quality.get(measure)
    return fmt_loss(value) if measure == "loss" else fmt_value(value)


def _topo_vs_spectral(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    corr = correlations_of(statistics)
    if corr is None:
        raise _Absent("the statistics have no `correlations` section")
    target = corr.target or about_of(statistics).target or "the target"
    per_model, pooled = corr.per_model, corr.pooled
    names = list(pooled) or list(next(iter(per_model.values()), {}))
    fams = {EMBEDDING_TOPOLOGY: "topological", SPECTRUM: "spectral"}
    feats = [f for f in names if feature_group(f) in fams]
    if not feats:
        raise _Absent("the run has no embedding-space topological or spectral feature "
                      "(weights-only run)")
    feats.sort(key=lambda f: list(fams).index(feature_group(f)))
    controlled = controlled_of(statistics) or Controlled()
    models = list(per_model)
    headers = ["Feature", "Family", *(f"{m} ρ (p)" for m in models)]
    if pooled:
        headers.append("pooled ρ (p)")
    headers.append("Holm-significant models")
    rows = []
    ns: list = []
    for f in feats:
        tests = [per_model[m].get(f) for m in models]
        ns += [c.n if c else None for c in tests]
        cells = [_rho_p(c) for c in [*tests, *([pooled.get(f)] if pooled else [])]]
        s = controlled.summary.get(f)
        sig = (f"{s.significant['raw']}/{s.n_models}"
               if s and controlled.targets.get(f, target) == target else DASH)
        rows.append([_code(f), fams[feature_group(f)], *cells, sig])
    pooled_n = _n_text([c.n if (c := pooled.get(f)) else None for f in feats]) if pooled else None
    caption = (f"Spearman ρ (two-sided p, uncorrected) of each embedding feature with {target} "
               f"across checkpoints, per model ({_n_text(ns)} each)"
               + (f" and pooled over models ({pooled_n})" if pooled_n else "")
               + "; last column: models where the Holm-adjusted p < "
               + f"{controlled.level} (C1).")
    return [caption, "", *_table(headers, rows)]


def _rho_p(c: Correlation | None) -> str:
    """``ρ (p)`` of a correlation, dashes where it is undefined or absent."""
    return (f"{fmt_rho(c.spearman_r if c else None)} "
            f"({fmt_p(c.spearman_p if c else None)})")


def _controlled(statistics: Statistics | Mapping) -> Controlled:
    """The ``controlled`` section, or :class:`_Absent` saying why there is none."""
    controlled = _computed(controlled_of(statistics), "controlled")
    if not (controlled.targets or controlled.per_model or controlled.pooled
            or controlled.summary):
        raise _Absent("the statistics' `controlled` section is empty")
    return controlled


# ---------------------------------------------------------------------------- part B

def _configurations(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    models = _models(statistics)
    groups = by_model(_ok_records(records))
    arch = [("hidden_size", "Hidden"), ("num_layers", "Layers"),
            ("num_attention_heads", "Heads")]
    last = {label: recs[-1] for label, recs in groups.items() if recs}
    arch = [(k, h) for k, h in arch if any(_finite(r.measure(k)) for r in last.values())]
    quality = [q for q in ("loss", "perplexity")
               if any(_finite(m.final_quality.get(q)) for m in models.values())]
    headers = ["Model", "Parameters", *(h for _, h in arch), "Checkpoints", "Final step",
               *(_label(f"final_{q}") for q in quality)]
    rows = []
    for label, m in models.items():
        r = last.get(label)
        rows.append([label, fmt_params(m.num_parameters),
                     *(fmt_count(r.measure(k) if r else None) for k, _ in arch),
                     fmt_count(m.n_checkpoints), fmt_step(m.final_step),
                     *(_quality_cell(m, q) for q in quality)])
    return [f"Models analysed (n = {len(models)}; sizes and final quality from "
            "`statistics.models`, architecture from the last record of each model; final "
            "loss is the checkpoint's stored loss); descriptive, no test.", "",
            *_table(headers, rows)]


def _controlled_entries(statistics: Statistics | Mapping, feature: str
                        ) -> list[tuple[str, ControlledTest]]:
    """``[(model or "pooled", test), ...]`` of one feature's controlled tests."""
    rows = _controlled(statistics).entries(feature)
    if not rows:
        raise _Absent(f"no record has `{feature}` (the weight stage did not run, or its "
                      "feature was not computed)")
    return rows


def _holm_text(c: Controlled) -> str:
    """How many tests each Holm family holds (statistics from before the families were
    counted say the number of feature × model entries)."""
    by = c.n_tests_by_control
    if by is None:
        return f"Holm over all {_or_unknown(c.n_tests)} feature × model tests"
    names = ", ".join(f"{CONTROL_NAMES.get(k, k)} {v}" for k, v in by.items())
    return f"Holm within each control over its defined feature × model tests ({names})"


def _or_unknown(value: object) -> object:
    return "?" if value is None else value


def _bootstrap_text(statistics: Statistics | Mapping) -> str:
    c = controlled_of(statistics) or Controlled()
    return f"{_interval_text(c)}; {_holm_text(c)}"


def _interval_text(c: Controlled) -> str:
    """How the 95% intervals were made (statistics from before the surrogate intervals
    say the percentile bootstrap)."""
    if c.ci_method:
        return (f"95% CI from {_or_unknown(c.n_surrogates)} phase-randomised surrogates "
                "(respects autocorrelation; none pooled over checkpoints)")
    return (f"95% percentile bootstrap CI over checkpoints ({_or_unknown(c.n_bootstrap)} "
            "resamples)")


def _feature_vs_target(statistics: Statistics | Mapping, feature: str, what: str) -> list[str]:
    entries = _controlled_entries(statistics, feature)
    targets = sorted({e.target for _, e in entries if e.target})
    headers = ["Model", "n", "Spearman ρ", "p", "95% CI", "Holm p"]
    rows = [[m, fmt_count(e.n), fmt_rho(e.spearman_r), fmt_p(e.spearman_p),
             fmt_ci(e.ci_low, e.ci_high), fmt_p(e.holm_p)]
            for m, e in entries]
    caption = (f"Spearman ρ between {what}, {_code(feature)}, and {' / '.join(targets) or '?'} "
               f"across checkpoints, per model and pooled "
               f"({_n_text([e.n for _, e in entries])}); two-sided p; "
               f"{_bootstrap_text(statistics)}.")
    return [caption, "", *_table(headers, rows)]


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
    if not _finite(rho):
        return "undefined"
    if not entry.significant.get("raw"):
        return "not significant (Holm)"
    if rho < 0:
        return f"NP ↑ as {target} ↓"
    return f"NP ↓ as {target} ↓" if rho > 0 else "flat"


def _neural_persistence(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    _controlled(statistics)
    rows = []
    ns = []
    targets = set()
    for feature, name in (("np_seed_mean", "seed's"), ("np_mean", "ours")):
        try:
            entries = _controlled_entries(statistics, feature)
        except _Absent:
            continue
        for m, e in entries:
            ns.append(e.n)
            targets.add(e.target)
            rows.append([m, f"{_code(feature)} ({name})", fmt_count(e.n),
                         fmt_rho(e.spearman_r), fmt_p(e.spearman_p),
                         fmt_ci(e.ci_low, e.ci_high), fmt_p(e.holm_p), _direction(e)])
    if not rows:
        raise _Absent("no record has neural persistence (`np_mean` / `np_seed_mean`)")
    headers = ["Model", "NP variant", "n", "Spearman ρ", "p", "95% CI", "Holm p",
               "Direction"]
    caption = (f"Spearman ρ between mean neural persistence over weight matrices and "
               f"{' / '.join(sorted(t for t in targets if t)) or '?'} across checkpoints "
               f"({_n_text(ns)}); `np_seed_mean`: per-matrix max scaling, p = 1, / (n − 1) "
               "(the seed's); `np_mean`: global max scaling, p = 2, / sqrt(n − 1) (Rieck et "
               f"al.); {_bootstrap_text(statistics)}; direction only where Holm p < 0.05.")
    return [caption, "", *_table(headers, rows)]


def _fraction_label(key: str) -> str:
    try:
        return fmt_percent(float(key)).replace(".0%", "%")
    except ValueError:
        return key


def _prediction(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pred = _computed(prediction_of(statistics), "prediction")
    if not pred.fractions:
        raise _Absent("the prediction section holds no training fraction")
    methods = list(pred.methods or next(iter(pred.fractions.values())).mae)
    if not methods:
        raise _Absent("the prediction section names no method")
    others = [m for m in methods if m != "loss_only"]
    headers = ["Train fraction", *(f"{m} MAE" for m in methods),
               *(f"{m} vs loss_only" for m in others), "Models"]
    rows = []
    for key, fr in pred.fractions.items():
        n = fr.n_models
        n_vals = sorted({v for v in n.values() if _finite(v)})
        n_text = (str(n_vals[0]) if len(n_vals) == 1
                  else ", ".join(f"{m}: {n.get(m, DASH)}" for m in methods))
        rows.append([_fraction_label(key), *(fmt_loss(fr.mae.get(m)) for m in methods),
                     *(fmt_improvement(fr.improvement_over_loss_only.get(m)) for m in others),
                     n_text])
    caption = (f"Mean absolute error (nats) of each model's predicted final loss from the "
               f"checkpoints with step ≤ fraction × final step "
               f"({_count(len(pred.true_final_loss), 'model')}; "
               f"true final loss: the stored loss at the last checkpoint); topology feature "
               f"{_code(pred.feature or '?')}; ridge is leave-one-model-out with a "
               "cross-validated penalty (— with fewer than 6 models); improvement "
               "= (MAE_loss_only − MAE) / MAE_loss_only; no significance test.")
    return [caption, "", *_table(headers, rows)]


def _collapse_table(phases: Phases) -> list[str]:
    """The embedding cloud's dip and regrowth per model, its scale beside it."""
    rows = [[m, _code(f), fmt_value(d.first), fmt_value(d.min), fmt_step(d.min_step),
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
    return [caption, "", *_table(["Model", "Feature", "First", "Minimum", "At step", "Last",
                                  "Depth", "Regrowth"], rows), ""]


def _phases(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    phases = _computed(phases_of(statistics), "phases")
    if not phases.per_model:
        raise _Absent("the statistics' `phases` section is empty")
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
                f"({_count(len(roc), 'model')}): "
                "the step with the largest |ΔNP|, and the first later step where |ΔNP| < "
                f"{fmt_value(first.threshold)} × the peak; fractions of the final step; no "
                "test.", "", *_table(headers, rows), ""]
    else:
        out += ["Neural-persistence rate of change: " + _absent(
            "no model has `np_mean` or `np_seed_mean` (the weight stage did not run)")[0], ""]
    rows = []
    for m, v in phases.per_model.items():
        for f, fit in v.piecewise.items():
            if fit.reason:
                rows.append([m, _code(f), DASH, DASH, DASH, DASH, fit.reason])
                continue
            rows.append([m, _code(f), ", ".join(fmt_step(b) for b in fit.breakpoint_steps),
                         ", ".join(f"{s:+.3g}" if _finite(s) else DASH for s in fit.slopes),
                         fmt_r2(fit.r2), fmt_count(fit.n), ""])
    if rows:
        ns = [fit.n for v in phases.per_model.values() for fit in v.piecewise.values()]
        out += [f"Continuous three-segment least-squares fit of each feature against log(1 + "
                f"step) per model ({_n_text(ns)} checkpoints; exhaustive breakpoint search), "
                "breakpoints converted back to steps, slopes per unit log(1 + step); no test.",
                "", *_table(["Model", "Feature", "Breakpoint steps", "Segment slopes", "R²", "n",
                             "Note"], rows)]
    else:
        out += ["Three-segment fits: " + _absent(
            "no model has six or more checkpoints with a phase feature")[0]]
    collapse_rows = _collapse_table(phases)
    return out + ([""] + collapse_rows if collapse_rows else [])


def _scaling(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    sc = _computed(scaling_of(statistics), "scaling")
    if not sc.fits:
        raise _Absent("the scaling section holds no fit")
    headers = ["Feature", "Exponent b", "R²", "Spearman ρ", "p", "n", "Model", "Note"]
    rows = [[_code(f), fmt_rho(fit.b), fmt_r2(fit.r2), fmt_rho(fit.spearman_r),
             fmt_p(fit.spearman_p), fmt_count(fit.n), fit.model or DASH,
             fit.reason or fit.note or ""] for f, fit in sc.fits.items()]
    size_text = ", ".join(f"{m} {fmt_params(n)}" for m, n in sc.num_parameters.items())
    caption = (f"Power law f(N) = a·N^b of each feature's final-checkpoint value against "
               f"parameter count N ({_count(len(sc.num_parameters) or sc.n_models or 0, 'model')}"
               + (f": {size_text}" if size_text else "")
               + "); b and R² from the log-log least-squares fit (R² in the original "
               "space); Spearman ρ of value vs N with two-sided p (exact permutation for n ≤ 8).")
    return [caption, "", *_table(headers, rows)]


def _largest_model(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    groups = by_model(_ok_records(records))
    if not groups:
        raise _Absent("no finished per-checkpoint record was given")
    models = models_of(statistics) or {}
    sizes = {label: (models[label].num_parameters if label in models else None)
             or recs[-1].num_parameters for label, recs in groups.items()}
    known = {k: v for k, v in sizes.items() if _finite(v)}
    label = max(known, key=lambda k: known[k]) if known else list(groups)[-1]
    recs = groups[label]
    feats = _present(recs, LARGEST_MODEL_FEATURES)
    if not feats:
        raise _Absent(f"the largest model `{label}` has no neural persistence or weight-row "
                      "feature (the weight stage did not run)")
    quality = [q for q in ("loss", "perplexity") if any(_finite(r.measure(q)) for r in recs)]
    headers = ["Step", *(_label(q) for q in quality), *(_label(f) for f in feats)]
    rows = [[fmt_step(r.step),
             *(fmt_loss(r.measure(q)) if q == "loss" else fmt_value(r.measure(q))
               for q in quality),
             *(fmt_value(r.features.get(f)) for f in feats)] for r in recs]
    size = fmt_params(known[label]) if label in known else "unknown"
    return [f"The seed's Table 8 validated on Pythia-14m (7 checkpoints); this table is the "
            f"trajectory of the largest model this run contains, `{label}` ({size} parameters, "
            f"n = {len(recs)} checkpoints), values from its records; descriptive, no test.", "",
            *_table(headers, rows)]


# ---------------------------------------------------------------------------- part C

def short_reason(reason: str | None) -> str:
    """A few words for why a partial correlation is undefined."""
    if not reason:
        return "too few points"
    text = reason.lower()
    for who in ("target", "feature"):
        if text.startswith(f"the {who} is a monotone function of the step"):
            return f"{who} monotone in step"
    if text.startswith("no variation left"):
        return "no variation left"
    return reason.split(":")[0][:40]


def _survives(entry: ControlledTest) -> str:
    sig = entry.significant
    applicable = [key for key in CONTROL_NAMES if sig.get(key) is not None]
    kept = [CONTROL_NAMES[key] for key in applicable if sig.get(key)]
    if kept and len(kept) == len(applicable):
        return f"all {len(applicable)}"
    return ", ".join(kept) or "none"


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
    controlled = _controlled(statistics)
    features = controlled.features()
    if not features:
        raise _Absent("no feature was tested")
    trend = controlled.n_tests_by_control is not None  # with the detrended controls
    headers = ["Feature", "Model", "Target", "n", "ρ [95% CI]", "Holm p", "Partial r",
               "Partial Holm p", "First-diff ρ", "First-diff Holm p", "Baseline",
               "Beyond-baseline r", "Beyond-baseline Holm p",
               *(["Detrended ρ", "Detrended Holm p", "Partial-diff ρ", "Partial-diff Holm p",
                  "Noise floor"] if trend else []), "Survives"]
    rows = []
    for f, m, e in controlled.every_entry(features):
        if _finite(e.partial_r):
            partial = fmt_rho(e.partial_r)
        else:
            partial = f"undefined: {short_reason(e.partial_undefined)}"
        rows.append([_code(f), m, e.target or DASH, fmt_count(e.n),
                     _rho_ci(e), fmt_p(e.holm_p), partial, fmt_p(e.partial_holm_p),
                     fmt_rho(e.diff_r), fmt_p(e.diff_holm_p),
                     _code(e.baseline) if e.baseline else DASH,
                     fmt_rho(e.beyond_r), fmt_p(e.beyond_holm_p),
                     *(_trend_cells(e) if trend else []), _survives(e)])
    ns = [e.n for tests in controlled.per_model.values() for e in tests.values()]
    caption = (f"Every feature × model (and pooled) against its target "
               f"({_targets_text(controlled)}; per model {_n_text(ns)} checkpoints): "
               f"Spearman ρ with {_bootstrap_text(statistics)} (separately for each test); "
               "partial Spearman controlling for log(1 + step) (pooled: also log parameters); "
               "Spearman of first differences between consecutive checkpoints; beyond the "
               "baseline: partial Spearman of first differences controlling for the first "
               "differences of the best baseline of the same space, the one that leaves the "
               "feature least (weight topology: `weight_l2_norm`, and where measured "
               "`weight_spectral_norm_mean`, `weight_alpha_mean`, "
               "`weight_alpha_weighted_mean`; embedding topology: "
               "`mean_norm`, `effective_rank_cov`, `rankme`; the loss surface's merge tree: "
               "`hessian_trace`; gradient topology: `grad_norm_mean`; — where not "
               "applicable); a "
               f"control is survived when its Holm p < {controlled.level} with "
               "the raw ρ's sign.")
    if trend:
        caption += (" Within each model, the two controls tried on simulated runs "
                    "(`toposig.analysis.trend_controls`): detrended ρ, of each series' "
                    "deviation from its own REML smoothing spline in log(1 + step), and "
                    "partial-diff ρ, of first differences regressed on a smooth function of "
                    f"log step, each with a p from {_or_unknown(controlled.n_surrogates)} "
                    "phase-randomised surrogates (Holm as above; survived at either sign); "
                    "noise floor: below when fewer than half the feature's consecutive "
                    "changes exceed 1.96 × their bootstrap-resample standard errors (then it "
                    "cannot survive in that model). The plain first differences and the "
                    "partial on log step are not calibrated under shared deceleration "
                    "(`bench/bench_controls_calibration.py`); the detrended controls are.")
    return [caption, "", *_table(headers, rows)]


def _survivors(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    summary = _controlled(statistics).summary
    if not summary:
        raise _Absent("the controlled analysis holds no per-feature summary")

    def names(pred: Callable[[FeatureSummary], bool]) -> str:
        hits = [_code(f) for f, s in summary.items() if pred(s)]
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
        raise _Absent("the run had no bootstrap resamples of the texts (--resamples B)")
    headers = ["Feature", "Model", "Median bootstrap s.e.", "Median |change|",
               "Change / s.e.", "Resolved changes", "Range / s.e.", "Pairs"]
    rows = []
    for f in STABILITY_FEATURES:
        for model, table in section.per_model.items():
            e = table.get(f)
            if e is None:
                continue
            rows.append([_code(f), model, fmt_value(e.median_se),
                         fmt_value(e.median_abs_change), fmt_value(e.change_to_se),
                         fmt_percent(e.resolved_share), fmt_value(e.range_to_se),
                         fmt_count(e.n_pairs)])
    if not rows:
        raise _Absent("no PH feature carries a bootstrap spread")
    caption = ("Bootstrap over texts: each checkpoint's PH features recomputed on resamples of "
               "the analysed texts (the same resamples at every checkpoint); s.e. = their "
               "standard deviation; a change between consecutive checkpoints is resolved "
               "when |ΔF| > 1.96·sqrt(se_a² + se_b²); range / s.e. compares the whole "
               "trajectory with the noise; descriptive, no test.")
    return [caption, "", *_table(headers, rows)]


# ---------------------------------------------------------------------------- document

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
    rate = f"{check.null_rate:.3f}" if _finite(check.null_rate) else DASH
    if check.status != CALIBRATED:
        rate += " (uncalibrated)"
    return [rate, f"{_mdc(check.mdc)} ({_mdc(check.mdc_holm)})"]


def _mdc(value) -> str:
    return f"{value:.2f}" if _finite(value) else "> 0.9"


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
    mdcs = [c.mdc_holm for c in usable if _finite(c.mdc_holm)]
    if not mdcs:
        return "none found; below 80 % power even at coupling 0.9"
    return f"no association above {min(m for m in mdcs if m is not None):.2f}"


def _calibrated_tests(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    controlled = _controlled(statistics)
    tests = [*controlled.per_model.values(), controlled.pooled]
    if not any(e.design is not None for table in tests for e in table.values()):
        raise _Absent("these statistics carry no design checks (computed before they "
                      "existed, or with design_runs=0)")
    headers = ["Feature", "Model", "n", "Detrended ρ [95% CI]", "Detrended Holm p",
               "Detrended null rate", "Detrended MDC (Holm)", "Partial-diff ρ [95% CI]",
               "Partial-diff Holm p", "Partial-diff null rate", "Partial-diff MDC (Holm)",
               "Reads as"]
    rows = []
    for f, m, e in controlled.every_entry(list(controlled.targets)):
        rows.append([_code(f), m, fmt_count(e.n),
                     _interval_cell(e, "detrended"), fmt_p(e.detrended.holm_p),
                     *_design_cells(e, "detrended"),
                     _interval_cell(e, "pfd"), fmt_p(e.pfd.holm_p),
                     *_design_cells(e, "partial_first_differences"), reading(e)])
    caption = ("The two controls that hold their size where simulations say so, per feature "
               "× model and pooled over models (a fixed-effect meta-analysis of the models' "
               "own statistics against their own surrogates). Interval: "
               f"{_interval_text(controlled)}. Null rate: the share of simulated null runs "
               "of this test's own design (its fitted trends and noise) with p < "
               f"{controlled.level}; uncalibrated when it exceeds alpha beyond "
               "chance (binomial p < 0.01), and then the test is not counted as significant. "
               "MDC: the smallest coupling between the two series' fluctuations that the "
               "test finds with 80 % power on that design, at alpha and (in brackets) at "
               "alpha / the Holm family's size; > 0.9 when even a coupling of 0.9 is found "
               "less often. Reads as: an association where a calibrated control survives "
               "Holm, else no association above the smallest calibrated MDC (Holm). "
               f"{controlled.design_method or ''}")
    return [caption.strip(), "", *_table(headers, rows)]


def _probe_correlations(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    controlled = _controlled(statistics)
    per_model, pooled = controlled.per_model, controlled.pooled
    names = list(pooled) or list(next(iter(per_model.values()), {}))
    fams = [g for g in feature_groups() if owner(g).probes_loss]
    feats = sorted((f for f in names if feature_group(f) in fams),
                   key=lambda f: fams.index(feature_group(f)))
    if not feats:
        raise _Absent("the run has no curvature, landscape or gradient feature (run with "
                      "`--signatures ...,landscape,gradients`)")
    models = list(per_model)
    headers = ["Feature", "Family", "Target", *(f"{m} ρ (Holm p)" for m in models)]
    if pooled:
        headers.append("pooled ρ (Holm p)")
    headers.append("Survives (pooled)")
    rows, ns = [], []
    absent = ControlledTest()
    for f in feats:
        cells, target = [], DASH
        for e in [*(per_model[m].get(f, absent) for m in models),
                  *([pooled.get(f, absent)] if pooled else [])]:
            ns.append(e.n)
            target = e.target or target
            cells.append(f"{fmt_rho(e.spearman_r)} ({fmt_p(e.holm_p)})")
        rows.append([_code(f), feature_group(f).label, target, *cells,
                     _survives(pooled[f]) if f in pooled else DASH])
    caption = (f"Spearman ρ (Holm-adjusted p, as in C1) of each feature of the landscape and "
               f"gradient families with its target across checkpoints, per model and pooled "
               f"({_n_text(ns)}); last column: the pooled controls survived (C1). Curvature: "
               "top Hessian eigenvalues and Hutchinson trace of the loss on the probe batch; "
               "landscape: the merge tree of the loss surface around the checkpoint; "
               "gradients: Vietoris–Rips homology and statistics of per-example gradients.")
    return [caption, "", *_table(headers, rows)]


def _prediction_by_feature(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    table = prediction_by_feature_of(statistics)
    if table is None or not table.per_feature:
        raise _Absent("no feature to predict from (statistics.prediction_by_feature)")
    headers = ["Feature", "Train fraction", "loss_only MAE", "topology_only MAE",
               "combined MAE", "ridge MAE", "topology_only vs loss_only",
               "combined vs loss_only", "Models"]
    rows = []
    for f, fractions in table.per_feature.items():
        for key, fr in fractions.items():
            imp = fr.improvement_over_loss_only
            rows.append([_code(f), _fraction_label(key),
                         *(fmt_loss(fr.mae.get(m)) for m in
                           ("loss_only", "topology_only", "combined", "ridge")),
                         fmt_improvement(imp.get("topology_only")),
                         fmt_improvement(imp.get("combined")),
                         fmt_count(fr.n_models.get("topology_only"))])
    caption = ("Table 5's predictors with each feature in place of neural persistence: "
               "topology_only extrapolates the feature's early log-step trend through its "
               "coupling to the loss, combined is its mean with loss_only, ridge uses the "
               "feature's early value and slope and the last early loss (leave one model "
               "out; none with fewer than 6 models); MAE in nats over the models where the "
               "predictor is defined (Models: "
               "those of topology_only); no significance test.")
    return [caption, "", *_table(headers, rows)]


# ---------------------------------------------------------------------------- part E

def _group_cell(c: AcrossSeeds | None) -> str:
    """``r [lo, hi]`` with the baseline controlled for, or the reason there is none."""
    if c is None:
        return DASH
    if c.r is None:
        return f"undefined (n = {c.n_seeds})"
    text = f"{fmt_rho(c.r)} {fmt_ci(c.ci_low, c.ci_high)}"
    if c.baseline:
        text += f" given {c.baseline}"
    if c.calibrated is False:  # too few seeds for the interval to hold its size
        return text + f" (uncalibrated: {c.n_seeds} seeds)"
    return text + (" *" if c.beyond_loss else "")


def _advantage_cell(c: AcrossSeeds | None) -> str:
    if c is None or c.advantage is None:
        return DASH
    return f"{fmt_rho(c.advantage)} {fmt_ci(c.advantage_low, c.advantage_high)}"


def _across_seeds(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    ens = _computed(ensembles_of(statistics), "ensembles")
    groups = list(ens.groups)
    headers = ["Feature", "Fraction",
               *(f"{g}: partial r [95% CI] given the baseline" for g in groups),
               *(f"{g}: advantage over the baseline [95% CI]" for g in groups),
               "Sizes beyond the loss", "Predicts beyond the loss"]
    rows = []
    for feature, per_fraction in ens.across_seeds.items():
        for key, cells in per_fraction.items():
            v = ens.verdict.get(feature, {}).get(key) or Verdict()
            rows.append([_code(feature), fmt_percent(float(key)),
                         *(_group_cell(cells.get(g)) for g in groups),
                         *(_advantage_cell(cells.get(g)) for g in groups),
                         f"{v.sizes_beyond or 0} of {v.sizes_tested or 0}",
                         "yes" if v.predicts_beyond_loss else "no"])
    sizes = "; ".join(
        f"`{g}`: {i.n_seeds} seeds ({', '.join(str(x) for x in i.seeds)}), "
        f"{fmt_params(i.num_parameters)} parameters, fractions at steps "
        + ", ".join(fmt_step(x) for x in i.fraction_steps.values())
        + f" of {fmt_step(i.final_step)}" for g, i in ens.groups.items())
    found = sorted({f for f, per in ens.verdict.items()
                    for v in per.values() if v.predicts_beyond_loss})
    chance = ens.expected_by_chance
    level = 0.95 if ens.level is None else ens.level
    calibrated = 12 if ens.calibrated_seeds is None else ens.calibrated_seeds
    caption = (
        "Across seeds at a fixed point of training, where no shared trend can make an "
        "association: per size, the partial Spearman r, over seeds, of the feature's "
        "value at the fraction with the final held-out loss, given the loss at the "
        "fraction and the best baseline of its space there (named after 'given'; none for "
        "the baselines and spectral features, which are given the loss alone), with a "
        f"{round(100 * level)} % percentile bootstrap interval over seeds "
        f"({ens.n_bootstrap} resamples); * = the interval excludes 0. Advantage: "
        "|r given the loss| of the feature minus that of the baseline, paired bootstrap. "
        "A feature predicts beyond the loss at a fraction when its interval excludes 0 in "
        "more than half of the sizes tested; a size with fewer than "
        f"{calibrated} seeds, where the interval does not hold its "
        "size on simulated ensembles, is shown but not tested. Sizes: " + sizes + ". "
        + (f"Features that do at some fraction: {', '.join(_code(f) for f in found)}; "
           if found else "No feature does at any fraction; ")
        + (f"{chance:.2f} such (feature, fraction) cells are expected by chance at the "
           "interval's nominal 5 % rate (no correction for the number of features)."
           if _finite(chance) else ""))
    return [caption, "", *_table(headers, rows)]


def _seed_spread(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    ens = _computed(ensembles_of(statistics), "ensembles")
    groups = list(ens.groups)
    between = ens.between_sizes
    pairs = [(b.smaller, b.larger) for b in next(iter(between.values()), ())]
    headers = ["Quantity", *(f"{g} final mean ± seed SD (text SD)" for g in groups),
               *(f"{a} → {b}: first seeds' difference" for a, b in pairs)]
    rows = []
    for q, per_group in ens.seed_spread.items():
        cells = []
        for g in groups:
            s = per_group.get(g)
            cell = f"{fmt_value(s.mean)} ± {fmt_value(s.sd)}" if s else DASH
            if s and s.text_sd is not None:
                cell += f" ({fmt_value(s.text_sd)})"
            cells.append(cell)
        by_pair = {(b.smaller, b.larger): b for b in between.get(q, ())}
        for pair in pairs:
            b = by_pair.get(pair)
            cells.append(DASH if not b else f"{fmt_value(b.difference)} ("
                         + ("within" if b.within_spread else "outside")
                         + " the seed spread)")
        rows.append(["loss" if q == "loss" else _code(q), *cells])
    inside = sorted({q for q, bs in between.items() for b in bs if b.within_spread})
    caption = (
        "The seed-to-seed spread at the final checkpoint, a noise floor of its own next to "
        "the text-resampling one (in brackets, the median over seeds of the standard "
        "deviation over text resamples, where the run resampled the texts): mean and "
        "standard deviation over seeds of the final held-out loss and of every feature. "
        "The last columns take the first seed of each size (the run a single-seed study "
        "makes) and ask whether the difference between consecutive sizes lies within what "
        "two seeds of one size differ by (|difference| ≤ 1.96·√2·SD, the two sizes' SDs "
        "pooled): where it does, a single-seed study cannot tell the sizes apart on that "
        "quantity. Within the spread for some pair of sizes: "
        + (", ".join("loss" if q == "loss" else _code(q) for q in inside) or "none") + ".")
    return [caption, "", *_table(headers, rows)]


ENSEMBLE_PART = ("Part E. Seed ensembles",
                 "Seeds of each size trained side by side: tests across seeds at the same "
                 "step, and the seed-to-seed noise floor.",
                 (("E1. Across seeds: does a feature predict the final loss beyond the loss?",
                   _across_seeds),
                  ("E2. The seed-to-seed spread as a noise floor", _seed_spread)))


def _control_runs(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pc = _computed(positive_controls_of(statistics), "positive_controls")
    events = list(pc.events)
    headers = ["Run", "Seed", *(_event_heading(e) for e in events), f"Final {pc.signal}"]
    rows = [[_code(label), DASH if run.seed is None else run.seed,
             *(fmt_step(run.event_steps.get(e)) for e in events),
             fmt_value((run.signal or (None,))[-1])]
            for label, run in pc.runs.items()]
    never = sum(run.event_steps.get(events[0]) is None
                for run in pc.runs.values()) if events else 0
    caption = (
        f"The ground truth of each run, measured without any topology: `{pc.signal}`, "
        f"stored with every checkpoint by the task that trained it; its event is the first "
        "checkpoint at which it "
        + (f"{'reaches' if pc.event == 'rise' else 'comes down to'} each level"
           if pc.levels else "has covered half its way from first to last value")
        + " (— = never within the run)."
        + (f" {never} run(s) never reach the first event, and count in no alignment."
           if never else "")
        + (" Left out, as they state another ground truth: "
           + ", ".join(_code(r) for r in pc.runs_left_out) + "."
           if pc.runs_left_out else ""))
    return [caption, "", *_table(headers, rows)]


def _event_heading(event: str) -> str:
    if event == "halfway":
        return "Halfway step"
    return f"Step reaching {fmt_value(float(event))}"


def _control_alignment(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    pc = _computed(positive_controls_of(statistics), "positive_controls")
    events = list(pc.events)
    if not events:
        raise _Absent("the ground truth defines no event")
    alignment = pc.alignment
    first = events[0]
    absent = Alignment()

    def order(item: tuple[str, Mapping[str, Alignment]]) -> tuple:
        e = item[1].get(first, absent)
        rate, apart = e.hit_rate, e.median_apart
        return (-(rate if _finite(rate) else -1), apart if _finite(apart) else math.inf,
                item[0])

    headers = ["Feature", "Family",
               *(h for e in events for h in (
                   f"{_event_heading(e)}: hits (rate; chance; p; Holm p)",
                   "at other runs' events (rate; permutation p)",
                   "median lead, steps", "median checkpoints apart"))]
    rows = []
    references = pc.references  # placed first; no test
    ranked = [*(f for f in references if f in alignment),
              *(f for f, _ in sorted(alignment.items(), key=order) if f not in references)]
    for feature in ranked:
        per_event = alignment[feature]
        cells = []
        for e in events:
            a = per_event.get(e, absent)
            cells += [f"{a.n_hits} of {a.n_runs or 0} ({fmt_value(a.hit_rate)}; "
                      f"{fmt_value(a.chance)}; {fmt_p(a.hit_p)}; {fmt_p(a.hit_holm_p)})",
                      f"{fmt_value(a.swapped_hit_rate)}; {fmt_p(a.permutation_p)}",
                      fmt_step(a.median_lead), fmt_count(a.median_apart)]
        family = ("the ground truth itself" if feature == pc.signal
                  else "quality (held-out loss)" if feature == "loss"
                  else str(feature_group(feature)))
        rows.append([_code(feature), family, *cells])
    better = [f for f, per in alignment.items()
              if (p := per.get(first, absent).hit_holm_p) is not None and _finite(p)
              and p < 0.05]
    caption = (
        "Where each feature's level shifts (its change-point: the single change in mean "
        "that best splits its series, at least three checkpoints a side) against the "
        "ground truth's event, run by run: a hit is a change-point within one checkpoint "
        "of the event; lead = event step − change-point step (positive: the feature moves "
        "first). Chance: the hit rate of a change-point placed at random where one can "
        "fall; p: one-sided binomial test of the hits against it, Holm p: adjusted over "
        "the features. At other runs' events: the hit rate of the same change-points "
        "against the events of the other runs, which a feature that moves with the stage "
        "of training rather than with the event scores as well; permutation p: the share "
        "of the ways to hand the events to the runs that give at least as many hits "
        "(one-sided, not adjusted over the features; with n runs at least 1/n!). "
        "References that need no topology, placed first: "
        f"`{pc.signal}`, the ground truth's own change-point (the method's check), "
        "and `loss`, the held-out loss the task stores. Then sorted by the hit rate at the "
        "first event. "
        + (f"Features with hits above chance (Holm p < 0.05) at the first event: "
           f"{', '.join(_code(f) for f in better)}." if better
           else "No feature's hits are above chance (Holm p < 0.05) at the first event.")
        + " The within-model controls of every feature against the ground-truth signal "
        "(the quality of parts A to C here) are in C1 to C4, computed for "
        + ("the first seed of each group only."
           if about_of(statistics).notes.get("controlled_seeds") else "every run."))
    return [caption, "", *_table(headers, rows)]


CONTROL_PART = ("Part F. Positive control",
                "A training run whose transition step is known without topology: does the "
                "pipeline see it, and when?",
                (("F1. The ground truth", _control_runs),
                 ("F2. Features against the transition", _control_alignment)))


Build = Callable[[Statistics | Mapping, list[Record]], list[str]]
"""A table's lines from the statistics (typed, or partial JSON) and the records."""

_PARTS: tuple[tuple[str, str, tuple[Build, ...]], ...] = (
    ("Part A. Embedding-space topology over training",
     "The seed report's tables (it measured Pythia checkpoints), computed for the models "
     "of this study.",
     (_trajectories, _final_comparison, _topo_vs_spectral)),
    ("Part B. Weight-space topology over training",
     "The seed paper's tables (it measured small GPTs it trained), computed for the "
     "models of this study.",
     (_configurations, _weight_h0, _neural_persistence, _weight_h1, _prediction, _phases,
      _scaling, _largest_model)),
    ("Part C. Robustness",
     "Our controls: does each correlation survive multiple testing, training progress and "
     "shared trends?",
     (_robustness, _survivors, _stability, _calibrated_tests)),
    ("Part D. Loss landscape and gradients",
     "The signatures of the research plan beyond the two seeds: curvature and the "
     "topology of the loss surface and of per-example gradients.",
     (_probe_correlations, _prediction_by_feature)),
)


def _alpha(statistics: Statistics | Mapping) -> float:
    """The level the controls tested at (0.05 where the section is missing or damaged:
    its own table says so)."""
    try:
        return (controlled_of(statistics) or Controlled()).level or 0.05
    except SectionError:
        return 0.05


def too_short(records: Sequence[Record], alpha: float) -> dict[str, int]:
    """The models with too few checkpoints for any within-model test at ``alpha`` (the
    smallest exact Spearman p, 2/n!, not below it: fewer than 5 at 0.05) -> their number
    of checkpoints (2 or more: one checkpoint has no correlation at all)."""
    counts = {label: len(recs) for label, recs in by_model(records).items()}
    return {m: n for m, n in counts.items() if n >= 2 and 2 / math.factorial(n) >= alpha}


SHORT_MARK = "†"


def mark_short_models(lines: list[str], short: Mapping[str, int]) -> list[str]:
    """``lines`` of a summary with every table cell that names a model of ``short``
    (``m``, ```m```, or ``m`` then a space, as per-model columns are headed) marked
    ``†``, and under each table that has one, a line saying what the mark means."""
    if not short:
        return lines

    def names(cell: str) -> bool:
        text = cell.strip()
        return any(text in (m, f"`{m}`") or text.startswith((f"{m} ", f"`{m}` "))
                   for m in short)

    out: list[str] = []
    marked = False
    for i, line in enumerate(lines):
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = line.split("|")
            hits = [j for j, c in enumerate(cells[1:-1], 1) if names(c)]
            for j in hits:
                cells[j] = f"{cells[j].rstrip()} {SHORT_MARK} "
            marked |= bool(hits)
            line = "|".join(cells)
        out.append(line)
        ends = line.startswith("|") and not (i + 1 < len(lines) and lines[i + 1].startswith("|"))
        if ends and marked:
            out += ["", f"{SHORT_MARK} too few checkpoints to test within the model "
                        f"({', '.join(f'`{m}`: {n}' for m, n in short.items())}; see the "
                        "header): its ρ and p describe, they cannot be significant."]
            marked = False
    return out


def _header(statistics: Statistics | Mapping, records: list[Record], alpha: float,
            short: Mapping[str, int]) -> list[str]:
    """The summary's opening: what it was computed from, the models (``short``: those too
    short to test at ``alpha``, :func:`too_short`), the target and the notes."""
    about = about_of(statistics)
    try:
        models = models_of(statistics) or {}
    except StatisticsError:  # table A2 says so
        models = {}
    try:
        controlled = controlled_of(statistics) or Controlled()
    except SectionError:  # the section's own table says so
        controlled = Controlled()
    hashes = about.settings_hashes
    digest = about.records_sha256
    made_from = [f"records SHA-256 {digest[:12]}"] if digest else []
    made_from += [f"settings {', '.join(hashes)}"] if hashes else []
    lines = ["# Summary of results", "",
             "Generated by `toposig.report` from `data/statistics.json`"
             + (f" ({'; '.join(made_from)})" if made_from else "")
             + " and the per-checkpoint records in `data/all_results.json`. Every number is "
             "a value of those files, rounded for display.", ""]
    if models:
        lines.append(f"Models ({len(models)}): " + ", ".join(
            f"`{k}`" + (f" ({short[k]} checkpoints: too short to test)" if k in short else "")
            for k in models) + ".")
    if short:
        n = max(short.values())
        need = next(k for k in range(n + 1, 30) if 2 / math.factorial(k) < alpha)
        lines.append(
            f"Too short to test within a model: {', '.join(f'`{m}`' for m in short)}. With "
            f"{n} checkpoints the smallest p an exact Spearman test can give is "
            f"{2 / math.factorial(n):.2g} (a perfect rank order), not below {alpha}: every "
            "per-model correlation of these models is a description, and none can be "
            f"significant; a test needs at least {need} checkpoints.")
    if about.target:
        better = ("; higher is better, so a feature that rises as the model improves has "
                  "a positive ρ" if about.target_better == "higher" else "")
        lines.append(f"Correlation target of `correlations`: "
                     f"{TARGET_WORDS.get(about.target, about.target)}"
                     f"{better}; in the controlled tests {_targets_text(controlled)}.")
    if controlled.n_tests:
        lines.append(f"Significance: Holm-adjusted p < {controlled.level}, "
                     f"{_holm_text(controlled)}; {_interval_text(controlled)}.")
        if controlled.pooled_method:
            lines.append(f"Pooled over models: {controlled.pooled_method}.")
        if controlled.design_method:
            lines.append(f"Calibration and power: {controlled.design_method} (C4).")
    if seeds_note := about.notes.get("controlled_seeds"):
        lines.append(f"Within-model controls (parts A to C): {seeds_note}.")
    lines.append("Not reproduced: the seeds' software-version and hyperparameter tables "
                 "(see `data/config.json`).")
    return lines


TARGET_WORDS = {"perplexity": "perplexity (on the analysed texts)",
                "loss": "the loss stored with each checkpoint",
                "mlm_loss": "the masked-LM loss (on the analysed texts)"}


def _targets_text(controlled: Controlled) -> str:
    """Which quality measure each kind of feature was tested against, from the tests'
    own targets (an encoder's are its masked-LM loss)."""
    groups: dict[str | None, list[str]] = {}
    for feature, target in controlled.targets.items():
        label = feature_group(feature).label
        if label not in groups.setdefault(target, []):
            groups[target].append(label)
    if not groups:
        return "no feature was tested"
    return "; ".join(f"{', '.join(labels)} features are tested against "
                     f"{TARGET_WORDS.get(t, t) if t else t}" for t, labels in groups.items())


def _built(build: Build, statistics: Statistics | Mapping,
           records: list[Record]) -> list[str]:
    """A section's lines, or the one-line note that says why it is absent."""
    try:
        return build(statistics, records)
    except _Absent as exc:
        return _absent(str(exc))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        return _absent(f"its statistics are malformed ({type(exc).__name__}: {exc})")


def summary_markdown(statistics: Statistics | Mapping,
                     records: Sequence[Record | Mapping]) -> str:
    """The markdown of ``results/summary.md`` (see the module docstring).

    Args:
        statistics: as written to ``data/statistics.json`` by
            :func:`toposig.analysis.compute.compute_statistics`; any section may be missing or
            hold only a ``reason``.
        records: the per-checkpoint records (:class:`toposig.records.Record`, or
            ``data/all_results.json``'s entries as JSON), used for the trajectory tables
            and the architecture columns of table 1.

    Returns:
        The document, ending with a newline. Pure: reads and writes no file.

    Raises:
        toposig.records.RecordError: a record given as JSON is not sound (the statistics,
            by contrast, may be partial or damaged: each table says what it misses).
    """
    statistics = statistics or {}
    # sound JSON is read once here, not once per table; partial or damaged JSON stays as
    # it is, and each table reads what it needs and says what is missing
    with contextlib.suppress(StatisticsError):
        statistics = Statistics.from_json(statistics)
    records = records_from_json(records)
    present = about_of(statistics).sections
    alpha = _alpha(statistics)
    short = too_short(records, alpha)
    lines = _header(statistics, records, alpha, short)
    builders = iter(HEADINGS)
    for title, intro, sections in _PARTS:
        lines += ["", f"## {title}", "", intro]
        for build in sections:
            lines += ["", f"### {next(builders)}", "", *_built(build, statistics, records)]
    if "ensembles" in present:  # only a study with seed ensembles has this part
        title, intro, built = ENSEMBLE_PART
        lines += ["", f"## {title}", "", intro]
        for heading, build in built:
            lines += ["", f"### {heading}", "", *_built(build, statistics, records)]
    if "positive_controls" in present:  # only a study whose checkpoints state one
        title, intro, built = CONTROL_PART
        lines += ["", f"## {title}", "", intro]
        for heading, build in built:
            lines += ["", f"### {heading}", "", *_built(build, statistics, records)]
    lines = mark_short_models(lines, short)
    text = "\n".join(lines) + "\n"
    return re.sub(r"\n{3,}", "\n\n", text)
