"""The drawing helpers every figure module shares: model styles and legends, the step
axis, bootstrap bands, line panels and panel grids, the feature labels.

Pure drawing on the Axes they are given, from records (one
:class:`toposig.records.Record` per model and checkpoint) and values; nothing here reads a
file or knows a figure. Records are grouped by model label in first-seen order and sorted
by step; missing or non-finite values are skipped point by point. Each model keeps one
colour and marker in every figure, each seed of an ensemble its own (:func:`model_styles`).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, NullLocator

from toposig.analysis.correlations import by_model, feature_group
from toposig.records import Record
from toposig.report.style import Drawn, Target, subplots

GRID_FIGSIZE = (12.0, 8.0)
SYMLOG_MIN_DECADES_RATIO = 100.0
SIGNIFICANCE = 0.05
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")

# feature -> (panel title, y-axis label)
FEATURE_LABELS: dict[str, tuple[str, str]] = {
    "perplexity": ("Perplexity", "perplexity (log scale)"),
    "mlm_loss": ("Masked-LM loss", "masked-LM loss (nats / masked token)"),
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
    "np_mean": ("Neural persistence (Rieck et al. 2019)", "normalised NP (0–1)"),
    "np_seed_mean": ("Neural persistence, seed-paper variant", "NP / (max · (n − 1))"),
    "weight_h0_total": ("Weight-row H0 total persistence", "Σ persistence (weight distance)"),
    "weight_h1_total": ("Weight-row H1 total persistence", "Σ persistence (weight distance)"),
    "weight_h1_count": ("Weight-row H1 bar count", "H1 bars (count)"),
    "weight_h0_entropy_mean": ("Weight-row persistence entropy", "mean entropy (nats)"),
    "hessian_eig_1": ("Top Hessian eigenvalue λ₁", "λ₁ (nats / weight unit²)"),
    "hessian_trace": ("Hessian trace (Hutchinson)", "tr H (nats / weight unit²)"),
    "landscape_n_minima": ("Loss-surface basins", "minima on the grid (count)"),
    "landscape_basin_depth": ("Depth of the checkpoint's basin", "depth (nats)"),
    "grad_h0_total_persistence": ("Gradient H0 total persistence", "Σ persistence (gradient)"),
    "grad_h1_total_persistence": ("Gradient H1 total persistence", "Σ persistence (gradient)"),
    "grad_norm_mean": ("Mean per-example gradient norm", "‖∇ℓ‖ (nats / weight unit)"),
    "grad_cosine_mean": ("Mean gradient cosine between examples", "cosine (−1 to 1)"),
}


Series = dict[str, tuple[np.ndarray, np.ndarray]]  # model label -> (steps, values)


@dataclass(frozen=True)
class Style:
    """Colour and marker of one model, the same in every figure."""

    color: str
    marker: str


# --------------------------------------------------------------------------- data helpers


def finite_or_none(value: object) -> float | None:
    """``value`` as a float, or None when it is missing, non-numeric or non-finite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def step_of(record: Record) -> float:
    """The record's step; a missing step (a lone final checkpoint) counts as 0."""
    step = finite_or_none(record.step)
    return 0.0 if step is None else step


def value_of(record: Record, key: str) -> float | None:
    """A feature of the record, or a quality measure such as ``perplexity`` (any
    top-level number: :meth:`~toposig.records.Record.measure`)."""
    features = record.features
    return finite_or_none(features[key] if key in features else record.measure(key))


_SEED_SUFFIX = re.compile(r"-seed[0-9]+$")


def seed_group_of(label: str) -> str:
    """The model a label is a seed of (``m`` for ``m-seed3``, the names
    :func:`toposig.model.training.suite_runs` gives an ensemble's runs), else the label."""
    return _SEED_SUFFIX.sub("", label)


SEED_SHADE = 0.5  # how far the darkest and the lightest seed of a model move from its colour


def _shade(color: str, t: float) -> str:
    """``color`` mixed with black (``t < 0``) or white (``t > 0``) by ``|t|``."""
    rgb = np.array(to_rgb(color))
    toward = np.ones(3) if t > 0 else np.zeros(3)
    return to_hex((1 - abs(t)) * rgb + abs(t) * toward)


