"""Part D of the summary: the curvature, loss-landscape and gradient features against
the target, and the final-loss prediction feature by feature."""

from __future__ import annotations

from collections.abc import Mapping

from toposig.analysis.correlations import feature_group
from toposig.families.registry import groups as feature_groups
from toposig.families.registry import owner
from toposig.records import Record
from toposig.records.controlled import ControlledTest
from toposig.records.statistics import (
    Statistics,
    prediction_by_feature_of,
)
from toposig.report.summary.cells import (
    DASH,
    Absent,
    Part,
    controlled_section,
    fmt_count,
    fmt_improvement,
    fmt_loss,
    fmt_p,
    fmt_rho,
    fraction_label,
    md_code,
    md_table,
    n_text,
    survives,
)


def _probe_correlations(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    controlled = controlled_section(statistics)
    per_model, pooled = controlled.per_model, controlled.pooled
    names = list(pooled) or list(next(iter(per_model.values()), {}))
    fams = [g for g in feature_groups() if owner(g).probes_loss]
    feats = sorted((f for f in names if feature_group(f) in fams),
                   key=lambda f: fams.index(feature_group(f)))
    if not feats:
        raise Absent("the run has no curvature, landscape or gradient feature (run with "
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
        rows.append([md_code(f), feature_group(f).label, target, *cells,
                     survives(pooled[f]) if f in pooled else DASH])
    caption = (f"Spearman ρ (Holm-adjusted p, as in C1) of each feature of the landscape and "
               f"gradient families with its target across checkpoints, per model and pooled "
               f"({n_text(ns)}); last column: the pooled controls survived (C1). Curvature: "
               "top Hessian eigenvalues and Hutchinson trace of the loss on the probe batch; "
               "landscape: the merge tree of the loss surface around the checkpoint; "
               "gradients: Vietoris–Rips homology and statistics of per-example gradients.")
    return [caption, "", *md_table(headers, rows)]


def _prediction_by_feature(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    table = prediction_by_feature_of(statistics)
    if table is None or not table.per_feature:
        raise Absent("no feature to predict from (statistics.prediction_by_feature)")
    headers = ["Feature", "Train fraction", "loss_only MAE", "topology_only MAE",
               "combined MAE", "ridge MAE", "topology_only vs loss_only",
               "combined vs loss_only", "Models"]
    rows = []
    for f, fractions in table.per_feature.items():
        for key, fr in fractions.items():
            imp = fr.improvement_over_loss_only
            rows.append([md_code(f), fraction_label(key),
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
    return [caption, "", *md_table(headers, rows)]


PART = Part(
    "Part D. Loss landscape and gradients",
    "The signatures of the research plan beyond the two seeds: curvature and the "
    "topology of the loss surface and of per-example gradients.",
    (("D1. Curvature, loss-landscape and gradient features vs the target",
      _probe_correlations),
     ("D2. Final-loss prediction from early checkpoints, feature by feature",
      _prediction_by_feature)))
