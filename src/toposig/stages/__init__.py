"""The signature families as stages: one :class:`~toposig.stages.base.Stage` per family
(its settings, hash, needs, run and summary) held in one registry
(:data:`toposig.stages.registry.STAGES`), and the one function that runs them on a
loaded checkpoint (:func:`toposig.stages.runner.run_stages`)."""
