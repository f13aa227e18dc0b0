#!/usr/bin/env python
"""Stage for one checkpoint: hidden states, loss, PCA, persistent homology, spectral features.

The same command as ``toposig extract``; its code and --help are in ``toposig.cli.extract``.
"""

import sys

from toposig.cli.extract import build_parser, main
from toposig.cli.process import run_command

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(run_command(main))  # toposig.cli.process: a quick teardown
