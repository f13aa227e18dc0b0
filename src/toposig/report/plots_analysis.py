"""Analysis figures: training curves, controlled correlations, training phases, scaling with
model size, early prediction of the final loss, and three figures drawn from the stored
persistence diagrams or per-layer features.

Each figure is a :class:`toposig.report.style.Figure` (``plot_<name>.plot(records,
statistics, arrays=None, ax=None)`` draws it, ``.save(..., path, ...)`` writes it),
drawn from the records (:class:`toposig.records.Record`), the statistics of
``analysis.compute_statistics`` and, for the diagram figures, the ``.npz`` arrays under
the results root. A missing section, field or file gives a "no data" panel rather than an
error, except :func:`plot_layer_heatmaps`, which draws nothing (``None``) when no record
has per-layer features (``layers``). Each applies only given the results root
(and the data it draws); ``figures.plot_all`` draws those that apply after the report
figures.

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

from toposig.analysis.compute import ArraysOf, layer_diagrams
from toposig.analysis.correlations import by_model, feature_group
from toposig.families.registry import family_of
from toposig.families.registry import groups as feature_groups
from toposig.features.homology import betti_curve
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
    family_separators,
    finite_or_none,
    heatmap_order,
    legend_label,
    line_panel,
    model_styles,
    no_data,
    panel_grid,
    record_series,
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
MAX_MODEL_COLUMNS = 4
MAX_DIAGRAM_CHECKPOINTS = 5
BETTI_GRID = 256
BETTI_PERCENTILE = 99.0
LAYER_FEATURES = ("h1_total_persistence", "rankme")
PREDICTION_METHODS = ("loss_only", "topology_only", "combined", "ridge")
METHOD_LABELS = {"loss_only": "loss only (power law)", "topology_only": "topology only",
                 "combined": "combined (mean)", "ridge": "ridge (leave one model out)"}
METHOD_COLORS = {"loss_only": "#8c8c8c", "topology_only": "#1b9e77", "combined": "#7570b3",
                 "ridge": "#d95f02"}
FRACTION_MARKERS = ("o", "s", "^", "D", "v")
QUALITY_LABELS = {"final_loss": ("Final loss", "final loss (nats / token)"),
                  "final_perplexity": ("Final perplexity", "final perplexity")}


# ------------------------------------------------------------------ when figures apply
# ``applies`` tests (see toposig.report.style): every analysis figure needs the results
# root, which callers pass to opt in.


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


def has_arrays(records: Sequence[Record], statistics: StatisticsLike,
               arrays: ArraysOf | None) -> bool:
    """Some record has stored persistence diagrams (its embedding arrays file)."""
    return arrays is not None and any(r.arrays_file() for r in records)


def has_layer_features(records: Sequence[Record], statistics: StatisticsLike,
                       arrays: ArraysOf | None) -> bool:
    """Some record has per-layer features (``--layers all``)."""
    return arrays is not None and _layered(records)


# --------------------------------------------------------------------------- helpers


def _step_label(step: float) -> str:
    """``950``, ``1.5k``, ``143k``, ``2M``."""
    s = abs(step)
    if s < 1000:
        return f"{step:g}"
    if s < 1e6:
        return f"{step / 1e3:.3g}k"
    return f"{step / 1e6:.3g}M"


def _empty_figure(title: str, message: str, figsize: tuple[float, float] = (9.0, 4.0),
                  *, target: Target | None = None) -> Drawn:
    fig, ax = subplots(figsize=figsize, layout="constrained", target=target)
    ax.set_title(title)
    no_data(ax, message)
    ax.set_axis_off()
    return fig


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


def _num_parameters(recs: list[Record]) -> float | None:
    return next((n for r in reversed(recs) if (n := finite_or_none(r.num_parameters))), None)


def _spread_models(groups: dict[str, list[Record]], limit: int = MAX_MODEL_COLUMNS
                   ) -> list[str]:
    """Up to ``limit`` models, spread evenly over the range of sizes (smallest first)."""
    labels = sorted(groups, key=lambda lb: _num_parameters(groups[lb]) or 0.0)
    if len(labels) <= limit:
        return labels
    idx = sorted({round(i) for i in np.linspace(0, len(labels) - 1, limit)})
    return [labels[i] for i in idx]


def _heat_ticks(ax: Axes, steps: Sequence[float], axis: str = "y") -> None:
    """Label checkpoint rows (or columns) with their steps, thinning long lists."""
    n = len(steps)
    every = max(1, math.ceil(n / 20))
    idx = list(range(0, n, every))
    labels = [_step_label(steps[i]) for i in idx]
    if axis == "y":
        ax.set_yticks(idx, labels)
    else:
        ax.set_xticks(idx, labels, rotation=90 if n > 8 else 0)


# ------------------------------------------------------------------ training curves


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


# -------------------------------------------------------------- controlled summary


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
    variation left after the control). Every defined cell states its r.
    """
    controlled = controlled_of(statistics) or Controlled()
    per_model, pooled = controlled.per_model, controlled.pooled
    columns = [*per_model, *(["pooled"] if pooled else [])]
    tables = [*per_model.values(), *([pooled] if pooled else [])]
    groups = _control_rows(controlled)
    features = [f for _, members in groups for f in members]
    title = ("Correlation with model quality under three controls "
             f"(filled: Holm-adjusted p < {SIGNIFICANCE:g})")
    if not features or not columns:
        return _empty_figure(title, "no controlled correlations in the statistics", target=on)

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
    ax.set_title(
        f"{title}\nraw: Spearman ρ; partial: partial Spearman controlling for log(1 + step) "
        "(pooled: also log(num_parameters));\ndiff: Spearman ρ of consecutive differences; "
        "norm: the same, partial on the differences of the space's plain norm "
        "(weights: Frobenius norm; hidden states: mean norm)"
        + (f";\n{targets}" if targets else ""), fontsize=10.5, pad=26)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=min(1.0, 7 / height),
                 pad=0.06, aspect=30, label="r of the test (significant cells)")
    handles = [Patch(facecolor=cmap(norm(0.8)), edgecolor="white",
                     label=f"significant (Holm p < {SIGNIFICANCE:g}; controls: same sign as ρ)"),
               Patch(facecolor="white", edgecolor="0.6", label="not significant"),
               Patch(facecolor="0.84", edgecolor="0.6",
                     label="n/a: undefined (too few points, constant, or nothing left "
                           "after the control)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, framealpha=0.9,
               fontsize=8.5)
    return fig


# ------------------------------------------------------------------------ phase fits


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
    sec.set_xticks(ticks, [_step_label(t) for t in ticks])
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
        return _empty_figure(title, "no piecewise fits in the statistics", target=on)
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
                    ", breaks at step " + ", ".join(_step_label(round(s)) for s in b_steps)
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


# ----------------------------------------------------------------------------- scaling


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
        n = finite_or_none(sizes.get(label)) or _num_parameters(recs)
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
        return _empty_figure(title, f"no scaling fits: {why}", target=on)
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
                      label=(f"{lb} ({_step_label(n)} params)"
                             if (n := finite_or_none(sizes.get(lb))) else lb))
               for lb in labels if lb in groups]
    handles.append(Line2D([], [], color="0.2", linestyle="--", label="power-law fit"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5))
    fig.suptitle(f"{title}: power law a·N^b fitted in log–log space\n(Spearman p exact "
                 "over all orderings; with n models it cannot fall below 2/n!)")
    return fig


