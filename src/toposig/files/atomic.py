"""Atomic writes and strict JSON: the ground floor every writer of the project uses.

A file is written to a temporary file in the same folder (``.<name>.<random>.tmp``),
flushed to disk and renamed into place, so a reader sees the old file or the new one,
never half of one; :func:`toposig.run.store.remove_stale_temporaries` removes what a killed
writer left.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from toposig.records.vocabulary import JsonView, json_tree

_UMASK = os.umask(0)
os.umask(_UMASK)


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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj) -> None:
    text = json.dumps(clean_floats(obj), indent=2, default=_json_default, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))
