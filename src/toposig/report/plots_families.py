"""The figure over training of every family that has none of its own:
``feature_evolution``, a panel per feature the family declares (its
:attr:`~toposig.families.base.SignatureFamily.over_training`) against the step, for each
such family the records have (the inter-layer zigzag's, and any family registered since).
The package's other families name figures of their own (``topological_evolution``,
``neural_persistence_evolution``, ``loss_probe_evolution``). Like the other figure modules,
it reads nothing from disk.
"""

from __future__ import annotations

from collections.abc import Sequence

from toposig.analysis.compute import ArraysOf
from toposig.families.registry import drawn_by, over_training
from toposig.records import Record
from toposig.report.panels import feature_grid
from toposig.report.style import Drawn, Figure, StatisticsLike, Target, figure, registry

NAME = "feature_evolution"


def _drawn(records: Sequence[Record]) -> list[str]:
    """The features the figure draws for these records: those of the families it draws
    that some record has, in their declared order."""
    present = {k for r in records for k in r.features}
    return [f for f in over_training(NAME) if f in present]


def has_family_features(records: Sequence[Record], statistics: StatisticsLike | None = None,
                        arrays: ArraysOf | None = None) -> bool:
    """Some record has a feature over training of a family without a figure of its own."""
    return bool(_drawn(records))


@figure(NAME, has_family_features, overlay=True)
def plot_feature_evolution(records: Sequence[Record], statistics: StatisticsLike,
                           arrays: ArraysOf | None = None,
                           on: Target | None = None) -> Drawn | None:
    """The declared features over training of each family without a figure of its own, a
    panel per feature vs step (3 a row)."""
    names = ", ".join(c.name for c in drawn_by(NAME)
                      if any(f in c.over_training for f in _drawn(records)))
    return feature_grid(records, _drawn(records), f"Features across training ({names})",
                        target=on)


FAMILY_FIGURES: dict[str, Figure] = registry(plot_feature_evolution)
__all__ = ["FAMILY_FIGURES", "has_family_features", "plot_feature_evolution"]
