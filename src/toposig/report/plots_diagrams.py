"""The embedding family's figures drawn from its stored arrays and per-layer features: Betti
curves and persistence diagrams of the hidden states (the ``.npz`` diagrams under the
results root) and the per-layer heatmaps (``layer_features``). Each applies only given the
arrays (or, for the heatmaps, per-layer features), and :func:`plot_layer_heatmaps` draws
nothing (``None``) when no record has them.

Models keep the colours and markers of ``plots`` (first-seen order of model labels).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.lines import Line2D

from toposig.analysis.compute import ArraysOf, layer_diagrams
from toposig.analysis.correlations import by_model
from toposig.features.homology import betti_curve
from toposig.records import Record
from toposig.report.panels import (
    FEATURE_LABELS,
    empty_figure,
    finite_or_none,
    heat_ticks,
    no_data,
    num_parameters_of,
    spread_models,
    step_label,
    step_of,
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



MAX_DIAGRAM_CHECKPOINTS = 5


BETTI_GRID = 256


BETTI_PERCENTILE = 99.0


LAYER_FEATURES = ("h1_total_persistence", "rankme")


def has_arrays(records: Sequence[Record], statistics: StatisticsLike,
               arrays: ArraysOf | None) -> bool:
    """Some record has stored persistence diagrams (its embedding arrays file)."""
    return arrays is not None and any(r.arrays_file() for r in records)


def has_layer_features(records: Sequence[Record], statistics: StatisticsLike,
                       arrays: ArraysOf | None) -> bool:
    """Some record has the embedding's per-layer features (``--layers all``)."""
    return arrays is not None and _layered(records)


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
        return _no_diagrams(title, arrays, on)
    all_groups = by_model(records)
    labels = spread_models({lb: all_groups[lb] for lb in series})
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
            heat_ticks(ax, steps)
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
        return _no_diagrams(title, arrays, on)
    groups = by_model(records)
    label = max(series, key=lambda lb: num_parameters_of(groups[lb]) or 0.0)
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
            ax.set_title(f"step {step_label(step)}: H{q}, {n_bars} bars", fontsize=10)
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
                 f"({step_label(num_parameters_of(groups[label]) or 0)} parameters)")
    return fig


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


def _no_diagrams(title: str, arrays: ArraysOf | None, on: Target | None) -> Drawn:
    """The empty figure of a diagram figure that found no diagram to draw, saying why."""
    why = "no arrays given" if arrays is None else "no diagram arrays found"
    return empty_figure(title, f"no data: {why}", target=on)


def _layered(records: Sequence[Record]) -> bool:
    """Some record has per-layer features the heatmaps draw (another family's per-layer
    features, the intrinsic dimension's, are not theirs)."""
    return any(name in values for r in records for values in r.layers.values()
               for name in LAYER_FEATURES)


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
    labels = spread_models(groups)
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
            heat_ticks(ax, [step_of(r) for r in recs], axis="x")
            ax.set_yticks(range(len(layers)), layer_tick_labels(recs, layers),
                          fontsize=8 if len(layers) <= 16 else 6)
            fig.colorbar(im, ax=ax, label=unit, shrink=0.9, pad=0.02)
    fig.suptitle("Per-layer topology and spectrum across training (grey: not recorded)")
    return fig


# In drawing order. Each applies only given the results root: callers opt in by passing it.
DIAGRAM_FIGURES: dict[str, Figure] = registry(plot_betti_curves, plot_persistence_diagrams,
                                              plot_layer_heatmaps)


__all__ = ["BLOCK_FIRST_MODEL_TYPES", "DIAGRAM_FIGURES", "betti_curve", "has_arrays",
           "has_layer_features", "layer_names", "layer_tick_labels", "plot_betti_curves",
           "plot_layer_heatmaps", "plot_persistence_diagrams", "record_diagrams",
           "select_checkpoints"]
