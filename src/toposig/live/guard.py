"""The study guard of a live run: it checks that a training starting, resuming or
extending a results folder fits the folder's study before anything is removed or
written, and it owns the label while the training writes it.

The folder's lock (:meth:`StudyGuard.locked`, as a pipeline run holds it) covers each
check and each measurement. Besides, a guard holds ``live/<label>/.writer.lock``
(``fcntl.flock``) from :meth:`StudyGuard.admit` until :meth:`StudyGuard.close` (or the end
of its process, however it ends), so a second training on the same label, in another
process or in this one, is refused (:class:`LabelInUseError`) before it removes or writes
anything, while other labels of the folder are measured alongside.

Everything that could refuse a training (its model under the label, the study's settings
of each of its families, records of the label made by the offline pipeline, a fresh
start over earlier records) is checked before any record is removed, so a refused resume
leaves the folder as it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from toposig.families import registry
from toposig.files.atomic import atomic_write_json, read_json, remove_file
from toposig.files.locks import (
    FolderLockedError,
    exclusive,
    open_lock_file,
    read_holder,
    write_holder,
)
from toposig.live.measurement import LiveMeasurement
from toposig.model.placement import Placement
from toposig.run.plan import reconcile
from toposig.run.study import Study, StudyMismatchError

logger = logging.getLogger(__name__)

WRITER_LOCK = ".writer.lock"  # live/<label>/.writer.lock: held by the monitor writing <label>


class LiveRunExistsError(FileExistsError):
    """A training that starts at step 0 into a results folder that already holds live
    records of the same model: the two trainings would mix."""


class LabelInUseError(FolderLockedError):
    """Another live monitor (another training, in another process or in this one) is
    writing the same label in the same results folder; the message names the folder,
    the label and the holding process."""


@dataclass(frozen=True)
class Admission:
    """What :meth:`StudyGuard.admit` found.

    Attributes:
        complete: every check was made and the stale records removed; ``False`` when the
            model's precision was not known yet (the removals wait for it).
        removed: records after the step (at step 0: every record of the label) were
            removed.
    """

    complete: bool
    removed: bool = False


class StudyGuard:
    """Checks a live run against its results folder's study and holds its label.

    Args:
        measurement: what the run measures (its folder, label, model, families and plan).
        writer_lock: the label's lock file, ``live/<label>/.writer.lock``.
        overwrite: let a training that starts at step 0 remove the label's live records.
        extend: let the label join a folder whose study holds other models.
        lock_wait_s: how long to wait for the folder's lock held by another process.
    """

    def __init__(self, measurement: LiveMeasurement, writer_lock: Path, *, overwrite: bool,
                 extend: bool, lock_wait_s: float):
        self.measurement = measurement
        self.writer_lock = writer_lock
        self.overwrite = overwrite
        self.extend = extend
        self.lock_wait_s = lock_wait_s
        self._writer: tuple[int, int] | None = None  # (fd, pid) of the label's writer lock

    @property
    def out(self) -> Path:
        return self.measurement.out

    @property
    def label(self) -> str:
        return self.measurement.label

    @property
    def held(self) -> bool:
        """Whether this guard holds the label."""
        return self._writer is not None

    def locked(self):
        """The folder's lock, waiting up to ``lock_wait_s`` for another process."""
        return exclusive(self.out, "results folder", wait_s=self.lock_wait_s)

    # -- admitting a run ----------------------------------------------------------------

    def admit(self, step: int, model=None, *, measuring: bool = False) -> Admission | None:
        """Take the label and check the folder, under its lock, for a training that
        starts (resumes) at ``step``; with ``measuring`` (the run measures already, so the
        folder was checked at its start) only take the label again (``None``).

        Every check that could refuse the run comes before anything is removed: the model
        the study holds under the label, the study's settings of each family measured
        (:meth:`toposig.run.study.Study.check`, as the measurement would), records of
        the label the offline pipeline made, and a fresh start over earlier records. A
        run resumed at ``step`` > 0 has its label's records after ``step`` removed (they
        would mix two trainings), and their steps in the study; at step 0 (with
        ``overwrite``) every record of the label. Without ``model`` the embedding's
        settings are checked in the study's precision and nothing is removed yet
        (``complete`` false): call again with the model.

        Raises:
            LabelInUseError: another monitor is writing this label in this folder.
            LiveRunExistsError: ``step`` is 0, the folder holds records of this label,
                and not ``overwrite``.
            StudyMismatchError: the folder's study holds another model under this label,
                records of it that the offline pipeline made, or other settings for one
                of the families.
            ValueError: ``model`` cannot be measured (several devices or precisions).
            FolderLockedError: another toposig process holds the folder.
        """
        with self.locked():
            held_before = self.held
            if not held_before:
                self.claim(create=False)  # refuse at once if another monitor writes
            try:
                if measuring:
                    self.claim()
                    return None
                return self._admit(step, model)
            except BaseException:
                if not held_before:
                    self.close()  # refused: the label is left to whoever may take it
                raise

    def _admit(self, step: int, model) -> Admission:
        """:meth:`admit` with the folder's lock held: every check, then the label taken,
        then the removals (only once the model's precision is known, when it counts)."""
        study = Study.load(self.out)
        held_model = study.models.get(self.label)
        model_name = self.measurement.model_name
        if held_model is not None and held_model != model_name:
            raise StudyMismatchError(
                f"{self.out} holds {held_model!r} under the label {self.label!r}; this "
                f"training is {model_name!r}: give it another label (label=...) "
                "or write to another folder (out=...)")
        exact = self.check_study(study, model)
        records = self.label_records()
        if step == 0 and records and not self.overwrite:
            raise LiveRunExistsError(
                f"{self.out} already holds records of {self.label!r} at "
                f"{len({s for s, _ in records})} step(s) "
                f"({records[0][1].parent}); a training starting at step 0 would mix "
                "with them. Write to another folder (out=...), give this run another "
                "label, or pass overwrite=True to remove them first")
        stale = [(s, p) for s, p in records if s > step or (step == 0 and s == 0)]
        self.check_foreign(stale)
        self.claim()
        if not exact:  # the removals wait for the model's precision (first measurement)
            return Admission(complete=False)
        if stale:
            self.remove(stale, step, study)
        return Admission(complete=True, removed=bool(stale))

    def check_study(self, study: Study, model) -> bool:
        """Refuse (as the measurement's :func:`~toposig.run.pipeline.execute` would) a
        run whose model or settings do not belong to the folder's study; return whether
        the check was complete: without ``model`` the embedding's settings are checked in
        the study's precision, the model's own being unknown yet.

        Raises:
            StudyMismatchError: see :func:`toposig.run.plan.reconcile`.
            ValueError: ``model`` cannot be measured (several devices or precisions).
        """
        m = self.measurement
        keyed = [f for f in m.families if registry.get(f).precision_keyed]
        if model is not None:
            placement = m.placement(model)
        else:
            placement = Placement("cpu", study.dtype or "float32")
        plan = m.plan(m.checkpoint(0), placement)
        unchecked = keyed if model is None and not study.dtype else ()  # no precision kept
        reconcile(study, plan.models, plan.sources, plan.inputs, plan.dtype,
                  extend=self.extend, unchecked=unchecked)
        return model is not None or not keyed

    def check_foreign(self, stale: list[tuple[int, Path]]) -> None:
        """Refuse to remove records of this label that the offline pipeline made (only
        records a live run made, ``source: "memory"``, are ever removed).

        Raises:
            StudyMismatchError: naming the first such record.
        """
        foreign = []
        for _, path in stale:
            try:
                rec = read_json(path)
            except (OSError, ValueError):
                continue  # unreadable: the pipeline recomputes such a record anyway
            if isinstance(rec, dict) and rec.get("source") not in ("memory", None):
                foreign.append(path)
        if foreign:
            raise StudyMismatchError(
                f"{foreign[0]} (and {len(foreign) - 1} more) of {self.label!r} were made by "
                "the offline pipeline, not during training; they are not removed. Give this "
                "training another label (label=...) or write to another folder (out=...)")

    def label_records(self) -> list[tuple[int, Path]]:
        """(step, path) of this label's record files in the folder, every family."""
        out = []
        for path in sorted((self.out / "records").glob(f"*/{self.label}/step*.json")):
            digits = path.stem.removeprefix("step")
            if digits.isdigit():
                out.append((int(digits), path))
        return out

    def remove(self, stale: list[tuple[int, Path]], step: int, study: Study) -> None:
        """Delete ``stale`` records (with their arrays) and their steps in the study;
        :meth:`admit` has checked them (:meth:`check_foreign`) and taken the label."""
        for _, path in stale:
            remove_file(path, root=self.out)
            remove_file(path.with_suffix(".npz"), root=self.out)
        gone = {s for s, _ in stale}
        steps = dict(study.config.get("steps") or {})
        if study.held and self.label in steps:
            steps[self.label] = [s for s in steps[self.label] if s not in gone]
            atomic_write_json(self.out / "data" / "config.json",
                              {**study.config, "steps": steps}, root=self.out)
        logger.warning("toposig: removed the records of %r at %d step(s) in %s (%s)",
                       self.label, len(gone), self.out,
                       "overwrite=True" if step == 0 else
                       f"left by a training that went past step {step}, now resumed there")

    # -- the label's writer lock ----------------------------------------------------------

    def claim(self, create: bool = True) -> None:
        """Hold the label's writer lock (an advisory ``fcntl.flock``, kept open until
        :meth:`close`; the kernel releases it when the process ends, however it ends, so
        a killed training's label is taken over). A no-op while held; with ``create``
        false, a missing lock file is not created (nobody holds it). Called with the
        folder's lock held, so checking and taking the label cannot interleave with
        another monitor's.

        Raises:
            LabelInUseError: another monitor, in this process or another, holds it.
            UnsafeLockFileError: the lock file is a link, not a plain file, or not ours.
        """
        if self._writer is not None:
            return
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX: no advisory locks
            return
        path = self.writer_lock
        if not create and not path.exists():
            return
        fd = open_lock_file(path, root=self.out)  # no link followed, nothing truncated
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = read_holder(fd)
            os.close(fd)
            who = ("another monitor in this process, not finished (call its finish())"
                   if holder == str(os.getpid()) else f"process {holder}")
            raise LabelInUseError(
                f"the label {self.label!r} in the results folder {str(self.out)!r} is "
                f"being written by {who}: another training is writing it, and two "
                "trainings under one label would remove or mix each other's records. "
                "Give this training another label (label=...), write to another folder "
                "(out=...), or wait for that training to finish") from None
        write_holder(fd)
        self._writer = (fd, os.getpid())

    def close(self) -> None:
        """Release the label (a later :meth:`claim` takes it again, if no other monitor
        has taken it meanwhile)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        fd, pid = writer
        try:
            if pid == os.getpid():  # a forked child shares the lock: only the owner unlocks
                import fcntl

                write_holder(fd, None)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the kernel releases it
            self.close()
