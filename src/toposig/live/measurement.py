"""One live measurement: the chosen families run on the model in memory and written
through the offline pipeline's own driver (:func:`toposig.run.pipeline.execute`, with the
in-memory executor), so the records, aggregates and ``config.json`` are the pipeline's;
and the scalars logged from a measured step.

The plan it runs (:meth:`LiveMeasurement.plan`) is also what the study guard checks a live
run against before it writes anything (:mod:`toposig.live.guard`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from toposig.config import (
    EmbeddingSettings,
    GradientSettings,
    LandscapeSettings,
    WeightSettings,
)
from toposig.in_memory import IN_MEMORY, MeasureInputs
from toposig.live.executor import InMemoryExecutor
from toposig.model.placement import Placement
from toposig.records import Family
from toposig.run.pipeline import execute
from toposig.run.plan import RunPlan, family_hashes
from toposig.sources.checkpoints import Checkpoint

PREFIX = "topology/"
# The features logged by default: each family's headline numbers (``log_features="all"``
# logs every checkpoint-level feature).
LOG_FEATURES = ("perplexity", "h0_total_persistence", "h1_total_persistence",
                "h1_n_features", "h1_persistence_entropy", "rankme", "np_mean",
                "weight_h0_total", "weight_h1_total", "hessian_eig_1", "hessian_trace",
                "landscape_n_minima", "grad_h0_total_persistence", "grad_norm_mean")


def measure_inputs(texts: Sequence[str] | None, families: Sequence[Family], layers: str,
                   settings: EmbeddingSettings | None = None,
                   weight_settings: WeightSettings | None = None,
                   landscape_settings: LandscapeSettings | None = None,
                   gradient_settings: GradientSettings | None = None,
                   ) -> tuple[MeasureInputs, str]:
    """The inputs of a live measurement (the embedding's settings with ``layers``), and
    where its texts come from, as ``config.json`` says it."""
    embedding = replace(settings or EmbeddingSettings(), layers=layers)
    inputs = MeasureInputs.default(embedding, texts, families, weight_settings,
                                   landscape_settings, gradient_settings)
    source = ("texts given to the monitor" if texts is not None
              else embedding.texts or "wikitext-2-raw-v1 validation")
    return inputs, source


@dataclass
class Measured:
    """What one measurement wrote.

    Attributes:
        entries: the aggregate entries of the label, one per step (families merged).
        entry: the measured step's entry (``None`` when every family failed).
        failures: the failure records of the measured step.
    """

    entries: list[dict]
    entry: dict | None
    failures: list[dict] = field(default_factory=list)


class LiveMeasurement:
    """Measures one label's model into a results folder.

    Args:
        tokenizer: the model's tokenizer.
        out: the results folder.
        families: the signature families measured.
        label: the model's name in the records.
        model_name: the model as ``config.json`` names it.
        inputs: the texts and settings (:func:`measure_inputs`).
        texts_source: where the texts come from, for ``config.json``.
        command: how the run was made, for ``config.json``.
        extend: let this label join a folder whose study holds other models.
        progress: show a progress bar over the families of the run's first measurement
            (the one that also loads texts and settles the study; later ones are quiet).
    """

    def __init__(self, tokenizer, out: Path, *, families: tuple[Family, ...], label: str,
                 model_name: str, inputs: MeasureInputs, texts_source: str, command: str,
                 extend: bool, progress: bool = True):
        self.tokenizer = tokenizer
        self.out = out
        self.families = families
        self.label = label
        self.model_name = model_name
        self.inputs = inputs
        self.texts_source = texts_source
        self.command = command
        self.extend = extend
        self.progress = progress

    def placement(self, model) -> Placement:
        """Where and in what precision ``model`` is measured.

        Raises:
            ValueError: ``model`` cannot be measured (several devices or precisions).
        """
        return Placement.of_model(model, self.inputs.settings.dtype)

    def checkpoint(self, step: int) -> Checkpoint:
        """The model in memory at ``step``, as the pipeline's driver names a checkpoint."""
        return Checkpoint(model=self.model_name, label=self.label, step=step,
                          source="memory", location=IN_MEMORY)

    def hashes(self, dtype: str) -> dict[str, str]:
        """Each measured family's settings hash, the embedding's in ``dtype``."""
        i = self.inputs
        return family_hashes(set(self.families), i.settings, i.weight_settings,
                             i.landscape_settings, i.gradient_settings, i.texts,
                             i.probe_texts, dtype)

    def plan(self, ckpt: Checkpoint, placement: Placement) -> RunPlan:
        """The pipeline's plan of measuring ``ckpt`` on ``placement``."""
        i = self.inputs
        hashes = self.hashes(placement.dtype)
        return RunPlan(
            [ckpt], i.texts, i.settings, placement, i.settings.ph_backend, True,
            hashes.get(Family.EMBEDDING), self.texts_source, families=[self.families],
            weight_settings=i.weight_settings, weights_hash=hashes.get(Family.WEIGHTS),
            landscape_settings=i.landscape_settings, gradient_settings=i.gradient_settings,
            probe_texts=i.probe_texts, landscape_hash=hashes.get(Family.LANDSCAPE),
            gradients_hash=hashes.get(Family.GRADIENTS), command=self.command)

    def run(self, model, step: int, stored_loss: tuple[float | None, str | None],
            first: bool) -> Measured:
        """Measure ``model`` at ``step`` and write its records (the folder's lock held by
        the caller); ``first``: the run's first measurement (the pipeline refreshes the
        folder's aggregates then)."""
        plan = self.plan(self.checkpoint(step), self.placement(model))
        outcome = execute(plan, self.out, force=True, progress=False,
                          executor=InMemoryExecutor(model, self.tokenizer, self.inputs,
                                                    stored_loss, self.progress and first),
                          extend=self.extend, refresh_first=first)
        label = plan.checkpoints[0].label  # as the study knows it
        entries = [e for e in outcome.records if e.get("model_label") == label
                   and e.get("step") is not None]
        entry = next((e for e in entries if e["step"] == step), None)
        failures = [f for f in outcome.failures if f.get("step") == step]
        return Measured(entries, entry, failures)


def feature_scalars(entry: dict | None, log_features: Sequence[str] | str
                    ) -> dict[str, float]:
    """The finite features of ``entry`` (and its perplexity and loss) named by
    ``log_features`` (``"all"``: every one), as logged (``topology/<feature>``)."""
    out: dict[str, float] = {}
    if entry is None:
        return out
    values = {**(entry.get("features") or {})}
    for key in ("perplexity", "loss"):
        if entry.get(key) is not None:
            values[key] = entry[key]
    names = values if log_features == "all" else [f for f in log_features if f in values]
    for name in names:
        v = values[name]
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[PREFIX + name] = float(v)
    return out
