"""Measure a model that is already in memory: a notebook's model, or one being trained.

:func:`measure` computes the chosen signature families on ``model`` as it is, on its own
device and in its own precision, with the same code and record schema as the pipeline
(``run_experiments.py``), and leaves the model as it found it: its train/eval mode, the
``requires_grad`` flag and ``.grad`` of every parameter, and the CPU and CUDA random
number generators are restored, and the weights are never written (the loss-surface
probe evaluates moved weights functionally). Nothing is saved or loaded.

    import toposig
    m = toposig.measure(model, tokenizer)                  # embedding + weights
    m.features["h1_total_persistence"], m.perplexity, m.table()
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toposig.config import AUTOCAST, RunSettings, parse_layers
from toposig.families import registry
from toposig.families.base import FamilyInputs, SignatureFamily, Texts
from toposig.families.embedding import EmbeddingFamily
from toposig.families.registry import merge_family_records
from toposig.families.runner import run_families
from toposig.model.placement import Placement
from toposig.progress import tqdm
from toposig.records import Family, Record
from toposig.sources.checkpoints import Checkpoint

IN_MEMORY = "<in memory>"


@dataclass
class Measurement:
    """What :func:`measure` found on one model.

    Attributes:
        records: family -> its record, as the pipeline stores it (``features``, the
            quality measure, timings, settings).
        arrays: family -> its arrays: ``layer<L>_h<q>`` diagrams ((m, 2) birth, death)
            for the embedding, ``<matrix>:h<q>`` for the weights, the loss ``grid`` for
            the landscape, ``h<q>`` and ``projected`` for the gradients.
    """

    records: dict[str, dict] = field(default_factory=dict)
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def entry(self) -> dict:
        """The families merged into one aggregate entry (as ``data/all_results.json``)."""
        return merge_family_records(self.records) or {}

    @property
    def record(self) -> Record | None:
        """The merged entry as a typed :class:`toposig.records.Record` (``None`` when
        nothing was measured): the same definition a results folder's records are read
        by."""
        return Record.from_json(self.entry) if self.records else None

    @property
    def features(self) -> dict[str, float | None]:
        """Every checkpoint-level feature of every family (the analysed layer's for the
        embedding)."""
        return dict(self.record.features) if self.record else {}

    @property
    def layer_features(self) -> dict[int, dict[str, float | None]]:
        """The embedding's features per layer (every layer with ``layers="all"``)."""
        return {k: dict(v) for k, v in self.record.layers.items()} if self.record else {}

    @property
    def perplexity(self) -> float | None:
        """exp(mean next-token loss) on the texts (``None`` for an encoder)."""
        return self.record.perplexity if self.record else None

    def diagrams(self, layer: int | None = None) -> list[np.ndarray]:
        """The hidden states' persistence diagrams [H0, H1, ...] at ``layer`` (default:
        the analysed one; a negative index counts from the end of the model's hidden
        states, as in ``layers=``), each (m, 2) of (birth, death)."""
        rec = self.record
        n_states = len(rec.layer_names) if rec else 0
        if layer is not None and layer < 0 and n_states:
            layer += n_states
        layer = (rec.layer if rec else None) if layer is None else layer
        arrays = self.arrays.get(EmbeddingFamily.name) or {}
        return [arrays[k] for q in range(8) if (k := f"layer{layer}_h{q}") in arrays]

    def __repr__(self) -> str:
        """A few lines: the model and step, then per family its quality measure, how many
        features and what they were computed on (the full records are ``.records``)."""
        entry = self.record
        head = (f"Measurement({entry.model_label if entry else 'model'}, step "
                f"{entry.step if entry and entry.step is not None else '-'}")
        if not self.records:
            return head + ": nothing measured)"
        lines = [head + "):"]
        for family, rec in self.records.items():
            typed = Record.from_json(rec)
            parts = [f"{len(typed.features)} features",
                     *(registry.get(family).record_parts(typed)
                       if registry.is_registered(family) else [])]
            n_arrays = len(self.arrays.get(family) or {})
            lines.append(f"  {family}: {', '.join(parts)}; {n_arrays} arrays")
        return "\n".join(lines)

    def plot(self, kind: str = "diagrams", *, layer: int | None = None, ax=None):
        """Draw the measurement and return the Figure it made (shown once as a notebook
        cell's value), or given ``ax`` what it drew on: that Axes, or the sub-figure that
        took its place (:func:`toposig.report.style.drawn_on`).

        Args:
            kind: ``"diagrams"``: the hidden states' persistence diagrams at ``layer``
                (H0, H1, ... on one Axes, by :func:`persim.plot_diagrams`); ``"betti"``:
                their Betti curves; ``"layers"``: H1 total persistence and RankMe of every
                measured hidden state (needs ``layers="all"`` or a list).
            layer: the hidden state for ``"diagrams"`` and ``"betti"`` (default: the
                analysed one).
            ax: where to draw: an Axes, a Figure or a SubFigure (``"layers"`` has two
                panels: given an Axes it takes that Axes' place); ``None``: a new figure,
                made without pyplot, so the backend in use is left alone.

        Raises:
            ValueError: an unknown ``kind``, or nothing measured to draw it from.
        """
        from toposig.report import measurement_figures as mf
        from toposig.report.style import drawn_on

        rec = self.record if EmbeddingFamily.name in self.records else None
        name = rec.model_label if rec else "model"
        if kind == "layers":
            return drawn_on(mf.plot_layers(self.layer_features,
                                           rec.layer_names if rec else (),
                                           title=f"{name}: per hidden state", ax=ax), ax)
        if kind not in mf.KINDS:
            raise ValueError(f"kind must be one of {', '.join(mf.KINDS)}, got {kind!r}")
        analysed = rec.layer if rec else None
        shown = analysed if layer is None else layer
        diagrams = self.diagrams(layer)
        if not diagrams:
            raise ValueError(f"no diagrams of layer {shown} in this measurement "
                             f"(measured: {sorted(self.layer_features) or analysed})")
        title = f"{name}, hidden state {shown}"
        draw = mf.plot_diagrams if kind == "diagrams" else mf.plot_betti
        return drawn_on(draw(diagrams, title=title, ax=ax), ax)

    def table(self):
        """The measurement as a tidy :class:`pandas.DataFrame`
        (:func:`toposig.analysis.table.results_table`)."""
        from toposig.analysis.table import results_table

        return results_table([self.entry])


