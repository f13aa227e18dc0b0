"""What a run will do, said before it starts: models x checkpoints x families, how many
are done already (and skipped), and a rough estimate of the time the rest takes
(:class:`RunOutline`, :func:`outline_lines`). Imports nothing heavy.

The estimate is rough. A family's seconds per checkpoint come, where they can, from
this run's own finished records (measured on this machine, on these models); otherwise
from :func:`rough_seconds`, the mean seconds per checkpoint of the project's small
models (5K-184K parameters) on the development machine's 2-core CPU, as the committed
results folders record them (docs/performance.md has the benchmarks). A Pythia-scale
model takes tens of times longer; a GPU shortens the model-bound families.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["ROUGH_SOURCE", "rough_seconds", "RunOutline", "duration", "measured_seconds",
           "outline_lines"]

def rough_seconds(family: str) -> float | None:
    """A family's rough seconds per checkpoint (its class's ``rough_seconds``: the mean of
    its records in the committed results folders, small models on a 2-core CPU; results/
    of 2026-11-29 for embedding, weights, landscape and gradients, results/induction of
    2026-12-02 for the others), or ``None`` for a family without a committed run."""
    from toposig.families import registry  # the families' classes: no torch

    try:
        return registry.get(family).rough_seconds
    except KeyError:  # not registered in this process
        return None


ROUGH_SOURCE = ("the mean seconds per checkpoint of the project's small models on a "
                "2-core CPU (committed results/, results/induction; docs/performance.md)")


@dataclass
class RunOutline:
    """The shape of a run before it starts.

    Attributes:
        checkpoints: model label -> how many of its checkpoints the run covers.
        families: family -> how many checkpoints the run measures it on.
        todo: family -> how many of those have no finished record (to compute).
        measured: family -> seconds per checkpoint measured on this run's finished
            records of it, where there are any.
        out: the results folder.
        note: a line to add (what is not known before the run, such as a suite that is
            not trained yet).
        done_known: whether the finished records were read (``todo`` then counts what
            they leave); ``False``: ``todo`` is everything, as for a suite not trained yet.
    """

    checkpoints: dict[str, int]
    families: dict[str, int]
    todo: dict[str, int]
    measured: dict[str, float] = field(default_factory=dict)
    out: str = "results"
    note: str | None = None
    done_known: bool = True

    @property
    def n_checkpoints(self) -> int:
        return sum(self.checkpoints.values())

    @property
    def n_measurements(self) -> int:
        return sum(self.families.values())

    @property
    def n_todo(self) -> int:
        return sum(self.todo.values())

    def seconds(self) -> tuple[float, list[str]]:
        """The estimated seconds of what is left to compute, and the families whose time
        is not known (left out of it)."""
        total, unknown = 0.0, []
        for family, n in self.todo.items():
            each = self.measured.get(family, rough_seconds(family))
            if each is None:
                unknown.append(family)
            elif n:
                total += n * each
        return total, unknown


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a rough time: 40 s, 12 min, 3.5 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _counts(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def outline_lines(o: RunOutline) -> list[str]:
    """The plan as the run prints it: models x checkpoints x families, what is done and
    skipped, what is left, and the rough estimate with where its numbers come from."""
    models = len(o.checkpoints)
    per_model = _counts(list(o.checkpoints.values())) if o.checkpoints else "0"
    lines = [f"plan: {models} model(s) x {per_model} checkpoint(s) x {len(o.families)} "
             f"famil{'y' if len(o.families) == 1 else 'ies'} ({', '.join(o.families)}) = "
             f"{o.n_measurements} measurement(s) of {o.n_checkpoints} checkpoint(s), "
             f"into {o.out}"]
    each = (f" ({', '.join(f'{f} {n}' for f, n in o.todo.items() if n)})"
            if o.n_todo and len(o.families) > 1 else "")
    if o.done_known:
        lines.append(f"  already done (skipped): {o.n_measurements - o.n_todo}; "
                     f"to compute: {o.n_todo}{each}")
    else:
        lines.append(f"  to compute: at most {o.n_todo}{each}; what is done already is "
                     "known once the checkpoints are")
    if o.note:
        lines.append(f"  {o.note}")
    if not o.n_todo:
        return lines
    seconds, unknown = o.seconds()
    parts = []
    for family in o.todo:
        if family in unknown or not o.todo[family]:
            continue
        each = o.measured.get(family, rough_seconds(family))
        parts.append(f"{family} {each:.2g} s" + ("*" if family in o.measured else ""))
    sources = [ROUGH_SOURCE] if any(f not in o.measured and rough_seconds(f) is not None
                                    for f in o.todo if o.todo[f]) else []
    if o.measured:
        sources.insert(0, "* measured on this folder's finished records")
    lines.append(f"  estimate: {'at most ' if not o.done_known else ''}about "
                 f"{duration(seconds)} (rough; per checkpoint: "
                 f"{', '.join(parts)}; from {' and '.join(sources)}"
                 + (f"; {', '.join(unknown)} not included: no figure yet" if unknown else "")
                 + ")")
    return lines


def measured_seconds(records: Mapping[str, Sequence[dict]]) -> dict[str, float]:
    """family -> mean seconds per checkpoint of its finished ``records`` (each record's
    ``timings_s.total``), for the families that have any."""
    out = {}
    for family, recs in records.items():
        times = [t for r in recs if isinstance(t := (r.get("timings_s") or {}).get("total"),
                                               (int, float))]
        if times:
            out[family] = sum(times) / len(times)
    return out
