"""The one place that lists the signature families: :data:`STAGES`, family -> its
:class:`~toposig.stages.base.Stage`, in the order records, tables and figures list the
families. Everything that would otherwise name a family asks it here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from toposig.config import EmbeddingSettings
from toposig.records import FAMILIES, Family
from toposig.stages.base import Stage, StageInputs, Texts
from toposig.stages.embedding import EmbeddingStage
from toposig.stages.interlayer import InterlayerStage
from toposig.stages.probes import GradientStage, LandscapeStage
from toposig.stages.weights import WeightStage

STAGES: Mapping[Family, Stage] = MappingProxyType({s.family: s for s in (
    EmbeddingStage(),
    WeightStage(),
    LandscapeStage(),
    GradientStage(),
    InterlayerStage(),
)})
assert tuple(STAGES) == FAMILIES, "one stage per Family member, in Family order"

# What a model folder or Hub revision gets without --signatures (the probes are opt-in).
DEFAULT_STAGES: tuple[Family, ...] = tuple(f for f, s in STAGES.items() if s.default_on)


def run_order(families: Iterable[str]) -> list[Stage]:
    """The stages of ``families`` in the order they run on a loaded checkpoint."""
    wanted = set(families)
    return sorted((s for f, s in STAGES.items() if f in wanted), key=lambda s: s.order)


def complete_settings(run: EmbeddingSettings,
                    given: Mapping[Family, Any] | None = None) -> dict[Family, Any]:
    """Every family's settings: ``given`` where given (``None`` values are not), else the
    stage's defaults seeded as ``run`` (the embedding's settings, which are the run's).

    Raises:
        TypeError: a settings object of the wrong type for its family.
    """
    given = {Family(f): s for f, s in (given or {}).items() if s is not None}
    out: dict[Family, Any] = {}
    for family, stage in STAGES.items():
        s = run if family == Family.EMBEDDING else given.get(family) or stage.default(run)
        if not isinstance(s, stage.settings_type):
            raise TypeError(f"the {family} settings must be a {stage.settings_type.__name__},"
                            f" got {type(s).__name__}")
        out[family] = s
    return out


def needs_texts(families: Iterable[str], need: Texts) -> bool:
    """Whether a stage of ``families`` reads the texts ``need``."""
    return any(s.texts == need for s in run_order(families))


def hashes(families: Iterable[str], inputs: StageInputs, dtype: str) -> dict[Family, str]:
    """Family -> the settings hash its records are keyed by, for ``families`` (in
    registry order); ``dtype`` is the run's resolved precision."""
    wanted = set(families)
    return {f: s.settings_hash(inputs.settings[f], inputs, dtype)
            for f, s in STAGES.items() if f in wanted}


def settings_views(inputs: StageInputs, dtype: str) -> dict[Family, dict]:
    """Family -> its settings as ``config.json`` records them: what
    :meth:`toposig.run.study.Study.check` names when a hash differs."""
    return {f: s.settings_view(inputs.settings[f], inputs, dtype) for f, s in STAGES.items()}


def by_key(key: str) -> Stage:
    """The stage whose settings or hash ``config.json`` keeps under ``key``."""
    for s in STAGES.values():
        if key in (s.settings_key, s.hash_key):
            return s
    raise KeyError(key)