def model_styles(labels: Iterable[str] | Mapping[str, Sequence[Record]]) -> dict[str, Style]:
    """A colour and marker per model, in first-seen order, every seed of an ensemble its own.

    ``labels``: the model labels, or (as :func:`~toposig.analysis.correlations.by_model`
    gives them) labels -> their records, whose ``seed_group`` then says which model a run
    is a seed of (else its label does: ``m-seed3``, :func:`seed_group_of`). A model without
    seeds keeps the colour and marker of its place among the models (``tab10``). The
    seeds of one model are told apart: when they are all the figure shows (one model's
    seed ensemble, such as the grokking task's ``grokking-seed0`` ... ``-seed7``) each takes
    a colour of its own (``tab10``, in order); beside other models each takes a shade of
    its model's colour, dark to light in seed order, so that an ensemble still reads by
    size. Either way the k-th seed of a model has the k-th marker.
    """
    colors = [to_hex(c) for c in mpl.colormaps["tab10"].colors]
    group_of = {label: _seed_group(label, labels) for label in labels}
    members: dict[str, list[str]] = {}
    for label, group in group_of.items():
        members.setdefault(group, []).append(label)
    index = {g: i for i, g in enumerate(members)}
    alone = len(members) == 1
    styles: dict[str, Style] = {}
    for group, seeds in members.items():
        base = colors[index[group] % len(colors)]
        if len(seeds) == 1:
            styles[seeds[0]] = Style(base, MARKERS[index[group] % len(MARKERS)])
            continue
        shades = np.linspace(-SEED_SHADE, SEED_SHADE, len(seeds))
        for k, label in enumerate(seeds):
            color = colors[k % len(colors)] if alone else _shade(base, float(shades[k]))
            styles[label] = Style(color, MARKERS[k % len(MARKERS)])
    return {label: styles[label] for label in labels}


def _seed_group(label: str, labels: Iterable[str] | Mapping[str, Sequence[Record]]) -> str:
    """The model ``label`` is a seed of: its records' ``seed_group`` where ``labels``
    maps labels to records that name one, else :func:`seed_group_of` of the label."""
    records = labels.get(label) if isinstance(labels, Mapping) else None
    named = next((g for r in records or () if isinstance(r, Record)
                  and (g := r.checkpoint.seed_group)), None)
    return named or seed_group_of(label)


def compact_handles(handles: Sequence) -> list:
    """Legend handles as they are, each seed of an ensemble naming itself, while they fit
    in a legend (:data:`MAX_LEGEND_MODELS`); past that the seeds of one model are merged
    into one entry, ``m (12 seeds)``, and other handles kept, in order."""
    if len(handles) <= MAX_LEGEND_MODELS:
        return list(handles)
    out: list = []
    seeds: dict[str, list] = {}
    for h in handles:
        label = str(h.get_label())
        group = seed_group_of(label)
        if group == label:
            out.append(h)
        elif group in seeds:
            seeds[group][1] += 1
        else:
            seeds[group] = [len(out), 1]
            out.append(h)
    for group, (at, n) in seeds.items():
        h, label = out[at], f"{group} ({n} seeds)"
        if isinstance(h, Line2D):
            out[at] = Line2D([], [], color=h.get_color(), marker=h.get_marker(),
                             markersize=h.get_markersize(), linewidth=h.get_linewidth(),
                             linestyle=h.get_linestyle(), label=label)
        elif isinstance(h, Patch):
            out[at] = Patch(facecolor=h.get_facecolor(), edgecolor=h.get_edgecolor(),
                            label=label)
    return out


MAX_LEGEND_MODELS = 12  # above this a legend names sizes, not every model's statistics


def legend_label(label: str, detail: str, n_models: int) -> str:
    """A model's legend entry: ``label: detail``, or only the label (merged with its
    seeds by :func:`compact_handles`) when the figure has more models than a legend holds."""
    return label if n_models > MAX_LEGEND_MODELS else f"{label}: {detail}"


def record_series(groups: dict[str, list[Record]], key: str) -> Series:
    """Per model, (steps, values) of ``key``, missing values dropped."""
    out: Series = {}
    for label, recs in groups.items():
        pts = [(step_of(r), v) for r in recs if (v := value_of(r, key)) is not None]
        out[label] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


