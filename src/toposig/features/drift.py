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
    either cloud is a single point repeated (no variance).

    Raises:
        ValueError: different numbers of texts, or a cloud not finite and 2-D.
    """
    a, b = _centred(x), _centred(y)
    if len(a) != len(b):
        raise ValueError(f"the clouds hold {len(a)} and {len(b)} texts: CKA needs the same")
    cross = np.linalg.norm(b.T @ a) ** 2
    norms = np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b)
    return float(cross / norms) if norms > 0 else None


def knn_overlap(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """Mean Jaccard index of each text's ``k`` nearest neighbours in ``x`` and in ``y``."""
    from toposig.features import zigzag

    if len(x) != len(y):
        raise ValueError(f"the clouds hold {len(x)} and {len(y)} texts: the overlap needs "
                         "the same")
    return zigzag.knn_overlap([zigzag.knn_graph(_centred(x), k),
                               zigzag.knn_graph(_centred(y), k)])


def drift_series(clouds: Sequence[np.ndarray], k: int) -> list[dict[str, float | None]]:
    """For each of a model's checkpoints in step order, its cloud's CKA and ``k``-NN
    overlap with the previous checkpoint's (``None`` for the first) and with the last
    one's (1 for the last itself)."""
    out: list[dict[str, float | None]] = []
    if not clouds:
        return out
    last = clouds[-1]
    for i, cloud in enumerate(clouds):
        prev = clouds[i - 1] if i else None
        out.append({
            "drift_cka_prev": None if prev is None else linear_cka(prev, cloud),
            "drift_cka_last": linear_cka(cloud, last),
            "drift_knn_prev": None if prev is None else knn_overlap(prev, cloud, k),
            "drift_knn_last": knn_overlap(cloud, last, k),
        })
    return out
