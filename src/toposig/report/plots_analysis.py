"""The statistics figures: training curves, the controlled correlations, training phases,
scaling with model size and the early prediction of the final loss, each drawn from one
section of the statistics (:func:`toposig.analysis.compute.compute_statistics`) and the
records. The figures drawn from the stored persistence diagrams and per-layer features are
the embedding family's (:mod:`toposig.report.plots_diagrams`).

Each figure is a :class:`toposig.report.style.Figure` (``plot_<name>.plot(records,
statistics, arrays=None, ax=None)`` draws it, ``.save(..., path, ...)`` writes it). A
missing section or field gives a "no data" panel rather than an error.

Models keep the colours and markers of ``plots`` (first-seen order of model labels).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from toposig.analysis.compute import ArraysOf
from toposig.analysis.correlations import by_model, feature_group
from toposig.families.registry import family_of
from toposig.families.registry import groups as feature_groups
from toposig.records import Record
from toposig.records.controlled import Controlled, ControlledTest
from toposig.records.rounding import round_floats
from toposig.records.sections import Phases, PiecewiseFit, PowerLawFit, SectionError
from toposig.records.statistics import (
    controlled_of,
    phases_of,
    prediction_of,
    scaling_of,
    typed_section,
)
from toposig.report.panels import (
    FEATURE_LABELS,
    SIGNIFICANCE,
    Style,
    bootstrap_band_handle,
    compact_handles,
    draw_bootstrap_bands,
    empty_figure,
    family_separators,
    finite_or_none,
    fit_lines,
    fitted_legend,
    heatmap_order,
    legend_label,
    line_panel,
    model_styles,
    no_data,
    num_parameters_of,
    panel_grid,
    record_series,
    step_label,
    step_of,
    value_of,
)
from toposig.report.style import (
    Applies,
    Drawn,
    Figure,
    StatisticsLike,
    Target,
    figure,
    registry,
    subplots,
)

logger = logging.getLogger(__name__)



# (statistics key, column label) of the three controlled tests
CONTROLS = (("raw", "raw"), ("partial_log_step", "partial"), ("first_differences", "diff"),
            ("beyond_baseline", "norm"))


PHASE_PREFERRED = ("h1_total_persistence", "rankme", "np_mean", "weight_h0_total")


MAX_PHASE_PANELS = 4


MAX_SCALING_FEATURES = 5




PREDICTION_METHODS = ("loss_only", "topology_only", "combined", "ridge")


METHOD_LABELS = {"loss_only": "loss only (power law)", "topology_only": "topology only",
                 "combined": "combined (mean)", "ridge": "ridge (leave one model out)"}


METHOD_COLORS = {"loss_only": "#8c8c8c", "topology_only": "#1b9e77", "combined": "#7570b3",
                 "ridge": "#d95f02"}


FRACTION_MARKERS = ("o", "s", "^", "D", "v")


QUALITY_LABELS = {"final_loss": ("Final loss", "final loss (nats / token)"),
                  "final_perplexity": ("Final perplexity", "final perplexity")}


def has_quality(records: Sequence[Record], statistics: StatisticsLike,
                arrays: ArraysOf | None) -> bool:
    """Some record has a loss, a perplexity or a masked-LM loss."""
    return arrays is not None and any(
        finite_or_none(v) is not None for r in records
        for v in (r.loss, r.perplexity, r.mlm_loss))


FIGURE_SECTIONS = ("controlled", "phases", "scaling", "prediction")
"""The sections an analysis figure is drawn from (:func:`has_section`)."""


def has_section(section: str) -> Applies:
    """The statistics have ``section`` with results: one that only holds a ``reason`` (a
    comparison this study cannot make, such as scaling with one model size) draws no
    figure; :func:`toposig.report.figures.figures_not_drawn` says why."""
    if section not in FIGURE_SECTIONS:
        raise ValueError(f"no figure is drawn from a {section!r} section; those drawn from "
                         f"one are {', '.join(FIGURE_SECTIONS)}")

    def applies(records: Sequence[Record], statistics: StatisticsLike,
                arrays: ArraysOf | None) -> bool:
        return arrays is not None and not_drawn_reason(statistics, section) is None

    applies.section = section  # type: ignore[attr-defined]  # read by figures_not_drawn
    return applies


def not_drawn_reason(statistics: StatisticsLike, section: str) -> str | None:
    """Why ``section`` of the statistics has nothing to draw (absent, damaged, or only a
    ``reason``), else ``None``."""
    try:
        value = typed_section(statistics, section)
    except SectionError as exc:  # JSON statistics whose section does not read
        return f"the {section} section is damaged: {exc}"
    if value is None:
        return f"the statistics have no {section} section"
    reason = getattr(value, "reason", None)
    if reason is not None and value == type(value)(reason=reason):  # a reason and nothing else
        return str(reason)
    return None


def _log1p_safe(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log1p(x)


def _step_ticks(max_step: float) -> list[float]:
    """0 and the powers of ten up to ``max_step`` (plus ``max_step`` when there are few)."""
    ticks = [0.0]
    p = 1.0
    while p <= max_step:
        ticks.append(p)
        p *= 10
    if len(ticks) < 4 and max_step > 0 and max_step not in ticks:
        ticks.append(max_step)
    return ticks


@figure("training_curves", has_quality, overlay=True)
def plot_training_curves(records: Sequence[Record], statistics: StatisticsLike,
                         arrays: ArraysOf | None = None,
                         on: Target | None = None) -> Drawn | None:
    """The quality target per model across training (1 × 2): the validation loss stored
    with each checkpoint, and the perplexity measured on the analysed texts (log y), or
    for encoders their masked-LM loss on the same texts.

    Where records carry bootstrap resamples (``resampled``) of a quantity, its band over
    texts is shaded.
    """
    groups = by_model(records)
    styles = model_styles(groups)
    steps = [step_of(r) for r in records]
    fig, axes = panel_grid(2, 2, figsize=(12.0, 5.0), target=on)
    measured = (("mlm_loss", "Masked-LM loss on the analysed texts (an encoder's)",
                 "masked-LM loss (nats / masked token)", False, "no masked-LM loss")
                if any(finite_or_none(r.mlm_loss) is not None for r in records)
                and not any(finite_or_none(r.perplexity) is not None for r in records)
                else ("perplexity", "Perplexity on the analysed texts",
                      "perplexity (log scale)", True, "no perplexity"))
    for ax, key, title, ylabel, logy, empty in (
            (axes[0], "loss", stored_loss_title(records), "loss (nats / token)", False,
             "no stored validation loss"),
            (axes[1], *measured)):
        band = draw_bootstrap_bands(ax, groups, styles, key, step_of)
        line_panel(ax, record_series(groups, key), styles, title=title, ylabel=ylabel,
                    steps=steps, logy=logy, empty=empty,
                    extra_handles=[bootstrap_band_handle()] if band else [])
    fig.suptitle("Training curves: model quality across training")
    return fig


def stored_loss_title(records: Sequence[Record]) -> str:
    """What the stored losses are: a validation loss (``val_loss``, ``eval_loss``) as the
    project's and most trainers' checkpoints store, or, where any record's ``loss_key``
    says otherwise (a live run's training loss), the keys themselves."""
    keys = sorted({str(r.loss_key) for r in records if finite_or_none(r.loss) is not None})
    if all("val" in k.rsplit(".", 1)[-1] for k in keys):
        return "Validation loss stored with the checkpoint"
    return f"Loss stored with the checkpoint ({', '.join(keys)})"


def _control_cell(entry: ControlledTest | None, control: str) -> tuple[str, float | None]:
    """``("sig" | "ns" | "undefined", r)`` of one feature × column × control."""
    if entry is None:
        return "undefined", None
    r, p = (finite_or_none(x) for x in entry.under(control))
    if control == "partial_log_step" and entry.partial_undefined is not None:
        return "undefined", None
    if r is None or p is None:
        return "undefined", r
    flags = entry.significant
    significant = bool(flags[control]) if control in flags else p < SIGNIFICANCE
    return ("sig" if significant else "ns"), r


def _control_rows(controlled: Controlled) -> list[tuple[str, list[str]]]:
    names: list[str] = []
    for table in [*controlled.per_model.values(), controlled.pooled]:
        names.extend(k for k in table if k not in names)
    groups = []
    for group in feature_groups():  # the controlled table's rows, in table order
        members = sorted((k for k in names if feature_group(k) is group), key=heatmap_order)
        if members:
            groups.append((group.label, members))
    return groups


def _targets_text(controlled: Controlled) -> str:
    """``embedding features vs perplexity; weight features vs loss``."""
    by_side: dict[str, set[str]] = {}
    for feature, target in controlled.targets.items():
        side = family_of(feature).word
        by_side.setdefault(side, set()).add(str(target))
    return "; ".join(f"{side} features vs {' / '.join(sorted(t))}"
                     for side, t in sorted(by_side.items()))


@figure("controls_summary", has_section("controlled"))
def plot_controls_summary(records: Sequence[Record], statistics: StatisticsLike,
                          arrays: ArraysOf | None = None,
                          on: Target | None = None) -> Drawn | None:
    """Which feature–quality correlations survive the controls: rows features (grouped by
    family), columns each model and the pooled series × raw Spearman, partial Spearman and
    Spearman of first differences.

    Filled cells are significant (Holm-adjusted p < 0.05; for the controls also the sign of
    the raw ρ), coloured by r; empty cells are not; grey cells are undefined (no p, or no
    variation left after the control). Every defined cell states its r. A column whose
    every cell is undefined (the pooled series, whose checkpoints get no Holm p) is left
    out, and the title names it. Title and legend are wrapped to the figure's width.
    """
    controlled = controlled_of(statistics) or Controlled()
    per_model, pooled = controlled.per_model, controlled.pooled
    groups = _control_rows(controlled)
    features = [f for _, members in groups for f in members]
    named = [*per_model.items(), *([("pooled", pooled)] if pooled else [])]
    kept = [(column, table) for column, table in named
            if any(_control_cell(table.get(f), control)[0] != "undefined"
                   for f in features for control, _ in CONTROLS)]
    columns = [column for column, _ in kept]
    tables = [table for _, table in kept]
    left_out = [column for column, _ in named if column not in columns]
    title = ("Correlation with model quality under three controls "
             f"(filled: Holm-adjusted p < {SIGNIFICANCE:g})")
    if not features or not named:
        return empty_figure(title, "no controlled correlations in the statistics", target=on)
    if not columns:
        return empty_figure(title, "every controlled correlation is undefined (too few "
                            "points, constant, or nothing left after the control)",
                            target=on)

    gap = 0.6
    xs = [g * (len(CONTROLS) + gap) + k for g in range(len(columns))
          for k in range(len(CONTROLS))]
    width = min(max(8.0, 4.8 + 0.62 * len(xs)), 18.0)
    height = max(4.5, 3.4 + 0.26 * len(features))
    fig, ax = subplots(figsize=(width, height), layout="constrained",
                       figure_artists=True, target=on)
    cmap = mpl.colormaps["RdBu_r"]
    norm = Normalize(-1.0, 1.0)
    for i, feature in enumerate(features):
        for g, table in enumerate(tables):
            for k, (control, _) in enumerate(CONTROLS):
                x = xs[g * len(CONTROLS) + k]
                state, r = _control_cell(table.get(feature), control)
                if state == "undefined":
                    face, edge, text, color = "0.84", "white", "n/a", "0.45"
                elif state == "sig":
                    face, edge = cmap(norm(r)), "white"
                    text, color = f"{r:+.2f}", "white" if abs(r) > 0.6 else "black"
                else:
                    face, edge, text, color = "white", "0.75", f"{r:+.2f}", "0.45"
                ax.add_patch(Rectangle((x - 0.5, i - 0.5), 1, 1, facecolor=face,
                                       edgecolor=edge, linewidth=0.8))
                ax.text(x, i, text, ha="center", va="center", fontsize=7.5, color=color,
                        fontweight="bold" if state == "sig" else "normal")
    family_separators(ax, groups, label_x=1.01, linewidth=1.4)
    for g, column in enumerate(columns):
        center = xs[g * len(CONTROLS) + 1]
        ax.text(center, -0.9, column, ha="center", va="bottom", fontsize=9.5,
                fontweight="bold", clip_on=False)
    ax.set_xlim(xs[0] - 0.6, xs[-1] + 0.6)
    ax.set_ylim(len(features) - 0.5, -0.5)
    ax.set_xticks(xs, [c for _ in columns for _, c in CONTROLS], fontsize=8.5)
    ax.set_yticks(range(len(features)), features)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    targets = _targets_text(controlled)
    ax.set_title(fit_lines(
        f"{title}\nraw: Spearman ρ; partial: partial Spearman controlling for log(1 + step)"
        + (" (pooled: also log(num_parameters))" if "pooled" in columns else "")
        + ";\ndiff: Spearman ρ of consecutive differences; "
        "norm: the same, partial on the differences of the space's plain norm "
        "(weights: Frobenius norm; hidden states: mean norm)"
        + (f";\n{targets}" if targets else "")
        + (f"\nleft out, every cell n/a: {', '.join(left_out)}" if left_out else ""),
        0.95 * width, 10.5), fontsize=10.5, pad=26)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=min(1.0, 7 / height),
                 pad=0.06, aspect=30, label="r of the test (significant cells)")
    handles = [Patch(facecolor=cmap(norm(0.8)), edgecolor="white",
                     label=f"significant (Holm p < {SIGNIFICANCE:g}; controls: same sign as ρ)"),
               Patch(facecolor="white", edgecolor="0.6", label="not significant"),
               Patch(facecolor="0.84", edgecolor="0.6",
                     label="n/a: undefined (too few points, constant, or nothing left "
                           "after the control)")]
    fitted_legend(fig, handles, width, most=2, fontsize=8.5, framealpha=0.9)
    return fig


