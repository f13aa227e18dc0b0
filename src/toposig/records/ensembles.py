"""The ``ensembles`` section of ``data/statistics.json``, typed: a study with seed
ensembles (several seeds of each size), tested across seeds at fixed points of training.

:func:`toposig.analysis.ensembles.ensemble_analysis` computes it; part E of the summary and
the seed-ensemble figure read it by attribute. :meth:`Ensembles.from_json` refuses a
damaged section with a :class:`~toposig.records.reading.SectionError` naming what is
wrong. Every field is optional, so statistics written before a field existed still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from toposig.records import reading as rd

__all__ = ["Spread", "SeedGroup", "AcrossSeeds", "Verdict", "SizeDifference", "Ensembles"]


@dataclass(frozen=True)
class Spread:
    """A quantity over the seeds of one size, at the final checkpoint.

    Attributes:
        n: the seeds with a value.
        mean, sd, min, max: over those seeds (``sd``: the seed-to-seed standard deviation).
        text_sd: the median over seeds of the standard deviation over text resamples
            (``None`` where the run did not resample the texts).
    """

    n: int | None = None
    mean: float | None = None
    sd: float | None = None
    min: float | None = None
    max: float | None = None
    text_sd: float | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "spread") -> Spread:
        obj = rd.mapping(obj, where)
        return cls(n=rd.count(obj, "n", where),
                   **{k: rd.number(obj, k, where)
                      for k in ("mean", "sd", "min", "max", "text_sd")})


@dataclass(frozen=True)
class SeedGroup:
    """The seeds of one size.

    Attributes:
        labels: the runs' model labels.
        seeds: their seeds.
        n_seeds: how many.
        num_parameters: the size's parameter count.
        steps: the checkpoint steps every seed has.
        final_step: the last of them.
        fraction_steps: fraction of training (as written, e.g. ``"0.2"``) -> the step
            tested there.
        final_loss: the final held-out loss over the seeds.
    """

    labels: tuple[str, ...] = ()
    seeds: tuple[int | None, ...] = ()
    n_seeds: int | None = None
    num_parameters: int | None = None
    steps: tuple[int | None, ...] = ()
    final_step: int | None = None
    fraction_steps: Mapping[str, int | None] = field(default_factory=dict)
    final_loss: Spread = field(default_factory=Spread)

    @classmethod
    def from_json(cls, obj: object, where: str = "seed group") -> SeedGroup:
        obj = rd.mapping(obj, where)
        return cls(labels=rd.texts(obj, "labels", where), seeds=rd.integers(obj, "seeds", where),
                   n_seeds=rd.count(obj, "n_seeds", where),
                   num_parameters=rd.count(obj, "num_parameters", where),
                   steps=rd.integers(obj, "steps", where),
                   final_step=rd.count(obj, "final_step", where),
                   fraction_steps=rd.by_name(obj, "fraction_steps", where, rd.count),
                   final_loss=Spread.from_json(obj.get("final_loss") or {},
                                               f"{where} final_loss"))


@dataclass(frozen=True)
class AcrossSeeds:
    """One feature at one fraction of training in one size: does its value tell the seeds'
    final losses apart beyond the loss there? Made where it is computed
    (:func:`toposig.analysis.ensembles.across_seeds`) and read back from the section.

    Attributes:
        r: the partial Spearman r, over seeds, with the final loss given the loss at the
            fraction and the baseline (``None``: undefined).
        ci_low, ci_high: its percentile bootstrap interval over seeds.
        r_loss_only: the same given the loss alone.
        baseline: the baseline given (``None``: the loss alone).
        baseline_r: the baseline's own r given the loss.
        advantage, advantage_low, advantage_high: |r given the loss| minus the baseline's,
            and its paired bootstrap interval.
        n_seeds: the seeds.
        beyond_loss: the interval excludes 0.
        calibrated: enough seeds for the interval to hold its size.
    """

    r: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    r_loss_only: float | None = None
    baseline: str | None = None
    baseline_r: float | None = None
    advantage: float | None = None
    advantage_low: float | None = None
    advantage_high: float | None = None
    n_seeds: int | None = None
    beyond_loss: bool | None = None
    calibrated: bool | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "across seeds") -> AcrossSeeds:
        obj = rd.mapping(obj, where)
        return cls(**{k: rd.number(obj, k, where)
                      for k in ("r", "ci_low", "ci_high", "r_loss_only", "baseline_r",
                                "advantage", "advantage_low", "advantage_high")},
                   baseline=rd.text(obj, "baseline", where),
                   n_seeds=rd.count(obj, "n_seeds", where),
                   beyond_loss=rd.flag(obj, "beyond_loss", where),
                   calibrated=rd.flag(obj, "calibrated", where))

    def to_json(self) -> dict[str, object]:
        """The cell as the section stores it (field order)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Verdict:
    """One feature at one fraction, over the sizes.

    Attributes:
        sizes_tested: sizes with a defined r and enough seeds.
        sizes_too_few_seeds: sizes with a defined r but too few seeds to test.
        sizes_beyond: tested sizes whose interval excludes 0.
        predicts_beyond_loss: more than half of the tested sizes do.
        sizes_better_than_baseline: tested sizes whose advantage interval is above 0.
    """

    sizes_tested: int | None = None
    sizes_too_few_seeds: int | None = None
    sizes_beyond: int | None = None
    predicts_beyond_loss: bool | None = None
    sizes_better_than_baseline: int | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "verdict") -> Verdict:
        obj = rd.mapping(obj, where)
        return cls(predicts_beyond_loss=rd.flag(obj, "predicts_beyond_loss", where),
                   **{k: rd.count(obj, k, where)
                      for k in ("sizes_tested", "sizes_too_few_seeds", "sizes_beyond",
                                "sizes_better_than_baseline")})


