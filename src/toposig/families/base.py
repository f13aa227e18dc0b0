"""A signature family as every caller sees it: one :class:`SignatureFamily` class.

A family's class is all of it, in one file:

- **its settings are its fields** (:func:`toposig.config.setting`): defaults, help text,
  allowed values, whether each changes the numbers; the command-line options, the
  ``config.json`` view and the settings hash are derived from them, and an instance of
  the class is a family with its settings (``WeightsFamily(max_rows=100)``);
- **its features** (:class:`FeatureGroup` of :class:`Feature`): each with its
  description, unit and :class:`Kind`, grouped by what they measure, a topological
  group with the baselines it is tested beyond;
- **how it runs**: which texts it reads and what of a loaded checkpoint it needs
  (class attributes), and :meth:`SignatureFamily.compute`, its record and arrays for one
  loaded checkpoint;
- **how it is shown**: its line and columns in a run's summary, a few words on one
  record.

The families are listed by the open registry :mod:`toposig.families.registry`
(``register(MyFamily)``); everything that would name a family asks it.

A family runs on a :class:`Loaded` checkpoint: the pipeline's is loaded from disk
(:mod:`toposig.run.tasks`), the in-memory measurement's is the model in hand
(:mod:`toposig.in_memory`). Both hand it to :func:`toposig.families.runner.run_families`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from toposig.config import RunSettings, Settings
from toposig.features.names import DIAGRAM_STATISTICS
from toposig.records import SCHEMA_VERSION, CheckpointOutput, Family, Record

if TYPE_CHECKING:
    from toposig.model.embedding import TextsForward
    from toposig.model.placement import Placement
    from toposig.sources.checkpoints import Checkpoint


class Texts(Enum):
    """Which texts a family reads: none, the analysed texts (the points of the embedding's
    cloud), or the probe texts its loss windows are cut from."""

    NONE = "none"
    ANALYSED = "analysed"
    PROBE = "probe"


# ------------------------------------------------------------------------------ features

class Kind(StrEnum):
    """How a feature's values behave, which sets how closely two runs must agree on it
    (:mod:`toposig.analysis.compare`)."""

    COUNT = "count"  # a count: bars, minima, components
    CONTINUOUS = "continuous"  # a smooth function of the weights
    DISCONTINUOUS = "discontinuous"  # a statistic of a diagram: moves by a bar's share


class Scope(StrEnum):
    """Where a record holds a feature."""

    CHECKPOINT = "checkpoint"  # ``features``: one value per checkpoint
    LAYER = "layer"  # also ``layer_features``: one per analysed hidden-state layer
    MATRIX = "matrix"  # ``matrices``: one per weight matrix


@dataclass(frozen=True)
class Feature:
    """One feature a family computes.

    Attributes:
        name: as records key it; a name with a number in it is written with a
            placeholder (``hessian_eig_<k>``) and matched by ``pattern``.
        description: one line.
        unit: what its values count or measure in.
        kind: how its values behave (:class:`Kind`).
        scopes: where records hold it.
        pattern: for a name with a number in it, the regular expression of its names.
    """

    name: str
    description: str
    unit: str
    kind: Kind = Kind.CONTINUOUS
    scopes: tuple[Scope, ...] = (Scope.CHECKPOINT,)
    pattern: str | None = None

    def matches(self, name: str) -> bool:
        """Whether ``name`` is this feature's (its name, or one its pattern matches)."""
        return name == self.name or (self.pattern is not None
                                     and re.fullmatch(self.pattern, name) is not None)


class Order(StrEnum):
    """How the analysis lists a group's features: by name, in declaration order, or in
    the order the records give them (the loss probes')."""

    NAME = "name"
    DECLARED = "declared"
    RECORDS = "records"


