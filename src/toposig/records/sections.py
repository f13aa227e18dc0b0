"""Sections of ``data/statistics.json``, typed: what the report reads by attribute.

Each section's class is built with ``from_json`` from the section's JSON (as
:func:`toposig.analysis.compute.compute_statistics` writes it), which refuses a damaged
section with a :class:`SectionError` naming what is wrong; the summary turns that into a
note, so one damaged section never hides the others. Typed so far: ``stability``
(:class:`Stability`, per model and feature a :class:`FeatureStability`), ``scaling``
(:class:`Scaling` of :class:`PowerLawFit`), ``phases`` (:class:`Phases`, per model a
:class:`ModelPhases`: :class:`PiecewiseFit`, :class:`Collapse`, :class:`RateOfChange`),
``prediction`` (:class:`Prediction` of :class:`FractionPrediction` and
:class:`Forecast`), ``prediction_by_feature`` (:class:`PredictionByFeature`), and
``wasserstein`` and ``weight_wasserstein`` (:class:`Distances` of
:class:`DiagramDistance`: the distance of each homology dimension is read from its key
here, ``h1_wasserstein`` -> ``linf[1]``, so no reader builds a key). The ``controlled``
section has its own module (:mod:`toposig.records.controlled`); the readers both use are
in :mod:`toposig.records.reading`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from toposig.records import reading as rd
from toposig.records.reading import SectionError

__all__ = ["SectionError", "FeatureStability", "Stability", "PowerLawFit", "Scaling",
           "PiecewiseFit", "Collapse", "StepChange", "RateOfChange", "ModelPhases", "Phases",
           "Forecast", "FractionPrediction", "Prediction", "PredictionByFeature",
           "DiagramDistance", "Distances"]


@dataclass(frozen=True)
class FeatureStability:
    """How far a feature's checkpoint-to-checkpoint changes rise above its bootstrap noise
    over texts, for one model (``--resamples B``); descriptive, no test.

    Attributes:
        median_se: the median over checkpoints of the bootstrap standard error.
        median_abs_change: the median |change| between consecutive checkpoints.
        change_to_se: their ratio (``None`` when the s.e. is 0).
        resolved_share: the share of changes with |ΔF| > 1.96·sqrt(se_a² + se_b²).
        range_to_se: the whole trajectory's range over the median s.e.
        n_pairs: consecutive checkpoint pairs compared.
    """

    median_se: float | None
    median_abs_change: float | None
    change_to_se: float | None
    resolved_share: float | None
    range_to_se: float | None
    n_pairs: int | None

    @classmethod
    def from_json(cls, obj: object, where: str = "stability") -> FeatureStability:
        obj = rd.mapping(obj, where)
        numbers = {f.name: rd.number(obj, f.name, where) for f in fields(cls)
                   if f.name != "n_pairs"}
        return cls(**numbers, n_pairs=rd.count(obj, "n_pairs", where))


@dataclass(frozen=True)
class Stability:
    """The ``stability`` section: model label -> feature -> :class:`FeatureStability`
    (empty when the run had no bootstrap resamples of the texts)."""

    per_model: Mapping[str, Mapping[str, FeatureStability]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object) -> Stability:
        return cls(rd.nested(obj, "stability", FeatureStability.from_json))


@dataclass(frozen=True)
class PowerLawFit:
    """A feature's final-checkpoint value against parameter count N: f(N) = a·N^b (+ c).

    Attributes:
        a, b, c: the fit (``c`` 0 for the no-offset law); ``None`` when not fitted.
        r2: R² in the original space.
        spearman_r, spearman_p, spearman_p_method: Spearman ρ of value vs N, two-sided.
        n: the models fitted.
        model: ``a*N^b`` or ``a*N^b+c``.
        models: the models used, by increasing size.
        reason: why there is no fit (too few points, non-positive values), or ``None``.
        note: what the reader should know of the fit (the offset fit was refused).
    """

    a: float | None = None
    b: float | None = None
    c: float | None = None
    r2: float | None = None
    spearman_r: float | None = None
    spearman_p: float | None = None
    spearman_p_method: str | None = None
    n: int | None = None
    model: str | None = None
    models: tuple[str, ...] = ()
    reason: str | None = None
    note: str | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "scaling fit") -> PowerLawFit:
        obj = rd.mapping(obj, where)
        models = obj.get("models") or ()
        if not isinstance(models, list | tuple) or not all(isinstance(m, str) for m in models):
            raise SectionError(f"{where}: models is {models!r}, not a list of labels")
        return cls(**{k: rd.number(obj, k, where) for k in ("a", "b", "c", "r2", "spearman_r",
                                                          "spearman_p")},
                   spearman_p_method=rd.text(obj, "spearman_p_method", where),
                   n=rd.count(obj, "n", where), model=rd.text(obj, "model", where),
                   models=tuple(models), reason=rd.text(obj, "reason", where),
                   note=rd.text(obj, "note", where))


@dataclass(frozen=True)
class Scaling:
    """The ``scaling`` section: final-checkpoint values against model size.

    Attributes:
        n_models: the models with a size.
        num_parameters: model label -> parameter count.
        fits: feature (or ``final_loss``, ``final_perplexity``) -> :class:`PowerLawFit`.
        reason: why nothing was fitted (fewer than three sizes), or ``None``.
    """

    n_models: int | None = None
    num_parameters: Mapping[str, float | None] = field(default_factory=dict)
    fits: Mapping[str, PowerLawFit] = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def from_json(cls, obj: object) -> Scaling:
        obj = rd.mapping(obj, "scaling")
        sizes = rd.mapping(obj.get("num_parameters") or {}, "scaling num_parameters")
        return cls(
            n_models=rd.count(obj, "n_models", "scaling"),
            num_parameters=MappingProxyType({m: rd.number(sizes, m, "scaling num_parameters")
                                             for m in sizes}),
            fits=MappingProxyType({
                name: PowerLawFit.from_json(fit, f"scaling fit of {name}")
                for name, fit in rd.mapping(obj.get("fits") or {}, "scaling fits").items()}),
            reason=rd.text(obj, "reason", "scaling"))


@dataclass(frozen=True)
class PiecewiseFit:
    """A continuous three-segment least-squares fit of a feature against log(1 + step)
    (:func:`toposig.analysis.phases.piecewise_linear_fit`).

    Attributes:
        breakpoints: where the slope changes, in log(1 + step).
        breakpoint_steps: the same, as training steps.
        slopes: per segment, per unit log(1 + step).
        intercept: the value at log(1 + step) = 0.
        sse: the residual sum of squares.
        r2: R².
        n: the checkpoints fitted.
        reason: why there is no fit, or ``None``.
    """

    breakpoints: tuple[float | None, ...] = ()
    breakpoint_steps: tuple[float | None, ...] = ()
    slopes: tuple[float | None, ...] = ()
    intercept: float | None = None
    sse: float | None = None
    r2: float | None = None
    n: int | None = None
    reason: str | None = None

    @property
    def usable(self) -> bool:
        """Whether the fit can be drawn: an intercept, and one slope more than breakpoints,
        all numbers."""
        return (self.intercept is not None and bool(self.slopes)
                and len(self.slopes) == len(self.breakpoints) + 1
                and None not in self.slopes and None not in self.breakpoints)

    @classmethod
    def from_json(cls, obj: object, where: str = "phase fit") -> PiecewiseFit:
        obj = rd.mapping(obj, where)
        return cls(breakpoints=rd.numbers(obj, "breakpoints", where),
                   breakpoint_steps=rd.numbers(obj, "breakpoint_steps", where),
                   slopes=rd.numbers(obj, "slopes", where),
                   intercept=rd.number(obj, "intercept", where), sse=rd.number(obj, "sse", where),
                   r2=rd.number(obj, "r2", where), n=rd.count(obj, "n", where),
                   reason=rd.text(obj, "reason", where))


@dataclass(frozen=True)
class Collapse:
    """A feature's dip and regrowth across training: its first value, its minimum and the
    step of it, its last value, depth = minimum / first, regrowth = last / minimum."""

    first: float | None = None
    min: float | None = None
    min_step: float | None = None
    last: float | None = None
    depth: float | None = None
    regrowth: float | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "collapse") -> Collapse:
        return rd.of_numbers(cls, obj, where)


@dataclass(frozen=True)
class StepChange:
    """A value's change between two consecutive checkpoints."""

    step_from: float | None
    step_to: float | None
    change: float | None

    @classmethod
    def from_json(cls, obj: object, where: str = "change") -> StepChange:
        return rd.of_numbers(cls, obj, where)


