"""Part E of the summary, for a study of seed ensembles only: the test across seeds at
fixed fractions of training, and the seed-to-seed spread as a noise floor."""

from __future__ import annotations

from collections.abc import Mapping

from toposig.records import Record
from toposig.records.ensembles import AcrossSeeds, Verdict
from toposig.records.statistics import (
    Statistics,
    ensembles_of,
)
from toposig.report.summary.cells import (
    DASH,
    Part,
    computed,
    finite,
    fmt_ci,
    fmt_params,
    fmt_percent,
    fmt_rho,
    fmt_step,
    fmt_value,
    md_code,
    md_table,
)


def _group_cell(c: AcrossSeeds | None) -> str:
    """``r [lo, hi]`` with the baseline controlled for, or the reason there is none."""
    if c is None:
        return DASH
    if c.r is None:
        return f"undefined (n = {c.n_seeds})"
    text = f"{fmt_rho(c.r)} {fmt_ci(c.ci_low, c.ci_high)}"
    if c.baseline:
        text += f" given {c.baseline}"
    if c.calibrated is False:  # too few seeds for the interval to hold its size
        return text + f" (uncalibrated: {c.n_seeds} seeds)"
    return text + (" *" if c.beyond_loss else "")


def _advantage_cell(c: AcrossSeeds | None) -> str:
    if c is None or c.advantage is None:
        return DASH
    return f"{fmt_rho(c.advantage)} {fmt_ci(c.advantage_low, c.advantage_high)}"


def _across_seeds(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    ens = computed(ensembles_of(statistics), "ensembles")
    groups = list(ens.groups)
    headers = ["Feature", "Fraction",
               *(f"{g}: partial r [95% CI] given the baseline" for g in groups),
               *(f"{g}: advantage over the baseline [95% CI]" for g in groups),
               "Sizes beyond the loss", "Predicts beyond the loss"]
    rows = []
    for feature, per_fraction in ens.across_seeds.items():
        for key, cells in per_fraction.items():
            v = ens.verdict.get(feature, {}).get(key) or Verdict()
            rows.append([md_code(feature), fmt_percent(float(key)),
                         *(_group_cell(cells.get(g)) for g in groups),
                         *(_advantage_cell(cells.get(g)) for g in groups),
                         f"{v.sizes_beyond or 0} of {v.sizes_tested or 0}",
                         "yes" if v.predicts_beyond_loss else "no"])
    sizes = "; ".join(
        f"`{g}`: {i.n_seeds} seeds ({', '.join(str(x) for x in i.seeds)}), "
        f"{fmt_params(i.num_parameters)} parameters, fractions at steps "
        + ", ".join(fmt_step(x) for x in i.fraction_steps.values())
        + f" of {fmt_step(i.final_step)}" for g, i in ens.groups.items())
    found = sorted({f for f, per in ens.verdict.items()
                    for v in per.values() if v.predicts_beyond_loss})
    chance = ens.expected_by_chance
    level = 0.95 if ens.level is None else ens.level
    calibrated = 12 if ens.calibrated_seeds is None else ens.calibrated_seeds
    caption = (
        "Across seeds at a fixed point of training, where no shared trend can make an "
        "association: per size, the partial Spearman r, over seeds, of the feature's "
        "value at the fraction with the final held-out loss, given the loss at the "
        "fraction and the best baseline of its space there (named after 'given'; none for "
        "the baselines and spectral features, which are given the loss alone), with a "
        f"{round(100 * level)} % percentile bootstrap interval over seeds "
        f"({ens.n_bootstrap} resamples); * = the interval excludes 0. Advantage: "
        "|r given the loss| of the feature minus that of the baseline, paired bootstrap. "
        "A feature predicts beyond the loss at a fraction when its interval excludes 0 in "
        "more than half of the sizes tested; a size with fewer than "
        f"{calibrated} seeds, where the interval does not hold its "
        "size on simulated ensembles, is shown but not tested. Sizes: " + sizes + ". "
        + (f"Features that do at some fraction: {', '.join(md_code(f) for f in found)}; "
           if found else "No feature does at any fraction; ")
        + (f"{chance:.2f} such (feature, fraction) cells are expected by chance at the "
           "interval's nominal 5 % rate (no correction for the number of features)."
           if finite(chance) else ""))
    return [caption, "", *md_table(headers, rows)]


def _seed_spread(statistics: Statistics | Mapping, records: list[Record]) -> list[str]:
    ens = computed(ensembles_of(statistics), "ensembles")
    groups = list(ens.groups)
    between = ens.between_sizes
    pairs = [(b.smaller, b.larger) for b in next(iter(between.values()), ())]
    headers = ["Quantity", *(f"{g} final mean ± seed SD (text SD)" for g in groups),
               *(f"{a} → {b}: first seeds' difference" for a, b in pairs)]
    rows = []
    for q, per_group in ens.seed_spread.items():
        cells = []
        for g in groups:
            s = per_group.get(g)
            cell = f"{fmt_value(s.mean)} ± {fmt_value(s.sd)}" if s else DASH
            if s and s.text_sd is not None:
                cell += f" ({fmt_value(s.text_sd)})"
            cells.append(cell)
        by_pair = {(b.smaller, b.larger): b for b in between.get(q, ())}
        for pair in pairs:
            b = by_pair.get(pair)
            cells.append(DASH if not b else f"{fmt_value(b.difference)} ("
                         + ("within" if b.within_spread else "outside")
                         + " the seed spread)")
        rows.append(["loss" if q == "loss" else md_code(q), *cells])
    inside = sorted({q for q, bs in between.items() for b in bs if b.within_spread})
    caption = (
        "The seed-to-seed spread at the final checkpoint, a noise floor of its own next to "
        "the text-resampling one (in brackets, the median over seeds of the standard "
        "deviation over text resamples, where the run resampled the texts): mean and "
        "standard deviation over seeds of the final held-out loss and of every feature. "
        "The last columns take the first seed of each size (the run a single-seed study "
        "makes) and ask whether the difference between consecutive sizes lies within what "
        "two seeds of one size differ by (|difference| ≤ 1.96·√2·SD, the two sizes' SDs "
        "pooled): where it does, a single-seed study cannot tell the sizes apart on that "
        "quantity. Within the spread for some pair of sizes: "
        + (", ".join("loss" if q == "loss" else md_code(q) for q in inside) or "none") + ".")
    return [caption, "", *md_table(headers, rows)]


PART = Part(
    "Part E. Seed ensembles",
    "Seeds of each size trained side by side: tests across seeds at the same step, and "
    "the seed-to-seed noise floor.",
    (("E1. Across seeds: does a feature predict the final loss beyond the loss?",
      _across_seeds),
     ("E2. The seed-to-seed spread as a noise floor", _seed_spread)),
    needs="ensembles")  # only a study with seed ensembles has this part