def all_steps(records: Sequence[Record]) -> list[float]:
    return [step_of(r) for r in records]


BAND_LABEL = "value ± 1.96 bootstrap s.e. over texts"


def bootstrap_band(record: Record, key: str) -> tuple[float, float] | None:
    """The observed value of ``key`` ± 1.96 bootstrap standard errors, when recorded.

    Centred on the full-sample value, not on the resamples' own percentiles: a bootstrap
    resample holds only about 63% distinct texts, so its PH values sit systematically
    lower (fewer points, fewer and shorter bars); their spread, not their level, is what
    the resamples measure.
    """
    spread = record.resampled.get(key)
    value = finite_or_none(record.features.get(key))
    if spread is None or value is None:
        return None
    std = finite_or_none(spread.std)
    return None if std is None else (value - 1.96 * std, value + 1.96 * std)


def draw_bootstrap_bands(ax: Axes, groups: dict[str, list[Record]], styles: dict[str, Style],
                         key: str, x_of: Callable[[Record], float]) -> bool:
    """Shade each model's bootstrap band of ``key`` (the records' ``resampled``); True if
    any."""
    drawn = False
    for label, recs in groups.items():
        pts = sorted((x_of(r), *band) for r in recs
                     if r.step is not None and (band := bootstrap_band(r, key)))
        if not pts:
            continue
        x, lo, hi = (np.array(c) for c in zip(*pts, strict=True))
        color = styles[label].color
        if x.size > 1:
            ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
        else:
            ax.errorbar(x, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", ecolor=color,
                        alpha=0.6, capsize=4)
        drawn = True
    return drawn


def bootstrap_band_handle() -> Patch:
    return Patch(facecolor="0.25", alpha=0.2, label=BAND_LABEL)


# ----------------------------------------------------------------------------- step axis


def step_axis_scale(steps: Iterable[float | None]) -> str:
    """``"symlog"`` when the steps span two decades or more, else ``"linear"``.

    The ratio is max(step) / max(smallest positive step, 1); steps include 0, so a log
    axis is impossible and symlog (linear below 1) is used instead.
    """
    vals = [x for s in steps if (x := finite_or_none(s)) is not None]
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
    vals = [x for s in steps if (x := finite_or_none(s)) is not None]
    scale = step_axis_scale(vals)
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=1)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("training step (symlog)")
    else:
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    if vals:
        lo, hi = min(vals), max(vals)
        if lo == hi:  # one checkpoint: a unit-wide window around it
            lo, hi = lo - 1, hi + 1
        ax.update_datalim([(lo, 0.0), (hi, 0.0)], updatey=False)
        ax.autoscale_view(scaley=False)
    return scale


# ------------------------------------------------------------------------------ panels


CHAR_WIDTH_EM = 0.6  # a generous mean character width of the default font, in ems


def fit_lines(text: str, width: float, fontsize: float) -> str:
    """``text`` with each of its lines wrapped (at spaces) to fit ``width`` inches at
    ``fontsize`` points, so that a long title stays inside a narrow figure (constrained
    layout makes room above and below a title, never beside it)."""
    chars = max(20, int(width * 72 / (CHAR_WIDTH_EM * fontsize)))
    return "\n".join(wrapped for line in text.split("\n")
                     for wrapped in (textwrap.wrap(line, chars, break_long_words=False,
                                                   break_on_hyphens=False) or [""]))


LEGEND_HANDLE_IN = 0.7  # a legend entry's handle and the gaps around it, in inches


