"""``results/summary.md``: the seed studies' tables, reproduced from this run's data, and
ours; one module per part (:mod:`~toposig.report.summary.seed_report` A,
:mod:`~toposig.report.summary.seed_paper` B, :mod:`~toposig.report.summary.robustness` C,
:mod:`~toposig.report.summary.probes` D, :mod:`~toposig.report.summary.ensembles` E,
:mod:`~toposig.report.summary.positive_control` F), what they share in
:mod:`~toposig.report.summary.cells`, the document in
:mod:`~toposig.report.summary.document` (:func:`summary_markdown`)."""

from toposig.report.summary.cells import (
    fmt_ci,
    fmt_count,
    fmt_loss,
    fmt_p,
    fmt_rho,
    fmt_step,
    fmt_value,
    short_reason,
)
from toposig.report.summary.document import HEADINGS, PARTS, summary_markdown

__all__ = ["HEADINGS", "PARTS", "summary_markdown", "fmt_ci", "fmt_count", "fmt_loss",
           "fmt_p", "fmt_rho", "fmt_step", "fmt_value", "short_reason"]
