"""One writer per folder: an advisory lock on a results folder or a suite folder.

A run holds ``<folder>/.toposig.lock`` (``fcntl.flock``, released by the kernel when the
process ends, however it ends) for as long as it writes there, with its process id in
the file. A second run on the same folder is refused at once, naming the holder, rather
than interleaving its writes with the first's. Within one process the lock is
re-entrant, so a script and the library function it calls can both hold it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

LOCK_NAME = ".toposig.lock"
_held: dict[Path, int] = {}  # folders this process holds, and how many times (re-entrant)


class FolderLockedError(RuntimeError):
    """Another process holds the folder's lock; the message names it."""


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
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:  # this process holds it already (a script around a library call)
        _held[key] += 1
        try:
            yield folder
        finally:
            _held[key] -= 1
        return
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() \
                        or "unknown"
                    raise FolderLockedError(
                        f"the {what} {str(folder)!r} is in use by another toposig run "
                        f"(process {holder}); wait for it to finish, or choose another "
                        "folder") from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        _held[key] = 1
        try:
            yield folder
        finally:
            del _held[key]
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
