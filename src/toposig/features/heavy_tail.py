"""Heavy-tailed spectral baselines of a weight matrix, as ``weightwatcher`` computes them.

Pure functions on NumPy arrays (definitions: docs/measures.md); NumPy and SciPy only. These are the
baselines a user would set beside the weight-space topology of
:mod:`toposig.features.weights`: the power-law exponent α of the empirical spectral
density (ESD) as weightwatcher 0.7.7's default ``WeightWatcher.analyze()`` reports it, and
the Frobenius and spectral norms.

**The ESD** (weightwatcher ``combined_eigenvalues``, called by ``apply_esd``). For a
Linear weight ``W`` of shape (out, in), weightwatcher takes ``N = max(out, in)``,
``M = min(out, in)``, converts ``W`` to float64 and computes its M singular values σ with
``scipy.linalg.svd(W, compute_uv=False)`` on ``W`` as stored (no transpose). The ESD is
``λ = σ²`` sorted ascending: the M eigenvalues of the M × M Gram matrix (``WᵀW`` when
out ≥ in, else ``WWᵀ``), **not** divided by N (``normalize`` is False and the ``/ N``
line is commented out since 0.6.5). Units: squared weight units. This module computes
them by default as those eigenvalues, in float64 (:func:`esd`, ``method="gram"``: 3-4x
faster than the SVD, and equal to weightwatcher's to about 1e-13 relative in α and
λ_max); ``method="svd"`` is weightwatcher's own computation, bit for bit.

**The fit** (``fit_powerlaw`` with ``pl_package='ww'``, i.e. ``WW_powerlaw.WWFit``, not
the ``powerlaw`` package). Eigenvalues ``λ ≤ 1e-5`` (``EVALS_THRESH``, absolute) are
dropped; the rest, sorted, are ``x₀ ≤ … ≤ x_{n−1}``. Every ``xᵢ`` but the last is a
candidate ``xmin``; with ``k = n − i`` points in the tail,

    αᵢ = 1 + k / Σ_{j≥i} ln(xⱼ / xᵢ)                       (continuous MLE)
    Dᵢ = max_{j≥i} |1 − (xⱼ / xᵢ)^(1−αᵢ) − (j − i)/k|       (KS, empirical CDF (j−i)/k)

(``Dᵢ = 1`` where ``αᵢ ≤ 1``) and the fit is the first ``i`` of least ``Dᵢ``:
``alpha = αᵢ``, ``xmin = xᵢ``, ``D = Dᵢ``, ``sigma = (αᵢ − 1)/√k``. With fewer than
20 eigenvalues above the threshold (``SMALL_N_CUTOFF``) weightwatcher switches to
``fit_powerlaw_smallN``: the bias-corrected ``αᵢ = 1 + (k − 1)/Σ ln(xⱼ/xᵢ)`` on tails of
at least 8 points (``Dᵢ = 1`` elsewhere). That function chooses the ``i`` minimising
``Dᵢ − 0.868/√k``, but ``WWFit.__init__`` then overrides the choice with the first least
``Dᵢ``, as in the standard path, so that is what ``analyze()`` reports (and what this
module does); with no tail of 8 points, the whole data is the one candidate (its
``sigma`` stays ``−1/√n``, as in weightwatcher). ``xmax`` is the largest
eigenvalue above the threshold, ``num_pl_spikes`` the number of eigenvalues ``≥ xmin``
(all of them, below the threshold too) and ``lambda_max`` the largest eigenvalue.

This module reproduces both paths in NumPy: the tail sums use one ``np.sum`` per
candidate, the reduction weightwatcher uses, so α is the same to the last bit, and the
O(n²) KS distances are computed in vectorised blocks instead of weightwatcher's Python
loop, the power as the exponential of a difference of logarithms (equal to
weightwatcher's to about 1e-14 absolute).

**Norms** (weightwatcher ``apply_norm_metrics``). Beware its names: its ``spectral_norm``
column is ``λ_max = σ_max²`` (its ``sv_max`` is σ_max), its ``norm`` is ``Σλ = ‖W‖_F²``,
``log_norm`` and ``log_spectral_norm`` are their log10, ``alpha_weighted`` is
``α · log10 λ_max`` and ``log_alpha_norm`` is ``log10 Σ λ^α``. Here
:func:`spectral_norm` is σ_max and :func:`frobenius_norm` is ‖W‖_F, both in weight units.

**Layers weightwatcher skips.** ``analyze()`` reports nothing for a layer with
``M < min_evals`` (default 8); :func:`heavy_tail_features` leaves the fit's values NaN
there (its ``min_evals``). Its other limits (``M > max_evals = 15000``,
``N > max_N = 50000``) are not applied here. Where weightwatcher's fit fails (fewer than
two eigenvalues above the threshold) it reports −1; this module reports NaN.

**Where weightwatcher differs from this module by design**: when ``torch.cuda`` is
available, weightwatcher 0.7.7 reads a PyTorch layer's weights as float16
(``torch_T_to_np`` is ``.half()``) and its default ``svd_method='fast'`` runs
``torch.linalg.svdvals`` on the GPU in float32; its values then follow from
half-precision weights (the fit's threshold stays 1e-5: ``RMT_Util`` lowers its own
``EVALS_THRESH`` to 1e-4 there, but ``weightwatcher.py`` imports ``constants`` after
it). On a CPU it reads float32 weights and uses SciPy in float64, which is what this
module matches. This module always works in float64 on the matrix as given.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

# weightwatcher 0.7.7 constants (constants.py, WW_powerlaw.py)
EVALS_THRESH = 1e-5  # eigenvalues at or below are left out of the fit
SMALL_N_CUTOFF = 20  # fewer eigenvalues above the threshold: fit_powerlaw_smallN
SMALL_N_MIN_TAIL = 8  # fit_powerlaw_smallN's k_min
MIN_EVALS = 8  # analyze(min_evals=8): layers with fewer eigenvalues are skipped
_BLOCK_ELEMENTS = 1 << 16  # entries of one block of the KS distance computation (fits L2)

FIT_KEYS: tuple[str, ...] = ("alpha", "xmin", "xmax", "D", "sigma", "num_pl_spikes",
                             "lambda_max", "num_evals")

HEAVY_TAIL_NAMES: tuple[str, ...] = (
    "ww_pl_alpha",
    "ww_pl_xmin",
    "ww_pl_xmax",
    "ww_pl_ks_distance",
    "ww_pl_sigma",
    "ww_pl_num_spikes",
    "ww_weighted_alpha",
    "ww_log_alpha_norm",
    "ww_lambda_max",
    "ww_num_evals",
    "spectral_norm",
    "frobenius_norm",
    "stable_rank",
)


def _as_matrix(matrix: np.ndarray) -> np.ndarray:
    w = np.asarray(matrix, dtype=np.float64)
    if w.ndim != 2 or min(w.shape) < 1:
        raise ValueError(f"expected a non-empty 2-D matrix, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("matrix holds NaN or infinite entries")
    return w


ESD_METHODS = ("gram", "svd")
ESD_METHOD = "gram"
"""How :func:`esd` computes the eigenvalues by default (the weight stage's too)."""


def esd(matrix: np.ndarray, method: str = ESD_METHOD) -> np.ndarray:
    """The empirical spectral density of a weight matrix, as weightwatcher defines it.

    Args:
        matrix: (out, in) weights, any real dtype (used in float64, as stored).
        method: ``"gram"`` (default): the eigenvalues of the min(out, in)-square Gram
            matrix in float64 (``WᵀW`` or ``WWᵀ``, which NumPy computes by BLAS
            ``dsyrk``, half the work of a full product, then ``numpy.linalg.eigvalsh``,
            LAPACK ``dsyevd``; both release the GIL, so threads can compute several
            matrices at once), clipped at 0: 3-4x faster than the SVD, with an absolute
            error of order 1e-16 · λ_max (so a relative error up to about 1e-9 on the
            smallest eigenvalues of a square random matrix; the fit's α, λ_max and norms
            agree with weightwatcher's to far below 1e-9 relative,
            ``tests/test_heavy_tail.py``). The last bits depend on the BLAS thread count
            (LAPACK's blocked reduction to tridiagonal form divides its work by
            threads); :func:`toposig.features.weights.weight_signatures` computes every
            ESD at one BLAS thread, so that its values do not. ``"svd"``: the squared
            singular values from ``scipy.linalg.svd(W, compute_uv=False)``, as
            weightwatcher computes them (the same values to the last bit on the same
            LAPACK).

    Returns:
        (min(out, in),) float64 eigenvalues λ = σ², ascending, in squared weight units.
    """
    w = _as_matrix(matrix)
    if method == "svd":
        sv = scipy.linalg.svd(w, compute_uv=False)
        return np.sort(sv * sv)
    if method == "gram":
        return np.maximum(np.linalg.eigvalsh(gram_matrix(w), UPLO="U"), 0.0)
    raise ValueError(f"unknown method {method!r} (expected one of {', '.join(ESD_METHODS)})")


def gram_matrix(w: np.ndarray) -> np.ndarray:
    """The min(out, in)-square Gram matrix of a float64 (out, in) matrix: ``WᵀW`` when
    out ≥ in, else ``WWᵀ``, both triangles filled. NumPy recognises a product of a matrix
    with its own transpose and calls BLAS ``dsyrk`` (half the work of a full product; the
    same bits as SciPy's ``blas.dsyrk``), and releases the GIL while it runs."""
    w = np.asarray(w, dtype=np.float64)
    return w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T


def spectral_norm(matrix: np.ndarray) -> float:
    """σ_max, the largest singular value (operator 2-norm), in weight units.

    weightwatcher's ``spectral_norm`` column is σ_max² (= its ``lambda_max``); its
    ``sv_max`` is this value.
    """
    return float(scipy.linalg.svdvals(_as_matrix(matrix)).max())


def frobenius_norm(matrix: np.ndarray) -> float:
    """‖W‖_F = sqrt(Σ w²), in weight units (weightwatcher's ``norm`` column is ‖W‖_F²)."""
    return float(np.linalg.norm(_as_matrix(matrix), ord="fro"))


def stable_rank(matrix: np.ndarray) -> float:
    """‖W‖_F² / σ_max², dimensionless, in [1, min(out, in)] (weightwatcher's
    ``stable_rank``); NaN for an all-zero matrix."""
    return _stable_rank(esd(matrix))


def _stable_rank(evals: np.ndarray) -> float:
    top = float(evals[-1])
    return float(np.sum(evals)) / top if top > 0 else math.nan


def powerlaw_alpha(values: np.ndarray, *, thresh: float = EVALS_THRESH) -> dict[str, float]:
    """The power-law fit of weightwatcher's default ``analyze()`` (module docstring).

    Args:
        values: a (out, in) weight matrix, whose :func:`esd` is fitted, or a 1-D array of
            its eigenvalues (any order; squared weight units).
        thresh: eigenvalues ``≤ thresh`` are left out of the fit (weightwatcher's
            ``EVALS_THRESH``).

    Returns:
        weightwatcher's names: ``alpha`` (the exponent of p(λ) ∝ λ^−α, dimensionless),
        ``xmin`` and ``xmax`` (the fitted range, squared weight units), ``D`` (the KS
        distance of the fit, in [0, 1]), ``sigma`` ((α − 1)/√k, α's standard error),
        ``num_pl_spikes`` (eigenvalues ≥ xmin), ``lambda_max`` (largest eigenvalue) and
        ``num_evals`` (all eigenvalues). The fit's values are NaN where weightwatcher's
        fit fails (fewer than two eigenvalues above ``thresh``).
    """
    v = np.asarray(values)
    if v.ndim == 2:
        evals = esd(v)
    elif v.ndim == 1 and v.size >= 1:
        evals = np.sort(v.astype(np.float64))
        if not np.all(np.isfinite(evals)):
            raise ValueError("eigenvalues hold NaN or infinite entries")
    else:
        raise ValueError(f"expected a matrix or a non-empty 1-D array, got shape {v.shape}")
    return _fit(evals, thresh)


def _fit(evals: np.ndarray, thresh: float = EVALS_THRESH) -> dict[str, float]:
    """:func:`powerlaw_alpha` of ascending float64 eigenvalues."""
    out = {"alpha": math.nan, "xmin": math.nan, "xmax": math.nan, "D": math.nan,
           "sigma": math.nan, "num_pl_spikes": math.nan,
           "lambda_max": float(evals[-1]), "num_evals": float(evals.size)}
    data = evals[evals > thresh]  # ascending already
    if data.size < 2:
        return out
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        fit = _candidates_small_n if data.size < SMALL_N_CUTOFF else _candidates_standard
        alphas, ds, sigmas = fit(data)
    # WWFit.__init__ takes the first least D, for the small-n candidates too
    i = int(np.argmin(ds))
    xmin = float(data[i])
    out.update({"alpha": float(alphas[i]), "xmin": xmin, "xmax": float(data[-1]),
                "D": float(ds[i]), "sigma": float(sigmas[i]),
                "num_pl_spikes": float(np.count_nonzero(evals >= xmin))})
    return out


def _candidates_standard(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``WWFit.fit_power_law_standard``: αᵢ, Dᵢ, σᵢ for every candidate xmin = dataᵢ."""
    n = data.size
    log_data = np.log(data, dtype=np.float64)
    # αᵢ = 1 + k / (Σ_{j≥i} ln xⱼ − k ln xᵢ): one np.sum per tail, as weightwatcher, so
    # the same pairwise summation and the same bits (a cumulative sum differs by ulps).
    tails = np.fromiter((np.sum(log_data[i:]) for i in range(n - 1)), np.float64, n - 1)
    k = (n - np.arange(n - 1)).astype(np.float64)
    alphas = 1 + k / (tails - k * log_data[:-1])
    ds = np.ones(n - 1)
    fitted = np.flatnonzero(alphas > 1)
    if fitted.size:
        ds[fitted] = _ks_distances(data, log_data, alphas, fitted)
    sigmas = (alphas - 1) / np.sqrt(n - np.arange(n - 1))
    return alphas, ds, sigmas


def _ks_distances(data: np.ndarray, log_data: np.ndarray, alphas: np.ndarray,
                  rows: np.ndarray) -> np.ndarray:
    """Dᵢ = max_{j≥i} |1 − (xⱼ/xᵢ)^(1−αᵢ) − (j−i)/(n−i)| for the candidates ``rows``
    (ascending), in blocks of rows of about ``_BLOCK_ELEMENTS`` entries.

    The power is taken as ``exp((1−αᵢ)(ln xⱼ − ln xᵢ))`` from the logarithms already at
    hand: 4x faster than ``**`` and equal to it to about 1e-14 absolute in Dᵢ.
    """
    n = data.size
    out = np.empty(rows.size)
    start = 0
    while start < rows.size:
        first = int(rows[start])
        width = n - first  # columns j ≥ first
        stop = min(rows.size, start + max(1, _BLOCK_ELEMENTS // width))
        r = rows[start:stop]
        k = (n - r).astype(np.float64)[:, None]
        offset = np.arange(first, n)[None, :] - r[:, None]  # j − i
        cdf = np.exp((1 - alphas[r])[:, None] * (log_data[None, first:] - log_data[r][:, None]))
        dev = np.abs(1 - cdf - offset / k)
        dev[offset < 0] = 0.0  # j < i: outside the tail (the j = i entry is 0 anyway)
        out[start:stop] = dev.max(axis=1)
        start = stop
    return out


def _candidates_small_n(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``WWFit.fit_powerlaw_smallN`` (lambda_prior = 0): αᵢ, Dᵢ, σᵢ. At most 19 points: a
    direct port of weightwatcher's loop. Its objective Dᵢ − 0.868/√k only decides which
    candidate it commits, and ``WWFit.__init__`` then overrides that with the least Dᵢ,
    so the objective is not computed here; its fallback (no tail of 8 points) is."""
    n_all = data.size
    log_data = np.log(data, dtype=np.float64)
    alphas = np.zeros(n_all - 1)
    ds = np.ones(n_all - 1)
    any_objective = False
    for i in range(n_all - 1):
        k_int = n_all - i
        if k_int < SMALL_N_MIN_TAIL:
            continue
        k = float(k_int)
        s = np.sum(log_data[i:]) - k * log_data[i]
        if s <= 1e-12:
            continue
        alpha = 1.0 + (k - 1.0) / s
        alphas[i] = alpha
        if alpha <= 1.0:
            continue
        f_fit = 1.0 - (data[i:] / data[i]) ** (1.0 - alpha)
        f_emp = np.arange(k_int, dtype=np.float64) / k
        ds[i] = float(np.max(np.abs(f_emp - f_fit)))
        any_objective = True  # its objective is finite here
    sigmas = (alphas - 1.0) / np.sqrt(n_all - np.arange(n_all - 1))
    if not any_objective:  # the fallback: the whole data as the tail (sigmas not updated)
        k = float(n_all)
        s = np.sum(log_data) - k * log_data[0]
        if s > 1e-12:
            alphas[0] = 1.0 + (k - 1.0) / s
            f_fit = 1.0 - (data / data[0]) ** (1.0 - alphas[0])
            ds[0] = float(np.max(np.abs(np.arange(n_all, dtype=np.float64) / k - f_fit)))
    return alphas, ds, sigmas


def heavy_tail_features(matrix: np.ndarray, *, min_evals: int = MIN_EVALS,
                        method: str = ESD_METHOD) -> dict[str, float]:
    """weightwatcher's heavy-tail metrics and the norms of one weight matrix.

    Args:
        matrix: (out, in) weights.
        min_evals: below this many eigenvalues (min(out, in)) weightwatcher's ``analyze()``
            skips the layer; the ``ww_*`` values are then NaN. 0 fits every matrix.
        method: how :func:`esd` computes the eigenvalues (default ``"gram"``; ``"svd"``:
            as weightwatcher, bit for bit).

    Returns:
        Floats (NaN where weightwatcher reports nothing or −1; λ and its range in squared
        weight units). Its column names in brackets:

        - ``ww_pl_alpha`` (``alpha``): power-law exponent of the ESD, dimensionless.
        - ``ww_pl_xmin``, ``ww_pl_xmax`` (``xmin``, ``xmax``): the fitted range of λ.
        - ``ww_pl_ks_distance`` (``D``): KS distance of the fit, in [0, 1].
        - ``ww_pl_sigma`` (``sigma``): (α − 1)/√(tail size).
        - ``ww_pl_num_spikes`` (``num_pl_spikes``): eigenvalues ≥ xmin.
        - ``ww_weighted_alpha`` (``alpha_weighted``): α · log10 λ_max.
        - ``ww_log_alpha_norm`` (``log_alpha_norm``): log10 Σ λ^α.
        - ``ww_lambda_max`` (``lambda_max``, also its ``spectral_norm``): σ_max².
        - ``ww_num_evals`` (``num_evals``): min(out, in).
        - ``spectral_norm`` (``sv_max``): σ_max, weight units (always computed).
        - ``frobenius_norm`` (sqrt of ``norm``): ‖W‖_F, weight units (always computed).
        - ``stable_rank`` (``stable_rank``): ‖W‖_F² / σ_max², dimensionless (always).
    """
    w = _as_matrix(matrix)
    return esd_features(esd(w, method=method), frobenius=float(np.linalg.norm(w, ord="fro")),
                        min_evals=min_evals)


def esd_features(evals: np.ndarray, *, frobenius: float | None = None,
                 min_evals: int = MIN_EVALS) -> dict[str, float]:
    """:func:`heavy_tail_features` from a matrix's ESD, computed elsewhere (on a GPU).

    Args:
        evals: (min(out, in),) eigenvalues λ = σ² in squared weight units (any order).
        frobenius: ‖W‖_F from the matrix itself; ``None``: sqrt(Σλ) (equal up to rounding).
        min_evals: as for :func:`heavy_tail_features`.

    Returns:
        The values of :func:`heavy_tail_features`.
    """
    evals = np.sort(np.asarray(evals, dtype=np.float64))
    if evals.ndim != 1 or evals.size < 1 or not np.all(np.isfinite(evals)):
        raise ValueError("expected a non-empty 1-D array of finite eigenvalues")
    lam_max = float(evals[-1])
    out = dict.fromkeys(HEAVY_TAIL_NAMES, math.nan)
    out.update({
        "ww_lambda_max": lam_max,
        "ww_num_evals": float(evals.size),
        "spectral_norm": math.sqrt(lam_max),
        "frobenius_norm": (math.sqrt(float(np.sum(evals))) if frobenius is None
                           else frobenius),
        "stable_rank": _stable_rank(evals),
    })
    if evals.size < min_evals:
        out["ww_lambda_max"] = out["ww_num_evals"] = math.nan
        return out
    fit = _fit(evals)
    alpha = fit["alpha"]
    out.update({
        "ww_pl_alpha": alpha,
        "ww_pl_xmin": fit["xmin"],
        "ww_pl_xmax": fit["xmax"],
        "ww_pl_ks_distance": fit["D"],
        "ww_pl_sigma": fit["sigma"],
        "ww_pl_num_spikes": fit["num_pl_spikes"],
    })
    if not math.isnan(alpha) and lam_max > 0:
        out["ww_weighted_alpha"] = alpha * math.log10(lam_max)
        with np.errstate(divide="ignore", over="ignore"):
            out["ww_log_alpha_norm"] = float(np.log10(np.sum(evals ** alpha)))
    return out
