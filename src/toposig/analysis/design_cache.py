"""Design checks remembered by what determines them, so that an analysis run again on the
same records does not simulate the same designs again.

A test's design check (:func:`toposig.analysis.inference.design_check`) is a pure
function of its simulated runs, which are a pure function of the fitted design (the two
trends, the noise's size and autocorrelation, the steps), the seed of its stream, the
numbers of runs, couplings and surrogates, the design rule's verdict and the Holm
family's size, and of the code that simulates and tests them. :func:`design_key` hashes
all of it: the design's arrays byte for byte, the settings, and
:func:`code_fingerprint` (the source of the modules that simulate and test, and the
versions of NumPy and SciPy, whose kernels they call). A key therefore names one result
only; change any input or that code and the key changes, and the check is simulated
again.

:class:`DesignCache` holds the checks an analysis found stored and those it made, and
gives back (:meth:`DesignCache.to_json`) only the ones this analysis used, so a folder's
file (``data/design_checks.json``, read and written by :mod:`toposig.analyze`) never
grows beyond its own tests. A check read from the cache is the JSON a fresh one would
give, so the statistics are the same byte for byte with or without it (a test compares
them). Pure: no file is read or written here.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Mapping, Sequence

import numpy as np
import scipy

from toposig.analysis import inference, simulate, trend_controls
from toposig.records.controlled import DesignCheck

__all__ = ["CACHE_VERSION", "DesignCache", "code_fingerprint", "design_key", "pooled_key"]

CACHE_VERSION = 1
"""The layout of :meth:`DesignCache.to_json`."""


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 (hex, 16 characters) of the source of the modules that fit, simulate and
    test a design, and of the NumPy and SciPy versions."""
    h = hashlib.sha256()
    for module in (inference, simulate, trend_controls):
        h.update(inspect.getsource(module).encode("utf-8"))
    h.update(f"numpy {np.__version__} scipy {scipy.__version__}".encode())
    return h.hexdigest()[:16]


def design_key(design: inference.Design, seed: int, null_runs: int, power_runs: int) -> str:
    """The key of one model's design with the simulations' seed and run counts (hex, 32
    characters): equal keys give equal simulated runs."""
    h = hashlib.sha256(code_fingerprint().encode())
    for values in (design.steps, design.trend_x, design.trend_y):
        h.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        h.update(b"|")
    h.update(repr((float(design.sd_x), float(design.sd_y), float(design.ar_x),
                   float(design.ar_y), int(seed), int(null_runs), int(power_runs),
                   tuple(inference.COUPLINGS), inference.DESIGN_SURROGATES)).encode())
    return h.hexdigest()[:32]


def check_key(design: str, kind: str, holm_tests: int, rule: str | None) -> str:
    """The key of one control's check of a design at a Holm family's size, given the
    design rule's verdict (``None``: not ruled out)."""
    ruled = "-" if rule is None else hashlib.sha256(rule.encode("utf-8")).hexdigest()[:16]
    return f"{design}:{kind}:{int(holm_tests)}:{ruled}"


def pooled_key(designs: Sequence[str], kind: str, holm_tests: int) -> str:
    """The key of a pooled check over the models whose design keys are ``designs``, in
    the order the pool takes them."""
    h = hashlib.sha256("\n".join(designs).encode())
    return f"pooled-{h.hexdigest()[:32]}:{kind}:{int(holm_tests)}"


class DesignCache:
    """Design checks by key (:func:`check_key`, :func:`pooled_key`): those stored before
    and those made now; :meth:`to_json` gives the ones this analysis asked for or made.

    ``hits`` and ``misses`` count the lookups (a progress line says them)."""

    def __init__(self, stored: Mapping[str, dict] | None = None) -> None:
        self._stored = dict(stored or {})
        self._used: dict[str, dict] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> dict | None:
        """The check stored under ``key`` (a copy), or ``None``."""
        found = self._used.get(key, self._stored.get(key))
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._used[key] = found
        return dict(found)

    def put(self, key: str, check: dict) -> None:
        self._used[key] = dict(check)

    def to_json(self) -> dict:
        """``{"version", "code", "checks"}``: the checks this analysis used, keyed."""
        return {"version": CACHE_VERSION, "code": code_fingerprint(),
                "checks": {k: self._used[k] for k in sorted(self._used)}}

    @classmethod
    def from_json(cls, obj: object) -> DesignCache:
        """The cache of a stored file's JSON, empty when it was made by other code (or is
        of another layout).

        Raises:
            ValueError: ``obj`` is not such a file (it names what is wrong).
        """
        if not isinstance(obj, dict) or not isinstance(obj.get("checks"), dict):
            raise ValueError("not a design-check cache (an object with 'checks')")
        if obj.get("version") != CACHE_VERSION or obj.get("code") != code_fingerprint():
            return cls()  # other code made it: nothing in it applies
        checks = obj["checks"]
        for key, check in checks.items():
            if not isinstance(key, str) or not isinstance(check, dict):
                raise ValueError(f"entry {key!r} is not a keyed check")
            DesignCheck.from_json(check, f"design check {key}")  # raises naming it
        return cls(checks)
