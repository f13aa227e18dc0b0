"""The report figures, in two families plus a correlation overview.

Embedding space (``FIGURES``, seven figures): hidden-state persistent homology, spectral
features, perplexity and diagram distances across training. Weight space
(``WEIGHT_FIGURES``): neural persistence and weight-row Vietoris–Rips homology across
training, neural persistence and H0 total persistence against the quality target (loss or
perplexity), and a heatmap of every feature's Spearman ρ with that target;
each figure's ``applies`` test (:func:`has_embedding`, :func:`has_weight`,
:func:`has_correlations`) lets ``figures.plot_all`` draw a family only when the records
carry its features. The figures follow :mod:`toposig.report.style`'s convention; the
drawing helpers every figure module shares (panels, model styles, the step axis) are in
:mod:`toposig.report.panels`.

Every figure is drawn from the records (one :class:`toposig.records.Record` per model and
checkpoint) and the statistics computed by ``analysis.compute_statistics``. Records are
grouped by model label in first-seen order and sorted by step; missing or non-finite
values are skipped point by point, so a partial run still gives every figure. Each model
keeps one colour and marker in every figure.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import matplotlib as mpl
import numpy as np
from matplotlib.artist import setp
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from toposig.analysis.compute import ArraysOf
from toposig.analysis.controls import holm
from toposig.analysis.correlations import by_model, feature_group, signature_of
from toposig.families.embedding import SPECTRUM
from toposig.families.embedding import TOPOLOGY as EMBEDDING_TOPOLOGY
from toposig.families.registry import groups as feature_groups
from toposig.families.registry import over_training
from toposig.families.weights import WeightsFamily
from toposig.features.names import SPECTRAL_NAMES
from toposig.records import Record
from toposig.records.sections import Distances
from toposig.records.statistics import (
    Correlation,
    Correlations,
    StatisticsError,
    correlations_of,
    wasserstein_of,
)
from toposig.report.panels import (
    FEATURE_LABELS,
    SIGNIFICANCE,
    Series,
    Style,
    all_steps,
    compact_handles,
    family_separators,
    feature_grid,
    feature_panel,
    finite_or_none,
    fit_lines,
    fitted_legend,
    heatmap_order,
    legend_label,
    line_panel,
    model_legend,
    model_styles,
    no_data,
    panel_grid,
    record_series,
    spans_decade,
    step_of,
    value_of,
)
from toposig.report.style import (
    Drawn,
    Figure,
    StatisticsLike,
    Target,
    figure,
    registry,
    subplots,
)

logger = logging.getLogger(__name__)
EMBEDDING_GROUPS = (EMBEDDING_TOPOLOGY, SPECTRUM)  # what makes a record's hidden states'


def heatmap_groups() -> list:
    """The heatmap's row groups: the weight space's first (the seed paper's), then every
    other family's in table order (a family registered since gets its rows)."""
    every = feature_groups()
    weights = [g for g in every if g in WeightsFamily.groups]
    return weights + [g for g in every if g not in weights]

NP_SEED_NOTE = "per-matrix max normalisation, p = 1, divided by max · (n − 1)"

H1_VS_PERPLEXITY = ("h1_total_persistence", "h1_n_features", "h1_persistence_entropy",
                    "h1_max_persistence", "h1_mean_persistence", "h1_n_significant")

SPECTRAL_NOTE = (
    "Centred cloud; σ: singular values,\nλ = σ² / (n − 1): covariance eigenvalues.\n\n"
    "RankMe: exp(entropy of σ / Σσ)\n"
    "effective rank: exp(entropy of λ / Σλ)\n"
    "participation ratio: (Σλ)² / Σλ²\n"
    "decay α: −slope of log λᵢ on log i,\n    fitted on the top-50 eigenvalues\n"
    "stable rank: Σλ / λ_max"
)

NO_PAIRS = "no consecutive checkpoints"


def _wasserstein_series(distances: Distances, labels: Iterable[str], dim: int,
                        l2: bool = False, per_step: bool = False) -> Series:
    """Per model, the distance of homology dimension ``dim`` between consecutive
    checkpoints (L∞ ground metric, or L2 with ``l2``) plotted at its ``step_to``; with
    ``per_step``, divided by the gap ``step_to - step_from`` (distance per training step)."""
    out: Series = {}
    for label in labels:
        pts = sorted((finite_or_none(d.step_to) or 0.0, v / (d.gap if per_step else 1))
                     for d in distances.per_model.get(label, ())
                     if (v := finite_or_none((d.l2 if l2 else d.linf).get(dim))) is not None
                     and (not per_step or d.gap > 0))
        out[label] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


# ----------------------------------------------------------------------------- figures


def has_embedding(records: Sequence[Record], statistics: StatisticsLike | None = None,
                  arrays: ArraysOf | None = None) -> bool:
    """Some record has a hidden-state feature (topological or spectral) or a perplexity."""
    return any(
        value_of(r, "perplexity") is not None
        or any(feature_group(k) in EMBEDDING_GROUPS and finite_or_none(v) is not None
               for k, v in r.features.items())
        for r in records)


def has_weight(records: Sequence[Record], statistics: StatisticsLike | None = None,
               arrays: ArraysOf | None = None) -> bool:
    """Some record has a weight-space feature (``np_*`` or ``weight_*``)."""
    return any(signature_of(k) == WeightsFamily.name and finite_or_none(v) is not None
               for r in records for k, v in r.features.items())


def has_correlations(records: Sequence[Record], statistics: StatisticsLike | None = None,
                     arrays: ArraysOf | None = None) -> bool:
    """The statistics hold a correlation of some feature with the target."""
    correlations = correlations_in(statistics)
    return bool(correlations.pooled) or any(correlations.per_model.values())


NO_CORRELATIONS = Correlations(target="", per_model=MappingProxyType({}),
                               pooled=MappingProxyType({}))


def correlations_in(statistics: StatisticsLike | None) -> Correlations:
    """The statistics' correlations with the target (:data:`NO_CORRELATIONS` where they
    have none, or damaged ones: the summary says what is wrong with them)."""
    try:
        return correlations_of(statistics or {}) or NO_CORRELATIONS
    except StatisticsError:
        return NO_CORRELATIONS


@figure("summary_figure", has_embedding)
def plot_summary_figure(records: Sequence[Record], statistics: StatisticsLike,
                        arrays: ArraysOf | None = None,
                        on: Target | None = None) -> Drawn | None:
    """Perplexity, H1 total persistence (with its bootstrap band), RankMe and the H1
    Wasserstein distance to the previous checkpoint (per step of gap when gaps differ) vs
    step (2 × 2)."""
    groups = by_model(records)
    styles = model_styles(groups)
    steps = all_steps(records)
    fig, axes = panel_grid(4, 2, target=on)
    feature_panel(axes[0], groups, styles, "perplexity", steps, logy=True)
    feature_panel(axes[1], groups, styles, "h1_total_persistence", steps)
    feature_panel(axes[2], groups, styles, "rankme", steps)
    distances = wasserstein_of(statistics or {}) or Distances()
    per_step = distances.gaps_differ(groups)
    line_panel(axes[3], _wasserstein_series(distances, groups, 1, per_step=per_step),
                styles, title="H1 Wasserstein distance to previous checkpoint"
                + (", per step of gap" if per_step else ""),
                ylabel="W₁ (L∞ ground metric)" + (" / steps between checkpoints"
                                                   if per_step else ""),
                steps=steps, logy=per_step, empty=NO_PAIRS)
    fig.suptitle("Summary: quality, topology and spectrum across training")
    return fig


@figure("topological_evolution", has_embedding, overlay=True)
def plot_topological_evolution(records: Sequence[Record], statistics: StatisticsLike,
                               arrays: ArraysOf | None = None,
                               on: Target | None = None) -> Drawn | None:
    """Six persistent-homology features of the hidden states vs step (2 × 3)."""
    return feature_grid(records, over_training("topological_evolution"),
                         "Persistent-homology features across training", target=on)


@figure("spectral_evolution", has_embedding, overlay=True)
def plot_spectral_evolution(records: Sequence[Record], statistics: StatisticsLike,
                            arrays: ArraysOf | None = None,
                            on: Target | None = None) -> Drawn | None:
    """RankMe, covariance effective rank, participation ratio, decay α, stable rank vs step."""
    return feature_grid(records, SPECTRAL_NAMES,
                         "Spectral features of the hidden states across training",
                         note=SPECTRAL_NOTE, target=on)


POOLED_RHO = "pooled ρ (description)"
"""How a panel title names the Spearman ρ over every checkpoint of every model at once: a
description of the points drawn, never a test. The checkpoints of a run are not
independent (each one is the one before plus some training), so a p value of the pooled
points would be invalid (it reaches 1e-55 on a few hundred checkpoints); no figure prints
one. The calibrated tests are the controls' (``controls_summary``) and summary.md's C4."""


def _correlation_text(corr: Correlation | None) -> str:
    """A title's line for the pooled Spearman ρ: ``pooled ρ (description) = +0.83
    (n = 40)``, with no p value (see :data:`POOLED_RHO`)."""
    r, n = (finite_or_none(corr.spearman_r), corr.n) if corr else (None, None)
    n_text = f"n = {n if n is not None else 0}"
    if r is None:
        return f"{POOLED_RHO} undefined ({n_text})"
    return f"{POOLED_RHO} = {r:+.2f} ({n_text})"


@figure("topology_vs_perplexity", has_embedding)
def plot_topology_vs_perplexity(records: Sequence[Record], statistics: StatisticsLike,
                                arrays: ArraysOf | None = None,
                                on: Target | None = None) -> Drawn | None:
    """H1 features against perplexity (log x), one colour per model, pooled Spearman noted.

    Each model's points are joined thinly in training order, so the trajectory shows; the
    pooled Spearman ρ from ``statistics`` is the second line of each title, as a
    description with no p value (:data:`POOLED_RHO`: the checkpoints are not independent).
    """
    groups = by_model(records)
    styles = model_styles(groups)
    pooled = correlations_in(statistics).pooled
    present = {k for r in records for k in r.features}
    keys = [k for k in H1_VS_PERPLEXITY if k in present] or list(H1_VS_PERPLEXITY[:4])
    fig, axes = panel_grid(len(keys), 3 if len(keys) > 4 else 2, target=on)
    for ax, key in zip(axes, keys, strict=True):
        title, ylabel = FEATURE_LABELS.get(key, (key, key))
        drawn = []
        for label, recs in groups.items():
            pts = [(x, y) for r in recs
                   if (x := value_of(r, "perplexity")) is not None and x > 0
                   and (y := value_of(r, key)) is not None]
            if not pts:
                continue
            st = styles[label]
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, color=st.color, marker=st.marker, markersize=5, linewidth=0.8,
                    markeredgecolor="white", markeredgewidth=0.4, label=label)
            drawn.extend(xs)
        ax.set_title(f"{title} vs perplexity\n{_correlation_text(pooled.get(key))}",
                     fontsize=10)
        ax.set_xlabel("perplexity (log scale)" if spans_decade(drawn) else "perplexity")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if not drawn:
            no_data(ax)
            continue
        if spans_decade(drawn):
            ax.set_xscale("log")
    model_legend(fig, styles)
    fig.suptitle("H1 topology of the hidden states against perplexity")
    return fig


