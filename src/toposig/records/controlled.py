"""The ``controlled`` section of ``data/statistics.json``, typed: every feature's test
against its target under each control, per model and pooled over models.

:func:`toposig.analysis.controls.controlled_correlations` computes it; the summary's
tables and the controls figure read it by attribute. :meth:`Controlled.from_json` refuses
a damaged section with a :class:`~toposig.records.reading.SectionError` naming what is
wrong. The JSON spells one test as about 45 flat keys (``detrended_r``, ``pfd_holm_p``,
``significant_raw`` ...); they are grouped here once, so no reader builds a key from a
string: the two trend-level controls are :class:`TrendTest` records
(:meth:`ControlledTest.trend`), and a feature's count of significant models is
:attr:`FeatureSummary.significant` by control.

Every field is optional: statistics written before a control existed read with ``None``
(or an empty mapping) there, and the report says what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toposig.records import reading as rd

__all__ = ["DesignCheck", "TrendTest", "ControlledTest", "FeatureSummary", "Controlled",
           "TREND_KINDS", "CONTROLS"]

TREND_KINDS = {"detrended": "detrended", "pfd": "partial_first_differences"}
"""The two trend-level tests, by their key prefix in the JSON -> their control's name."""

_SIGNIFICANT = "significant_"

_PLAIN = {"raw": ("spearman_r", "holm_p"), "partial_log_step": ("partial_r", "partial_holm_p"),
          "first_differences": ("diff_r", "diff_holm_p"),
          "beyond_baseline": ("beyond_r", "beyond_holm_p")}
_TREND_OF = {control: kind for kind, control in TREND_KINDS.items()}

CONTROLS = (*_PLAIN, *_TREND_OF)
"""Every control of a test, in the order of the statistics."""


@dataclass(frozen=True)
class DesignCheck:
    """One control of one test, tried on simulated runs of the test's own design. Made
    where it is computed (:func:`toposig.analysis.inference.design_check`) and read back
    from the statistics.

    Attributes:
        status: ``calibrated``, ``uncalibrated``, or why no simulation was run.
        why: the reason for an uncalibrated status (``None`` otherwise).
        null_rate: the share of simulated null runs with p < alpha.
        null_runs: how many null runs were simulated.
        mdc: the smallest coupling found with 80 % power at alpha (``None``: none up to
            the largest tried).
        mdc_holm: the same at alpha / the Holm family's size.
        holm_tests: the size of that Holm family.
        power, power_holm: coupling (as written, e.g. ``"0.5"``) -> the power there, at
            alpha and at Holm's level.
    """

    status: str | None = None
    why: str | None = None
    null_rate: float | None = None
    null_runs: int | None = None
    mdc: float | None = None
    mdc_holm: float | None = None
    holm_tests: int | None = None
    power: Mapping[str, float | None] = field(default_factory=dict)
    power_holm: Mapping[str, float | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str = "design check") -> DesignCheck:
        obj = rd.mapping(obj, where)
        return cls(status=rd.text(obj, "status", where), why=rd.text(obj, "why", where),
                   null_rate=rd.number(obj, "null_rate", where),
                   null_runs=rd.count(obj, "null_runs", where),
                   mdc=rd.number(obj, "mdc", where), mdc_holm=rd.number(obj, "mdc_holm", where),
                   holm_tests=rd.count(obj, "holm_tests", where),
                   power=rd.by_name(obj, "power", where),
                   power_holm=rd.by_name(obj, "power_holm", where))

    @property
    def calibrated(self) -> bool:
        """The simulations of the design found the control holds its size."""
        return self.status == "calibrated"

    def to_json(self) -> dict[str, object]:
        """The check as the statistics store it."""
        return {"null_rate": self.null_rate, "null_runs": self.null_runs,
                "status": self.status, "why": self.why, "mdc": self.mdc,
                "mdc_holm": self.mdc_holm, "holm_tests": self.holm_tests,
                "power": dict(self.power), "power_holm": dict(self.power_holm)}


