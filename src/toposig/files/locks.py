"""One writer per folder: an advisory lock on a results folder or a suite folder.

A run holds ``<folder>/.toposig.lock`` (``fcntl.flock``, released by the kernel when the
process ends, however it ends) for as long as it writes there, with its process id in
the file. The file is opened without following a symbolic link and never truncated: a
link, a non-regular file, a hard-linked file or one larger than a process id planted
there is refused (:class:`UnsafeLockFileError`), so the lock cannot write outside the
folder. A second run on the same folder is refused at once, naming the holder, rather
than interleaving its writes with the first's. Within one thread the lock is re-entrant,
so a script and the library function it calls can both hold it; another thread of the
same process (a measurement made while training goes on) waits for it, or is refused,
as another process is.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toposig.files.atomic import open_folder, parts_below

logger = logging.getLogger(__name__)

LOCK_NAME = ".toposig.lock"
_held: dict[Path, int] = {}  # folders this process holds, and how many times (re-entrant)
_holders: dict[Path, int] = {}  # the thread (ident) that holds each of them
_owners: dict[Path, threading.RLock] = {}  # which thread of this process holds a folder
_owners_lock = threading.Lock()


def _forget_owners() -> None:
    """In a forked child: only the forking thread lives on, and it keeps what it held;
    what another thread held (its lock, and its count in ``_held``) does not follow, so
    that it neither blocks the child nor lets it in without the file lock."""
    global _owners_lock
    me = threading.get_ident()
    for key in [k for k, ident in _holders.items() if ident != me]:
        _held.pop(key, None)
        _holders.pop(key, None)
    _owners.clear()
    _owners_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_owners)


class FolderLockedError(RuntimeError):
    """Another process holds the folder's lock; the message names it."""


class UnusableFolderError(ValueError):
    """The folder cannot be created or written: a file is in its place (or in a parent's),
    or permissions forbid it. The message names it."""


class UnsafeLockFileError(ValueError):
    """The lock file is not one toposig can use without touching something else: a
    symbolic link, not a regular file, a file with other names (hard links) or one that
    holds more than a process id. Nothing is opened through it or written to it."""


_PID_WIDTH = 24  # the lock file holds the holder's process id, padded to this many bytes


def open_lock_file(path: Path, root: Path | None = None) -> int:
    """The lock file's descriptor, opened without following a link or truncating. Given
    ``root`` (a folder above ``path``), the folders between them are made as needed and
    never followed through a link (:func:`toposig.files.atomic.open_folder`).

    Raises:
        LinkedFolderError: a folder between ``root`` and ``path`` is a link or a file.
    """
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NONBLOCK", 0)  # a FIFO planted there must not block the open
    try:
        if root is None:
            fd = os.open(path, flags, 0o666)
        else:
            parts = parts_below(root, path)
            with open_folder(root, parts[:-1]) as folder:
                fd = os.open(parts[-1], flags, 0o666, dir_fd=folder)
    except PermissionError as exc:
        raise UnusableFolderError(
            f"cannot write in {path.parent} ({exc.strerror}): toposig needs a folder it can "
            "write to; choose another (--out)") from None
    except OSError as exc:
        if path.is_symlink():
            raise UnsafeLockFileError(
                f"{path} is a symbolic link; toposig does not follow it (it would write "
                "where it points). Remove it and run again") from None
        raise UnsafeLockFileError(f"cannot open the lock file {path}: {exc}") from None
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"has {st.st_nlink} names (hard links)" if st.st_nlink != 1 else
               f"holds {st.st_size} bytes, not a process id" if st.st_size > _PID_WIDTH
               else None)
    if problem:
        os.close(fd)
        raise UnsafeLockFileError(
            f"{path} {problem}: it is not a toposig lock file, and toposig does not write "
            "to it. Remove it and run again")
    return fd


def write_holder(fd: int, pid: int | None = -1) -> None:
    """Write the holder's process id (default: this process; ``None``: none) into an open
    lock file, in place, padded to a fixed width (never truncating)."""
    text = "" if pid is None else str(os.getpid() if pid == -1 else pid)
    os.pwrite(fd, text.ljust(_PID_WIDTH - 1).encode("ascii") + b"\n", 0)


def read_holder(fd: int) -> str:
    """The process id an open lock file names, or ``"unknown"``."""
    return os.pread(fd, _PID_WIDTH, 0).decode("ascii", "replace").strip() or "unknown"


@contextmanager
def exclusive(folder: str | Path, what: str = "folder", *, create: bool = True,
              wait_s: float = 0.0) -> Iterator[Path]:
    """Hold ``folder``'s lock for the duration of the ``with`` block.

    Args:
        folder: created if missing, unless ``create`` is false: then a missing folder
            is not locked (there is nothing in it to protect).
        what: how messages name the folder (``"results folder"``, ``"suite folder"``).
        wait_s: how long to wait for another process to release it (default: not at
            all), trying every 0.2 s.

    Raises:
        FolderLockedError: another process holds it (still, after ``wait_s``).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: no advisory locks
        logger.warning("no advisory file locks on this platform: %s is not protected "
                       "against a second run", folder)
        yield Path(folder)
        return
    folder = Path(folder)
    if not create and not folder.is_dir():
        yield folder
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UnusableFolderError(
            f"the {what} {str(folder)!r} cannot be a folder: a file is in its place (or in "
            "a parent folder's place); choose another path") from None
    except PermissionError as exc:
        raise UnusableFolderError(
            f"cannot create the {what} {str(folder)!r} ({exc.strerror}); choose a folder "
            "you can write to") from None
    key = folder.resolve()
    with _owners_lock:
        owner = _owners.setdefault(key, threading.RLock())
    if not (owner.acquire(timeout=wait_s) if wait_s > 0 else owner.acquire(blocking=False)):
        raise FolderLockedError(
            f"the {what} {str(folder)!r} is in use by another thread of this process (a "
            "measurement made while training goes on, or a second run started from it); "
            "wait for it to finish, or choose another folder")
    try:
        if key in _held:  # this thread holds it already (a script around a library call)
            _held[key] += 1
            try:
                yield folder
            finally:
                _held[key] -= 1
            return
        path = folder / LOCK_NAME
        fd = open_lock_file(path)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        holder = read_holder(fd)
                        raise FolderLockedError(
                            f"the {what} {str(folder)!r} is in use by another toposig run "
                            f"(process {holder}); wait for it to finish, or choose another "
                            "folder") from None
                    time.sleep(0.2)
            write_holder(fd)
            _held[key] = 1
            _holders[key] = threading.get_ident()
            try:
                yield folder
            finally:
                del _held[key]
                _holders.pop(key, None)
                write_holder(fd, None)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        owner.release()
