"""Settings of the embedding stage: one dataclass, validated in one place, hashed for results.

The settings hash keys every result on disk. It covers exactly the settings that change
the numbers (the texts themselves, tokenisation, PCA, homology dimension, analysed layers,
numeric precision) and nothing that does not (batch size, device index, PH backend: every
backend gives identical diagrams), so a rerun with a different batch size still resumes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from numbers import Integral

from toposig.records import FAMILIES, SCHEMA_VERSION, Family

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


class SettingsError(ValueError):
    """A setting has a value that is not allowed; the message names both."""


@dataclass(frozen=True)
class EmbeddingSettings:
    """Everything the embedding stage needs besides the checkpoints.

    Attributes:
        n_texts: number of analysed texts (points of the cloud).
        min_chars: WikiText rows shorter than this after strip are skipped.
        max_length: tokens per text after truncation.
        pca_dim: PCA components before persistent homology (``min(k, n-1, d)`` kept).
        maxdim: highest homology dimension.
        layers: ``"last"`` (the final hidden state), ``"all"`` (every hidden state the
            model returns: for most, the embedding output and every block; the record's
            ``layer_names`` says what each is), or indices into the hidden states
            (``(0, 3, -1)``, or the text ``"0,3,-1"``; negative ones count from the end),
            kept as :func:`parse_layers` normalises them.
        batch_size: texts per forward batch, or ``"auto"``: 32 on a CPU; on a GPU all
            texts at once, halved on every out-of-memory error until the batch fits.
        texts: a plain-text file (one text per non-empty line) instead of WikiText-2.
        tokenizer: tokenizer name or path overriding the checkpoint's own.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        dtype: ``auto`` (``bf16-autocast`` on CUDA, fp32 elsewhere), a dtype the weights
            are cast to, or ``bf16-autocast`` (fp32 weights, matrix products in bf16).
        ph_backend: ``auto`` or a Vietoris–Rips library.
        seed: drives every random choice.
        trust_remote_code: allow a checkpoint's own Python code (off unless asked).
        save_hidden: also save the pooled hidden states of the analysed layers.
        resamples: bootstrap resamples of the texts per checkpoint (0: none) on which the
            analysed layer's PH features are recomputed, to show their spread.
    """

    n_texts: int = 200
    min_chars: int = 100
    max_length: int = 128
    pca_dim: int = 50
    maxdim: int = 1
    layers: Layers = "last"
    batch_size: int | str = "auto"
    texts: str | None = None
    tokenizer: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    ph_backend: str = "auto"
    seed: int = 42
    trust_remote_code: bool = False
    save_hidden: bool = False
    resamples: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", parse_layers(self.layers))
        validate(self)

    def to_dict(self) -> dict:
        return asdict(self)


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


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SettingsError(message)


def _check_seed(seed: object) -> None:
    _require(isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32,
             f"--seed must be an integer from 0 to 2**32 - 1, got {seed!r}")


def validate(s: EmbeddingSettings) -> None:
    """Raise :class:`SettingsError` naming the first bad value and what is allowed."""
    _require(s.n_texts >= 3, f"--n-texts must be at least 3, got {s.n_texts}")
    _require(s.min_chars >= 0, f"--min-chars must be >= 0, got {s.min_chars}")
    _require(s.max_length >= 2, f"--max-length must be at least 2 tokens, got {s.max_length}")
    _require(s.pca_dim >= 1, f"--pca-dim must be at least 1, got {s.pca_dim}")
    _require(s.maxdim in (0, 1, 2), f"--maxdim must be 0, 1 or 2, got {s.maxdim}")
    _require(s.batch_size == "auto" or (isinstance(s.batch_size, int) and s.batch_size >= 1),
             f"--batch-size must be auto or at least 1, got {s.batch_size!r}")
    _require(s.resamples >= 0, f"--resamples must be >= 0, got {s.resamples}")
    _check_seed(s.seed)
    _require(
        bool(_DEVICE_RE.match(s.device)),
        f"--device must be auto, cpu, cuda, cuda:N or mps, got {s.device!r}",
    )
    _require(s.dtype in DTYPE_CHOICES, f"--dtype must be one of {DTYPE_CHOICES}, got {s.dtype!r}")
    _require(
        s.ph_backend in PH_BACKEND_CHOICES,
        f"--ph-backend must be one of {PH_BACKEND_CHOICES}, got {s.ph_backend!r}",
    )


def settings_hash(s: EmbeddingSettings, texts_sha: str, resolved_dtype: str) -> str:
    """Short hash of every setting that changes the numbers.

    Args:
        s: the settings.
        texts_sha: fingerprint of the analysed texts (covers n_texts, min_chars, source).
        resolved_dtype: the dtype actually used (``auto`` resolved per device).
    """
    keyed = {
        "schema": SCHEMA_VERSION,
        "texts_sha": texts_sha,
        "max_length": s.max_length,
        "pca_dim": s.pca_dim,
        "maxdim": s.maxdim,
        "layers": s.layers,  # "last" and "all" as ever; indices as a list
        "tokenizer": s.tokenizer,
        "dtype": resolved_dtype,
    }
    if s.resamples:  # only then does the seed change the numbers
        # resample 2: a text drawn twice is one point of the complex (before, the SVD's
        # rounding made its copies distinct points, adding bars of length ~1e-16)
        keyed.update(resamples=s.resamples, seed=s.seed, resample_version=2)
    blob = json.dumps(keyed, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# --------------------------------------------------------------------------- weights

@dataclass(frozen=True)
class WeightSettings:
    """Everything the weight stage needs besides the checkpoints.

    Attributes:
        max_rows: rows per matrix for weight-row homology (a seeded sample when more).
        maxdim: highest homology dimension of the row diagrams.
        include: regular expressions; when given, exactly the 2-D weights whose name
            matches one are analysed (default: every linear layer's weight).
        exclude: regular expressions of weights to leave out.
        seed: seeds the row sample.
        ph_backend: ``auto`` or a Vietoris–Rips library.
    """

    max_rows: int = 200
    maxdim: int = 1
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    seed: int = 42
    ph_backend: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        validate_weights(self)

    def to_dict(self) -> dict:
        return asdict(self)


def validate_weights(s: WeightSettings) -> None:
    """Raise :class:`SettingsError` naming the first bad value and what is allowed."""
    _require(s.max_rows >= 3, f"--weight-max-rows must be at least 3, got {s.max_rows}")
    _check_seed(s.seed)
    _require(s.maxdim in (0, 1, 2), f"--maxdim must be 0, 1 or 2, got {s.maxdim}")
    _require(
        s.ph_backend in PH_BACKEND_CHOICES,
        f"--ph-backend must be one of {PH_BACKEND_CHOICES}, got {s.ph_backend!r}",
    )
    for option, patterns in (("--weight-include", s.include), ("--weight-exclude", s.exclude)):
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise SettingsError(f"{option} {p!r} is not a regular expression: {exc}") from exc


def weights_hash(s: WeightSettings) -> str:
    """Short hash of every weight setting that changes the numbers (not the backend)."""
    keyed = {
        "schema": SCHEMA_VERSION,
        "family": "weights",
        "max_rows": s.max_rows,
        "maxdim": s.maxdim,
        "include": list(s.include),
        "exclude": list(s.exclude),
        "seed": s.seed,
    }
    blob = json.dumps(keyed, sort_keys=True).encode()
    return "w" + hashlib.sha256(blob).hexdigest()[:11]


# ------------------------------------------------------------ landscape and gradients

LANDSCAPE_DIRS = ("hessian", "random")


@dataclass(frozen=True)
class LandscapeSettings:
    """The ``landscape`` family: curvature and the loss surface around a checkpoint.

    The loss is the mean next-token cross-entropy (nats) of a fixed, seeded batch of
    ``n_windows`` token windows of ``window`` tokens from the analysed texts' source.

    The defaults (since 2026-11-29: 4 windows, tolerance 1e-2, a 13 x 13 grid; before:
    16, 1e-3, 21 x 21) let both probe families finish in under a minute a checkpoint on
    2 CPU cores with Pythia's 50,304-token vocabulary, whose output head is 95 % of
    every loss evaluation (``bench/bench_loss_probes.py --parts``).

    Attributes:
        n_windows: windows in the probe batch.
        window: tokens per window.
        top_k: Hessian eigenvalues estimated (Lanczos on Hessian-vector products).
        lanczos_tol: relative accuracy asked of the eigenvalues.
        lanczos_maxiter: Lanczos restarts at most.
        trace_samples: Rademacher probes of Hutchinson's trace estimate.
        res: grid points per axis of the loss surface (odd, so the checkpoint is one).
        dirs: ``hessian`` (top two eigenvectors) or ``random`` (two filter-normalised
            random directions, Li et al. 2018).
        span: the grid covers steps of −span … span along each direction, in units of
            the weights' own norm (see :mod:`toposig.features.landscape`).
        seed: seeds the windows, the Lanczos start, the probes and random directions.
    """

    n_windows: int = 4
    window: int = 64
    top_k: int = 2
    lanczos_tol: float = 1e-2
    lanczos_maxiter: int = 20
    trace_samples: int = 16
    res: int = 13
    dirs: str = "hessian"
    span: float = 1.0
    seed: int = 42

    def __post_init__(self) -> None:
        _require(self.n_windows >= 1, f"--landscape-windows must be at least 1, got "
                                      f"{self.n_windows}")
        _require(self.window >= 2, f"--probe-length must be at least 2 tokens, got "
                                   f"{self.window}")
        _require(self.top_k >= 1, f"--hessian-k must be at least 1, got {self.top_k}")
        _require(self.dirs in LANDSCAPE_DIRS,
                 f"--landscape-dirs must be one of {LANDSCAPE_DIRS}, got {self.dirs!r}")
        _require(self.dirs != "hessian" or self.top_k >= 2,
                 "--landscape-dirs hessian needs the top two eigenvectors: --hessian-k >= 2")
        _require(self.res >= 3 and self.res % 2 == 1,
                 f"--landscape-res must be an odd number >= 3 (so that the checkpoint is "
                 f"a grid point), got {self.res}")
        _require(math.isfinite(self.span) and self.span > 0,
                 f"--landscape-span must be a positive finite number, got {self.span}")
        _check_seed(self.seed)
        _require(self.trace_samples >= 2,
                 f"--trace-samples must be at least 2, got {self.trace_samples}")
        _require(0 < self.lanczos_tol < 1, f"--lanczos-tol must be in (0, 1), got "
                                           f"{self.lanczos_tol}")
        _require(self.lanczos_maxiter >= 1, f"lanczos_maxiter must be at least 1, got "
                                            f"{self.lanczos_maxiter}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GradientSettings:
    """The ``gradients`` family: homology of per-example gradients.

    Attributes:
        n_windows: examples (token windows of the analysed texts' source), one point
            each.
        window: tokens per window.
        proj_dim: dimension of the seeded sparse random projection of the gradients.
        maxdim: highest homology dimension.
        chunk_size: examples per vectorised gradient call (memory only).
        seed: seeds the windows and the projection.
        ph_backend: ``auto`` or a Vietoris–Rips library.
    """

    n_windows: int = 64
    window: int = 64
    proj_dim: int = 128
    maxdim: int = 1
    chunk_size: int = 8
    seed: int = 42
    ph_backend: str = "auto"

    def __post_init__(self) -> None:
        _require(self.n_windows >= 3, f"--gradient-windows must be at least 3, got "
                                      f"{self.n_windows}")
        _require(self.window >= 2, f"--probe-length must be at least 2 tokens, got "
                                   f"{self.window}")
        _require(self.proj_dim >= 2, f"--gradient-dim must be at least 2, got "
                                     f"{self.proj_dim}")
        _require(self.maxdim in (0, 1, 2), f"--maxdim must be 0, 1 or 2, got {self.maxdim}")
        _require(self.chunk_size >= 1, f"chunk_size must be at least 1, got "
                                       f"{self.chunk_size}")
        _check_seed(self.seed)
        _require(self.ph_backend in PH_BACKEND_CHOICES,
                 f"--ph-backend must be one of {PH_BACKEND_CHOICES}, got {self.ph_backend!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def family_hash(family: Family, settings: LandscapeSettings | GradientSettings,
                texts_sha: str) -> str:
    """Short hash of the settings of the ``landscape`` or ``gradients`` family that change
    the numbers (not the chunk size or the PH backend), and of the texts source."""
    keyed = {k: v for k, v in asdict(settings).items() if k not in ("chunk_size", "ph_backend")}
    keyed |= {"schema": SCHEMA_VERSION, "family": family, "texts_sha": texts_sha}
    blob = json.dumps(keyed, sort_keys=True).encode()
    return family[0] + hashlib.sha256(blob).hexdigest()[:11]


def parse_signatures(value: str | None) -> tuple[Family, ...] | None:
    """``--signatures embedding,weights`` -> a tuple of families in the order given;
    ``None`` (per checkpoint kind) if unset.

    Raises:
        SettingsError: an unknown or empty family.
    """
    if value is None:
        return None
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    bad = [n for n in names if n not in FAMILIES]
    _require(bool(names) and not bad,
             f"--signatures takes a comma-separated list of {', '.join(FAMILIES)}, "
             f"got {value!r}")
    return tuple(Family(n) for n in names)
