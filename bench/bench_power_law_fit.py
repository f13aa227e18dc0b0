#!/usr/bin/env python
"""The loss power-law fit (:func:`toposig.analysis.prediction.fit_loss_power_law`): its
time per fit and how far its parameters move when the losses move by 1e-12 relative.

Problems: the committed loss curves (results/, results/seeds/seed-a and seed-b), each cut
at 10, 20, 30, 50, 70 and 100 % of its last step and, where the forecast finds an initial
plateau, fitted after it, as ``toposig.analysis.forecast`` does. For each problem the
losses are moved by ``U(−1, 1)·1e-12`` relative (five draws) and the largest relative
change of a, b, c and of the extrapolation to the last step is reported, with the
response of b per unit of relative input change at 1e-12 and at 1e-8: where the two
agree the change is the problem's own derivative (its conditioning), not the method's
stopping point.

``--against FILE`` also runs another version of ``prediction.py`` (for example the one
before issue 24 §4: ``git show 124b4de:src/toposig/analysis/prediction.py > old.py``) on
the same problems and reports its times, changes and sums of squared errors.

    PYTHONPATH=src python bench/bench_power_law_fit.py [--against old.py] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from pathlib import Path

import numpy as np

from toposig.analysis import forecast, prediction

ROOT = Path(__file__).resolve().parents[1]
CURVES = ("results/data/all_results.json", "results/seeds/seed-a/data/all_results.json",
          "results/seeds/seed-b/data/all_results.json")
FRACTIONS = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def curves() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for rel in CURVES:
        path = ROOT / rel
        if not path.is_file():
            continue
        by: dict[str, list] = {}
        for r in json.loads(path.read_text()):
            if r.get("status", "ok") != "ok":
                continue
            loss = r.get("loss", r.get("mean_nll"))
            if loss is None and r.get("perplexity"):
                loss = math.log(r["perplexity"])
            by.setdefault(r["model_label"], []).append((r["step"], loss))
        for label, rows in by.items():
            rows.sort()
            out[label] = (np.array([s for s, _ in rows], float),
                          np.array([v for _, v in rows], float))
    return out


def problems() -> list[tuple[str, np.ndarray, np.ndarray, float]]:
    out = []
    for label, (t, y) in curves().items():
        for fr in FRACTIONS:
            early = t <= fr * t[-1]
            if (t[early] > 0).sum() < 3:
                continue
            out.append((f"{label}@{fr}", t[early], y[early], float(t[-1])))
            start = forecast.plateau_end(t[early], y[early])
            if start:
                out.append((f"{label}@{fr}+plateau", t[early][start:], y[early][start:],
                            float(t[-1])))
    return out


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def measure(fit, probs, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    worst = np.zeros(4)
    response = []
    sse = []
    for name, t, y, at in probs:
        f0 = fit(t, y)
        p0 = f0["a"] * at ** -f0["b"] + f0["c"]
        pos = t > 0
        sse.append(float(np.sum((f0["a"] * t[pos] ** -f0["b"] + f0["c"] - y[pos]) ** 2)))
        for _ in range(5):
            f1 = fit(t, y * (1 + 1e-12 * rng.uniform(-1, 1, y.size)))
            p1 = f1["a"] * at ** -f1["b"] + f1["c"]
            worst = np.maximum(worst, [_rel(f0[k], f1[k]) for k in "abc"] + [_rel(p0, p1)])
        d = np.random.default_rng(1).uniform(-1, 1, y.size)
        r = [(fit(t, y * (1 + eps * d))["b"] - f0["b"]) / f0["b"] / eps for eps in (1e-12, 1e-8)]
        response.append((abs(r[0]), name, r))
    start = time.perf_counter()
    for _ in range(repeats):
        for _, t, y, _ in probs:
            fit(t, y)
    ms = (time.perf_counter() - start) / (repeats * len(probs)) * 1e3
    return {"worst": worst, "response": sorted(response, reverse=True), "sse": sse, "ms": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another prediction.py to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    probs = problems()
    print(f"{len(probs)} problems from {len(curves())} curves")
    runs = {"this": prediction.fit_loss_power_law}
    if args.against:
        spec = importlib.util.spec_from_file_location("other_prediction", args.against)
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
        runs["against"] = other.fit_loss_power_law
    results = {name: measure(fit, probs, args.repeats) for name, fit in runs.items()}
    for name, res in results.items():
        w = res["worst"]
        print(f"{name:8s} {res['ms']:.2f} ms per fit; largest relative change under 1e-12: "
              f"a {w[0]:.1e}, b {w[1]:.1e}, c {w[2]:.1e}, extrapolation {w[3]:.1e}")
        for _, label, r in res["response"][:3]:
            print(f"         d(b)/b per unit input change, at 1e-12 {r[0]:+.3e}, at 1e-8 "
                  f"{r[1]:+.3e}  ({label})")
    if "against" in results:
        a, b = results["this"]["sse"], results["against"]["sse"]
        worse = [(p[0], x, y) for p, x, y in zip(probs, a, b, strict=True)
                 if x > y * (1 + 1e-9) + 1e-26]
        print(f"sum of squared errors: this is worse than against beyond 1e-9 relative (and "
              f"1e-26 absolute) in {len(worse)} of {len(probs)} problems")
        for name, x, y in worse[:10]:
            print(f"  {name}: {x:.6e} vs {y:.6e}")


if __name__ == "__main__":
    main()
