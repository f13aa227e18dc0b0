"""A results folder as one tidy table: a row per (model, step, family, layer or matrix).

:func:`results_table` turns the aggregate entries (``data/all_results.json``, one per
checkpoint with its families merged) into a :class:`pandas.DataFrame`:

- ``embedding``: one row per analysed layer (every layer with ``--layers all``, from the
  record's ``layer_features``; else the analysed one), its persistent-homology and
  spectral features;
- ``weights``: one row per weight matrix (``matrix`` = its parameter name: neural
  persistence, row homology, norms) and one checkpoint-wide row (``matrix`` empty: the
  summaries over matrices, ``np_mean``, ``weight_h0_total``, ...);
- ``landscape`` and ``gradients``: one checkpoint-wide row each.

Every row carries the checkpoint's identity (``model``, ``model_path``, ``step``,
``revision``), its family's ``settings_hash`` and the checkpoint's quality measures
(``perplexity``, ``loss``, ``mlm_loss``; missing ones are NaN), so any feature can be
set against any measure with a filter. Feature columns are the union over families, NaN
where a row's family does not define them.

Pure: the entries come in, the table goes out. Reading a folder's entries
(:func:`toposig.run.results_folder.load_results`, ``toposig.load_results``) and writing
the table as CSV or Parquet (:func:`toposig.run.results_folder.export_table`) are
:mod:`toposig.run.results_folder`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from toposig.analysis.stats import feature_family
from toposig.records import Family

ID_COLUMNS = ("model", "model_path", "step", "revision", "family", "layer", "matrix",
              "settings_hash")
QUALITY_COLUMNS = ("perplexity", "loss", "mlm_loss")
# Per-matrix fields that are not features (identity and bookkeeping).
MATRIX_FIELDS = ("name", "shape")


def signature_family(name: str) -> Family:
    """The signature family a checkpoint-level feature comes from (by its name)."""
    return feature_family(name).signature


def _rows(entry: dict) -> list[dict]:
    ident = {"model": entry.get("model_label"), "model_path": entry.get("model"),
             "step": entry.get("step"), "revision": entry.get("revision")}
    quality = {k: entry.get(k) for k in QUALITY_COLUMNS}
    features = entry.get("features") or {}
    families = entry.get("families") or [Family.EMBEDDING]
    rows = []

    def row(family: Family, values: dict, layer=None, matrix=None, settings_hash=None) -> None:
        rows.append({**ident, "family": str(family), "layer": layer, "matrix": matrix,
                     "settings_hash": settings_hash, **quality, **values})

    own = {f: {k: v for k, v in features.items() if signature_family(k) == f}
           for f in families}
    if Family.EMBEDDING in families:
        layers = entry.get("layer_features") or {}
        if layers:
            for layer, values in sorted(layers.items(), key=lambda kv: int(kv[0])):
                row(Family.EMBEDDING, values, int(layer),
                    settings_hash=entry.get("settings_hash"))
        else:
            row(Family.EMBEDDING, own[Family.EMBEDDING], entry.get("layer"),
                settings_hash=entry.get("settings_hash"))
    for family in (Family.WEIGHTS, Family.LANDSCAPE, Family.GRADIENTS):
        if family not in families:
            continue
        details = entry.get(family) or {}
        h = details.get("settings_hash")
        if family == Family.WEIGHTS:
            for m in details.get("matrices") or []:
                row(Family.WEIGHTS, {k: v for k, v in m.items() if k not in MATRIX_FIELDS},
                    matrix=m.get("name"), settings_hash=h)
        row(family, own[family], settings_hash=h)
    return rows


def results_table(entries: Sequence[dict]) -> pd.DataFrame:
    """The tidy table of aggregate entries (see the module); rows in entry order, then
    family, layer and matrix as recorded. ``layer`` and ``step`` are nullable integers."""
    rows = [r for e in entries if e.get("status", "ok") == "ok" for r in _rows(e)]
    columns = list(ID_COLUMNS) + list(QUALITY_COLUMNS)
    df = pd.DataFrame(rows, columns=None if rows else columns)
    features = sorted(c for c in df.columns if c not in columns)
    df = df.reindex(columns=columns + features)
    for c in ("step", "layer"):
        df[c] = df[c].astype("Int64")
    for c in ("model", "model_path", "revision", "family", "matrix", "settings_hash"):
        df[c] = df[c].astype("string")
    return df
