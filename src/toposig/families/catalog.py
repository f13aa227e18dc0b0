"""Every feature the registered families declare, as the markdown table of
docs/measures.md's "Every feature, by family" (between its two ``features`` markers):
``python -m toposig.families.catalog`` prints it, and ``tests/test_family_contract.py``
checks that the page holds what it prints."""

from __future__ import annotations

from toposig.families import registry
from toposig.families.base import Feature, Scope

BEGIN = "<!-- features: made by `python -m toposig.families.catalog`; do not edit by hand -->"
END = "<!-- end of features -->"
_WHERE = {Scope.CHECKPOINT: "checkpoint", Scope.LAYER: "each layer", Scope.MATRIX: "each matrix"}


def _row(feature: Feature, group: str) -> str:
    where = ", ".join(_WHERE[s] for s in feature.scopes)
    text = feature.description.replace("|", "\\|")
    return (f"| `{feature.name}` | {group} | {feature.kind} | {where} | "
            f"{feature.unit.replace('|', '/')} | {text} |")


def feature_catalog() -> str:
    """The table of every declared feature, family by family in registration order:
    name, group, kind (how ``toposig compare`` holds two runs to it), where records hold
    it, unit, and what it is."""
    lines = [BEGIN]
    for cls in registry.families():
        lines += ["", f"**{cls.name}** (`--signatures {cls.name}`; tested against "
                      f"{cls.target})", "",
                  "| feature | group | kind | where | unit | what it is |",
                  "|---|---|---|---|---|---|"]
        lines += [_row(f, g.label) for g in cls.groups for f in g.features]
        lines += [_row(f, "per matrix") for f in cls.matrix_features]
    lines += ["", END]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a command
    print(feature_catalog())
