#!/usr/bin/env python
"""Stage 3: results/data/ -> statistics.json, summary.md and the figures in results/plots/.

The same command as ``toposig analyze``; its code and --help are in ``toposig.cli.analyze``.
"""

import sys

from toposig.cli.analyze import build_parser, main
from toposig.cli.process import run_command

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(run_command(main))  # toposig.cli.process: a quick teardown