@dataclass(frozen=True, eq=False)
class FeatureGroup:
    """Features of one family that measure one thing: the unit of the analysis's
    controls and tables (``statistics.json`` lists the features by group name).

    Attributes:
        name: ``weight_topological``, as ``statistics.json`` names it.
        label: its name in figures and the summary (``weight topology``).
        features: its features, in display order.
        topological: it is topology, so every feature must survive being tested beyond
            the ``baselines`` (the registry refuses a topological group without any).
        baselines: the non-topological features of the same space that a feature of the
            group is tested beyond (:mod:`toposig.analysis.controls`), the space's plain
            norm first: they may be another family's (the hidden states' norm for the
            inter-layer topology), and a test needs them in the records.
        prefixes: name prefixes that put a feature the package does not compute (an
            imported table's) in this group by the naming convention.
        order: how the analysis lists its features (:class:`Order`).
        last: listed after every family's other groups (the embedding's ``other``).
        display: the order figures list the group's features in; those it leaves out
            follow, by name.
        display_key: instead of ``display``, the sort key of a feature name within the
            group in figures.

    A group is itself (equal only to itself) and reads as its name (``str(group)``).
    """

    name: str
    label: str
    features: tuple[Feature, ...]
    topological: bool = False
    baselines: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    order: Order = Order.NAME
    last: bool = False
    display: tuple[str, ...] = ()
    display_key: Callable[[str], tuple] | None = None

    def __str__(self) -> str:
        return self.name

    def feature(self, name: str) -> Feature | None:
        """The feature ``name`` of this group, or ``None``."""
        return next((f for f in self.features if f.matches(name)), None)

    @property
    def names(self) -> tuple[str, ...]:
        """Its features' names (patterns as written)."""
        return tuple(f.name for f in self.features)

    def sort_key(self, name: str) -> tuple:
        """Where ``name`` goes among the group's features in figures."""
        if self.display_key is not None:
            return self.display_key(name)
        shown = self.display
        return (shown.index(name) if name in shown else len(shown), name)


def features_of(*pairs: tuple[str, tuple[str, str]], kind: Kind = Kind.CONTINUOUS,
                scopes: tuple[Scope, ...] = (Scope.CHECKPOINT,)) -> tuple[Feature, ...]:
    """Features from ``(name, (description, unit))`` pairs, all of one kind and scope."""
    return tuple(Feature(n, d, u, kind, scopes) for n, (d, u) in pairs)


# ------------------------------------------------------------- persistence diagrams

HOMOLOGY_DIMENSIONS = (0, 1, 2)  # --maxdim is at most 2
SCALED_STATISTICS = ("total_persistence", "mean_persistence", "max_persistence",
                     "std_persistence")  # the statistics that change with scale
DIAGRAM_WORDS = {
    "n_features": ("number of finite bars", "count"),
    "total_persistence": ("sum of the finite bars' lifetimes", "distance"),
    "mean_persistence": ("mean finite lifetime", "distance"),
    "max_persistence": ("longest finite lifetime", "distance"),
    "std_persistence": ("standard deviation of the finite lifetimes", "distance"),
    "persistence_entropy": ("entropy of the normalised lifetimes", "nats"),
    "n_significant": ("bars strictly longer than the median lifetime", "count"),
}
"""Each statistic of a persistence diagram (:data:`~toposig.features.names.DIAGRAM_STATISTICS`):
what it is and its unit, for every family that summarises diagrams."""


def diagram_kind(statistic: str) -> Kind:
    """How a diagram statistic behaves: the bar counts are counts; the others move by a
    bar's share when rounding makes or removes a bar."""
    return Kind.COUNT if statistic.startswith("n_") else Kind.DISCONTINUOUS


def diagram_features(prefix: str, what: str, distance_unit: str = "distance",
                     scopes: tuple[Scope, ...] = (Scope.CHECKPOINT,)) -> tuple[Feature, ...]:
    """The features of the diagrams of dimensions 0 to 2: ``<prefix>h<q>_<statistic>``,
    described as statistics of ``what`` Vietoris–Rips H<q> (``"hidden states'"``), a
    distance in ``distance_unit``."""
    return tuple(
        Feature(f"{prefix}h{q}_{stat}", f"{what} Vietoris–Rips H{q}: {DIAGRAM_WORDS[stat][0]}",
                distance_unit if DIAGRAM_WORDS[stat][1] == "distance" else DIAGRAM_WORDS[stat][1],
                diagram_kind(stat), scopes)
        for q in HOMOLOGY_DIMENSIONS for stat in DIAGRAM_STATISTICS)



# ------------------------------------------------------------------------------ inputs

