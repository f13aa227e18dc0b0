"""The one writer of the project: every file goes through here, atomically and never
through a link below the folder it belongs to.

A file is written to a temporary file in the same folder (``.<name>.<random>.tmp``),
flushed to disk and renamed into place, so a reader sees the old file or the new one,
never half of one; :func:`toposig.run.store.remove_stale_temporaries` removes what a killed
writer left.

Every write names its ``root``: the folder the caller was given (a results folder, a
suite folder, the folder of an output file). The root itself is the user's choice and may
be reached through links; below it, each folder is opened component by component relative
to the one above (``openat`` with ``O_NOFOLLOW | O_DIRECTORY``), so a folder that is a
symbolic link, or is swapped for one while the write is under way, is refused rather than
followed: nothing is ever written outside the root. The final name is replaced by a
rename, which replaces a link there rather than writing where it points. (This needs
the ``*at`` system calls, ``dir_fd`` in Python: every POSIX system has them.)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from toposig.records.vocabulary import JsonView, json_tree

_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))
_FILE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0))


class LinkedFolderError(ValueError):
    """A folder below a writer's root is a symbolic link, or something other than a
    folder: writing through it would land outside the root. The message names it."""


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, JsonView):  # a typed record or statistics
        return obj.to_json()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def clean_floats(obj):
    """NaN and inf become null: strict JSON that any reader accepts (NumPy values become
    Python ones, tuples lists: :func:`toposig.records.json_tree`)."""
    return json_tree(obj)


def parts_below(root: str | Path, path: str | Path) -> tuple[str, ...]:
    """The names leading from ``root`` to ``path`` (both taken as written, made absolute
    without resolving links).

    Raises:
        LinkedFolderError: ``path`` is not strictly below ``root``, or a name is ``..``.
    """
    root_abs, path_abs = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    try:
        parts = path_abs.relative_to(root_abs).parts
    except ValueError:
        raise LinkedFolderError(f"{path} is not inside {root}, the folder toposig "
                                "writes to") from None
    if not parts or ".." in parts:
        raise LinkedFolderError(f"{path} is not a name inside {root}")
    return parts


def _refusal(root: Path, where: Path, fd: int, name: str) -> LinkedFolderError:
    """Why ``name`` (inside the folder open as ``fd``) cannot be opened as a folder."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        return LinkedFolderError(
            f"{where} is a symbolic link inside {root}, the folder toposig writes to; it "
            "does not write through it (it would write where it points). Replace the link "
            "with a folder")
    return LinkedFolderError(
        f"{where} is a file where toposig keeps a folder inside {root}; move it away and "
        "run again")


