"""The record vocabulary every layer shares: the schema version, what a signature
family's name is (which families exist is :mod:`toposig.families.registry`'s), the fields
that identify a checkpoint in a record, the header every record starts with and the typed
output of a family's measurement. Plain data, no I/O, no imports from the rest of the
package: everything else builds on it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

SCHEMA_VERSION = 2  # 2: scale-normalised PH features, bootstrap resamples of the texts


class Family(str):
    """The name of a signature family (``"weights"``): a ``str``, so records, option
    values and JSON keep plain names. Which families exist is the family registry's
    (:mod:`toposig.families.registry`: anyone may register one); a name is only checked
    here to be one a family could have: lower case, a letter first, then letters, digits
    and ``_``.

    Raises:
        ValueError: a name no family could have.
    """

    __slots__ = ()

    def __new__(cls, value: object) -> Family:
        if isinstance(value, Family):
            return value
        if not (isinstance(value, str) and _FAMILY_NAME.fullmatch(value)):
            raise ValueError(f"{value!r} is not a signature family's name (lower case, a "
                             "letter first, then letters, digits and _)")
        return super().__new__(cls, value)

    @property
    def value(self) -> str:
        """The plain name (as an enum member's ``value`` gives it)."""
        return str.__str__(self)


_FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

# The family of schema 2's aggregate entries' top level, and of a record without a
# ``family`` field: the embedding's records were written before the other families
# existed, and an entry keeps its fields where the seed's files have them.
TOP_FAMILY = Family("embedding")


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
# Top-level names a ground-truth signal may not take: fields a record already has, and
# every registered family's name (its part of an aggregate entry: family_parts()).
_RESERVED = {"schema_version", "status", "family", "families", "features", "layers",
             "matrices", "quality", "settings", "settings_hash", "arrays_file", "timings_s",
             "finished_at", "loss_key", "checkpoint_loss_key", "imported", GROUND_TRUTH}
# The names of the registered families: an aggregate entry keeps each one's part under
# its name. The family registry (toposig.families.registry.register) adds them; the
# vocabulary keeps no list of its own.
_FAMILY_PARTS: set[str] = set()


def reserve_part(name: str) -> None:
    """Record that aggregate entries may keep a part named ``name`` (a family's)."""
    _FAMILY_PARTS.add(Family(name))


def release_part(name: str) -> None:
    """Forget ``name`` (a family unregistered)."""
    _FAMILY_PARTS.discard(name)


def family_parts() -> frozenset[str]:
    """The names aggregate entries may keep a family's part under: the registered
    families'."""
    return frozenset(_FAMILY_PARTS)



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
    if not (family == TOP_FAMILY and status == "ok"):
        header["family"] = Family(family).value
    return header | {k: identity[k] for k in IDENTITY} \
        | {k: identity[k] for k in (*SEED_FIELDS, GROUND_TRUTH) if identity.get(k) is not None}


def record_family(record: Mapping) -> Family:
    """The family a record belongs to (one without a ``family`` field is the embedding's)."""
    return Family(record.get("family", TOP_FAMILY))


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
    value, an event (``rise`` or ``fall``), optionally its levels (finite numbers) and
    optionally its ``mechanism``: further signals of the same run that name the mechanism
    (name -> an object of value (finite, or null), event and optionally levels, each
    name as the signal's and none the signal itself)."""
    if truth is None:
        return None
    if not isinstance(truth, Mapping):
        return f"has ground_truth {truth!r}, not an object"
    extra = sorted(set(truth) - {"signal", "value", "event", "levels", "mechanism"})
    if extra:
        return (f"has ground_truth fields {extra} beside signal, value, event, levels, "
                "mechanism")
    if (problem := _signal_problem(truth)) is not None:
        return problem
    mechanism = truth.get("mechanism")
    if mechanism is None:
        return None
    if not isinstance(mechanism, Mapping) or not mechanism:
        return f"has a ground-truth mechanism {mechanism!r}, not an object of signals"
    for name, measure in mechanism.items():
        if not isinstance(measure, Mapping) or set(measure) - {"value", "event", "levels"}:
            return (f"has a ground-truth mechanism signal {name!r} that is not an object "
                    "of value, event and levels")
        if name == truth.get("signal"):
            return f"has a ground-truth mechanism signal {name!r} named as the signal"
        if (problem := _signal_problem({**measure, "signal": name},
                                       null_value=True)) is not None:
            return problem.replace("ground-truth", "ground-truth mechanism", 1)
    return None


def _signal_problem(truth: Mapping, *, null_value: bool = False) -> str | None:
    """What is wrong with one ground-truth signal's name, value, event and levels (with
    ``null_value``, a mechanism signal's, whose value may be null: not finite where it
    was measured, a head whose OV circuit is all zero)."""
    signal = truth.get("signal")
    if not (isinstance(signal, str) and _SIGNAL_NAME.fullmatch(signal)) \
            or signal in _RESERVED or signal in _FAMILY_PARTS or signal in NUMERIC_FIELDS \
            or signal in IDENTITY \
            or signal in SEED_FIELDS:
        return (f"has a ground-truth signal named {signal!r}: a lower-case name of "
                "letters, digits and _ that no record field has")
    value = truth.get("value")
    if not (null_value and value is None) and not (
            isinstance(value, (int, float)) and not isinstance(value, bool)
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
