"""What every part of the summary shares: the number formats (the same in every table), the
markdown table and its cells, the note of a table that is absent, and the sections of
the statistics several parts read."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from toposig.analysis.correlations import feature_group
from toposig.records import Record
from toposig.records.controlled import Controlled, ControlledTest
from toposig.records.statistics import (
    Correlation,
    ModelSummary,
    Statistics,
    controlled_of,
    models_of,
)

DASH = "—"


LABELS: dict[str, str] = {
    "perplexity": "Perplexity",
    "loss": "Loss",
    "mlm_loss": "Masked-LM loss",
    "final_mlm_loss": "Final masked-LM loss",
    "h1_n_features": "H1 bars",
    "h1_total_persistence": "H1 total pers.",
    "h1_persistence_entropy": "H1 pers. entropy",
    "h0_total_persistence": "H0 total pers.",
    "rankme": "RankMe",
    "np_mean": "NP mean",
    "np_std": "NP std",
    "np_seed_mean": "NP mean (seed def.)",
    "weight_h0_total": "Weight H0 total",
    "weight_h1_total": "Weight H1 total",
    "weight_l2_norm": "Weight L2 norm",
    "final_loss": "Final loss",
    "final_perplexity": "Final perplexity",
}


QUALITY_TEXT = {"perplexity": "perplexity measured on the analysed texts",
                "loss": "loss as stored with the checkpoint",
                "mlm_loss": "masked-LM loss (an encoder's) on a seeded 15% of the analysed "
                            "texts' tokens"}


QUALITY = ("perplexity", "loss", "mlm_loss")


CONTROL_NAMES = {"raw": "raw", "partial_log_step": "partial", "first_differences": "first-diff",
                 "beyond_baseline": "beyond-baseline", "detrended": "detrended",
                 "partial_first_differences": "partial-diff",
                 "above_noise_floor": "above-noise-floor"}


TARGET_WORDS = {"perplexity": "perplexity (on the analysed texts)",
                "loss": "the loss stored with each checkpoint",
                "mlm_loss": "the masked-LM loss (on the analysed texts)"}


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_rho(x) -> str:
    """Correlation-like values (ρ, r, CI bounds, exponents): ``+.3f``."""
    return f"{x:+.3f}" if finite(x) else DASH


def fmt_p(x) -> str:
    """p-values, raw or adjusted: ``.2g``."""
    return f"{x:.2g}" if finite(x) else DASH


def fmt_ci(lo, hi) -> str:
    """A confidence interval ``[lo, hi]``, bounds as :func:`fmt_rho`."""
    return f"[{lo:+.3f}, {hi:+.3f}]" if finite(lo) and finite(hi) else DASH


def fmt_r2(x) -> str:
    return f"{x:.3f}" if finite(x) else DASH


def fmt_loss(x) -> str:
    """Losses and mean absolute errors (nats): ``.4f``."""
    return f"{x:.4f}" if finite(x) else DASH


def fmt_value(x) -> str:
    """Any other value: ``.4g`` below 1000, ``.1f`` from 1000 up."""
    if not finite(x):
        return DASH
    return f"{x:.1f}" if abs(x) >= 1000 else f"{x:.4g}"


def _fmt_whole(x) -> str:
    """An integer when ``x`` is one (up to float error), else ``.4g``; — when undefined."""
    if not finite(x):
        return DASH
    r = round(x)
    return str(int(r)) if abs(x - r) <= 1e-6 * max(1.0, abs(x)) else f"{x:.4g}"


def fmt_step(x) -> str:
    """A training step (or a difference of steps), as :func:`_fmt_whole` writes it."""
    return _fmt_whole(x)


def fmt_count(x) -> str:
    """A count (checkpoints, pairs, layers, ...), as :func:`_fmt_whole` writes it."""
    return _fmt_whole(x)


def fmt_params(x) -> str:
    return f"{int(x):,}" if finite(x) else DASH


def fmt_percent(x) -> str:
    """A share of training (0.3 -> ``30.0%``)."""
    return f"{100 * x:.1f}%" if finite(x) else DASH


def fmt_improvement(x) -> str:
    """A relative improvement, signed (0.106 -> ``+10.6%``)."""
    return f"{100 * x:+.1f}%" if finite(x) else DASH


def label_of(name: str) -> str:
    return LABELS.get(name, name)


def md_code(name: str) -> str:
    return f"`{name}`"


def md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    out = ["| " + " | ".join(md_cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return out


def absent_note(reason: str) -> list[str]:
    reason = reason.strip().rstrip(".")
    return [f"_Absent because {reason}._"]


def n_text(ns: Sequence) -> str:
    """``n = 18`` for one distinct count, ``n = 17–18`` for several, ``n = ?`` for none."""
    vals = sorted({int(n) for n in ns if finite(n)})
    if not vals:
        return "n = ?"
    return f"n = {vals[0]}" if len(vals) == 1 else f"n = {vals[0]}–{vals[-1]}"


def count_text(n: int, noun: str) -> str:
    return f"n = {n} {noun}" + ("" if n == 1 else "s")


_S = TypeVar("_S")


class Absent(Exception):
    """A table cannot be drawn; the message says why."""


def computed(section: _S | None, name: str) -> _S:
    """A typed section of the statistics (``name``), or :class:`Absent` when there is
    none or it holds only the reason it was not computed."""
    if section is None:
        raise Absent(f"the statistics have no `{name}` section")
    if getattr(section, "reason", None):
        raise Absent(f"`{name}` was not computed: {section.reason}")
    return section


def ok_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.ok]


def present_features(recs: Sequence[Record], names: Sequence[str]) -> list[str]:
    return [f for f in names if any(finite(r.features.get(f)) for r in recs)]


def model_summaries(statistics: Statistics | Mapping) -> Mapping[str, ModelSummary]:
    """The per-model summaries, or :class:`Absent` saying why there are none."""
    models = models_of(statistics)
    if models is None:
        raise Absent("the statistics have no `models` section")
    if not models:
        raise Absent("the statistics' `models` section is empty")
    return models


def quality_cell(model: ModelSummary, measure: str) -> str:
    """A model's final quality ``measure``, the loss to its own precision."""
    value = model.final_quality.get(measure)
    return fmt_loss(value) if measure == "loss" else fmt_value(value)


