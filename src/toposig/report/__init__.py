"""What a reader sees: the figures (``plots``, ``plots_analysis``, ``plots_diagrams``,
``plots_probes``, ``plots_families``, ``plots_ensembles``, ``plots_controls``, with the
helpers they share in ``panels``; ``figures.plot_all`` draws them all) and ``summary.md``
(the ``summary`` package, one module a part). The report reads
no file: figures take the records, the statistics and an arrays accessor; stage 3 as a
whole (reading the folder, writing statistics, summary and figures) is
:func:`toposig.analyze.analyze`.
"""
