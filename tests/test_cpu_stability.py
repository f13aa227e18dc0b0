"""Issue 24 §4: the statistics regenerate byte for byte on any CPU.

The same records give floats that differ in their last bits from one CPU to another
(summation order in NumPy's and SciPy's SIMD paths). Every statistic must be a stable
function of its input, so that rounding to :data:`~toposig.records.rounding.STATISTICS_DIGITS`
significant digits (:func:`~toposig.records.rounding.round_floats`) makes the differences
vanish. The check here is stronger than a CPU's: every input float of the committed
reference records moves by up to 1e-12 relative (about 10^4 times a CPU's difference),
and the rounded statistics must not change at all.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from toposig.files.atomic import clean_floats
from toposig.records.rounding import STATISTICS_DIGITS, round_floats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PERTURBED_FIELDS = ("features", "perplexity", "loss", "mean_nll")
RELATIVE = 1e-12
N_BOOTSTRAP = 200  # the committed statistics use controls.N_BOOTSTRAP; fewer keep this fast
DESIGN_RUNS = 20  # and controls.DESIGN_RUNS simulated runs per test; fewer run the same code

# ------------------------------------------------------------------- round_floats


def test_round_floats_keeps_significant_digits():
    assert round_floats(1.23456789, 6) == 1.23457
    assert round_floats(-1.23456789, 6) == -1.23457
    assert round_floats(123456.789, 3) == 123000.0
    assert round_floats(9.9999999, 3) == 10.0
    assert round_floats(1.2345e-250, 2) == 1.2e-250
    assert round_floats(0.125, 2) == 0.12  # correctly rounded: half to even of the exact value
    assert round_floats(0.375, 2) == 0.38
    # one significant digit
    assert round_floats(0.25, 1) == 0.2 and round_floats(0.35, 1) == 0.3  # 0.35 is below .35
    with pytest.raises(ValueError, match="digits"):
        round_floats(1.0, 0)


def test_round_floats_special_values_like_clean_floats():
    special = [math.nan, math.inf, -math.inf]
    assert round_floats(special) == clean_floats(special) == [None, None, None]
    assert round_floats(0.0) == 0.0
    neg_zero = round_floats(-0.0)
    assert neg_zero == 0.0 and math.copysign(1, neg_zero) == 1.0  # the sign of 0 is noise
    # subnormals keep their digits where they have them
    tiny = 5e-324
    assert round_floats(tiny, 6) == tiny
    assert round_floats(1.234567e-310, 3) == 1.23e-310
    # rounding up past the largest double keeps the value instead of making it inf
    big = np.finfo(float).max
    assert round_floats(big, 1) == big
    assert round_floats(-big, 6) == -1.79769e308


def test_round_floats_leaves_ints_bools_strings_and_integral_floats():
    tree = {"n": 12345678, "ok": True, "no": False, "name": "x", "none": None,
            "step": 1234567.0, "count": 99.0, "big": 2.0**60 + 2**10}
    out = round_floats(tree, 3)
    assert out["n"] == 12345678 and isinstance(out["n"], int)
    assert out["ok"] is True and out["no"] is False
    assert out["name"] == "x" and out["none"] is None
    assert out["step"] == 1234567.0 and out["count"] == 99.0  # steps and counts stay exact
    assert out["big"] == 1.15e18  # beyond 2^53 every float is integral: rounded


def test_round_floats_walks_nested_containers_and_numpy():
    tree = {"a": [1.0 / 3, {"b": (2.0 / 3, [-1.0 / 7])}], "c": np.float64(np.pi),
            "d": np.float32(0.1), "e": np.array([[1 / 3, 2.0]]), "f": np.int64(7)}
    out = round_floats(tree, 4)
    assert out == {"a": [0.3333, {"b": [0.6667, [-0.1429]]}], "c": 3.142, "d": 0.1,
                   "e": [[0.3333, 2.0]], "f": 7}
    assert type(out["c"]) is float and type(out["f"]) is int
    assert list(out) == list(tree)  # key order kept


def test_rounding_removes_last_bit_differences():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 5, 20000) * rng.choice([-1, 1], 20000)
    y = x * (1 + 4 * np.finfo(float).eps * rng.uniform(-1, 1, x.size))
    flips = sum(a != b for a, b in zip(round_floats(list(x)), round_floats(list(y)),
                                       strict=True))
    assert flips <= 2  # a difference flips a rounded value only beside a rounding boundary


# ------------------------------------------------- the statistics under a perturbation


def _perturb_records(records: list[dict], seed: int) -> tuple[list[dict], int]:
    """A copy of ``records`` with each float of :data:`PERTURBED_FIELDS` multiplied by
    ``1 + RELATIVE·U(−1, 1)``, and how many distinct values were moved.

    Equal values get the same factor, and floats that are exact on any CPU are kept:
    integers (counts stored as floats) and float32 values (measurements made in single
    precision). Another CPU reads the same records, so it keeps their ties, and their
    differences, which IEEE subtraction computes exactly, keep theirs (the first
    differences of float32 values tie); a perturbation that broke those ties would test
    how rank statistics break ties, not how a CPU rounds."""
    rng = np.random.default_rng(seed)
    moved: dict[float, float] = {}

    def perturb(x):
        if isinstance(x, bool) or not isinstance(x, (float, dict, list)):
            return x
        if isinstance(x, dict):
            return {k: perturb(v) for k, v in x.items()}
        if isinstance(x, list):
            return [perturb(v) for v in x]
        if not math.isfinite(x) or x == round(x) or float(np.float32(x)) == x:
            return x
        if x not in moved:
            moved[x] = x * (1 + RELATIVE * rng.uniform(-1, 1))
        return moved[x]

    out = [r.to_json() if hasattr(r, "to_json") else copy.deepcopy(r) for r in records]
    for r in out:
        for key in PERTURBED_FIELDS:
            if key in r:
                r[key] = perturb(r[key])
    return out, sum(v != k for k, v in moved.items())


def _differences(a, b, path: str = "") -> list[str]:
    """The paths where two JSON-like trees differ (``records_sha256``, the digest of the
    input records, is left out)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            if k != "records_sha256":
                out += _differences(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (u, v) in enumerate(zip(a, b, strict=True))
                for p in _differences(u, v, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.fixture(scope="module")
def statistics_pair():
    from toposig.analysis.compute import compute_statistics
    from toposig.run.results_folder import arrays_reader, load_entries

    if not (RESULTS / "data" / "all_results.json").is_file():
        pytest.skip("no committed reference records in results/data")
    records = load_entries(RESULTS)
    perturbed, n_moved = _perturb_records(records, seed=20240)
    original = compute_statistics(records, seed=0, n_bootstrap=N_BOOTSTRAP,
                                  arrays=arrays_reader(RESULTS), design_runs=DESIGN_RUNS)
    moved = compute_statistics(perturbed, seed=0, n_bootstrap=N_BOOTSTRAP,
                               arrays=arrays_reader(RESULTS), design_runs=DESIGN_RUNS)
    return records, n_moved, original, moved


def test_the_perturbation_moves_the_inputs_and_the_raw_statistics(statistics_pair):
    records, n_moved, original, moved = statistics_pair
    assert len(records) == 54
    assert n_moved > 2000
    raw = _differences(clean_floats(original), clean_floats(moved))
    assert len(raw) > 1000  # unrounded, thousands of floats differ in their last digits


def test_the_rounded_statistics_do_not_move(statistics_pair):
    """Every number of statistics.json, rounded to STATISTICS_DIGITS significant digits, is
    unchanged when every input float moves by up to 1e-12 relative."""
    _, _, original, moved = statistics_pair
    diff = _differences(round_floats(original, STATISTICS_DIGITS),
                        round_floats(moved, STATISTICS_DIGITS))
    assert not diff, f"{len(diff)} paths differ:\n" + "\n".join(diff[:50])


def test_no_ridge_prediction_from_three_models(statistics_pair):
    """With the reference's three models (two to train on) the ridge predicts nothing and
    says why, instead of reporting noise."""
    _, _, statistics, _ = statistics_pair
    original = statistics.to_json()
    prediction = original["prediction"]
    assert "found 3" in prediction["ridge_reason"]
    for block in prediction["fractions"].values():
        assert block["mae"]["ridge"] is None and block["n_models"]["ridge"] == 0
    for fractions in original["prediction_by_feature"].values():
        assert all(block["mae"]["ridge"] is None for block in fractions.values())