@dataclass(frozen=True)
class FamilyInputs:
    """What the families of a run take besides the checkpoint.

    Attributes:
        texts: the analysed texts (empty when no family of the run reads them).
        probe_texts: the texts the probe windows are cut from (likewise).
        run: the settings every family shares (texts, device, precision, seed...).
        families: family name -> the family with its settings, for the run's families
            only, in registration order.
        source: where the analysed texts come from when it is not the run's texts file
            or WikiText-2.
    """

    texts: list[str]
    probe_texts: list[str]
    run: RunSettings
    families: Mapping[str, SignatureFamily]
    source: str | None = None

    @property
    def texts_source(self) -> str:
        """Where the analysed texts come from, as ``config.json`` says it: ``source`` when
        given (``"texts given to the monitor"``), else the run's texts file or WikiText-2."""
        return self.source or self.run.texts_source

    def hashes(self, dtype: str, wanted: Iterable[str] | None = None) -> dict[Family, str]:
        """Family -> the settings hash its records are keyed by, for the families of
        ``wanted`` (default: all of them), in their order here; ``dtype`` is the run's
        resolved precision."""
        keep = None if wanted is None else set(map(str, wanted))
        return {Family(f): fam.settings_hash(self, dtype) for f, fam in self.families.items()
                if keep is None or f in keep}

    def with_family(self, family: SignatureFamily) -> FamilyInputs:
        """These inputs with ``family``'s settings in place of its present ones."""
        return replace(self, families={**self.families, family.name: family})

    def texts_for(self, texts: Texts) -> list[str]:
        """The texts of that kind (``[]`` for none)."""
        return {Texts.ANALYSED: self.texts, Texts.PROBE: self.probe_texts}.get(texts, [])

    def of(self, name: str) -> SignatureFamily:
        """The family ``name`` with its settings in this run.

        Raises:
            KeyError: the run does not compute it.
        """
        return self.families[name]


class Loaded(Protocol):
    """A checkpoint ready for the families: loaded once, each part on demand.

    Attributes:
        ckpt: its identity, for the records.
        placement: where and in what precision the model runs.
        stored_loss: the loss stored with it and where it was found (``(None, None)``).
        local_files_only: never reach the Hub for what is not at hand.
    """

    ckpt: Checkpoint
    placement: Placement
    stored_loss: tuple[float | None, str | None]
    local_files_only: bool

    @property
    def load_s(self) -> float:
        """Seconds spent loading so far (for the records' timings)."""

    @property
    def num_parameters(self) -> int | None:
        """Its parameter count, each storage once."""

    @property
    def available(self) -> list[str]:
        """Its 2-D tensor names, for a message when a selection finds none."""

    def matrices(self, include: Sequence[str], exclude: Sequence[str]) -> Mapping[str, Any]:
        """Name -> (out, in) tensor of the weight matrices that ``include`` and
        ``exclude`` choose, as stored."""

    def model(self, *, float32: bool):
        """The model on the run's device: in float32 (``float32``), else in the run's
        precision.

        Raises:
            whatever moving it raises; a checkpoint with no model (a state dict) raises.
        """

    def tokenizer(self):
        """Its tokenizer (loaded once; a failure is raised to every family that asks)."""


class Session(Loaded, Protocol):
    """A :class:`Loaded` checkpoint as the families get it
    (:class:`toposig.families.runner.CheckpointSession`): with the work several families
    share done once."""

    def texts_forward(self, texts: list[str], max_length: int, batch_size: int | str
                      ) -> TextsForward:
        """The texts' forward pass through the model in the run's precision
        (:func:`toposig.model.embedding.texts_forward`), run once per checkpoint."""


# ---------------------------------------------------------------------------- showing it

@dataclass(frozen=True)
class Widening:
    """A setting that ``--extend`` may widen in a study (the embedding's layers): a run
    that differs from the study in it alone computes the union of both, under a new
    settings hash.

    Attributes:
        field: the settings field (``"layers"``).
        option: its command-line option (``"--layers"``).
        parse: a recorded value in its normal form (raises ValueError on a bad one).
        union: the union of two values, in normal form.
        show: a value as the option takes it.
    """

    field: str
    option: str
    parse: Callable[[Any], Any]
    union: Callable[[Any, Any], Any]
    show: Callable[[Any], str]


@dataclass(frozen=True)
class Column:
    """One column of the run's one-screen summary: a header, a format spec for its
    width, the entry's key and the number format."""

    header: str
    width: str
    key: str
    number: str


DEFAULT_KEPT = ("settings_hash", "arrays_file", "settings", "timings_s")
"""What an aggregate entry keeps of a family's record besides its features, by default."""