# -------------------------------------------------------------------------- prediction


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
        return _empty_figure(title, f"no predictions: {why}", target=on)
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


# ------------------------------------------------------------------ diagram figures


def record_diagrams(arrays: ArraysOf, record: Record) -> dict[int, np.ndarray]:
    """``{q: (m, 2) diagram}`` of the record's analysed layer, from the arrays of its
    embedding arrays file (:func:`toposig.analysis.compute.layer_diagrams`); ``{}`` when
    they cannot be read."""
    file = record.arrays_file()
    if not file:
        return {}
    try:
        if record.layer is None:
            raise KeyError("layer")
        dgms = layer_diagrams(arrays(file), record.layer)
    except (OSError, ValueError, KeyError) as exc:
        logger.warning("cannot read the diagrams of %s step %s: %s",
                       record.model_label, record.step, exc)
        return {}
    return {q: np.asarray(d, dtype=np.float64).reshape(-1, 2) for q, d in enumerate(dgms)}


def _diagram_series(records: Sequence[Record], arrays: ArraysOf | None
                    ) -> dict[str, list[tuple[float, dict[int, np.ndarray]]]]:
    """Per model, (step, diagrams) of each record whose arrays load, in step order."""
    if arrays is None:
        return {}
    out = {}
    for label, recs in by_model(records).items():
        rows = [(step_of(r), dgms) for r in recs if (dgms := record_diagrams(arrays, r))]
        if rows:
            out[label] = rows
    return out


