"""Measure the signatures while a model trains, where researchers train.

- :class:`TopologyCallback`: a ``transformers`` ``TrainerCallback``
  (:mod:`toposig.integrations.hf_trainer`);
- :class:`LightningTopologyCallback`: a PyTorch Lightning ``Callback``
  (:mod:`toposig.integrations.lightning_callback`; Lightning is an optional extra,
  imported only when this is used);
- :class:`TopologyMonitor`: the object both drive, callable from a hand-written loop:
  ``monitor(model, step, loss=...)`` measures when ``step`` is due
  (:mod:`toposig.live.monitor`).

Each writes the offline pipeline's records into a results folder, logs the features
through the trainer's own logging, refreshes a small figure and computes the
experimental stop-or-scale signal (:mod:`toposig.analysis.online`).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "TopologyCallback": "toposig.integrations.hf_trainer",
    "LightningTopologyCallback": "toposig.integrations.lightning_callback",
    "TopologyMonitor": "toposig.live.monitor",
    "Schedule": "toposig.live.monitor",
    "LiveResult": "toposig.live.monitor",
    "LiveRunExistsError": "toposig.live.monitor",
    "LabelInUseError": "toposig.live.monitor",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'toposig.integrations' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