@contextmanager
def open_folder(root: str | Path, parts: tuple[str, ...] = (), *,
                create: bool = True) -> Iterator[int]:
    """A descriptor of the folder ``root/parts...``, each name below ``root`` opened
    relative to the one above without following a link (made when missing, if
    ``create``). ``root`` itself is created if missing and may be reached through links.

    Raises:
        LinkedFolderError: a name below ``root`` is a link or not a folder.
        FileNotFoundError: a folder is missing and ``create`` is false.
    """
    root = Path(root)
    if create:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise LinkedFolderError(f"{root} is a file, or under one, where toposig "
                                    "needs a folder") from None
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        where = root
        for name in parts:
            where = where / name
            inner = _open_below(root, where, fd, name, create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _open_below(root: Path, where: Path, fd: int, name: str, create: bool) -> int:
    """The folder ``name`` inside the one open as ``fd``, opened without following a link
    (made first when missing and ``create``)."""
    try:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile, or planted:
                os.mkdir(name, 0o777, dir_fd=fd)          # the open below decides
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refusal(root, where, fd, name) from None
        raise


def make_folder(root: str | Path, folder: str | Path) -> Path:
    """Create ``folder`` (below ``root``, or ``root`` itself) without following a link
    below ``root``. Returns ``folder``.

    Raises:
        LinkedFolderError: a folder on the way is a link or a file.
    """
    folder = Path(folder)
    parts = () if os.path.abspath(folder) == os.path.abspath(root) else \
        parts_below(root, folder)
    with open_folder(root, parts):
        pass
    return folder


def atomic_write_with(path: str | Path, write: Callable[[BinaryIO], None], *,
                      root: str | Path) -> None:
    """Write ``path`` (inside ``root``) with ``write(file)``: into a temporary file in the
    same folder, flushed to disk, then renamed into place; the folders on the way are
    made as needed and never followed through a link (:func:`open_folder`).

    Raises:
        LinkedFolderError: a folder between ``root`` and ``path`` is a link or a file.
        OSError: the system refused the write (a full disk, no permission, ``path`` a
            folder); its ``filename`` is ``path``, never the temporary file or none.
    """
    parts = parts_below(root, path)
    with open_folder(root, parts[:-1]) as folder:
        _replace_via_temporary(folder, parts[-1], lambda fd: _write_file(fd, write), path,
                               durable=True)


def _write_file(fd: int, write: Callable[[BinaryIO], None]) -> None:
    with os.fdopen(fd, "wb", closefd=False) as f:  # flushed when the block ends
        write(f)


def _replace_via_temporary(folder: int, name: str, write: Callable[[int], None],
                           shown: str | Path, *, durable: bool) -> None:
    """Write ``name`` in the open ``folder`` with ``write(fd)``: into a temporary file
    beside it (flushed to disk first when ``durable``), then renamed into place. The
    temporary is removed if anything fails, and a refused write names ``shown``
    (:func:`_naming`)."""
    tmp = f".{name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, _FILE_FLAGS, 0o666, dir_fd=folder)
        try:
            try:
                write(fd)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
    except OSError as exc:
        raise _naming(exc, shown) from exc


def _naming(exc: OSError, path: str | Path) -> OSError:
    """``exc`` as the system's refusal to write ``path``: the same error, naming ``path``
    (not a temporary file, not nothing); an error without an errno stays as it is."""
    if exc.errno is None or exc.filename == str(path):
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


@contextmanager
def many_files(root: str | Path, folder: str | Path) -> Iterator[Callable[[str, bytes], bool]]:
    """A writer of many small files into one ``folder`` below ``root`` (made as needed,
    held open: :func:`open_folder`), each written atomically (a temporary file, then a
    rename) but not flushed to disk one by one: call :func:`sync_all` before writing the
    file that vouches for them (an import's ``config.json``). The writer takes a plain
    file name and the bytes, keeps a file that already holds exactly these bytes, and
    returns whether it wrote.

    Raises:
        LinkedFolderError: a folder between ``root`` and ``folder`` is a link or a file.
        ValueError: a name that is not a plain file name.
    """
    same = os.path.abspath(folder) == os.path.abspath(root)
    with open_folder(root, () if same else parts_below(root, folder)) as fd:
        present = set(os.listdir(fd))  # only these may hold the bytes already

        def write(name: str, data: bytes) -> bool:
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"{name!r} is not a plain file name")
            old = None
            if name in present:  # never blocks on a FIFO planted there, never follows
                with contextlib.suppress(OSError):
                    old = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                                  | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0),
                                  dir_fd=fd)
            if old is not None:
                try:
                    st = os.fstat(old)
                    if (stat.S_ISREG(st.st_mode) and st.st_size == len(data)
                            and _read_all(old) == data):
                        return False
                finally:
                    os.close(old)
            _replace_via_temporary(fd, name, lambda out: _write_all(out, data),
                                   Path(folder, name), durable=False)
            return True

        yield write


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def sync_all() -> None:
    """Flush every written file to disk (``sync``): once, after :func:`many_files`, where
    one ``fsync`` per file would cost milliseconds each."""
    os.sync()


def atomic_write_bytes(path: str | Path, data: bytes, *, root: str | Path) -> None:
    """Write ``data`` to ``path`` (inside ``root``) atomically (:func:`atomic_write_with`)."""
    atomic_write_with(path, lambda f: f.write(data), root=root)


def atomic_write_json(path: str | Path, obj, *, root: str | Path, compact: bool = False) -> None:
    """``obj`` as strict JSON (NaN and inf as null) at ``path`` inside ``root``: indented
    for a reader, or ``compact`` (no spaces, one line) where a program is the reader.

    Compact JSON is also made by the standard library's C encoder, where an indented one
    goes through its Python encoder: the weight stage's records and aggregates over the
    seed paper's 255 checkpoints (7 MB) took 2.4 s to encode indented, under a profiler.
    """
    text = (json.dumps(clean_floats(obj), separators=(",", ":"), default=_json_default,
                       allow_nan=False) if compact else
            json.dumps(clean_floats(obj), indent=2, default=_json_default, allow_nan=False))
    atomic_write_bytes(path, (text + "\n").encode("utf-8"), root=root)


def _remove_below(path: str | Path, root: str | Path, remove: Callable[..., None],
                  left: tuple[int, ...]) -> bool:
    """``remove(name, dir_fd=...)`` of ``path`` inside the folder above it, opened below
    ``root`` without following a link; ``False`` when the system answers one of the
    ``left`` errors (nothing there, or nothing to remove)."""
    parts = parts_below(root, path)
    try:
        with open_folder(root, parts[:-1], create=False) as folder:
            remove(parts[-1], dir_fd=folder)
    except OSError as exc:
        if exc.errno in left:
            return False
        raise
    return True


def remove_file(path: str | Path, *, root: str | Path) -> bool:
    """Delete the file ``path`` (inside ``root``) if it is there, never through a link
    below ``root`` (a link at ``path`` itself is removed, not what it points to).
    Returns whether a file was removed.

    Raises:
        LinkedFolderError: a folder on the way is a link or a file.
    """
    return _remove_below(path, root, os.unlink, (errno.ENOENT,))


def remove_empty_folder(folder: str | Path, *, root: str | Path) -> bool:
    """Delete ``folder`` (below ``root``) if it is there and empty, never through a link
    below ``root``. Returns whether it was removed (``False`` when missing, not empty, or
    not a folder: a link there is left as it is).

    Raises:
        LinkedFolderError: a folder on the way is a link or a file.
    """
    return _remove_below(folder, root, os.rmdir,
                         (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR))


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))
