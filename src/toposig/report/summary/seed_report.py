"""Part A of the summary: the seed report's tables (it measured Pythia checkpoints),
computed for the models of this study."""

from __future__ import annotations

from collections.abc import Mapping

from toposig.analysis.correlations import by_model, feature_group
from toposig.families.embedding import SPECTRUM
from toposig.families.embedding import TOPOLOGY as EMBEDDING_TOPOLOGY
from toposig.records import Record
from toposig.records.controlled import Controlled
from toposig.records.statistics import (
    Statistics,
    about_of,
    controlled_of,
    correlations_of,
)
from toposig.report.summary.cells import (
    DASH,
    QUALITY,
    QUALITY_TEXT,
    Absent,
    Part,
    count_text,
    finite,
    fmt_loss,
    fmt_params,
    fmt_step,
    fmt_value,
    label_of,
    md_code,
    md_table,
    model_summaries,
    n_text,
    ok_records,
    present_features,
    quality_cell,
    rho_p,
)

TRAJECTORY_FEATURES = ("h1_n_features", "h1_total_persistence", "h1_persistence_entropy",
                       "rankme", "np_mean", "weight_h0_total")


FINAL_FEATURES = ("h1_n_features", "h1_total_persistence", "h1_persistence_entropy", "rankme",
                  "np_mean", "np_seed_mean", "weight_h0_total", "weight_h1_total")


def _trajectories(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    groups = by_model(ok_records(records))
    if not groups:
        raise Absent("no finished per-checkpoint record was given")
    out: list[str] = []
    for label, recs in groups.items():
        quality = [q for q in QUALITY if any(finite(r.measure(q)) for r in recs)]
        feats = present_features(recs, TRAJECTORY_FEATURES)
        headers = ["Step", *(label_of(q) for q in quality), *(label_of(f) for f in feats)]
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
                f"{', '.join(md_code(x) for x in feats) or 'none'}); descriptive, no test.", "",
                *md_table(headers, rows), ""]
    return out[:-1]


def _final_comparison(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    models = model_summaries(statistics)
    feats = [f for f in FINAL_FEATURES
             if any(finite(m.final_features.get(f)) for m in models.values())]
    quality = [q for q in QUALITY
               if any(finite(m.final_quality.get(q)) for m in models.values())]
    headers = ["Model", "Parameters", "Final step", *(label_of(f"final_{q}") for q in quality),
               *(label_of(f) for f in feats)]
    rows = []
    for label, m in models.items():
        rows.append([label, fmt_params(m.num_parameters), fmt_step(m.final_step),
                     *(quality_cell(m, q) for q in quality),
                     *(fmt_value(m.final_features.get(f)) for f in feats)])
    return [f"Each model's last analysed checkpoint ({count_text(len(models), 'model')}; "
            "values from `statistics.models`); descriptive, no test.", "",
            *md_table(headers, rows)]


def _topo_vs_spectral(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    corr = correlations_of(statistics)
    if corr is None:
        raise Absent("the statistics have no `correlations` section")
    target = corr.target or about_of(statistics).target or "the target"
    per_model, pooled = corr.per_model, corr.pooled
    names = list(pooled) or list(next(iter(per_model.values()), {}))
    fams = {EMBEDDING_TOPOLOGY: "topological", SPECTRUM: "spectral"}
    feats = [f for f in names if feature_group(f) in fams]
    if not feats:
        raise Absent("the run has no embedding-space topological or spectral feature "
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
        cells = [rho_p(c) for c in [*tests, *([pooled.get(f)] if pooled else [])]]
        s = controlled.summary.get(f)
        sig = (f"{s.significant['raw']}/{s.n_models}"
               if s and controlled.targets.get(f, target) == target else DASH)
        rows.append([md_code(f), fams[feature_group(f)], *cells, sig])
    pooled_n = n_text([c.n if (c := pooled.get(f)) else None for f in feats]) if pooled else None
    caption = (f"Spearman ρ (two-sided p, uncorrected) of each embedding feature with {target} "
               f"across checkpoints, per model ({n_text(ns)} each)"
               + (f" and pooled over models ({pooled_n})" if pooled_n else "")
               + "; last column: models where the Holm-adjusted p < "
               + f"{controlled.level} (C1).")
    return [caption, "", *md_table(headers, rows)]


PART = Part(
    "Part A. Embedding-space topology over training",
    "The seed report's tables (it measured Pythia checkpoints), computed for the models "
    "of this study.",
    (("A1. Training trajectories", _trajectories),
     ("A2. Cross-model comparison at the final checkpoint", _final_comparison),
     ("A3. Topological vs spectral features: correlation with the target",
      _topo_vs_spectral)))
