"""Every feature the package computes: its name, what it measures and its unit.

:data:`FEATURES` maps each name a record's ``features`` (or ``layer_features``) can hold
to a :class:`FeatureInfo`: its :class:`~toposig.records.FeatureFamily` (the unit of the
analysis's controls and tables), the signature family whose records carry it, a one-line
description and its unit. Names with a number in them (``hessian_eig_<k>`` for the top
``k`` Hessian eigenvalues, ``np_seed_layer_<i>`` from the seed tables) are matched by
:data:`FEATURE_PATTERNS`. :func:`feature_info` looks a name up; the analysis classifies a
feature with it (:func:`toposig.analysis.correlations.feature_family`).

Names from elsewhere (a table imported with ``toposig import``) are not in the registry;
they are classified by the naming convention the package's own names follow
(:func:`family_by_convention`: ``h<q>_*`` embedding topology, ``np_*`` and
``weight_h<q>_*`` weight topology, other ``weight_*`` weight statistics, ``hessian_*``,
``landscape_*``, ``grad_h<q>_*``, ``grad_*``), and ``tests/test_feature_registry.py``
checks that the registry and the convention agree on every registered name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toposig.features.homology import FEATURE_NAMES as DIAGRAM_STATISTICS
from toposig.features.spectral import SPECTRAL_NAMES
from toposig.features.zigzag import FEATURE_WORDS as ZIGZAG_WORDS
from toposig.records import Family, FeatureFamily

__all__ = ["FeatureInfo", "FEATURES", "FEATURE_PATTERNS", "WEIGHT_STATISTICS",
           "feature_info", "family_by_convention", "HOMOLOGY_DIMENSIONS", "SCALED_STATISTICS"]

HOMOLOGY_DIMENSIONS = (0, 1, 2)  # --maxdim is at most 2
SCALED_STATISTICS = ("total_persistence", "mean_persistence", "max_persistence",
                     "std_persistence")  # the statistics that change with scale
WEIGHT_STATISTICS: tuple[str, ...] = ("weight_l2_norm", "weight_std", "weight_max_abs",
                                      "weight_mean_abs", "weight_spectral_norm_mean",
                                      "weight_stable_rank_mean", "weight_alpha_mean",
                                      "weight_alpha_weighted_mean")


@dataclass(frozen=True)
class FeatureInfo:
    """One feature.

    Attributes:
        name: as records key it.
        family: what it measures (:class:`~toposig.records.FeatureFamily`).
        description: one line.
        unit: what its values count or measure in.
    """

    name: str
    family: FeatureFamily
    description: str
    unit: str

    @property
    def signature(self) -> Family:
        """The signature family whose records carry it."""
        return self.family.signature


_DIAGRAM_WORDS = {
    "n_features": ("number of finite bars", "count"),
    "total_persistence": ("sum of the finite bars' lifetimes", "distance"),
    "mean_persistence": ("mean finite lifetime", "distance"),
    "max_persistence": ("longest finite lifetime", "distance"),
    "std_persistence": ("standard deviation of the finite lifetimes", "distance"),
    "persistence_entropy": ("entropy of the normalised lifetimes", "nats"),
    "n_significant": ("bars strictly longer than the median lifetime", "count"),
}
_SPECTRAL_WORDS = {
    "rankme": ("RankMe: exp of the entropy of the normalised singular values", "dims"),
    "effective_rank_cov": ("exp of the entropy of the covariance eigenvalues", "dims"),
    "participation_ratio": ("(Σλ)² / Σλ² of the covariance eigenvalues", "dims"),
    "eigenspectrum_decay_alpha": ("power-law decay of the top covariance eigenvalues",
                                  "-slope of log λ vs log i"),
    "stable_rank": ("‖X‖_F² / ‖X‖₂² of the centred hidden states", "dims"),
}


def _entries() -> list[FeatureInfo]:
    F = FeatureFamily
    out = []
    for q in HOMOLOGY_DIMENSIONS:
        for stat in DIAGRAM_STATISTICS:
            what, unit = _DIAGRAM_WORDS[stat]
            out.append(FeatureInfo(f"h{q}_{stat}", F.EMBEDDING_TOPOLOGICAL,
                                   f"hidden states' Vietoris–Rips H{q}: {what}", unit))
            out.append(FeatureInfo(f"grad_h{q}_{stat}", F.GRADIENT_TOPOLOGICAL,
                                   f"per-example gradients' Vietoris–Rips H{q}: {what}",
                                   "gradient distance" if unit == "distance" else unit))
        for stat in SCALED_STATISTICS:
            what, _ = _DIAGRAM_WORDS[stat]
            out.append(FeatureInfo(f"h{q}_{stat}_scaled", F.EMBEDDING_TOPOLOGICAL,
                                   f"hidden states' H{q}: {what}, of the cloud divided by "
                                   "its median pairwise distance", "median distances"))
        out += [
            FeatureInfo(f"weight_h{q}_total", F.WEIGHT_TOPOLOGICAL,
                        f"Σ over matrices of the weight rows' H{q} total persistence",
                        "weight distance"),
            FeatureInfo(f"weight_h{q}_count", F.WEIGHT_TOPOLOGICAL,
                        f"Σ over matrices of the weight rows' H{q} bars", "count"),
            FeatureInfo(f"weight_h{q}_entropy_mean", F.WEIGHT_TOPOLOGICAL,
                        f"mean over matrices of the weight rows' H{q} persistence entropy",
                        "nats")]
    out += [FeatureInfo(name, F.EMBEDDING_SPECTRAL, *_SPECTRAL_WORDS[name])
            for name in SPECTRAL_NAMES]
    out += [
        FeatureInfo("mean_norm", F.OTHER, "mean L2 norm of the pooled hidden states",
                    "hidden-state units"),
        FeatureInfo("median_pairwise_distance", F.OTHER,
                    "median distance between the pooled hidden states", "distance"),
        FeatureInfo("pca_components", F.OTHER, "principal components kept before homology",
                    "count"),
        FeatureInfo("pca_explained_variance", F.OTHER,
                    "share of the variance the kept components explain", "fraction"),
    ]
    for stat in ("mean", "std", "min", "max"):
        out.append(FeatureInfo(f"np_{stat}", F.WEIGHT_TOPOLOGICAL,
                               f"{stat} over matrices of the normalised neural persistence "
                               "(Rieck et al. 2019)", "0-1"))
    for stat in ("mean", "std"):
        out.append(FeatureInfo(f"np_seed_{stat}", F.WEIGHT_TOPOLOGICAL,
                               f"{stat} over matrices of the seed paper's neural persistence",
                               "NP / (max · (n − 1))"))
    weight_words = {
        "weight_l2_norm": ("Frobenius norm of all analysed weights", "weight units"),
        "weight_std": ("standard deviation of all analysed weights", "weight units"),
        "weight_max_abs": ("largest absolute weight", "weight units"),
        "weight_mean_abs": ("mean absolute weight", "weight units"),
        "weight_spectral_norm_mean": ("mean largest singular value (weightwatcher)",
                                      "weight units"),
        "weight_stable_rank_mean": ("mean stable rank (weightwatcher)", "dims"),
        "weight_alpha_mean": ("mean power-law exponent of the eigenvalue tails "
                              "(weightwatcher alpha)", "exponent"),
        "weight_alpha_weighted_mean": ("mean alpha · log10 λ_max (weightwatcher)",
                                       "exponent · log10 λ"),
    }
    out += [FeatureInfo(name, F.WEIGHT_STATISTICS, *weight_words[name])
            for name in WEIGHT_STATISTICS]
    out.append(FeatureInfo("hessian_trace", F.CURVATURE,
                           "trace of the loss Hessian (Hutchinson)", "nats / weight unit²"))
    landscape = {
        "n_minima": ("minima of the loss on the grid", "count"),
        "n_saddles": ("finite bars of the merge tree", "count"),
        "total_persistence": ("sum of the merge tree's lifetimes", "nats"),
        "mean_persistence": ("mean merge-tree lifetime", "nats"),
        "max_persistence": ("longest merge-tree lifetime", "nats"),
        "basin_depth": ("depth of the checkpoint's basin", "nats"),
        "center_height": ("loss at the checkpoint above its basin's minimum", "nats"),
        "loss_range": ("highest minus lowest loss on the grid", "nats"),
    }
    out += [FeatureInfo(f"landscape_{k}", F.LANDSCAPE_TOPOLOGICAL,
                        f"loss surface around the checkpoint: {what}", unit)
            for k, (what, unit) in landscape.items()]
    for stat in ("mean", "std", "median", "max"):
        out.append(FeatureInfo(f"grad_norm_{stat}", F.GRADIENT_STATISTICS,
                               f"{stat} per-example gradient norm", "nats / weight unit"))
    out.append(FeatureInfo("grad_cosine_mean", F.GRADIENT_STATISTICS,
                           "mean cosine between two examples' projected gradients", "cosine"))
    out += [FeatureInfo(n, F.INTERLAYER_TOPOLOGICAL, *w) for n, w in ZIGZAG_WORDS.items()]
    return out


FEATURES: dict[str, FeatureInfo] = {f.name: f for f in _entries()}

FEATURE_PATTERNS: tuple[tuple[re.Pattern[str], FeatureInfo], ...] = (
    (re.compile(r"hessian_eig_([1-9][0-9]*)"),
     FeatureInfo("hessian_eig_<k>", FeatureFamily.CURVATURE,
                 "k-th largest eigenvalue of the loss Hessian (Lanczos)",
                 "nats / weight unit²")),
    (re.compile(r"np_seed_layer_([0-9]+)"),
     FeatureInfo("np_seed_layer_<i>", FeatureFamily.WEIGHT_TOPOLOGICAL,
                 "the seed paper's neural persistence of layer i (imported tables)",
                 "NP / (max · (n − 1))")),
)


def feature_info(name: str) -> FeatureInfo | None:
    """The registered feature ``name`` (a pattern's entry, renamed ``name``), or ``None``
    for a name the package does not compute."""
    if name in FEATURES:
        return FEATURES[name]
    for pattern, info in FEATURE_PATTERNS:
        if pattern.fullmatch(name):
            return FeatureInfo(name, info.family, info.description, info.unit)
    return None


def family_by_convention(name: str) -> FeatureFamily:
    """The family the naming convention gives ``name`` (for names not in the registry,
    such as an imported table's): ``h<q>_*`` embedding topology, the spectral names,
    ``np_*`` and ``weight_h<q>_*`` weight topology (neural persistence, weight-row
    homology), other ``weight_*`` weight statistics, ``hessian_*`` curvature,
    ``landscape_*`` landscape topology, ``grad_h<q>_*`` gradient topology, other
    ``grad_*`` gradient statistics, else other."""
    F = FeatureFamily
    if name.startswith(("h0_", "h1_", "h2_")):
        return F.EMBEDDING_TOPOLOGICAL
    if name in SPECTRAL_NAMES:
        return F.EMBEDDING_SPECTRAL
    if name.startswith(("np_", "weight_h0_", "weight_h1_", "weight_h2_")):
        return F.WEIGHT_TOPOLOGICAL
    if name.startswith("weight_"):
        return F.WEIGHT_STATISTICS
    if name.startswith("hessian_"):
        return F.CURVATURE
    if name.startswith("landscape_"):
        return F.LANDSCAPE_TOPOLOGICAL
    if name.startswith(("grad_h0_", "grad_h1_", "grad_h2_")):
        return F.GRADIENT_TOPOLOGICAL
    if name.startswith("grad_"):
        return F.GRADIENT_STATISTICS
    if name.startswith("zigzag_"):  # the interlayer family's
        return F.INTERLAYER_TOPOLOGICAL
    return F.OTHER
