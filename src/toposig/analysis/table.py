"""A results folder as one tidy table: a row per (model, step, family, layer or matrix).

:func:`results_table` turns the aggregate entries (``data/all_results.json``, one per
checkpoint with its families merged) into a :class:`pandas.DataFrame`:

- a family with per-layer features (the embedding's): one row per analysed layer (every
  layer with ``--layers all``, from the record's ``layer_features``; else the analysed
  one), its persistent-homology and spectral features;
- a family with per-matrix features (the weights'): one row per weight matrix
  (``matrix`` = its parameter name: neural persistence, row homology, norms) and one
  checkpoint-wide row (``matrix`` empty: the summaries over matrices, ``np_mean``,
  ``weight_h0_total``, ...);
- every other family the entry has (``landscape``, ``gradients``, ``interlayer``, and any
  registered since): one checkpoint-wide row each.

Which family a feature is (:func:`toposig.analysis.correlations.signature_of`) and which
families have per-layer or per-matrix features is the family registry's
(:mod:`toposig.families.registry`).

Every row carries the checkpoint's identity (``model``, ``model_path``, ``step``,
``revision``; ``seed`` and ``seed_group`` for a member of a seed ensemble, the model
it is a seed of, else missing), its family's ``settings_hash`` and the checkpoint's
quality measures
(``perplexity``, ``loss``, ``mlm_loss``; missing ones are NaN), so any feature can be
set against any measure with a filter. Feature columns are the union over families, NaN
where a row's family does not define them.

Pure: the entries come in, the table goes out. Reading a folder's entries
(:func:`toposig.run.results_folder.load_results`, ``toposig.load_results``) and writing
the table as CSV or Parquet (:func:`toposig.run.results_folder.export_table`) are
:mod:`toposig.run.results_folder`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from toposig.analysis.correlations import signature_of
from toposig.families import registry
from toposig.families.base import Scope
from toposig.records import TOP_FAMILY, Family, Record, records_from_json

ID_COLUMNS = ("model", "model_path", "step", "revision", "family", "layer", "matrix",
              "settings_hash", "seed", "seed_group")
QUALITY_COLUMNS = ("perplexity", "loss", "mlm_loss")


def _rows(rec: Record) -> list[dict]:
    ckpt = rec.checkpoint
    ident = {"model": ckpt.label, "model_path": ckpt.model, "step": ckpt.step,
             "revision": ckpt.revision, "seed": ckpt.seed, "seed_group": ckpt.seed_group}
    quality = {"perplexity": rec.perplexity, "loss": rec.loss, "mlm_loss": rec.mlm_loss}
    rows = []

    def row(family: Family, values: Mapping, layer=None, matrix=None) -> None:
        part = rec.parts.get(family)
        rows.append({**ident, "family": str(family), "layer": layer, "matrix": matrix,
                     "settings_hash": part.settings_hash if part else None, **quality,
                     **values})

    families = registry.in_order(rec.families)
    own: dict[str, dict] = {f: {} for f in families}
    for k, v in rec.features.items():
        if (f := signature_of(k)) in own:
            own[f][k] = v
    # a layer's features of the entry's other families (theirs, not this family's rows)
    others = {f: set(families) - {f} for f in families}
    for family in families:
        cls = registry.get(family)
        layered = any(Scope.LAYER in f.scopes for f in cls.all_features())
        by_layer = {layer: mine for layer, values in sorted(rec.layers.items())
                    if (mine := {k: v for k, v in values.items()
                                 if signature_of(k) not in others[family]})} \
            if layered else {}
        if by_layer:
            for layer, values in by_layer.items():
                row(family, values, layer)
            continue
        if cls.matrix_features:
            part = rec.parts.get(family)
            for m in part.matrices if part is not None and part.matrices else rec.matrices:
                row(family, m.features, matrix=m.name)
        row(family, own[family], rec.layer if family == TOP_FAMILY or layered else None)
    return rows


def results_table(entries: Sequence[Record | Mapping]) -> pd.DataFrame:
    """The tidy table of aggregate entries (see the module); rows in entry order, then
    family, layer and matrix as recorded. ``layer`` and ``step`` are nullable integers.

    Args:
        entries: :class:`toposig.records.Record` (or the JSON they are read from); the
            finished ones are tabled.

    Raises:
        RecordError: an entry is not a sound record.
    """
    records = records_from_json(entries, "entry")
    rows = [r for rec in records if rec.status == "ok" for r in _rows(rec)]
    columns = list(ID_COLUMNS) + list(QUALITY_COLUMNS)
    df = pd.DataFrame(rows, columns=None if rows else columns)
    features = sorted(c for c in df.columns if c not in columns)
    df = df.reindex(columns=columns + features)
    for c in ("step", "layer", "seed"):
        df[c] = df[c].astype("Int64")
    for c in ("model", "model_path", "revision", "family", "matrix", "settings_hash",
              "seed_group"):
        df[c] = df[c].astype("string")
    return df
