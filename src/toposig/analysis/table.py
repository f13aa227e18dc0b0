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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from toposig.analysis.stats import feature_family
from toposig.records import Family

ID_COLUMNS = ("model", "model_path", "step", "revision", "family", "layer", "matrix",
              "settings_hash")
QUALITY_COLUMNS = ("perplexity", "loss", "mlm_loss")
# Per-matrix fields that are not features (identity and bookkeeping).
MATRIX_FIELDS = ("name", "shape")
EXPORT_FORMATS = ("csv", "parquet")


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


def load_results(results_dir: str | Path = "results") -> pd.DataFrame:
    """The results folder written by ``run_experiments.py --out`` (or ``toposig run``) as
    one tidy table: see :func:`results_table`.

    Raises:
        ResultsMissingError: the folder has no ``data/all_results.json`` with a finished
            checkpoint.
    """
    from toposig.analysis.statistics import load_entries

    return results_table(load_entries(results_dir))


def export_problem(path: str | Path) -> str | None:
    """Why :func:`export_table` cannot write ``path``, or ``None``: a format other than
    :data:`EXPORT_FORMATS` (by suffix), a folder (not a link to one) where the file
    belongs, or Parquet without pyarrow or fastparquet. Checked before anything is
    written, so that a command refuses at once rather than after its other files."""
    import importlib.util

    path = Path(path)
    fmt = path.suffix.lstrip(".")
    if fmt not in EXPORT_FORMATS:
        return (f"cannot export to {path.name}: the formats are "
                f"{', '.join(EXPORT_FORMATS)}")
    if path.is_dir() and not path.is_symlink():
        return (f"{path}: is a folder where the exported table belongs; move it away "
                "(toposig does not replace folders)")
    if fmt == "parquet" and not any(importlib.util.find_spec(m)
                                    for m in ("pyarrow", "fastparquet")):
        return (f"{path}: writing Parquet needs pyarrow (pip install pyarrow); "
                "--export csv needs nothing more")
    return None


def export_table(table: pd.DataFrame, path: str | Path) -> Path:
    """Write the table as CSV or Parquet (by ``path``'s suffix), atomically.

    Raises:
        ValueError: :func:`export_problem` has an answer for ``path``; nothing is written.
    """
    from toposig.files.atomic import atomic_write_bytes

    path = Path(path)
    fmt = path.suffix.lstrip(".")
    problem = export_problem(path)
    if problem:
        raise ValueError(problem)
    if fmt == "csv":
        data = table.to_csv(index=False, lineterminator="\n").encode("utf-8")
    else:
        import io

        buf = io.BytesIO()
        table.to_parquet(buf, index=False)
        data = buf.getvalue()
    atomic_write_bytes(path, data)
    return path
