"""One study per results folder: what a folder holds, and whether a run belongs to it.

A results folder (``--out``) holds one study, described by its ``data/config.json``: the
models (label -> the model as the user named it) and, per signature family, the settings
hash its records are keyed by. A run belongs to the study when every model it brings is
one of the study's and every family it computes has the study's settings (or is new to
the study). It may cover part of the study (fewer models, steps or families), more steps
of the study's models, or families the study lacks; ``extend=True`` also lets it add
models, and hidden-state layers (``--layers``) to the embedding: :meth:`Study.widen`.
Anything else is refused before any work, naming the difference and the way out
(another ``--out``), so a reference folder is never silently rewritten or mixed.

A run reads the folder's study once (:meth:`Study.load`) and asks it whether the plan may
join (:meth:`toposig.run.plan.RunPlan.join`, which the pipeline, the command line before
it trains a suite, and the live monitor's guard call alike).

The aggregates and figures always describe the whole study: :meth:`Study.other_entries`
reads the finished records of the study's checkpoints that a run does not cover.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toposig.config import RunSettings, SettingsError
from toposig.families import registry
from toposig.families.base import FamilyInputs, SignatureFamily
from toposig.files.atomic import read_json
from toposig.files.names import UnsafeNameError, check_label, check_name
from toposig.records import Family, entry_problem
from toposig.run.store import arrays_damage

logger = logging.getLogger(__name__)


class StudyMismatchError(ValueError):
    """A run that does not belong to the study its results folder holds."""


RUN_ELSEWHERE = "restore the file, or write the run to another folder (--out)"


@dataclass(frozen=True)
class Study:
    """The study a results folder holds: its ``data/config.json``, read and validated
    once (:meth:`load`), or none (``held`` false: an empty study, which any run may
    start).

    Attributes:
        folder: the results folder.
        config: the validated JSON object (a ``models`` mapping at least; see
            :func:`study_problem`), as written.
        held: whether the folder has a study (a ``config.json``).
    """

    folder: Path
    config: Mapping[str, Any]
    held: bool = True

    @classmethod
    def load(cls, folder: str | Path, way_out: str = RUN_ELSEWHERE) -> Study:
        """The study of ``folder`` (its ``data/config.json``), or an empty one.

        Args:
            folder: the results folder.
            way_out: what the error message tells the user to do (a run: restore the
                file or write elsewhere; the analysis says its own).

        Raises:
            StudyMismatchError: the file exists but is a link, a folder, not JSON, not a
                JSON object with a ``models`` mapping, or fails :func:`study_problem`
                (damaged or not written by toposig): the folder's study is unknown. The
                message starts with the file's path.
        """
        folder = Path(folder)
        path = folder / "data" / "config.json"
        if not (path.exists() or path.is_symlink()):
            return cls(folder, {"models": {}}, held=False)
        if path.is_symlink() or not path.is_file():
            raise StudyMismatchError(
                f"{path} is not a regular file (a "
                f"{'link' if path.is_symlink() else 'folder'}): the study this folder "
                f"holds is unknown; {way_out}")
        try:
            config = read_json(path)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise StudyMismatchError(
                f"{path} cannot be read ({exc}): the study this folder holds is unknown; "
                f"{way_out}") from exc
        if not isinstance(config, dict) or not isinstance(config.get("models"), dict):
            raise StudyMismatchError(
                f"{path} is not a toposig run configuration (no 'models' mapping); "
                f"{way_out}")
        problem = study_problem(config)
        if problem:
            raise StudyMismatchError(
                f"{path} {problem}: it was edited or damaged, and no path is built from "
                f"it; {way_out}")
        return cls(folder, config)

    @property
    def models(self) -> dict[str, str]:
        """Model label -> the model as the user named it, in the study's order."""
        return dict(self.config["models"])

    @property
    def sources(self) -> dict[str, str]:
        """Model label -> ``hub``, ``local``, ``file``, ``memory`` or ``imported``
        (labels of a config.json from before sources were recorded are missing)."""
        return dict(self.config.get("model_sources") or {})

    @property
    def imported(self) -> bool:
        """Whether the folder holds measurements imported with ``toposig import``."""
        return bool(self.config.get("imported"))

    @property
    def import_digest(self) -> str | None:
        """The digest of the import the folder holds (``None``: not an import)."""
        return (self.config.get("imported") or {}).get("digest")

    @property
    def dtype(self) -> str | None:
        """The precision the study's embedding was computed in (``None``: not recorded)."""
        return self.config.get("dtype")

    @property
    def hashes(self) -> dict[Family, str]:
        """Family -> settings hash of the study (its registered families only)."""
        return {Family(c.name): h for c in registry.families()
                if (h := self.config.get(c.hash_key))}

    def settings_view(self, family: Family) -> dict:
        """``family``'s settings in the study, as :meth:`check` compares them
        (:meth:`~toposig.families.base.SignatureFamily.study_view`)."""
        return registry.get(family).study_view(self.config)

    def labels_for(self, models: dict[str, str],
                   sources: dict[str, str] | None = None) -> dict[str, str]:
        """Run label -> the label the study already gives that model, for the run's models
        the study holds under another label (labels depend on which models a run brings:
        ``runs/x/run`` is ``x-run`` beside ``runs/y/run`` and ``run`` alone)."""
        held, held_sources, sources = self.models, self.sources, sources or {}
        out = {}
        for label, model in models.items():
            if label in held and _same_model(held[label], model, held_sources.get(label),
                                             sources.get(label)):
                continue
            match = [h for h, m in held.items()
                     if _same_model(m, model, held_sources.get(h), sources.get(label))]
            if len(match) == 1 and match[0] not in models:
                out[label] = match[0]
        return out

    def widen(self, family: Family, inputs: FamilyInputs, dtype: str, *,
              extend: bool = False) -> tuple[SignatureFamily, str | None]:
        """``family``'s settings that a run computes in this study when they differ from
        the study's in the family's :class:`~toposig.families.base.Widening` field alone (the
        embedding's ``layers``; every other setting gives the study's hash).

        With ``extend`` the run computes the union of the study's value and its own: when
        that adds to the study's, its settings (and so its settings hash, which keys the
        records) are the study's with the union, and every record of the family in the
        study is made anew under the new hash (a checkpoint's record is one file: the
        layers it holds are computed again with the new ones, one forward pass gives them
        all).

        Args:
            inputs: the run's texts and settings.
            dtype: the run's resolved precision.
            extend: the run may widen the study's settings.

        Returns:
            ``(settings to run with, the study's hash they replace or None)``: the run's
            own settings and ``None`` when the family widens nothing, the study has no such
            family, the value is the study's, or other settings differ too (:meth:`check`
            names them).

        Raises:
            StudyMismatchError: the values differ and ``extend`` is off, naming both and
                ``--extend``.
        """
        cls, settings = registry.get(family), inputs.of(family)
        widening, held_hash = cls.widening, self.hashes.get(family)
        if widening is None or not held_hash:
            return settings, None
        ours = getattr(settings, widening.field)
        try:
            held = widening.parse((self.config.get(cls.settings_key) or {}).get(
                widening.field, getattr(cls(), widening.field)))
        except (SettingsError, TypeError, ValueError):
            return settings, None

        def with_value(value: Any) -> SignatureFamily:
            return replace(settings, **{widening.field: value})

        def hash_of(s: SignatureFamily) -> str:
            return s.settings_hash(inputs.with_family(s), dtype)

        if held == ours or hash_of(with_value(held)) != held_hash:
            return settings, None
        union = widening.union(held, ours)
        if not extend:
            option = widening.option
            raise StudyMismatchError(
                f"{self.folder} holds {family} records made with settings hash "
                f"{held_hash}, of {option} {widening.show(held)}; this run asks for "
                f"{option} {widening.show(ours)} (its settings hash {hash_of(settings)}), "
                f"all else the same. Add them to the study with --extend (it computes "
                f"{option} {widening.show(union)} for every checkpoint of the study), "
                f"rerun with {option} {widening.show(held)}, or {elsewhere(self.folder)}")
        if union == held:  # nothing to add: the study's value, as it is
            return with_value(held), None
        return with_value(union), held_hash

    def check(self, models: dict[str, str], hashes: Mapping[Family, str] | None = None,
              settings: Mapping[Family, dict] | None = None, *, extend: bool = False,
              sources: dict[str, str] | None = None,
              replaces: Mapping[Family, str] | None = None) -> None:
        """Refuse a run that does not belong to this study (see the module).

        Args:
            models: the run's model label -> model (Hub id or path as given), labels
                already matched to the study's (:meth:`labels_for`).
            hashes: the run's family -> settings hash (``None``: check the models only).
            settings: the run's family -> settings as config.json records them (the
                embedding's with its resolved ``dtype`` and ``texts_sha256``), to name
                what differs.
            extend: the run may add models the study does not hold yet.
            sources: the run's model label -> ``hub``, ``local`` or ``file``.
            replaces: family -> the study's settings hash that the run's replaces (layers
                added to the embedding with ``--extend``: :meth:`widen`).

        Raises:
            StudyMismatchError: naming what differs and how to write the run elsewhere.
        """
        if not self.held:
            return
        out_dir = self.folder
        if self.imported:
            raise StudyMismatchError(
                f"{out_dir} holds measurements imported with `toposig import` "
                f"({', '.join(self.models)}), not checkpoints a run can add to: "
                f"{elsewhere(out_dir)}")
        held, held_sources, sources = self.models, self.sources, sources or {}
        clash = [(label, held[label], model) for label, model in models.items()
                 if label in held and not _same_model(held[label], model,
                                                      held_sources.get(label),
                                                      sources.get(label))]
        if clash:
            label, there, here = clash[0]
            raise StudyMismatchError(
                f"{out_dir} holds the study of {', '.join(held)}; its {label!r} is "
                f"{there!r}, this run's {label!r} is {here!r}. Records are kept by label, "
                f"so the two would mix: {elsewhere(out_dir)}")
        new = [label for label in models if label not in held]
        if new and not extend:
            text = elsewhere(out_dir)
            raise StudyMismatchError(
                f"{out_dir} holds the study of {', '.join(held)} (its data/config.json); "
                f"this run brings {', '.join(new)}, which it does not hold. "
                f"{text[0].upper()}{text[1:]}, or add them to this study with --extend")
        for family, h in (hashes or {}).items():
            old = self.hashes.get(Family(family))
            if old and old != h and (replaces or {}).get(family) != old:
                diff = _settings_difference(self.settings_view(Family(family)),
                                            (settings or {}).get(family))
                raise StudyMismatchError(
                    f"{out_dir} holds {family} records made with settings hash {old}; this "
                    f"run's settings give {h} ({diff}). Rerun with the study's settings "
                    f"(its data/config.json lists them), or {elsewhere(out_dir)}")

    def record_files(self) -> Iterator[tuple[Family, str, str, Path]]:
        """``(family, settings hash, label, path)`` of every record file of the study:
        ``records/<hash>/<label>/*.json`` of its families' hashes and its models, in name
        order, never through a linked folder (someone else's files), never a link or a
        hidden file."""
        for family, h in self.hashes.items():
            for label in self.config["models"]:
                folder = self.folder / "records" / h / label
                if folder.is_symlink() or folder.parent.is_symlink() or not folder.is_dir():
                    continue
                for path in sorted(folder.glob("*.json")):
                    if not (path.name.startswith(".") or path.is_symlink()):
                        yield family, h, label, path

    def uncovered_records(self, family: Family,
                          covered: set[tuple[str, str]]) -> list[tuple[str, str]]:
        """``(label, record stem)`` of the study's records of ``family`` (finished or
        failed) whose checkpoint is not in ``covered``."""
        return sorted({(label, path.stem) for fam, _, label, path in self.record_files()
                       if fam == family and (label, path.stem) not in covered})

    def other_entries(self, covered: set[tuple[str, str]]
                      ) -> dict[tuple[str, str], dict[Family, dict]]:
        """The study's finished records of checkpoints a run does not cover.

        Args:
            covered: ``(label, record stem)`` of the run's own checkpoints.

        Returns:
            ``(label, stem)`` -> family -> record, for records with status ok and whole
            arrays (their checkpoints are not at hand, so their fingerprints are not
            checked against them). A checkpoint whose families' records come from two
            trainings (different fingerprints: a retrained checkpoint's run killed
            between two families) is left out, with a warning naming it: the next run
            over it recomputes what is stale.
        """
        out: dict[tuple[str, str], dict[Family, dict]] = {}
        for family, h, label, path in self.record_files():
            key = (label, path.stem)
            if key in covered:
                continue
            try:
                rec = read_json(path)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            problem = entry_problem(rec, family=family, label=label, stem=path.stem,
                                    arrays_file=f"records/{h}/{label}/{path.stem}.npz")
            if problem:
                logger.warning("ignoring record %s: it %s", path, problem)
                continue
            if rec.get("status") != "ok":
                continue
            if rec.get("arrays_file") and arrays_damage(self.folder / rec["arrays_file"]):
                continue
            out.setdefault(key, {})[family] = rec
        for key, records in list(out.items()):
            prints = {r.get("checkpoint_fingerprint") for r in records.values()} - {None}
            if len(prints) > 1:
                logger.warning(
                    "%s %s: its records come from %d trainings (fingerprints %s; the "
                    "checkpoint was replaced while a run measured it): it is left out "
                    "until a run over it recomputes what is stale", *key, len(prints),
                    ", ".join(sorted(map(str, prints))))
                del out[key]
        return out

    def entry_order(self) -> Callable[[dict], tuple[int, int]]:
        """Sort key of aggregate entries: the study's model order, then step."""
        order = {label: i for i, label in enumerate(self.config["models"])}

        def key(entry: dict) -> tuple[int, int]:
            return (order.get(entry.get("model_label"), len(order)),
                    _step_key(entry.get("step")))

        return key



