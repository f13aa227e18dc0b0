"""Atomic writes and strict JSON: the ground floor every writer of the project uses.

A file is written to a temporary file in the same folder (``.<name>.<random>.tmp``),
flushed to disk and renamed into place, so a reader sees the old file or the new one,
never half of one; :func:`toposig.run.store.remove_stale_temporaries` removes what a killed
writer left.
"""

from __future__ import annotations

import json
import math
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


STATISTICS_DIGITS = 6
"""Significant digits kept by :func:`round_floats` in ``statistics.json`` (issue 24 §4).

Summation order differs between CPU instruction sets, so the same records give floats
that differ in their last one or two bits (about 1e-16 relative; up to about 1e-13 where
a statistic's conditioning amplifies it). A value rounded to d significant digits changes
only when it lies within that difference of a rounding boundary, a chance of about
``relative difference · 10^d``. The digits are set by the stronger check of
tests/test_cpu_stability.py: every input float moved by 1e-12 relative (10^4 times a
CPU's difference) moves the least stable statistics (Pearson r near 0 of a feature whose
spread is small against its mean, the rate-of-change phases, ...) by up to 2e-8
relative. Rounded to 6 digits no value of the reference statistics changed (in 7 seeds
of the perturbation; at 7 digits up to 3 did, at 9 digits 50), and for a CPU's
differences the chance that any of the file's ~10^4 floats flips is about 1e-5. The
report prints 4 significant digits or fewer, so 6 keep two guard digits.
"""


def _round_float(x: float, digits: int) -> float | None:
    if not math.isfinite(x):
        return None
    if x == 0:
        return 0.0                           # -0.0 too: the sign of a zero is a rounding artefact
    if abs(x) < _EXACT_INTEGERS and x == int(x):
        return x                             # a step or a count stored as a float: exact
    r = float(f"{x:.{digits - 1}e}")        # correctly rounded (round half to even), any CPU
    return r if math.isfinite(r) else x


_EXACT_INTEGERS = 2.0**53


def round_floats(obj, digits: int = STATISTICS_DIGITS):
    """``obj`` with every float rounded to ``digits`` significant digits, for writing
    results that regenerate byte for byte on any CPU.

    Python's decimal formatting is correctly rounded, so the rounded value depends only on
    the float, never on the platform. NaN and inf become None (as :func:`clean_floats`);
    ``-0.0`` becomes ``0.0``; floats holding an integer below 2^53 (steps and counts
    stored as floats; exact on any CPU) are kept, so that a step such as 1234567.0 keeps
    its digits; subnormals keep ``digits`` digits where they have them; a value whose
    rounding would overflow (the largest doubles, few digits) is kept. Ints and bools are
    untouched; dicts (keys kept), lists and tuples (as lists) are rounded element by
    element, NumPy scalars and arrays as their Python values, typed records and
    statistics as their JSON.

    Args:
        obj: a JSON-like tree (dict, list, tuple, float, int, str, bool, None, NumPy).
        digits: significant digits, >= 1.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, (float, np.floating)):
        return _round_float(float(obj), digits)
    if isinstance(obj, np.ndarray):
        return round_floats(obj.tolist(), digits)
    if isinstance(obj, np.generic):
        return round_floats(obj.item(), digits)
    if isinstance(obj, JsonView):
        return round_floats(obj.to_json(), digits)
    if isinstance(obj, dict):
        return {k: round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v, digits) for v in obj]
    return obj


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
