#!/usr/bin/env python
"""Stage 3: results/data/ -> statistics.json, summary.md and the figures in results/plots/.

Per model and pooled over models: Spearman and Pearson correlation (with p-values) of
every feature with the quality measure (perplexity, or for weights-only runs the loss
stored with each checkpoint, or an encoder's masked-LM loss), the controls (bootstrap
CIs, Holm-adjusted p, partial correlations, first differences), training phases,
scaling and prediction; Wasserstein distances between consecutive checkpoints' diagrams.
Up to 21 figures, those the records have data for: 7 of embedding space, 4 of weight
space (the correlation heatmap among them), 8 of the analysis and 2 of the loss
landscape and gradients; a figure an earlier analysis drew that no longer applies is
removed. The same records give the same files, byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toposig.analysis import ResultsMissingError, analyse, summary_lines
from toposig.cli import setup_logging
from toposig.locks import FolderLockedError, exclusive


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results",
                   help="results root written by run_experiments.py --out (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="statistics only, no figures")
    p.add_argument("--target", default="auto", choices=("auto", "perplexity", "loss", "mlm_loss"),
                   help="quality measure the features are correlated with: perplexity "
                        "(measured on the texts), the loss stored with each checkpoint, or "
                        "an encoder's masked-LM loss; auto = perplexity when every record "
                        "has it (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the bootstrap resamples (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        with exclusive(args.results, "results folder", create=False):
            statistics, figures = analyse(args.results, plots=not args.no_plots,
                                          target=args.target, seed=args.seed)
    except (ResultsMissingError, ValueError, FolderLockedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(statistics)))
    print(f"statistics: {Path(args.results) / 'data' / 'statistics.json'}")
    if figures:
        print(f"figures ({len(figures)}): {Path(args.results) / 'plots'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