@contextlib.contextmanager
def preserved_state(model, *, rngs: bool = True) -> Iterator[None]:
    """Restore after the block, whatever it did to them: the train/eval mode of ``model``
    and of each of its submodules (a frozen block kept in eval mode stays so), every
    parameter's ``requires_grad`` and ``.grad``, and, with ``rngs``, the random number
    generators (torch's CPU and CUDA ones, NumPy's global one and Python's ``random``).

    ``rngs=False`` is for a block on another thread than the training's (a measurement
    of a copy while training goes on): restoring the generators there would rewind the
    draws the training made meanwhile. The measurement code draws from its own seeded
    generators only (``tests/test_live.py`` checks that it leaves the global ones
    untouched)."""
    import random

    import torch

    params = list(model.parameters())
    flags = [p.requires_grad for p in params]
    grads = [p.grad for p in params]
    modes = [(m, m.training) for m in model.modules()]
    if rngs:
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        np_rng = np.random.get_state()
        py_rng = random.getstate()
    try:
        yield
    finally:
        for p, flag, grad in zip(params, flags, grads, strict=True):
            p.requires_grad_(flag)
            p.grad = grad
        for module, training in modes:
            module.training = training
        if rngs:
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
            np.random.set_state(np_rng)
            random.setstate(py_rng)


