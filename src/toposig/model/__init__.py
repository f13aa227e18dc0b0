"""Torch: where a model runs and in what precision (``placement``), the forward pass and
the model's own loss (``forward``), the embedding stage (``embedding``), weight matrices
(``matrices``, ``weight_stage``), curvature, gradients and the loss probes
(``curvature``, ``gradients``, ``loss_probes``) and training (``training``).
"""
