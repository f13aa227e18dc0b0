"""Figures of one measurement (:meth:`toposig.Measurement.plot`): the hidden states'
persistence diagrams, their Betti curves, and the features layer by layer.

Each function takes arrays (not files), draws on ``ax`` (an Axes, Figure or SubFigure;
``None``: a new figure, made without pyplot) and returns the figure holding the panels,
under :data:`toposig.report.style.RC_PARAMS` and without changing the caller's
matplotlib backend or global settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np

from toposig.features.homology import betti_curve
from toposig.report.style import RC_PARAMS, Drawn, Target, subplots

KINDS = ("diagrams", "betti", "layers")
LAYER_PANELS = (("h1_total_persistence", "H1 total persistence"),
                ("rankme", "RankMe (effective rank)"))
BETTI_POINTS = 200


def plot_diagrams(diagrams: Sequence[np.ndarray], title: str = "",
                  ax: Target | None = None) -> Drawn:
    """The diagrams [H0, H1, ...] ((m, 2) birth, death each, in the distance's units) on
    one Axes, drawn by :func:`persim.plot_diagrams` (the global style it sets is undone
    when the :func:`matplotlib.rc_context` around it ends)."""
    from persim import plot_diagrams as persim_plot

    if not diagrams or not any(len(d) for d in diagrams):
        raise ValueError("no persistence diagram to draw (was the embedding measured?)")
    with mpl.rc_context(RC_PARAMS):
        fig, axes = subplots(figsize=(5.0, 4.6), layout="constrained", target=ax)
        persim_plot([np.asarray(d, dtype=np.float64) for d in diagrams], ax=axes,
                    title=title or None, show=False)
    return fig


def plot_betti(diagrams: Sequence[np.ndarray], title: str = "",
               ax: Target | None = None) -> Drawn:
    """Betti curves (:func:`toposig.features.homology.betti_curve`) of each diagram on one
    Axes: how many bars are alive at each scale, from 0 to the largest finite death."""
    finite = [d[np.isfinite(d)] for d in (np.asarray(x, dtype=np.float64) for x in diagrams)]
    top = max((float(f.max()) for f in finite if f.size), default=0.0)
    if top <= 0:
        raise ValueError("no persistence diagram with a finite bar to draw")
    grid = np.linspace(0.0, top * 1.05, BETTI_POINTS)
    with mpl.rc_context(RC_PARAMS):
        fig, axes = subplots(figsize=(6.0, 4.0), layout="constrained", target=ax)
        for q, diagram in enumerate(diagrams):
            axes.step(grid, betti_curve(diagram, grid), where="post", label=f"β{q}")
        axes.set_xlabel("scale (distance)")
        axes.set_ylabel("Betti number")
        axes.set_yscale("symlog")
        axes.legend()
        axes.set_title(title or "Betti curves")
    return fig


def plot_layers(layer_features: Mapping[int, Mapping[str, float | None]],
                layer_names: Sequence[str] = (), title: str = "",
                ax: Target | None = None) -> Drawn:
    """H1 total persistence and RankMe of each hidden state (x: the hidden state's index,
    labelled with its name from ``layer_names``, indexed like the hidden states, when
    given), two panels side by side."""
    layers = sorted(layer_features)
    if not layers:
        raise ValueError("no per-layer features: measure with layers='all' (or a list)")
    with mpl.rc_context(RC_PARAMS):
        fig, axes = subplots(1, len(LAYER_PANELS), figsize=(9.0, 3.8), layout="constrained",
                             squeeze=False, target=ax)
        for panel, (key, name) in zip(axes[0], LAYER_PANELS, strict=True):
            values = [layer_features[i].get(key) for i in layers]
            panel.plot(layers, [np.nan if v is None else v for v in values], "o-")
            panel.set_title(name)
            panel.set_xlabel("hidden state")
            panel.set_xticks(layers)
            if layer_names and layers[-1] < len(layer_names) and layers[0] >= 0:
                panel.set_xticklabels([layer_names[i] for i in layers], rotation=45,
                                      ha="right")
        if title:
            fig.suptitle(title)
    return fig