def _scale_max(series: dict, q: int) -> float:
    """The 99th percentile of the finite deaths of H``q`` over every diagram (> 0)."""
    deaths = [d[np.isfinite(d[:, 1]), 1] for rows in series.values() for _, dgms in rows
              if (d := dgms.get(q)) is not None and d.size]
    vals = np.concatenate(deaths) if deaths else np.array([])
    top = float(np.percentile(vals, BETTI_PERCENTILE)) if vals.size else 0.0
    return top if top > 0 else 1.0


@figure("betti_curves", has_arrays)
def plot_betti_curves(records: Sequence[Record], statistics: StatisticsLike,
                      arrays: ArraysOf | None = None,
                      on: Target | None = None) -> Drawn | None:
    """CROCKER plot: Betti numbers of the hidden-state diagrams over filtration scale (x)
    and checkpoint (y), one column per model (up to four), rows H0 and H1; the scale grid
    is shared per dimension (0 to the 99th percentile of finite deaths)."""
    series = _diagram_series(records, arrays)
    title = "Betti curves across training (CROCKER plot)"
    if not series:
        why = "no arrays given" if arrays is None else "no diagram arrays found"
        return _empty_figure(title, f"no data: {why}", target=on)
    all_groups = by_model(records)
    labels = _spread_models({lb: all_groups[lb] for lb in series})
    dims = sorted({q for rows in series.values() for _, dgms in rows for q in dgms
                   if q <= 1}) or [0]
    fig, axes = subplots(len(dims), len(labels), squeeze=False, layout="constrained",
                             figsize=(3.6 * len(labels) + 1.6, 4.3 * len(dims) + 0.6),
                             target=on)
    for row, q in enumerate(dims):
        tmax = _scale_max(series, q)
        grid = np.linspace(0.0, tmax, BETTI_GRID)
        images = {lb: np.array([betti_curve(dgms[q], grid) if q in dgms
                                else np.full(grid.size, np.nan) for _, dgms in series[lb]],
                               dtype=np.float64) for lb in labels}
        vmax = max([float(np.nanmax(m)) for m in images.values() if np.isfinite(m).any()]
                   or [1.0])
        norm = Normalize(0.0, max(vmax, 1.0))
        for col, label in enumerate(labels):
            ax = axes[row][col]
            steps = [s for s, _ in series[label]]
            ax.imshow(images[label], aspect="auto", origin="lower", cmap="viridis", norm=norm,
                      extent=(0.0, tmax, -0.5, len(steps) - 0.5), interpolation="nearest")
            _heat_ticks(ax, steps)
            ax.set_title(f"{label}: H{q}")
            ax.set_xlabel("filtration scale (distance)")
            if col == 0:
                ax.set_ylabel("checkpoint (training step)")
        fig.colorbar(ScalarMappable(norm=norm, cmap="viridis"), ax=list(axes[row]),
                     label=f"Betti number β{q} (bars alive)", aspect=25, pad=0.01)
    shown = "" if len(labels) == len(series) else f" ({len(labels)} of {len(series)} models)"
    fig.suptitle(f"{title}{shown}: bars with birth ≤ scale < death, hidden states of the "
                 "analysed layer")
    return fig


def select_checkpoints(steps: Sequence[float], k: int = MAX_DIAGRAM_CHECKPOINTS) -> list[int]:
    """Indices of up to ``k`` checkpoints of a step-sorted list: the first, the last, and
    those nearest to evenly spaced values of log(1 + step) in between."""
    n = len(steps)
    if n <= k:
        return list(range(n))
    x = np.log1p(np.maximum(np.asarray(steps, dtype=np.float64), 0.0))
    chosen = [0, n - 1]
    for target in np.linspace(x[0], x[-1], k)[1:-1]:
        for i in np.argsort(np.abs(x - target), kind="stable"):
            if int(i) not in chosen:
                chosen.append(int(i))
                break
    return sorted(chosen)