def piecewise_line(fit: PiecewiseFit, x: np.ndarray) -> np.ndarray:
    """The continuous piecewise-linear fit of ``phases.piecewise_linear_fit`` at ``x``:
    ``intercept + s1·x + Σⱼ (sⱼ₊₁ − sⱼ)·max(0, x − bⱼ)`` (a usable fit:
    :attr:`~toposig.records.sections.PiecewiseFit.usable`)."""
    x = np.asarray(x, dtype=np.float64)
    slopes = [float(s) for s in fit.slopes if s is not None]
    y = float(fit.intercept or 0.0) + slopes[0] * x
    for j, b in enumerate(fit.breakpoints):
        y = y + (slopes[j + 1] - slopes[j]) * np.maximum(0.0, x - float(b or 0.0))
    return y


def _usable_fit(fit: PiecewiseFit | None) -> bool:
    return (fit is not None and fit.usable
            and finite_or_none(fit.intercept) is not None)


def _phase_features(phases: Phases) -> list[str]:
    present: list[str] = []
    for model in phases.per_model.values():
        for f, fit in model.piecewise.items():
            if _usable_fit(fit) and f not in present:
                present.append(f)
    chosen = [f for f in PHASE_PREFERRED if f in present]
    chosen += [f for f in present if f not in chosen]
    return chosen[:MAX_PHASE_PANELS]


