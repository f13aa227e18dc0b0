"""Floats rounded for results that regenerate byte for byte on any CPU: pure, no I/O.

:func:`round_floats` rounds a JSON-like tree to :data:`STATISTICS_DIGITS` significant
digits (what ``statistics.json`` keeps); figures round fitted curves the same way.
"""

from __future__ import annotations

import math

import numpy as np

from toposig.records.vocabulary import JsonView

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
