"""The summary's first screen: the question, the calibrated verdicts and their power, in
a box of a few lines, then a table of contents.

Every count and number in the box is read from the same entries the long tables print
(C4's "Reads as" column, F3's **detects** marks, E1's "Predicts beyond the loss"), so the
box and the tables cannot disagree: :func:`verdicts` classifies each within-model and
pooled test as C4 reads it (:func:`toposig.report.summary.robustness.reading`).
"""

from __future__ import annotations

import contextlib
import math
import re
import statistics as stats
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toposig.analysis.inference import CALIBRATED, UNCALIBRATED
from toposig.records.controlled import TREND_KINDS, Controlled, ControlledTest
from toposig.records.sections import SectionError
from toposig.records.statistics import (
    Statistics,
    StatisticsError,
    about_of,
    controlled_of,
    ensembles_of,
    models_of,
    positive_controls_of,
)
from toposig.report.summary.cells import (
    TARGET_WORDS,
    Absent,
    controlled_section,
    finite,
    md_code,
)
from toposig.report.summary.positive_control import event_heading

__all__ = ["Verdicts", "answer_lines", "contents_lines", "verdicts"]

SHORT_TARGETS = {"perplexity": "perplexity", "loss": "the loss", "mlm_loss": "the masked-LM loss"}
"""The targets in a word, where the question names several."""

MAX_NAMED = 6
"""At most this many features are named on a line of the box; the rest are counted."""


@dataclass(frozen=True)
class Verdicts:
    """How the calibrated tests of one scope (within a model, or pooled over models)
    read, as table C4 reads each one.

    Attributes:
        tested: tests with at least one control calibrated for its design.
        associations: ``(feature, model)`` of the tests where a calibrated control
            survives Holm, in C4's order.
        mdc_holm: per test without an association, the smallest coupling a calibrated
            control would have found with 80 % power at Holm's strictest level (a
            correlation of the two series' fluctuations; ``inf`` where even 0.9 is found
            less often).
        uncalibrated: tests whose every simulated design rejects too often.
        untested: tests with no design simulation at all.
    """

    tested: int = 0
    associations: tuple[tuple[str, str], ...] = ()
    mdc_holm: tuple[float, ...] = ()
    uncalibrated: int = 0
    untested: int = 0


@dataclass
class _Tally:
    tested: int = 0
    associations: list[tuple[str, str]] = field(default_factory=list)
    mdc_holm: list[float] = field(default_factory=list)
    uncalibrated: int = 0
    untested: int = 0

    def add(self, feature: str, model: str, e: ControlledTest) -> None:
        design = e.design or {}
        calibrated = [design[c] for c in TREND_KINDS.values()
                      if c in design and e.calibration.get(c) == CALIBRATED]
        if any(e.significant.get(c) for c in TREND_KINDS.values()):
            self.tested += 1
            self.associations.append((feature, model))
        elif calibrated:
            self.tested += 1
            mdcs = [c.mdc_holm for c in calibrated if finite(c.mdc_holm)]
            self.mdc_holm.append(min(mdcs) if mdcs else math.inf)
        elif any(e.calibration.get(c) == UNCALIBRATED for c in design):
            self.uncalibrated += 1
        else:
            self.untested += 1

    def frozen(self) -> Verdicts:
        return Verdicts(self.tested, tuple(self.associations), tuple(self.mdc_holm),
                        self.uncalibrated, self.untested)


def verdicts(controlled: Controlled) -> tuple[Verdicts, Verdicts]:
    """The within-model and the pooled tests of ``controlled``, each as :class:`Verdicts`."""
    within, pooled = _Tally(), _Tally()
    for feature, model, e in controlled.every_entry(list(controlled.targets)):
        (pooled if model == "pooled" else within).add(feature, model, e)
    return within.frozen(), pooled.frozen()


def _names(features: Sequence[str]) -> str:
    unique = list(dict.fromkeys(features))
    shown = ", ".join(md_code(f) for f in unique[:MAX_NAMED])
    more = len(unique) - MAX_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def _power(v: Verdicts) -> str:
    """What the tests without an association could have found: the median MDC (Holm)
    over them and the most sensitive one's."""
    if not v.mdc_holm:
        return ""
    finite_mdcs = [m for m in v.mdc_holm if math.isfinite(m)]
    if not finite_mdcs:
        return ("Power: none of the tests without an association finds even a coupling "
                "of 0.9 with 80 % power at the Holm level.")
    median = stats.median(v.mdc_holm)
    median_text = "above 0.9" if not math.isfinite(median) else f"of {median:.2f} or more"
    return (f"Power: with 80 % power at the Holm level, these tests find a coupling of the "
            f"two series' fluctuations {median_text} (the median over the "
            f"{len(v.mdc_holm)} without an association; the most sensitive, "
            f"{min(finite_mdcs):.2f}); weaker couplings would be missed.")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _scope_line(name: str, v: Verdicts) -> str:
    if not (v.tested or v.uncalibrated or v.untested):
        return ""
    left = []
    if v.uncalibrated:
        left.append(f"{v.uncalibrated} uncalibrated for their design")
    if v.untested:
        left.append(f"{v.untested} without a design check")
    if not v.tested:
        return (f"**{name}.** No test is calibrated for its design, so these runs cannot "
                "say whether there is an association: " + "; ".join(left) + ".")
    found = v.associations
    where = ""
    if found and name.startswith("Within"):
        where = " (in " + ", ".join(dict.fromkeys(m for _, m in found)) + ")"
    text = (f"**{name}.** {_plural(v.tested, 'test')} calibrated for their design: "
            + (f"an association in {_plural(len(found), 'test')}"
               + (f", of {_plural(len({f for f, _ in found}), 'feature')}"
                  if len(found) > 1 else "")
               + ": " + _names([f for f, _ in found]) + where
               if found else "no association") + ".")
    if power := _power(v):
        text += " " + power
    if left:
        text += " Not counted: " + "; ".join(left) + "."
    return text


