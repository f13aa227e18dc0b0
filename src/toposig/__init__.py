"""toposig: topological and spectral signatures of language-model checkpoints.

Pure feature code lives in ``homology``, ``spectral`` and ``stats``; models, files and
devices are handled at the edges (``checkpoints``, ``forward``, ``store``). The stage
scripts in ``src/`` are thin command-line faces of ``pipeline`` and ``analysis``.
"""

__version__ = "0.1.0"
