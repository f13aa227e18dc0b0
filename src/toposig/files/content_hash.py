"""A local checkpoint's identity by content: records travel between machines.

A checkpoint's fingerprint is the SHA-256 of the names and contents of the files that
make it (weights, config, tokenizer, trainer state: everything but optimizer, scheduler
and RNG state, which do not change what is measured). Reading a checkpoint's files
costs about a second per GB, so each file's content hash is kept in a small cache keyed
by its path, size and modification time: a file is read again only when it changes.
A copied or freshly cloned checkpoint with the same bytes has the same fingerprint, so
its records are reused wherever the weights are the same.

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
from pathlib import Path

from toposig.files.atomic import atomic_write_bytes

logger = logging.getLogger(__name__)

# Files of a checkpoint folder that do not change what is measured (HF Trainer state).
SKIPPED = re.compile(r"^(optimizer|scheduler|scaler)\.(pt|bin)$|^rng_state.*\.pth$|"
                     r"^training_args\.bin$|^_resume_state\.pt$|^\.")
CHUNK = 1 << 22
_lock = threading.Lock()


def cache_path() -> Path:
    root = os.environ.get("TOPOSIG_CACHE_DIR") or Path.home() / ".cache" / "toposig"
    return Path(root) / "file_hashes.json"


def _load_cache() -> dict:
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(cache: dict) -> None:
    try:
        atomic_write_bytes(cache_path(), json.dumps(cache, sort_keys=True).encode("utf-8"))
    except OSError as exc:  # a read-only home: hash again next time
        logger.debug("cannot write the file-hash cache %s: %s", cache_path(), exc)


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def content_fingerprint(location: str | Path) -> str:
    """The fingerprint (16 hex digits) of a checkpoint file or folder, by content.

    Folder files are taken in name order, sub-folders and :data:`SKIPPED` files left out;
    each file's hash comes from the cache while its size and modification time match.
    """
    where = Path(location)
    files = [where] if where.is_file() else sorted(
        p for p in where.iterdir() if p.is_file() and not SKIPPED.search(p.name))
    with _lock:
        cache = _load_cache()
        changed = False
        h = hashlib.sha256()
        for f in files:
            st = f.stat()
            key = str(f.resolve())
            stamp = [st.st_size, st.st_mtime_ns]
            entry = cache.get(key)
            if not (isinstance(entry, dict) and entry.get("stamp") == stamp):
                entry = {"stamp": stamp, "sha256": file_sha256(f)}
                cache[key] = entry
                changed = True
            h.update(f"{f.name}\0{entry['sha256']}\n".encode())
        if changed:
            _save_cache(cache)
    return h.hexdigest()[:16]