@dataclass(frozen=True)
class TrendTest:
    """A trend-level control of one test: the detrended correlation (``detrended``) or the
    partial correlation of first differences on a smooth function of log step (``pfd``).

    Attributes:
        r: the correlation (``None``: undefined, see ``undefined``).
        p: its p from phase-randomised surrogates.
        ci_low, ci_high: its 95 % interval.
        undefined: why it is undefined (``None`` when defined).
        n: the points it used (within a model).
        edf: the effective degrees of freedom of the two series' smooth trends.
        holm_p: its Holm-adjusted p within the control's family.
        models: pooled only: the models whose own test entered the meta-analysis.
    """

    r: float | None = None
    p: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    undefined: str | None = None
    n: int | None = None
    edf: tuple[float | None, ...] = ()
    holm_p: float | None = None
    models: int | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], kind: str, where: str) -> TrendTest:
        """The ``{kind}_...`` keys of a test's object ``obj``."""
        return cls(r=rd.number(obj, f"{kind}_r", where), p=rd.number(obj, f"{kind}_p", where),
                   ci_low=rd.number(obj, f"{kind}_ci_low", where),
                   ci_high=rd.number(obj, f"{kind}_ci_high", where),
                   undefined=rd.text(obj, f"{kind}_undefined", where),
                   n=rd.count(obj, f"{kind}_n", where), edf=rd.numbers(obj, f"{kind}_edf", where),
                   holm_p=rd.number(obj, f"{kind}_holm_p", where),
                   models=rd.count(obj, f"{kind}_models", where))


@dataclass(frozen=True)
class ControlledTest:
    """One feature against its target, within one model (``scope="model"``) or pooled over
    models (``"pooled"``), under every control.

    Attributes:
        scope: ``model`` or ``pooled``.
        target: the quality measure tested against.
        n: the checkpoints.
        spearman_r, spearman_p, pearson_r, pearson_p: the raw correlations.
        ci_low, ci_high: the raw ρ's 95 % interval (``None`` pooled).
        holm_p: the raw test's Holm-adjusted p.
        partial_r, partial_p, partial_holm_p: the partial Spearman on ``partial_controls``.
        partial_undefined: why the partial is undefined (``None`` when defined).
        partial_controls: what it controlled for (``log(1 + step)`` ...).
        diff_r, diff_p, diff_n, diff_holm_p: the Spearman of first differences.
        baseline: the baseline feature of the beyond-baseline test.
        beyond_r, beyond_p, beyond_holm_p: the beyond-baseline partial correlation.
        beyond_by_baseline: baseline -> ``{"r": ..., "p": ...}`` for each one tried.
        detrended, pfd: the trend-level controls (:class:`TrendTest`).
        below_noise_floor: the feature's changes are below its bootstrap noise (``None``:
            no resamples, or pooled).
        design_fit: the fitted design the simulations used (``sd_x``, ``ar_x``, ...).
        design: control -> :class:`DesignCheck` (``None``: the statistics carry no design
            checks).
        calibration: control -> ``calibrated``, or why it is not.
        significant: control -> survived Holm with the raw ρ's sign (``None``: not
            applicable).
    """

    scope: str | None = None
    target: str | None = None
    n: int | None = None
    spearman_r: float | None = None
    spearman_p: float | None = None
    pearson_r: float | None = None
    pearson_p: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    holm_p: float | None = None
    partial_r: float | None = None
    partial_p: float | None = None
    partial_holm_p: float | None = None
    partial_undefined: str | None = None
    partial_controls: tuple[str, ...] = ()
    diff_r: float | None = None
    diff_p: float | None = None
    diff_n: int | None = None
    diff_holm_p: float | None = None
    baseline: str | None = None
    beyond_r: float | None = None
    beyond_p: float | None = None
    beyond_holm_p: float | None = None
    beyond_by_baseline: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    detrended: TrendTest = field(default_factory=TrendTest)
    pfd: TrendTest = field(default_factory=TrendTest)
    below_noise_floor: bool | None = None
    design_fit: Mapping[str, float | None] = field(default_factory=dict)
    design: Mapping[str, DesignCheck] | None = None
    calibration: Mapping[str, str | None] = field(default_factory=dict)
    significant: Mapping[str, bool | None] = field(default_factory=dict)

    _NUMBERS = ("spearman_r", "spearman_p", "pearson_r", "pearson_p", "ci_low", "ci_high",
                "holm_p", "partial_r", "partial_p", "partial_holm_p", "diff_r", "diff_p",
                "diff_holm_p", "beyond_r", "beyond_p", "beyond_holm_p")

    @classmethod
    def from_json(cls, obj: object, where: str = "controlled test") -> ControlledTest:
        obj = rd.mapping(obj, where)
        design = obj.get("design")
        baselines = rd.mapping(obj.get("beyond_by_baseline") or {},
                               f"{where} beyond_by_baseline")
        return cls(
            scope=rd.text(obj, "scope", where), target=rd.text(obj, "target", where),
            n=rd.count(obj, "n", where), diff_n=rd.count(obj, "diff_n", where),
            **{k: rd.number(obj, k, where) for k in cls._NUMBERS},
            partial_undefined=rd.text(obj, "partial_undefined", where),
            partial_controls=rd.texts(obj, "partial_controls", where),
            baseline=rd.text(obj, "baseline", where),
            beyond_by_baseline=MappingProxyType({
                b: rd.by_name(baselines, b, f"{where} beyond_by_baseline") for b in baselines}),
            detrended=TrendTest.from_json(obj, "detrended", where),
            pfd=TrendTest.from_json(obj, "pfd", where),
            below_noise_floor=rd.flag(obj, "below_noise_floor", where),
            design_fit=rd.by_name(obj, "design_fit", where),
            design=None if design is None else MappingProxyType({
                c: DesignCheck.from_json(check, f"{where} design of {c}")
                for c, check in rd.mapping(design, f"{where} design").items()}),
            calibration=rd.by_name(obj, "calibration", where, rd.text),
            significant=rd.by_name(obj, "significant", where, rd.flag))

    def under(self, control: str) -> tuple[float | None, float | None]:
        """``(r, Holm-adjusted p)`` of the test under ``control`` (one of
        :data:`CONTROLS`)."""
        if control in _TREND_OF:
            test = self.trend(_TREND_OF[control])
            return test.r, test.holm_p
        if control not in _PLAIN:
            raise KeyError(f"no control {control!r}; these are {', '.join(CONTROLS)}")
        r, p = _PLAIN[control]
        return getattr(self, r), getattr(self, p)

    def trend(self, kind: str) -> TrendTest:
        """The trend-level control ``kind`` (``detrended`` or ``pfd``)."""
        if kind not in TREND_KINDS:
            raise KeyError(f"no trend-level control {kind!r}; these are "
                           f"{', '.join(TREND_KINDS)}")
        return self.detrended if kind == "detrended" else self.pfd

    def sign_against_raw(self, kind: str) -> str | None:
        """``"same"`` or ``"opposite"``: the sign of the trend-level control ``kind``
        against the raw ρ's, where both are defined and non-zero (``None`` otherwise). An
        opposite sign means the fluctuations run against the trend association."""
        r, raw = self.trend(kind).r, self.spearman_r
        if r is None or raw is None or r == 0 or raw == 0:
            return None
        return "same" if (r > 0) == (raw > 0) else "opposite"