@dataclass(frozen=True)
class RateOfChange:
    """Peak and diminishing-returns points of a value's change between checkpoints
    (:func:`toposig.analysis.phases.rate_of_change_phases`), fractions of the final step.

    Attributes:
        feature: the value (``np_mean`` or ``np_seed_mean``).
        peak_step, peak_change, peak_fraction: the pair with the largest |Δ|.
        diminishing_step, diminishing_fraction: the first later pair with |Δ| below
            ``threshold`` × the peak's.
        threshold: that fraction.
        changes: every consecutive change.
    """

    feature: str | None = None
    peak_step: float | None = None
    peak_change: float | None = None
    peak_fraction: float | None = None
    diminishing_step: float | None = None
    diminishing_fraction: float | None = None
    threshold: float | None = None
    changes: tuple[StepChange, ...] = ()

    @classmethod
    def from_json(cls, obj: object, where: str = "rate of change") -> RateOfChange:
        obj = rd.mapping(obj, where)
        changes = obj.get("changes") or []
        if not isinstance(changes, list):
            raise SectionError(f"{where}: changes is {changes!r}, not a list")
        numbers = {k: rd.number(obj, k, where) for k in (
            "peak_step", "peak_change", "peak_fraction", "diminishing_step",
            "diminishing_fraction", "threshold")}
        return cls(feature=rd.text(obj, "feature", where), **numbers,
                   changes=tuple(StepChange.from_json(c, f"{where} change") for c in changes))


