"""Per-example gradients of a causal LM and the homology of their cloud.

Each token window of the probe batch is one example; its loss is the mean next-token
cross-entropy over the window. :func:`per_example_gradients` computes every example's
gradient with respect to every parameter with ``torch.func`` (``vmap`` of ``grad`` over
a ``functional_call``), a chunk of examples at a time, and hands each chunk back
flattened, so that only a chunk's gradients are ever in memory. :func:`sketch` maps them
to a fixed low dimension with a seeded sparse random projection (scikit-learn's
``SparseRandomProjection``: Achlioptas/Li, distances kept up to ``1 ± ε`` in
expectation), the same for every checkpoint of a model because it depends only on the
parameter count, the dimension and the seed. :func:`gradient_features` then gives the
Vietoris–Rips diagram features of the projected cloud and plain statistics of the
gradients.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np

from toposig.features import homology


def window_loss(logits, ids):
    """Mean next-token cross-entropy of one window: logits (T, V), ids (T,)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits[:-1].float(), ids[1:])


def per_example_gradients(model, ids, chunk_size: int = 8) -> Iterator[np.ndarray]:
    """Every example's loss gradient, flattened, a chunk of examples at a time.

    Args:
        model: a causal LM (``model(ids).logits``) in eval mode.
        ids: (n, T) int64 token windows on the model's device; no padding.
        chunk_size: examples per ``vmap`` call (memory: chunk × parameters floats).

    Yields:
        (chunk, P) float32 arrays; P is the model's parameter count, in the order of
        ``model.named_parameters()``.
    """
    import torch
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss_one(p, window):
        logits = functional_call(model, (p, buffers), (window[None],)).logits[0]
        return window_loss(logits, window)

    per_example = vmap(grad(loss_one), in_dims=(None, 0))
    for start in range(0, ids.shape[0], chunk_size):
        with warnings.catch_warnings():
            # torch has no batching rule for some fused attention backwards and loops
            # over the examples instead: correct, only slower.
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            g = per_example(params, ids[start:start + chunk_size])
        yield torch.cat([g[k].reshape(g[k].shape[0], -1) for k in params], dim=1
                        ).float().cpu().numpy()


def row_norms(g: np.ndarray) -> np.ndarray:
    """Euclidean norm of each row of an (n, P) array, in float64.

    Each element is widened to float64 inside the reduction (torch's ``vector_norm``
    with ``dtype``), so no float64 copy of the array is made: for a chunk of 8 gradients
    of 6.5M parameters, ``np.linalg.norm(g.astype(np.float64), axis=1)`` wrote two
    416-MB arrays and took 1.1 s on 2 cores. The squares of widened float32 values are
    exact in float64; only the order of the sum differs (``tests/test_gradients.py``).
    """
    import torch

    return torch.linalg.vector_norm(torch.from_numpy(np.ascontiguousarray(g)), dim=1,
                                    dtype=torch.float64).numpy()


def noise_scale(norms: np.ndarray, mean_gradient: np.ndarray) -> float:
    """The simple gradient noise scale of McCandlish et al. 2018, ``B = tr(Σ) / |G|²``
    (examples), with their unbiased estimates (their appendix A) from ``n`` per-example
    gradients: ``tr(Σ) = n / (n − 1) (mean |g_i|² − |Ḡ|²)`` from the gradients' Euclidean
    ``norms`` (n,) and their mean ``Ḡ`` (``mean_gradient``, (P,)), and
    ``|G|² = |Ḡ|² − tr(Σ) / n`` (the plain ``|Ḡ|²`` holds the noise's ``tr(Σ) / n`` too,
    which would cap ``B`` near ``n``). NaN when that ``|G|²`` is not positive: the mean
    gradient is within the noise."""
    n = len(norms)
    g2 = float(np.dot(mean_gradient.astype(np.float64), mean_gradient.astype(np.float64)))
    trace = n / (n - 1) * (float(np.mean(np.square(norms))) - g2)
    signal = g2 - trace / n
    return trace / signal if signal > 0 else float("nan")


def sketch(dim_in: int, dim_out: int, seed: int):
    """A seeded sparse random projection from ``dim_in`` to ``dim_out`` dimensions.

    Returns a fitted ``sklearn.random_projection.SparseRandomProjection``; the same
    ``(dim_in, dim_out, seed)`` give the same projection.
    """
    from scipy import sparse
    from sklearn.random_projection import SparseRandomProjection

    proj = SparseRandomProjection(n_components=dim_out, density="auto", dense_output=True,
                                  random_state=seed)
    return proj.fit(sparse.csr_matrix((1, dim_in), dtype=np.float32))


def gradient_features(projected: np.ndarray, norms: np.ndarray, maxdim: int = 1,
                      backend: str = "auto"
                      ) -> tuple[dict[str, float], list[np.ndarray], str]:
    """Features of the per-example gradient cloud.

    Args:
        projected: (n, d) projected gradients (loss units per parameter unit).
        norms: (n,) Euclidean norms of the full (unprojected) gradients.
        maxdim: highest homology dimension.
        backend: Vietoris–Rips backend.

    Returns:
        ``grad_h{q}_*`` diagram features (:func:`toposig.features.homology.diagram_features`) of
        the projected cloud, the mean / std / median / max of the norms, and
        ``grad_cosine_mean``: the mean cosine similarity between two examples' projected
        gradients (their agreement; near 0 for unrelated directions); the diagrams; the
        backend that computed them.
    """
    if projected.shape[0] < 3:
        raise ValueError(f"need at least 3 examples, got {projected.shape[0]}")
    diagrams, used = homology.vietoris_rips(projected, maxdim=maxdim, backend=backend)
    feats = {f"grad_{k}": v for k, v in homology.diagrams_features(diagrams).items()}
    unit = projected / np.maximum(np.linalg.norm(projected, axis=1, keepdims=True), 1e-30)
    cos = unit @ unit.T
    n = cos.shape[0]
    feats |= {
        "grad_norm_mean": float(norms.mean()),
        "grad_norm_std": float(norms.std(ddof=1)),
        "grad_norm_median": float(np.median(norms)),
        "grad_norm_max": float(norms.max()),
        "grad_cosine_mean": float((cos.sum() - np.trace(cos)) / (n * (n - 1))),
    }
    return feats, diagrams, used