@dataclass(frozen=True)
class FeatureSummary:
    """One feature over the study's models.

    Attributes:
        target: its target.
        n_models: the models it was tested in.
        significant: control -> the models where it survived that control.
        all_controls: the models where it survived every applicable control.
        partial_undefined: the models where its partial correlation is undefined.
        below_noise_floor: the models where its changes are below the noise floor.
        pooled: control -> survived pooled over models (``None``: no pooled test), and
            ``above_noise_floor``.
    """

    target: str | None = None
    n_models: int | None = None
    significant: Mapping[str, int | None] = field(default_factory=dict)
    all_controls: int | None = None
    partial_undefined: int | None = None
    below_noise_floor: int | None = None
    pooled: Mapping[str, bool | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str = "controlled summary") -> FeatureSummary:
        obj = rd.mapping(obj, where)
        return cls(target=rd.text(obj, "target", where),
                   n_models=rd.count(obj, "n_models", where),
                   significant=MappingProxyType({
                       k.removeprefix(_SIGNIFICANT): rd.count(obj, k, where)
                       for k in obj if k.startswith(_SIGNIFICANT)}),
                   all_controls=rd.count(obj, "all_controls", where),
                   partial_undefined=rd.count(obj, "partial_undefined", where),
                   below_noise_floor=rd.count(obj, "below_noise_floor", where),
                   pooled=rd.by_name(obj, "pooled", where, rd.flag))

    def in_every_model(self, control: str) -> bool:
        """Survived ``control`` in every model it was tested in (and in at least one)."""
        return bool(self.n_models) and self.significant.get(control) == self.n_models


