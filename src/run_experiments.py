#!/usr/bin/env python
"""Stage 1: models x checkpoints -> one record per checkpoint and signature family.

The same command as ``toposig run``; its code and --help are in ``toposig.cli.run``.
"""

import sys

from toposig.cli.process import run_command
from toposig.cli.run import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(run_command(main))  # toposig.cli.process: a quick teardown
