"""Stage 3's numbers: the records of a study in, ``statistics.json``'s content out.

:func:`compute_statistics` computes, from the aggregate entries of a results folder
(one per finished checkpoint), the correlations of every feature with the quality
measure (per model and pooled) under the controls, the phases, stability, scaling and
prediction tables, and the Wasserstein distances between consecutive checkpoints'
diagrams. Pure: it reads and writes no file. The diagrams come from a callable the
caller passes (``arrays``: a record -> the arrays saved beside it);
:func:`toposig.run.results_folder.load_entries` and
:func:`toposig.run.results_folder.arrays_reader` read them from a results folder, and
:func:`toposig.analyze.analyze` writes ``data/statistics.json``, ``summary.md``
and the figures.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from toposig.analysis import controls, correlations, phases, prediction, scaling
from toposig.analysis.design_cache import DesignCache
from toposig.analysis.ensembles import ensemble_analysis, first_seeds
from toposig.analysis.feature_sets import PHASE_FEATURES, PREDICTION_FEATURES
from toposig.analysis.ground_truth import positive_control_analysis
from toposig.defaults import SEED_CONTROLS
from toposig.families.weights import WeightsFamily
from toposig.features import homology
from toposig.records import (
    DeclaredQuality,
    ModelSummary,
    Record,
    Statistics,
    json_tree,
    records_from_json,
)

logger = logging.getLogger(__name__)

ArraysOf = Callable[[str], Mapping[str, np.ndarray]]
"""The arrays saved beside a record: given the ``arrays_file`` of one of its parts
(:meth:`toposig.records.Record.arrays_file`, relative to the results root), the named
arrays of that file (:func:`toposig.run.results_folder.arrays_reader` reads them from a
results folder)."""


def layer_diagrams(arrays: Mapping[str, np.ndarray], layer: int) -> list:
    """``[H0, H1, ...]`` of ``layer`` among a record's arrays (``layer{layer}_h{q}``)."""
    out = []
    q = 0
    while f"layer{layer}_h{q}" in arrays:
        out.append(arrays[f"layer{layer}_h{q}"])
        q += 1
    return out


def wasserstein_series(records: Sequence[Record], arrays: ArraysOf) -> dict[str, list[dict]]:
    """Per model, distances between each checkpoint's diagrams (of its analysed layer)
    and the previous one's; ``arrays`` gives each record's arrays."""
    out: dict[str, list[dict]] = {}
    for label, recs in correlations.by_model(records).items():
        found = [(r, file, r.layer) for r in recs
                 if (file := r.arrays_file()) and r.layer is not None]
        if len(found) < 2:
            out[label] = []
            continue
        rows = correlations.consecutive_distances(
            [layer_diagrams(arrays(file), layer) for _, file, layer in found])
        out[label] = [
            {"step_from": a.step, "step_to": b.step, **row}
            for (a, _, _), (b, _, _), row in zip(found[:-1], found[1:], rows, strict=True)
        ]
    return out


# Quality measures, in order of preference: perplexity on the analysed texts (causal
# LMs), the loss stored with the checkpoint, the masked-LM loss on the analysed texts
# (encoders, which have no perplexity).
TARGETS = ("perplexity", "loss", "mlm_loss")


def declared_quality(records: Sequence[Record]) -> DeclaredQuality | None:
    """The quality measure the records declare (an import's ``--target``, a positive
    control's signal), or ``None`` when none does."""
    return next((r.quality for r in records if r.quality is not None), None)


