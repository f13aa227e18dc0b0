"""Settings, stated once: a settings class is a frozen dataclass whose fields are declared
with :func:`setting`, and everything else is derived from those fields.

A field's :class:`Setting` says its help text, its command-line option, what values are
allowed (a :class:`Check`), whether it changes the numbers (``hashed``: it is then part of
the settings hash that keys the records) and whether its value is the run's
(``from_run``: the run's setting of that name, whose option is the run's). From that,
:class:`Settings` derives, as scikit-learn derives ``get_params`` from ``__init__`` and
Hugging Face's argument parser derives options from dataclass fields:

- validation on construction (:class:`SettingsError` naming the option and what is
  allowed);
- the ``config.json`` view (:meth:`Settings.to_dict`) and the hashed values
  (:meth:`Settings.hashed_values`);
- the command-line options (:meth:`Settings.add_options`) and the settings they give
  (:meth:`Settings.from_args`).

:class:`RunSettings` are the settings every family of a run shares (the texts, the
device and precision, the seed, the homology library); each signature family's own
settings are the fields of its class (:mod:`toposig.families`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, ClassVar

LAYER_CHOICES = ("last", "all")
Layers = str | tuple[int, ...]  # "last", "all" or hidden-state indices (parse_layers)
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16", "bf16-autocast")
CPU_BATCH_SIZE = 32  # --batch-size auto on a CPU
MLM_FRACTION = 0.15  # share of an encoder's tokens masked for its masked-LM loss
MLM_SEED = 0  # chooses them: fixed, like the analysed texts, so every run masks the same
AUTOCAST = "bf16-autocast"
PH_BACKEND_CHOICES = ("auto", "giotto-ph", "ripser", "gudhi")
# who runs a plan's tasks (toposig.run.executors): this process, or Ray
EXECUTOR_CHOICES = ("serial", "ray")
_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
WIKITEXT_SOURCE = "wikitext-2-raw-v1 validation"  # where the texts come from by default


class SettingsError(ValueError):
    """A setting has a value that is not allowed; the message names both."""


# ---------------------------------------------------------------------- one field, stated once

@dataclass(frozen=True)
class Check:
    """What values a setting allows: a test, and the same in words (``at least 3``), for
    the message ``--option must be <allowed>, got <value>``."""

    test: Callable[[Any], bool]
    allowed: str


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def at_least(n: int, unit: str = "") -> Check:
    """An integer of at least ``n`` (``unit`` names what it counts, in the message)."""
    return Check(lambda v: _is_int(v) and v >= n, f"at least {n}{' ' + unit if unit else ''}")


def one_of(choices: Sequence[Any]) -> Check:
    """One of ``choices``."""
    choices = tuple(choices)
    return Check(lambda v: any(v == c and type(v) is type(c) for c in choices),
                 f"one of {choices}")


SEED = Check(lambda v: _is_int(v) and 0 <= v < 2**32, "an integer from 0 to 2**32 - 1")
POSITIVE = Check(lambda v: _is_number(v) and math.isfinite(v) and v > 0,
                 "a positive finite number")
NON_NEGATIVE = Check(lambda v: _is_number(v) and math.isfinite(v) and v >= 0,
                     "a finite number of at least 0")
FRACTION = Check(lambda v: _is_number(v) and 0 < v < 1, "in (0, 1)")
ODD = Check(lambda v: _is_int(v) and v >= 3 and v % 2 == 1,
            "an odd number >= 3 (so that the checkpoint is a grid point)")
DEVICE = Check(lambda v: isinstance(v, str) and bool(_DEVICE_RE.match(v)),
               "auto, cpu, cuda, cuda:N or mps")
BATCH = Check(lambda v: v == "auto" or (_is_int(v) and v >= 1), "auto or at least 1")
TEXT_OR_NONE = Check(lambda v: v is None or isinstance(v, str), "a path or name")
FLAG = Check(lambda v: isinstance(v, bool), "true or false")


def _regexes(v: object) -> bool:
    if not (isinstance(v, tuple) and all(isinstance(p, str) for p in v)):
        return False
    for p in v:
        try:
            re.compile(p)
        except re.error as exc:
            raise SettingsError(f"{p!r} is not a regular expression: {exc}") from exc
    return True


REGEXES = Check(_regexes, "a list of regular expressions")


@dataclass(frozen=True)
class Setting:
    """How one settings field is stated: see the module.

    Attributes:
        help: its help text, as ``--help`` prints it (``%(default)s`` is its default).
        option: its command-line option (``--weight-max-rows``); ``None``: none, Python
            only. Two families may declare the same option: it is one option, and both
            take its value (``--probe-length``).
        check: what values it allows.
        hashed: it changes the numbers, so it is part of the settings hash.
        from_run: the run's setting of this name gives its value (its option is the
            run's): a family's ``seed`` is the run's ``--seed``.
        normalise: turns a given value into its one normal form before the check (a
            ``list`` of patterns into a ``tuple``, ``--layers`` text into indices).
        cli: further keywords of ``ArgumentParser.add_argument`` (``type``,
            ``choices``, ``metavar``, ``nargs``, ``action``); by default the type of the
            field's default (an int, a float, a string; a flag for a bool).
    """

    help: str
    option: str | None = None
    check: Check | None = None
    hashed: bool = True
    from_run: str | None = None
    normalise: Callable[[Any], Any] | None = None
    cli: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str | None:
        """The parsed arguments' attribute of its option."""
        return self.option.lstrip("-").replace("-", "_") if self.option else None