@dataclass(frozen=True)
class SizeDifference:
    """Two consecutive sizes' first seeds compared on one quantity.

    Attributes:
        smaller, larger: the sizes (the JSON's ``from`` and ``to``).
        difference: the larger's final value minus the smaller's.
        spread: what two seeds of one size differ by (1.96·√2·SD, the SDs pooled).
        within_spread: ``|difference| <= spread``.
    """

    smaller: str | None = None
    larger: str | None = None
    difference: float | None = None
    spread: float | None = None
    within_spread: bool | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "between sizes") -> SizeDifference:
        obj = rd.mapping(obj, where)
        return cls(smaller=rd.text(obj, "from", where), larger=rd.text(obj, "to", where),
                   difference=rd.number(obj, "difference", where),
                   spread=rd.number(obj, "spread", where),
                   within_spread=rd.flag(obj, "within_spread", where))


@dataclass(frozen=True)
class Ensembles:
    """The ``ensembles`` section.

    Attributes:
        groups: size (the seeds' model) -> its :class:`SeedGroup`.
        fractions: the fractions of training tested (as written, e.g. ``"0.2"``).
        across_seeds: feature -> fraction -> size -> :class:`AcrossSeeds`.
        verdict: feature -> fraction -> :class:`Verdict`.
        seed_spread: ``loss`` or a feature -> size -> its :class:`Spread`.
        between_sizes: ``loss`` or a feature -> consecutive sizes compared.
        expected_by_chance: (feature, fraction) cells expected to predict beyond the loss
            by chance.
        n_bootstrap: bootstrap resamples over seeds.
        level: the intervals' level (``0.95``).
        method: how the tests were made, in words.
        calibrated_seeds: the fewest seeds with which an interval holds its size.
        reason: why the section was not computed (``None`` when it was).
    """

    groups: Mapping[str, SeedGroup] = field(default_factory=dict)
    fractions: tuple[str, ...] = ()
    across_seeds: Mapping[str, Mapping[str, Mapping[str, AcrossSeeds]]] = field(
        default_factory=dict)
    verdict: Mapping[str, Mapping[str, Verdict]] = field(default_factory=dict)
    seed_spread: Mapping[str, Mapping[str, Spread]] = field(default_factory=dict)
    between_sizes: Mapping[str, tuple[SizeDifference, ...]] = field(default_factory=dict)
    expected_by_chance: float | None = None
    n_bootstrap: int | None = None
    level: float | None = None
    method: str | None = None
    calibrated_seeds: int | None = None
    reason: str | None = None

    @classmethod
    def from_json(cls, obj: object) -> Ensembles:
        where = "ensembles"
        obj = rd.mapping(obj, where)
        across = rd.mapping(obj.get("across_seeds") or {}, f"{where} across_seeds")
        between = rd.mapping(obj.get("between_sizes") or {}, f"{where} between_sizes")
        return cls(
            groups=MappingProxyType({
                g: SeedGroup.from_json(v, f"seed group {g}")
                for g, v in rd.mapping(obj.get("groups") or {}, f"{where} groups").items()}),
            fractions=rd.texts(obj, "fractions", where),
            across_seeds=MappingProxyType({
                feature: rd.nested(by_fraction, f"across seeds of {feature}",
                                   AcrossSeeds.from_json)
                for feature, by_fraction in across.items()}),
            verdict=rd.nested(obj.get("verdict") or {}, "verdict", Verdict.from_json),
            seed_spread=rd.nested(obj.get("seed_spread") or {}, "seed spread",
                                  Spread.from_json),
            between_sizes=MappingProxyType({
                q: tuple(SizeDifference.from_json(d, f"between sizes of {q}")
                         for d in _list(pairs, f"between sizes of {q}"))
                for q, pairs in between.items()}),
            expected_by_chance=rd.number(obj, "expected_by_chance", where),
            n_bootstrap=rd.count(obj, "n_bootstrap", where),
            level=rd.number(obj, "level", where), method=rd.text(obj, "method", where),
            calibrated_seeds=rd.count(obj, "calibrated_seeds", where),
            reason=rd.text(obj, "reason", where))


def _list(value: object, where: str) -> list:
    if not isinstance(value, list):
        raise rd.SectionError(f"{where} is {type(value).__name__}, not a list")
    return value
