"""The seven report figures: features, perplexity and diagram distances across training.

Every figure is drawn from the records (one dict per model and checkpoint, as written by
the store) and the statistics computed by ``analysis.compute_statistics``. Records are
grouped by ``model_label`` in first-seen order and sorted by step; missing or non-finite
values are skipped point by point, so a partial run still gives every figure. Each model
keeps one colour and marker in every figure.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, NullLocator

from .homology import FEATURE_NAMES
from .spectral import SPECTRAL_NAMES
from .stats import by_model, is_topological

matplotlib.use("Agg")  # pyplot picks its backend lazily, so this still takes effect

logger = logging.getLogger(__name__)

DPI = 130
GRID_FIGSIZE = (12.0, 8.0)
SYMLOG_MIN_DECADES_RATIO = 100.0
SIGNIFICANCE = 0.05
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")

RC_PARAMS = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "figure.titlesize": 13,
}

# feature -> (panel title, y-axis label)
FEATURE_LABELS: dict[str, tuple[str, str]] = {
    "perplexity": ("Perplexity", "perplexity (log scale)"),
    "h0_n_features": ("H0 bar count", "finite H0 bars (count)"),
    "h0_total_persistence": ("H0 total persistence", "Σ persistence (distance)"),
    "h0_mean_persistence": ("H0 mean persistence", "mean persistence (distance)"),
    "h0_max_persistence": ("H0 max persistence", "max persistence (distance)"),
    "h1_n_features": ("H1 bar count", "H1 bars (count)"),
    "h1_total_persistence": ("H1 total persistence", "Σ persistence (distance)"),
    "h1_mean_persistence": ("H1 mean persistence", "mean persistence (distance)"),
    "h1_max_persistence": ("H1 max persistence", "max persistence (distance)"),
    "h1_persistence_entropy": ("H1 persistence entropy", "entropy (nats)"),
    "h1_n_significant": ("H1 significant bars", "significant H1 bars (count)"),
    "rankme": ("RankMe", "RankMe (effective dims)"),
    "effective_rank_cov": ("Covariance effective rank", "effective rank (dims)"),
    "participation_ratio": ("Participation ratio", "participation ratio (dims)"),
    "eigenspectrum_decay_alpha": ("Decay α, top-50 eigenvalue window",
                                  "α (−slope of log λᵢ vs log i)"),
    "stable_rank": ("Stable rank", "stable rank (dims)"),
}

TOPOLOGICAL_EVOLUTION = ("h1_n_features", "h1_total_persistence", "h1_persistence_entropy",
                         "h1_max_persistence", "h0_total_persistence", "h1_mean_persistence")
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

Series = dict[str, tuple[np.ndarray, np.ndarray]]  # model label -> (steps, values)


@dataclass(frozen=True)
class Style:
    """Colour and marker of one model, the same in every figure."""

    color: str
    marker: str


# --------------------------------------------------------------------------- data helpers


def _finite(value: object) -> float | None:
    """``value`` as a float, or None when it is missing, non-numeric or non-finite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _step(record: dict) -> float:
    """The record's step; a missing step (a lone final checkpoint) counts as 0."""
    step = _finite(record.get("step"))
    return 0.0 if step is None else step


def _value(record: dict, key: str) -> float | None:
    """A feature of the record, or a top-level field such as ``perplexity``."""
    features = record.get("features") or {}
    return _finite(features[key] if key in features else record.get(key))


def _model_styles(labels: Iterable[str]) -> dict[str, Style]:
    colors = plt.get_cmap("tab10").colors
    return {label: Style(to_hex(colors[i % len(colors)]), MARKERS[i % len(MARKERS)])
            for i, label in enumerate(labels)}


def _record_series(groups: dict[str, list[dict]], key: str) -> Series:
    """Per model, (steps, values) of ``key``, missing values dropped."""
    out: Series = {}
    for label, recs in groups.items():
        pts = [(_step(r), v) for r in recs if (v := _value(r, key)) is not None]
        out[label] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


def _wasserstein_series(statistics: dict, labels: Iterable[str], key: str) -> Series:
    """Per model, a consecutive-checkpoint distance plotted at its ``step_to``."""
    table = (statistics or {}).get("wasserstein") or {}
    out: Series = {}
    for label in labels:
        pts = sorted((_finite(row.get("step_to")) or 0.0, v)
                     for row in table.get(label) or []
                     if (v := _finite(row.get(key))) is not None)
        out[label] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