def choose_target(records: Sequence[Record], target: str = "auto") -> str:
    """The quality measure to correlate with: the one the records declare (an import's
    ``--target``, e.g. an accuracy), else ``perplexity`` (measured on the analysed texts)
    when every record has it, else ``loss`` (stored with the checkpoint) when every record
    has that, else ``mlm_loss`` (an encoder's masked-LM loss on the analysed texts) when
    every record has that, else whichever more records have; a warning says so when a
    measure before the chosen one is missing from only some records (a damaged or
    partial study). An explicit ``target`` may name any quality field the records carry.

    Raises:
        ValueError: an explicit ``target`` that no record has.
    """
    declared = declared_quality(records)
    known = (*TARGETS, *([declared.column] if declared else []))
    counts = {t: sum(r.measure(t) is not None for r in records) for t in known}
    if target != "auto":
        if target not in counts:
            counts[target] = sum(r.measure(target) is not None for r in records)
        if counts[target] == 0:
            raise ValueError(f"no record has a quality {target!r}; records have: "
                             f"{', '.join(t for t in known if counts[t]) or 'none'}")
        return target
    if declared and counts[declared.column]:
        return declared.column
    chosen = next((t for t in TARGETS if counts[t] == len(records)), None) \
        or max(TARGETS, key=lambda t: counts[t])
    for t in TARGETS[:TARGETS.index(chosen)]:  # a preferred measure some records lack
        if counts[t]:
            lacking = next(r for r in records if r.measure(t) is None)
            logger.warning(
                "correlating with %s, not %s: %d of %d checkpoints have no %s (the first: "
                "%s step %s); pass --target %s to use it where it is there",
                chosen, t, len(records) - counts[t], len(records), t,
                lacking.model_label, lacking.step, t)
    return chosen


def higher_is_better(records: Sequence[Record], target: str) -> bool:
    """Whether a larger ``target`` means a better model: only a declared quality can say
    so (losses and perplexity are lower-is-better)."""
    declared = declared_quality(records)
    return bool(declared and declared.column == target and declared.higher_is_better)


def model_summaries(records: Sequence[Record]) -> dict[str, dict]:
    """Per model: checkpoints analysed and the final checkpoint's quality and features."""
    out = {}
    for label, recs in correlations.by_model(records).items():
        last = recs[-1]
        out[label] = {
            "model": last.checkpoint.model,
            "n_checkpoints": len(recs),
            "steps": [r.step for r in recs],
            "num_parameters": last.num_parameters,
            "final_step": last.step,
            "final_perplexity": last.perplexity,
            "final_loss": last.loss,
            "final_features": dict(last.features),
        }
        if last.mlm_loss is not None:
            out[label]["final_mlm_loss"] = last.mlm_loss
        declared = declared_quality(recs)
        if declared and declared.column not in TARGETS:  # an import's --target
            out[label][f"final_{declared.column}"] = last.measure(declared.column)
    return out


def feature_families(records: Sequence[Record]) -> dict[str, list[str]]:
    """Feature names by the name of their group (:func:`correlations.feature_group`; only
    non-empty groups, in the order their first feature is listed)."""
    out: dict[str, list[str]] = {}
    for f in correlations.feature_names(records):
        out.setdefault(correlations.feature_group(f).name, []).append(f)
    return out


def weight_wasserstein_series(records: Sequence[Record], arrays: ArraysOf
                              ) -> dict[str, list[dict]]:
    """Per model, distances between consecutive checkpoints' weight-row diagrams, summed
    over the matrices both checkpoints have (``weight_h{q}_wasserstein``, L∞ ground);
    ``arrays`` gives the arrays of each record's weight part."""
    out: dict[str, list[dict]] = {}
    for label, recs in correlations.by_model(records).items():
        found = [(r, file) for r in recs if (file := r.arrays_file(WeightsFamily.name))]
        rows = []
        prev = None
        for r, file in found:
            cur = arrays(file)
            if prev is not None:
                row: dict = {"step_from": prev[0].step, "step_to": r.step}
                for key in sorted(set(prev[1]) & set(cur)):
                    q = key.rsplit(":h", 1)[1]
                    name = f"weight_h{q}_wasserstein"
                    row[name] = row.get(name, 0.0) + homology.wasserstein(prev[1][key],
                                                                                cur[key])
                rows.append(row)
            prev = (r, cur)
        out[label] = rows
    return out