def fitted_legend(fig: Drawn, handles: Sequence, width: float, *, most: int = 2,
                  fontsize: float = 9.0, **kwargs) -> None:
    """A figure legend below the panels (``loc="outside lower center"``) that fits in
    ``width`` inches: its labels wrapped (:func:`fit_lines`) and as many columns, up to
    ``most``, as their widths allow; ``kwargs`` go to
    :meth:`~matplotlib.figure.Figure.legend`."""
    room = max(width - LEGEND_HANDLE_IN, 1.0)
    labels = [fit_lines(str(h.get_label()), room, fontsize) for h in handles]
    widest = max((len(line) for text in labels for line in text.split("\n")), default=1)
    per_column = widest * CHAR_WIDTH_EM * fontsize / 72 + LEGEND_HANDLE_IN
    ncol = max(1, min(most, len(labels), int(width // per_column)))
    fig.legend(handles=list(handles), labels=labels, loc="outside lower center", ncol=ncol,
               fontsize=fontsize, **kwargs)


def no_data(ax: Axes, message: str = "no data") -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center",
            fontsize=10, color="0.45")


def spans_decade(values: Sequence[float]) -> bool:
    """Log scale only helps (and labels cleanly) when positive values span 10x or more."""
    return bool(values) and min(values) > 0 and max(values) >= 10 * min(values)


def _log_y_if_positive(ax: Axes, series: Series) -> None:
    values = [v for _, ys in series.values() for v in ys]
    if spans_decade(values):
        ax.set_yscale("log")
    else:
        ax.set_ylabel(ax.get_ylabel().replace(" (log scale)", ""))


def _legend(ax: Axes, handles: list | None = None) -> None:
    """Legend where it hides least: "best" for a few entries, else a band of headroom on top."""
    handles = compact_handles(handles if handles is not None
                              else ax.get_legend_handles_labels()[0])
    if len(handles) <= 4 or ax.get_yscale() != "linear":
        ax.legend(handles=handles, loc="best", framealpha=0.85)
        return
    ncol = min(3, len(handles))
    rows = math.ceil(len(handles) / ncol)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + (hi - lo) * 0.12 * rows)
    ax.legend(handles=handles, loc="upper center", ncol=ncol, framealpha=0.9,
              columnspacing=1.2, handlelength=2.2)


def model_legend(fig: MplFigure, styles: dict[str, Style]) -> None:
    """One legend of the models' colours and markers for a whole grid, below the panels.

    Used where panels are too narrow to hold a legend of every model each.
    """
    handles = compact_handles([Line2D([], [], color=st.color, marker=st.marker, markersize=5,
                                      linewidth=1.6, label=label)
                               for label, st in styles.items()])
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6),
                   framealpha=0.9)


def line_panel(ax: Axes, series: Series, styles: dict[str, Style], *, title: str,
                ylabel: str, steps: Sequence[float], logy: bool = False,
                dashed: Series | None = None, style_key: tuple[str, str] = ("", ""),
                empty: str = "no data", extra_handles: Sequence[Line2D | Patch] = (),
                model_legend: bool = True) -> None:
    """One line with markers per model against training step, plus axis, title, legend.

    ``dashed`` is an optional second series per model, drawn dashed in the same colour;
    ``style_key`` then names the solid and the dashed line in the legend; ``empty`` is
    written on a panel with nothing to draw; ``extra_handles`` are appended to the legend
    (keys for bands or lines drawn on ``ax`` beforehand). With ``model_legend=False`` the
    models are left out of the panel's legend (the figure carries one, ``model_legend``).
    """
    drawn = False
    for label, (x, y) in series.items():
        if x.size:
            st = styles[label]
            ax.plot(x, y, color=st.color, marker=st.marker, markersize=5, linewidth=1.6,
                    label=label)
            drawn = True
    handles = ax.get_legend_handles_labels()[0] if model_legend else []
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
    handles += list(extra_handles)
    set_step_axis(ax, steps)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if not (drawn or dashed_drawn):
        no_data(ax, empty)
        return
    if logy:
        _log_y_if_positive(ax, series)
    if handles:
        _legend(ax, handles)


def feature_panel(ax: Axes, groups: dict[str, list[Record]], styles: dict[str, Style],
                   key: str, steps: Sequence[float], logy: bool = False,
                   model_legend: bool = True) -> None:
    """``key`` per model vs step, with its bootstrap band over texts where records carry
    one (``resampled``)."""
    title, ylabel = FEATURE_LABELS.get(key, (key, key))
    band = draw_bootstrap_bands(ax, groups, styles, key, step_of)
    line_panel(ax, record_series(groups, key), styles, title=title, ylabel=ylabel,
                steps=steps, logy=logy, model_legend=model_legend,
                extra_handles=[bootstrap_band_handle()] if band else [])