def study_problem(config: dict) -> str | None:
    """What makes a study's ``config.json`` (a JSON object with a ``models`` mapping)
    unusable, or ``None``: every label and settings hash must be a plain file name (they
    become folder names) and a label not one the folder reserves; steps, signatures and
    sources must have their types."""
    for label, model in config["models"].items():
        try:
            check_label(label, "model label")
        except UnsafeNameError as exc:
            return f"names a model {exc}"
        if not isinstance(model, str):
            return f"gives model {label!r} as {model!r}, not a name or path"
    for key in (c.hash_key for c in registry.families()):
        h = config.get(key)
        if h is not None:
            try:
                check_name(h, key)
            except UnsafeNameError as exc:
                return f"has {exc}"
    steps = config.get("steps")
    if steps is not None:
        if not isinstance(steps, dict):
            return "has 'steps' that is not a mapping of model label to steps"
        for label, values in steps.items():
            if label not in config["models"] or not isinstance(values, list) or not all(
                    v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
                    for v in values):
                return f"has steps of {label!r} that are not a list of steps of its models"
    signatures = config.get("signatures")
    if signatures is not None and not _family_names(signatures):
        return f"has signatures {signatures!r}, not a list of signature families' names"
    for key in ("model_sources", "run_settings",
                *(c.settings_key for c in registry.families())):
        if config.get(key) is not None and not isinstance(config[key], dict):
            return f"has {key!r} that is not a mapping"
    return None


