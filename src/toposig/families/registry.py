"""The open registry of signature families: the one place that lists them.

:func:`register` adds a family class (:class:`~toposig.families.base.SignatureFamily`),
as ``AutoConfig.register`` adds a configuration: each of the package's own five families
registers itself at the end of its module, which :mod:`toposig.families` imports (one line
a family, in the order the families are listed), and a notebook or plug-in registers its
own the same way (``toposig.register(MyFamily)``). Every
consumer asks the registry instead of naming families: the run's options and plan, the
study check, ``config.json``, the results table, the analysis's feature groups and
baselines, ``toposig compare``'s tolerances, the summary, the figures, ``measure`` and
the live monitor.

It also answers for the features the families declare: which group a feature name
belongs to (:func:`group_of`: the registered name, else the naming convention of the
groups' prefixes, for an imported table's names), how its values behave
(:func:`kind_of`), and how a checkpoint's family records merge into one aggregate entry
(:func:`merge_family_records`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toposig.config import RunSettings, SettingsError
from toposig.families.base import (
    FamilyType,
    Feature,
    FeatureGroup,
    Kind,
    Scope,
    SignatureFamily,
    Texts,
)
from toposig.records import (
    GROUND_TRUTH,
    IDENTITY,
    SCHEMA_VERSION,
    SEED_FIELDS,
    TOP_FAMILY,
    Family,
    RecordError,
    record_family,
    release_part,
    reserve_part,
)

logger = logging.getLogger(__name__)
_FAMILIES: dict[str, FamilyType] = {}
_OWNER: dict[str, FamilyType] = {}  # feature group name -> the family that declares it
_EXACT: dict[str, tuple[FeatureGroup, Feature]] = {}  # checkpoint feature -> its group
_KINDS: dict[str, Kind] = {}  # every declared checkpoint feature -> its kind
_MATRIX_KINDS: dict[str, Kind] = {}  # every declared per-matrix value -> its kind


class RegistryError(TypeError):
    """A family that cannot be registered: the message says which declaration is wrong."""


# ------------------------------------------------------------------------- registering

def declaration_problems(cls: object) -> list[str]:
    """What keeps ``cls`` from being registered beside the families registered already
    (empty: nothing): a frozen dataclass subclass of
    :class:`~toposig.families.base.SignatureFamily` with a family's name, its fields
    declared with :func:`toposig.config.setting` and valid defaults, a way to compute, and
    its config.json keys, feature groups and feature names its own; a topological group
    with baselines."""
    if not (isinstance(cls, type) and issubclass(cls, SignatureFamily)):
        return [f"{cls!r} is not a SignatureFamily class"]
    out = []
    name = getattr(cls, "name", None)
    try:
        Family(name)
    except ValueError as exc:
        out.append(str(exc))
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        out.append("it is not a frozen dataclass (@dataclass(frozen=True))")
        return out
    try:
        cls.statements()
        cls()
    except (TypeError, SettingsError) as exc:
        out.append(f"its settings do not build with their defaults: {exc}")
    if cls.compute is SignatureFamily.compute:
        out.append("it has no compute()")
    others = [f for n, f in _FAMILIES.items() if n != name]
    keys = {k for f in others for k in (f.settings_key, f.hash_key)}
    out += [f"config.json key {k!r} is another family's" for k in (cls.settings_key, cls.hash_key)
            if k in keys]
    taken = {g.name for f in others for g in f.groups}
    seen: set[str] = set()
    for group in cls.groups:
        if group.name in taken or group.name in seen:
            out.append(f"feature group {group.name!r} is declared twice")
        seen.add(group.name)
        if group.topological and not group.baselines:
            out.append(f"topological group {group.name!r} names no baseline to be tested "
                       "beyond")
    theirs = {f.name for f_ in others for g in f_.groups for f in g.features}
    mine = [f.name for g in cls.groups for f in g.features]
    out += [f"feature {n!r} is declared twice" for n in sorted({n for n in mine
                                                               if mine.count(n) > 1})]
    out += [f"feature {n!r} is another family's" for n in mine if n in theirs]
    return out


def register(cls: FamilyType) -> FamilyType:
    """Add a signature family (usable as a class decorator); registering the same class
    again changes nothing.

    Raises:
        RegistryError: :func:`declaration_problems` has an answer, or another class has
            its name.
    """
    if (held := _FAMILIES.get(getattr(cls, "name", ""))) is cls:
        return cls
    if held is not None:
        raise RegistryError(f"a family named {cls.name!r} is registered already "
                            f"({held.__module__}.{held.__qualname__}); unregister it first")
    problems = declaration_problems(cls)
    if problems:
        raise RegistryError(f"{getattr(cls, '__qualname__', cls)} cannot be registered: "
                            + "; ".join(problems))
    _FAMILIES[cls.name] = cls
    reserve_part(cls.name)
    _index()
    return cls


def unregister(name: str) -> FamilyType:
    """Remove the family ``name`` (a notebook's, or a test's) and return it.

    Raises:
        KeyError: no family of that name is registered.
    """
    cls = get(name)
    del _FAMILIES[cls.name]
    release_part(cls.name)
    _index()
    return cls


def _index() -> None:
    _OWNER.clear()
    _EXACT.clear()
    _KINDS.clear()
    _MATRIX_KINDS.clear()
    for cls in _FAMILIES.values():
        for group in cls.groups:
            _OWNER[group.name] = cls
            for f in group.features:
                if f.pattern is None:
                    _EXACT[f.name] = (group, f)
                _KINDS.setdefault(f.name, f.kind)
        for f in cls.matrix_features:
            _MATRIX_KINDS.setdefault(f.name, f.kind)


# ----------------------------------------------------------------------------- asking it

def families() -> tuple[FamilyType, ...]:
    """Every registered family, in registration order (the order records, tables and
    figures list them)."""
    return tuple(_FAMILIES.values())


def list_families() -> tuple[FamilyType, ...]:
    """Every registered family class, in registration order (``toposig.list_families``)."""
    return families()


def names() -> tuple[Family, ...]:
    """Their names, in registration order."""
    return tuple(Family(n) for n in _FAMILIES)


def get(name: str) -> FamilyType:
    """The family ``name``.

    Raises:
        KeyError: none of that name, naming those there are.
    """
    try:
        return _FAMILIES[str(name)]
    except KeyError:
        raise KeyError(f"{name!r} is not a signature family (registered: "
                       f"{', '.join(_FAMILIES)})") from None


def is_registered(name: object) -> bool:
    return isinstance(name, str) and name in _FAMILIES


def default_names() -> tuple[Family, ...]:
    """What a model folder or Hub revision gets without ``--signatures``."""
    return tuple(Family(c.name) for c in _FAMILIES.values() if c.default_on)


def weights_only_names() -> tuple[Family, ...]:
    """What a plain state-dict file gets by default: the default families that need no
    model (an opt-in family is computed only when asked for, whatever it needs)."""
    return tuple(Family(c.name) for c in _FAMILIES.values()
                 if c.default_on and not c.runs_model)


def run_order(wanted: Iterable[str]) -> list[FamilyType]:
    """The families of ``wanted`` in the order they run on a loaded checkpoint."""
    wanted = set(map(str, wanted))
    return sorted((c for n, c in _FAMILIES.items() if n in wanted), key=lambda c: c.order)


def in_order(wanted: Iterable[str]) -> list[Family]:
    """``wanted`` in registration order (unregistered names left out)."""
    wanted = set(map(str, wanted))
    return [Family(n) for n in _FAMILIES if n in wanted]


def needs_texts(wanted: Iterable[str], texts: Texts) -> bool:
    """Whether a family of ``wanted`` reads the texts ``texts``."""
    return any(c.texts == texts for c in run_order(wanted))


def drawn_by(figure: str) -> tuple[FamilyType, ...]:
    """The families whose features ``figure`` draws over training
    (:attr:`~toposig.families.base.SignatureFamily.figure`), in registration order."""
    return tuple(c for c in _FAMILIES.values() if c.figure == figure)


def over_training(figure: str) -> tuple[str, ...]:
    """The features ``figure`` draws over training: those its families declare
    (:attr:`~toposig.families.base.SignatureFamily.over_training`), in their order."""
    return tuple(f for c in drawn_by(figure) for f in c.over_training)


def by_key(key: str) -> FamilyType:
    """The family whose settings or hash ``config.json`` keeps under ``key``."""
    for c in _FAMILIES.values():
        if key in (c.settings_key, c.hash_key):
            return c
    raise KeyError(key)


def parse_signatures(value: str | None) -> tuple[Family, ...] | None:
    """``--signatures embedding,weights`` -> the families in the order given; ``None``
    (per checkpoint kind) if unset.

    Raises:
        SettingsError: an unknown or empty family.
    """
    if value is None:
        return None
    given = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    bad = [n for n in given if n not in _FAMILIES]
    if not given or bad:
        raise SettingsError(f"--signatures takes a comma-separated list of "
                            f"{', '.join(_FAMILIES)}, got {value!r}")
    return tuple(Family(n) for n in given)


def check_names(wanted: Iterable[str], what: str = "families") -> tuple[Family, ...]:
    """``wanted`` as family names, each registered.

    Raises:
        ValueError: none, or one that is not registered (naming those there are).
    """
    wanted = list(wanted)
    unknown = [f for f in wanted if f not in _FAMILIES]
    if unknown or not wanted:
        raise ValueError(f"{what} are {', '.join(_FAMILIES)}; got {', '.join(map(str, wanted))}")
    return tuple(Family(f) for f in wanted)


def checked_settings(name: str, settings: object) -> SignatureFamily:
    """``settings`` if they are the family ``name``'s (an instance of its class).

    Raises:
        KeyError: no family of that name.
        TypeError: settings of another class.
    """
    cls = get(name)
    if not isinstance(settings, cls):
        raise TypeError(f"the {name} settings must be a {cls.__name__}, got "
                        f"{type(settings).__name__}")
    return settings


def settings_for(run: RunSettings, wanted: Iterable[str],
                 given: Mapping[str, SignatureFamily | None] | None = None
                 ) -> dict[str, SignatureFamily]:
    """Each family of ``wanted`` (registered names, in registration order) with its
    settings: ``given``'s where given, else its defaults seeded as ``run`` says
    (:meth:`~toposig.config.Settings.seeded`). Only these families' settings are built.

    Raises:
        TypeError: settings of another family's class.
    """
    given = given or {}
    return {f: checked_settings(f, s) if (s := given.get(f)) is not None
            else get(f).seeded(run) for f in in_order(wanted)}


# ------------------------------------------------------------------------------ features

def groups() -> tuple[FeatureGroup, ...]:
    """Every family's feature groups in table order: family by family, each family's in
    its order, the groups listed last (the embedding's ``other``) at the end."""
    every = [g for c in _FAMILIES.values() for g in c.groups]
    return (*(g for g in every if not g.last), *(g for g in every if g.last))


def owner(group: FeatureGroup | str) -> FamilyType:
    """The family that declares ``group``."""
    return _OWNER[group if isinstance(group, str) else group.name]


def family_of_group(group: FeatureGroup) -> str:
    """The name of the family whose records carry ``group``'s features (the top level's
    for a group no family declares)."""
    found = _OWNER.get(group.name)
    return found.name if found is not None else TOP_FAMILY


def other_group() -> FeatureGroup:
    """The group of names no family declares and no prefix claims (``other``)."""
    return next((g for g in groups() if g.name == "other"),
                FeatureGroup("other", "other", ()))


def feature(name: str) -> Feature | None:
    """The declared checkpoint feature ``name`` (a pattern's, as declared), or ``None``."""
    found = _EXACT.get(name)
    if found is not None:
        return found[1]
    for group in groups():
        for f in group.features:
            if f.pattern is not None and f.matches(name):
                return f
    return None


def declared_group(name: str) -> FeatureGroup | None:
    """The group that declares the checkpoint feature ``name``, or ``None``."""
    found = _EXACT.get(name)
    if found is not None:
        return found[0]
    return next((g for g in groups() for f in g.features
                 if f.pattern is not None and f.matches(name)), None)


def group_of(name: str) -> FeatureGroup:
    """What a checkpoint feature measures: the group that declares it, else the first
    group (in table order) whose prefix the name starts with (an imported table's names,
    by the convention the package's own names follow), else :func:`other_group`."""
    found = declared_group(name)
    if found is not None:
        return found
    for group in groups():
        if group.prefixes and name.startswith(group.prefixes):
            return group
    return other_group()


def family_of(name: str) -> FamilyType:
    """The family whose records carry the checkpoint feature ``name`` (that of
    :func:`group_of`; the top level's for ``other``)."""
    group = group_of(name)
    return _OWNER.get(group.name) or get(TOP_FAMILY)


def kind_of(name: str, *, matrix: bool = False) -> Kind | None:
    """How the values of the declared checkpoint feature ``name`` behave (a pattern's
    names too), or with ``matrix`` those of a weight matrix's value ``name``; ``None`` for
    a name no family declares."""
    if matrix:
        return _MATRIX_KINDS.get(name)
    if name in _KINDS:
        return _KINDS[name]
    found = feature(name)
    return found.kind if found is not None else None


def matrix_feature(name: str) -> Feature | None:
    """The declared per-matrix feature ``name``, or ``None``."""
    return next((f for c in _FAMILIES.values() for f in c.matrix_features if f.matches(name)),
                None)


def scopes_of(name: str) -> tuple[Scope, ...]:
    """Where records hold the checkpoint feature ``name`` (``()``: not declared)."""
    found = feature(name)
    return found.scopes if found is not None else ()


# ----------------------------------------------------------------- records of a checkpoint

def missing_features(record: Mapping) -> list[str]:
    """What a finished record lacks that every current record of its family holds
    (:meth:`~toposig.families.base.SignatureFamily.missing_features`; ``[]``: current, or
    a family no longer registered)."""
    try:
        cls = get(record_family(record))
    except (KeyError, ValueError):
        return []
    return cls.missing_features(record)


def relate_checkpoints(entries: list[dict], arrays: Callable[[str], Mapping[str, Any]]
                       ) -> None:
    """Add to ``entries`` (aggregate entries, :func:`merge_family_records`) the features of
    every family that :attr:`~toposig.families.base.SignatureFamily.relates_checkpoints`:
    model by model (``model_label``), in step order, from the arrays of each entry's
    record (``arrays(arrays_file)``; :func:`toposig.run.store.load_arrays`). A model
    whose arrays cannot be read gets ``None`` for them, with a warning. Each changed
    entry's ``features`` is a new mapping (the records' are left as they are)."""
    for cls in _FAMILIES.values():
        if not cls.relates_checkpoints:
            continue
        names = [f.name for f in cls.all_features()]
        by_model: dict[str, list[dict]] = {}
        for e in entries:
            part = e.get(cls.name)
            if e.get("status") == "ok" and isinstance(part, dict) and part.get("arrays_file"):
                by_model.setdefault(str(e.get("model_label")), []).append(e)
        for label, series in by_model.items():
            series.sort(key=lambda e: (e.get("step") is None, e.get("step") or 0))
            try:
                related = cls.relate([arrays(e[cls.name]["arrays_file"]) for e in series],
                                     series[-1][cls.name].get("settings") or {})
            except (OSError, KeyError, ValueError) as exc:  # a damaged or missing arrays file
                logger.warning("the %s features of %s are left out: %s: %s", cls.name,
                               label, type(exc).__name__, exc)
                related = [dict.fromkeys(names) for _ in series]
            for e, features in zip(series, related, strict=True):
                e["features"] = {**e.get("features", {}), **features}


def merge_family_records(records: Mapping[str, dict]) -> dict | None:
    """One aggregate entry per checkpoint from its finished family records.

    The top level's record (the embedding's) is the entry, as the seed's files have it;
    every other family, in registration order, adds its features to ``features`` (and its
    per-layer ones to ``layer_features``, layer by layer, and its analysed ``layer`` when the
    entry has none) and keeps
    its :attr:`~toposig.families.base.SignatureFamily.kept` fields under its name; the
    parameter count is the first family's that has one; the stored loss is the
    ``loss_first`` family's (the weights'), else the first that stored one. A family
    without a record (or one no longer registered) is left out. ``None`` when no family
    finished.

    Raises:
        RecordError: a ground-truth signal named like a family part of the entry.
    """
    records = {Family(f): r for f, r in records.items() if is_registered(f)}
    if not records:
        return None
    emb = records.get(TOP_FAMILY)
    first = next(iter(records.values()))
    entry: dict[str, Any] = dict(emb) if emb else {
        "schema_version": SCHEMA_VERSION, "status": "ok", **{k: first.get(k) for k in IDENTITY},
        **{k: first[k] for k in (*SEED_FIELDS, GROUND_TRUTH) if first.get(k) is not None}}
    entry["families"] = in_order(records)
    for cls in _FAMILIES.values():
        if cls.name == TOP_FAMILY or not (rec := records.get(Family(cls.name))):
            continue
        entry["features"] = {**entry.get("features", {}), **rec["features"]}
        if entry.get("layer") is None and rec.get("layer") is not None:
            entry["layer"] = rec["layer"]  # the analysed layer, as the embedding's would be
        for layer, values in (rec.get("layer_features") or {}).items():
            entry["layer_features"] = {**entry.get("layer_features", {}), layer: {
                **entry.get("layer_features", {}).get(layer, {}), **values}}
        if cls.loss_first:
            entry["loss"] = rec.get("checkpoint_loss")
            entry["loss_key"] = rec.get("checkpoint_loss_key")
        if entry.get("num_parameters") is None:
            entry["num_parameters"] = rec.get("num_parameters")
        if not cls.loss_first and entry.get("loss") is None \
                and rec.get("checkpoint_loss") is not None:
            entry["loss"], entry["loss_key"] = rec["checkpoint_loss"], rec.get(
                "checkpoint_loss_key")
        entry[cls.name] = {k: rec.get(k) for k in cls.kept}
    if truth := entry.get(GROUND_TRUTH):  # the positive controls' signal: the quality
        if truth["signal"] in _FAMILIES:
            raise RecordError(f"the ground-truth signal {truth['signal']!r} is named like "
                              "the signature family whose part of the entry it would replace")
        entry[truth["signal"]] = truth["value"]
        entry.setdefault("quality", {"column": truth["signal"],
                                     "higher_is_better": truth["event"] == "rise"})
    return entry
