"""The statistics of a study, typed: what ``data/statistics.json`` holds, validated on read.

:func:`toposig.analysis.compute.compute_statistics` makes them from the records;
``toposig analyze`` rounds and writes them; ``toposig.open(folder).statistics``, the
summary and the figures read them. :meth:`Statistics.from_json` is the one way in: it
refuses a damaged file's content with a :class:`StatisticsError` that says what is wrong.

Typed here: which records and settings they come from, the target, the per-model summary
(:class:`ModelSummary`), the features by family, the correlations with the target
(:class:`Correlations` of :class:`Correlation`), the controlled tests
(:mod:`toposig.records.controlled`), the seed ensembles (:mod:`toposig.records.ensembles`,
a study with seeds only), the positive controls (:mod:`toposig.records.positive_controls`,
a study whose checkpoints state a ground truth only), and the sections of
:mod:`toposig.records.sections` (``stability``, ``scaling``, ``phases``, ``prediction``,
``prediction_by_feature``, ``wasserstein``, ``weight_wasserstein``). ``notes``, which says
what each section holds, is a read-only mapping of texts. Like a :class:`Record`, the
statistics are read by attribute, not as a mapping
(:class:`toposig.records.vocabulary.JsonView`); :meth:`Statistics.to_json` gives their
JSON back unchanged, and :func:`about_of` reads what partial JSON says about itself.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toposig.records.controlled import Controlled
from toposig.records.ensembles import Ensembles
from toposig.records.positive_controls import PositiveControls
from toposig.records.sections import (
    Distances,
    Phases,
    Prediction,
    PredictionByFeature,
    Scaling,
    SectionError,
    Stability,
)
from toposig.records.vocabulary import JsonView, is_number

__all__ = ["StatisticsError", "Correlation", "Correlations", "ModelSummary", "Statistics",
           "SECTIONS", "statistics_problem", "scaling_of", "stability_of", "phases_of",
           "prediction_of", "prediction_by_feature_of", "wasserstein_of", "controlled_of",
           "ensembles_of", "positive_controls_of", "models_of", "correlations_of",
           "About", "about_of", "TYPED_SECTIONS", "typed_section"]


SECTIONS = ("controlled", "phases", "stability", "scaling", "prediction",
            "prediction_by_feature", "wasserstein", "weight_wasserstein", "ensembles",
            "positive_controls", "notes")
"""The sections of the statistics besides the models, features and correlations (each
must be an object)."""

_GROUP_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a feature group's name (the registry's)
_COEFFICIENTS = ("spearman_r", "spearman_p", "pearson_r", "pearson_p", "pearson_log_r",
                 "pearson_log_p")


_TYPED: dict[str, Callable[[object], Any]] = {
    "controlled": Controlled.from_json, "ensembles": Ensembles.from_json,
    "positive_controls": PositiveControls.from_json,
    "stability": Stability.from_json, "scaling": Scaling.from_json,
    "phases": Phases.from_json, "prediction": Prediction.from_json,
    "prediction_by_feature": PredictionByFeature.from_json,
    "wasserstein": Distances.from_json,
    "weight_wasserstein": functools.partial(Distances.from_json, where="weight_wasserstein")}
"""The readers of the typed sections, by name (:mod:`toposig.records.sections`,
:mod:`~toposig.records.controlled`, :mod:`~toposig.records.ensembles`,
:mod:`~toposig.records.positive_controls`)."""

TYPED_SECTIONS = tuple(_TYPED)
"""The sections read into their own classes (:func:`typed_section`)."""


class StatisticsError(ValueError):
    """Statistics that are not sound: the message says which part and why."""


@dataclass(frozen=True)
class Correlation:
    """A feature against the target over checkpoints (``None``: undefined, e.g. fewer
    than 3 checkpoints or a constant feature).

    Attributes:
        n: the checkpoints with both values.
        spearman_r, spearman_p: Spearman's rho and its two-sided p.
        spearman_p_method: how that p was computed (``exact``, ``t-approximation``...).
        pearson_r, pearson_p: Pearson's r with the target, and its p.
        pearson_log_r, pearson_log_p: Pearson's r with the target's logarithm.
    """

    n: int
    spearman_r: float | None = None
    spearman_p: float | None = None
    spearman_p_method: str | None = None
    pearson_r: float | None = None
    pearson_p: float | None = None
    pearson_log_r: float | None = None
    pearson_log_p: float | None = None

    @classmethod
    def from_json(cls, obj: dict) -> Correlation:
        return cls(n=obj["n"], spearman_p_method=obj.get("spearman_p_method"),
                   **{k: obj.get(k) for k in _COEFFICIENTS})


@dataclass(frozen=True)
class Correlations:
    """Every feature's correlation with one target.

    Attributes:
        target: the quality measure (``perplexity``, ``loss``, ``mlm_loss``...).
        per_model: model label -> feature -> its correlation over that model's
            checkpoints.
        pooled: feature -> its correlation over every checkpoint of every model.
    """

    target: str
    per_model: Mapping[str, Mapping[str, Correlation]]
    pooled: Mapping[str, Correlation]

    @classmethod
    def from_json(cls, obj: dict) -> Correlations:
        return cls(
            target=obj["target"],
            per_model=MappingProxyType({m: _correlations(c) for m, c in
                                        obj["per_model"].items()}),
            pooled=_correlations(obj["pooled"]))

    def strongest(self, top: int = 8) -> list[tuple[str, Correlation]]:
        """The ``top`` pooled correlations by ``|spearman_r|``, strongest first."""
        defined = [(f, c) for f, c in self.pooled.items() if c.spearman_r is not None]
        return sorted(defined, key=lambda fc: -abs(fc[1].spearman_r or 0.0))[:top]


@dataclass(frozen=True)
class ModelSummary:
    """One model of the study.

    Attributes:
        model: the model as the run named it.
        n_checkpoints: its checkpoints analysed.
        steps: their steps, in order (``None``: a checkpoint without one).
        num_parameters: its parameters.
        final_step: the last checkpoint's step.
        final_quality: the last checkpoint's quality, by measure (``perplexity``,
            ``loss``, ``mlm_loss``, an import's target).
        final_features: the last checkpoint's features.
    """

    model: str
    n_checkpoints: int
    steps: tuple[int | None, ...]
    num_parameters: int | None
    final_step: int | None
    final_quality: Mapping[str, float | None]
    final_features: Mapping[str, float | None]

    @classmethod
    def from_json(cls, obj: dict) -> ModelSummary:
        return cls(model=obj["model"], n_checkpoints=obj["n_checkpoints"],
                   steps=tuple(obj["steps"]), num_parameters=obj.get("num_parameters"),
                   final_step=obj.get("final_step"),
                   final_quality=MappingProxyType(
                       {k.removeprefix("final_"): v for k, v in obj.items()
                        if k.startswith("final_") and k not in ("final_step",
                                                                "final_features")}),
                   final_features=MappingProxyType(dict(obj.get("final_features") or {})))


def _correlations(by_feature: dict) -> Mapping[str, Correlation]:
    return MappingProxyType({f: Correlation.from_json(c) for f, c in by_feature.items()})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _correlation_problem(c: object) -> str | None:
    if not isinstance(c, dict) or not _is_int(c.get("n")):
        return "has no count n of checkpoints"
    bad = [k for k in _COEFFICIENTS if c.get(k) is not None and not is_number(c[k])]
    return f"has {bad[0]} = {c[bad[0]]!r}, not a number" if bad else None


def _correlations_problem(obj: object) -> str | None:
    """Why correlations are unusable (``they ...``), or ``None``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("target"), str):
        return "are not an object naming a target"
    per_model, pooled = obj.get("per_model"), obj.get("pooled")
    if not isinstance(per_model, dict) or not isinstance(pooled, dict):
        return "lack per_model or pooled objects"
    for scope, by_feature in [*per_model.items(), ("pooled", pooled)]:
        if not isinstance(by_feature, dict):
            return f"hold {scope} correlations that are not an object"
        for feature, c in by_feature.items():
            if problem := _correlation_problem(c):
                return f"hold a {scope} correlation of {feature} that {problem}"
    return None


