"""The package's version (``toposig --version``, ``last_run.packages``); it equals
``pyproject.toml``'s (a test checks)."""

__version__ = "0.1.0"
