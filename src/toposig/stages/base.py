"""A signature family as every caller sees it: a :class:`Stage`.

A stage says all that the pipeline, the in-memory measurement, the live monitor and the
study check need to know of one family: its settings type and their defaults, where a
results folder's ``config.json`` keeps its settings and settings hash, how that hash is
computed, which texts and what of a loaded checkpoint it needs, how it runs, and how the
run's summary shows it. The stages are held in one mapping,
:data:`toposig.stages.registry.STAGES`; a caller iterates it instead of naming families.

A stage runs on a :class:`Loaded` checkpoint: the pipeline's is loaded from disk
(:mod:`toposig.run.tasks`), the in-memory measurement's is the model in hand
(:mod:`toposig.in_memory`). Both hand it to :func:`toposig.stages.runner.run_stages`.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from toposig.config import EmbeddingSettings
from toposig.records import CheckpointOutput, Family, Record

if TYPE_CHECKING:
    from toposig.model.embedding import TextsForward
    from toposig.model.placement import Placement
    from toposig.sources.checkpoints import Checkpoint


class Texts(Enum):
    """Which texts a stage reads: none, the analysed texts (the points of the embedding's
    cloud), or the probe texts its loss windows are cut from."""

    NONE = "none"
    ANALYSED = "analysed"
    PROBE = "probe"


@dataclass(frozen=True)
class StageInputs:
    """What the stages of a run take besides the checkpoint.

    Attributes:
        texts: the analysed texts (empty when no stage of the run reads them).
        probe_texts: the texts the probe windows are cut from (likewise).
        settings: family -> its settings, one for every family of the registry. The
            embedding's are also the run's (device, precision, seed, tokenizer, texts):
            :attr:`run_settings`.
        texts_source: where the analysed texts come from, as ``config.json`` says it.
    """

    texts: list[str]
    probe_texts: list[str]
    settings: Mapping[Family, Any]
    texts_source: str = ""

    @property
    def run_settings(self) -> EmbeddingSettings:
        """The settings every stage shares (device, precision, seed, tokenizer, the
        texts' source), which the embedding's settings carry."""
        return self.settings[Family.EMBEDDING]


class Loaded(Protocol):
    """A checkpoint ready for the stages: loaded once, each part on demand.

    Attributes:
        ckpt: its identity, for the records.
        placement: where and in what precision the model runs.
        stored_loss: the loss stored with it and where it was found (``(None, None)``).
        local_files_only: never reach the Hub for what is not at hand.
    """

    ckpt: Checkpoint
    placement: Placement
    stored_loss: tuple[float | None, str | None]
    local_files_only: bool

    @property
    def load_s(self) -> float:
        """Seconds spent loading so far (for the records' timings)."""

    @property
    def num_parameters(self) -> int | None:
        """Its parameter count, each storage once."""

    @property
    def available(self) -> list[str]:
        """Its 2-D tensor names, for a message when a selection finds none."""

    def matrices(self, include: Sequence[str], exclude: Sequence[str]) -> Mapping[str, Any]:
        """Name -> (out, in) tensor of the weight matrices that ``include`` and
        ``exclude`` choose, as stored."""

    def model(self, *, float32: bool):
        """The model on the run's device: in float32 (``float32``), else in the run's
        precision.

        Raises:
            whatever moving it raises; a checkpoint with no model (a state dict) raises.
        """

    def tokenizer(self):
        """Its tokenizer (loaded once; a failure is raised to every stage that asks)."""


class Session(Loaded, Protocol):
    """A :class:`Loaded` checkpoint as the stages get it
    (:class:`toposig.stages.runner.CheckpointSession`): with the work several families
    share done once."""

    def texts_forward(self, texts: list[str], max_length: int, batch_size: int | str
                      ) -> TextsForward:
        """The texts' forward pass through the model in the run's precision
        (:func:`toposig.model.embedding.texts_forward`), run once per checkpoint."""


@dataclass(frozen=True)
class Widening:
    """A setting that ``--extend`` may widen in a study (the embedding's layers): a run
    that differs from the study in it alone computes the union of both, under a new
    settings hash.

    Attributes:
        field: the settings field (``"layers"``).
        option: its command-line option (``"--layers"``).
        parse: a recorded value in its normal form (raises ValueError on a bad one).
        union: the union of two values, in normal form.
        show: a value as the option takes it.
    """

    field: str
    option: str
    parse: Callable[[Any], Any]
    union: Callable[[Any, Any], Any]
    show: Callable[[Any], str]


@dataclass(frozen=True)
class Column:
    """One column of the run's one-screen summary: a header, a format spec for its
    width, the entry's key and the number format."""

    header: str
    width: str
    key: str
    number: str


class Stage(ABC):
    """One signature family, all of it in one place (see the module).

    Class attributes:
        family: the family.
        settings_type: its settings dataclass (validated on construction).
        settings_key, hash_key: where ``config.json`` keeps its settings and hash.
        order: when it runs on a loaded checkpoint, lowest first (the weights first, on
            the weights as stored; the embedding last, in the run's precision).
        texts: which texts it reads.
        runs_model: it runs the model (needs its config and tokenizer, not a bare state
            dict).
        reads_weights: it analyses the stored weights (the model is then loaded in
            float32 on the CPU first).
        float32: it needs float32 weights (the loss probes).
        probes_loss: it probes the next-token loss (causal models only; opt-in).
        default_on: a model folder or Hub revision gets it without ``--signatures``.
        precision_keyed: its settings hash covers the run's precision (a model's own
            precision is known only once the model is in hand).
        columns: what the run's summary shows of it.
        field_keys: the keys of :meth:`study_fields` (kept from the study when a run
            does not compute the family).
        view_keys: those of them that :meth:`settings_view` adds to its settings.
        widening: the setting ``--extend`` may widen in a study, if any.
    """

    family: Family
    settings_type: type
    settings_key: str
    hash_key: str
    order: int
    texts: Texts = Texts.NONE
    runs_model: bool = True
    reads_weights: bool = False
    float32: bool = False
    probes_loss: bool = False
    default_on: bool = False
    precision_keyed: bool = False
    columns: tuple[Column, ...] = ()
    field_keys: tuple[str, ...] = ()
    view_keys: tuple[str, ...] = ()
    widening: Widening | None = None

    @abstractmethod
    def default(self, run: EmbeddingSettings) -> Any:
        """Its settings when none are given, seeded as the run is."""

    @abstractmethod
    def settings_hash(self, settings: Any, inputs: StageInputs, dtype: str) -> str:
        """The short hash its records are keyed by: every setting that changes its
        numbers, and the texts it reads; ``dtype`` is the run's resolved precision."""

    def settings_view(self, settings: Any, inputs: StageInputs, dtype: str) -> dict:
        """Its settings as ``config.json`` records them (and names them when a study's
        hash differs)."""
        return settings.to_dict()

    def recorded_settings(self, settings: Any, hashed: bool) -> dict | None:
        """What ``config.json`` keeps under :attr:`settings_key`: the settings of a family
        the run computes (``hashed``), else nothing."""
        return settings.to_dict() if hashed else None

    def study_fields(self, inputs: StageInputs, dtype: str, hashed: bool) -> dict[str, Any]:
        """Fields of ``config.json`` besides its settings and hash that belong to it
        (kept from the study when a run does not compute it)."""
        return {}

    @abstractmethod
    def run(self, loaded: Session, settings: Any, inputs: StageInputs) -> CheckpointOutput:
        """Its record and arrays for one loaded checkpoint.

        Raises:
            whatever the measurement raises; the caller records it as this family's
            failure.
        """

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        """Its command-line options (``toposig run``), in a group of its own; the run's
        shared ones (``--seed``, ``--maxdim``, ``--ph-backend``) are the embedding's.
        None by default."""
        return None

    def settings_from_args(self, args: argparse.Namespace) -> Any:
        """Its validated settings from the parsed options (``None``: the defaults).

        Raises:
            SettingsError: naming the option with a bad value.
        """
        return None

    @abstractmethod
    def describe(self, settings: Any, settings_hash: str | None, inputs: StageInputs) -> str:
        """One line of the run's summary: what it computed, with its settings hash."""

    def summary_columns(self, entries: Sequence[Record]) -> tuple[Column, ...]:
        """The summary's columns of it, for these aggregate ``entries``."""
        return self.columns

    def record_parts(self, record: Record) -> list[str]:
        """A few words on one of its records, for a measurement's one-line summary (what
        it was computed on, a headline number)."""
        return []

    def mean_time(self, entries: Sequence[Record]) -> float | None:
        """Mean seconds per checkpoint of its records in the aggregate ``entries``."""
        times = [part.timings_s["total"] for r in entries
                 if (part := r.parts.get(self.family)) and "total" in part.timings_s]
        return sum(times) / len(times) if times else None