def _same_model(held: str, new: str, held_source: str | None,
                new_source: str | None) -> bool:
    """Whether ``new`` is the model the study holds as ``held``: the same name; for local
    models the same folder, or a local folder where the held one no longer exists (a
    moved or freshly cloned series, whose records are reused only where the contents
    match). A Hub model, or one measured in memory during training, is only ever itself,
    and a model of unknown source (a config.json from before sources were recorded) only
    itself or the same existing folder."""
    if held == new:
        return True
    if {"hub", "memory"} & {held_source, new_source}:  # named, not a folder
        return False
    a, b = Path(held), Path(new)
    if a.exists() and b.exists():
        return a.resolve() == b.resolve()
    return held_source is not None and b.exists()


def _family_names(names: object) -> bool:
    """Whether ``names`` is a list of names a family could have."""
    if not isinstance(names, list):
        return False
    try:
        [Family(n) for n in names]
    except ValueError:
        return False
    return True


def unhashed() -> frozenset[str]:
    """Settings fields that do not change the numbers (in no settings hash): the run's
    and every registered family's, by name."""
    return frozenset(f.name for cls in (RunSettings, *registry.families())
                     for f, how in cls.statements() if not how.hashed)


def _settings_difference(old: dict | None, new: dict | None) -> str:
    old, new = old or {}, json.loads(json.dumps(new or {}))  # tuples as config.json has them
    diffs = [f"{k}: {old.get(k)!r} there, {new.get(k)!r} here"
             for k in sorted(set(old) | set(new))
             if k not in unhashed() and old.get(k) != new.get(k)]
    return "; ".join(diffs) if diffs else "the texts or the precision differ"


