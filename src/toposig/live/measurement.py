"""One live measurement: the chosen families run on the model in memory and written
through the offline pipeline's own driver (:func:`toposig.run.pipeline.execute`, with the
in-memory executor), so the records, aggregates and ``config.json`` are the pipeline's;
and the scalars logged from a measured step.

The plan it runs (:meth:`LiveMeasurement.plan`) is also what the study guard checks a live
run against before it writes anything (:mod:`toposig.live.guard`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from toposig.config import RunSettings
from toposig.families.base import FamilyInputs, SignatureFamily
from toposig.in_memory import IN_MEMORY, measure_inputs
from toposig.live.executor import InMemoryExecutor
from toposig.model.placement import Placement
from toposig.records import Family, Record
from toposig.run.pipeline import execute
from toposig.run.plan import RunPlan
from toposig.sources.checkpoints import Checkpoint

PREFIX = "topology/"
# The features logged by default: one headline number per family, so that a trainer's
# console line of a measurement stays one short line (``log_features="all"`` logs every
# checkpoint-level feature, and the signal's every number; the records keep them all).
LOG_FEATURES = ("perplexity", "h1_total_persistence", "rankme", "np_mean", "hessian_trace",
                "grad_h0_total_persistence")


def live_inputs(texts: Sequence[str] | None, families: Sequence[Family], layers: str,
                settings: RunSettings | None = None,
                given: Mapping[Family, SignatureFamily] | None = None) -> FamilyInputs:
    """The inputs of a live measurement: the run's ``settings``, the families' ``given``
    settings (defaults where not given) with the embedding's ``layers``, and where the
    texts come from, as ``config.json`` says it."""
    from toposig.families import registry
    from toposig.records import TOP_FAMILY

    run = settings or RunSettings()
    given = dict(given or {})
    if TOP_FAMILY in families:
        embedding = given.get(TOP_FAMILY) or registry.get(TOP_FAMILY).seeded(run)
        given[TOP_FAMILY] = replace(embedding, layers=layers)
    return measure_inputs(run, texts, families, given,
                          texts_source="texts given to the monitor" if texts is not None
                          else None)


@dataclass
class Measured:
    """What one measurement wrote.

    Attributes:
        entries: the aggregate entries of the label, one per step (families merged).
        entry: the measured step's entry (``None`` when every family failed).
        failures: the failure records of the measured step.
    """

    entries: list[Record]
    entry: Record | None
    failures: list[dict] = field(default_factory=list)


class RememberingTokenizer:
    """A live run's tokenizer that remembers what it made of each list of texts: a live
    run tokenizes the same texts at every measurement (0.04 to 0.1 s each time on 2 cores,
    for 200 texts). Everything but the call is the tokenizer's own (attributes read and
    set go to it).

    A call is answered from memory when the texts, the options and the tokenizer's state
    (:func:`tokenizer_state`: its vocabulary's size, truncation and padding sides, and
    whether it adds BOS/EOS) are those of an earlier call; a call with an option that
    cannot be a key is not remembered. Other changes to a tokenizer between two
    measurements (a token's id replaced in place) are not seen. What it returns is shared
    between calls: read it, do not change it. At most :attr:`KEPT` answers are kept (the
    analysed texts and the probe texts).
    """

    KEPT = 4

    def __init__(self, tokenizer):
        object.__setattr__(self, "_wrapped", tokenizer)
        object.__setattr__(self, "_made", {})

    def __getattr__(self, name: str):
        try:
            wrapped = self.__dict__["_wrapped"]
        except KeyError:  # not yet set (a copy being made): no attribute of its own
            raise AttributeError(name) from None
        return getattr(wrapped, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._wrapped, name, value)

    def __len__(self) -> int:
        return len(self._wrapped)

    def __call__(self, texts, **options):
        texts = texts if isinstance(texts, str) else list(texts)  # a generator, once
        try:
            key = (texts if isinstance(texts, str) else tuple(texts),
                   tuple(sorted(options.items())), tokenizer_state(self._wrapped))
            hash(key)
        except TypeError:  # an option that cannot be a key: not remembered
            return self._wrapped(texts, **options)
        if key not in self._made:
            made = self._wrapped(texts, **options)
            if len(self._made) >= self.KEPT:
                self._made.pop(next(iter(self._made)))
            self._made[key] = made
        return self._made[key]


def tokenizer_state(tokenizer) -> tuple:
    """What of a tokenizer's settings can change its ids between two calls with the same
    texts and options: the vocabulary's size, the truncation and padding sides, and
    whether it adds BOS and EOS tokens (``None`` where it has no such setting)."""
    return (len(tokenizer),
            *(getattr(tokenizer, name, None) for name in (
                "truncation_side", "padding_side", "add_bos_token", "add_eos_token")))


class LiveMeasurement:
    """Measures one label's model into a results folder.

    Args:
        tokenizer: the model's tokenizer.
        out: the results folder.
        families: the signature families measured.
        label: the model's name in the records.
        model_name: the model as ``config.json`` names it.
        inputs: the texts, their source and the settings (:func:`live_inputs`).
        command: how the run was made, for ``config.json``.
        extend: let this label join a folder whose study holds other models.
        progress: show a progress bar over the families of the run's first measurement
            (the one that also loads texts and settles the study; later ones are quiet).
    """

    def __init__(self, tokenizer, out: Path, *, families: tuple[Family, ...], label: str,
                 model_name: str, inputs: FamilyInputs, command: str,
                 extend: bool, progress: bool = True):
        self.tokenizer = tokenizer
        self._remembering = RememberingTokenizer(tokenizer)  # what the measurements use
        self.out = out
        self.families = families
        self.label = label
        self.model_name = model_name
        self.inputs = inputs
        self.command = command
        self.extend = extend
        self.progress = progress

    def placement(self, model) -> Placement:
        """Where and in what precision ``model`` is measured.

        Raises:
            ValueError: ``model`` cannot be measured (several devices or precisions).
        """
        return Placement.of_model(model, self.inputs.run.dtype)

    def checkpoint(self, step: int) -> Checkpoint:
        """The model in memory at ``step``, as the pipeline's driver names a checkpoint."""
        return Checkpoint(model=self.model_name, label=self.label, step=step,
                          source="memory", location=IN_MEMORY)

    def plan(self, ckpt: Checkpoint, placement: Placement) -> RunPlan:
        """The pipeline's plan of measuring ``ckpt`` on ``placement``."""
        i = self.inputs
        return RunPlan([ckpt], i, placement, i.run.ph_backend, True,
                       i.hashes(placement.dtype, self.families), families=[self.families],
                       command=self.command)

    def run(self, model, step: int, stored_loss: tuple[float | None, str | None],
            first: bool, *, tokenizer=None, restore_rngs: bool = True) -> Measured:
        """Measure ``model`` at ``step`` and write its records (the folder's lock held by
        the caller); ``first``: the run's first measurement (the pipeline refreshes the
        folder's aggregates then).

        Args:
            tokenizer: the tokenizer to use instead of :attr:`tokenizer` (a copy, for a
                measurement on another thread; wrap it in :class:`RememberingTokenizer`).
            restore_rngs: restore the global random number generators after (false on
                another thread than the training's).
        """
        plan = self.plan(self.checkpoint(step), self.placement(model))
        tok = self._remembering if tokenizer is None else tokenizer
        executor = InMemoryExecutor(model, tok, stored_loss, self.progress and first,
                                    restore_rngs)
        outcome = execute(plan, self.out, force=True, progress=False, executor=executor,
                          extend=self.extend, refresh_first=first)
        label = plan.checkpoints[0].label  # as the study knows it
        entries = [r for r in outcome.entries if r.model_label == label and r.step is not None]
        entry = next((r for r in entries if r.step == step), None)
        failures = [f for f in outcome.failures if f.get("step") == step]
        return Measured(entries, entry, failures)


def feature_scalars(entry: Record | None, log_features: Sequence[str] | str
                    ) -> dict[str, float]:
    """The finite features of ``entry`` (and its perplexity and loss) named by
    ``log_features`` (``"all"``: every one), as logged (``topology/<feature>``)."""
    out: dict[str, float] = {}
    if entry is None:
        return out
    values = {**entry.features}
    for key, value in (("perplexity", entry.perplexity), ("loss", entry.loss)):
        if value is not None:
            values[key] = value
    names = values if log_features == "all" else [f for f in log_features if f in values]
    for name in names:
        v = values[name]
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[PREFIX + name] = float(v)
    return out