def _model_problem(summary: object) -> str | None:
    if not isinstance(summary, dict) or not isinstance(summary.get("model"), str):
        return "is not an object naming its model"
    steps = summary.get("steps")
    if not _is_int(summary.get("n_checkpoints")) or not isinstance(steps, list) \
            or not all(s is None or _is_int(s) for s in steps):
        return "has no checkpoint count or steps"
    quality = {k: v for k, v in summary.items()
               if k.startswith("final_") and k not in ("final_step", "final_features")}
    bad = [k for k, v in quality.items() if v is not None and not is_number(v)]
    if bad:
        return f"has {bad[0]} = {quality[bad[0]]!r}, not a number"
    features = summary.get("final_features")
    if features is not None and (not isinstance(features, dict) or not all(
            v is None or is_number(v) for v in features.values())):
        return "has final_features that are not numbers by name"
    return None


def _models_problem(models: object) -> str | None:
    """Why the per-model summaries are unusable (``have ...``), or ``None``."""
    if not isinstance(models, dict):
        return "have models that are not an object"
    for label, summary in models.items():
        if problem := _model_problem(summary):
            return f"have a model {label!r} that {problem}"
    return None


def statistics_problem(obj: object) -> str | None:
    """What makes parsed statistics unusable, or ``None`` when they are sound: an object
    whose ``models``, ``features``, ``correlations`` (and ``correlations_by_target``) have
    the shapes :class:`Statistics` reads, whose target is named, whose other sections
    (:data:`SECTIONS`) are objects and whose typed sections read."""
    return _checked(obj)[0]


