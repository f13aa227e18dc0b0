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

__all__ = ["GroundTruthRun", "Alignment", "PositiveControls"]


@dataclass(frozen=True)
class GroundTruthRun:
    """One run's ground truth.

    Attributes:
        seed, seed_group: the run's seed and the model it is a seed of.
        steps: its checkpoints' steps, in order.
        signal: the ground-truth signal at each of them (``None``: not finite).
        event_steps: event (``"0.5"``, ``"halfway"`` ...) -> the step it happens at
            (``None``: never within the run).
    """

    seed: int | None = None
    seed_group: str | None = None
    steps: tuple[int | None, ...] = ()
    signal: tuple[float | None, ...] = ()
    event_steps: Mapping[str, int | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str = "run") -> GroundTruthRun:
        obj = rd.mapping(obj, where)
        seed = obj.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise rd.SectionError(f"{where}: seed is {seed!r}, not a whole number")
        return cls(seed=seed, seed_group=rd.text(obj, "seed_group", where),
                   steps=rd.integers(obj, "steps", where), signal=rd.numbers(obj, "signal", where),
                   event_steps=rd.by_name(obj, "event_steps", where, rd.count))


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
class PositiveControls:
    """The ``positive_controls`` section.

    Attributes:
        signal: the ground truth's name (``test_accuracy``, ``in_context_score`` ...).
        event: ``rise`` or ``fall``.
        levels: the levels whose first crossing is an event (``None``: the event is the
            halfway point).
        events: the events' names, in order.
        runs: run label -> its :class:`GroundTruthRun`.
        alignment: feature -> event -> its :class:`Alignment`.
        runs_left_out: runs that state another ground truth.
        reason: why the section was not computed (``None`` when it was).
    """

    signal: str | None = None
    event: str | None = None
    levels: tuple[float | None, ...] | None = None
    events: tuple[str, ...] = ()
    runs: Mapping[str, GroundTruthRun] = field(default_factory=dict)
    alignment: Mapping[str, Mapping[str, Alignment]] = field(default_factory=dict)
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
            alignment=rd.nested(obj.get("alignment") or {}, "alignment", Alignment.from_json),
            runs_left_out=rd.texts(obj, "runs_left_out", where),
            reason=rd.text(obj, "reason", where))

    @property
    def references(self) -> tuple[str | None, str]:
        """The two features placed first, which need no topology: the signal itself and
        the held-out loss."""
        return self.signal, "loss"
