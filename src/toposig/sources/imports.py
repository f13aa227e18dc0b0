"""Other people's per-checkpoint measurement tables, read as typed rows.

Three formats (:data:`FORMATS`; :func:`detect_format` tells them apart):

- ``seed-a``: the embedding study's ``pythia-*_results.json``: a JSON list, one object
  per checkpoint with ``model``, ``checkpoint``, ``step``, ``perplexity`` and features.
- ``seed-b``: the weight study's ``tda_features.json``: a JSON object, model -> list of
  objects with ``step``, ``loss`` and features.
- ``table``: a CSV (``.csv``) or Parquet (``.parquet``/``.pq``) file, one row per model ×
  step. Columns: ``model`` (text) and ``step`` (a whole number >= 0) are required;
  ``revision`` (text) and ``num_parameters`` are optional identity; the quality columns
  ``loss`` (nats), ``perplexity`` and ``mlm_loss`` are qualities, not features; every
  other column is a feature and must be numeric (empty cells are missing values).

Values are carried exactly as the file has them (a JSON number, or the float the CSV
text parses to). Seed columns whose meaning is one of toposig's features take its name,
and the row says so (``columns``: imported name -> the file's column); the rest keep
their names. Every problem is found before anything is written, and the error names the
file and the row.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from toposig.files.names import UnsafeNameError, check_label, quoted
from toposig.records import family_parts

FORMATS: tuple[str, ...] = ("seed-a", "seed-b", "table")
QUALITY_COLUMNS: tuple[str, ...] = ("loss", "perplexity", "mlm_loss")
# Fields of a record that a column cannot be imported under (as a quality or feature
# they would overwrite the record's identity and bookkeeping).
RESERVED_FIELDS = frozenset({
    "schema_version", "status", "model", "model_label", "step", "source", "location",
    "revision", "checkpoint_fingerprint", "settings_hash", "families", "num_parameters",
    "features", "imported", "quality", "timings_s", "loss_key", "mean_nll",
    # fields a record's definition gives a meaning (toposig.records.entry_problem)
    "family", "error", "arrays_file", "layer", "layer_names", "layer_features",
    "matrices", "model_type", "checkpoint_loss_key", "settings"})


def reserved_fields() -> frozenset[str]:
    """:data:`RESERVED_FIELDS` and the registered families' names (an entry's parts)."""
    return RESERVED_FIELDS | family_parts()

# seed A: the file's column -> toposig's name for the same quantity (docs/measures.md: the
# seed's "effective rank" is the entropy rank of the covariance eigenvalues)
SEED_A_RENAMES = {"effective_rank": "effective_rank_cov"}
SEED_A_METADATA = ("embedding_dim", "n_embeddings", "pca_dim", "n_points")
SEED_A_TIMINGS = ("total_time_s", "ph_compute_time_s")
# seed B: neural persistence is the seed paper's variant (toposig's np_seed_*); its
# h0_/h1_ features are weight-row homology, which toposig names weight_*
SEED_B_METADATA = ("n_analyzed_layers", "config_name")


class ImportFormatError(ValueError):
    """A measurement table that cannot be imported; the message names the file and row."""


@dataclass(frozen=True)
class RowSource:
    """Where a row came from: the file (as given), its SHA-256 and the row (0-based
    position in the file's list, or the table's data row, or ``model[i]`` for seed B)."""

    file: str
    sha256: str
    row: str
    format: str


@dataclass(frozen=True)
class ImportedRow:
    """One model × step of an imported table.

    Attributes:
        model: the model as the file names it (``EleutherAI/pythia-70m``).
        label: the model's label in the results folder (a plain file name).
        step: the training step.
        quality: ``loss`` (nats), ``perplexity``, ``mlm_loss``, those the file has.
        features: imported name -> value (floats; ``None`` where missing).
        columns: imported feature name -> the file's column, where they differ.
        revision, num_parameters: identity the file gives, else ``None``.
        metadata, timings_s: the file's other per-row fields (sizes, seconds).
    """

    model: str
    label: str
    step: int
    quality: dict[str, float]
    features: dict[str, float | None]
    provenance: RowSource
    columns: dict[str, str] = field(default_factory=dict)
    revision: str | None = None
    num_parameters: int | None = None
    metadata: dict[str, object] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fail(path: Path, where: str, why: str) -> ImportFormatError:
    return ImportFormatError(f"{path}{', ' + where if where else ''}: {why}")


MAX_WHOLE = 2**53 - 1
"""The largest step or parameter count imported: the largest integer that every JSON
reader (a float64) carries exactly."""


def _number(value: object, path: Path, where: str, column: str,
            allow_missing: bool = True) -> float | None:
    """A finite float from a JSON/CSV value; ``None`` for missing (null, empty, NaN)."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if allow_missing:
            return None
        raise _fail(path, where, f"{quoted(column)} is missing")
    if isinstance(value, bool):
        raise _fail(path, where, f"{quoted(column)} is {quoted(value)}, not a number")
    if isinstance(value, (int, float)):
        try:
            v = float(value)
        except OverflowError:  # an integer of hundreds of digits
            raise _fail(path, where, f"{quoted(column)} is an integer of "
                                     f"{len(str(abs(value)))} digits, beyond any "
                                     "floating-point number") from None
    elif isinstance(value, str):
        try:
            v = float(value)
        except ValueError:
            raise _fail(path, where, f"{quoted(column)} is {quoted(value)}, not a number") from None
    else:
        raise _fail(path, where, f"{quoted(column)} is {type(value).__name__}, not a number")
    if math.isnan(v):
        if allow_missing:
            return None
        raise _fail(path, where, f"{quoted(column)} is missing (NaN)")
    if math.isinf(v):
        raise _fail(path, where, f"{quoted(column)} is {quoted(value)}, not a finite number")
    return v