@figure("persistence_diagrams", has_arrays)
def plot_persistence_diagrams(records: Sequence[Record], statistics: StatisticsLike,
                              arrays: ArraysOf | None = None,
                              on: Target | None = None) -> Drawn | None:
    """H0 and H1 persistence diagrams (rows) of the largest model at up to five
    checkpoints (columns: first, last and log-spaced ones between); infinite bars sit on
    a dashed line at the top."""
    series = _diagram_series(records, arrays)
    title = "Persistence diagrams of the hidden states across training"
    if not series:
        why = "no arrays given" if arrays is None else "no diagram arrays found"
        return _empty_figure(title, f"no data: {why}", target=on)
    groups = by_model(records)
    label = max(series, key=lambda lb: _num_parameters(groups[lb]) or 0.0)
    rows = series[label]
    picked = [rows[i] for i in select_checkpoints([s for s, _ in rows])]
    dims = sorted({q for _, dgms in picked for q in dgms if q <= 1}) or [0]
    fig, axes = subplots(len(dims), len(picked), squeeze=False, layout="constrained",
                             figsize=(2.9 * len(picked) + 1.0, 3.1 * len(dims) + 1.2),
                             target=on)
    for r_i, q in enumerate(dims):
        finite = [d[np.isfinite(d).all(axis=1)] for _, dgms in picked
                  if (d := dgms.get(q)) is not None]
        vals = np.concatenate([f.ravel() for f in finite]) if finite else np.array([])
        hi = float(vals.max()) if vals.size else 1.0
        hi = hi if hi > 0 else 1.0
        inf_y = hi * 1.1
        lim = (-0.03 * hi, hi * 1.17)
        for c_i, (step, dgms) in enumerate(picked):
            ax = axes[r_i][c_i]
            ax.plot(lim, lim, color="0.5", linewidth=0.8, linestyle="-", zorder=1)
            d = dgms.get(q)
            n_inf = 0
            if d is not None and d.size:
                ok = np.isfinite(d).all(axis=1)
                inf = np.isfinite(d[:, 0]) & np.isposinf(d[:, 1])
                n_inf = int(inf.sum())
                ax.scatter(d[ok, 0], d[ok, 1], s=9, alpha=0.6, color=f"C{q}",
                           edgecolors="none", zorder=3)
                if n_inf:
                    ax.scatter(d[inf, 0], np.full(n_inf, inf_y), s=28, marker="^",
                               color="crimson", zorder=4)
            ax.axhline(inf_y, color="0.6", linestyle="--", linewidth=0.8)
            ax.set_xlim(lim)
            ax.set_ylim(lim)
            ax.set_aspect("equal", adjustable="box")
            n_bars = 0 if d is None else len(d)
            ax.set_title(f"step {_step_label(step)}: H{q}, {n_bars} bars", fontsize=10)
            ax.set_xlabel("birth (distance)")
            if c_i == 0:
                ax.set_ylabel("death (distance)")
            if d is None or not d.size:
                no_data(ax)
    handles = [Line2D([], [], color="C0", marker="o", linestyle="none", label="H0 bar"),
               Line2D([], [], color="C1", marker="o", linestyle="none", label="H1 bar"),
               Line2D([], [], color="crimson", marker="^", linestyle="none",
                      label="infinite bar (death = ∞, on the dashed line)"),
               Line2D([], [], color="0.5", label="diagonal: death = birth")]
    fig.legend(handles=handles, loc="outside lower center", ncol=4)
    fig.suptitle(f"{title}: {label}, the largest model "
                 f"({_step_label(_num_parameters(groups[label]) or 0)} parameters)")
    return fig


# ------------------------------------------------------------------- layer heatmaps

# Architectures whose ``hidden_states`` hold no embedding output (entry 0 is the first
# block's output, the last the last block's after the final norm), for records written
# before they carried ``layer_names``.
BLOCK_FIRST_MODEL_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba", "rwkv"})


def layer_names(record: Record) -> list[str] | None:
    """What each hidden-state index of an embedding record is, one label per index.

    The record's own ``layer_names`` (found by probing the model:
    :func:`toposig.model.forward.hidden_state_layout`); for an older record without
    them, derived from its ``model_type`` and ``num_layers`` (n): ``["block 1", ...,
    "block n", "final norm"]`` for Mamba, Mamba-2, FalconMamba and RWKV,
    ``["embeddings", "block 1", ..., "block n-1", "last hidden state"]`` for any other
    type; ``None`` when neither is known.
    """
    if record.layer_names:
        return list(record.layer_names)
    model_type, n = record.model_type, record.num_layers
    if model_type is None or n is None or n < 1:
        return None
    if model_type in BLOCK_FIRST_MODEL_TYPES:
        return [f"block {k}" for k in range(1, n + 1)] + ["final norm"]
    return ["embeddings", *(f"block {k}" for k in range(1, n)), "last hidden state"]


