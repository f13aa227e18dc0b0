"""The record vocabulary every layer shares: the schema version, the signature and
feature families, the fields that identify a checkpoint in a record, the header every
record starts with, the typed output of a stage, and how a checkpoint's family records
merge into one aggregate entry (``data/all_results.json``). Plain data, no I/O, no
imports from the rest of the package: everything else builds on it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

import numpy as np

SCHEMA_VERSION = 2  # 2: scale-normalised PH features, bootstrap resamples of the texts


class Family(StrEnum):
    """A signature family: one record per checkpoint and family, one ``--signatures``
    choice. A ``str`` (``Family.WEIGHTS == "weights"``), so records, option values and
    JSON keep the plain names."""

    EMBEDDING = "embedding"
    WEIGHTS = "weights"
    LANDSCAPE = "landscape"
    GRADIENTS = "gradients"
    INTERLAYER = "interlayer"  # the zigzag over the layers (stages/interlayer.py)

    @property
    def is_probe(self) -> bool:
        """Probes the next-token loss around the weights (opt-in, causal LMs only)."""
        return self in PROBE_FAMILIES


# The signature families, in the order records and figures list them.
FAMILIES: tuple[Family, ...] = tuple(Family)
PROBE_FAMILIES: tuple[Family, ...] = (Family.LANDSCAPE, Family.GRADIENTS)
# What a model folder or Hub revision gets without --signatures (the probes are opt-in).
DEFAULT_FAMILIES: tuple[Family, ...] = (Family.EMBEDDING, Family.WEIGHTS)


class FeatureFamily(StrEnum):
    """What a feature measures, the unit of the analysis's controls and tables (the
    classification of a feature name is :func:`toposig.analysis.correlations.feature_family`).
    In table order; a ``str`` like :class:`Family`."""

    EMBEDDING_TOPOLOGICAL = "embedding_topological"
    EMBEDDING_SPECTRAL = "embedding_spectral"
    WEIGHT_TOPOLOGICAL = "weight_topological"  # neural persistence, weight-row homology
    WEIGHT_STATISTICS = "weight_statistics"  # the non-topological weight baseline
    CURVATURE = "curvature"  # hessian_*
    LANDSCAPE_TOPOLOGICAL = "landscape_topological"  # the loss surface's merge tree
    GRADIENT_TOPOLOGICAL = "gradient_topological"  # grad_h*
    GRADIENT_STATISTICS = "gradient_statistics"  # the other grad_*
    INTERLAYER_TOPOLOGICAL = "interlayer_topological"  # zigzag_* (features/zigzag.py)
    OTHER = "other"

    @property
    def label(self) -> str:
        """Its name in figures and the summary, e.g. ``weight topology``."""
        return FEATURE_FAMILY_LABELS[self]

    @property
    def signature(self) -> Family:
        """The signature family whose records carry it (``other``: the embedding's)."""
        return FEATURE_FAMILY_SIGNATURE.get(self, Family.EMBEDDING)

    @property
    def is_probe(self) -> bool:
        """Derived from the loss probes (curvature, landscape, gradients)."""
        return self.signature.is_probe


FEATURE_FAMILY_LABELS = {
    FeatureFamily.EMBEDDING_TOPOLOGICAL: "embedding topology",
    FeatureFamily.EMBEDDING_SPECTRAL: "embedding spectrum",
    FeatureFamily.WEIGHT_TOPOLOGICAL: "weight topology",
    FeatureFamily.WEIGHT_STATISTICS: "weight statistics",
    FeatureFamily.CURVATURE: "curvature",
    FeatureFamily.LANDSCAPE_TOPOLOGICAL: "landscape topology",
    FeatureFamily.GRADIENT_TOPOLOGICAL: "gradient topology",
    FeatureFamily.GRADIENT_STATISTICS: "gradient statistics",
    FeatureFamily.INTERLAYER_TOPOLOGICAL: "inter-layer topology",
    FeatureFamily.OTHER: "other",
}
FEATURE_FAMILY_SIGNATURE = {
    FeatureFamily.WEIGHT_TOPOLOGICAL: Family.WEIGHTS,
    FeatureFamily.WEIGHT_STATISTICS: Family.WEIGHTS,
    FeatureFamily.CURVATURE: Family.LANDSCAPE,
    FeatureFamily.LANDSCAPE_TOPOLOGICAL: Family.LANDSCAPE,
    FeatureFamily.GRADIENT_TOPOLOGICAL: Family.GRADIENTS,
    FeatureFamily.GRADIENT_STATISTICS: Family.GRADIENTS,
    FeatureFamily.INTERLAYER_TOPOLOGICAL: Family.INTERLAYER,
}


# Features every current record of a family holds: a finished record without one of them
# was written before the feature existed and is computed again (its settings, and so the
# study's hash, are unchanged). Weights: the heavy-tail baselines.
CURRENT_FEATURES: dict[Family, tuple[str, ...]] = {
    Family.WEIGHTS: ("weight_spectral_norm_mean", "weight_stable_rank_mean",
                     "weight_alpha_mean", "weight_alpha_weighted_mean"),
}


def missing_features(record: Mapping) -> list[str]:
    """The :data:`CURRENT_FEATURES` of its family that a record lacks (``[]``: current),
    and, for a weight record of a plain checkpoint file, ``matrix_rule`` when it lacks
    one (written while such files' matrices were chosen by their names)."""
    features = record.get("features")
    have = features if isinstance(features, Mapping) else {}
    family = record_family(record)
    missing = [k for k in CURRENT_FEATURES.get(family, ()) if k not in have]
    if family == Family.WEIGHTS and record.get("source") == "file" \
            and not record.get("matrix_rule"):
        missing.append("matrix_rule")
    return missing


# The fields that say which checkpoint a record belongs to, in record order.
IDENTITY = ("model", "model_label", "step", "source", "location", "revision",
            "checkpoint_fingerprint")
# Written after the identity, only for a member of a seed ensemble: its seed (a
# non-negative integer) and the model it is a seed of (a non-empty string).
SEED_FIELDS = ("seed", "seed_group")
# Written after those, only for a checkpoint whose trainer_state.json states a ground
# truth (the positive controls, toposig.model.tasks): ``{"signal": name, "value": number,
# "event": "rise" | "fall"[, "levels": [numbers]]}``, a quantity measured without any
# topology whose change marks a known transition (held-out accuracy on modular addition,
# the in-context score of induction heads). The aggregate entry also carries the value
# as its own field ``<signal>`` and declares it the quality measure (``quality``).
GROUND_TRUTH = "ground_truth"
GROUND_TRUTH_EVENTS = ("rise", "fall")
_SIGNAL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# Top-level names a ground-truth signal may not take (fields a record already has).
_RESERVED = {"schema_version", "status", "family", "families", "features", "layers",
             "matrices", "weights", "landscape", "gradients", "quality", "settings",
             "settings_hash", "arrays_file", "timings_s", "finished_at", "loss_key",
             "checkpoint_loss_key", "imported", GROUND_TRUTH}



def now_iso() -> str:
    """The UTC time to the second, as records give ``finished_at``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def record_header(family: Family, identity: Mapping[str, object], status: str = "ok") -> dict:
    """The fields every record starts with, in record order: ``schema_version``,
    ``status`` (``ok`` or ``failed``), ``family``, then the checkpoint's identity
    (:data:`IDENTITY`, from :func:`toposig.sources.checkpoints.checkpoint_identity`).

    A finished embedding record has no ``family`` field: schema 2 wrote the embedding
    records before the other families existed, and a record without one is the
    embedding's (:func:`record_family`).
    """
    header: dict = {"schema_version": SCHEMA_VERSION, "status": status}
    if not (family == Family.EMBEDDING and status == "ok"):
        header["family"] = Family(family).value
    return header | {k: identity[k] for k in IDENTITY} \
        | {k: identity[k] for k in (*SEED_FIELDS, GROUND_TRUTH) if identity.get(k) is not None}


def record_family(record: Mapping) -> Family:
    """The family a record belongs to (one without a ``family`` field is the embedding's)."""
    return Family(record.get("family", Family.EMBEDDING))


def record_stem(step: int | None) -> str:
    """The file stem of a checkpoint's records: ``step000100``, or ``final`` without a
    step."""
    return "final" if step is None else f"step{step:06d}"


# Top-level fields of a record that hold a number or nothing.
NUMERIC_FIELDS = ("perplexity", "mean_nll", "mlm_loss", "loss", "checkpoint_loss",
                  "num_parameters", "n_matrices", "w_max")


def is_number(value: object) -> bool:
    """A JSON number: an ``int`` or ``float``, not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_tree(obj: object) -> object:
    """``obj`` as plain JSON: NumPy scalars and arrays as Python values, tuples as
    lists, NaN and infinities as ``None`` (what strict JSON, and so the files, hold), a
    typed record or statistics (:class:`JsonView`) as its JSON; everything else
    unchanged."""
    # the common exact types first (a record holds thousands of numbers), then the rest
    if type(obj) is float:
        return obj if math.isfinite(obj) else None
    if type(obj) is str or type(obj) is int or type(obj) is bool or obj is None:
        return obj
    if type(obj) is dict:
        return {k: json_tree(v) for k, v in obj.items()}
    if type(obj) is list:
        return [json_tree(v) for v in obj]
    if isinstance(obj, JsonView):
        return json_tree(obj.to_json())
    if isinstance(obj, np.ndarray):
        return json_tree(obj.tolist())
    if isinstance(obj, np.generic):
        return json_tree(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_tree(v) for v in obj]
    return obj


class JsonView:
    """A typed object that keeps the JSON it was read from (its ``json``, read-only):
    read it by attribute; :meth:`to_json` gives the JSON back unchanged, and two such
    objects of one type are equal when their JSON is. It is not itself a mapping:
    ``obj["features"]`` is an error, so that no reader goes around the types."""

    json: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The JSON it was read from: a copy, equal to what was read."""
        return copy.deepcopy(dict(self.json))

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return dict(self.json) == dict(other.json)  # type: ignore[attr-defined]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # its JSON is mutable in principle

    def __reduce__(self):
        """Pickled (and deep-copied) as its JSON, read back by ``from_json``."""
        return (type(self).from_json, (self.to_json(),))  # type: ignore[attr-defined]


MAX_STEP = 2**63 - 1  # steps are int64 in tables and arrays


def arrays_file_problem(name: str) -> str | None:
    """Why ``name`` cannot be a record's arrays file, or ``None``: it must be a relative
    path under ``records/`` (``records/<hash>/<label>/<stem>.npz``) with no ``..``, so that
    reading it never leaves the results folder."""
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "records" or not name.endswith(".npz") \
            or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        return (f"names the arrays file {name!r}, not records/<hash>/<model>/<step>.npz "
                "inside the results folder")
    return None


def record_problem(record: object, *, family: Family | None = None, label: str | None = None,
                   stem: str | None = None, arrays_file: str | None = None) -> str | None:
    """What makes a record read back from disk unusable, or ``None`` when it is sound.

    A record is input: someone may have edited, copied or damaged it. It is sound when it
    is a JSON object whose status is ``ok`` or ``failed``; whose family (and, when given,
    model label, file stem and arrays file) are those of the place it was read from;
    whose model label is a non-empty string; whose step is there, a non-negative integer
    or null; and, when finished, whose ``features``
    map names to numbers (or null) and whose loss and size fields are numbers.

    Args:
        record: the parsed JSON.
        family, label, stem: what the record's location says it must be.
        arrays_file: the arrays file its location gives it (relative to the results root).
    """
    if not isinstance(record, dict):
        return f"holds a {type(record).__name__}, not a JSON object"
    status = record.get("status")
    if status not in ("ok", "failed"):
        return f"has status {status!r}, not 'ok' or 'failed'"
    try:
        own = record_family(record)
    except ValueError:
        return f"has an unknown family {record.get('family')!r}"
    if family is not None and own != family:
        return f"is a {own} record, where a {Family(family)} record belongs"
    model_label = record.get("model_label")
    if not isinstance(model_label, str) or not model_label \
            or (label is not None and model_label != label):
        return f"names the model {model_label!r}, not its folder's {label!r}" \
            if "model_label" in record else "has no model_label"
    if "step" not in record:
        return "has no step (null for a checkpoint without one)"
    step = record.get("step")
    if not (step is None or (is_number(step) and isinstance(step, int)
                             and 0 <= step <= MAX_STEP)):
        return f"has step {step!r}, not a non-negative integer (below 2**63) or null"
    if stem is not None and record_stem(step) != stem:
        return f"holds step {step!r}, whose file is {record_stem(step)}.json (a copy?)"
    found = record.get("arrays_file")
    if found is not None and (not isinstance(found, str)
                              or (arrays_file is not None and found != arrays_file)):
        return f"names the arrays file {found!r}, not {arrays_file!r}"
    if found is not None and (problem := arrays_file_problem(found)):
        return problem
    if problem := seed_problem(record):
        return problem
    if problem := ground_truth_problem(record.get(GROUND_TRUTH)):
        return problem
    if status == "ok":
        features = record.get("features")
        if not isinstance(features, dict) or not all(
                isinstance(k, str) and (v is None or is_number(v))
                for k, v in features.items()):
            return "has 'features' that are not a mapping of names to numbers"
        bad = [k for k in NUMERIC_FIELDS
               if record.get(k) is not None and not is_number(record[k])]
        if bad:
            return f"has {bad[0]!r} = {record[bad[0]]!r}, not a number"
    return None


def seed_problem(record: Mapping) -> str | None:
    """What is wrong with a record's :data:`SEED_FIELDS`, or ``None``: both absent, or a
    non-negative integer seed with a non-empty string group."""
    seed, group = record.get("seed"), record.get("seed_group")
    if seed is None and group is None:
        return None
    if not (is_number(seed) and isinstance(seed, int) and 0 <= seed <= MAX_STEP):
        return f"has seed {seed!r}, not a non-negative integer"
    if not (isinstance(group, str) and group):
        return f"has seed_group {group!r}, not the name of the model it is a seed of"
    return None


def ground_truth_problem(truth: object) -> str | None:
    """What is wrong with a record's :data:`GROUND_TRUTH`, or ``None``: absent, or a
    mapping of a signal name (lower-case, not a field records already have), a finite
    value, an event (``rise`` or ``fall``) and optionally its levels (finite numbers)."""
    if truth is None:
        return None
    if not isinstance(truth, Mapping):
        return f"has ground_truth {truth!r}, not an object"
    extra = sorted(set(truth) - {"signal", "value", "event", "levels"})
    if extra:
        return f"has ground_truth fields {extra} beside signal, value, event, levels"
    signal = truth.get("signal")
    if not (isinstance(signal, str) and _SIGNAL_NAME.fullmatch(signal)) \
            or signal in _RESERVED or signal in NUMERIC_FIELDS or signal in IDENTITY \
            or signal in SEED_FIELDS:
        return (f"has a ground-truth signal named {signal!r}: a lower-case name of "
                "letters, digits and _ that no record field has")
    value = truth.get("value")
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value)):
        return f"has ground-truth value {value!r}, not a finite number"
    if truth.get("event") not in GROUND_TRUTH_EVENTS:
        return f"has ground-truth event {truth.get('event')!r}, not 'rise' or 'fall'"
    levels = truth.get("levels")
    if levels is not None and not (isinstance(levels, list) and levels and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in levels)):
        return f"has ground-truth levels {levels!r}, not a list of finite numbers"
    return None