def _data_line(statistics: Statistics | Mapping) -> str:
    """The models, their checkpoints and the features tested, in one line."""
    try:
        models = models_of(statistics) or {}
        controlled = controlled_of(statistics)
    except (SectionError, StatisticsError):
        return ""
    if not models:
        return ""
    counts = [m.n_checkpoints for m in models.values() if m.n_checkpoints is not None]
    text = f"**Data.** {_plural(len(models), 'model')}"
    if counts:
        each = (f"{counts[0]} each" if min(counts) == max(counts)
                else f"{min(counts)} to {max(counts)} per model")
        text += f", {sum(counts):,} checkpoints ({each})"
    if controlled is not None and controlled.targets:
        text += f"; {_plural(len(controlled.targets), 'feature')} tested"
    return text + "."


def _positive_control_line(statistics: Statistics | Mapping) -> str:
    try:
        pc = positive_controls_of(statistics)
    except (SectionError, StatisticsError):
        return ""
    if pc is None or pc.reason or not pc.head_to_head:
        return ""
    truth = (pc.signal, *pc.mechanism)
    parts = []
    for event in pc.every_event:
        if event not in pc.head_to_head:
            continue
        found = [f for f, t in pc.head_to_head[event].items()
                 if t.detects and f not in truth]
        parts.append(f"{event_heading(event)}: " + (_names(found) if found else "no feature"))
    if not parts:
        return ""
    return ("**Positive control (F3).** The known transition, detected under the "
            "corrected head-to-head, by event: " + "; ".join(parts) + ".")


def _ensemble_line(statistics: Statistics | Mapping) -> str:
    try:
        ens = ensembles_of(statistics)
    except (SectionError, StatisticsError):
        return ""
    if ens is None or ens.reason or not ens.verdict:
        return ""
    found = sorted({f for f, per in ens.verdict.items()
                    for v in per.values() if v.predicts_beyond_loss})
    tested = sum(1 for per in ens.verdict.values() for v in per.values() if v.sizes_tested)
    return ("**Across seeds (E1).** " + (
        f"Predicts the final loss beyond the loss: {_names(found)}." if found else
        "No feature predicts the final loss beyond the loss at a fixed point of training"
        + (f" ({tested} feature × fraction tests)." if tested else
           ": no size has enough seeds to test.")))


def answer_lines(statistics: Statistics | Mapping) -> list[str]:
    """The box at the top of ``summary.md``: a heading, the question and, as blockquote
    lines, the calibrated verdicts within a model and pooled, their power, what is not
    counted, and the positive control's and the ensembles' verdicts where the study has
    them (5 to 10 lines; only values the tables below print)."""
    about = about_of(statistics)
    target = TARGET_WORDS.get(about.target or "", about.target or "the target")
    with contextlib.suppress(SectionError, StatisticsError):
        controlled = controlled_of(statistics)
        wanted = list(dict.fromkeys((controlled.targets or {}).values())) if controlled else []
        if len(wanted) > 1:  # each family against its own measure of quality
            target = ("the model's quality (" + " or ".join(SHORT_TARGETS.get(t, t)
                                                            for t in wanted)
                      + ", by feature family, as the notes above say)")
    lines = ["## The answer", "",
             f"> **Question.** Does a signature follow {target} beyond the trend that both "
             "share over training? Each feature is tested within each model and pooled "
             "over models by the two controls calibrated on the test's own design "
             "(detrended; partial first differences; Holm-adjusted).", ">"]
    if data := _data_line(statistics):
        lines += [f"> {data}", ">"]
    try:
        within, pooled = verdicts(controlled_section(statistics))
    except (Absent, SectionError, StatisticsError) as exc:
        reason = str(exc) if isinstance(exc, Absent) else "its statistics are malformed"
        within = pooled = None
        lines += [f"> **Verdict.** No calibrated test: {reason}.", ">"]
    for name, v in (("Within a model", within), ("Pooled over models", pooled)):
        if v is not None and (text := _scope_line(name, v)):
            lines += [f"> {text}", ">"]
    for text in (_positive_control_line(statistics), _ensemble_line(statistics)):
        if text:
            lines += [f"> {text}", ">"]
    lines.append("> Every test: C4 (calibration and power), C1 (the other controls); the "
                 "raw correlations of parts A and B describe, they do not test.")
    return lines


def anchor(heading: str) -> str:
    """The link target GitHub and MkDocs give a markdown heading: lower case, characters
    other than letters, digits, spaces, hyphens and underscores dropped, spaces as
    hyphens (``"Part C. Robustness"`` -> ``part-c-robustness``)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def contents_lines(headings: Sequence[tuple[int, str]]) -> list[str]:
    """A table of contents of ``(level, heading)`` pairs (level 2 for a part, 3 for a
    table), each linked to its heading's anchor."""
    lines = ["## Contents", ""]
    for level, heading in headings:
        indent = "  " * (level - 2)
        lines.append(f"{indent}- [{heading}](#{anchor(heading)})")
    return lines
