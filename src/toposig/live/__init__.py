"""Measuring a model while it trains: the monitor every integration drives
(:mod:`~toposig.live.monitor`), composed of one part per job: when to measure
(:mod:`~toposig.live.schedule`), the study guard (:mod:`~toposig.live.guard`), the
measurement (:mod:`~toposig.live.measurement`, with the executor that lets the offline
pipeline's driver write its records, :mod:`~toposig.live.executor`), the stop-or-scale
signal (:mod:`~toposig.live.signal`) and the figure (:mod:`~toposig.live.figure`)."""
