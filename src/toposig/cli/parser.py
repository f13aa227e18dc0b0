"""The argument parser every ``toposig`` command uses: one convention for all of them.

- Help starts with examples (2 to 4 command lines), then the command's description,
  then its options in groups.
- No abbreviations: ``--model`` is not taken for ``--models``; an option that is not
  the command's is an error that names the nearest ones ("did you mean --models?").
- Old spellings keep working with a one-line deprecation warning on stderr
  (:func:`add_deprecated`), and are left out of the help.
- Options mean one thing across commands: ``--out`` is always a folder (a results
  folder, or for ``plot`` a figure folder), ``--json FILE`` writes the machine-readable
  output, ``--models`` names the models, ``--steps`` the training steps, ``--seed`` the
  seed of a measurement.

This module imports nothing heavy (no torch, scipy, pandas or matplotlib), so that
``toposig COMMAND --help`` answers at once; the commands import their work when they run.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any

_SCRIPTS = {"run": "run_experiments", "analyze": "analyze_results", "train": "train_suite",
            "extract": "extract_embeddings"}
_ROLES = re.compile(r":(?:func|class|mod|meth|data|attr):`~?([^`]+)`")


def _examples_text(examples: Sequence[str], prog: str) -> str:
    return "examples:\n" + "\n".join(f"  {prog} {line}" for line in examples)


class CommandParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` with the project's conventions (module docstring).

    Args:
        prog: the command as the user types it (``toposig run``, or the script's name).
        description: the command's description, already as plain text.
        examples: the arguments of 2 to 4 example command lines, each shown after ``prog``.
    """

    def __init__(self, prog: str | None, description: str, examples: Sequence[str],
                 **kwargs: Any) -> None:
        if not 2 <= len(examples) <= 4:
            raise ValueError(f"a command's help shows 2 to 4 examples, got {len(examples)}")
        super().__init__(prog=prog, allow_abbrev=False,
                         formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        # a script run as python src/x.py: its examples say so (argparse's prog is x.py)
        typed = (prog if prog is not None else f"python {sys.argv[0]}"
                 if sys.argv[0].endswith(".py") else self.prog)
        self.description = f"{_examples_text(examples, typed)}\n\n{description}"
        self.examples = tuple(examples)
        self._given: list[str] = []

    def format_usage(self) -> str:
        return self._short_usage()

    def format_help(self) -> str:
        self.usage = self._short_usage().removeprefix("usage: ").strip()
        return super().format_help()

    def _short_usage(self) -> str:
        """One line, ``prog [options]`` and the positional arguments: the options are
        listed, in groups, below the examples."""
        positionals = []
        for action in self._get_positional_actions():
            name = action.metavar or action.dest
            positionals.append(f"{name} [{name} ...]" if action.nargs in ("+", "*")
                               else str(name))
        return f"usage: {' '.join([self.prog, '[options]', *positionals])}\n"

    def option_names(self) -> list[str]:
        """Every option string the parser takes, the deprecated ones included."""
        return sorted(self._option_string_actions)

    def nearest_options(self, word: str) -> list[str]:
        """Up to three of this command's options closest to ``word`` (an option not taken),
        deprecated spellings left out, closest first."""
        name = word.split("=", 1)[0]
        shown = [o for o in self.option_names()
                 if o.startswith("--") and o != "--help"
                 and self._option_string_actions[o].help is not argparse.SUPPRESS]
        close = difflib.get_close_matches(name, shown, n=3, cutoff=0.75)
        # a prefix of a real option (--model for --models) is the likeliest meaning
        prefixed = [o for o in shown if o.startswith(name) and len(name) > 2]
        return list(dict.fromkeys([*prefixed[:1], *close]))[:3]

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str):  # type: ignore[override]
        """argparse's error, with the nearest options to each option given that the
        command does not have (also when the error is another one, such as a required
        option missing because it was mistyped)."""
        hints = []
        for word in self._given:
            name = word.split("=", 1)[0]
            if (word.startswith("--") and name not in self._option_string_actions
                    and (near := self.nearest_options(word))):
                hints.append(f"{name}: did you mean {' or '.join(near)}?")
        super().error("\n  ".join([message, *dict.fromkeys(hints)]))


class _Deprecated(argparse.Action):
    """An old spelling of an option: stores into the new option's ``dest`` and warns on
    stderr each time it is used."""

    def __init__(self, option_strings: list[str], dest: str, use: str,
                 stored: argparse.Action, **kwargs: Any) -> None:
        self.use, self.stored = use, stored
        kwargs.update(nargs=stored.nargs, type=stored.type, choices=stored.choices,
                      metavar=stored.metavar)
        if isinstance(stored, argparse._StoreTrueAction):
            kwargs.update(nargs=0, type=None)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"warning: {option_string} is deprecated and will be removed; use "
              f"{self.use}", file=sys.stderr)
        self.stored(parser, namespace, values, option_string)


def add_deprecated(p: argparse.ArgumentParser, old: str, new: str,
                   note: str | None = None) -> None:
    """Make ``old`` an old spelling of the option ``new`` (already added to ``p``): it
    still works, with a warning that names ``new`` (and ``note``, if given), and is left
    out of the help."""
    stored = p._option_string_actions[new]
    if (stored.required or (stored.nargs == "?" and stored.const is not None)
            or isinstance(stored, argparse.BooleanOptionalAction)
            or any(stored in g._group_actions for g in p._mutually_exclusive_groups)):
        raise ValueError(f"{old}: an old spelling of a required, constant, boolean or "
                         f"exclusive option ({new}) would bypass argparse's own checks")
    p.add_argument(old, dest=stored.dest, action=_Deprecated, help=argparse.SUPPRESS,
                   use=f"{new} {note}" if note else new, stored=stored, default=argparse.SUPPRESS)


def help_text(doc: str | None, prog: str | None = None) -> str:
    """A command's module docstring as its ``--help`` description: reStructuredText
    markup removed (``x`` and :func:`x` become x) and, for the ``toposig`` command
    (``prog`` such as ``toposig train``), its scripts' names (``python
    src/train_suite.py``) replaced by the ``toposig`` commands and the checkout's
    ``src/toposig/`` paths by the package's."""
    text = _ROLES.sub(r"\1", doc or "").replace("``", "")
    if prog:
        for command, script in _SCRIPTS.items():
            text = text.replace(f"python src/{script}.py", f"toposig {command}")
            text = text.replace(f"{script}.py", f"toposig {command}")
        text = text.replace("src/toposig/", "the package's toposig/")
    return text