def feature_targets(records: Sequence[Record], features: list[str],
                    target: str | None = None) -> dict[str, str]:
    """The quality measure each feature is tested against: a ``target`` that is not one
    of :data:`TARGETS` (a declared quality such as an accuracy) for every feature; else
    perplexity for embedding features and loss for weight features (as the two seed
    studies did) and for the loss-derived curvature, landscape and gradient features,
    each falling back to the other where records lack it."""
    if target is not None and target not in TARGETS:
        return dict.fromkeys(features, target)
    has = {t: any(r.measure(t) is not None for r in records) for t in TARGETS}
    out = {}
    for f in features:
        prefer = ("loss", "perplexity", "mlm_loss") if correlations.prefers_loss(f) else TARGETS
        chosen = next((t for t in prefer if has[t]), None)
        if chosen is not None:
            out[f] = chosen
    return out


# np_seed_mean and weight_h*_total_persistence: the weight study's own names (an import of
# its tables has no np_mean or weight_h*_total), used where the records have them
SCALING_FEATURES = ("h0_total_persistence", "h1_total_persistence", "rankme", "np_mean",
                    "np_seed_mean", "weight_h0_total", "weight_h1_total", "weight_l2_norm",
                    "weight_h0_total_persistence", "weight_h1_total_persistence")
NP_FEATURES = ("np_mean", "np_seed_mean")  # the rate-of-change phases: ours, else the seed's
# the embedding cloud's collapse and regrowth, with the cloud's scale beside it: a dip that
# the scale-free (*_scaled) version does not share is a change of scale
COLLAPSE_FEATURES = ("median_pairwise_distance", "h1_total_persistence",
                     "h1_total_persistence_scaled", "h0_total_persistence",
                     "h0_total_persistence_scaled")


def collapse(steps: Sequence[int], values: Sequence[float | None]) -> dict | None:
    """A series' dip: its first value, its minimum (and the step of it), its last value,
    ``depth`` = minimum / first and ``regrowth`` = last / minimum (ratios of the
    feature's own values; ``None`` with fewer than three values or a minimum <= 0)."""
    pairs = [(s, v) for s, v in zip(steps, values, strict=True) if v is not None]
    if len(pairs) < 3:
        return None
    step_min, v_min = min(pairs, key=lambda t: t[1])
    first, last = pairs[0][1], pairs[-1][1]
    if v_min <= 0 or first <= 0:
        return None
    return {"first": first, "min": v_min, "min_step": step_min, "last": last,
            "depth": v_min / first, "regrowth": last / v_min}


def phase_analysis(records: Sequence[Record]) -> dict[str, dict]:
    """Per model: three-segment fits of features against log(1 + step) (breakpoints in
    steps), the seed paper's neural-persistence rate-of-change phases (of ``np_mean``,
    else of the seed's variant ``np_seed_mean``, named in ``feature``), and the embedding
    cloud's collapse and regrowth beside its scale (:func:`collapse` of each of
    :data:`COLLAPSE_FEATURES` the records have)."""
    out: dict[str, dict] = {}
    for label, recs in correlations.by_model(records).items():
        steps = [r.step for r in recs if r.step is not None]
        recs = [r for r in recs if r.step is not None]
        x = [math.log1p(s) for s in steps]
        fits = {}
        for f in PHASE_FEATURES:
            y = correlations.feature_values(recs, f)
            if sum(v is not None for v in y) < 6:
                continue
            try:
                fit = phases.piecewise_linear_fit(x, y)
            except ValueError as exc:
                fits[f] = {"reason": str(exc)}
                continue
            fits[f] = {**fit, "breakpoint_steps": phases.breakpoint_steps(fit)}
        model: dict = {"piecewise_log_step": fits}
        dips = {f: d for f in COLLAPSE_FEATURES
                if (d := collapse(steps, correlations.feature_values(recs, f)))}
        if dips:
            model["collapse"] = dips
        np_feature = next((f for f in NP_FEATURES if any(
            v is not None for v in correlations.feature_values(recs, f))), None)
        if np_feature is not None:
            model["np_rate_of_change"] = {
                **phases.rate_of_change_phases(steps,
                                               correlations.feature_values(recs, np_feature)),
                "feature": np_feature}
        out[label] = model
    return out


