"""The ``positive_controls`` section of ``data/statistics.json``, typed: training runs
whose transition step is known without topology (a ground truth stored with every
checkpoint), and where each feature's level shifts against it.

:func:`toposig.analysis.ground_truth.positive_control_analysis` computes it; part F of the
summary and the positive-control figure read it by attribute.
:meth:`PositiveControls.from_json` refuses a damaged section with a
:class:`~toposig.records.reading.SectionError` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from toposig.records import reading as rd

__all__ = ["GroundTruthRun", "Alignment", "HeadToHead", "MechanismSignal", "PositiveControls"]


@dataclass(frozen=True)
class GroundTruthRun:
    """One run's ground truth.

    Attributes:
        seed, seed_group: the run's seed and the model it is a seed of.
        steps: its checkpoints' steps, in order.
        signal: the ground-truth signal at each of them (``None``: not finite).
        event_steps: event (``"0.5"``, ``"halfway"`` ...; a mechanism signal's are
            ``"<name> <level>"`` or ``"<name> halfway"``) -> the step it happens at
            (``None``: never within the run).
        mechanism: each mechanism signal's values at the checkpoints.
    """

    seed: int | None = None
    seed_group: str | None = None
    steps: tuple[int | None, ...] = ()
    signal: tuple[float | None, ...] = ()
    event_steps: Mapping[str, int | None] = field(default_factory=dict)
    mechanism: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str = "run") -> GroundTruthRun:
        obj = rd.mapping(obj, where)
        seed = obj.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise rd.SectionError(f"{where}: seed is {seed!r}, not a whole number")
        return cls(seed=seed, seed_group=rd.text(obj, "seed_group", where),
                   steps=rd.integers(obj, "steps", where), signal=rd.numbers(obj, "signal", where),
                   event_steps=rd.by_name(obj, "event_steps", where, rd.count),
                   mechanism=rd.by_name(obj, "mechanism", where, rd.numbers))


@dataclass(frozen=True)
class Alignment:
    """One feature's change-points against one event, over the runs.

    Attributes:
        leads: per run, event step minus change-point step (positive: the feature moves
            first; ``None`` where undefined).
        apart: per run, checkpoints between the two.
        hits: per run, within one checkpoint.
        n_runs: runs where both are defined.
        hit_rate, chance: the share of hits, and a random change-point's.
        hit_p, hit_holm_p: one-sided binomial p of the hits against chance, and Holm's
            over the features (``None`` for the references).
        swapped_hit_rate, permutation_p: the hit rate at the other runs' events, and the
            permutation p of the hits.
        median_lead, median_apart: over the runs.
    """

    leads: tuple[int | None, ...] = ()
    apart: tuple[int | None, ...] = ()
    hits: tuple[bool | None, ...] = ()
    n_runs: int | None = None
    hit_rate: float | None = None
    chance: float | None = None
    hit_p: float | None = None
    hit_holm_p: float | None = None
    swapped_hit_rate: float | None = None
    permutation_p: float | None = None
    median_lead: float | None = None
    median_apart: float | None = None

    @classmethod
    def from_json(cls, obj: object, where: str = "alignment") -> Alignment:
        obj = rd.mapping(obj, where)
        return cls(leads=rd.integers(obj, "leads", where),
                   apart=rd.integers(obj, "apart", where), hits=rd.flags(obj, "hits", where),
                   n_runs=rd.count(obj, "n_runs", where),
                   **{k: rd.number(obj, k, where)
                      for k in ("hit_rate", "chance", "hit_p", "hit_holm_p",
                                "swapped_hit_rate", "permutation_p", "median_lead",
                                "median_apart")})

    @property
    def n_hits(self) -> int:
        """The runs with a hit."""
        return sum(1 for h in self.hits if h)


@dataclass(frozen=True)
class HeadToHead:
    """One feature's head-to-head test against one event (issue 58): how near its
    change-points lie to the event, over the runs where it happens.

    Attributes:
        distance: the mean checkpoints between its change-point and the run's event.
        p: the one-sided permutation p of so small a distance (the events handed to the
            runs in every order).
        p_adjusted: ``p`` corrected over the features (Westfall-Young min-P; the
            ground truth's own signals, its mechanism's too, are each tested alone).
        min_p: the smallest p the runs allow (1 / the orders).
        n_runs: the runs where its change-point is defined.
        leads: per run, the event's checkpoint minus the change-point's (positive: the
            feature moves first).
        median_lead: their median, in checkpoints.
        detects: ``p_adjusted`` is below the section's ``alpha``.
    """

    distance: float | None = None
    p: float | None = None
    p_adjusted: float | None = None
    min_p: float | None = None
    n_runs: int | None = None
    leads: tuple[int | None, ...] = ()
    median_lead: float | None = None
    detects: bool = False

    @classmethod
    def from_json(cls, obj: object, where: str = "head_to_head") -> HeadToHead:
        obj = rd.mapping(obj, where)
        detects = obj.get("detects", False)
        if not isinstance(detects, bool):
            raise rd.SectionError(f"{where}: detects is {detects!r}, not true or false")
        return cls(**{k: rd.number(obj, k, where)
                      for k in ("distance", "p", "p_adjusted", "min_p", "median_lead")},
                   n_runs=rd.count(obj, "n_runs", where),
                   leads=rd.integers(obj, "leads", where), detects=detects)


@dataclass(frozen=True)
class MechanismSignal:
    """A further ground-truth signal that names the mechanism (training accuracy, an
    attention head's score ...).

    Attributes:
        event: ``rise`` or ``fall``.
        levels: the levels whose first crossing is an event (``None``: halfway).
        events: its events' names (``"<name> <level>"``, ``"<name> halfway"``).
    """

    event: str | None = None
    levels: tuple[float | None, ...] | None = None
    events: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: object, where: str = "mechanism") -> MechanismSignal:
        obj = rd.mapping(obj, where)
        return cls(event=rd.text(obj, "event", where),
                   levels=None if obj.get("levels") is None else rd.numbers(obj, "levels",
                                                                            where),
                   events=rd.texts(obj, "events", where))


@dataclass(frozen=True)
class PositiveControls:
    """The ``positive_controls`` section.

    Attributes:
        signal: the ground truth's name (``test_accuracy``, ``in_context_score`` ...).
        event: ``rise`` or ``fall``.
        levels: the levels whose first crossing is an event (``None``: the event is the
            halfway point).
        events: the events' names, in order (the signal's; the mechanism's are in
            ``mechanism``).
        mechanism: each further signal that names the mechanism, by name (its values
            in ``runs``, its events' steps among the runs' ``event_steps``; the
            alignment and the head-to-head place every feature against its events too).
        runs: run label -> its :class:`GroundTruthRun`.
        alignment: feature -> event -> its :class:`Alignment`.
        head_to_head: event -> feature -> its :class:`HeadToHead` (events that happen in
            fewer than two runs have none).
        alpha: the level of the head-to-head's corrected test.
        runs_left_out: runs that state another ground truth.
        reason: why the section was not computed (``None`` when it was).
    """

    signal: str | None = None
    event: str | None = None
    levels: tuple[float | None, ...] | None = None
    events: tuple[str, ...] = ()
    runs: Mapping[str, GroundTruthRun] = field(default_factory=dict)
    mechanism: Mapping[str, MechanismSignal] = field(default_factory=dict)
    alignment: Mapping[str, Mapping[str, Alignment]] = field(default_factory=dict)
    head_to_head: Mapping[str, Mapping[str, HeadToHead]] = field(default_factory=dict)
    alpha: float | None = None
    runs_left_out: tuple[str, ...] = ()
    reason: str | None = None

    @classmethod
    def from_json(cls, obj: object) -> PositiveControls:
        where = "positive_controls"
        obj = rd.mapping(obj, where)
        return cls(
            signal=rd.text(obj, "signal", where), event=rd.text(obj, "event", where),
            levels=None if obj.get("levels") is None else rd.numbers(obj, "levels", where),
            events=rd.texts(obj, "events", where),
            runs=MappingProxyType({
                label: GroundTruthRun.from_json(run, f"ground-truth run {label}")
                for label, run in rd.mapping(obj.get("runs") or {}, f"{where} runs").items()}),
            mechanism=MappingProxyType({
                name: MechanismSignal.from_json(m, f"{where} mechanism {name}")
                for name, m in rd.mapping(obj.get("mechanism") or {},
                                          f"{where} mechanism").items()}),
            alignment=rd.nested(obj.get("alignment") or {}, "alignment", Alignment.from_json),
            head_to_head=rd.nested(obj.get("head_to_head") or {}, "head_to_head",
                                   HeadToHead.from_json),
            alpha=rd.number(obj, "alpha", where),
            runs_left_out=rd.texts(obj, "runs_left_out", where),
            reason=rd.text(obj, "reason", where))

    @property
    def references(self) -> tuple[str | None, ...]:
        """The features placed first, which need no topology: the signal itself, the
        signals of the mechanism and the held-out loss."""
        return (self.signal, *self.mechanism, "loss")

    @property
    def every_event(self) -> tuple[str, ...]:
        """The signal's events, then each mechanism signal's."""
        return (*self.events, *(e for m in self.mechanism.values() for e in m.events))
