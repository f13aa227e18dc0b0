#!/usr/bin/env python
"""Fill the project's data cache with WikiText-2 raw and the Pythia tokenizer from the
Hugging Face Hub.

Writes datasets/wikitext-2-raw-v1/wiki.{train,valid,test}.raw, one Hub row per line,
byte-identical to the official archive's files, and
datasets/pythia-tokenizer/20B_tokenizer.json (which only tests use). Run once on a
machine that is online:

    python datasets/download_wikitext.py

On a machine that cannot reach the Hub, copy the files there instead (on this project's
development machines: cp -r ../shared/data/wikitext-2-raw-v1
../shared/data/pythia-tokenizer datasets/).
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
    return download_tokenizer(Path(__file__).resolve().parent / TOKENIZER)


# The GPT-NeoX-20B tokenizer every Pythia model uses (only tests need it); the Hub's
# tokenizer.json of a Pythia model holds the same vocabulary and merges.
TOKENIZER = Path("pythia-tokenizer") / "20B_tokenizer.json"
TOKENIZER_SOURCE = ("EleutherAI/pythia-70m", "tokenizer.json")


def download_tokenizer(target: Path) -> int:
    """Fetch the Pythia tokenizer into ``target`` (datasets/pythia-tokenizer/)."""
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(*TOKENIZER_SOURCE)
    except Exception as exc:  # noqa: BLE001 - offline, a proxy, a Hub outage
        print(f"error: cannot download the Pythia tokenizer ({type(exc).__name__}); copy "
              f"20B_tokenizer.json to {target}", file=sys.stderr)
        return 2
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(Path(path).read_bytes())
    print(f"{target}: the Pythia tokenizer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
