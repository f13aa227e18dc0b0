#!/usr/bin/env python
"""Fill the project's data cache with WikiText-2 raw from the Hugging Face Hub.

Writes datasets/wikitext-2-raw-v1/wiki.{train,valid,test}.raw, one Hub row per line,
byte-identical to the official archive's files. Run once on a machine that is online:

    python datasets/download_wikitext.py

On a machine that cannot reach the Hub, copy the three files there instead (on this
project's development machines: cp ../shared/data/wikitext-2-raw-v1/*.raw
datasets/wikitext-2-raw-v1/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FILES = {"train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw"}


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter
                            ).parse_args(argv)
    import datasets

    out = Path(__file__).resolve().parent / "wikitext-2-raw-v1"
    out.mkdir(parents=True, exist_ok=True)
    for split, name in FILES.items():
        try:
            rows = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split=split)["text"]
        except Exception as exc:  # noqa: BLE001 - offline, a proxy, a Hub outage
            print(f"error: cannot download WikiText-2 ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}); on a machine without "
                  f"the Hub, copy wiki.train.raw, wiki.valid.raw and wiki.test.raw into "
                  f"{out}", file=sys.stderr)
            return 2
        # rows may or may not carry their newline: write exactly one per row
        text = "".join(r.rstrip("\n") + "\n" for r in rows)
        (out / name).write_text(text, encoding="utf-8")
        print(f"{out / name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
