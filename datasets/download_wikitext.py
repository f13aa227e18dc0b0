#!/usr/bin/env python
"""Fill the project's data cache with WikiText-2 raw from the Hugging Face Hub.

Writes datasets/wikitext-2-raw-v1/wiki.{train,valid,test}.raw, one Hub row per line,
byte-identical to the official archive's files. Run once on a machine that is online:

    python datasets/download_wikitext.py
"""

from __future__ import annotations

import sys
from pathlib import Path

FILES = {"train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw"}


def main() -> int:
    import datasets

    out = Path(__file__).resolve().parent / "wikitext-2-raw-v1"
    out.mkdir(parents=True, exist_ok=True)
    for split, name in FILES.items():
        rows = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split=split)["text"]
        # rows may or may not carry their newline: write exactly one per row
        text = "".join(r.rstrip("\n") + "\n" for r in rows)
        (out / name).write_text(text, encoding="utf-8")
        print(f"{out / name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