def _log_step(record: Record) -> float:
    return math.log1p(max(step_of(record), 0.0))


def _add_step_axis(ax: Axes, max_step: float) -> None:
    sec = ax.secondary_xaxis("top", functions=(np.expm1, _log1p_safe))
    ticks = _step_ticks(max_step)
    sec.set_xticks(ticks, [step_label(t) for t in ticks])
    sec.set_xlabel("training step", fontsize=9)
    sec.tick_params(labelsize=8)


@figure("phase_fits", has_section("phases"))
def plot_phase_fits(records: Sequence[Record], statistics: StatisticsLike,
                    arrays: ArraysOf | None = None,
                    on: Target | None = None) -> Drawn | None:
    """Three-segment continuous fits of features against log(1 + step), per model.

    Points are the checkpoints, lines the fits of the statistics' phases (reconstructed
    from intercept, slopes and breakpoints), dotted verticals the breakpoints; shaded bands
    the bootstrap over texts where records carry resamples (``resampled``).
    """
    phases = phases_of(statistics) or Phases()
    features = _phase_features(phases)
    title = "Training phases: three-segment fits against log(1 + step)"
    if not features:
        return empty_figure(title, "no piecewise fits in the statistics", target=on)
    groups = by_model(records)
    labels = list(dict.fromkeys([*groups, *phases.per_model]))
    styles = model_styles(labels)
    max_step = max([step_of(r) for r in records] or [0.0])
    ncols = 1 if len(features) == 1 else 2
    fig, axes = panel_grid(len(features), ncols,
                      figsize=(12.0 if ncols == 2 else 7.5,
                               4.6 * math.ceil(len(features) / ncols) + 0.6), target=on)
    for ax, feature in zip(axes, features, strict=True):
        band = draw_bootstrap_bands(ax, groups, styles, feature, _log_step)
        handles: list = []
        for label in labels:
            st = styles[label]
            recs = [r for r in groups.get(label, []) if r.step is not None]
            pts = [(_log_step(r), v) for r in recs if (v := value_of(r, feature)) is not None]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, color=st.color, marker=st.marker, s=26, zorder=3,
                           edgecolors="white", linewidths=0.4)
            model = phases.per_model.get(label)
            fit = model.piecewise.get(feature) if model is not None else None
            text = label
            if fit is not None and _usable_fit(fit):
                breaks = [float(b) for b in fit.breakpoints if b is not None]
                lo = min([p[0] for p in pts], default=0.0)
                hi = max([p[0] for p in pts], default=max(breaks or [1.0]))
                grid = np.linspace(lo, hi, 200)
                ax.plot(grid, piecewise_line(fit, grid), color=st.color, linewidth=1.6,
                        zorder=2)
                for b in breaks:
                    ax.axvline(b, color=st.color, linestyle=":", linewidth=1.3, alpha=0.9)
                r2 = finite_or_none(fit.r2)
                b_steps = ([s for s in fit.breakpoint_steps if s is not None]
                           or [math.expm1(b) for b in breaks])
                text = legend_label(label, (f"R² = {r2:.2f}" if r2 is not None else "") + (
                    ", breaks at step " + ", ".join(step_label(round(s)) for s in b_steps)
                    if b_steps else ""), len(labels))
            elif fit is not None and fit.reason:
                text = legend_label(label, "no fit", len(labels))
            if pts or _usable_fit(fit):
                handles.append(Line2D([], [], color=st.color, marker=st.marker,
                                      linewidth=1.6, label=text))
        name, ylabel = FEATURE_LABELS.get(feature, (feature, feature))
        ax.set_title(name)
        ax.set_xlabel("log(1 + step)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if not handles:
            no_data(ax)
            continue
        _add_step_axis(ax, max_step)
        handles = compact_handles(handles)
        handles.append(Line2D([], [], color="0.3", linestyle=":", label="breakpoints"))
        if band:
            handles.append(bootstrap_band_handle())
        lo, hi = ax.get_ylim()  # headroom so the legend covers no point
        ax.set_ylim(lo, hi + (hi - lo) * 0.075 * (len(handles) + 1))
        ax.legend(handles=handles, loc="upper center", fontsize=8, framealpha=0.9)
    fig.suptitle(f"{title}\n(points: checkpoints; lines: fitted continuous "
                 "piecewise-linear model)")
    return fig


def _final_value(record: Record, name: str) -> float | None:
    if name == "final_loss":
        return next((v for x in (record.loss, record.mean_nll, record.mlm_loss)
                     if (v := finite_or_none(x)) is not None), None)
    if name == "final_perplexity":
        return finite_or_none(record.perplexity)
    return value_of(record, name)


def _p_text(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def _scaling_panel(ax: Axes, name: str, fit: PowerLawFit, groups: dict[str, list[Record]],
                   sizes: Mapping[str, float | None], styles: dict[str, Style]) -> None:
    pts = []
    for label, recs in groups.items():
        n = finite_or_none(sizes.get(label)) or num_parameters_of(recs)
        v = _final_value(recs[-1], name) if recs else None
        if n is not None and n > 0 and v is not None:
            pts.append((label, n, v))
    title, ylabel = QUALITY_LABELS.get(name) or FEATURE_LABELS.get(name, (name, name))
    if name not in QUALITY_LABELS:
        ylabel = f"final {ylabel}"
    ax.set_xlabel("parameters N (log scale)")
    ax.grid(True, which="both", alpha=0.25)
    a, b, c = finite_or_none(fit.a), finite_or_none(fit.b), finite_or_none(fit.c)
    if a is not None and b is not None:
        r2, rho = finite_or_none(fit.r2), finite_or_none(fit.spearman_r)
        form = f"a·N^b + c, a = {a:.3g}, c = {c:.3g}" if c else f"a·N^b, a = {a:.3g}"
        note = (f"b = {b:+.3f} ({form}), R² = {'n/a' if r2 is None else f'{r2:.3f}'}\n"
                f"Spearman ρ = {'n/a' if rho is None else f'{rho:+.2f}'}, "
                f"p = {_p_text(finite_or_none(fit.spearman_p))} "
                f"(n = {len(pts) if fit.n is None else fit.n})")
    else:
        note = f"no fit: {fit.reason or 'undefined'}"
    ax.set_title(f"{title}\n{note}", fontsize=9.5)
    if not pts:
        ax.set_ylabel(ylabel)
        no_data(ax)
        return
    for label, n, v in pts:
        st = styles[label]
        ax.scatter([n], [v], color=st.color, marker=st.marker, s=70, zorder=3,
                   edgecolors="white", linewidths=0.6)
    ax.set_xscale("log")
    values = [v for _, _, v in pts]
    positive = min(values) > 0
    ax.set_ylabel(ylabel + (" (log scale)" if positive else ""))
    if positive:
        ax.set_yscale("log")
        if max(values) < 10 * min(values):  # within a decade: plain numbers on every tick
            plain = FuncFormatter(lambda v, _: f"{v:.3g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
    if a is not None and b is not None:
        ns = np.array([n for _, n, _ in pts])
        # NumPy's vectorised power and logarithm round differently on another CPU's
        # instruction set; rounded to 10 digits the drawn curve is the same everywhere
        grid = np.array(round_floats(np.geomspace(ns.min() / 1.3, ns.max() * 1.3, 100), 10))
        curve = np.array(round_floats(a * grid ** b + (c or 0.0), 10), dtype=float)
        ok = np.isfinite(curve) & ((curve > 0) if positive else True)
        ax.plot(grid[ok], curve[ok], color="0.2", linewidth=1.2, linestyle="--", zorder=2)


@figure("scaling_relationships", has_section("scaling"))
def plot_scaling_relationships(records: Sequence[Record], statistics: StatisticsLike,
                               arrays: ArraysOf | None = None,
                               on: Target | None = None) -> Drawn | None:
    """Final loss and up to five final-checkpoint features against parameter count
    (log–log), one point per model, with the power law a·N^b (+ c) of
    the statistics' :class:`~toposig.records.sections.Scaling` fits, its exponent, R² and
    Spearman ρ."""
    scaling = scaling_of(statistics)
    title = "Scaling of final-checkpoint values with model size"
    if scaling is None or scaling.reason or not scaling.fits:
        why = ("no scaling section in the statistics" if scaling is None
               else scaling.reason or "no scaling section in the statistics")
        return empty_figure(title, f"no scaling fits: {why}", target=on)
    fits = scaling.fits
    features = [f for f in fits if f not in ("final_loss", "final_perplexity")]
    features.sort(key=lambda f: finite_or_none(fits[f].b) is None)  # fitted first
    names = ([*(["final_loss"] if "final_loss" in fits else []),
              *features[:MAX_SCALING_FEATURES]])
    groups = by_model(records)
    labels = list(dict.fromkeys([*groups, *scaling.num_parameters]))
    styles = model_styles(labels)
    sizes = scaling.num_parameters
    ncols = min(3, len(names))
    fig, axes = panel_grid(len(names), ncols, figsize=(4.4 * ncols + 0.6,
                                                  4.1 * math.ceil(len(names) / ncols) + 1.0),
                                                  target=on)
    for ax, name in zip(axes, names, strict=True):
        _scaling_panel(ax, name, fits[name], groups, sizes, styles)
    handles = [Line2D([], [], color=styles[lb].color, marker=styles[lb].marker,
                      linestyle="none", markersize=8,
                      label=(f"{lb} ({step_label(n)} params)"
                             if (n := finite_or_none(sizes.get(lb))) else lb))
               for lb in labels if lb in groups]
    handles.append(Line2D([], [], color="0.2", linestyle="--", label="power-law fit"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5))
    fig.suptitle(f"{title}: power law a·N^b fitted in log–log space\n(Spearman p exact "
                 "over all orderings; with n models it cannot fall below 2/n!)")
    return fig


def _fraction_order(fractions: Mapping[str, object]) -> list[str]:
    def key(k) -> float:
        value = finite_or_none(k)
        return value if value is not None else math.inf

    return sorted(fractions, key=key)


def _fraction_label(key: str) -> str:
    f = finite_or_none(key)
    return key if f is None else f"first {f:.0%}"


@figure("prediction_comparison", has_section("prediction"))
def plot_prediction_comparison(records: Sequence[Record], statistics: StatisticsLike,
                               arrays: ArraysOf | None = None,
                               on: Target | None = None) -> Drawn | None:
    """Early prediction of the final loss (1 × 2): MAE over models per method and early
    fraction, annotated with the MAE reduction against the loss-only power law; and each
    model's predictions next to its true final loss."""
    prediction = prediction_of(statistics)
    title = "Predicting the final loss from early checkpoints"
    if prediction is None or prediction.reason or not prediction.fractions:
        why = (prediction.reason if prediction is not None and prediction.reason
               else "no prediction section in the statistics")
        return empty_figure(title, f"no predictions: {why}", target=on)
    fractions = prediction.fractions
    methods = list(prediction.methods or PREDICTION_METHODS)
    colors = {m: METHOD_COLORS.get(m, "0.5") for m in methods}
    keys = _fraction_order(fractions)
    truth = {k: v for k, v in prediction.true_final_loss.items()
             if finite_or_none(v) is not None}
    fig, (left, right) = subplots(1, 2, figsize=(14.0, 6.0), layout="constrained",
                                      gridspec_kw={"width_ratios": [1.0, 1.25]}, target=on)

    # MAE bars
    width = 0.8 / max(1, len(methods))
    tops = [v for k in keys for v in fractions[k].mae.values()
            if finite_or_none(v) is not None]
    top = max(tops, default=1.0) or 1.0
    for j, method in enumerate(methods):
        for i, key in enumerate(keys):
            entry = fractions[key]
            mae = finite_or_none(entry.mae.get(method))
            x = i - 0.4 + (j + 0.5) * width
            if mae is None:
                left.text(x, 0.01 * top, "n/a", ha="center", va="bottom", fontsize=8,
                          color="0.4", rotation=90)
                continue
            left.bar(x, mae, width=width * 0.92, color=colors[method],
                     label=METHOD_LABELS.get(method, method) if i == 0 else None)
            imp = finite_or_none(entry.improvement_over_loss_only.get(method))
            n_used = entry.n_models.get(method)
            note = f"{mae:.2f}"
            if method != "loss_only" and imp is not None:
                note += f"\n{imp:+.0%}"
            if n_used is not None and truth and n_used < len(truth):
                note += f"\nn={n_used}"
            left.text(x, mae + 0.01 * top, note, ha="center", va="bottom", fontsize=7.5)
    left.set_xticks(range(len(keys)), [f"{_fraction_label(k)}\nof the steps" for k in keys])
    left.set_ylim(0, top * 1.18)
    left.set_ylabel("MAE of the final loss over models (nats / token)")
    left.set_xlabel("checkpoints used (step ≤ fraction × final step)")
    left.set_title("Mean absolute error per method\n(labels: MAE, and its reduction vs "
                   "loss only: + is better)", fontsize=10)
    left.grid(True, axis="y", alpha=0.3)

    # per-model predictions vs truth
    models = list(dict.fromkeys([*truth, *(m for k in keys for m in fractions[k].per_model)]))
    if not models:
        no_data(right)
    span = 0.8
    for i, model in enumerate(models):
        true = finite_or_none(truth.get(model))
        if true is not None:
            right.hlines(true, i - span / 2, i + span / 2, color="black", linewidth=2.2,
                         zorder=4)
        for j, method in enumerate(methods):
            x0 = i - span / 2 + (j + 0.5) * span / len(methods)
            for f_index, key in enumerate(keys):
                row = fractions[key].per_model.get(model, {}).get(method)
                value = finite_or_none(row.prediction if row is not None else None)
                if value is None:
                    continue
                dx = (f_index - (len(keys) - 1) / 2) * span / len(methods) / (len(keys) + 1)
                right.scatter(x0 + dx, value, color=colors[method],
                              marker=FRACTION_MARKERS[f_index % len(FRACTION_MARKERS)], s=34,
                              edgecolors="white", linewidths=0.4, zorder=3)
        if i:
            right.axvline(i - 0.5, color="0.85", linewidth=0.8)
    right.set_xticks(range(len(models)),
                     [f"{m}\n(true {truth[m]:.3f})" if m in truth else m for m in models])
    right.set_xlim(-0.5, max(len(models), 1) - 0.5)
    right.set_ylabel("final loss (nats / token)")
    right.set_title("Per-model predictions and the true final loss", fontsize=10)
    right.grid(True, axis="y", alpha=0.3)
    handles = [Line2D([], [], color="black", linewidth=2.2, label="true final loss")]
    handles += [Line2D([], [], color="0.35", marker=FRACTION_MARKERS[i % 5], linestyle="none",
                       label=f"from the {_fraction_label(k)}") for i, k in enumerate(keys)]
    handles += [Patch(facecolor=colors[m], label=METHOD_LABELS.get(m, m)) for m in methods]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4),
               fontsize=9, framealpha=0.9)
    feature = prediction.feature
    fig.suptitle(f"{title}" + (f" (topology feature: {feature})" if feature else ""))
    return fig


# In drawing order.
ANALYSIS_FIGURES: dict[str, Figure] = registry(
    plot_training_curves, plot_controls_summary, plot_phase_fits, plot_scaling_relationships,
    plot_prediction_comparison)


__all__ = ["ANALYSIS_FIGURES", "has_quality", "has_section", "not_drawn_reason",
           "piecewise_line", "plot_controls_summary", "plot_phase_fits",
           "plot_prediction_comparison", "plot_scaling_relationships",
           "plot_training_curves", "stored_loss_title"]
