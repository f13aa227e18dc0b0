"""The loss surface around a checkpoint and its sublevel-set topology.

The surface is the loss on an r × r grid in a plane through the checkpoint θ:
``L(θ + a·d1 + b·d2)`` for ``a, b`` in ``linspace(−span, span, r)``. The plane is
spanned either by the top two Hessian eigenvectors or by two filter-normalised random
directions (Li et al. 2018, arXiv:1712.09913). Both are scaled so that a step of 1 is a
perturbation as large as the weights themselves: each filter (row) of a random
direction has the norm of the same filter of θ, and each eigenvector is scaled to the
norm of θ. One and the same ``span`` therefore means the same relative distance for
every checkpoint and model.

:func:`surface_topology` summarises the grid by the persistence of its sublevel sets
(gudhi's cubical complex on the grid's vertices, 4-connected): the merge tree of the
basins. Every H0 bar is a basin, born at its minimum and dying at the saddle where it
merges into an older (deeper) basin; one basin, the global one, never dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import ndimage


def filter_normalized_direction(params: Sequence[np.ndarray],
                                rng: np.random.Generator) -> list[np.ndarray]:
    """A random direction, each filter scaled to the norm of that filter of ``params``.

    Args:
        params: the model's parameters as arrays (any shapes).
        rng: the random source.

    Returns:
        One array per parameter. For a parameter with two or more dimensions, every
        slice along the first axis (a filter: an output row of a linear layer) is
        Gaussian, rescaled to the Frobenius norm of the same slice of the parameter.
        One-dimensional parameters (biases, norm gains) get zero, as in Li et al.
    """
    out = []
    for p in params:
        p = np.asarray(p, dtype=np.float64)
        if p.ndim < 2:
            out.append(np.zeros_like(p))
            continue
        d = rng.standard_normal(p.shape)
        axes = tuple(range(1, p.ndim))
        d_norm = np.sqrt((d**2).sum(axis=axes, keepdims=True))
        p_norm = np.sqrt((p**2).sum(axis=axes, keepdims=True))
        out.append(d * p_norm / np.maximum(d_norm, 1e-12))
    return out


def scaled_to(vector: np.ndarray, norm: float) -> np.ndarray:
    """``vector`` rescaled to Euclidean norm ``norm`` (an eigenvector to the weights' norm)."""
    v = np.asarray(vector, dtype=np.float64)
    return v * (norm / max(float(np.linalg.norm(v)), 1e-300))


def grid_coordinates(res: int, span: float) -> np.ndarray:
    """The ``res`` step sizes along each direction: ``linspace(−span, span, res)``."""
    if res < 3 or res % 2 == 0:
        raise ValueError(f"the grid resolution must be an odd number >= 3 (so that the "
                         f"checkpoint is a grid point), got {res}")
    if not span > 0:
        raise ValueError(f"the span must be positive, got {span}")
    return np.linspace(-span, span, res)


@dataclass
class SurfaceTopology:
    """Sublevel-set persistence of a loss grid.

    Attributes:
        diagram: (m, 2) H0 bars (birth, death) in loss units, death ``inf`` for the
            global basin; bars of zero persistence dropped.
        minima: (m, 2) grid indices (row, column) of each bar's minimum.
        saddles: (m − 1, 2) grid indices of the saddle where each finite bar dies, in the
            order of ``diagram[1:]``.
        features: ``landscape_*`` numbers (see :func:`surface_topology`).
    """

    diagram: np.ndarray
    minima: np.ndarray
    saddles: np.ndarray
    features: dict[str, float]


def surface_topology(grid: np.ndarray, center: tuple[int, int] | None = None
                     ) -> SurfaceTopology:
    """The merge-tree summary of a loss grid's sublevel sets.

    Args:
        grid: (r, c) loss values on a regular grid.
        center: grid index of the checkpoint (default: the middle of the grid).

    Returns:
        The H0 diagram, where each basin's minimum lies, and the features:

        - ``landscape_n_minima``: basins (local minima up to plateaus), the global one
          included;
        - ``landscape_n_saddles``: merge saddles, one per finite bar;
        - ``landscape_total_persistence`` / ``landscape_mean_persistence``: sum / mean
          of the finite bars' lifetimes (0 when the grid has a single basin);
        - ``landscape_max_persistence``: the deepest finite bar (0 when none);
        - ``landscape_basin_depth``: lifetime of the basin that holds the checkpoint,
          i.e. how far the loss rises above that basin's minimum before the basin merges
          into a deeper one; for the global basin, the grid's maximum minus its minimum;
        - ``landscape_center_height``: the checkpoint's loss above that basin's minimum;
        - ``landscape_loss_range``: grid maximum minus minimum.
    """
    import gudhi

    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 2 or min(grid.shape) < 2 or not np.all(np.isfinite(grid)):
        raise ValueError(f"need a finite 2-D grid of at least 2 × 2, got shape {grid.shape}"
                         f"{'' if np.all(np.isfinite(grid)) else ' with non-finite values'}")
    if center is None:
        center = (grid.shape[0] // 2, grid.shape[1] // 2)
    cc = gudhi.CubicalComplex(vertices=grid)
    cc.compute_persistence()
    regular, essential = cc.vertices_of_persistence_pairs()
    pairs = regular[0] if regular else np.empty((0, 2), dtype=int)
    pairs = np.asarray(pairs, dtype=int).reshape(-1, 2)
    flat = grid.ravel(order="F")  # gudhi numbers vertices with the first axis fastest
    births, deaths = flat[pairs[:, 0]], flat[pairs[:, 1]]
    keep = deaths > births
    pairs, births, deaths = pairs[keep], births[keep], deaths[keep]
    glob = int(np.asarray(essential[0]).ravel()[0])
    birth_vertex = np.concatenate([[glob], pairs[:, 0]])
    diagram = np.column_stack([np.concatenate([[flat[glob]], births]),
                               np.concatenate([[np.inf], deaths])])
    minima = np.column_stack(np.unravel_index(birth_vertex, grid.shape, order="F"))
    saddles = np.column_stack(np.unravel_index(pairs[:, 1], grid.shape, order="F")
                              ).reshape(-1, 2)

    # The basin holding the checkpoint: its component of {L <= L(center)} (4-connected,
    # as the cubical complex), whose oldest bar (lowest birth) is alive at that level.
    labels, _ = ndimage.label(grid <= grid[center])
    inside = labels[minima[:, 0], minima[:, 1]] == labels[center]
    own = int(np.flatnonzero(inside)[np.argmin(diagram[inside, 0])])
    lifetimes = deaths - births
    top = float(grid.max())
    depth = (top if own == 0 else diagram[own, 1]) - diagram[own, 0]
    features = {
        "landscape_n_minima": float(len(diagram)),
        "landscape_n_saddles": float(len(lifetimes)),
        "landscape_total_persistence": float(lifetimes.sum()),
        "landscape_mean_persistence": float(lifetimes.mean()) if lifetimes.size else 0.0,
        "landscape_max_persistence": float(lifetimes.max()) if lifetimes.size else 0.0,
        "landscape_basin_depth": float(depth),
        "landscape_center_height": float(grid[center] - diagram[own, 0]),
        "landscape_loss_range": float(top - grid.min()),
    }
    return SurfaceTopology(diagram, minima, saddles, features)