def _checked(obj: object) -> tuple[str | None, dict[str, Any]]:
    """:func:`statistics_problem`'s answer, and the typed sections read on the way (by
    name; each read once)."""
    typed: dict[str, Any] = {}
    problem = _problem(obj, typed)
    return problem, typed


def _problem(obj: object, typed: dict[str, Any]) -> str | None:
    if not isinstance(obj, dict):
        return f"hold a {type(obj).__name__}, not a JSON object"
    if not isinstance(obj.get("target"), str):
        return "name no target"
    if obj.get("target_better") not in (None, "lower", "higher"):
        return f"say the target is better {obj['target_better']!r}, not lower or higher"
    if problem := _models_problem(obj.get("models")):
        return problem
    families = obj.get("features")
    if not isinstance(families, dict) or not all(
            isinstance(k, str) and _GROUP_NAME.fullmatch(k) and isinstance(v, list)
            and all(isinstance(f, str) for f in v) for k, v in families.items()):
        return "have features that are not lists of names by feature group"
    if problem := _correlations_problem(obj.get("correlations")):
        return f"have correlations with the target: they {problem}"
    by_target = obj.get("correlations_by_target", {})
    if not isinstance(by_target, dict):
        return "have correlations_by_target that are not an object"
    for target, corr in by_target.items():
        if problem := _correlations_problem(corr):
            return f"have correlations with {target}: they {problem}"
    damaged = [k for k in SECTIONS if k in obj and not isinstance(obj[k], dict)]
    if damaged:
        return f"have sections {', '.join(damaged)} that are not objects"
    if not all(isinstance(v, str) for v in obj.get("notes", {}).values()):
        return "have notes that are not texts"
    for name, read in _TYPED.items():
        if name in obj:
            try:
                typed[name] = read(obj[name])
            except SectionError as exc:
                return f"have a {name} section that does not read: {exc}"
    hashes = obj.get("settings_hash", [])
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        return "have a settings_hash that is not a list of hashes"
    if obj.get("records_sha256") is not None and not isinstance(obj["records_sha256"], str):
        return "have a records_sha256 that is not a string"
    return None