def _all_steps(records: Sequence[dict]) -> list[float]:
    return [_step(r) for r in records]


# ----------------------------------------------------------------------------- step axis


def step_axis_scale(steps: Iterable[float | None]) -> str:
    """``"symlog"`` when the steps span two decades or more, else ``"linear"``.

    The ratio is max(step) / max(smallest positive step, 1); steps include 0, so a log
    axis is impossible and symlog (linear below 1) is used instead.
    """
    vals = [x for s in steps if (x := _finite(s)) is not None]
    positive = [x for x in vals if x > 0]
    if not positive:
        return "linear"
    return "symlog" if max(positive) / max(min(positive), 1.0) >= SYMLOG_MIN_DECADES_RATIO \
        else "linear"


def set_step_axis(ax: Axes, steps: Iterable[float | None]) -> str:
    """Put the training-step scale, label and range on ``ax``; returns the scale chosen.

    The x range covers every step in ``steps`` (not only those drawn on this panel), so
    panels of one figure line up even where a series starts later (distances to the
    previous checkpoint) or has gaps.
    """
    vals = [x for s in steps if (x := _finite(s)) is not None]
    scale = step_axis_scale(vals)
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=1)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("training step (symlog)")
    else:
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if vals:
        lo, hi = min(vals), max(vals)
        if lo == hi:  # one checkpoint: a unit-wide window around it
            lo, hi = lo - 1, hi + 1
        ax.update_datalim([(lo, 0.0), (hi, 0.0)], updatey=False)
        ax.autoscale_view(scaley=False)
    return scale


# ------------------------------------------------------------------------------ panels


def _no_data(ax: Axes, message: str = "no data") -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center",
            fontsize=10, color="0.45")


def _spans_decade(values: Sequence[float]) -> bool:
    """Log scale only helps (and labels cleanly) when positive values span 10x or more."""
    return bool(values) and min(values) > 0 and max(values) >= 10 * min(values)


def _log_y_if_positive(ax: Axes, series: Series) -> None:
    values = [v for _, ys in series.values() for v in ys]
    if _spans_decade(values):
        ax.set_yscale("log")
    else:
        ax.set_ylabel(ax.get_ylabel().replace(" (log scale)", ""))


def _legend(ax: Axes, handles: list | None = None) -> None:
    """Legend where it hides least: "best" for a few entries, else a band of headroom on top."""
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    if len(handles) <= 4 or ax.get_yscale() != "linear":
        ax.legend(handles=handles, loc="best", framealpha=0.85)
        return
    ncol = min(3, len(handles))
    rows = math.ceil(len(handles) / ncol)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + (hi - lo) * 0.12 * rows)
    ax.legend(handles=handles, loc="upper center", ncol=ncol, framealpha=0.9,
              columnspacing=1.2, handlelength=2.2)


def _line_panel(ax: Axes, series: Series, styles: dict[str, Style], *, title: str,
                ylabel: str, steps: Sequence[float], logy: bool = False,
                dashed: Series | None = None, style_key: tuple[str, str] = ("", ""),
                empty: str = "no data") -> None:
    """One line with markers per model against training step, plus axis, title, legend.

    ``dashed`` is an optional second series per model, drawn dashed in the same colour;
    ``style_key`` then names the solid and the dashed line in the legend; ``empty`` is
    written on a panel with nothing to draw.
    """
    drawn = False
    for label, (x, y) in series.items():
        if x.size:
            st = styles[label]
            ax.plot(x, y, color=st.color, marker=st.marker, markersize=5, linewidth=1.6,
                    label=label)
            drawn = True
    handles = ax.get_legend_handles_labels()[0]
    dashed_drawn = False
    for label, (x, y) in (dashed or {}).items():
        if x.size:
            st = styles[label]
            ax.plot(x, y, color=st.color, marker=st.marker, markersize=4, linewidth=1.1,
                    linestyle="--", markerfacecolor="none", alpha=0.75)
            dashed_drawn = True
    if dashed_drawn:
        handles += [Line2D([], [], color="0.25", linestyle=ls, marker=m, label=name,
                           markerfacecolor=fc)
                    for ls, m, fc, name in (("-", "o", "0.25", style_key[0]),
                                            ("--", "o", "none", style_key[1]))]
    set_step_axis(ax, steps)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if not (drawn or dashed_drawn):
        _no_data(ax, empty)
        return
    if logy:
        _log_y_if_positive(ax, series)
    _legend(ax, handles)