def measure(model, tokenizer, texts: Sequence[str] | None = None, *,
            families: Sequence[str] | None = None,
            layers: str | Sequence[int] | None = None,
            step: int | None = None, label: str = "model",
            settings: RunSettings | None = None,
            family_settings: Mapping[str, Any] | None = None,
            progress: bool = True, **legacy: Any) -> Measurement:
    """The signature families of an in-memory model, without saving or reloading it.

    Args:
        model: a ``transformers`` language model (causal or masked), on any device and in
            any precision; it is measured as it is and left as it was (see the module).
        tokenizer: its tokenizer.
        texts: the texts whose hidden states are analysed (default: the pipeline's, the
            first 200 WikiText-2 validation rows of at least 100 characters); the
            landscape and gradient probes cut their windows from the same texts when
            given, else from WikiText-2 validation.
        families: registered family names (``toposig.families.registry.names()``:
            ``embedding``, ``weights``, ``landscape``, ``gradients``, ``interlayer``, and
            any registered since); default: embedding and weights.
        layers: the hidden states of every measured family that has them (the
            embedding's, the dimension's, the drift's: ``--layers``): ``"last"``,
            ``"all"`` (every hidden state the model returns; the record's
            ``layer_names`` says what each is) or a list of indices into
            ``model(..., output_hidden_states=True).hidden_states`` such as
            ``[0, 3, -1]`` (negative ones count from the end; indices naming the same
            state count once); default: the embedding's settings' ``layers``, else
            ``"last"``. With anything but ``"last"``, ``Measurement.layer_features`` has
            each analysed index; ``features`` are the highest index's.
        step: the training step, kept in the records.
        label: the model's name in the records.
        settings: the run's settings (:class:`toposig.config.RunSettings`: texts, seed,
            homology dimension...; defaults as in ``run_experiments.py``).
        family_settings: family -> the family with its settings
            (``{"weights": WeightsFamily(max_rows=100)}``); the others' are their defaults,
            seeded as ``settings`` say.
        progress: show a progress bar over the families (``tqdm``, on stderr, as the
            pipeline's over checkpoints).
        legacy: ``weight_settings=``, ``landscape_settings=``, ``gradient_settings=``:
            the names of earlier versions, still taken (with a DeprecationWarning).

    Returns:
        A :class:`Measurement`; its records are those the pipeline writes for a
        checkpoint, with ``source: "memory"`` and no fingerprint.

    Raises:
        ValueError: no texts given (``texts`` empty, every text blank, or one string
            instead of a list of them); ``layers`` and a family's settings' ``layers``
            disagree; ``layers`` not one of the above, or an index the model
            does not have (a :class:`~toposig.config.SettingsError` naming its count of
            hidden states); an unknown family; the landscape or gradients asked of a
            model not in float32 (the pipeline probes float32 weights); parameters on
            several devices or in several precisions.
        TypeError: a family's settings of another family's type.
    """
    from dataclasses import replace

    if isinstance(texts, str):
        raise ValueError("texts is one string; give a list of texts (one per point of the "
                         "cloud), or None for the pipeline's WikiText-2 texts")
    texts = None if texts is None else list(texts)
    if texts is not None and not any(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError(f"no texts were given: texts has {len(texts)} item(s) and none is "
                         "a non-blank string; give a list of texts, or None for the "
                         "pipeline's WikiText-2 texts")
    names = check_families(registry.default_names() if families is None else families)
    run = settings or RunSettings()
    given = given_settings(family_settings, legacy, "measure")
    if layers is not None:  # --layers, given on its own: every family's that has it
        layers = parse_layers(layers)
        for name in dict.fromkeys([EmbeddingFamily.name, *names]):
            cls = registry.get(name)
            if "layers" not in {f.name for f, _ in cls.statements()}:
                continue
            held: Any = given.get(name)
            if held is not None and held.layers not in (layers, cls().layers):  # type: ignore[attr-defined]
                raise ValueError(f"layers={layers!r} and the {name} settings' layers="
                                 f"{held.layers!r} disagree; give one of them")
            given[name] = replace(held if held is not None else cls.seeded(run),
                                  layers=layers)
    inputs = measure_inputs(run, texts, names, given)
    ckpt = Checkpoint(model=label, label=label, step=step, source="memory",
                      location=IN_MEMORY)
    out = Measurement()
    bar = tqdm(total=len(names), desc=f"measuring {label}", unit="family",
               disable=not progress)

    def keep(family: Family, result) -> None:
        if isinstance(result, BaseException):
            raise result
        out.records[family], out.arrays[family] = result.record, result.arrays
        bar.set_postfix_str(str(family))
        bar.update(1)

    try:
        measure_families(model, tokenizer, ckpt, names, inputs, keep)
    finally:
        bar.close()
    return out


def given_settings(family_settings: Mapping[str, Any] | None, legacy: Mapping[str, Any],
                   caller: str) -> dict[str, SignatureFamily]:
    """Family -> the family with its settings, as given to :func:`measure` or the live
    monitor: ``family_settings``, and ``legacy`` keywords (``weight_settings=``: a
    family's key in ``config.json``, :func:`toposig.families.registry.by_key`), which
    earlier versions took.

    Raises:
        TypeError: a keyword that names no family's settings (as Python says it for
            ``caller``), an unknown family, or settings of another family's class.
    """
    out: dict[str, SignatureFamily] = {}
    for family, s in (family_settings or {}).items():
        if not registry.is_registered(family):
            raise TypeError(f"{caller}() family_settings: {family!r} is not a family "
                            f"({', '.join(registry.names())})")
        if s is not None:
            out[Family(family)] = registry.checked_settings(family, s)
    for key, s in legacy.items():
        try:
            cls = registry.by_key(key)
        except KeyError:
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}") from None
        warnings.warn(f"{key}= is deprecated: pass family_settings={{{cls.name!r}: "
                      "...}", DeprecationWarning, stacklevel=3)
        if s is not None:
            out[Family(cls.name)] = registry.checked_settings(cls.name, s)
    return out