def _whole(value: object, path: Path, where: str, column: str,
           allow_missing: bool = False) -> int | None:
    """A whole number from 0 to :data:`MAX_WHOLE`, exactly as written (an integer, or a
    float or text that is one: ``10``, ``10.0``, ``"1e3"``); ``None`` for missing when
    ``allow_missing``."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        text = value.strip().lstrip("0") or "0"
        exact: int | None = int(text) if len(text) <= 16 else MAX_WHOLE + 1
    elif isinstance(value, int) and not isinstance(value, bool):
        exact = value
    else:
        v = _number(value, path, where, column, allow_missing=allow_missing)
        if v is None:
            return None
        exact = int(v) if v.is_integer() else None
        if exact is not None and abs(v) > MAX_WHOLE:
            exact = MAX_WHOLE + 1  # a float this large is no longer exact
    if exact is None or exact < 0:
        raise _fail(path, where, f"{quoted(column)} is {quoted(value)}, not a whole number "
                                 ">= 0")
    if exact > MAX_WHOLE:
        raise _fail(path, where, f"{quoted(column)} is {quoted(value)}, beyond 2^53 - 1 "
                                 f"= {MAX_WHOLE:,}, the largest whole number JSON carries "
                                 "exactly")
    return exact


def _step(value: object, path: Path, where: str) -> int:
    step = _whole(value, path, where, "step")
    assert step is not None  # not allowed missing
    return step


def model_label(model: str, path: Path, where: str) -> str:
    """The label of a model in the results folder: the last part of its name
    (``EleutherAI/pythia-70m`` -> ``pythia-70m``), which must be a plain file name."""
    if not isinstance(model, str) or not model.strip():
        raise _fail(path, where, f"'model' is {quoted(model)}, not a name")
    label = model.strip().rstrip("/").rsplit("/", 1)[-1]
    try:
        check_label(label, "model label")
    except UnsafeNameError as exc:
        raise _fail(path, where, str(exc)) from None
    return label


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise _fail(path, "", "not readable JSON: nested too deep") from None
    except (UnicodeDecodeError, ValueError) as exc:  # ValueError: an integer too long
        raise _fail(path, "", f"not valid JSON ({exc})") from None


def detect_format(path: Path) -> str:
    """``table`` for ``.csv``/``.parquet``/``.pq``; for JSON, ``seed-a`` (a list of
    objects with ``perplexity``) or ``seed-b`` (an object of lists of objects with
    ``step``).

    Raises:
        ImportFormatError: none of them.
    """
    if path.suffix.lower() in (".csv", ".parquet", ".pq"):
        return "table"
    data = _load_json(path)
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data) \
            and "perplexity" in data[0]:
        return "seed-a"
    if isinstance(data, dict) and data and all(
            isinstance(v, list) and v and isinstance(v[0], dict) and "step" in v[0]
            for v in data.values()):
        return "seed-b"
    raise _fail(path, "", "not a format toposig imports: seed-a (a JSON list of "
                          "checkpoint objects with 'perplexity'), seed-b (a JSON object of "
                          "model -> list of objects with 'step'), or a table (.csv, "
                          ".parquet); pass --format to say which")


def _features(obj: Mapping, skip: Iterable[str], renames: Mapping[str, str], path: Path,
              where: str) -> tuple[dict[str, float | None], dict[str, str]]:
    features: dict[str, float | None] = {}
    columns: dict[str, str] = {}
    skip = set(skip)
    for key, value in obj.items():
        if key in skip:
            continue
        name = renames(key) if callable(renames) else renames.get(key, key)
        if name in features:
            raise _fail(path, where, f"columns {quoted(columns.get(name, name))} and {quoted(key)} "
                                     f"both become feature {quoted(name)}")
        features[name] = _number(value, path, where, key)
        if name != key:
            columns[name] = key
    return features, columns


def read_seed_a(path: Path, sha256: str) -> list[ImportedRow]:
    data = _load_json(path)
    if not isinstance(data, list) or not data:
        raise _fail(path, "", "seed-a: expected a non-empty JSON list of checkpoint objects")
    rows = []
    for i, obj in enumerate(data):
        where = f"row {i}"
        if not isinstance(obj, dict):
            raise _fail(path, where, "not a JSON object")
        for key in ("model", "step", "perplexity"):
            if key not in obj:
                raise _fail(path, where, f"no {quoted(key)}")
        label = model_label(obj["model"], path, where)
        step = _step(obj["step"], path, where)
        ppl = _number(obj["perplexity"], path, where, "perplexity", allow_missing=False)
        skip = ("model", "checkpoint", "step", "perplexity", *SEED_A_METADATA, *SEED_A_TIMINGS)
        features, columns = _features(obj, skip, SEED_A_RENAMES, path, where)
        rows.append(ImportedRow(
            model=obj["model"], label=label, step=step, quality={"perplexity": ppl},
            features=features, columns=columns,
            provenance=RowSource(str(path), sha256, str(i), "seed-a"),
            revision=str(obj["checkpoint"]) if obj.get("checkpoint") is not None else None,
            metadata={k: obj[k] for k in SEED_A_METADATA if k in obj},
            timings_s={k: obj[k] for k in SEED_A_TIMINGS if isinstance(obj.get(k), (int, float))}))
    return rows


_LAYER_NP = re.compile(r"layer_(\d+)_np")


def _seed_b_name(key: str) -> str:
    if key.startswith("neural_persistence_"):
        return "np_seed_" + key.removeprefix("neural_persistence_")
    if m := _LAYER_NP.fullmatch(key):
        return f"np_seed_layer_{m.group(1)}"
    if key.startswith(("h0_", "h1_", "h2_")):
        return "weight_" + key
    return key


def read_seed_b(path: Path, sha256: str) -> list[ImportedRow]:
    data = _load_json(path)
    if not isinstance(data, dict) or not data:
        raise _fail(path, "", "seed-b: expected a non-empty JSON object, model -> rows")
    rows = []
    for model, series in data.items():
        if not isinstance(series, list) or not series:
            raise _fail(path, f"model {quoted(model)}", "expected a non-empty list of rows")
        label = model_label(model, path, f"model {quoted(model)}")
        for i, obj in enumerate(series):
            where = f"{model}[{i}]"
            if not isinstance(obj, dict):
                raise _fail(path, where, "not a JSON object")
            for key in ("step", "loss"):
                if key not in obj:
                    raise _fail(path, where, f"no {quoted(key)}")
            step = _step(obj["step"], path, where)
            loss = _number(obj["loss"], path, where, "loss", allow_missing=False)
            features, columns = _features(obj, ("step", "loss", *SEED_B_METADATA),
                                          _seed_b_name, path, where)
            rows.append(ImportedRow(
                model=model, label=label, step=step, quality={"loss": loss},
                features=features, columns=columns,
                provenance=RowSource(str(path), sha256, where, "seed-b"),
                metadata={k: obj[k] for k in SEED_B_METADATA if k in obj}))
    return rows


def _ragged_row(path: Path) -> str | None:
    """The first row of a CSV file whose cells do not match its header in number, said
    with its line number, or ``None`` (blank lines are no rows)."""
    import csv

    limit = csv.field_size_limit(2**31 - 1)  # a cell of any size (pandas reads them too)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            for row in reader:
                if row and len(row) != len(header):
                    return (f"row {reader.line_num} has {len(row)} cells, the header "
                            f"{len(header)}")
    finally:
        csv.field_size_limit(limit)
    return None


def read_table(path: Path, sha256: str, progress: bool = False) -> list[ImportedRow]:
    """The rows of a CSV or Parquet table (``progress``: a bar over its rows, on a
    terminal)."""
    import pandas as pd

    from toposig.progress import tqdm

    try:
        if path.suffix.lower() == ".csv":
            ragged = _ragged_row(path)  # pandas would shift every column, or pad the row
            if ragged:
                raise _fail(path, "", ragged)
            df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[],
                             index_col=False)
        else:
            df = pd.read_parquet(path)
    except ImportFormatError:
        raise
    except Exception as exc:  # pandas raises many kinds on a damaged file
        raise _fail(path, "", f"cannot be read as a table ({type(exc).__name__}: {exc})") \
            from None
    if df.empty:
        raise _fail(path, "", "the table has no rows")
    columns = [str(c) for c in df.columns]
    if len(set(columns)) != len(columns):
        raise _fail(path, "", "the table has duplicate column names")
    for key in ("model", "step"):
        if key not in columns:
            raise _fail(path, "", f"no {quoted(key)} column (the columns are "
                                  f"{', '.join(quoted(c) for c in columns)})")
    quality_cols = [c for c in QUALITY_COLUMNS if c in columns]
    identity = ("model", "step", "revision", "num_parameters")
    rows = []
    records = df.to_dict("records")
    for i, rec in enumerate(tqdm(records, desc=f"reading {path.name}", unit="row",
                                 disable=None if progress else True, leave=False)):
        where = f"row {i + 2 if path.suffix.lower() == '.csv' else i}"  # CSV: line number
        model = rec["model"]
        if model is None or (isinstance(model, float) and math.isnan(model)):
            raise _fail(path, where, "'model' is missing")
        label = model_label(model if isinstance(model, str) else str(model), path, where)
        step = _step(rec["step"], path, where)
        quality = {c: v for c in quality_cols
                   if (v := _number(rec[c], path, where, c)) is not None}
        n_params = _whole(rec.get("num_parameters"), path, where, "num_parameters",
                          allow_missing=True)
        features, _ = _features({k: v for k, v in rec.items() if k not in identity},
                                quality_cols, {}, path, where)
        revision = rec.get("revision")
        rows.append(ImportedRow(
            model=str(model), label=label, step=step, quality=quality, features=features,
            provenance=RowSource(str(path), sha256, where.removeprefix("row "), "table"),
            revision=None if revision in (None, "") else str(revision),
            num_parameters=n_params))
    return rows


READERS = {"seed-a": read_seed_a, "seed-b": read_seed_b, "table": read_table}


def with_target(rows: list[ImportedRow], column: str) -> list[ImportedRow]:
    """The rows with the feature (or quality) ``column`` as their quality measure: a
    feature column becomes a quality, not a feature.

    Raises:
        ImportFormatError: a row without a value for it (naming the file and row).
    """
    out = []
    for r in rows:
        # the file's column name or toposig's name for it (seed A's effective_rank is
        # effective_rank_cov)
        target = next((k for k, v in r.columns.items() if v == column), column)
        value = r.quality.get(target, r.features.get(target))
        if value is None:
            raise ImportFormatError(f"{r.provenance.file}, row {r.provenance.row}: no value "
                                    f"of the target {quoted(column)}")
        features = {k: v for k, v in r.features.items() if k != target}
        out.append(replace(r, quality={**r.quality, target: value}, features=features,
                           columns={k: v for k, v in r.columns.items() if k != target}))
    return out


def parameter_counts(spec: str) -> dict[str, int]:
    """Parameter counts per model from ``--params``: a CSV file with columns ``model`` and
    ``num_parameters`` (e.g. a paper's table), or ``MODEL=N[,MODEL=N...]``.

    Raises:
        ImportFormatError: an unreadable file, a missing column, a count that is not a
            positive whole number, or a model given twice.
    """
    path = Path(spec)
    pairs: list[tuple[str, str, str]] = []
    if path.is_file():
        import csv

        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"model", "num_parameters"} - set(reader.fieldnames or ())
            if missing:
                raise ImportFormatError(f"{path}: --params needs the columns model and "
                                        f"num_parameters (missing: {', '.join(sorted(missing))})")
            for i, row in enumerate(reader):
                pairs.append((row["model"], row["num_parameters"], f"{path}, line {i + 2}"))
    else:
        for item in spec.split(","):
            model, sep, count = item.partition("=")
            if not sep:
                raise ImportFormatError(f"--params {quoted(spec)}: not a file, and "
                                        f"{quoted(item)} is not MODEL=N")
            pairs.append((model.strip(), count.strip(), f"--params {quoted(item)}"))
    out: dict[str, int] = {}
    for model, count, where in pairs:
        try:
            n = int(count.replace("_", "").replace(",", ""))
        except ValueError:
            n = 0
        if not 0 < n <= MAX_WHOLE:
            raise ImportFormatError(f"{where}: {quoted(count)} is not a positive whole number of "
                                    f"parameters up to {MAX_WHOLE:,}")
        if model in out:
            raise ImportFormatError(f"{where}: model {quoted(model)} given twice")
        out[model] = n
    return out


def with_parameters(rows: list[ImportedRow], counts: Mapping[str, int]) -> list[ImportedRow]:
    """The rows with each model's parameter count from ``counts`` (model as the file names
    it, or its label).

    Raises:
        ImportFormatError: a model without a count, a count for a model not imported, or
            a count that differs from one the file itself gives.
    """
    names = {r.model for r in rows} | {r.label for r in rows}
    unknown = sorted(set(counts) - names)
    if unknown:
        raise ImportFormatError(f"--params names model(s) not in the import: "
                                f"{', '.join(unknown)} (imported: "
                                f"{', '.join(sorted({r.model for r in rows}))})")
    out = []
    for r in rows:
        n = counts.get(r.model, counts.get(r.label))
        if n is None:
            raise ImportFormatError(f"--params has no count for model {quoted(r.model)}")
        if r.num_parameters is not None and r.num_parameters != n:
            raise ImportFormatError(f"{r.provenance.file}, row {r.provenance.row}: the file "
                                    f"gives {r.num_parameters} parameters for {quoted(r.model)}, "
                                    f"--params {n}")
        out.append(replace(r, num_parameters=n))
    return out


QUALITY_DOMAINS: dict[str, tuple[float, str]] = {
    "perplexity": (1.0, "a perplexity (exp of a mean token loss, >= 1)"),
    "loss": (0.0, "a loss (a mean token loss in nats, >= 0)"),
    "mlm_loss": (0.0, "a masked-LM loss (a mean token loss in nats, >= 0)"),
}
"""Each quality column's smallest value, and what it is: a value below it is no such
measure (a perplexity of 0, a negative loss) and is refused rather than correlated."""


def _quality_domain_problem(quality: dict[str, float]) -> str | None:
    """Why a row's quality values lie outside their domains (:data:`QUALITY_DOMAINS`),
    or ``None``."""
    for name, value in quality.items():
        low, what = QUALITY_DOMAINS.get(name, (-math.inf, ""))
        if value < low:
            return f"{quoted(name)} is {value:g}, not {what}"
    return None


def _not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is no regular file (following links), or ``None``."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "is a link that leads nowhere" if path.is_symlink() else "no such file"
    except OSError as exc:  # ELOOP: a link to itself, or round in a circle
        return ("is a link that leads nowhere (a loop)" if exc.errno == errno.ELOOP
                else f"cannot be read ({exc.strerror})")
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a file"
    return "is not a regular file"


def read_rows(paths: Iterable[str | Path], fmt: str | None = None, *,
              progress: bool = False) -> list[ImportedRow]:
    """The rows of every file, validated together: each file readable in its format,
    every step a whole number, qualities and features numeric, each quality within its
    domain (:data:`QUALITY_DOMAINS`), no model × step twice
    (within or across files), no two models with one label.

    Args:
        paths: the files.
        fmt: one of :data:`FORMATS` for every file, or ``None`` to detect each.
        progress: a bar over a table's rows (on a terminal).

    Raises:
        ImportFormatError: the first problem, naming the file and row.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ImportFormatError(f"--format must be one of {', '.join(FORMATS)}, got {quoted(fmt)}")
    rows: list[ImportedRow] = []
    seen: dict[tuple[str, int], RowSource] = {}
    owner: dict[str, str] = {}
    for p in paths:
        path = Path(p)
        if problem := _not_a_file(path):
            raise ImportFormatError(f"{path}: {problem}")
        if path.stat().st_size == 0:
            raise ImportFormatError(f"{path}: the file is empty")
        kind = fmt or detect_format(path)
        read = READERS[kind](path, file_sha256(path)) if kind != "table" else \
            read_table(path, file_sha256(path), progress=progress)
        for row in read:
            if owner.setdefault(row.label, row.model) != row.model:
                raise ImportFormatError(
                    f"{path}, row {row.provenance.row}: models {quoted(owner[row.label])} and "
                    f"{quoted(row.model)} would both be labelled {quoted(row.label)}")
            key = (row.label, row.step)
            if key in seen:
                first = seen[key]
                raise ImportFormatError(
                    f"{path}, row {row.provenance.row}: model {quoted(row.model)} step {row.step} "
                    f"is also in {first.file}, row {first.row}")
            seen[key] = row.provenance
            if problem := _quality_domain_problem(row.quality):
                raise ImportFormatError(f"{path}, row {row.provenance.row}: {problem}")
            rows.append(row)
    if not rows:
        raise ImportFormatError("nothing to import")
    return rows
