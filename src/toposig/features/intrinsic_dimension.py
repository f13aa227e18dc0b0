"""The intrinsic dimension of a point cloud, by scikit-dimension's estimators.

Pure: a cloud (n, d) in, numbers out. Two estimators of the dimension of the manifold
the points lie near, both from the distances to each point's nearest neighbours:

- **TwoNN** (Facco et al. 2017; Valeriani et al. 2023 and Cheng et al. 2025 on the
  hidden states of language models): the ratio of each point's second to first
  neighbour distance is Pareto-distributed with the dimension as its exponent;
  ``skdim.id.TwoNN`` fits it with the largest ``discard_fraction`` of the ratios left
  out.
- **MLE** (Levina and Bickel 2004): the maximum-likelihood dimension of each point's
  ``k`` nearest neighbours, averaged over the points (``skdim.id.MLE``, its default
  Haro approximation, ``comb="mle"``).

A repeated point (a text analysed twice) has a neighbour at distance 0, which no
estimator defines, so each distinct point counts once. Both are ``None`` when fewer
than ``k + 2`` distinct points remain.
"""

from __future__ import annotations

import numpy as np

ID_NAMES = ("id_twonn", "id_mle")


def distinct_points(cloud: np.ndarray) -> np.ndarray:
    """The distinct rows of ``cloud`` (n, d), as float64, in their first order.

    Raises:
        ValueError: not a 2-D cloud, or a NaN or inf in it.
    """
    x = np.asarray(cloud, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"need a 2-D cloud, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("point cloud contains NaN or inf")
    _, first = np.unique(x, axis=0, return_index=True)
    return x[np.sort(first)]


def intrinsic_dimensions(cloud: np.ndarray, discard_fraction: float = 0.1,
                         k: int = 10) -> dict[str, float | None]:
    """``id_twonn`` and ``id_mle`` of ``cloud`` (n, d), in dimensions (see the module).

    Args:
        discard_fraction: TwoNN's share of the largest neighbour-distance ratios left out.
        k: the MLE's neighbours per point.
    """
    import skdim

    x = distinct_points(cloud)
    if len(x) < k + 2:
        return dict.fromkeys(ID_NAMES)
    twonn = skdim.id.TwoNN(discard_fraction=discard_fraction).fit(x).dimension_
    mle = skdim.id.MLE().fit(x, n_neighbors=k).dimension_
    return {"id_twonn": float(twonn), "id_mle": float(mle)}