def stability_analysis(records: Sequence[Record]) -> dict[str, dict]:
    """Per model and PH feature: are checkpoint-to-checkpoint changes larger than the
    spread over bootstrap resamples of the texts (``features_resampled``)?

    For consecutive checkpoints a and b a change is *resolved* when
    |F_b − F_a| > 1.96·sqrt(se_a² + se_b²), se the bootstrap standard deviation. Reports
    the median standard error, the median |change|, their ratio, and the share of
    resolved changes. Empty when the run had no resamples.
    """
    out: dict[str, dict] = {}
    for label, recs in correlations.by_model(records).items():
        recs = [r for r in recs if r.resampled]
        if len(recs) < 2:
            continue
        table = {}
        for f in recs[0].resampled:
            vals = [(r.features.get(f), spread.std if (spread := r.resampled.get(f)) else None)
                    for r in recs]
            if any(v is None or se is None for v, se in vals):
                continue
            v = np.array([x for x, _ in vals], dtype=float)
            se = np.array([y for _, y in vals], dtype=float)
            change = np.abs(np.diff(v))
            bound = 1.96 * np.sqrt(se[:-1] ** 2 + se[1:] ** 2)
            med_se = float(np.median(se))
            table[f] = {
                "median_se": med_se,
                "median_abs_change": float(np.median(change)),
                "change_to_se": float(np.median(change) / med_se) if med_se > 0 else None,
                "resolved_share": float(np.mean(change > bound)),
                "range_to_se": float(np.ptp(v) / med_se) if med_se > 0 else None,
                "n_pairs": int(change.size),
            }
        out[label] = table
    return out


def quality_loss(record: Record) -> float | None:
    """The loss a record's quality is measured by: the stored loss, else ln(perplexity),
    else an encoder's masked-LM loss."""
    return next((v for v in (record.loss, record.mean_nll, record.mlm_loss) if v is not None),
                None)


def scaling_analysis(records: Sequence[Record]) -> dict:
    """Power laws of final-checkpoint features and final loss against parameter count,
    when three or more model sizes are present."""
    groups = correlations.by_model(records)
    finals = {label: recs[-1] for label, recs in groups.items()
              if recs[-1].num_parameters}
    sizes = {label: r.num_parameters for label, r in finals.items()}
    if len(set(sizes.values())) < 3:
        return {"reason": f"needs three or more model sizes, found {len(set(sizes.values()))}"}
    final = {label: {**r.features, "final_loss": quality_loss(r),
                     "final_perplexity": r.perplexity}
             for label, r in finals.items()}
    names = ["final_loss", "final_perplexity",
             *(f for f in SCALING_FEATURES if any(f in v for v in final.values()))]
    return {"n_models": len(finals), "num_parameters": sizes,
            "fits": scaling.scaling_table(final, sizes, names)}


def _prediction_series(records: Sequence[Record]) -> dict[str, dict]:
    series = {}
    for label, recs in correlations.by_model(records).items():
        recs = [r for r in recs if r.step is not None]
        series[label] = {"steps": [r.step for r in recs],
                         "loss": [quality_loss(r) for r in recs],
                         "features": {f: correlations.feature_values(recs, f)
                                      for f in correlations.feature_names(recs)}}
    return series


def prediction_analysis(records: Sequence[Record]) -> dict:
    """Final loss from the first 20/30/50% of each model's checkpoints (seed paper table
    5, with leave-one-model-out ridge regression on early features), from ``np_mean``, else
    the seed's ``np_seed_mean``, else ``h1_total_persistence``."""
    series = _prediction_series(records)
    names = correlations.feature_names(records)
    feature = next((f for f in ("np_mean", "np_seed_mean", "h1_total_persistence")
                    if f in names), None)
    if feature is None or not series:
        return {"reason": "no neural persistence or H1 feature to predict from"}
    return prediction.prediction_table(series, feature=feature)


def prediction_by_feature(records: Sequence[Record]) -> dict[str, dict]:
    """Table 5 with each of :data:`PREDICTION_FEATURES` that the records have in place of
    neural persistence: per fraction, the MAE, models and improvement over loss-only of
    every method (per-model predictions left out)."""
    series = _prediction_series(records)
    names = set(correlations.feature_names(records))
    out = {}
    for f in PREDICTION_FEATURES:
        if f in names and series:
            table = prediction.prediction_table(series, feature=f)
            out[f] = {fr: {k: v for k, v in row.items() if k != "per_model"}
                      for fr, row in table["fractions"].items()}
    return out