class SignatureFamily(Settings):
    """One signature family, all of it in one class (see the module). Subclasses are
    frozen dataclasses whose fields are the family's settings.

    Class attributes:
        name: the family's name (``--signatures``, records, ``config.json``).
        options_title: the ``--help`` group of its options.
        settings_key, hash_key: where ``config.json`` keeps its settings and hash
            (default ``<name>_settings``, ``<name>_hash``).
        hash_prefix: the first character of its settings hash (default: its name's).
        order: when it runs on a loaded checkpoint, lowest first (the weights first, on
            the weights as stored; the embedding last, in the run's precision).
        texts: which texts it reads.
        runs_model: it runs the model (needs its config and tokenizer, not a bare state
            dict).
        reads_weights: it analyses the stored weights (the model is then loaded in
            float32 on the CPU first).
        float32: it needs float32 weights (the loss probes).
        probes_loss: it probes the next-token loss (causal models only; opt-in).
        default_on: computed without ``--signatures``: by a model folder or Hub revision,
            and by a plain checkpoint file too when it does not run the model.
        precision_keyed: its settings hash covers the run's precision (a model's own
            precision is known only once the model is in hand).
        target: the quality measure its features are tested against: ``perplexity`` on
            the analysed texts, or the ``loss`` stored with the checkpoint.
        word: what its features are called in prose (``weight`` features; default its
            name).
        groups: its features (:class:`FeatureGroup`).
        matrix_features: what each weight matrix of a record holds (``matrices``).
        columns: what the run's summary shows of it.
        figure: the figure that draws it over training (``feature_evolution``, the figure
            of every family without one of its own, unless it names its own).
        over_training: the features that figure draws (a figure of its own may draw
            others too).
        kept: what an aggregate entry keeps of its record besides the features, under
            its name.
        loss_first: its record's stored loss is the entry's ``loss`` (the weights');
            otherwise it fills ``loss`` only when no family before it did.
        current_features: features every current record of it holds: a finished record
            without one was written before the feature existed and is computed again.
        study_keys: keys of ``config.json`` besides its settings and hash that belong to
            it (kept from the study when a run does not compute it).
        widening: the setting ``--extend`` may widen in a study, if any.
        seeds_global_random: it seeds the process's global random generators while it
            runs (giving them back after), so it cannot run beside training in another
            thread (the live monitor's background measurement refuses it).
        relates_checkpoints: its features relate a model's checkpoints to each other
            (the drift's): a checkpoint's record holds what it measured (its arrays), and
            :meth:`relate` makes the features of a model's aggregate entries from them.
        rough_seconds: the mean seconds per checkpoint of its records (``timings_s.total``)
            on the project's small models (5K-184K parameters) in the committed results
            folders, measured on a 2-core CPU: ``toposig run``'s rough estimate before a
            run (:mod:`toposig.run.estimate`); ``None`` where no committed run has it.
    """

    name: ClassVar[str]
    settings_key: ClassVar[str]
    hash_key: ClassVar[str]
    hash_prefix: ClassVar[str]
    order: ClassVar[int] = 50
    texts: ClassVar[Texts] = Texts.NONE
    runs_model: ClassVar[bool] = True
    reads_weights: ClassVar[bool] = False
    float32: ClassVar[bool] = False
    probes_loss: ClassVar[bool] = False
    default_on: ClassVar[bool] = False
    precision_keyed: ClassVar[bool] = False
    target: ClassVar[str] = "perplexity"
    word: ClassVar[str]
    groups: ClassVar[tuple[FeatureGroup, ...]] = ()
    matrix_features: ClassVar[tuple[Feature, ...]] = ()
    columns: ClassVar[tuple[Column, ...]] = ()
    figure: ClassVar[str] = "feature_evolution"
    over_training: ClassVar[tuple[str, ...]] = ()
    kept: ClassVar[tuple[str, ...]] = DEFAULT_KEPT
    loss_first: ClassVar[bool] = False
    rough_seconds: ClassVar[float | None] = None
    current_features: ClassVar[tuple[str, ...]] = ()
    study_keys: ClassVar[tuple[str, ...]] = ()
    widening: ClassVar[Widening | None] = None
    relates_checkpoints: ClassVar[bool] = False
    seeds_global_random: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if isinstance(name, str):
            cls.settings_key = cls.__dict__.get("settings_key", f"{name}_settings")
            cls.hash_key = cls.__dict__.get("hash_key", f"{name}_hash")
            cls.hash_prefix = cls.__dict__.get("hash_prefix", name[0])
            cls.word = cls.__dict__.get("word", name)

    @property
    def family(self) -> Family:
        """Its name, as records give it."""
        return Family(self.name)

    # --- the settings hash: every setting that changes the numbers, and the inputs

    def hash_payload(self, texts_sha: str | None, dtype: str,
                     tokenizer: str | None = None) -> dict[str, Any]:
        """What its settings hash covers: its ``hashed`` fields, the schema and its name,
        the fingerprint of the texts it reads (``texts_sha``), the run's precision
        (``dtype``) when :attr:`precision_keyed`, and the run's ``tokenizer`` when one is
        given for a family that runs the model (the checkpoint's own otherwise, which
        the fingerprint of the checkpoint covers)."""
        keyed: dict[str, Any] = {**self.hashed_values(), "schema": SCHEMA_VERSION,
                                 "family": self.name}
        if self.texts != Texts.NONE:
            keyed["texts_sha"] = texts_sha
        if self.precision_keyed:
            keyed["dtype"] = dtype
        if self.runs_model and tokenizer is not None:
            keyed["tokenizer"] = tokenizer
        return keyed

    def hash_of(self, texts_sha: str | None, dtype: str, tokenizer: str | None = None) -> str:
        """The short hash of :meth:`hash_payload`: 12 characters starting with
        :attr:`hash_prefix`."""
        blob = json.dumps(self.hash_payload(texts_sha, dtype, tokenizer),
                          sort_keys=True).encode()
        return self.hash_prefix + hashlib.sha256(blob).hexdigest()[:12 - len(self.hash_prefix)]

    def settings_hash(self, inputs: FamilyInputs, dtype: str) -> str:
        """The short hash its records are keyed by, of its settings and the ``inputs``
        it reads (:meth:`hash_of`); ``dtype`` is the run's resolved precision."""
        from toposig.sources.corpus import texts_fingerprint

        texts = inputs.texts_for(self.texts)
        sha = texts_fingerprint(texts) if self.texts != Texts.NONE else None
        return self.hash_of(sha, dtype, inputs.run.tokenizer)

    @classmethod
    def run_keys(cls) -> tuple[str, ...]:
        """The run's settings its numbers depend on: what chooses the texts it reads (the
        analysed ones: their file, number and length filter; the probe texts: their file
        and filter) and, for a family that runs the model, the tokenizer."""
        texts = {Texts.ANALYSED: ("texts", "n_texts", "min_chars"),
                 Texts.PROBE: ("texts", "min_chars")}.get(cls.texts, ())
        return (*texts, *(("tokenizer",) if cls.runs_model else ()))

    def view(self, inputs: FamilyInputs, dtype: str) -> dict[str, Any]:
        """Its settings as ``config.json`` records them, with the run's settings its
        numbers depend on (:meth:`run_keys`) and, when :attr:`precision_keyed`, the
        resolved ``dtype``: what :meth:`toposig.run.study.Study.check` names when a
        study's hash differs."""
        run = inputs.run.to_dict()
        return {**self.to_dict(), **{k: run[k] for k in self.run_keys()},
                **({"dtype": dtype} if self.precision_keyed else {})}

    @classmethod
    def study_view(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """The same of a study (its ``config.json``, ``config``). A study written before
        the run's settings had a key of their own (``run_settings``) kept them in the
        embedding's (``settings``)."""
        run = config.get("run_settings") or config.get("settings") or {}
        return {**(config.get(cls.settings_key) or {}),
                **{k: run.get(k) for k in cls.run_keys()},
                **({"dtype": config.get("dtype")} if cls.precision_keyed else {})}

    def study_fields(self, inputs: FamilyInputs, dtype: str) -> dict[str, Any]:
        """Fields of ``config.json`` besides its settings and hash that belong to it
        (:attr:`study_keys`), for a run that computes it: by default the run's resolved
        precision, ``dtype``, when it is one of them (a family on the hidden states in
        the run's precision has it in its hash, as the embedding)."""
        return {"dtype": dtype} if "dtype" in self.study_keys else {}

    # --- running it

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        """Its record and arrays for one loaded checkpoint (the record starts with
        :func:`toposig.records.record_header` of :attr:`family`).

        Whatever the measurement raises goes to the caller, who records it as this
        family's failure of the checkpoint.
        """
        raise NotImplementedError(f"{type(self).__name__} does not say how it computes")

    @classmethod
    def relate(cls, arrays: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
               ) -> list[dict[str, float | None]]:
        """For a family that :attr:`relates_checkpoints`: the features of each of a
        model's checkpoints, in step order, from their records' ``arrays`` and the
        ``settings`` the records were computed with."""
        raise NotImplementedError(f"{cls.__name__} does not relate checkpoints")

    @classmethod
    def missing_features(cls, record: Mapping) -> list[str]:
        """The :attr:`current_features` a finished record of it lacks (``[]``: current)."""
        features = record.get("features")
        have = features if isinstance(features, Mapping) else {}
        return [k for k in cls.current_features if k not in have]

    # --- showing it

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        """One line of the run's summary: what it computed, with its settings hash."""
        shown = ", ".join(f"{k} {v}" for k, v in self.to_dict().items())
        return f"{self.name}: {shown}, settings hash: {settings_hash}"

    @classmethod
    def summary_columns(cls, entries: Sequence[Record]) -> tuple[Column, ...]:
        """The summary's columns of it, for these aggregate ``entries``."""
        return cls.columns

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        """A few words on one of its records, for a measurement's one-line summary (what
        it was computed on, a headline number)."""
        return []

    @classmethod
    def mean_time(cls, entries: Sequence[Record]) -> float | None:
        """Mean seconds per checkpoint of its records in the aggregate ``entries``."""
        times = [part.timings_s["total"] for r in entries
                 if (part := r.parts.get(cls.name)) and "total" in part.timings_s]
        return sum(times) / len(times) if times else None

    @classmethod
    def all_features(cls) -> tuple[Feature, ...]:
        """Every feature it declares: its groups' and its matrices'."""
        return (*(f for g in cls.groups for f in g.features), *cls.matrix_features)


def with_stored_loss(loaded: Loaded, result: CheckpointOutput) -> CheckpointOutput:
    """``result`` with the loss stored with the checkpoint kept in its record
    (``checkpoint_loss`` and where it was found, ``checkpoint_loss_key``): what a family
    that probes the loss keeps beside its own."""
    loss, loss_key = loaded.stored_loss
    result.record |= {"checkpoint_loss": loss, "checkpoint_loss_key": loss_key}
    return result


def hidden_state_record(family: SignatureFamily, loaded: Session, inputs: FamilyInputs,
                        forward: TextsForward, layer: int, features: dict,
                        features_s: float = 0.0) -> dict[str, Any]:
    """The record of a family measured on the analysed texts' shared forward pass
    (``forward``) at hidden state ``layer``: its header, the texts' count, the layer and
    the model's layer names, its ``features``, its settings, the run's precision and its
    timings (``features_s``: seconds of its own work after the pass)."""
    from toposig.records import now_iso, record_header
    from toposig.sources.checkpoints import checkpoint_identity

    model = loaded.model(float32=False)
    return {
        **record_header(family.family, checkpoint_identity(loaded.ckpt)),
        "n_texts": len(inputs.texts),
        "layer": layer,
        "layer_names": forward.result.layer_names,
        "model_type": getattr(model.config, "model_type", None),
        "features": features,
        "settings": family.to_dict(),
        "dtype": loaded.placement.dtype,
        "timings_s": {"load": loaded.load_s, "forward": forward.seconds,
                      "features": features_s,
                      "total": loaded.load_s + forward.seconds + features_s},
        "finished_at": now_iso(),
        "num_parameters": loaded.num_parameters,
    }


def probe_loss(loaded: Loaded, inputs: FamilyInputs, family: SignatureFamily,
               analyse: Callable[..., CheckpointOutput], texts: list[str] | None = None
               ) -> CheckpointOutput:
    """What a family that probes the loss computes: ``analyse`` (``analyse_landscape``,
    ``analyse_gradients`` of :mod:`toposig.model.loss_probes`) of the float32 model on
    the run's device, on ``texts`` (default: the probe texts), with the checkpoint's
    stored loss kept."""
    tokenizer = loaded.tokenizer()
    model = loaded.model(float32=True)
    return with_stored_loss(loaded, analyse(
        loaded.ckpt, model, tokenizer, inputs.probe_texts if texts is None else texts, family,
        device=loaded.placement.device, load_s=loaded.load_s, family=family.name))


FamilyType = type[SignatureFamily]
__all__ = ["Texts", "Kind", "Scope", "Feature", "Order", "FeatureGroup", "features_of",
           "HOMOLOGY_DIMENSIONS", "SCALED_STATISTICS", "DIAGRAM_WORDS", "diagram_kind",
           "diagram_features",
           "FamilyInputs", "Loaded", "Session", "Widening", "Column", "DEFAULT_KEPT",
           "SignatureFamily", "FamilyType", "with_stored_loss", "hidden_state_record",
           "probe_loss"]
