"""Figures of the landscape and gradient families.

- ``loss_probe_evolution``: curvature, loss-surface and gradient features against the
  training step, one line per model;
- ``loss_landscapes``: the loss surface around selected checkpoints (rows: models,
  columns: the first, a middle and the last checkpoint), with the basins' minima, the
  merge saddles and the checkpoint itself marked.

Drawn when the records carry the features (the surfaces also need their arrays under the
results root: without it, or them, :func:`plot_loss_landscapes` draws nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.lines import Line2D

from toposig.analysis.compute import ArraysOf
from toposig.analysis.correlations import by_model
from toposig.families.landscape import LandscapeFamily
from toposig.families.registry import over_training
from toposig.records import Record
from toposig.report.panels import feature_grid
from toposig.report.plots_diagrams import select_checkpoints
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

SURFACE_COLUMNS = 3
MAX_SURFACE_ROWS = 5


def _present(records: Sequence[Record], names: Sequence[str]) -> list[str]:
    return [n for n in names if any(n in r.features for r in records)]


def has_probe_features(records: Sequence[Record], statistics: StatisticsLike | None = None,
                       arrays: ArraysOf | None = None) -> bool:
    """Some record has a feature the figure draws (its families' ``over_training``)."""
    return bool(_present(records, over_training("loss_probe_evolution")))


@figure("loss_probe_evolution", has_probe_features, overlay=True)
def plot_loss_probe_evolution(records: Sequence[Record], statistics: StatisticsLike,
                              arrays: ArraysOf | None = None,
                              on: Target | None = None) -> Drawn | None:
    """Curvature, loss-surface and gradient features vs step (up to 3 × 3 panels)."""
    keys = _present(records, over_training("loss_probe_evolution"))
    return feature_grid(records, keys,
                         "Curvature, loss surface and per-example gradients across training",
                         note=("probe batch: fixed seeded token windows;\nλ₁: top Hessian "
                               "eigenvalue (Lanczos);\ngradients: projected, Vietoris–Rips"),
                               target=on)


def _surface_panels(records: Sequence[Record], arrays: ArraysOf
                    ) -> list[tuple[str, list[tuple[Record, Mapping[str, np.ndarray]]]]]:
    """Per model (largest last, at most MAX_SURFACE_ROWS), the selected checkpoints and
    their landscape arrays."""
    rows = []
    for label, recs in by_model(records).items():
        found = [(r, file) for r in recs if (file := r.arrays_file(LandscapeFamily.name))]
        if not found:
            continue
        chosen = select_checkpoints([r.step or 0 for r, _ in found], SURFACE_COLUMNS)
        panels = []
        for i in chosen:
            rec, file = found[i]
            try:
                panels.append((rec, arrays(file)))
            except (OSError, KeyError, ValueError) as exc:
                logger.warning("%s step %s: no landscape arrays (%s)", label, rec.step, exc)
        if panels:
            rows.append((label, panels))
    return rows[-MAX_SURFACE_ROWS:]


@figure("loss_landscapes", has_probe_features)
def plot_loss_landscapes(records: Sequence[Record], statistics: StatisticsLike,
                         arrays: ArraysOf | None = None,
                         on: Target | None = None) -> Drawn | None:
    """Filled contours of the loss surface of up to five models at three checkpoints."""
    if arrays is None:
        return None
    rows = _surface_panels(records, arrays)
    if not rows:
        return None
    ncols = max(len(p) for _, p in rows)
    fig, axes = subplots(len(rows), ncols, figsize=(4.2 * ncols, 3.6 * len(rows)),
                             layout="constrained", squeeze=False, target=on)
    dirs = None
    for (label, panels), ax_row in zip(rows, axes, strict=True):
        for ax in ax_row[len(panels):]:
            ax.set_visible(False)
        for (rec, arr), ax in zip(panels, ax_row, strict=False):
            grid, coords = arr["grid"], arr["coords"]
            part = rec.parts.get(LandscapeFamily.name)
            dirs = (part.settings if part is not None else {}).get("dirs", dirs)
            cs = ax.contourf(coords, coords, grid.T, levels=20, cmap="viridis")
            fig.colorbar(cs, ax=ax, label="loss (nats)", shrink=0.9)
            mins = arr.get("minima", np.empty((0, 2))).astype(int)
            sads = arr.get("saddles", np.empty((0, 2))).astype(int)
            ax.scatter(coords[mins[:, 0]], coords[mins[:, 1]], s=28, c="white",
                       edgecolors="black", linewidths=0.6, zorder=3)
            ax.scatter(coords[sads[:, 0]], coords[sads[:, 1]], s=36, c="orange", marker="x",
                       linewidths=1.4, zorder=3)
            ax.scatter([0], [0], s=90, c="red", marker="*", zorder=4)
            f = rec.features
            n_min = f.get("landscape_n_minima", float("nan"))
            ax.set_title(f"{label}, step {rec.step}\n"
                         f"{n_min:.0f} {'minimum' if n_min == 1 else 'minima'}, basin "
                         f"depth {f.get('landscape_basin_depth', float('nan')):.3g} nats",
                         fontsize=10)
            ax.set_xlabel("step along direction 1 (× ‖θ‖)")
            ax.set_ylabel("step along direction 2 (× ‖θ‖)")
    handles = [Line2D([], [], marker="o", color="white", markeredgecolor="black",
                      linestyle="", label="basin minimum"),
               Line2D([], [], marker="x", color="orange", linestyle="", label="merge saddle"),
               Line2D([], [], marker="*", color="red", linestyle="", markersize=11,
                      label="checkpoint")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3)
    plane = {"hessian": "plane of the top two Hessian eigenvectors",
             "random": "plane of two filter-normalised random directions"}.get(
                 dirs, "plane of two directions")
    fig.suptitle(f"Loss surface around checkpoints, in the {plane}")
    return fig


PROBE_FIGURES: dict[str, Figure] = registry(plot_loss_probe_evolution, plot_loss_landscapes)
