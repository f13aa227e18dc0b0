"""Loss-surface topology: basins, saddles and persistence on grids with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from toposig.features import landscape


def two_basins() -> np.ndarray:
    """Minimum 0 at (2, 2), minimum 1 at (2, 6), joined by a path whose highest point,
    the saddle, is 3 at (2, 4); everything else 10."""
    g = np.full((5, 9), 10.0)
    g[2, 2], g[2, 3], g[2, 4], g[2, 5], g[2, 6] = 0.0, 2.0, 3.0, 2.5, 1.0
    return g


def test_two_basins_give_two_minima_and_one_saddle():
    topo = landscape.surface_topology(two_basins())
    f = topo.features
    assert f["landscape_n_minima"] == 2 and f["landscape_n_saddles"] == 1
    assert f["landscape_total_persistence"] == pytest.approx(2.0)  # 3 - 1
    assert f["landscape_mean_persistence"] == pytest.approx(2.0)
    assert f["landscape_max_persistence"] == pytest.approx(2.0)
    assert f["landscape_loss_range"] == pytest.approx(10.0)
    assert topo.diagram.tolist() == [[0.0, np.inf], [1.0, 3.0]]
    assert topo.minima.tolist() == [[2, 2], [2, 6]]
    assert topo.saddles.tolist() == [[2, 4]]


def test_the_basin_that_holds_the_checkpoint():
    g = two_basins()
    # At the saddle, both basins are one component: the global basin, depth max - min.
    at_saddle = landscape.surface_topology(g, center=(2, 4)).features
    assert at_saddle["landscape_basin_depth"] == pytest.approx(10.0)
    assert at_saddle["landscape_center_height"] == pytest.approx(3.0)
    # In the shallow basin: it is 2 deep, and the checkpoint sits 1.5 above its floor.
    shallow = landscape.surface_topology(g, center=(2, 5)).features
    assert shallow["landscape_basin_depth"] == pytest.approx(2.0)
    assert shallow["landscape_center_height"] == pytest.approx(1.5)


def test_a_smooth_double_well_sampled_on_a_grid():
    """f = (x² − 1)² + 0.3 x + y²: minima near x = −1.04 and 0.96, saddle near x = 0.075;
    the right basin's persistence is f(saddle) − f(right minimum) ≈ 1.011 − 0.294."""
    x = np.linspace(-2, 2, 81)
    xx, yy = np.meshgrid(x, x, indexing="ij")
    f = (xx**2 - 1) ** 2 + 0.3 * xx + yy**2
    topo = landscape.surface_topology(f).features
    assert topo["landscape_n_minima"] == 2 and topo["landscape_n_saddles"] == 1
    xs = np.linspace(-2, 2, 200001)
    g = (xs**2 - 1) ** 2 + 0.3 * xs
    right = g[xs > 0.5].min()
    saddle = g[(xs > -0.5) & (xs < 0.5)].max()
    assert topo["landscape_total_persistence"] == pytest.approx(saddle - right, abs=0.01)


def union_find_h0(grid: np.ndarray) -> list[tuple[float, float]]:
    """Finite H0 bars of a grid's 4-connected sublevel sets by the elder rule, written out
    by hand: the independent reference for gudhi's cubical complex."""
    order = np.argsort(grid, axis=None, kind="stable")
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    flat = grid.ravel()
    bars = []
    rows, cols = grid.shape
    for idx in order:
        idx = int(idx)
        parent[idx] = idx
        r, c = divmod(idx, cols)
        for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            j = rr * cols + cc
            if 0 <= rr < rows and 0 <= cc < cols and j in parent:
                a, b = find(idx), find(j)
                if a == b:
                    continue
                young, old = (a, b) if flat[a] > flat[b] else (b, a)
                if flat[young] < flat[idx]:
                    bars.append((float(flat[young]), float(flat[idx])))
                parent[young] = old
    return sorted(bars)


@pytest.mark.parametrize("seed", range(5))
def test_merge_tree_equals_a_union_find_on_random_grids(seed):
    grid = np.random.default_rng(seed).standard_normal((13, 11))
    topo = landscape.surface_topology(grid)
    finite = sorted(map(tuple, topo.diagram[np.isfinite(topo.diagram[:, 1])].tolist()))
    expected = union_find_h0(grid)
    assert len(finite) == len(expected) > 3
    assert np.allclose(np.array(finite), np.array(expected))
    assert topo.features["landscape_n_minima"] == len(finite) + 1
    # every bar is born at the grid value of its recorded minimum
    assert np.allclose(grid[topo.minima[:, 0], topo.minima[:, 1]], topo.diagram[:, 0])


def test_filter_normalised_directions():
    rng = np.random.default_rng(0)
    params = [rng.standard_normal((4, 3)), rng.standard_normal(5), rng.standard_normal((2, 3, 3))]
    dirs = landscape.filter_normalized_direction(params, np.random.default_rng(1))
    assert np.allclose(np.linalg.norm(dirs[0], axis=1), np.linalg.norm(params[0], axis=1))
    assert np.array_equal(dirs[1], np.zeros(5))  # biases and gains are not perturbed
    assert np.allclose(np.sqrt((dirs[2] ** 2).sum(axis=(1, 2))),
                       np.sqrt((params[2] ** 2).sum(axis=(1, 2))))
    again = landscape.filter_normalized_direction(params, np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(dirs, again, strict=True))


def test_grid_settings_and_bad_grids():
    assert landscape.grid_coordinates(5, 0.5).tolist() == [-0.5, -0.25, 0.0, 0.25, 0.5]
    with pytest.raises(ValueError, match="odd"):
        landscape.grid_coordinates(4, 1.0)
    with pytest.raises(ValueError, match="positive"):
        landscape.grid_coordinates(5, 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        landscape.surface_topology(np.array([[0.0, np.nan], [1.0, 2.0]]))
    assert np.linalg.norm(landscape.scaled_to(np.ones(4), 3.0)) == pytest.approx(3.0)