@dataclass(frozen=True, eq=False)
class Statistics(JsonView):
    """A study's statistics (see the module). Build them with :meth:`from_json`; read
    them by attribute.

    Attributes:
        records_sha256: the digest of the records they were computed from
            (:func:`toposig.analysis.compute.records_digest`).
        settings_hashes: the settings hashes of those records.
        target: the quality measure correlated with.
        target_better: ``lower`` or ``higher`` (``None`` in files older than it).
        models: label -> :class:`ModelSummary`.
        features: the feature names, by feature family (those with any).
        correlations: every feature's correlation with ``target``.
        correlations_by_target: the same with the other quality measures the records
            hold, by measure.
        controlled: the ``controlled`` section
            (:class:`~toposig.records.controlled.Controlled`), or ``None`` when the
            statistics have none.
        stability: the ``stability`` section (:class:`~toposig.records.sections.Stability`;
            empty without bootstrap resamples), or ``None`` when the statistics have none.
        scaling: the ``scaling`` section (:class:`~toposig.records.sections.Scaling`), or
            ``None`` when the statistics have none.
        phases: the ``phases`` section (:class:`~toposig.records.sections.Phases`), or
            ``None`` when the statistics have none.
        prediction: the ``prediction`` section
            (:class:`~toposig.records.sections.Prediction`), or ``None``.
        prediction_by_feature: the ``prediction_by_feature`` section
            (:class:`~toposig.records.sections.PredictionByFeature`), or ``None``.
        wasserstein, weight_wasserstein: the distances between consecutive checkpoints'
            diagrams (:class:`~toposig.records.sections.Distances`), or ``None``.
        ensembles: the across-seeds tests of a study with seed ensembles
            (:class:`~toposig.records.ensembles.Ensembles`), or ``None``.
        positive_controls: the alignment with a stated ground truth
            (:class:`~toposig.records.positive_controls.PositiveControls`), or ``None``.
        notes: what each section holds, by name (free text).
    """

    target: str
    models: Mapping[str, ModelSummary]
    features: Mapping[str, tuple[str, ...]]
    correlations: Correlations
    correlations_by_target: Mapping[str, Correlations] = field(default_factory=dict)
    target_better: str | None = None
    records_sha256: str | None = None
    settings_hashes: tuple[str, ...] = ()
    controlled: Controlled | None = None
    stability: Stability | None = None
    scaling: Scaling | None = None
    phases: Phases | None = None
    prediction: Prediction | None = None
    prediction_by_feature: PredictionByFeature | None = None
    wasserstein: Distances | None = None
    weight_wasserstein: Distances | None = None
    ensembles: Ensembles | None = None
    positive_controls: PositiveControls | None = None
    notes: Mapping[str, str] = field(default_factory=dict)
    json: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: object, *, where: str = "") -> Statistics:
        """The statistics of a parsed JSON object (``Statistics`` are returned as they
        are).

        Args:
            obj: what was read (or what ``compute_statistics`` computed).
            where: the file it came from, to start the error message with.

        Raises:
            StatisticsError: :func:`statistics_problem` has an answer for it.
        """
        if isinstance(obj, Statistics):
            return obj
        problem, typed = _checked(obj)
        if problem:
            raise StatisticsError(f"{where + ': ' if where else ''}the statistics {problem}")
        assert isinstance(obj, dict)
        data = copy.deepcopy(obj)
        return cls(
            target=data["target"],
            models=MappingProxyType({label: ModelSummary.from_json(m)
                                     for label, m in data["models"].items()}),
            features=MappingProxyType({k: tuple(v)
                                       for k, v in data["features"].items()}),
            correlations=Correlations.from_json(data["correlations"]),
            correlations_by_target=MappingProxyType(
                {t: Correlations.from_json(c)
                 for t, c in data.get("correlations_by_target", {}).items()}),
            target_better=data.get("target_better"),
            records_sha256=data.get("records_sha256"),
            settings_hashes=tuple(data.get("settings_hash", ())),
            **typed,
            notes=MappingProxyType(dict(data.get("notes", {}))),
            json=MappingProxyType(data),
        )

    def correlations_with(self, target: str) -> Correlations:
        """The correlations with ``target`` (the main target or another measure).

        Raises:
            KeyError: the records hold no such measure.
        """
        if target == self.target:
            return self.correlations
        if target not in self.correlations_by_target:
            known = [self.target, *self.correlations_by_target]
            raise KeyError(f"no correlations with {target!r}; these are with "
                           f"{', '.join(known)}")
        return self.correlations_by_target[target]

    def __repr__(self) -> str:
        n_features = sum(len(v) for v in self.features.values())
        strongest = self.correlations.strongest(1)
        best = (f"; strongest pooled {strongest[0][0]} rho={strongest[0][1].spearman_r:+.3f}"
                if strongest else "")
        return (f"Statistics({len(self.models)} model(s), {n_features} features against "
                f"{self.target}{best})")



@dataclass(frozen=True)
class About:
    """What statistics, whole or partial, say about themselves: the fields a summary's
    header reads, and which sections they hold.

    Attributes:
        target: the quality measure correlated with, or ``None``.
        target_better: ``lower`` or ``higher``, or ``None``.
        records_sha256: the digest of the records they come from, or ``None``.
        settings_hashes: the settings hashes of those records.
        notes: what each section holds, by name.
        sections: the names of the sections present (:data:`SECTIONS`, ``models``,
            ``correlations``...), damaged or not.
    """

    target: str | None = None
    target_better: str | None = None
    records_sha256: str | None = None
    settings_hashes: tuple[str, ...] = ()
    notes: Mapping[str, str] = field(default_factory=dict)
    sections: frozenset[str] = frozenset()