@dataclass(frozen=True)
class ModelPhases:
    """One model's phases: the three-segment fit of each feature, each feature's collapse
    and regrowth, and neural persistence's rate of change (``None`` without weights)."""

    piecewise: Mapping[str, PiecewiseFit] = field(default_factory=dict)
    collapse: Mapping[str, Collapse] = field(default_factory=dict)
    np_rate_of_change: RateOfChange | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "phases") -> ModelPhases:
        obj = rd.mapping(obj, where)
        roc = obj.get("np_rate_of_change")
        return cls(
            piecewise=MappingProxyType({
                f: PiecewiseFit.from_json(fit, f"{where} fit of {f}") for f, fit in rd.mapping(
                    obj.get("piecewise_log_step") or {}, f"{where} fits").items()}),
            collapse=MappingProxyType({
                f: Collapse.from_json(c, f"{where} collapse of {f}") for f, c in rd.mapping(
                    obj.get("collapse") or {}, f"{where} collapse").items()}),
            np_rate_of_change=(RateOfChange.from_json(roc, f"{where} rate of change")
                               if roc else None))


@dataclass(frozen=True)
class Phases:
    """The ``phases`` section: model label -> :class:`ModelPhases`."""

    per_model: Mapping[str, ModelPhases] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object) -> Phases:
        obj = rd.mapping(obj, "phases")
        return cls(MappingProxyType({m: ModelPhases.from_json(v, f"phases of {m}")
                                     for m, v in obj.items()}))


@dataclass(frozen=True)
class Forecast:
    """One method's prediction of one model's final loss, and its absolute error (nats)."""

    prediction: float | None = None
    abs_error: float | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "forecast") -> Forecast:
        obj = rd.mapping(obj, where)
        return cls(rd.number(obj, "prediction", where), rd.number(obj, "abs_error", where))


@dataclass(frozen=True)
class FractionPrediction:
    """The predictions from the checkpoints up to one fraction of training.

    Attributes:
        per_model: model label -> method -> :class:`Forecast` (empty in
            ``prediction_by_feature``).
        mae: method -> mean absolute error over the models where it is defined (nats).
        n_models: method -> those models.
        improvement_over_loss_only: method -> (MAE_loss_only − MAE) / MAE_loss_only.
        ridge_alpha: the ridge's cross-validated penalty, by name.
    """

    per_model: Mapping[str, Mapping[str, Forecast]] = field(default_factory=dict)
    mae: Mapping[str, float | None] = field(default_factory=dict)
    n_models: Mapping[str, int | None] = field(default_factory=dict)
    improvement_over_loss_only: Mapping[str, float | None] = field(default_factory=dict)
    ridge_alpha: Mapping[str, float | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str = "prediction") -> FractionPrediction:
        obj = rd.mapping(obj, where)
        return cls(
            per_model=rd.nested(obj.get("per_model") or {}, f"{where} per_model",
                              Forecast.from_json),
            mae=rd.by_name(obj, "mae", where),
            n_models=rd.by_name(obj, "n_models", where, rd.count),
            improvement_over_loss_only=rd.by_name(obj, "improvement_over_loss_only", where),
            ridge_alpha=rd.by_name(obj, "ridge_alpha", where))