def layer_tick_labels(records: Sequence[Record], layers: Sequence[int]) -> list[str]:
    """Labels of hidden-state indices ``layers`` for one model's records: what each
    index is (:func:`layer_names` of the last record that says), else the index itself
    (``"3"``). Index 0 is labelled ``"embeddings"`` only where it is the embedding
    output, never for Mamba or RWKV, whose entry 0 is ``"block 1"``."""
    names = next((n for r in reversed(records) if (n := layer_names(r))), None) or []
    return [names[i] if 0 <= i < len(names) else str(i) for i in layers]


def _layered(records: Sequence[Record]) -> bool:
    return any(r.layers for r in records)


@figure("layer_heatmaps", has_layer_features)
def plot_layer_heatmaps(records: Sequence[Record], statistics: StatisticsLike,
                        arrays: ArraysOf | None = None,
                        on: Target | None = None) -> Drawn | None:
    """Per model (columns, up to four), a layer × checkpoint heatmap of H1 total
    persistence and of RankMe (rows), from the records' per-layer features (``layers``:
    runs with ``--layers all``), each row labelled with what that hidden state is
    (:func:`layer_tick_labels`: ``embeddings``, ``block k``, ``final norm``). Returns None
    (nothing drawn) when no record has per-layer features."""
    if not _layered(records):
        return None
    groups = {lb: [r for r in recs if r.layers]
              for lb, recs in by_model(records).items()}
    groups = {lb: recs for lb, recs in groups.items() if recs}
    labels = _spread_models(groups)
    fig, axes = subplots(len(LAYER_FEATURES), len(labels), squeeze=False,
                             layout="constrained",
                             figsize=(4.2 * len(labels) + 0.8, 4.0 * len(LAYER_FEATURES) + 0.6),
                             target=on)
    cmap = mpl.colormaps["magma"].with_extremes(bad="0.85")
    for row, feature in enumerate(LAYER_FEATURES):
        name, unit = FEATURE_LABELS.get(feature, (feature, feature))
        for col, label in enumerate(labels):
            ax = axes[row][col]
            recs = groups[label]
            layers = sorted({k for r in recs for k in r.layers})
            matrix = np.full((len(layers), len(recs)), np.nan)
            for j, r in enumerate(recs):
                for i, layer in enumerate(layers):
                    v = finite_or_none((r.layers.get(layer) or {}).get(feature))
                    if v is not None:
                        matrix[i, j] = v
            ax.set_title(f"{label}: {name}", fontsize=10)
            ax.set_xlabel("checkpoint (training step)")
            if col == 0:
                ax.set_ylabel("hidden state")
            if not np.isfinite(matrix).any():
                no_data(ax)
                continue
            im = ax.imshow(np.ma.masked_invalid(matrix), aspect="auto", origin="lower",
                           cmap=cmap, interpolation="nearest")
            _heat_ticks(ax, [step_of(r) for r in recs], axis="x")
            ax.set_yticks(range(len(layers)), layer_tick_labels(recs, layers),
                          fontsize=8 if len(layers) <= 16 else 6)
            fig.colorbar(im, ax=ax, label=unit, shrink=0.9, pad=0.02)
    fig.suptitle("Per-layer topology and spectrum across training (grey: not recorded)")
    return fig


# ----------------------------------------------------------------------------- all


# In drawing order. Each applies only given the results root: callers opt in by passing it.
ANALYSIS_FIGURES: dict[str, Figure] = registry(
    plot_training_curves, plot_controls_summary, plot_phase_fits, plot_scaling_relationships,
    plot_prediction_comparison, plot_betti_curves, plot_persistence_diagrams,
    plot_layer_heatmaps)


__all__ = ["ANALYSIS_FIGURES", "BLOCK_FIRST_MODEL_TYPES", "betti_curve", "has_arrays",
           "has_layer_features", "has_quality", "has_section", "layer_names",
           "layer_tick_labels", "piecewise_line", "plot_betti_curves",
           "plot_controls_summary",
           "plot_layer_heatmaps", "plot_persistence_diagrams", "plot_phase_fits",
           "plot_prediction_comparison", "plot_scaling_relationships",
           "plot_training_curves", "record_diagrams", "select_checkpoints"]