def _feature_panel(ax: Axes, groups: dict[str, list[dict]], styles: dict[str, Style],
                   key: str, steps: Sequence[float], logy: bool = False) -> None:
    title, ylabel = FEATURE_LABELS.get(key, (key, key))
    _line_panel(ax, _record_series(groups, key), styles, title=title, ylabel=ylabel,
                steps=steps, logy=logy)


def _grid(n_panels: int, ncols: int, figsize: tuple[float, float] = GRID_FIGSIZE
          ) -> tuple[Figure, list[Axes]]:
    """A constrained-layout grid; panels beyond ``n_panels`` are hidden."""
    nrows = math.ceil(n_panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, layout="constrained",
                             squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    logger.debug("wrote %s", path)
    return path


def _feature_grid(records: Sequence[dict], keys: Sequence[str], path: str | Path,
                  suptitle: str, ncols: int = 3, note: str = "") -> Path:
    """One panel per feature vs step; ``note`` fills the first spare grid cell, if any."""
    groups = by_model(records)
    styles = _model_styles(groups)
    steps = _all_steps(records)
    n_cells = len(keys) + (1 if note and len(keys) % ncols else 0)
    fig, axes = _grid(n_cells, ncols)
    for ax, key in zip(axes, keys, strict=False):
        _feature_panel(ax, groups, styles, key, steps)
    if n_cells > len(keys):
        axes[-1].set_axis_off()
        axes[-1].text(0.02, 0.95, note, transform=axes[-1].transAxes, ha="left", va="top",
                      fontsize=10, linespacing=1.5, wrap=True)
    fig.suptitle(suptitle)
    return _save(fig, path)


# ----------------------------------------------------------------------------- figures

FigureFn = Callable[[Sequence[dict], dict, str | Path], Path]


def _styled(plot: FigureFn) -> FigureFn:
    """Draw the figure under the module's font sizes without touching global rcParams."""

    @functools.wraps(plot)
    def wrapper(records: Sequence[dict], statistics: dict, path: str | Path) -> Path:
        with plt.rc_context(RC_PARAMS):
            return plot(records, statistics, path)

    return wrapper


@_styled
def plot_summary_figure(records: Sequence[dict], statistics: dict, path: str | Path) -> Path:
    """Perplexity, H1 total persistence, RankMe and H1 Wasserstein rate vs step (2 × 2)."""
    groups = by_model(records)
    styles = _model_styles(groups)
    steps = _all_steps(records)
    fig, axes = _grid(4, 2)
    _feature_panel(axes[0], groups, styles, "perplexity", steps, logy=True)
    _feature_panel(axes[1], groups, styles, "h1_total_persistence", steps)
    _feature_panel(axes[2], groups, styles, "rankme", steps)
    _line_panel(axes[3], _wasserstein_series(statistics, groups, "h1_wasserstein"), styles,
                title="H1 Wasserstein distance to previous checkpoint",
                ylabel="W₁ (L∞ ground metric, distance)", steps=steps, empty=NO_PAIRS)
    fig.suptitle("Summary: quality, topology and spectrum across training")
    return _save(fig, path)


@_styled
def plot_topological_evolution(records: Sequence[dict], statistics: dict,
                               path: str | Path) -> Path:
    """Six persistent-homology features of the hidden states vs step (2 × 3)."""
    return _feature_grid(records, TOPOLOGICAL_EVOLUTION, path,
                         "Persistent-homology features across training")


@_styled
def plot_spectral_evolution(records: Sequence[dict], statistics: dict,
                            path: str | Path) -> Path:
    """RankMe, covariance effective rank, participation ratio, decay α, stable rank vs step."""
    return _feature_grid(records, SPECTRAL_NAMES, path,
                         "Spectral features of the hidden states across training",
                         note=SPECTRAL_NOTE)


def _correlation_text(corr: dict | None) -> str:
    corr = corr or {}
    r, p, n = corr.get("spearman_r"), corr.get("spearman_p"), corr.get("n")
    if r is None:
        return f"pooled Spearman ρ undefined (n = {n if n is not None else 0})"
    p_text = "n/a" if p is None else f"{p:.2g}"
    return f"pooled Spearman ρ = {r:+.2f}, p = {p_text} (n = {n})"


@_styled
def plot_topology_vs_perplexity(records: Sequence[dict], statistics: dict,
                                path: str | Path) -> Path:
    """H1 features against perplexity (log x), one colour per model, pooled Spearman noted.

    Each model's points are joined thinly in training order, so the trajectory shows; the
    pooled Spearman correlation from ``statistics`` is the second line of each title.
    """
    groups = by_model(records)
    styles = _model_styles(groups)
    pooled = ((statistics or {}).get("correlations") or {}).get("pooled") or {}
    present = {k for r in records for k in (r.get("features") or {})}
    keys = [k for k in H1_VS_PERPLEXITY if k in present] or list(H1_VS_PERPLEXITY[:4])
    fig, axes = _grid(len(keys), 3 if len(keys) > 4 else 2)
    for ax, key in zip(axes, keys, strict=True):
        title, ylabel = FEATURE_LABELS.get(key, (key, key))
        drawn = []
        for label, recs in groups.items():
            pts = [(x, y) for r in recs
                   if (x := _value(r, "perplexity")) is not None and x > 0
                   and (y := _value(r, key)) is not None]
            if not pts:
                continue
            st = styles[label]
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, color=st.color, marker=st.marker, markersize=5, linewidth=0.8,
                    markeredgecolor="white", markeredgewidth=0.4, label=label)
            drawn.extend(xs)
        ax.set_title(f"{title} vs perplexity\n{_correlation_text(pooled.get(key))}",
                     fontsize=10)
        ax.set_xlabel("perplexity (log scale)" if _spans_decade(drawn) else "perplexity")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if not drawn:
            _no_data(ax)
            continue
        if _spans_decade(drawn):
            ax.set_xscale("log")
        _legend(ax)
    fig.suptitle("H1 topology of the hidden states against perplexity")
    return _save(fig, path)