@dataclass
class CheckpointOutput:
    """A finished checkpoint of one family: its JSON record and the arrays saved beside
    it (persistence diagrams as ``(n, 2)`` birth/death arrays, and the like)."""

    record: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


# What the aggregate keeps of the other families' records besides their features: these
# for the probes, and DEFAULT_KEPT for a family not named here.
DEFAULT_KEPT = ("settings_hash", "arrays_file", "settings", "timings_s")
PROBE_FIELDS = {
    Family.LANDSCAPE: ("settings_hash", "arrays_file", "probe_loss", "hessian_trace_se", "lanczos",
                  "theta_norm", "settings", "timings_s"),
    Family.GRADIENTS: ("settings_hash", "arrays_file", "ph_backend", "settings", "timings_s"),
}


def merge_family_records(records: dict[str, dict]) -> dict | None:
    """One aggregate entry per checkpoint from its finished family records.

    The embedding record's fields stay at the top level (as the seed's files have them);
    the weight record adds its checkpoint-level features to ``features``, its stored
    loss as ``loss`` and the rest under ``weights``; the landscape and gradient records
    add their features and keep their details under ``landscape`` and ``gradients``.
    ``None`` when no family finished.
    """
    if not records:
        return None
    emb, w = records.get(Family.EMBEDDING), records.get(Family.WEIGHTS)
    first = next(iter(records.values()))
    entry: dict[str, Any] = dict(emb) if emb else {
        "schema_version": SCHEMA_VERSION, "status": "ok", **{k: first.get(k) for k in IDENTITY},
        **{k: first[k] for k in (*SEED_FIELDS, GROUND_TRUTH) if first.get(k) is not None}}
    entry["families"] = [f for f in FAMILIES if f in records]
    if w:
        entry["features"] = {**entry.get("features", {}), **w["features"]}
        entry["loss"] = w.get("checkpoint_loss")
        entry["loss_key"] = w.get("checkpoint_loss_key")
        if entry.get("num_parameters") is None:
            entry["num_parameters"] = w.get("num_parameters")
        entry["weights"] = {k: w.get(k) for k in (
            "settings_hash", "arrays_file", "n_matrices", "w_max", "ph_backend", "matrices",
            "timings_s")}
    for family in FAMILIES:
        keys = PROBE_FIELDS.get(family, DEFAULT_KEPT)
        if family in (Family.EMBEDDING, Family.WEIGHTS) or not (rec := records.get(family)):
            continue
        entry["features"] = {**entry.get("features", {}), **rec["features"]}
        if entry.get("num_parameters") is None:
            entry["num_parameters"] = rec.get("num_parameters")
        if entry.get("loss") is None and rec.get("checkpoint_loss") is not None:
            entry["loss"], entry["loss_key"] = rec["checkpoint_loss"], rec.get(
                "checkpoint_loss_key")
        entry[family] = {k: rec.get(k) for k in keys}
    if truth := entry.get(GROUND_TRUTH):  # the positive controls' signal: the quality
        entry[truth["signal"]] = truth["value"]
        entry.setdefault("quality", {"column": truth["signal"],
                                     "higher_is_better": truth["event"] == "rise"})
    return entry
