"""How a model's representation of the same texts moves between checkpoints.

Pure: clouds in, numbers out. Two clouds ``X`` (n, d1) and ``Y`` (n, d2) hold the same
``n`` texts' pooled hidden states at two checkpoints, row ``i`` the same text in both:

- **linear CKA** (Kornblith et al. 2019): ``‖Yᵀ X‖²_F / (‖Xᵀ X‖_F ‖Yᵀ Y‖_F)`` of the
  column-centred clouds; 1 for a cloud and itself, invariant to an orthogonal transform
  and an isotropic scaling of either, in [0, 1];
- **k-nearest-neighbour overlap**: the mean over texts of the Jaccard index of a text's
  neighbours in the two clouds' symmetric ``k``-NN graphs (the graphs and index of
  :mod:`toposig.features.zigzag`, as the inter-layer family's ``layer_knn_overlap``).

:func:`drift_series` relates each checkpoint of a model to the previous one and to the
last one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DRIFT_NAMES = ("drift_cka_prev", "drift_cka_last", "drift_knn_prev", "drift_knn_last")


def _centred(cloud: np.ndarray) -> np.ndarray:
    x = np.asarray(cloud, dtype=np.float64)
    if x.ndim != 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"need a finite 2-D cloud, got shape {x.shape}")
    return x - x.mean(axis=0)


def linear_cka(x: np.ndarray, y: np.ndarray) -> float | None:
    """Linear CKA of ``x`` (n, d1) and ``y`` (n, d2), the same ``n`` texts; ``None`` when
    either cloud is a single point repeated (no variance). Computed from the smaller of
    the feature-space products and the texts' Gram matrices (the same number).

    Raises:
        ValueError: different numbers of texts, or a cloud not finite and 2-D.
    """
    a, b = _centred(x), _centred(y)
    if len(a) != len(b):
        raise ValueError(f"the clouds hold {len(a)} and {len(b)} texts: CKA needs the same")
    if len(a) < max(a.shape[1], b.shape[1]):  # ‖Yᵀ X‖²_F = ⟨X Xᵀ, Y Yᵀ⟩_F
        k, ell = a @ a.T, b @ b.T
        cross = float(np.sum(k * ell))
        norms = float(np.linalg.norm(k) * np.linalg.norm(ell))
    else:
        cross = float(np.linalg.norm(b.T @ a) ** 2)
        norms = float(np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))
    return float(cross / norms) if norms > 0 else None


def knn_overlap(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """Mean Jaccard index of each text's neighbours in the symmetric ``k``-NN graphs of
    ``x`` and of ``y`` (a text may have more than ``k`` in one: those that count it among
    theirs)."""
    if len(x) != len(y):
        raise ValueError(f"the clouds hold {len(x)} and {len(y)} texts: the overlap needs "
                         "the same")
    return _graph_overlap(_graph(x, k), _graph(y, k))


def _graph(cloud: np.ndarray, k: int):
    from toposig.features import zigzag

    _centred(cloud)  # the same checks as the CKA's
    return zigzag.knn_graph(cloud, k)


def _graph_overlap(a, b) -> float:
    from toposig.features import zigzag

    return zigzag.knn_overlap([a, b])


def drift_series(clouds: Sequence[np.ndarray], k: int) -> list[dict[str, float | None]]:
    """For each of a model's checkpoints in step order, its cloud's CKA and ``k``-NN
    overlap with the previous checkpoint's (``None`` for the first) and with the last
    one's (1 for the last itself). A cloud with a NaN or inf in it (a precision's
    overflow) has every feature ``None`` and is skipped: its neighbours are related to
    each other. Each cloud's graph is built once."""
    finite = [i for i, c in enumerate(clouds) if np.all(np.isfinite(np.asarray(c)))]
    out: list[dict[str, float | None]] = [dict.fromkeys(DRIFT_NAMES) for _ in clouds]
    if not finite:
        return out
    graphs = {i: _graph(clouds[i], k) for i in finite}
    last = finite[-1]
    for before, i in zip([None, *finite[:-1]], finite, strict=True):
        out[i] = {
            "drift_cka_prev": None if before is None else linear_cka(clouds[before], clouds[i]),
            "drift_cka_last": linear_cka(clouds[i], clouds[last]),
            "drift_knn_prev": None if before is None else _graph_overlap(graphs[before],
                                                                         graphs[i]),
            "drift_knn_last": _graph_overlap(graphs[i], graphs[last]),
        }
    return out
