"""The ``toposig`` command: one subcommand per stage, the same code as the scripts.

    toposig run ...       = python src/run_experiments.py ...
    toposig analyze ...   = python src/analyze_results.py ...
    toposig train ...     = python src/train_suite.py ...
    toposig extract ...   = python src/extract_embeddings.py ...
    toposig import ...    other people's measurement tables -> a results folder
    toposig backtest ...  the final-loss forecasts scored on finished runs
    toposig compare ...   two results folders, number by number and by conclusion
    toposig plot ...      the report's figures of one run, or of runs compared on one figure
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "run": ("run", "checkpoints -> one record per checkpoint and signature family"),
    "analyze": ("analyze", "records -> statistics.json, summary.md and the figures"),
    "train": ("train", "train one of the project's model suites (a preset)"),
    "extract": ("extract", "one checkpoint -> its record, printed as JSON"),
    "import": ("import_tables", "measurement tables made elsewhere -> a results folder"),
    "backtest": ("backtest", "final-loss forecasts scored on finished runs"),
    "compare": ("compare", "two results folders, number by number and by conclusion"),
    "plot": ("plot", "the report's figures of one run, or of two runs compared"),
}


def usage() -> str:
    lines = [f"usage: toposig {{{','.join(COMMANDS)}}} [options]   (toposig COMMAND --help)",
             ""]
    lines += [f"  {name:<9}{about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``toposig COMMAND ...``; returns the command's exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if argv[:1] == ["--version"]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"toposig {version('toposig')}")
        except PackageNotFoundError:  # run from a checkout that is not installed
            from toposig import __version__

            print(f"toposig {__version__}")
        return 0
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib

        near = difflib.get_close_matches(name, COMMANDS, n=2, cutoff=0.6)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        print(f"toposig: unknown command {name!r}{hint}\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"toposig.cli.{COMMANDS[name][0]}")
    return module.main(rest, prog=f"toposig {name}")


def console() -> int:
    """The installed ``toposig`` command: :func:`main`, then a quick end of the process
    (:func:`toposig.cli.process.run_command`)."""
    from toposig.cli.process import run_command

    return run_command(main)


if __name__ == "__main__":
    sys.exit(console())