def _correlation_features(correlations: Correlations) -> tuple[list[str], list[str]]:
    """Topological and spectral features that have a correlation entry, in display order."""
    names: list[str] = []
    for table in [correlations.pooled, *correlations.per_model.values()]:
        names.extend(k for k in table if k not in names)
    topo = sorted((k for k in names if feature_group(k) is EMBEDDING_TOPOLOGY),
                  key=EMBEDDING_TOPOLOGY.sort_key)
    spectral = [k for k in SPECTRAL_NAMES if k in names]
    return topo, spectral


def _spearman(table: Mapping[str, Correlation], feature: str
              ) -> tuple[float | None, float | None]:
    corr = table.get(feature)
    if corr is None:
        return None, None
    return finite_or_none(corr.spearman_r), finite_or_none(corr.spearman_p)


def _family_bands(ax: Axes, n_topo: int, n_spectral: int) -> None:
    """Shaded bands, a separator and side labels for the topological and spectral rows."""
    n = n_topo + n_spectral
    for lo, hi, name, shade in ((0, n_topo, "topological", 0.0), (n_topo, n, "spectral", 0.09)):
        if hi == lo:
            continue
        if shade:
            ax.axhspan(lo - 0.5, hi - 0.5, color="0.4", alpha=shade, zorder=0, linewidth=0)
        ax.text(1.01, (lo + hi - 1) / 2, name, transform=ax.get_yaxis_transform(),
                rotation=-90, va="center", ha="left", fontsize=11, fontweight="bold",
                color="0.25")
    if n_topo and n_spectral:
        ax.axhline(n_topo - 0.5, color="0.3", linewidth=1.0)