@dataclass(frozen=True)
class Controlled:
    """The ``controlled`` section.

    Attributes:
        alpha: the level of every test.
        n_bootstrap: bootstrap resamples (statistics from before the surrogate intervals).
        n_surrogates: phase-randomised surrogates per test.
        ci_method, pooled_method, design_method: how the intervals, the pooled tests and
            the design checks were made, in words (``None`` in older statistics).
        seed: the random seed.
        controls: the controls, in order.
        n_tests: the tests in all.
        n_tests_by_control: control -> the tests in its Holm family (``None`` in
            statistics from before the families were counted).
        targets: feature -> its target.
        per_model: model label -> feature -> its :class:`ControlledTest`.
        pooled: feature -> its test pooled over models.
        summary: feature -> its :class:`FeatureSummary`.
        reason: why the section was not computed (``None`` when it was).
    """

    alpha: float | None = None
    n_bootstrap: int | None = None
    n_surrogates: int | None = None
    ci_method: str | None = None
    pooled_method: str | None = None
    design_method: str | None = None
    seed: int | None = None
    controls: tuple[str, ...] = ()
    n_tests: int | None = None
    n_tests_by_control: Mapping[str, int | None] | None = None
    targets: Mapping[str, str | None] = field(default_factory=dict)
    per_model: Mapping[str, Mapping[str, ControlledTest]] = field(default_factory=dict)
    pooled: Mapping[str, ControlledTest] = field(default_factory=dict)
    summary: Mapping[str, FeatureSummary] = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def from_json(cls, obj: object) -> Controlled:
        where = "controlled"
        obj = rd.mapping(obj, where)
        by_control = obj.get("n_tests_by_control")
        return cls(
            alpha=rd.number(obj, "alpha", where),
            n_bootstrap=rd.count(obj, "n_bootstrap", where),
            n_surrogates=rd.count(obj, "n_surrogates", where),
            ci_method=rd.text(obj, "ci_method", where),
            pooled_method=rd.text(obj, "pooled_method", where),
            design_method=rd.text(obj, "design_method", where),
            seed=rd.count(obj, "seed", where), controls=rd.texts(obj, "controls", where),
            n_tests=rd.count(obj, "n_tests", where),
            n_tests_by_control=None if by_control is None
            else rd.by_name(obj, "n_tests_by_control", where, rd.count),
            targets=rd.by_name(obj, "targets", where, rd.text),
            per_model=rd.nested(obj.get("per_model") or {}, "controlled test",
                                ControlledTest.from_json),
            pooled=MappingProxyType({
                f: ControlledTest.from_json(t, f"pooled controlled test of {f}")
                for f, t in rd.mapping(obj.get("pooled") or {}, f"{where} pooled").items()}),
            summary=MappingProxyType({
                f: FeatureSummary.from_json(s, f"controlled summary of {f}")
                for f, s in rd.mapping(obj.get("summary") or {}, f"{where} summary").items()}),
            reason=rd.text(obj, "reason", where))

    @property
    def level(self) -> float:
        """The tests' level (0.05 where the statistics do not say)."""
        return 0.05 if self.alpha is None else self.alpha

    def features(self) -> list[str]:
        """Every tested feature: the targets' order, then any other a table holds."""
        out = list(self.targets)
        for table in [*self.per_model.values(), self.pooled]:
            out += [f for f in table if f not in out]
        return out

    def entries(self, feature: str) -> list[tuple[str, ControlledTest]]:
        """``[(model or "pooled", test), ...]`` of one feature, the pooled test last."""
        rows = [(m, tests[feature]) for m, tests in self.per_model.items()
                if feature in tests]
        if feature in self.pooled:
            rows.append(("pooled", self.pooled[feature]))
        return rows

    def every_entry(self, features: Sequence[str]
                    ) -> list[tuple[str, str, ControlledTest]]:
        """``(feature, model or "pooled", test)`` of every test, feature by feature, the
        models in order and the pooled test last."""
        return [(f, m, t) for f in features for m, t in self.entries(f)]
