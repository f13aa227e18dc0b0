#!/usr/bin/env python
"""Train one of the project's model suites: byte-level GPT-NeoX models on WikiText-2.

The same command as ``toposig train``; its code and --help are in ``toposig.cli.train``.
"""

import sys

from toposig.cli.process import run_command
from toposig.cli.train import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(run_command(main))  # toposig.cli.process: a quick teardown