def controlled_section(statistics: Statistics | Mapping) -> Controlled:
    """The ``controlled`` section, or :class:`Absent` saying why there is none."""
    controlled = computed(controlled_of(statistics), "controlled")
    if not (controlled.targets or controlled.per_model or controlled.pooled
            or controlled.summary):
        raise Absent("the statistics' `controlled` section is empty")
    return controlled


def holm_text(c: Controlled) -> str:
    """How many tests each Holm family holds (statistics from before the families were
    counted say the number of feature × model entries)."""
    by = c.n_tests_by_control
    if by is None:
        return f"Holm over all {or_unknown(c.n_tests)} feature × model tests"
    names = ", ".join(f"{CONTROL_NAMES.get(k, k)} {v}" for k, v in by.items())
    return f"Holm within each control over its defined feature × model tests ({names})"


def or_unknown(value: object) -> object:
    return "?" if value is None else value


def bootstrap_text(statistics: Statistics | Mapping) -> str:
    c = controlled_of(statistics) or Controlled()
    return f"{interval_text(c)}; {holm_text(c)}"


def interval_text(c: Controlled) -> str:
    """How the 95% intervals were made (statistics from before the surrogate intervals
    say the percentile bootstrap)."""
    if c.ci_method:
        return (f"95% CI from {or_unknown(c.n_surrogates)} phase-randomised surrogates "
                "(respects autocorrelation; none pooled over checkpoints)")
    return (f"95% percentile bootstrap CI over checkpoints ({or_unknown(c.n_bootstrap)} "
            "resamples)")


def fraction_label(key: str) -> str:
    try:
        return fmt_percent(float(key)).replace(".0%", "%")
    except ValueError:
        return key


def short_reason(reason: str | None) -> str:
    """A few words for why a partial correlation is undefined."""
    if not reason:
        return "too few points"
    text = reason.lower()
    for who in ("target", "feature"):
        if text.startswith(f"the {who} is a monotone function of the step"):
            return f"{who} monotone in step"
    if text.startswith("no variation left"):
        return "no variation left"
    return reason.split(":")[0][:40]


def survives(entry: ControlledTest) -> str:
    sig = entry.significant
    applicable = [key for key in CONTROL_NAMES if sig.get(key) is not None]
    kept = [CONTROL_NAMES[key] for key in applicable if sig.get(key)]
    if kept and len(kept) == len(applicable):
        return f"all {len(applicable)}"
    return ", ".join(kept) or "none"


def targets_text(controlled: Controlled) -> str:
    """Which quality measure each kind of feature was tested against, from the tests'
    own targets (an encoder's are its masked-LM loss)."""
    groups: dict[str | None, list[str]] = {}
    for feature, target in controlled.targets.items():
        label = feature_group(feature).label
        if label not in groups.setdefault(target, []):
            groups[target].append(label)
    if not groups:
        return "no feature was tested"
    return "; ".join(f"{', '.join(labels)} features are tested against "
                     f"{TARGET_WORDS.get(t, t) if t else t}" for t, labels in groups.items())


def rho_p(c: Correlation | None) -> str:
    """``ρ (p)`` of a correlation, dashes where it is undefined or absent."""
    return (f"{fmt_rho(c.spearman_r if c else None)} "
            f"({fmt_p(c.spearman_p if c else None)})")


Build = Callable[[Statistics | Mapping, list[Record]], list[str]]
"""A table's lines from the statistics (typed, or partial JSON) and the records."""


@dataclass(frozen=True)
class Part:
    """One part of the summary: its title, a sentence on what it holds, its tables (a
    heading and the :data:`Build` that gives its lines, in order), and the statistics
    section the part needs to be shown at all (``None``: always shown)."""

    title: str
    intro: str
    tables: tuple[tuple[str, Build], ...]
    needs: str | None = None

