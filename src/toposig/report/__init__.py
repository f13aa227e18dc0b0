"""What a reader sees: the figures (``plots``, ``plots_analysis``, ``plots_probes``;
``figures.plot_all`` draws them all) and ``summary.md`` (``summary``, whose ``analyse``
writes statistics, summary and figures).
"""
