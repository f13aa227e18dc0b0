"""Training steps from checkpoint names, and which checkpoints a run takes.

Checkpoint suites name their checkpoints in many ways. One parser reads a training step
from a Hub revision name, a local sub-folder name or (with a user pattern) a file name:

==========================  ===========================  ==================  =========
scheme                      used by                      example             step
==========================  ===========================  ==================  =========
``step<N>``                 Pythia                       ``step1000``        1000
``step<N>-tokens<M>``       OLMo (``stage1-`` prefix ok) ``step1000-tokens4B`` 1000
``step_<N>k``               MultiBERTs                   ``step_20k``        20000
``step_<N>``                                             ``step_500``        500
``ckpt_<N>``                LLM360 (Amber, Crystal)      ``ckpt_100``        100
``checkpoint-<N>``          HF Trainer, Stanford CRFM    ``checkpoint-100``  100
``global_step<N>``          DeepSpeed                    ``global_step500``  500
``iter_<N>``                Megatron-LM                  ``iter_0001000``    1000
==========================  ===========================  ==================  =========

A user pattern (``--revision-pattern REGEX``, one capturing group for the step) is tried
first and must match the whole name. Names that parse to no step (``main``) are not
checkpoints of the series.

A user pattern cannot hang a run: it is matched with a time limit
(:data:`PATTERN_SECONDS`, 2 s for all the names of a series together), and a pattern
that backtracks catastrophically (``(a|aa)+$``) is refused with a
:class:`RevisionError` saying so; names longer than :data:`MAX_NAME_CHARS` (255)
characters are not tried against it.

A :class:`StepSelection` is what the user asked for (``--steps``, ``--revisions``) and
:func:`select` applies it to the revisions a series has.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

try:  # matches with a timeout; a dependency of transformers, so always there in practice
    import regex as _regex
except ImportError:  # pragma: no cover - exercised by monkeypatching _regex to None
    _regex = None

logger = logging.getLogger(__name__)

# A --revision-pattern's matching, all names of a series together, may take this long.
PATTERN_SECONDS = 2.0
# Longer names are not tried against a --revision-pattern (file names are at most 255
# bytes on common file systems, and no suite's revision names come near); the built-in
# schemes still read them.
MAX_NAME_CHARS = 255

SEED_STEPS: tuple[int, ...] = (
    0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
    1000, 2000, 5000, 10000, 33000, 66000, 100000, 143000,
)  # fmt: skip
PYTHIA_ALL_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512) + tuple(
    range(1000, 143001, 1000)
)
NAMED_SCHEDULES: dict[str, tuple[int, ...]] = {"seed": SEED_STEPS}
ALL = "all"

# (scheme, whole-name pattern with the step in group 1, multiplier), tried in order.
SCHEMES: tuple[tuple[str, re.Pattern[str], int], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE), mult) for name, pattern, mult in (
        ("step<N>", r"step(\d+)", 1),
        ("step<N>-tokens<M>", r"(?:stage\d+-)?step(\d+)-tokens\d+(?:\.\d+)?[KMBT]?", 1),
        ("step_<N>k", r"step_(\d+)k", 1000),
        ("step_<N>", r"step_(\d+)", 1),
        ("ckpt_<N>", r"ckpt_(\d+)", 1),
        ("checkpoint-<N>", r"checkpoint-(\d+)", 1),
        ("global_step<N>", r"global_step(\d+)", 1),
        ("iter_<N>", r"iter_(\d+)", 1),
    )
)


class RevisionError(ValueError):
    """A revision pattern, a step list or a revision list that cannot be used."""


@dataclass(frozen=True)
class Revision:
    """A named checkpoint of a series and its training step.

    Attributes:
        name: the revision (Hub branch or tag) or sub-folder name, as it is spelled.
        step: the training step read from it.
        scheme: which scheme read it (``"pattern"`` for the user's).
    """

    name: str
    step: int
    scheme: str


class RevisionPattern:
    """A compiled ``--revision-pattern`` whose matching is bounded in time.

    It reads like a compiled :mod:`re` pattern (``pattern``, ``groups``, ``fullmatch``).
    Matching all names with one object may take :data:`PATTERN_SECONDS` in total; past
    that :meth:`fullmatch` raises :class:`RevisionError` (the pattern backtracks
    catastrophically). The limit is kept with the ``regex`` module's ``timeout``, or
    without it with a ``SIGALRM`` timer in the main thread (elsewhere, unbounded).
    """

    def __init__(self, pattern: str, compiled: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.groups = compiled.groups
        self._re = compiled
        self._bounded = None
        if _regex is not None:
            try:
                self._bounded = _regex.compile(pattern)
            except _regex.error:  # a spelling only `re` reads: matched with the alarm
                self._bounded = None
        self._left = PATTERN_SECONDS

    def fullmatch(self, name: str) -> re.Match[str] | None:
        """The match of the whole ``name``, or ``None`` (also for a name longer than
        :data:`MAX_NAME_CHARS`).

        Raises:
            RevisionError: the time for this pattern is spent.
        """
        if len(name) > MAX_NAME_CHARS:
            return None
        if self._left <= 0:
            raise self._too_slow(name)
        start = time.perf_counter()
        try:
            if self._bounded is not None:
                return self._bounded.fullmatch(name, timeout=self._left)
            return _fullmatch_with_alarm(self._re, name, self._left)
        except TimeoutError:
            self._left = 0.0
            raise self._too_slow(name) from None
        finally:
            self._left -= time.perf_counter() - start

    def _too_slow(self, name: str) -> RevisionError:
        return RevisionError(
            f"--revision-pattern {self.pattern!r} took more than {PATTERN_SECONDS:g} s to "
            f"match the checkpoint names (at {name[:60]!r}): it backtracks catastrophically, "
            "as a repetition inside a repetition does ('(a+)+', '(a|aa)+'); give a simpler "
            r"pattern, e.g. 'epoch\d+-step(\d+)'")


def _fullmatch_with_alarm(compiled: re.Pattern[str], name: str,
                          seconds: float) -> re.Match[str] | None:
    """``compiled.fullmatch(name)``, interrupted with TimeoutError after ``seconds``
    (``re`` checks for signals while it backtracks); unbounded off the main thread or
    where there is no ``setitimer``. A timer set before is put back, less the time spent."""
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")):
        return compiled.fullmatch(name)

    def _alarm(signum: int, frame: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, _alarm)
    start = time.monotonic()
    pending, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return compiled.fullmatch(name)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if pending:
            signal.setitimer(signal.ITIMER_REAL,
                             max(pending - (time.monotonic() - start), 1e-3))


def compile_pattern(pattern: str | None) -> RevisionPattern | None:
    """``--revision-pattern``: a regular expression with exactly one capturing group, as
    a :class:`RevisionPattern` (matching bounded in time).

    Raises:
        RevisionError: not a regular expression, or not exactly one group.
    """
    if pattern is None:
        return None
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise RevisionError(f"--revision-pattern {pattern!r} is not a regular expression: "
                            f"{exc}") from exc
    if compiled.groups != 1:
        raise RevisionError(f"--revision-pattern {pattern!r} must have exactly one capturing "
                            f"group, the step (it has {compiled.groups}); e.g. 'ep(\\d+)'")
    return RevisionPattern(pattern, compiled)


def parse_revision(name: str, pattern: RevisionPattern | re.Pattern[str] | None = None
                   ) -> Revision | None:
    """The training step a checkpoint name stands for, or ``None``.

    Raises:
        RevisionError: the user's pattern matches but its group is not a number, or it
            takes too long (:class:`RevisionPattern`).

    >>> parse_revision("step1000-tokens4B").step, parse_revision("step_20k").step
    (1000, 20000)
    """
    if pattern is not None:
        m = pattern.fullmatch(name)
        if m:
            group = m.group(1)
            if group is None or not (group.isascii() and group.isdigit()):
                raise RevisionError(
                    f"--revision-pattern {pattern.pattern!r} matches {name!r}, but its group "
                    f"captured {group!r}, not a whole number: the group must be the step")
            return Revision(name, int(group), "pattern")
    for scheme, regex, mult in SCHEMES:
        m = regex.fullmatch(name)
        if m:
            return Revision(name, int(m.group(1)) * mult, scheme)
    return None


def parse_revisions(names: Iterable[str],
                    pattern: RevisionPattern | re.Pattern[str] | None = None,
                    where: str = "the series") -> list[Revision]:
    """The names that stand for a step, ordered by step (then name); the others are left
    out. Two names may stand for one step (OLMo 2's ``stage1-step1000-...`` and
    ``stage2-step1000-...``): :func:`select` refuses only a choice that would need to
    tell them apart by step."""
    revisions, skipped = [], []
    for name in names:
        rev = parse_revision(name, pattern)
        if rev is None:
            skipped.append(name)
        else:
            revisions.append(rev)
    if skipped:
        logger.debug("%s: %d name(s) stand for no step: %s", where, len(skipped),
                     ", ".join(sorted(skipped)[:8]))
    return sorted(revisions, key=lambda r: (r.step, r.name))


@dataclass(frozen=True)
class StepSelection:
    """Which checkpoints of each series a run takes.

    Attributes:
        steps: explicit training steps (``--steps 0 1000``), or ``None``.
        every: ``--steps all``: every checkpoint the series has.
        schedule: a named schedule (``--steps seed``), whose steps are in ``steps``.
        revisions: revision names (``--revisions step1000-tokens4B``).
        pattern: ``--revision-pattern``, tried before the built-in schemes.
    """

    steps: tuple[int, ...] | None = None
    every: bool = False
    schedule: str | None = None
    revisions: tuple[str, ...] = ()
    pattern: str | None = None

    def __post_init__(self) -> None:
        compile_pattern(self.pattern)

    @property
    def compiled(self) -> RevisionPattern | None:
        """The pattern compiled afresh, with the whole time limit to spend."""
        return compile_pattern(self.pattern)

    @property
    def is_default(self) -> bool:
        return self.steps is None and not self.every and not self.revisions


def parse_selection(steps: Sequence[str] | None = None, revisions: Sequence[str] | None = None,
                    pattern: str | None = None) -> StepSelection:
    """``--steps`` values (integers, ``seed`` or ``all``), ``--revisions`` names and
    ``--revision-pattern`` as a :class:`StepSelection`.

    Raises:
        RevisionError: a value that is not allowed, naming it and what is.
    """
    revisions = tuple(dict.fromkeys(revisions or ()))
    if steps and revisions:
        raise RevisionError("a step (--steps) and a revision name (--revisions) both choose "
                            "checkpoints: give one")
    if not steps:
        return StepSelection(revisions=revisions, pattern=pattern)
    if len(steps) == 1 and steps[0] == ALL:
        return StepSelection(every=True, pattern=pattern)
    if len(steps) == 1 and steps[0] in NAMED_SCHEDULES:
        return StepSelection(steps=NAMED_SCHEDULES[steps[0]], schedule=steps[0],
                             pattern=pattern)
    out = []
    for v in steps:
        if not (isinstance(v, str) and v.isascii() and v.isdigit()):
            raise RevisionError(
                f"--steps takes non-negative integers, 'all' or one of "
                f"{sorted(NAMED_SCHEDULES)}, got {v!r}")
        out.append(int(v))
    return StepSelection(steps=tuple(sorted(set(out))), pattern=pattern)


def select(available: Sequence[Revision], selection: StepSelection, where: str, *,
           default_schedule: tuple[int, ...] | None = None,
           unparsed: Sequence[str] = ()) -> list[Revision]:
    """The revisions of a series that ``selection`` asks for, ordered by step.

    Args:
        available: the series' revisions (:func:`parse_revisions`).
        selection: what the user asked for.
        where: the series, for messages.
        default_schedule: with no ``--steps`` / ``--revisions``, these steps when the
            series has every one of them (the seed's 19 Pythia steps on the Hub);
            otherwise every revision.
        unparsed: the series' names that stand for no step (for messages).

    Raises:
        RevisionError: a requested step or revision the series does not have (the
            message lists what it has); a chosen step that two names stand for; a series
            in which no name stands for a step.
    """
    if not available:
        hint = (f" ({', '.join(map(repr, list(unparsed)[:5]))} match no revision scheme: "
                "pass --revision-pattern with one group for the step)" if unparsed else "")
        raise RevisionError(f"{where} has no checkpoint whose name stands for a training "
                            f"step{hint}")
    by_step: dict[int, list[Revision]] = {}
    for r in available:
        by_step.setdefault(r.step, []).append(r)
    if selection.revisions:
        by_name = {r.name: r for r in available}
        missing = [n for n in selection.revisions if n not in by_name]
        if missing:
            raise RevisionError(
                f"{where} has no checkpoint named {', '.join(map(repr, missing))}"
                f"{_unparsed_hint(missing, unparsed)}; it has {_listing(available)}")
        chosen: dict[int, Revision] = {}
        for n in selection.revisions:
            rev = by_name[n]
            if rev.step in chosen:
                raise RevisionError(
                    f"{chosen[rev.step].name!r} and {n!r} both stand for step {rev.step}, and "
                    f"a run files its records by step: choose one of them")
            chosen[rev.step] = rev
        return [chosen[s] for s in sorted(chosen)]
    steps = selection.steps
    if selection.every or (steps is None and not (
            default_schedule is not None and set(default_schedule) <= set(by_step))):
        steps = tuple(by_step)
    elif steps is None:
        steps = default_schedule
    missing_steps = [s for s in steps if s not in by_step]
    if missing_steps:
        shown = missing_steps[:10]
        more = f" and {len(missing_steps) - 10} more" if len(missing_steps) > 10 else ""
        raise RevisionError(f"steps {shown}{more} are not in {where}; it has "
                            f"{_listing(available)}")
    ambiguous = [s for s in steps if len(by_step[s]) > 1]
    if ambiguous:
        names = ", ".join(repr(r.name) for r in by_step[ambiguous[0]])
        raise RevisionError(
            f"{where} has {len(by_step[ambiguous[0]])} checkpoints of step {ambiguous[0]} "
            f"({names}){' and more such steps' if len(ambiguous) > 1 else ''}; choose by "
            "name with --revisions")
    return [by_step[s][0] for s in steps]


def _unparsed_hint(names: Sequence[str], unparsed: Sequence[str]) -> str:
    present = [n for n in names if n in set(unparsed)]
    if not present:
        return ""
    return (f" that stands for a training step ({', '.join(map(repr, present))} exists but "
            "matches no revision scheme: pass --revision-pattern with one group for the "
            "step)")


def _listing(available: Sequence[Revision]) -> str:
    if not available:
        return "none that stands for a training step"
    names = [f"{r.name} (step {r.step})" if r.name != f"step{r.step}" else r.name
             for r in available]
    if len(names) > 12:
        names = [*names[:6], "...", *names[-3:]]
    return f"{len(available)}: {', '.join(names)}"
