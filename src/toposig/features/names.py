"""The names of the features the array functions return, in a module that imports
nothing, so that the signature families declare their features (and ``--help`` lists
them) without loading NumPy's and SciPy's modules."""

from __future__ import annotations

DIAGRAM_STATISTICS: tuple[str, ...] = (
    "n_features",
    "total_persistence",
    "mean_persistence",
    "max_persistence",
    "std_persistence",
    "persistence_entropy",
    "n_significant",
)
"""The statistics of one persistence diagram
(:func:`toposig.features.homology.diagram_features`)."""

SPECTRAL_NAMES: tuple[str, ...] = (
    "rankme",
    "effective_rank_cov",
    "participation_ratio",
    "eigenspectrum_decay_alpha",
    "stable_rank",
)
"""The spectral baselines of a cloud (:func:`toposig.features.spectral.spectral_features`)."""

ZIGZAG_NAMES: tuple[str, ...] = (
    "zigzag_h0_n_bars",
    "zigzag_h0_n_through",
    "zigzag_h0_mean_span",
    "zigzag_h0_entropy",
    "zigzag_h0_mean_birth",
    "zigzag_h0_layer_similarity",
)
"""The H0 zigzag barcode's summaries (:meth:`toposig.features.zigzag.ZigzagSummary.features`)."""