CLOCK_FIELDS = ("finished_at", "timings_s")
"""The fields of a record (and of its families' parts) that say when and how fast it was
made: :func:`records_digest` leaves them out."""


def records_digest(records: Sequence[Record | Mapping]) -> str:
    """SHA-256 of the records as canonical JSON (sorted keys), less their clocks
    (:data:`CLOCK_FIELDS`, at any depth): which records the statistics were computed
    from, so that the same records give the same ``statistics.json`` byte for byte, and a
    rerun that reproduces every value gets the same digest however long it took (a
    :class:`toposig.records.Record` hashes as the JSON it was read from)."""
    text = json.dumps([_without_clocks(r.to_json() if isinstance(r, Record) else r)
                       for r in records], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _without_clocks(obj: object) -> object:
    if isinstance(obj, Mapping):
        return {k: _without_clocks(v) for k, v in obj.items() if k not in CLOCK_FIELDS}
    if isinstance(obj, (list, tuple)):
        return [_without_clocks(v) for v in obj]
    return obj


def _no_arrays(arrays_file: str) -> Mapping[str, np.ndarray]:
    raise ValueError(f"a record has arrays ({arrays_file}) but compute_statistics was "
                     "given no arrays= to read them with")


def compute_statistics(records: Sequence[Record | Mapping], target: str = "auto", seed: int = 0,
                       n_bootstrap: int = controls.N_BOOTSTRAP,
                       n_surrogates: int = controls.N_SURROGATES, *,
                       arrays: ArraysOf | None = None,
                       design_runs: int = controls.DESIGN_RUNS,
                       seed_controls: str = "auto",
                       design_cache: DesignCache | None = None,
                       progress: Callable[[str], None] | None = None) -> Statistics:
    """The statistics of ``records`` (the aggregate entries of the finished checkpoints):
    the content of ``data/statistics.json``, unrounded, as :class:`toposig.records.Statistics`.

    Args:
        records: the entries (:class:`toposig.records.Record`, or mappings of the same
            fields), in the order of ``data/all_results.json``.
        target: the quality measure to correlate with (:func:`choose_target`).
        seed: seeds the bootstraps and surrogates, so the same records and seed give the
            same statistics.
        n_bootstrap, n_surrogates: resamples of the controls.
        arrays: a record (or its ``weights`` part) -> the arrays saved beside it, for the
            Wasserstein series (:func:`toposig.run.results_folder.arrays_reader` reads
            them from a results folder); ``None`` (the default) for records that have
            none (no ``arrays_file``).
        design_runs: simulated null runs of each detrended and partial-first-difference
            test's own design, for its calibration status and power
            (:mod:`toposig.analysis.inference`; half as many runs per coupling); 0 skips
            the simulations (the design rule still applies).
        seed_controls: in a seed ensemble, which seeds the within-model controls
            (``controlled``) run on: ``"first"``, the first seed of each group and every
            model that is no seed run (:func:`toposig.analysis.ensembles.first_seeds`);
            ``"all"``, every run; ``"auto"`` (the default), every run of a positive
            control (records with a ground truth, whose every run's transition is under
            test) and the first seeds otherwise.
        design_cache: design checks of an earlier analysis
            (:class:`toposig.analysis.design_cache.DesignCache`), reused where their
            designs recur and added to; the statistics are the same with it as without.
        progress: called with one line as each stage starts and ends (``toposig analyze``
            logs them), and after each model's controls.

    Raises:
        ValueError: an explicit ``target`` that no record has; or ``arrays`` is ``None``
            and a record has an ``arrays_file``; or ``seed_controls`` is none of those.
        RecordError: a record given as a mapping is not sound
            (:meth:`toposig.records.Record.from_json`).
        TypeError: ``records`` is a path (the folder is read by
            :func:`toposig.run.results_folder.load_entries`, not here).
    """
    if isinstance(records, (str, os.PathLike)):
        raise TypeError("compute_statistics takes the records, not a results folder: "
                        "read them with toposig.run.results_folder.load_entries and pass "
                        "arrays=toposig.run.results_folder.arrays_reader(folder)")
    if seed_controls not in SEED_CONTROLS:
        raise ValueError(f"seed_controls must be one of {', '.join(SEED_CONTROLS)}, "
                         f"got {seed_controls!r}")
    arrays = arrays if arrays is not None else _no_arrays
    records = records_from_json(records)
    target = choose_target(records, target)
    if seed_controls == "auto":
        seed_controls = "all" if any(r.ground_truth for r in records) else "first"
    controlled_records = records if seed_controls == "all" else first_seeds(records)
    families = feature_families(records)
    better = "higher" if higher_is_better(records, target) else "lower"
    has_embedding = any(r.arrays_file() for r in records)
    say = progress or (lambda line: None)
    stages = _Stages(say)
    names = correlations.feature_names(records)
    with stages("seed ensembles"):
        ensembles = ensemble_analysis(records, names, controls.baselines_of,
                                      n_bootstrap=n_bootstrap, seed=seed)
    with stages("positive controls"):
        positive = positive_control_analysis(records, names)
    with stages("correlations"):
        with_target = correlations.correlations_with_target(records, target)
        by_target = {t: correlations.correlations_with_target(records, t)
                     for t in TARGETS
                     if t != target and any(r.measure(t) is not None for r in records)}
    models = len(correlations.by_model(controlled_records))
    with stages(f"controls ({len(names)} features x {models} models, their designs "
                "simulated or reused)"):
        controlled = controls.controlled_correlations(
            controlled_records, feature_targets(records, names, target),
            n_resamples=n_bootstrap, seed=seed, n_surrogates=n_surrogates,
            design_runs=design_runs, design_cache=design_cache,
            progress=lambda line: say(f"  controls: {line}"))
    with stages("phases, stability, scaling and prediction"):
        phases = phase_analysis(records)
        stability = stability_analysis(records)
        scaling = scaling_analysis(records)
        prediction = prediction_analysis(records)
        prediction_features = prediction_by_feature(records)
    with stages("Wasserstein distances between consecutive checkpoints"):
        wasserstein = wasserstein_series(records, arrays) if has_embedding else {}
        weight_wasserstein = weight_wasserstein_series(records, arrays)
    return Statistics.from_json(json_tree({
        "records_sha256": records_digest(records),
        "settings_hash": sorted({r.settings_hash for r in records} - {None}),
        "models": model_summaries(records),
        "features": families,
        "target": target,
        "target_better": better,
        "correlations": with_target,
        "correlations_by_target": by_target,
        "controlled": controlled,
        "phases": phases,
        "stability": stability,
        "scaling": scaling,
        "prediction": prediction,
        "prediction_by_feature": prediction_features,
        "wasserstein": wasserstein,
        "weight_wasserstein": weight_wasserstein,
        **({"ensembles": ensembles} if ensembles else {}),  # only a study with seeds
        **({"positive_controls": positive} if positive else {}),  # a stated ground truth
        "notes": {
            "controlled": "per feature x model: Spearman with a 95% interval from "
                          "phase-randomised surrogates (respects autocorrelation), "
                          "Holm-adjusted p within each control over its defined tests "
                          "(n_tests_by_control), partial Spearman controlling for log(1 + "
                          "step), Spearman of first differences, beyond the space's best "
                          "baseline, and the detrended and partial-first-difference controls "
                          "(toposig.analysis.trend_controls, surrogate p and interval), each "
                          "with its calibration status, null rate and minimum detectable "
                          "coupling on simulations of its own design (design; "
                          "toposig.analysis.inference); the noise floor; 'significant' = "
                          "Holm-adjusted p < 0.05 (with the raw sign for the trend-level "
                          "controls; calibrated for the design for the detrended ones). "
                          "Pooled over models: a fixed-effect meta-analysis of the "
                          "within-model detrended and partial-first-difference statistics "
                          "against the models' own surrogates; the pooled raw, partial, "
                          "first-difference and beyond-baseline correlations treat "
                          "checkpoints as independent and are descriptions, not tests. The "
                          "target of each feature is in 'targets'",
            **({"controlled_seeds": "a seed ensemble: the within-model controls ran on "
                                    "the first seed of each group (and every model that "
                                    "is no seed run); the test across seeds is in "
                                    "'ensembles' (toposig analyze --seed-controls all "
                                    "runs them on every seed)"}
               if len(controlled_records) < len(records) else {}),
            "target": "correlations are with this quality measure; perplexity is measured "
                      "on the analysed texts, loss is what the checkpoint stored (its "
                      "loss_key says which: val_loss, loss, ...)",
            "perplexity": "exp(mean next-token NLL over every non-padding target token); "
                          "token counts per record in n_loss_tokens",
            "neural_persistence": "np_*: normalised neural persistence (Rieck et al. 2019: "
                                  "global max-|w| scaling, p = 2, divided by sqrt(n - 1)) "
                                  "over a checkpoint's matrices; np_seed_*: the seed "
                                  "paper's variant (per-matrix max, p = 1, / (n - 1))",
            "weight_homology": "weight_h{q}_total: sum over matrices of the H_q total "
                               "persistence of the rows (<= max_rows sampled rows per "
                               "matrix, Euclidean distance in weight space)",
            "pearson_log": "Pearson correlation with ln(perplexity), i.e. the mean token loss",
            "wasserstein": "order 1 between consecutive checkpoints' diagrams of the analysed "
                           "layer; *_wasserstein uses the L-infinity ground metric (Hera), "
                           "*_persim_l2 is persim.wasserstein (L2 ground metric, the seed's)",
            "eigenspectrum_decay_alpha": "fitted on the top min(50, rank) eigenvalues "
                                         "(the seed's window)",
        },
    }))


class _Stages:
    """``with stages(name):`` says the stage's start and, with its seconds, its end."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.say(f"{name} ...")
        start = time.perf_counter()
        yield
        self.say(f"{name}: {time.perf_counter() - start:.1f} s")


def summary_lines(statistics: Statistics | Mapping, top: int = 8) -> list[str]:
    """Strongest pooled correlations with the target, one line each.

    Raises:
        StatisticsError: ``statistics`` (JSON) are not sound.
    """
    st = Statistics.from_json(statistics)
    target = st.correlations.target
    lines = [f"{len(st.models)} model(s): " + ", ".join(
        f"{label} ({m.n_checkpoints} ckpts, final {target} {_final(m, target)})"
        for label, m in st.models.items())]
    if strongest := st.correlations.strongest(top):
        lines.append(f"strongest pooled Spearman correlations with {target} (top {top}; "
                     "checkpoints of all models together: a description, not a test):")
        for f, c in strongest:
            p = "-" if c.spearman_p is None else f"{c.spearman_p:.2g}"
            lines.append(f"  {f:<32} rho={c.spearman_r:+.3f}  p={p}  n={c.n}")
    else:
        lines.append("no correlation is defined (fewer than 3 checkpoints, or constant values)")
    summary = st.controlled.summary if st.controlled else {}
    robust = [f for f, s in summary.items() if s.n_models and s.all_controls == s.n_models]
    lines.append(f"significant in every model under every control (Holm; partial on log step; "
                 f"first differences; beyond the baseline; detrended; partial first "
                 f"differences; above the noise floor): {', '.join(robust) if robust else 'none'}")
    trend = ("detrended", "partial_first_differences")
    calibrated = [f for f, s in summary.items() if any(s.significant.get(c) for c in trend)]
    pooled = [f for f, s in summary.items() if any(s.pooled.get(c) for c in trend)]
    lines.append("significant under a control calibrated for its design (detrended or partial "
                 f"first differences, Holm): in some model: {', '.join(calibrated) or 'none'}; "
                 f"pooled over models: {', '.join(pooled) or 'none'} (summary.md, C4)")
    return lines


def _final(model: ModelSummary, target: str) -> str:
    value = model.final_quality.get(target)
    return "-" if value is None else f"{value:.3f}"
