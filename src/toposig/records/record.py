"""A record, typed: one checkpoint's measurements as the run wrote them, validated on read.

A :class:`Record` is what ``data/all_results.json`` holds per finished checkpoint (the
aggregate entry, its families merged) or what one family's record file holds
(``records/<hash>/<label>/<step>.json``). It names:

- **which checkpoint**: :class:`CheckpointId` (model, label, step, source, location,
  revision, fingerprint);
- **which families** measured it, and for each its settings hash, arrays file, stored
  settings and timings (:class:`FamilyPart`);
- **the features**: the checkpoint-level ones (``features``), those of every hidden-state
  layer (``layers``, by index in ``hidden_states``) and of every weight matrix
  (``matrices``, :class:`MatrixResult`);
- **the quality**: perplexity and mean NLL on the analysed texts, the checkpoint's stored
  loss (and which key held it), the MLM loss of an encoder;
- **provenance**: :class:`Provenance` (schema version, when, on which device and dtype,
  which persistent-homology backend).

:meth:`Record.from_json` is the one way in: it refuses anything unsound with a
:class:`RecordError` that says what is wrong (:func:`record_problem` for the fields every
record has, :func:`entry_problem` for those of an aggregate entry). A record is read by
attribute, never as a mapping (``record["features"]`` is an error, so that no reader goes
around the types); :meth:`Record.to_json` gives back the JSON, equal to what was read, so
writing a record back changes no byte.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toposig.records.vocabulary import (
    GROUND_TRUTH,
    TOP_FAMILY,
    Family,
    JsonView,
    arrays_file_problem,
    is_number,
    record_family,
    record_problem,
    record_stem,
)

__all__ = ["RecordError", "CheckpointId", "FamilyPart", "MatrixResult", "Provenance",
           "Resampled", "DeclaredQuality", "GroundTruth", "Record", "entry_problem",
           "records_from_json"]

Features = Mapping[str, "float | None"]

_LAYER_KEY = re.compile(r"[0-9]+")


class RecordError(ValueError):
    """A record that is not sound: the message says which and why."""


@dataclass(frozen=True)
class CheckpointId:
    """Which checkpoint a record measured.

    Attributes:
        model: the model as the run named it (a Hub id, a folder, a file).
        label: its label, the folder of its records under ``records/<hash>/``.
        step: the training step, or ``None`` for a checkpoint without one (``final``).
        source: where it was read from: ``hub``, ``local``, ``file``, ``memory``,
            ``imported``...
        location: the Hub id it was read from, or a local folder or file's path relative
            to ``model`` (``step100``; ``.`` for the model itself;
            :attr:`toposig.sources.checkpoints.Checkpoint.stored_location`). Records
            written before 2026-12-03 hold an absolute path.
        revision: the Hub revision (``step1000``), or ``None``.
        fingerprint: what tells two checkpoints with the same name apart (16 hex digits).
        seed, seed_group: for a member of a seed ensemble, its seed and the model it is
            a seed of; ``None`` otherwise.
    """

    model: str
    label: str
    step: int | None
    source: str | None = None
    location: str | None = None
    revision: str | None = None
    fingerprint: str | None = None
    seed: int | None = None
    seed_group: str | None = None

    @property
    def stem(self) -> str:
        """The file stem of its records: ``step000100``, or ``final``."""
        return record_stem(self.step)

    def __str__(self) -> str:
        return f"{self.label} {'final' if self.step is None else f'step {self.step}'}"


@dataclass(frozen=True)
class MatrixResult:
    """One weight matrix of a weight record.

    Attributes:
        name: the parameter's name (``gpt_neox.layers.0.mlp.dense_h_to_4h.weight``).
        shape: ``(rows, columns)`` as measured.
        features: its numbers: neural persistence (``np``, ``np_normalized``,
            ``np_seed``), row homology, ...
    """

    name: str
    shape: tuple[int, ...]
    features: Features


@dataclass(frozen=True)
class FamilyPart:
    """What one signature family keeps in a record besides its features.

    Attributes:
        family: the family.
        settings_hash: the hash of its settings: the folder ``records/<hash>/``.
        arrays_file: its arrays (``.npz``, relative to the results root), or ``None``.
        settings: the settings the record itself holds (the landscape's and the
            gradients'; the embedding's and the weights' are in ``data/config.json``, so
            empty for them).
        timings_s: seconds per stage of its work (``load``, ``forward``, ``total``...).
        matrices: the weight matrices it measured, when it keeps them (the weights
            family's; :attr:`Record.matrices` is the first family's that does).
    """

    family: Family
    settings_hash: str | None
    arrays_file: str | None
    settings: Mapping[str, Any] = field(default_factory=dict)
    timings_s: Mapping[str, float] = field(default_factory=dict)
    matrices: tuple[MatrixResult, ...] = ()


@dataclass(frozen=True)
class Provenance:
    """How and when a record was made.

    Attributes:
        schema_version: the record schema (:data:`toposig.records.SCHEMA_VERSION`).
        finished_at: UTC time to the second (ISO 8601), or ``None`` (imports).
        device, dtype: where and in which precision the model ran (for the embedding,
            in an aggregate entry).
        ph_backend: the persistent-homology library that computed the diagrams (the
            embedding's, else the weights').
    """

    schema_version: int | None
    finished_at: str | None = None
    device: str | None = None
    dtype: str | None = None
    ph_backend: str | None = None


@dataclass(frozen=True)
class Resampled:
    """One feature's spread over bootstrap resamples of the analysed texts
    (``features_resampled``).

    Attributes:
        mean, std: over the resamples (in the feature's own unit).
        low, high: the 2.5th and 97.5th percentiles (``p2_5``, ``p97_5``).
    """

    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class DeclaredQuality:
    """The quality measure a record declares (an import's ``--target``, a positive
    control's signal): the analysis correlates with it.

    Attributes:
        column: its name, a field of the record (``accuracy``, ``test_accuracy``...).
        higher_is_better: whether a larger value means a better model.
    """

    column: str
    higher_is_better: bool = False


@dataclass(frozen=True)
class GroundTruth:
    """A quantity measured without any topology whose change marks a known transition
    (:data:`toposig.records.GROUND_TRUTH`).

    Attributes:
        signal: its name (``test_accuracy``, ``induction_score``).
        value: its value at this checkpoint.
        event: ``rise`` or ``fall``: the change the transition makes.
        levels: the levels a run's change is placed by, or ``()`` for the default.
        mechanism: further signals of the run that name the mechanism (training
            accuracy, an attention head's score ...), each a :class:`GroundTruth` of its
            own (without a mechanism; a null value is NaN), in the order stated.
    """

    signal: str
    value: float
    event: str
    levels: tuple[float, ...] = ()
    mechanism: tuple[GroundTruth, ...] = ()


def _view(mapping: dict | None) -> Mapping:
    """A read-only view of ``mapping`` (of the record's own JSON, not a copy: what the
    typed fields show is what the JSON holds)."""
    return MappingProxyType(mapping if mapping is not None else {})


def _numbers_problem(value: object, what: str) -> str | None:
    """Why ``value`` is not a mapping of names to numbers (or null), or ``None``."""
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and (v is None or is_number(v)) for k, v in value.items()):
        return f"has {what} that are not a mapping of names to numbers"
    return None


def _part_problem(family: Family, part: object) -> str | None:
    if not isinstance(part, dict):
        return f"has a {family} part that is not an object"
    for key in ("settings_hash", "arrays_file"):
        if part.get(key) is not None and not isinstance(part[key], str):
            return f"has a {family} {key} {part[key]!r} that is not a string"
    if part.get("arrays_file") is not None \
            and (problem := arrays_file_problem(part["arrays_file"])):
        return problem
    for key in ("settings", "timings_s"):
        if part.get(key) is not None and not isinstance(part[key], dict):
            return f"has {family} {key} that are not an object"
    return None


def _matrices_problem(matrices: object) -> str | None:
    if not isinstance(matrices, list):
        return "has matrices that are not a list"
    for m in matrices:
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            return "has a matrix without a name"
        shape = m.get("shape")
        if shape is not None and (not isinstance(shape, list) or not all(
                is_number(n) and isinstance(n, int) and n >= 0 for n in shape)):
            return f"has matrix {m['name']} of shape {shape!r}, not a list of sizes"
        if problem := _numbers_problem(_matrix_features(m), f"matrix {m['name']} values"):
            return problem
    return None


def _matrix_features(matrix: dict) -> dict:
    return {k: v for k, v in matrix.items() if k not in ("name", "shape")}


def entry_problem(record: object, *, family: Family | None = None, label: str | None = None,
                  stem: str | None = None, arrays_file: str | None = None) -> str | None:
    """What makes a record unusable (an aggregate entry or a family's record file), or
    ``None`` when it is sound: :func:`toposig.records.record_problem` (with the place it
    was read from, when given), and a ``model`` that is a string; known ``families``; an
    analysed ``layer`` that is an integer, ``layer_names`` that are strings and
    ``layer_features`` that map layer indices to features; family parts (its own
    fields, ``weights``, ``landscape``, ``gradients``) with string hashes and object
    settings and timings; weight ``matrices`` that each have a name, a list of sizes as
    shape and numbers (or null) for the rest; string ``loss_key``, ``model_type`` and
    top-level ``settings_hash``; integer ``num_layers`` and ``hidden_size``; bootstrap
    spreads (``features_resampled``) that map names to numbers; a declared ``quality``
    that names its column.

    Args:
        record: the parsed JSON.
        family: the family its location says it holds
            (:func:`toposig.records.record_problem`).
        label: the model label its location says it has.
        stem: the file stem its location gives it.
        arrays_file: the arrays file its location says it names.
    """
    problem = record_problem(record, family=family, label=label, stem=stem,
                             arrays_file=arrays_file)
    if problem or not isinstance(record, dict):
        return problem
    if not isinstance(record.get("model"), str):
        return (f"names the model {record['model']!r}, not a string" if "model" in record
                else "has no model")
    families = record.get("families")
    if families is not None and not _family_names(families):
        return f"has families {families!r}, not a list of signature families' names"
    layer = record.get("layer")
    if layer is not None and not (is_number(layer) and isinstance(layer, int) and layer >= 0):
        return f"has layer {layer!r}, not an index of the hidden states"
    by_layer = record.get("layer_features")
    if by_layer is not None:
        if not isinstance(by_layer, dict) or not all(
                isinstance(k, str) and _LAYER_KEY.fullmatch(k) for k in by_layer):
            return "has layer_features that are not keyed by layer index"
        for values in by_layer.values():
            if problem := _numbers_problem(values, "layer_features"):
                return problem
    names = record.get("layer_names")
    if names is not None and (not isinstance(names, list)
                              or not all(isinstance(n, str) for n in names)):
        return "has layer_names that are not a list of names"
    if problem := _part_problem(record_family(record), record):  # its own part
        return problem
    for part_family in _listed(record):
        if part_family in record and (problem := _part_problem(part_family,
                                                               record[part_family])):
            return problem
    for holder in (record, *_part_holders(record)):
        if holder.get("matrices") is not None \
                and (problem := _matrices_problem(holder["matrices"])):
            return problem
    for key in ("num_layers", "hidden_size"):
        if record.get(key) is not None and not (is_number(record[key])
                                                and isinstance(record[key], int)):
            return f"has {key} {record[key]!r}, not an integer"
    for key in ("loss_key", "checkpoint_loss_key", "model_type", "settings_hash"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"has {key} {record[key]!r}, not a string"
    return _resampled_problem(record.get("features_resampled")) \
        or _quality_problem(record.get("quality"))


def _resampled_problem(resampled: object) -> str | None:
    if resampled is None:
        return None
    if not isinstance(resampled, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in resampled.items()):
        return "has features_resampled that are not a mapping of names to objects"
    for name, spread in resampled.items():
        if problem := _numbers_problem(spread, f"features_resampled of {name}"):
            return problem
    return None


def _quality_problem(quality: object) -> str | None:
    if quality is None:
        return None
    if not isinstance(quality, dict) or not isinstance(quality.get("column"), str) \
            or not isinstance(quality.get("higher_is_better", False), bool):
        return (f"declares the quality {quality!r}, not an object of a column name and "
                "higher_is_better")
    return None


@dataclass(frozen=True, eq=False)
class Record(JsonView):
    """One checkpoint's measurements (see the module). Build one with
    :meth:`from_json`; read it by attribute.

    Attributes:
        checkpoint: which checkpoint.
        status: ``ok`` (finished) or ``failed`` (then ``error`` says why).
        families: the signature families it holds, in the order the entry lists them
            (the family registry's, :mod:`toposig.families.registry`).
        features: the checkpoint-level features, name -> number (``None``: undefined).
        perplexity, mean_nll: on the analysed texts (the embedding's, or an imported
            table's; ``None`` when not measured).
        loss, loss_key: what the checkpoint stored as its loss, and under which key.
        mlm_loss: an encoder's masked-LM loss on the analysed texts.
        quality: the quality measure the record declares (an import's ``--target``, a
            positive control's signal), or ``None``; read any measure with
            :meth:`measure`.
        ground_truth: a positive control's stated ground truth, or ``None``.
        resampled: per feature, its spread over bootstrap resamples of the texts (empty
            without resamples).
        settings_hash: the hash of the settings of its top-level part (the
            embedding's, or an import's), or ``None``.
        num_parameters: the model's parameters, each counted once.
        num_layers, hidden_size: the model's blocks and hidden width, as the embedding
            family read them off its hidden states (``None`` without it).
        model_type: the ``config.model_type`` (``gpt_neox``, ``llama``...).
        layer: the analysed hidden-state layer (index in ``hidden_states``).
        layer_names: a name per hidden-state layer (``embeddings``, ``block 1``...).
        layers: features per measured hidden-state layer, by index.
        matrices: the weight matrices measured, in the record's order.
        parts: per family, its settings hash, arrays, settings and timings.
        provenance: schema, time, device, dtype, PH backend.
        error: why a failed record failed.
    """

    checkpoint: CheckpointId
    status: str
    families: tuple[Family, ...]
    features: Features
    perplexity: float | None = None
    mean_nll: float | None = None
    loss: float | None = None
    loss_key: str | None = None
    mlm_loss: float | None = None
    quality: DeclaredQuality | None = None
    ground_truth: GroundTruth | None = None
    resampled: Mapping[str, Resampled] = field(default_factory=dict)
    settings_hash: str | None = None
    num_parameters: int | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    model_type: str | None = None
    layer: int | None = None
    layer_names: tuple[str, ...] = ()
    layers: Mapping[int, Features] = field(default_factory=dict)
    matrices: tuple[MatrixResult, ...] = ()
    parts: Mapping[str, FamilyPart] = field(default_factory=dict)
    provenance: Provenance = Provenance(None)
    error: str | None = None
    json: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: object, *, where: str = "", copy_json: bool = True) -> Record:
        """The record of a parsed JSON object (a ``Record`` is returned as it is).

        Args:
            obj: what was read: an aggregate entry or a family's record.
            where: the file (and entry) it came from, to start the error message with.
            copy_json: keep a deep copy of ``obj`` (default), so that changing ``obj``
                later does not change the record; ``False`` takes ``obj`` over, for JSON
                just parsed that nothing else holds (the readers of a results folder).

        Raises:
            RecordError: :func:`entry_problem` has an answer for it.
        """
        if isinstance(obj, Record):
            return obj
        problem = entry_problem(obj)
        if problem:
            raise RecordError(f"{where + ': ' if where else ''}the record {problem}")
        assert isinstance(obj, dict)
        data = copy.deepcopy(obj) if copy_json else obj
        return cls(
            checkpoint=CheckpointId(
                model=data["model"], label=data["model_label"], step=data.get("step"),
                source=data.get("source"), location=data.get("location"),
                revision=data.get("revision"),
                fingerprint=data.get("checkpoint_fingerprint"),
                seed=data.get("seed"), seed_group=data.get("seed_group")),
            status=data["status"],
            families=_families(data),
            features=_view(data.get("features")),
            perplexity=data.get("perplexity"),
            mean_nll=data.get("mean_nll"),
            loss=data.get("loss", data.get("checkpoint_loss")),
            loss_key=data.get("loss_key", data.get("checkpoint_loss_key")),
            mlm_loss=data.get("mlm_loss"),
            quality=_declared_quality(data.get("quality")),
            ground_truth=_ground_truth(data.get(GROUND_TRUTH)),
            resampled=MappingProxyType(
                {name: Resampled(mean=spread.get("mean"), std=spread.get("std"),
                                 low=spread.get("p2_5"), high=spread.get("p97_5"))
                 for name, spread in (data.get("features_resampled") or {}).items()}),
            settings_hash=data.get("settings_hash"),
            num_parameters=data.get("num_parameters"),
            num_layers=data.get("num_layers"), hidden_size=data.get("hidden_size"),
            model_type=data.get("model_type"),
            layer=data.get("layer"),
            layer_names=tuple(data.get("layer_names") or ()),
            layers=MappingProxyType({int(k): _view(v) for k, v in
                                     (data.get("layer_features") or {}).items()}),
            matrices=_matrices(data),
            parts=MappingProxyType(_parts(data)),
            provenance=Provenance(
                schema_version=data.get("schema_version"),
                finished_at=data.get("finished_at"), device=data.get("device"),
                dtype=data.get("dtype"),
                ph_backend=data.get("ph_backend") or next(
                    (p["ph_backend"] for p in _part_holders(data) if p.get("ph_backend")),
                    None)),
            error=data.get("error"),
            json=MappingProxyType(data),
        )

    @property
    def model_label(self) -> str:
        """The model's label (``checkpoint.label``)."""
        return self.checkpoint.label

    @property
    def step(self) -> int | None:
        """The training step (``checkpoint.step``)."""
        return self.checkpoint.step

    @property
    def ok(self) -> bool:
        """Whether the checkpoint finished (``status`` is ``ok``)."""
        return self.status == "ok"

    def measure(self, name: str) -> float | None:
        """The record's value of the quality measure ``name`` (``perplexity``, ``loss``,
        ``mean_nll``, ``mlm_loss``, a declared quality or ground-truth signal, or any
        other number the record holds under that name), or ``None``."""
        known = {"perplexity": self.perplexity, "loss": self.loss,
                 "mean_nll": self.mean_nll, "mlm_loss": self.mlm_loss}
        if name in known:
            return known[name]
        value = self.json.get(name)
        return value if is_number(value) else None

    def arrays_file(self, family: str = TOP_FAMILY) -> str | None:
        """The arrays file of ``family``'s part (relative to the results root), or
        ``None`` when the record has no such part or it saved none."""
        part = self.parts.get(family)
        return part.arrays_file if part is not None else None

    def __repr__(self) -> str:
        quality = [f"{k} {v:.4g}" for k, v in (("perplexity", self.perplexity),
                                               ("loss", self.loss),
                                               ("mlm_loss", self.mlm_loss))
                   if is_number(v)]
        what = ", ".join([f"{len(self.features)} features", *quality])
        if self.status != "ok":
            what = f"{self.status}: {self.error or 'no error given'}"
        return f"Record({self.checkpoint} [{', '.join(self.families)}]: {what})"



def records_from_json(items: Iterable[Record | Mapping[str, Any]] | None,
                      what: str = "record") -> list[Record]:
    """Each item as a :class:`Record` (a record as it is, JSON read and validated by
    :meth:`Record.from_json`); ``None`` gives none.

    Raises:
        RecordError: an item is not sound; the message names it by position
            (``record 3: the record has no model``; ``what`` names the items).
    """
    return [Record.from_json(r, where=f"{what} {i}") for i, r in enumerate(items or ())]


def _family_names(families: object) -> bool:
    """Whether ``families`` is a list of distinct names a family could have."""
    if not isinstance(families, list) or len(set(map(str, families))) != len(families):
        return False
    try:
        [Family(f) for f in families]
    except ValueError:
        return False
    return True


def _families(data: dict) -> tuple[Family, ...]:
    """An entry's ``families`` in the order it lists them (the registry's, as the merge
    writes them); a family's record (or an entry that lists none, as an import of quality
    columns alone) is its own family's."""
    if data.get("families"):
        return tuple(Family(f) for f in data["families"])
    return (record_family(data),)


def _listed(data: dict) -> tuple[Family, ...]:
    """The families an aggregate entry keeps a part of their own for, under their name:
    every family it lists but the top level's (none for a family's record file)."""
    families = data.get("families")
    if not isinstance(families, list) or not _family_names(families):
        return ()
    return tuple(Family(f) for f in families if f != TOP_FAMILY)


def _part_holders(data: dict) -> list[dict]:
    """The parts an aggregate entry keeps under its families' names, in its order."""
    return [data[f] for f in _listed(data) if isinstance(data.get(f), dict)]


def _declared_quality(quality: dict | None) -> DeclaredQuality | None:
    if quality is None:
        return None
    return DeclaredQuality(quality["column"], quality.get("higher_is_better", False))


def _ground_truth(truth: dict | None) -> GroundTruth | None:
    if truth is None:
        return None
    return GroundTruth(signal=truth["signal"], value=truth["value"], event=truth["event"],
                       levels=tuple(truth.get("levels") or ()),
                       mechanism=tuple(
                           GroundTruth(signal=name, event=m["event"],
                                       value=math.nan if m["value"] is None else m["value"],
                                       levels=tuple(m.get("levels") or ()))
                           for name, m in (truth.get("mechanism") or {}).items()))


def _matrices(data: dict) -> tuple[MatrixResult, ...]:
    """The weight matrices measured: a record's own, else those a part of the entry keeps
    (the weights family's)."""
    found = data.get("matrices")
    if found is None:
        found = next((p["matrices"] for p in _part_holders(data)
                      if p.get("matrices") is not None), None)
    return _matrix_results(found)


def _matrix_results(found: list | None) -> tuple[MatrixResult, ...]:
    return tuple(
        MatrixResult(name=m["name"], shape=tuple(m.get("shape") or ()),
                     features=MappingProxyType(_matrix_features(m)))
        for m in found or ())


def _part(family: Family, holder: dict) -> FamilyPart:
    return FamilyPart(family=family, settings_hash=holder.get("settings_hash"),
                      arrays_file=holder.get("arrays_file"),
                      settings=_view(holder.get("settings")),
                      timings_s=_view(holder.get("timings_s")),
                      matrices=_matrix_results(holder.get("matrices")))


def _parts(data: dict) -> dict[str, FamilyPart]:
    """Per family, its part: an aggregate entry keeps the embedding's at the top level
    and the others under their names; a family's record file is its own part. A family
    listed without a part of its own (an import's: one settings hash for every family)
    has the top level's hash and no arrays."""
    parts: dict[str, FamilyPart] = {}
    families = _families(data)
    own = TOP_FAMILY if data.get("families") else record_family(data)
    if own in families:
        parts[own] = _part(own, data)
    for family in _listed(data):
        if isinstance(data.get(family), dict):
            parts[family] = _part(family, data[family])
    for family in families:
        if family not in parts:
            parts[family] = FamilyPart(family, data.get("settings_hash"), None)
    return {f: parts[f] for f in families}