def elsewhere(out_dir: str | Path) -> str:
    """Where to suggest a run that does not belong to ``out_dir``'s study: a folder beside
    it (inside ``results/`` when that is the folder)."""
    out = Path(out_dir)
    parent = out if out.name == "results" else out.parent
    return (f"write this run to a folder of its own (--out {parent / 'NAME'}, any new "
            "folder)")


def merge_study(old: Mapping[str, Any] | None, new: dict) -> dict:
    """``new``'s config.json fields, widened to the whole study ``old`` describes.

    Models keep ``old``'s order with ``new``'s added; steps are the union per model;
    families ``new`` does not compute keep ``old``'s settings, hash and texts; the
    training suite is kept when ``new`` has none.
    """
    if not old:
        return new
    out = dict(new)
    out["models"] = {**old.get("models", {}), **new["models"]}
    steps = {label: list(s) for label, s in (old.get("steps") or {}).items()}
    for label, s in new["steps"].items():
        steps[label] = sorted(set(steps.get(label, [])) | set(s), key=_step_key)
    out["steps"] = {label: steps[label] for label in out["models"] if label in steps}
    have = set(new["signatures"])
    held = [f for f in old.get("signatures", ()) if isinstance(f, str)]
    listed = registry.in_order(have | set(held))
    out["signatures"] = [*listed, *(f for f in held if f not in listed)]  # unregistered: kept
    for cls in registry.families():
        if cls.name not in have and old.get(cls.hash_key):
            for key in (cls.hash_key, cls.settings_key, *cls.study_keys):
                out[key] = old.get(key)
    out["model_sources"] = {**(old.get("model_sources") or {}),
                            **(new.get("model_sources") or {})}
    if not new.get("training_suite") and old.get("training_suite"):
        out["training_suite"] = old["training_suite"]
    return out


def _step_key(step: int | None) -> int:
    return -1 if step is None else step

