"""toposig: topological and spectral signatures of language-model checkpoints.

The public API (imported on first use, so ``import toposig`` stays light):

- :func:`measure`: the signature families of a model in memory (a notebook's, or one
  being trained), without saving it, leaving it as it was; a :class:`Measurement`;
- :func:`open` (``toposig.open(folder)``): a results folder as a
  :class:`~toposig.results.Results`: its ``.table()``, ``.statistics`` and every figure of
  its report, ``.plot.<figure>(ax=None, other=None)``, drawn into your own Axes and
  comparing runs;
- :func:`load_results`: a results folder as one tidy :class:`pandas.DataFrame`, a row
  per (model, step, family, layer or matrix) and a column per feature;
- the signature families: each is one class (:class:`SignatureFamily`: its settings are
  its fields, it declares its features and computes its record), listed by an open
  registry: :func:`list_families` gives them (``embedding``, ``weights``, ``landscape``,
  ``gradients``, ``interlayer``), :func:`register` adds one of your own, and
  :class:`RunSettings` are what every family of a run shares; a family is named by a
  plain string (:class:`Family`);
- the pure functions on arrays: :func:`vietoris_rips` (points -> persistence diagrams),
  :func:`diagram_features`, :func:`spectral_features`, :func:`neural_persistence`,
  :func:`weight_signatures`.

Measuring while a model trains (the ``transformers`` and Lightning callbacks, a monitor
for hand-written loops) is in :mod:`toposig.integrations`. The commands (``toposig
run|analyze|train|extract``, and the scripts in ``src/``) are in :mod:`toposig.cli`.
"""

from __future__ import annotations

import importlib

from toposig.progress import quiet_missing_widgets
from toposig.version import __version__ as __version__

quiet_missing_widgets()  # a notebook without ipywidgets: text bars, not a warning

_EXPORTS = {
    "measure": "in_memory",
    "Measurement": "in_memory",
    "load_results": "run.results_folder",
    "results_table": "analysis.table",
    "open": "results",
    "Results": "results",
    "Family": "records",
    "RunSettings": "config",
    "SignatureFamily": "families.base",
    "register": "families.registry",
    "unregister": "families.registry",
    "list_families": "families.registry",
    "vietoris_rips": "features.homology",
    "diagram_features": "features.homology",
    "spectral_features": "features.spectral",
    "neural_persistence": "features.weights",
    "weight_signatures": "features.weights",
}
__all__ = sorted(_EXPORTS)


_RENAMED = {"open": "open_results"}  # toposig.open: a name the module itself cannot use


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, _RENAMED.get(name, name))
    raise AttributeError(f"module 'toposig' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