def panel_grid(n_panels: int, ncols: int, figsize: tuple[float, float] = GRID_FIGSIZE,
               *, target: Target | None = None) -> tuple[MplFigure, list[Axes]]:
    """A constrained-layout grid, on ``target`` when given (see
    :func:`toposig.report.style.subplots`); panels beyond ``n_panels`` are hidden."""
    nrows = math.ceil(n_panels / ncols)
    fig, axes = subplots(nrows, ncols, figsize=figsize, layout="constrained",
                         squeeze=False, target=target)
    flat = list(axes.ravel())
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def feature_grid(records: Sequence[Record], keys: Sequence[str], suptitle: str,
                 ncols: int = 3, note: str = "", *, target: Target | None = None) -> Drawn:
    """One panel per feature vs step, on ``target`` when given; ``note`` fills the first
    spare grid cell, if any."""
    groups = by_model(records)
    styles = model_styles(groups)
    steps = all_steps(records)
    n_cells = len(keys) + (1 if note and len(keys) % ncols else 0)
    fig, axes = panel_grid(n_cells, ncols, target=target)
    for ax, key in zip(axes, keys, strict=False):
        feature_panel(ax, groups, styles, key, steps, model_legend=False)
    model_legend(fig, styles)
    if n_cells > len(keys):
        axes[-1].set_axis_off()
        axes[-1].text(0.02, 0.95, note, transform=axes[-1].transAxes, ha="left", va="top",
                      fontsize=10, linespacing=1.5, wrap=True)
    fig.suptitle(suptitle)
    return fig


def family_separators(ax: Axes, groups: Sequence[tuple[str, Sequence[str]]], *,
                      label_x: float, linewidth: float) -> None:
    """Rule lines between consecutive row groups of a heatmap and each group's label at
    ``label_x`` (axes fraction) on the right; ``groups`` are (label, rows) top down."""
    start = 0
    for k, (label, members) in enumerate(groups):
        end = start + len(members)
        if k:
            ax.axhline(start - 0.5, color="0.15", linewidth=linewidth)
        ax.text(label_x, (start + end - 1) / 2, label, transform=ax.get_yaxis_transform(),
                rotation=-90 if len(members) >= 4 else 0, va="center", ha="left",
                fontsize=9.5, fontweight="bold", color="0.25")
        start = end


def heatmap_order(name: str) -> tuple:
    """Sort key of a feature within its group: the group's display order, then name
    (:meth:`~toposig.families.base.FeatureGroup.sort_key`)."""
    return feature_group(name).sort_key(name)


MAX_MODEL_COLUMNS = 4  # models a figure of one column per model shows at most


def empty_figure(title: str, message: str, figsize: tuple[float, float] = (9.0, 4.0),
                 *, target: Target | None = None) -> Drawn:
    """A figure of one empty panel titled ``title`` that says ``message``."""
    fig, ax = subplots(figsize=figsize, layout="constrained", target=target)
    ax.set_title(title)
    no_data(ax, message)
    ax.set_axis_off()
    return fig


def heat_ticks(ax: Axes, steps: Sequence[float], axis: str = "y") -> None:
    """Label checkpoint rows (or columns) with their steps, thinning long lists."""
    n = len(steps)
    every = max(1, math.ceil(n / 20))
    idx = list(range(0, n, every))
    labels = [step_label(steps[i]) for i in idx]
    if axis == "y":
        ax.set_yticks(idx, labels)
    else:
        ax.set_xticks(idx, labels, rotation=90 if n > 8 else 0)


def num_parameters_of(recs: list[Record]) -> float | None:
    """The parameter count of a model's records (its last record's that has one)."""
    return next((n for r in reversed(recs) if (n := finite_or_none(r.num_parameters))), None)


def spread_models(groups: dict[str, list[Record]], limit: int = MAX_MODEL_COLUMNS
                  ) -> list[str]:
    """Up to ``limit`` models, spread evenly over the range of sizes (smallest first)."""
    labels = sorted(groups, key=lambda lb: num_parameters_of(groups[lb]) or 0.0)
    if len(labels) <= limit:
        return labels
    idx = sorted({round(i) for i in np.linspace(0, len(labels) - 1, limit)})
    return [labels[i] for i in idx]


def step_label(step: float) -> str:
    """``950``, ``1.5k``, ``143k``, ``2M``."""
    s = abs(step)
    if s < 1000:
        return f"{step:g}"
    if s < 1e6:
        return f"{step / 1e3:.3g}k"
    return f"{step / 1e6:.3g}M"