def check_families(families: Sequence[str]) -> tuple[Family, ...]:
    """``families`` as registered family names.

    Raises:
        ValueError: none, or one that is not a registered family.
    """
    return registry.check_names(families)


def measure_inputs(run: RunSettings, texts: Sequence[str] | None, families: Sequence[str],
                   given: Mapping[str, SignatureFamily] | None = None,
                   texts_source: str | None = None) -> FamilyInputs:
    """The inputs of ``families`` with the pipeline's defaults where not given: the
    analysed texts (given, else the pipeline's WikiText-2 rows), the probe texts (the
    given texts, else WikiText-2 validation) and each of ``families`` with its settings
    (``given``, else its defaults seeded as ``run`` says:
    :meth:`~toposig.config.Settings.seeded`), for those families only. Texts no family
    reads are not loaded.

    Raises:
        TypeError: settings of another family's class.
    """
    from toposig.sources.corpus import load_texts, probe_texts

    analysed, probe = [], []
    if registry.needs_texts(families, Texts.ANALYSED):
        analysed = (list(texts) if texts is not None
                    else load_texts(run.texts, run.n_texts, run.min_chars))
    if registry.needs_texts(families, Texts.PROBE):
        probe = (list(texts) if texts is not None else probe_texts(run.texts, run.min_chars))
    return FamilyInputs(analysed, probe, run, registry.settings_for(run, families, given),
                        texts_source)


@dataclass
class InMemoryModel:
    """A model in hand, ready for the families (:class:`toposig.families.base.Loaded`):
    used as it is, on its own device and in its own precision, never moved."""

    ckpt: Checkpoint
    placement: Placement
    stored_loss: tuple[float | None, str | None]
    held: Any
    held_tokenizer: Any
    local_files_only: bool = False
    load_s: float = 0.0

    @property
    def num_parameters(self) -> int:
        from toposig.model.matrices import count_parameters

        return count_parameters(self.held.parameters())

    @property
    def available(self) -> list[str]:
        return [n for n, p in self.held.named_parameters() if p.dim() == 2]

    def matrices(self, include: Sequence[str], exclude: Sequence[str]):
        from toposig.model.matrices import model_matrices

        return model_matrices(self.held, include, exclude)

    def model(self, *, float32: bool):
        return self.held

    def tokenizer(self):
        return self.held_tokenizer


def measure_families(model, tokenizer, ckpt: Checkpoint, families: Sequence[Family],
                     inputs: FamilyInputs, emit: Callable[[Family, object], None], *,
                     stored_loss: tuple[float | None, str | None] = (None, None),
                     restore_rngs: bool = True) -> None:
    """Compute ``families`` on the in-memory ``model`` and hand each family's result (a
    :class:`~toposig.records.CheckpointOutput`, or the exception it raised) to ``emit``
    as soon as it is done; the model is left as it was (:func:`preserved_state`, the
    random number generators too unless ``restore_rngs`` is false: a copy measured on
    another thread).

    The families run as the pipeline's do on a loaded checkpoint
    (:func:`toposig.families.runner.run_families`), in the model's own device and
    precision.

    Args:
        ckpt: the identity the records carry (``source: "memory"``).
        stored_loss: the loss known for this state of the model and where it was found
            (a trainer's ``log_history``), kept in the weight and probe records as the
            pipeline keeps the loss stored with a checkpoint.

    Raises:
        ValueError: the landscape or gradients asked of a model not in float32, or
            parameters on several devices or precisions (before any family runs).
    """
    placement = Placement.of_model(model, inputs.run.dtype)
    float32 = [c.name for c in registry.run_order(families) if c.float32]
    if float32 and placement.dtype not in ("float32", AUTOCAST):
        raise ValueError(
            f"the {' and '.join(float32)} probes need float32 weights, as the pipeline uses "
            f"(this model is in {placement.dtype}); measure a float32 copy "
            "(copy.deepcopy(model).float()) for them")
    loaded = InMemoryModel(ckpt, placement, stored_loss, model, tokenizer)
    with preserved_state(model, rngs=restore_rngs):
        model.eval()  # no dropout: the pipeline's models are loaded in eval mode
        run_families(loaded, families, inputs, emit)