def about_of(statistics: Statistics | Mapping[str, Any]) -> About:
    """:class:`About` typed statistics, or their JSON (whole, partial or damaged: a field
    of the wrong type reads as absent)."""
    if isinstance(statistics, Statistics):
        return About(statistics.target, statistics.target_better, statistics.records_sha256,
                     tuple(h for h in statistics.settings_hashes if h), statistics.notes,
                     frozenset(statistics.json))

    def text(key: str) -> str | None:
        value = statistics.get(key)
        return value if isinstance(value, str) else None

    hashes = statistics.get("settings_hash")
    notes = statistics.get("notes")
    return About(
        target=text("target"), target_better=text("target_better"),
        records_sha256=text("records_sha256"),
        settings_hashes=tuple(h for h in hashes if isinstance(h, str) and h)
        if isinstance(hashes, list) else (),
        notes=MappingProxyType({k: v for k, v in notes.items() if isinstance(v, str)}
                               if isinstance(notes, dict) else {}),
        sections=frozenset(statistics))


def typed_section(statistics: Statistics | Mapping[str, Any], name: str) -> Any:
    """Section ``name`` (one of :data:`TYPED_SECTIONS`) of typed statistics or of their
    JSON (whole or partial), typed; ``None`` when they have none.

    Raises:
        SectionError: the section is damaged.
    """
    if isinstance(statistics, Statistics):
        return getattr(statistics, name)
    return _TYPED[name](statistics[name]) if name in statistics else None


def controlled_of(statistics: Statistics | Mapping[str, Any]) -> Controlled | None:
    """The ``controlled`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "controlled")


def ensembles_of(statistics: Statistics | Mapping[str, Any]) -> Ensembles | None:
    """The ``ensembles`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "ensembles")


def positive_controls_of(statistics: Statistics | Mapping[str, Any]
                         ) -> PositiveControls | None:
    """The ``positive_controls`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "positive_controls")


def stability_of(statistics: Statistics | Mapping[str, Any]) -> Stability | None:
    """The ``stability`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "stability")


def scaling_of(statistics: Statistics | Mapping[str, Any]) -> Scaling | None:
    """The ``scaling`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "scaling")


def phases_of(statistics: Statistics | Mapping[str, Any]) -> Phases | None:
    """The ``phases`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "phases")


def prediction_of(statistics: Statistics | Mapping[str, Any]) -> Prediction | None:
    """The ``prediction`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "prediction")


def prediction_by_feature_of(statistics: Statistics | Mapping[str, Any]
                             ) -> PredictionByFeature | None:
    """The ``prediction_by_feature`` section, typed (see :func:`typed_section`)."""
    return typed_section(statistics, "prediction_by_feature")


def wasserstein_of(statistics: Statistics | Mapping[str, Any]) -> Distances | None:
    """The ``wasserstein`` section (hidden-state diagrams), typed (see
    :func:`typed_section`)."""
    return typed_section(statistics, "wasserstein")


def models_of(statistics: Statistics | Mapping[str, Any]) -> Mapping[str, ModelSummary] | None:
    """The per-model summaries (label -> :class:`ModelSummary`) of typed statistics or of
    their JSON (whole or partial); ``None`` when they have none.

    Raises:
        StatisticsError: the JSON's ``models`` are damaged.
    """
    if isinstance(statistics, Statistics):
        return statistics.models
    if "models" not in statistics:
        return None
    models = statistics["models"]
    if problem := _models_problem(models):
        raise StatisticsError(f"the statistics {problem}")
    return MappingProxyType({label: ModelSummary.from_json(m) for label, m in models.items()})


def correlations_of(statistics: Statistics | Mapping[str, Any]) -> Correlations | None:
    """The correlations with the target of typed statistics or of their JSON (whole or
    partial); ``None`` when they have none.

    Raises:
        StatisticsError: the JSON's ``correlations`` are damaged.
    """
    if isinstance(statistics, Statistics):
        return statistics.correlations
    if "correlations" not in statistics:
        return None
    if problem := _correlations_problem(statistics["correlations"]):
        raise StatisticsError(f"the statistics have correlations with the target: they "
                              f"{problem}")
    return Correlations.from_json(statistics["correlations"])
