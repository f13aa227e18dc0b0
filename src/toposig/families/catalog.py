"""Every feature the registered families declare, as the markdown table of
docs/measures.md's "Every feature, by family" (between its two ``features`` markers):
``python -m toposig.families.catalog`` prints it, ``--write docs/measures.md`` puts it in
the page, and ``tests/test_family_contract.py`` checks that the page holds what it
prints."""

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


def with_catalog(page: str) -> str:
    """``page`` (a markdown page's text) with the block between :data:`BEGIN` and
    :data:`END` replaced by :func:`feature_catalog`.

    Raises:
        ValueError: the page has not both markers, in that order.
    """
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} block to replace")
    return page[:start] + feature_catalog() + page[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    """Print the table, or (``--write PAGE``) put it in the page."""
    import argparse
    from pathlib import Path

    from toposig.files.atomic import atomic_write_bytes

    ap = argparse.ArgumentParser(prog="python -m toposig.families.catalog",
                                 description="The features table of docs/measures.md.")
    ap.add_argument("--write", metavar="PAGE", help="replace the table in PAGE")
    args = ap.parse_args(argv)
    if args.write is None:
        print(feature_catalog())
        return 0
    page = Path(args.write)
    atomic_write_bytes(page, with_catalog(page.read_text(encoding="utf-8")).encode("utf-8"),
                       root=page.parent)
    return 0


if __name__ == "__main__":  # pragma: no cover - a command
    raise SystemExit(main())