@figure("topo_vs_spectral_correlations", has_embedding)
def plot_topo_vs_spectral_correlations(records: Sequence[Record], statistics: StatisticsLike,
                                       arrays: ArraysOf | None = None,
                                       on: Target | None = None) -> Drawn | None:
    """|Spearman ρ| of each feature with perplexity, one bar per model, grouped by feature.

    Topological and spectral features sit on differently shaded bands; hatched, faded bars
    are not significant (p ≥ 0.05 or p undefined); a missing bar means ρ is undefined
    (fewer than three checkpoints, or a constant series). A black tick marks the pooled ρ.
    """
    correlations = correlations_in(statistics)
    per_model, pooled = correlations.per_model, correlations.pooled
    all_labels = list(dict.fromkeys([*by_model(records), *per_model]))
    styles = model_styles(all_labels)
    topo, spectral = _correlation_features(correlations)
    features = topo + spectral
    # models without a single defined ρ (e.g. one checkpoint) get no bar slot
    labels = [lb for lb in all_labels
              if any(_spearman(per_model.get(lb, {}), f)[0] is not None for f in features)]
    height = 2.0 + len(features) * 0.13 * max(2.0, len(labels))
    fig, ax = subplots(figsize=(12.0, min(max(height, 4.5), 13.0)), layout="constrained",
                       figure_artists=True, target=on)
    target = correlations.target if correlations is not NO_CORRELATIONS else "perplexity"
    ax.set_title(f"Strength of the rank correlation of each feature with {_target_name(target)}")
    if not features or not labels:
        no_data(ax, "no correlation is defined (fewer than 3 checkpoints per model?)")
        ax.set_axis_off()
        return fig

    group_h = 0.8
    bar_h = group_h / len(labels)
    for i, label in enumerate(labels):
        table = per_model.get(label, {})
        for j, feature in enumerate(features):
            r, p = _spearman(table, feature)
            if r is None:
                continue
            significant = p is not None and p < SIGNIFICANCE
            color = styles[label].color
            ax.barh(j - group_h / 2 + (i + 0.5) * bar_h, abs(r), height=bar_h * 0.9,
                    color=color, alpha=1.0 if significant else 0.4,
                    hatch=None if significant else "///",
                    edgecolor="white" if significant else color, linewidth=0.5)
    for j, feature in enumerate(features):
        r, _ = _spearman(pooled, feature)
        if r is not None:
            ax.plot([abs(r)] * 2, [j - group_h / 2, j + group_h / 2], color="black",
                    linewidth=2.0, solid_capstyle="butt", zorder=4)
        elif all(_spearman(per_model.get(lb, {}), feature)[0] is None for lb in labels):
            ax.text(0.01, j, "undefined (constant or < 3 points)", va="center", fontsize=9,
                    color="0.4")
    _family_bands(ax, len(topo), len(spectral))

    ax.set_yticks(range(len(features)), features)
    ax.set_ylim(len(features) - 0.5, -0.5)
    ax.set_xlim(0, 1.02)
    ax.set_xticks(np.linspace(0, 1, 11))
    ax.set_xlabel(f"|Spearman ρ| with {_target_name(target)} (per model; black tick: pooled "
                  "over models)")
    ax.grid(True, axis="x", alpha=0.3)
    handles = compact_handles([Patch(facecolor=styles[label].color, label=label)
                               for label in labels])
    handles += [Patch(facecolor="none", edgecolor=styles[lb].color,
                      label=f"{lb} (no ρ defined)") for lb in all_labels if lb not in labels]
    handles += [Line2D([], [], color="black", linewidth=2.0, label="pooled"),
                Patch(facecolor="0.8", hatch="///", edgecolor="0.45",
                      label=f"p ≥ {SIGNIFICANCE:g} (not significant)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5),
               framealpha=0.9)
    return fig


@figure("wasserstein_rate", has_embedding)
def plot_wasserstein_rate(records: Sequence[Record], statistics: StatisticsLike,
                          arrays: ArraysOf | None = None,
                          on: Target | None = None) -> Drawn | None:
    """H0 and H1 Wasserstein distance to the previous checkpoint vs step (L∞ solid, L2
    dashed); per step of gap when checkpoints are unevenly spaced."""
    groups = by_model(records)
    distances = wasserstein_of(statistics or {}) or Distances()
    labels = list(dict.fromkeys([*groups, *distances.per_model]))
    styles = model_styles(labels)
    fig, axes = panel_grid(2, 2, figsize=(12.0, 5.5), target=on)
    per_step = distances.gaps_differ(labels)
    for ax, q in zip(axes, (0, 1), strict=True):
        solid = _wasserstein_series(distances, labels, q, per_step=per_step)
        dashed = _wasserstein_series(distances, labels, q, l2=True, per_step=per_step)
        steps = [x for xs, _ in [*solid.values(), *dashed.values()] for x in xs]
        line_panel(ax, solid, styles, title=f"H{q}: distance to the previous checkpoint",
                    ylabel=f"H{q} W₁ (diagram units)"
                    + (" per step of gap" if per_step else ""),
                    steps=steps or all_steps(records), logy=per_step, dashed=dashed,
                    style_key=("L∞ (Hera)", "L2 (persim)"), empty=NO_PAIRS)
    fig.suptitle("Order-1 Wasserstein distance between consecutive checkpoints' diagrams, "
                 "at the later step\n"
                 + ("divided by the steps between them (gaps differ); " if per_step else "")
                 + "solid: L∞ ground metric, dashed: L2")
    return fig


@figure("perplexity_curves", has_embedding, overlay=True)
def plot_perplexity_curves(records: Sequence[Record], statistics: StatisticsLike,
                           arrays: ArraysOf | None = None,
                           on: Target | None = None) -> Drawn | None:
    """Perplexity vs step per model, log y."""
    groups = by_model(records)
    fig, ax = subplots(figsize=(9.0, 5.5), layout="constrained", target=on)
    line_panel(ax, record_series(groups, "perplexity"), model_styles(groups),
                title="Perplexity across training", ylabel="perplexity (log scale)",
                steps=all_steps(records), logy=True)
    return fig


# ------------------------------------------------------------------------ weight space


def _band_panel(ax: Axes, groups: dict[str, list[Record]], styles: dict[str, Style],
                prefix: str, steps: Sequence[float], *, title: str, ylabel: str) -> None:
    """``<prefix>_mean`` per model vs step, a shaded ±``<prefix>_std`` band around it and,
    where present, thin dotted ``<prefix>_min`` / ``<prefix>_max`` lines."""
    extra: list[Line2D | Patch] = []
    band = extrema = False
    for label, recs in groups.items():
        color = styles[label].color
        pts = [(step_of(r), m, s) for r in recs
               if (m := value_of(r, f"{prefix}_mean")) is not None
               and (s := value_of(r, f"{prefix}_std")) is not None]
        if pts:
            x, m, s = (np.array(c) for c in zip(*pts, strict=True))
            if x.size > 1:
                ax.fill_between(x, m - s, m + s, color=color, alpha=0.15, linewidth=0)
            else:  # a band needs two steps; one checkpoint gets an error bar
                ax.errorbar(x, m, yerr=s, fmt="none", ecolor=color, alpha=0.5, capsize=4)
            band = True
        for key in (f"{prefix}_min", f"{prefix}_max"):
            xs, ys = record_series({label: recs}, key)[label]
            if xs.size:
                ax.plot(xs, ys, color=color, linestyle=":", linewidth=0.9, alpha=0.8)
                extrema = True
    if band:
        extra.append(Patch(facecolor="0.25", alpha=0.2, label="± 1 std over matrices"))
    if extrema:
        extra.append(Line2D([], [], color="0.25", linestyle=":", linewidth=0.9,
                            label="min / max over matrices"))
    line_panel(ax, record_series(groups, f"{prefix}_mean"), styles, title=title,
                ylabel=ylabel, steps=steps, extra_handles=extra)


@figure("neural_persistence_evolution", has_weight, overlay=True)
def plot_neural_persistence_evolution(records: Sequence[Record], statistics: StatisticsLike,
                                      arrays: ArraysOf | None = None,
                                      on: Target | None = None) -> Drawn | None:
    """Neural persistence vs step (1 × 2): Rieck et al.'s normalised NP, the seed's variant.

    Lines are the mean over the checkpoint's weight matrices, shaded bands ± one standard
    deviation over them and dotted lines their min and max (where recorded).
    """
    groups = by_model(records)
    styles = model_styles(groups)
    steps = all_steps(records)
    fig, axes = panel_grid(2, 2, figsize=(12.0, 5.0), target=on)
    _band_panel(axes[0], groups, styles, "np", steps, title=FEATURE_LABELS["np_mean"][0],
                ylabel=FEATURE_LABELS["np_mean"][1])
    _band_panel(axes[1], groups, styles, "np_seed", steps,
                title=f"{FEATURE_LABELS['np_seed_mean'][0]}\n({NP_SEED_NOTE})",
                ylabel=FEATURE_LABELS["np_seed_mean"][1])
    fig.suptitle("Neural persistence of the weight matrices across training "
                 "(mean over matrices)")
    return fig


@figure("vr_persistence_evolution", has_weight, overlay=True)
def plot_vr_persistence_evolution(records: Sequence[Record], statistics: StatisticsLike,
                                  arrays: ArraysOf | None = None,
                                  on: Target | None = None) -> Drawn | None:
    """Weight-row Vietoris–Rips homology vs step (2 × 2), summed over weight matrices.

    H0 and H1 total persistence, the H1 bar count, and the mean persistence entropy (H0
    solid, H1 dashed).
    """
    groups = by_model(records)
    styles = model_styles(groups)
    steps = all_steps(records)
    fig, axes = panel_grid(4, 2, target=on)
    for ax, key in zip(axes, ("weight_h0_total", "weight_h1_total", "weight_h1_count"),
                       strict=False):
        feature_panel(ax, groups, styles, key, steps)
    title, ylabel = FEATURE_LABELS["weight_h0_entropy_mean"]
    line_panel(axes[3], record_series(groups, "weight_h0_entropy_mean"), styles,
                title=title, ylabel=ylabel, steps=steps,
                dashed=record_series(groups, "weight_h1_entropy_mean"),
                style_key=("H0", "H1"))
    fig.suptitle("Vietoris–Rips homology of the weight rows across training "
                 "(summed over weight matrices)")
    return fig


def _target(records: Sequence[Record], statistics: StatisticsLike) -> str:
    """The quality measure the correlations were computed against (``perplexity``,
    ``loss`` or ``mlm_loss``); without statistics, the first that some record has."""
    target = correlations_in(statistics).target
    if target:
        return target
    return next((t for t in ("perplexity", "loss", "mlm_loss")
                 if any(value_of(r, t) is not None for r in records)), "loss")


def _target_name(target: str) -> str:
    """A quality measure's name as figures spell it."""
    return {"mlm_loss": "masked-LM loss"}.get(target, target)


def _target_label(target: str, log: bool) -> str:
    name, unit = {"loss": ("loss", " (nats / token)"),
                  "mlm_loss": ("masked-LM loss", " (nats / masked token)")}.get(target,
                                                                               (target, ""))
    return f"{name}{unit}{' (log scale)' if log else ''}"


def _rho_text(corr: Correlation | None) -> str:
    """Short per-model Spearman annotation: ``ρ = +0.83, p = 0.012 (n = 8)``."""
    r, p = (finite_or_none(corr.spearman_r), finite_or_none(corr.spearman_p)) if corr \
        else (None, None)
    n = corr.n if corr else None
    n_text = f"n = {n if n is not None else 0}"
    if r is None:
        return f"ρ n/a ({n_text})"
    return f"ρ = {r:+.2f}, p = {'n/a' if p is None else f'{p:.2g}'} ({n_text})"


def _quality_scatter(ax: Axes, groups: dict[str, list[Record]], styles: dict[str, Style],
                     key: str, target: str, correlations: Correlations) -> None:
    """``target`` against feature ``key``, one colour per model, joined in step order.

    Markers grow and darken with training progress (log step); the legend gives each
    model's Spearman ρ, the title the pooled one (a description, no p: :data:`POOLED_RHO`).
    """
    per_model, pooled = correlations.per_model, correlations.pooled
    all_steps = [step_of(r) for recs in groups.values() for r in recs]
    top = math.log1p(max([*all_steps, 0.0]))
    handles: list[Line2D] = []
    ys_drawn: list[float] = []
    for label, recs in groups.items():
        pts = [(x, y, step_of(r)) for r in recs
               if (x := value_of(r, key)) is not None and (y := value_of(r, target)) is not None]
        if not pts:
            continue
        st = styles[label]
        xs, ys, ss = (np.array(c) for c in zip(*pts, strict=True))
        progress = np.log1p(np.maximum(ss, 0.0)) / top if top > 0 else np.ones_like(ss)
        colors = [to_rgba(st.color, 0.35 + 0.65 * t) for t in progress]
        ax.plot(xs, ys, color=st.color, linewidth=0.8, alpha=0.6, zorder=2)
        ax.scatter(xs, ys, s=12 + 48 * progress, c=colors, marker=st.marker,
                   edgecolors="white", linewidths=0.4, zorder=3)
        ys_drawn.extend(ys)
        rho = _rho_text(per_model.get(label, {}).get(key))
        handles.append(Line2D([], [], color=st.color, marker=st.marker, linewidth=0.8,
                              label=legend_label(label, rho, len(groups))))
    title, xlabel = FEATURE_LABELS.get(key, (key, key))
    ax.set_title(f"{_target_name(target)} vs {title[0].lower()}{title[1:]}\n"
                 f"{_correlation_text(pooled.get(key))}", fontsize=10)
    ax.set_xlabel(xlabel)
    log = target == "perplexity" and spans_decade(ys_drawn)
    ax.set_ylabel(_target_label(target, log))
    ax.grid(True, which="major", alpha=0.3)
    if not handles:
        no_data(ax)
        return
    if log:
        ax.set_yscale("log")
    handles = compact_handles(handles)
    handles.append(Line2D([], [], color="0.35", marker="o", linestyle="none", markersize=7,
                          label="larger, darker marker: later step"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14),
              framealpha=0.9, fontsize=8.5)


@figure("np_vs_loss_scatter", has_weight)
def plot_np_vs_loss_scatter(records: Sequence[Record], statistics: StatisticsLike,
                            arrays: ArraysOf | None = None,
                            on: Target | None = None) -> Drawn | None:
    """The quality target (loss or perplexity) against neural persistence and against
    weight-row H0 total persistence (1 × 2), one colour per model, Spearman ρ noted.

    The target is the one the statistics' correlations were computed against; each model's
    points are joined in training order.
    """
    groups = by_model(records)
    styles = model_styles(groups)
    target = _target(records, statistics)
    correlations = correlations_in(statistics)
    fig, axes = panel_grid(2, 2, figsize=(12.0, 6.0), target=on)
    for ax, key in zip(axes, ("np_mean", "weight_h0_total"), strict=True):
        _quality_scatter(ax, groups, styles, key, target, correlations)
    fig.suptitle(f"Model quality ({target}) against weight-space topology")
    return fig


def _heatmap_features(correlations: Correlations) -> list[tuple[str, list[str]]]:
    """Features with a correlation entry, as (family label, names) groups in display order."""
    names: list[str] = []
    for table in [correlations.pooled, *correlations.per_model.values()]:
        names.extend(k for k in table if k not in names)
    groups = []
    for group in heatmap_groups():
        members = sorted((k for k in names if feature_group(k) is group), key=heatmap_order)
        if members:
            groups.append((group.label, members))
    return groups


HEATMAP_CAVEAT = ("raw correlations over all checkpoints: a description, not a test; the "
                  "calibrated tests are summary.md's table C4")
"""The heatmap's subtitle: what its cells are, and where the tests are."""


@figure("correlation_heatmap", has_correlations)
def plot_correlation_heatmap(records: Sequence[Record], statistics: StatisticsLike,
                             arrays: ArraysOf | None = None,
                             on: Target | None = None) -> Drawn | None:
    """Spearman ρ of every feature with the quality target: rows features, grouped by
    family (weight space first), columns each model and the pooled series.

    A description of the raw correlations, not a test, and titled so
    (:data:`HEATMAP_CAVEAT`): the checkpoints of a run are not independent, so neither a
    model's nor the pooled p is calibrated; the calibrated tests are the controls'
    (``controls_summary``) and summary.md's C4.

    Colours run over [−1, 1] (``RdBu_r``); every cell states ρ. Bold cells follow the
    tables' rule: Holm-adjusted p < 0.05, adjusted over every cell of the figure with a
    p value. Faded, hatched cells are not significant (or have no p); grey "n/a" cells
    have no ρ (fewer than three checkpoints, or a constant series).
    """
    correlations = correlations_in(statistics)
    per_model = correlations.per_model
    target = _target(records, statistics)
    groups = _heatmap_features(correlations)
    features = [f for _, members in groups for f in members]
    columns = list(dict.fromkeys([*by_model(records), *per_model]))
    tables = [per_model.get(label, {}) for label in columns]
    if columns:  # pooled only means something next to at least one model
        columns.append("pooled")
        tables.append(correlations.pooled)
    width = min(max(7.0, 4.5 + 1.15 * len(columns)), 16.0)
    height = max(4.0, 2.4 + 0.3 * len(features))
    fig, ax = subplots(figsize=(width, height), layout="constrained",
                       figure_artists=True, target=on)
    ax.set_title(fit_lines(
        f"Raw Spearman ρ of each feature with {_target_name(target)} over all "
        f"checkpoints\n{HEATMAP_CAVEAT}\nbold: Holm-adjusted p < {SIGNIFICANCE:g} over the "
        "cells shown, uncalibrated (the checkpoints are not independent)", width, 11),
        fontsize=11)
    if not features or not columns:
        no_data(ax, "no correlations")
        ax.set_axis_off()
        return fig

    cmap = mpl.colormaps["RdBu_r"]
    norm = Normalize(-1.0, 1.0)
    cells = {(i, j): _spearman(table, feature)
             for i, feature in enumerate(features) for j, table in enumerate(tables)}
    adjusted = dict(zip(cells, holm([p for _, p in cells.values()]), strict=True))
    n_tests = sum(p is not None for p in adjusted.values())
    for i, _feature in enumerate(features):
        for j, _table in enumerate(tables):
            r, _ = cells[i, j]
            p = adjusted[i, j]
            if r is None:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.86",
                                       edgecolor="white", linewidth=1.0))
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=8.5, color="0.45")
                continue
            significant = p is not None and p < SIGNIFICANCE
            face = np.array(cmap(norm(r)))
            if not significant:  # fade towards white
                face[:3] = 0.45 * face[:3] + 0.55
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=face,
                                   edgecolor="white", linewidth=1.0,
                                   hatch=None if significant else "////"))
            dark = significant and abs(r) > 0.6
            ax.text(j, i, f"{r:+.2f}", ha="center", va="center", fontsize=9,
                    color="white" if dark else ("black" if significant else "0.4"),
                    fontweight="bold" if significant else "normal")
    family_separators(ax, groups, label_x=1.015, linewidth=1.6)
    if len(columns) > 1:
        ax.axvline(len(columns) - 1.5, color="0.15", linewidth=1.6)  # models | pooled

    ax.set_xlim(-0.5, len(columns) - 0.5)
    ax.set_ylim(len(features) - 0.5, -0.5)
    ax.set_xticks(range(len(columns)), columns)
    ax.xaxis.tick_top()
    if max(len(c) for c in columns) * 0.075 > width / (len(columns) + 3.5):  # too wide
        setp(ax.get_xticklabels(), rotation=25, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(len(features)), features)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=min(1.0, 8 / height),
                 pad=0.02, aspect=30, label=f"Spearman ρ with {_target_name(target)}")
    handles = [Patch(facecolor="0.93", hatch="////", edgecolor="0.6",
                     label=f"not significant (Holm-adjusted p ≥ {SIGNIFICANCE:g} over the "
                           f"{n_tests} tests shown, or p undefined)"),
               Patch(facecolor="0.86", edgecolor="0.6",
                     label="n/a: ρ undefined (< 3 points or constant)")]
    fitted_legend(fig, handles, width, most=2, framealpha=0.9)
    return fig


# The embedding figures, drawn when some record has a hidden-state feature or a perplexity.
FIGURES: dict[str, Figure] = registry(
    plot_summary_figure, plot_topological_evolution, plot_spectral_evolution,
    plot_topology_vs_perplexity, plot_topo_vs_spectral_correlations, plot_wasserstein_rate,
    plot_perplexity_curves)
# The weight figures, drawn when some record has a weight feature, and the heatmap of every
# feature's correlation with the target, drawn whenever the statistics hold correlations.
WEIGHT_FIGURES: dict[str, Figure] = registry(
    plot_neural_persistence_evolution, plot_vr_persistence_evolution, plot_np_vs_loss_scatter,
    plot_correlation_heatmap)
