"""The named sets of features that the analysis and the live signal both use, in a module
that imports nothing, so that a training callback reads them without loading the whole
analysis (SciPy's statistics among it: about a second on 2 cores)."""

from __future__ import annotations

# The features whose phases are detected (toposig.analysis.phases). np_seed_mean and
# weight_h*_total_persistence are the weight study's own names (an import of its tables
# has no np_mean or weight_h*_total), used where the records have them.
PHASE_FEATURES = ("h1_total_persistence", "h0_total_persistence", "rankme", "np_mean",
                  "weight_h0_total", "weight_h1_total", "np_seed_mean",
                  "weight_h0_total_persistence", "weight_h1_total_persistence")

# Features each given their own topology-only and ridge predictors (prediction_by_feature).
PREDICTION_FEATURES = ("np_mean", "weight_h0_total", "h1_total_persistence",
                       "h0_total_persistence", "rankme", "hessian_eig_1", "hessian_trace",
                       "landscape_basin_depth", "landscape_n_minima",
                       "grad_h0_total_persistence", "grad_h1_total_persistence",
                       "grad_norm_mean", "grad_cosine_mean")
