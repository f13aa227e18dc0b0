"""A local checkpoint's identity by content: records travel between machines.

A checkpoint's fingerprint is the SHA-256 of the names and contents of the files that
make it (weights, config, tokenizer, trainer state: everything but optimizer, scheduler
and RNG state, which do not change what is measured). Reading a checkpoint's files
costs about a second per GB, so each file's content hash is kept in a small cache keyed
by its path and its stamp: size, modification time, inode number and status-change time
(``st_ctime_ns``). A file is read again when any of them changes. Writing a file in place
sets its ctime to the current time, and so does ``os.utime`` (which can put back the
modification time but not the ctime); replacing it by a rename gives it a new inode. So a
checkpoint rewritten with other bytes of the same size, even with its old modification
time restored, is hashed again.
A copied or freshly cloned checkpoint with the same bytes has the same fingerprint, so
its records are reused wherever the weights are the same.

What the cache trusts: that the file system updates ctime on every write (local POSIX file
systems do, to their timestamp granularity: a rewrite within the same clock tick as the
previous write, a few milliseconds, is not seen) and that nobody edits the cache file
itself. An entry that is not what this module writes (not an object, no stamp, no
64-digit hex ``sha256``; or the whole file not a JSON object) is ignored and the file
hashed again, never an error.

The cache is ``$TOPOSIG_CACHE_DIR/file_hashes.json`` (default
``~/.cache/toposig/``); losing it costs only the time to hash again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from toposig.files.atomic import LinkedFolderError, atomic_write_bytes

logger = logging.getLogger(__name__)

# Files of a checkpoint folder that do not change what is measured (HF Trainer state).
SKIPPED = re.compile(r"^(optimizer|scheduler|scaler)\.(pt|bin)$|^rng_state.*\.pth$|"
                     r"^training_args\.bin$|^_resume_state\.pt$|^\.")
CHUNK = 1 << 22
_lock = threading.Lock()
_SHA256 = re.compile(r"[0-9a-f]{64}")


def cache_path() -> Path:
    root = os.environ.get("TOPOSIG_CACHE_DIR") or Path.home() / ".cache" / "toposig"
    return Path(root) / "file_hashes.json"


# The cache as last parsed: its path, its file_stamp and its entries. A run fingerprints
# every checkpoint, and a machine's cache of a few thousand files takes about 10 ms to
# parse (2.5 s over the seed paper's 255 checkpoints, by cProfile of the run that
# bench/bench_seed_weights.py times, 2026-11-29); it is parsed again only when the file
# changed (a hash added, another process's write: a new inode, size or time).
_parsed: tuple[Path, list[int], dict] | None = None


def _read_cache_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested too deep
        return {}
    return data if isinstance(data, dict) else {}


def _load_cache() -> dict:
    """The cache's entries (empty where there is no readable cache); the caller holds
    ``_lock``. What is returned may be changed and saved (:func:`_save_cache`)."""
    global _parsed
    path = cache_path()
    try:
        stamp = file_stamp(path.stat())
    except OSError:
        return {}
    if _parsed is not None and _parsed[0] == path and _parsed[1] == stamp:
        return _parsed[2]
    data = _read_cache_file(path)
    _parsed = (path, stamp, data)
    return data


def _save_cache(cache: dict) -> None:
    try:
        atomic_write_bytes(cache_path(), json.dumps(cache, sort_keys=True).encode("utf-8"),
                           root=cache_path().parent)
    except (OSError, LinkedFolderError) as exc:  # a read-only home: hash again next time
        logger.debug("cannot write the file-hash cache %s: %s", cache_path(), exc)


def file_stamp(st: os.stat_result) -> list[int]:
    """What the cache compares to decide that a file is unchanged: size, modification
    time, inode number and status-change time (all in nanoseconds where times)."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def cached_sha256(entry: object, stamp: list[int]) -> str | None:
    """The hash a cache entry holds for a file with ``stamp``, or ``None`` when the entry
    is for another stamp or is not what :func:`content_fingerprint` writes (any type)."""
    if not isinstance(entry, dict) or entry.get("stamp") != stamp:
        return None
    sha = entry.get("sha256")
    return sha if isinstance(sha, str) and _SHA256.fullmatch(sha) else None


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def content_fingerprint(location: str | Path, sidecars: Sequence[Path] = ()) -> str:
    """The fingerprint (16 hex digits) of a checkpoint file or folder, by content.

    Folder files are taken in name order, sub-folders and :data:`SKIPPED` files left out;
    each file's hash comes from the cache while its :func:`file_stamp` (size, modification
    time, inode, ctime) matches; a missing or malformed entry is replaced by a fresh hash.
    ``sidecars``: files beside a checkpoint file that change what is measured (its
    ``config.json``), hashed after it the same way; none leaves the fingerprint as the
    file's alone.
    """
    where = Path(location)
    files = [where, *sidecars] if where.is_file() else sorted(
        p for p in where.iterdir() if p.is_file() and not SKIPPED.search(p.name))
    with _lock:
        cache = _load_cache()
        changed = False
        h = hashlib.sha256()
        for f in files:
            stamp = file_stamp(f.stat())
            key = str(f.resolve())
            sha = cached_sha256(cache.get(key), stamp)
            if sha is None:
                sha = file_sha256(f)
                cache[key] = {"stamp": stamp, "sha256": sha}
                changed = True
            h.update(f"{f.name}\0{sha}\n".encode())
        if changed:
            _save_cache(cache)
    return h.hexdigest()[:16]