@dataclass(frozen=True)
class Prediction:
    """The ``prediction`` section: the final loss predicted from early checkpoints.

    Attributes:
        fractions: training fraction (``"0.2"``) -> :class:`FractionPrediction`.
        methods: the predictors, in order (``loss_only`` first).
        feature: the topology feature predicted from (``np_mean``, or an H1 feature).
        ridge_features: what the ridge is fitted on.
        ridge_reason: why there is no ridge (fewer than 6 models), or ``None``.
        true_final_loss: model label -> the stored loss at its last checkpoint.
        final_step: model label -> its last step.
        notes: how to read the section.
        reason: why nothing was predicted, or ``None``.
    """

    fractions: Mapping[str, FractionPrediction] = field(default_factory=dict)
    methods: tuple[str, ...] = ()
    feature: str | None = None
    ridge_features: tuple[str, ...] = ()
    ridge_reason: str | None = None
    true_final_loss: Mapping[str, float | None] = field(default_factory=dict)
    final_step: Mapping[str, float | None] = field(default_factory=dict)
    notes: str | None = None
    reason: str | None = None

    @classmethod
    def from_json(cls, obj: object) -> Prediction:
        where = "prediction"
        obj = rd.mapping(obj, where)
        return cls(
            fractions=MappingProxyType({
                k: FractionPrediction.from_json(fr, f"prediction at {k}")
                for k, fr in rd.mapping(obj.get("fractions") or {}, "prediction fractions")
                .items()}),
            methods=rd.texts(obj, "methods", where), feature=rd.text(obj, "feature", where),
            ridge_features=rd.texts(obj, "ridge_features", where),
            ridge_reason=rd.text(obj, "ridge_reason", where),
            true_final_loss=rd.by_name(obj, "true_final_loss", where),
            final_step=rd.by_name(obj, "final_step", where),
            notes=rd.text(obj, "notes", where), reason=rd.text(obj, "reason", where))


@dataclass(frozen=True)
class PredictionByFeature:
    """The ``prediction_by_feature`` section: feature -> training fraction ->
    :class:`FractionPrediction` (each feature in place of neural persistence)."""

    per_feature: Mapping[str, Mapping[str, FractionPrediction]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object) -> PredictionByFeature:
        return cls(rd.nested(obj, "prediction_by_feature", FractionPrediction.from_json))


_DISTANCE_KEY = re.compile(r"^(?:weight_)?h(\d+)_wasserstein(_persim_l2)?$")


@dataclass(frozen=True)
class DiagramDistance:
    """The order-1 Wasserstein distance between the persistence diagrams of two
    consecutive checkpoints of a model, per homology dimension.

    Attributes:
        step_from, step_to: the two checkpoints' steps.
        linf: dimension -> the distance with the L∞ ground metric (Hera, GUDHI).
        l2: dimension -> the distance with the L2 ground metric (persim); empty for the
            weight-row diagrams.
    """

    step_from: float | None = None
    step_to: float | None = None
    linf: Mapping[int, float | None] = field(default_factory=dict)
    l2: Mapping[int, float | None] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        """Training steps between the two checkpoints (0 when a step is unknown)."""
        if self.step_from is None or self.step_to is None:
            return 0.0
        return self.step_to - self.step_from

    @classmethod
    def from_json(cls, obj: object, where: str = "distance") -> DiagramDistance:
        obj = rd.mapping(obj, where)
        linf: dict[int, float | None] = {}
        l2: dict[int, float | None] = {}
        for key in obj:
            if key in ("step_from", "step_to"):
                continue
            match = _DISTANCE_KEY.match(key)
            if match is None:
                raise SectionError(f"{where}: {key!r} is not a distance of a dimension")
            (l2 if match.group(2) else linf)[int(match.group(1))] = rd.number(obj, key, where)
        return cls(rd.number(obj, "step_from", where), rd.number(obj, "step_to", where),
                   MappingProxyType(linf), MappingProxyType(l2))


@dataclass(frozen=True)
class Distances:
    """The ``wasserstein`` (hidden-state diagrams) or ``weight_wasserstein`` (weight-row
    diagrams, summed over matrices) section: model label -> its consecutive checkpoints'
    :class:`DiagramDistance`, in step order."""

    per_model: Mapping[str, tuple[DiagramDistance, ...]] = field(default_factory=dict)

    def gaps_differ(self, labels: Iterable[str]) -> bool:
        """Whether consecutive checkpoints of ``labels`` are unevenly spaced (1-step and
        100-step gaps): then distances are only comparable per step of gap."""
        return len({d.gap for label in labels for d in self.per_model.get(label, ())}) > 1

    @classmethod
    def from_json(cls, obj: object, where: str = "wasserstein") -> Distances:
        obj = rd.mapping(obj, where)
        out = {}
        for model, rows in obj.items():
            if not isinstance(rows, list):
                raise SectionError(f"{where} of {model} is {type(rows).__name__}, not a list")
            out[model] = tuple(DiagramDistance.from_json(r, f"{where} of {model}")
                               for r in rows)
        return cls(MappingProxyType(out))