def _topological_order(name: str) -> tuple[str, int, str]:
    """Sort key: homology dimension, then the order of ``homology.FEATURE_NAMES``."""
    dim, _, stem = name.partition("_")
    rank = FEATURE_NAMES.index(stem) if stem in FEATURE_NAMES else len(FEATURE_NAMES)
    return dim, rank, stem


def _correlation_features(correlations: dict) -> tuple[list[str], list[str]]:
    """Topological and spectral features that have a correlation entry, in display order."""
    names: list[str] = []
    for table in [correlations.get("pooled") or {},
                  *(correlations.get("per_model") or {}).values()]:
        names.extend(k for k in table if k not in names)
    topo = sorted((k for k in names if is_topological(k)), key=_topological_order)
    spectral = [k for k in SPECTRAL_NAMES if k in names]
    return topo, spectral


def _spearman(table: dict, feature: str) -> tuple[float | None, float | None]:
    corr = table.get(feature) or {}
    return _finite(corr.get("spearman_r")), _finite(corr.get("spearman_p"))


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


@_styled
def plot_topo_vs_spectral_correlations(records: Sequence[dict], statistics: dict,
                                       path: str | Path) -> Path:
    """|Spearman ρ| of each feature with perplexity, one bar per model, grouped by feature.

    Topological and spectral features sit on differently shaded bands; hatched, faded bars
    are not significant (p ≥ 0.05 or p undefined); a missing bar means ρ is undefined
    (fewer than three checkpoints, or a constant series). A black tick marks the pooled ρ.
    """
    correlations = (statistics or {}).get("correlations") or {}
    per_model = correlations.get("per_model") or {}
    pooled = correlations.get("pooled") or {}
    all_labels = list(dict.fromkeys([*by_model(records), *per_model]))
    styles = _model_styles(all_labels)
    topo, spectral = _correlation_features(correlations)
    features = topo + spectral
    # models without a single defined ρ (e.g. one checkpoint) get no bar slot
    labels = [lb for lb in all_labels
              if any(_spearman(per_model.get(lb) or {}, f)[0] is not None for f in features)]
    height = 2.0 + len(features) * 0.13 * max(2.0, len(labels))
    fig, ax = plt.subplots(figsize=(12.0, min(max(height, 4.5), 13.0)), layout="constrained")
    target = correlations.get("target", "perplexity")
    ax.set_title(f"Strength of the rank correlation of each feature with {target}")
    if not features or not labels:
        _no_data(ax, "no correlation is defined (fewer than 3 checkpoints per model?)")
        ax.set_axis_off()
        return _save(fig, path)

    group_h = 0.8
    bar_h = group_h / len(labels)
    for i, label in enumerate(labels):
        table = per_model.get(label) or {}
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
        elif all(_spearman(per_model.get(lb) or {}, feature)[0] is None for lb in labels):
            ax.text(0.01, j, "undefined (constant or < 3 points)", va="center", fontsize=9,
                    color="0.4")
    _family_bands(ax, len(topo), len(spectral))

    ax.set_yticks(range(len(features)), features)
    ax.set_ylim(len(features) - 0.5, -0.5)
    ax.set_xlim(0, 1.02)
    ax.set_xticks(np.linspace(0, 1, 11))
    ax.set_xlabel(f"|Spearman ρ| with {target} (per model; black tick: pooled over models)")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(facecolor=styles[label].color, label=label) for label in labels]
    handles += [Patch(facecolor="none", edgecolor=styles[lb].color,
                      label=f"{lb} (no ρ defined)") for lb in all_labels if lb not in labels]
    handles += [Line2D([], [], color="black", linewidth=2.0, label="pooled"),
                Patch(facecolor="0.8", hatch="///", edgecolor="0.45",
                      label=f"p ≥ {SIGNIFICANCE:g} (not significant)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5),
               framealpha=0.9)
    return _save(fig, path)


@_styled
def plot_wasserstein_rate(records: Sequence[dict], statistics: dict, path: str | Path) -> Path:
    """H0 and H1 Wasserstein distance to the previous checkpoint vs step (L∞ solid, L2 dashed)."""
    groups = by_model(records)
    labels = list(dict.fromkeys([*groups, *((statistics or {}).get("wasserstein") or {})]))
    styles = _model_styles(labels)
    fig, axes = _grid(2, 2, figsize=(12.0, 5.5))
    for ax, q in zip(axes, (0, 1), strict=True):
        solid = _wasserstein_series(statistics, labels, f"h{q}_wasserstein")
        dashed = _wasserstein_series(statistics, labels, f"h{q}_wasserstein_persim_l2")
        steps = [x for xs, _ in [*solid.values(), *dashed.values()] for x in xs]
        _line_panel(ax, solid, styles, title=f"H{q}: distance to the previous checkpoint",
                    ylabel=f"H{q} W₁ distance (diagram units)",
                    steps=steps or _all_steps(records), dashed=dashed,
                    style_key=("L∞ (Hera)", "L2 (persim)"), empty=NO_PAIRS)
    fig.suptitle("Order-1 Wasserstein distance between consecutive checkpoints' diagrams, "
                 "at the later step (solid: L∞ ground metric, dashed: L2)")
    return _save(fig, path)


@_styled
def plot_perplexity_curves(records: Sequence[dict], statistics: dict, path: str | Path) -> Path:
    """Perplexity vs step per model, log y."""
    groups = by_model(records)
    fig, ax = plt.subplots(figsize=(9.0, 5.5), layout="constrained")
    _line_panel(ax, _record_series(groups, "perplexity"), _model_styles(groups),
                title="Perplexity across training", ylabel="perplexity (log scale)",
                steps=_all_steps(records), logy=True)
    return _save(fig, path)


FIGURES: dict[str, FigureFn] = {
    "summary_figure": plot_summary_figure,
    "topological_evolution": plot_topological_evolution,
    "spectral_evolution": plot_spectral_evolution,
    "topology_vs_perplexity": plot_topology_vs_perplexity,
    "topo_vs_spectral_correlations": plot_topo_vs_spectral_correlations,
    "wasserstein_rate": plot_wasserstein_rate,
    "perplexity_curves": plot_perplexity_curves,
}


def plot_all(records: list[dict], statistics: dict, out_dir: str | Path) -> list[Path]:
    """Write the seven figures as ``<name>.png`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [plot(records, statistics, out / f"{name}.png") for name, plot in FIGURES.items()]
