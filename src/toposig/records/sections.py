"""Sections of ``data/statistics.json``, typed: what the report reads by attribute.

Each section's class is built with ``from_json`` from the section's JSON (as
:func:`toposig.analysis.compute.compute_statistics` writes it), which refuses a damaged
section with a :class:`SectionError` naming what is wrong; the summary turns that into a
note, so one damaged section never hides the others. Typed so far: ``stability``
(:class:`Stability`, per model and feature a :class:`FeatureStability`) and ``scaling``
(:class:`Scaling` of :class:`PowerLawFit`). The other sections are still read as
mappings of their JSON (:attr:`toposig.records.statistics.Statistics.sections`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from toposig.records.vocabulary import is_number

__all__ = ["SectionError", "FeatureStability", "Stability", "PowerLawFit", "Scaling"]


class SectionError(ValueError):
    """A section of the statistics that does not have the shape its class reads."""


def _number(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if not is_number(value):
        raise SectionError(f"{where}: {key} is {value!r}, not a number")
    return float(value)


def _count(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SectionError(f"{where}: {key} is {value!r}, not a count")
    return value


def _text(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise SectionError(f"{where}: {key} is {value!r}, not text")
    return value


def _mapping(obj: object, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise SectionError(f"{where} is {type(obj).__name__}, not an object")
    return obj


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
        obj = _mapping(obj, where)
        numbers = {f.name: _number(obj, f.name, where) for f in fields(cls)
                   if f.name != "n_pairs"}
        return cls(**numbers, n_pairs=_count(obj, "n_pairs", where))


@dataclass(frozen=True)
class Stability:
    """The ``stability`` section: model label -> feature -> :class:`FeatureStability`
    (empty when the run had no bootstrap resamples of the texts)."""

    per_model: Mapping[str, Mapping[str, FeatureStability]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object) -> Stability:
        obj = _mapping(obj, "stability")
        return cls(MappingProxyType({
            model: MappingProxyType({
                feature: FeatureStability.from_json(e, f"stability of {model} {feature}")
                for feature, e in _mapping(table, f"stability of {model}").items()})
            for model, table in obj.items()}))


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
        obj = _mapping(obj, where)
        models = obj.get("models") or ()
        if not isinstance(models, list | tuple) or not all(isinstance(m, str) for m in models):
            raise SectionError(f"{where}: models is {models!r}, not a list of labels")
        return cls(**{k: _number(obj, k, where) for k in ("a", "b", "c", "r2", "spearman_r",
                                                          "spearman_p")},
                   spearman_p_method=_text(obj, "spearman_p_method", where),
                   n=_count(obj, "n", where), model=_text(obj, "model", where),
                   models=tuple(models), reason=_text(obj, "reason", where),
                   note=_text(obj, "note", where))


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
        obj = _mapping(obj, "scaling")
        sizes = _mapping(obj.get("num_parameters") or {}, "scaling num_parameters")
        return cls(
            n_models=_count(obj, "n_models", "scaling"),
            num_parameters=MappingProxyType({m: _number(sizes, m, "scaling num_parameters")
                                             for m in sizes}),
            fits=MappingProxyType({
                name: PowerLawFit.from_json(fit, f"scaling fit of {name}")
                for name, fit in _mapping(obj.get("fits") or {}, "scaling fits").items()}),
            reason=_text(obj, "reason", "scaling"))
