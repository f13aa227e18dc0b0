"""``results/summary.md``: the seed studies' tables, reproduced from this run's data.

:func:`summary_markdown` renders markdown from the statistics written by
:func:`toposig.analysis.compute.compute_statistics` and the per-checkpoint records
(``data/all_results.json``). Every number printed is a value of ``statistics`` (or, in
the per-checkpoint trajectory tables, of ``records``), formatted but never recomputed,
so the markdown can be checked against ``statistics.json`` number by number. A section
of the statistics that is missing, or that holds a ``reason`` instead of results, gives
a one-line note saying why its table is absent.

Number formats (the same in every table): correlations (ρ, partial r, first-difference
ρ, bootstrap CI bounds, power-law exponents) ``+.3f``; p-values (raw and Holm) ``.2g``;
R² ``.3f``; losses and MAEs ``.4f``; training steps as integers; parameter counts with
thousands separators; shares of training and improvements as percentages ``.1f``; other
values ``.4g`` (``.1f`` from 1000 up).

It opens with what it was computed from, then the answer (:mod:`toposig.report.summary.answer`:
the question, the calibrated verdicts within a model and pooled with their power, the positive
control's and the ensembles' verdicts, in a box on the first screen) and a table of
contents; the long tables (:data:`LONG_TABLES`, a row per checkpoint or per feature × model)
come last, in an appendix, and their parts link to them.

Parts:

* A, the seed report: per-model trajectories (A1), the final checkpoints side by side
  (A2), topological vs spectral embedding features' correlations with the target (A3);
* B, the seed paper: tables 1 to 8 (configurations; weight-row H0 total persistence,
  neural persistence and weight-row H1 total persistence against the loss; final-loss
  prediction; phases; scaling with size; the largest model's weight-feature trajectory);
* C, ours: every feature × model (and pooled) under the raw, partial (log step) and
  first-difference tests, and which features survive all of them;
* E, only for a study of seed ensembles (``ensembles`` in the statistics): the test
  across seeds at fixed fractions of training (E1) and the seed-to-seed spread as a
  noise floor (E2).

Nothing here touches the disk: :func:`toposig.analyze.write_summary` writes the summary.
Stage 3 as a whole (reading the folder, computing and writing the statistics, this
summary and the figures) is :func:`toposig.analyze.analyze`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence

from toposig.analysis.correlations import by_model
from toposig.records import Record, records_from_json
from toposig.records.controlled import Controlled
from toposig.records.sections import SectionError
from toposig.records.statistics import (
    Statistics,
    StatisticsError,
    about_of,
    controlled_of,
    models_of,
)
from toposig.report.summary.answer import anchor, answer_lines, contents_lines
from toposig.report.summary.cells import (
    TARGET_WORDS,
    Absent,
    Build,
    Part,
    absent_note,
    holm_text,
    interval_text,
    targets_text,
)
from toposig.report.summary.ensembles import PART as ENSEMBLES
from toposig.report.summary.positive_control import PART as POSITIVE_CONTROL
from toposig.report.summary.probes import PART as PROBES
from toposig.report.summary.robustness import PART as ROBUSTNESS
from toposig.report.summary.seed_paper import PART as SEED_PAPER
from toposig.report.summary.seed_report import PART as SEED_REPORT

PARTS: tuple[Part, ...] = (SEED_REPORT, SEED_PAPER, ROBUSTNESS, PROBES, ENSEMBLES,
                           POSITIVE_CONTROL)
"""The parts of the summary, in order (:class:`~toposig.report.summary.cells.Part`); a part
that needs a section of the statistics is shown only when they have it."""

APPENDIX_TITLE = "Appendix. The long tables"
LONG_TABLES: tuple[str, ...] = (
    "A1. Training trajectories",
    "C1. Robustness of every feature's correlation",
    "C4. Calibrated tests: intervals, calibration on each run's design, power",
    "E1. Across seeds: does a feature predict the final loss beyond the loss?",
)
"""The tables with a row per checkpoint or per feature × model (hundreds of lines in a
study of a few models): they are printed last, in an appendix, in this order, and their
place in their part holds a line that links to them."""

HEADINGS: tuple[str, ...] = (
    *(heading for part in PARTS if part.needs is None for heading, _ in part.tables
      if heading not in LONG_TABLES),
    *(heading for part in PARTS if part.needs is None for heading, _ in part.tables
      if heading in LONG_TABLES),
)
"""The headings of the tables every summary has (parts A to D), in the order printed: the
long tables (:data:`LONG_TABLES`) last."""


def _alpha(statistics: Statistics | Mapping) -> float:
    """The level the controls tested at (0.05 where the section is missing or damaged:
    its own table says so)."""
    try:
        return (controlled_of(statistics) or Controlled()).level or 0.05
    except SectionError:
        return 0.05


def too_short(records: Sequence[Record], alpha: float) -> dict[str, int]:
    """The models with too few checkpoints for any within-model test at ``alpha`` (the
    smallest exact Spearman p, 2/n!, not below it: fewer than 5 at 0.05) -> their number
    of checkpoints (2 or more: one checkpoint has no correlation at all)."""
    counts = {label: len(recs) for label, recs in by_model(records).items()}
    return {m: n for m, n in counts.items() if n >= 2 and 2 / math.factorial(n) >= alpha}


SHORT_MARK = "†"


def mark_short_models(lines: list[str], short: Mapping[str, int]) -> list[str]:
    """``lines`` of a summary with every table cell that names a model of ``short``
    (``m``, ```m```, or ``m`` then a space, as per-model columns are headed) marked
    ``†``, and under each table that has one, a line saying what the mark means."""
    if not short:
        return lines

    def names(cell: str) -> bool:
        text = cell.strip()
        return any(text in (m, f"`{m}`") or text.startswith((f"{m} ", f"`{m}` "))
                   for m in short)

    out: list[str] = []
    marked = False
    for i, line in enumerate(lines):
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = line.split("|")
            hits = [j for j, c in enumerate(cells[1:-1], 1) if names(c)]
            for j in hits:
                cells[j] = f"{cells[j].rstrip()} {SHORT_MARK} "
            marked |= bool(hits)
            line = "|".join(cells)
        out.append(line)
        ends = line.startswith("|") and not (i + 1 < len(lines) and lines[i + 1].startswith("|"))
        if ends and marked:
            out += ["", f"{SHORT_MARK} too few checkpoints to test within the model "
                        f"({', '.join(f'`{m}`: {n}' for m, n in short.items())}; see the "
                        "header): its ρ and p describe, they cannot be significant."]
            marked = False
    return out


def _header(statistics: Statistics | Mapping, records: list[Record], alpha: float,
            short: Mapping[str, int]) -> list[str]:
    """The summary's opening: what it was computed from, the models (``short``: those too
    short to test at ``alpha``, :func:`too_short`), the target and the notes."""
    about = about_of(statistics)
    try:
        models = models_of(statistics) or {}
    except StatisticsError:  # table A2 says so
        models = {}
    try:
        controlled = controlled_of(statistics) or Controlled()
    except SectionError:  # the section's own table says so
        controlled = Controlled()
    hashes = about.settings_hashes
    digest = about.records_sha256
    made_from = [f"records SHA-256 {digest[:12]}"] if digest else []
    made_from += [f"settings {', '.join(hashes)}"] if hashes else []
    lines = ["# Summary of results", "",
             "Generated by `toposig.report` from `data/statistics.json`"
             + (f" ({'; '.join(made_from)})" if made_from else "")
             + " and the per-checkpoint records in `data/all_results.json`. Every number is "
             "a value of those files, rounded for display.", ""]
    if models:
        lines.append(f"Models ({len(models)}): " + ", ".join(
            f"`{k}`" + (f" ({short[k]} checkpoints: too short to test)" if k in short else "")
            for k in models) + ".")
    if short:
        n = max(short.values())
        need = next(k for k in range(n + 1, 30) if 2 / math.factorial(k) < alpha)
        lines.append(
            f"Too short to test within a model: {', '.join(f'`{m}`' for m in short)}. With "
            f"{n} checkpoints the smallest p an exact Spearman test can give is "
            f"{2 / math.factorial(n):.2g} (a perfect rank order), not below {alpha}: every "
            "per-model correlation of these models is a description, and none can be "
            f"significant; a test needs at least {need} checkpoints.")
    if about.target:
        better = ("; higher is better, so a feature that rises as the model improves has "
                  "a positive ρ" if about.target_better == "higher" else "")
        lines.append(f"Correlation target of `correlations`: "
                     f"{TARGET_WORDS.get(about.target, about.target)}"
                     f"{better}; in the controlled tests {targets_text(controlled)}.")
    if controlled.n_tests:
        lines.append(f"Significance: Holm-adjusted p < {controlled.level}, "
                     f"{holm_text(controlled)}; {interval_text(controlled)}.")
        if controlled.pooled_method:
            lines.append(f"Pooled over models: {controlled.pooled_method}.")
        if controlled.design_method:
            lines.append(f"Calibration and power: {controlled.design_method} (C4).")
    if seeds_note := about.notes.get("controlled_seeds"):
        lines.append(f"Within-model controls (parts A to C): {seeds_note}.")
    lines.append("Not reproduced: the seeds' software-version and hyperparameter tables "
                 "(see `data/config.json`).")
    return lines


def _built(build: Build, statistics: Statistics | Mapping,
           records: list[Record]) -> list[str]:
    """A table's lines, or the one-line note that says why it is absent: the statistics
    have no such section, it holds the reason it was not computed, or the section it
    reads does not read (a damaged file). An error of the table's own code is not
    caught."""
    try:
        return build(statistics, records)
    except Absent as exc:
        return absent_note(str(exc))
    except (SectionError, StatisticsError) as exc:  # the section it reads does not read
        return absent_note(f"its statistics are malformed ({type(exc).__name__}: {exc})")


def summary_markdown(statistics: Statistics | Mapping,
                     records: Sequence[Record | Mapping]) -> str:
    """The markdown of ``results/summary.md`` (see the module docstring).

    Args:
        statistics: as written to ``data/statistics.json`` by
            :func:`toposig.analysis.compute.compute_statistics`; any section may be missing or
            hold only a ``reason``.
        records: the per-checkpoint records (:class:`toposig.records.Record`, or
            ``data/all_results.json``'s entries as JSON), used for the trajectory tables
            and the architecture columns of table 1.

    Returns:
        The document, ending with a newline. Pure: reads and writes no file.

    Raises:
        toposig.records.RecordError: a record given as JSON is not sound (the statistics,
            by contrast, may be partial or damaged: each table says what it misses).
    """
    statistics = statistics or {}
    # sound JSON is read once here, not once per table; partial or damaged JSON stays as
    # it is, and each table reads what it needs and says what is missing
    with contextlib.suppress(StatisticsError):
        statistics = Statistics.from_json(statistics)
    records = records_from_json(records)
    present = about_of(statistics).sections
    alpha = _alpha(statistics)
    short = too_short(records, alpha)
    shown = [part for part in PARTS if part.needs is None or part.needs in present]
    body: list[str] = []
    appendix: list[str] = []
    contents: list[tuple[int, str]] = []
    moved: list[tuple[int, str]] = []
    for part in shown:
        body += ["", f"## {part.title}", "", part.intro]
        contents.append((2, part.title))
        for heading, build in part.tables:
            table = ["", f"### {heading}", "", *_built(build, statistics, records)]
            if heading in LONG_TABLES:
                body += ["", f"{heading.split('.')[0]}: in the appendix, "
                             f"[{heading}](#{anchor(heading)}) "
                             f"({sum(line.startswith('|') for line in table)} table lines)."]
                appendix += table
                moved.append((3, heading))
            else:
                body += table
                contents.append((3, heading))
    order = {h: i for i, h in enumerate(LONG_TABLES)}
    if appendix:  # the long tables in LONG_TABLES' order, whatever their parts' order
        blocks = re.split(r"\n(?=### )", "\n".join(appendix).strip("\n"))
        blocks.sort(key=lambda b: order[b.splitlines()[0][4:]])
        appendix = ["", f"## {APPENDIX_TITLE}", "", "The tables with a row per checkpoint "
                    "or per feature × model, printed last so that the answer and the "
                    "short tables come first.", "", *"\n\n".join(blocks).splitlines()]
        moved.sort(key=lambda m: order[m[1]])
        contents += [(2, APPENDIX_TITLE), *moved]
    lines = [*_header(statistics, records, alpha, short), "", *answer_lines(statistics),
             "", *contents_lines(contents), *body, *appendix]
    lines = mark_short_models(lines, short)
    text = "\n".join(lines) + "\n"
    return re.sub(r"\n{3,}", "\n\n", text)