def setting(default: Any, help: str, **how: Any) -> Any:  # noqa: A002 - argparse's word
    """A settings field: its ``default`` and how it is stated (:class:`Setting`)."""
    return field(default=default, metadata={"setting": Setting(help=help, **how)})


def _statement(f: dataclasses.Field) -> Setting:
    found = f.metadata.get("setting")
    if not isinstance(found, Setting):
        raise TypeError(f"settings field {f.name!r} is not declared with setting()")
    return found


class Settings:
    """The base of every settings class (a frozen dataclass of :func:`setting` fields):
    validated on construction, and what the module lists derived from its fields."""

    # the option group of --help that its options are listed in
    options_title: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f, how in self.statements():
            value = getattr(self, f.name)
            if how.normalise is not None:
                value = how.normalise(value)
                object.__setattr__(self, f.name, value)
            check = how.check
            if check is None:
                continue
            try:
                allowed = check.test(value)
            except SettingsError as exc:  # the check says itself what is wrong
                raise SettingsError(f"{self.label_of(f.name)} {exc}") from exc
            if not allowed:
                raise SettingsError(f"{self.label_of(f.name)} must be {check.allowed}, "
                                    f"got {value!r}")
        self.check_together()

    def check_together(self) -> None:
        """Checks of several fields at once (none by default).

        Raises:
            SettingsError: naming the options and what is allowed.
        """

    @classmethod
    def statements(cls) -> tuple[tuple[dataclasses.Field, Setting], ...]:
        """Each field with its :class:`Setting`, in declaration order."""
        return tuple((f, _statement(f)) for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def label_of(cls, name: str) -> str:
        """How messages name field ``name``: its option (the run's for a ``from_run``
        field), else the field's name."""
        how = dict((f.name, s) for f, s in cls.statements())[name]
        if how.option:
            return how.option
        if how.from_run:
            run = dict((f.name, s) for f, s in RunSettings.statements())[how.from_run]
            return run.option or name
        return name

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, as ``config.json`` records the settings."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        """The settings ``config.json`` records (:meth:`to_dict`): its keys that are fields
        of this class (an older layout's others are left out), validated.

        Raises:
            SettingsError: a recorded value that is not allowed.
        """
        names = {f.name for f, _ in cls.statements()}
        return cls(**{k: v for k, v in values.items() if k in names})

    def hashed_values(self) -> dict[str, Any]:
        """The fields that change the numbers (``hashed``), by name."""
        return {f.name: getattr(self, f.name) for f, how in self.statements() if how.hashed}

    @classmethod
    def add_options(cls, parser: argparse.ArgumentParser, title: str | None = None) -> None:
        """Its command-line options, in an option group of ``title`` (default
        :attr:`options_title`); an option another class added already is not added twice,
        and ``from_run`` fields have none of their own."""
        taken = {o for a in parser._actions for o in a.option_strings}
        group = None
        for f, how in cls.statements():
            if not how.option or how.option in taken:
                continue
            if group is None:
                group = parser.add_argument_group(title or cls.options_title or cls.__name__)
            group.add_argument(how.option, help=how.help, **cls._cli(f, how))

    @staticmethod
    def _cli(f: dataclasses.Field, how: Setting) -> dict[str, Any]:
        kw = dict(how.cli)
        default = f.default
        if isinstance(default, bool):
            kw.setdefault("action", "store_true")
            return kw
        if isinstance(default, tuple):
            kw.setdefault("nargs", "+")
            kw.setdefault("default", list(default))
            return kw
        kw.setdefault("default", default)
        if "choices" not in kw and "type" not in kw and isinstance(default, (int, float)):
            kw["type"] = type(default)
        return kw

    @classmethod
    def from_args(cls, args: argparse.Namespace, run: RunSettings | None = None, **given: Any):
        """The settings the parsed options give: each field's option, a ``from_run``
        field the ``run``'s value (default: the run settings the options give), the rest
        their defaults; ``given`` overrides them.

        Raises:
            SettingsError: naming the option with a bad value.
        """
        values: dict[str, Any] = {}
        for f, how in cls.statements():
            if how.dest and hasattr(args, how.dest):
                values[f.name] = getattr(args, how.dest)
            elif how.from_run:
                run = run if run is not None else RunSettings.from_args(args)
                values[f.name] = getattr(run, how.from_run)
        values.update(given)
        return cls(**values)

    @classmethod
    def seeded(cls, run: RunSettings, **given: Any):
        """Its defaults, with every ``from_run`` field the ``run``'s value; ``given``
        overrides them."""
        values = {f.name: getattr(run, how.from_run) for f, how in cls.statements()
                  if how.from_run}
        return cls(**(values | given))


def as_tuple(value: object) -> object:
    """A list as a tuple (settings hold tuples: hashable, and equal however given)."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


# ------------------------------------------------------------------------------ layers

_LAYERS_HELP = ("--layers must be last, all or comma-separated hidden-state indices such "
                "as 0,3,-1 (negative ones count from the end)")


def parse_layers(value: object) -> Layers:
    """``--layers`` (or ``layers=``) in its one normal form.

    ``"last"`` and ``"all"`` stay as they are; indices, as a text (``"0,3,-1"``) or a
    sequence of ints, become a tuple without repeats, the non-negative ones ascending and
    then the negative ones (``(0, 3, -2, -1)``), so that the same choice always has the
    same settings hash; ``(-1,)`` is ``"last"``. Which hidden states the indices name
    depends on the model (:func:`resolve_layers`).

    Raises:
        SettingsError: anything else (``"0,x"``, no index, a bool or float), naming
            ``--layers``.
    """
    if isinstance(value, str):
        text = value.strip()
        if text in LAYER_CHOICES:
            return text
        parts = [p.strip() for p in text.split(",")]
        if not parts or not all(re.fullmatch(r"[+-]?[0-9]+", p) for p in parts):
            raise SettingsError(f"{_LAYERS_HELP}; got {value!r}")
        indices = [int(p) for p in parts]
    elif isinstance(value, Sequence) and value and all(
            isinstance(i, Integral) and not isinstance(i, bool) for i in value):
        indices = [int(i) for i in value]
    else:
        raise SettingsError(f"{_LAYERS_HELP}; got {value!r}")
    out = tuple(sorted(set(indices), key=lambda i: (i < 0, i)))
    return "last" if out == (-1,) else out


def format_layers(layers: Layers) -> str:
    """``layers`` as ``--layers`` takes it: ``last``, ``all`` or ``0,3,-1``."""
    return layers if isinstance(layers, str) else ",".join(map(str, layers))


def union_layers(a: Layers, b: Layers) -> Layers:
    """The layers of both choices (``"all"`` if either is), in normal form."""
    a, b = parse_layers(a), parse_layers(b)
    if "all" in (a, b):
        return "all"
    return parse_layers([*(a if isinstance(a, tuple) else (-1,)),
                         *(b if isinstance(b, tuple) else (-1,))])


def resolve_layers(layers: Layers, n_hidden_states: int) -> list[int]:
    """The hidden-state indices (0 .. n-1, ascending, each once) that ``layers`` names
    for a model returning ``n_hidden_states`` hidden states.

    Index ``i`` is ``hidden_states[i]`` of ``model(..., output_hidden_states=True)``;
    a negative one counts from the end (-1 is the last, what ``"last"`` gives). Indices
    naming the same state (``3`` and ``-1`` of four) count once.

    Raises:
        SettingsError: an index outside ``-n .. n-1``, naming the model's count.
    """
    layers = parse_layers(layers)
    n = n_hidden_states
    if isinstance(layers, str):
        return list(range(n)) if layers == "all" else [n - 1]
    bad = [i for i in layers if not -n <= i < n]
    if bad:
        raise SettingsError(
            f"--layers {format_layers(layers)}: index {bad[0]} is out of range, the "
            f"model returns {n} hidden states (indices 0 to {n - 1}, or -{n} to -1)")
    return sorted({i % n for i in layers})


def _int_or_auto(value: str) -> int | str:
    return value if value == "auto" else int(value)


# ------------------------------------------------------------------------- the run's own

@dataclass(frozen=True)
class RunSettings(Settings):
    """What every signature family of a run shares: the analysed texts, the tokenizer,
    where and in what precision the model runs, the seed of every random choice, the
    homology library and dimension. A family's own settings take theirs from here where
    they say so (``from_run``); none of these is a family's.

    Attributes: see each field's help (``toposig run --help``).
    """

    options_title: ClassVar[str] = "run (texts, device, precision, seed: shared by every family)"

    texts: str | None = setting(
        None, "plain-text UTF-8 file, one text per non-empty line (lines end at \\n only; "
              "only the lines used are read, each text cut to 100,000 characters), instead "
              "of WikiText-2 validation (default: WikiText-2)",
        option="--texts", check=TEXT_OR_NONE, cli={"metavar": "PATH"})
    n_texts: int = setting(200, "number of texts = points of the cloud (default: %(default)s)",
                           option="--n-texts", check=at_least(3))
    min_chars: int = setting(100, "skip WikiText rows shorter than this after strip (default: "
                                  "%(default)s)", option="--min-chars", check=at_least(0))
    max_length: int = setting(128, "tokens per text after truncation (default: %(default)s)",
                              option="--max-length", check=at_least(2, "tokens"))
    tokenizer: str | None = setting(
        None, "tokenizer to use instead of each checkpoint's own: a Hub name, a folder, or a "
              "tokenizer.json file", option="--tokenizer", check=TEXT_OR_NONE,
        cli={"metavar": "NAME_OR_PATH"})
    maxdim: int = setting(1, "highest homology dimension (default: %(default)s)",
                          option="--maxdim", check=one_of((0, 1, 2)), cli={"type": int})
    ph_backend: str = setting("auto", "Vietoris-Rips library; auto = fastest installed "
                                      "(default: %(default)s)",
                              option="--ph-backend", check=one_of(PH_BACKEND_CHOICES),
                              cli={"choices": PH_BACKEND_CHOICES}, hashed=False)
    batch_size: int | str = setting(
        "auto", "texts per forward batch, or auto: 32 on a CPU, on a GPU all texts at once, "
                "halved on each out-of-memory error (default: %(default)s)",
        option="--batch-size", check=BATCH, cli={"type": _int_or_auto}, hashed=False)
    device: str = setting("auto", "auto (CUDA if present), cpu, cuda, cuda:N or mps "
                                  "(default: %(default)s)",
                          option="--device", check=DEVICE, hashed=False)
    dtype: str = setting("auto", "model precision: a dtype the weights are cast to, or "
                                 "bf16-autocast (fp32 weights, bf16 matrix products); auto = "
                                 "bf16-autocast on CUDA, float32 otherwise (default: "
                                 "%(default)s)",
                         option="--dtype", check=one_of(DTYPE_CHOICES),
                         cli={"choices": DTYPE_CHOICES})
    seed: int = setting(42, "seed for every random choice (default: %(default)s)",
                        option="--seed", check=SEED)
    trust_remote_code: bool = setting(
        False, "allow checkpoints to run their own Python code (off by default: a "
               "checkpoint from elsewhere can carry code)",
        option="--trust-remote-code", check=FLAG, hashed=False)

    @property
    def texts_source(self) -> str:
        """Where the analysed texts come from, as ``config.json`` says it."""
        return self.texts or WIKITEXT_SOURCE
