"""The seven report figures, drawn from synthetic checkpoint series."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toposig import plots, stats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = (0, 1, 2, 4, 16, 64, 256, 1000)
SEVEN = ("summary_figure", "topological_evolution", "spectral_evolution",
         "topology_vs_perplexity", "topo_vs_spectral_correlations", "wasserstein_rate",
         "perplexity_curves")


def synthetic_records(models: tuple[str, ...] = ("pythia-70m", "pythia-160m", "pythia-410m"),
                      steps: tuple[int, ...] = STEPS, seed: int = 0) -> list[dict]:
    """Records shaped like the store's: perplexity falls and H1 grows with training."""
    rng = np.random.default_rng(seed)
    records = []
    for m, label in enumerate(models):
        for step in steps:
            t = np.log1p(step) / np.log1p(max(steps))  # training progress in [0, 1]
            ppl = float(np.exp(10.8 - (6.0 + 0.4 * m) * t + 0.1 * rng.normal()))
            noise = lambda scale: float(scale * rng.normal())  # noqa: E731
            h1_n = 60 + 70 * t + 10 * m + noise(5)
            h1_total = 8 + 20 * t + 3 * m + noise(1.5)
            features = {
                "h0_n_features": 199.0,
                "h0_total_persistence": 600 + 250 * t + 40 * m + noise(20),
                "h0_mean_persistence": 3.0 + 1.2 * t + noise(0.1),
                "h0_max_persistence": 7.0 + 2 * t + noise(0.3),
                "h0_std_persistence": 1.0 + noise(0.05),
                "h0_persistence_entropy": 5.2 + noise(0.02),
                "h0_n_significant": 99.0 + noise(2),
                "h1_n_features": h1_n,
                "h1_total_persistence": h1_total,
                "h1_mean_persistence": h1_total / h1_n,
                "h1_max_persistence": 0.6 + 0.8 * t + noise(0.08),
                "h1_std_persistence": 0.15 + noise(0.02),
                "h1_persistence_entropy": 4.0 + 0.6 * t + noise(0.05),
                "h1_n_significant": 0.5 * h1_n + noise(3),
                "rankme": 15 + 25 * t + 5 * m + noise(1),
                "effective_rank_cov": 8 + 14 * t + noise(0.8),
                "participation_ratio": 3 + 6 * t + noise(0.4),
                "eigenspectrum_decay_alpha": 1.6 - 0.5 * t + noise(0.03),
                "stable_rank": 1.5 + 2 * t + noise(0.2),
                "pca_explained_variance": 0.92,
                "pca_components": 50.0,
                "mean_norm": 12.0 + noise(0.5),
            }
            records.append({
                "model": f"EleutherAI/{label}", "model_label": label, "step": step,
                "perplexity": ppl, "mean_nll": float(np.log(ppl)), "num_parameters": 70426624,
                "features": features,
            })
    order = rng.permutation(len(records))  # unsorted and mixed across models
    return [records[i] for i in order]


def synthetic_statistics(records: list[dict], seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    wasserstein = {}
    for label, recs in stats.by_model(records).items():
        rows = []
        for a, b in zip(recs[:-1], recs[1:], strict=True):
            h0, h1 = rng.uniform(5, 40), rng.uniform(0.5, 4)
            rows.append({"step_from": a["step"], "step_to": b["step"],
                         "h0_wasserstein": h0, "h1_wasserstein": h1,
                         "h0_wasserstein_persim_l2": 1.3 * h0,
                         "h1_wasserstein_persim_l2": 1.3 * h1})
        wasserstein[label] = rows
    return {"correlations": stats.correlations_with_target(records), "wasserstein": wasserstein}


def assert_pngs(paths: list[Path], min_bytes: int = 5_000) -> None:
    assert [p.stem for p in paths] == list(SEVEN)
    for p in paths:
        assert p.is_file(), p
        data = p.read_bytes()
        assert data[:8] == PNG_SIGNATURE, p
        assert len(data) > min_bytes, (p, len(data))


def test_plot_all_writes_the_seven_figures(tmp_path):
    records = synthetic_records()
    out = tmp_path / "plots" / "nested"  # created if missing
    paths = plots.plot_all(records, synthetic_statistics(records), out)
    assert_pngs(paths)
    assert all(p.parent == out for p in paths)


def test_missing_values_and_a_single_checkpoint_model_do_not_crash(tmp_path):
    records = synthetic_records(models=("pythia-70m", "pythia-160m"))
    for r in records[::3]:
        r["features"]["h1_total_persistence"] = None
        r["features"]["rankme"] = float("nan")
        r["features"]["eigenspectrum_decay_alpha"] = None
    records[0]["perplexity"] = None
    records.append({"model": "local/final", "model_label": "final-only", "step": None,
                    "perplexity": 25.0, "features": {"h1_total_persistence": 30.0,
                                                     "h1_n_features": None}})
    statistics = synthetic_statistics(records)
    statistics["wasserstein"]["final-only"] = []
    statistics["correlations"]["pooled"]["h1_n_features"]["spearman_p"] = None
    assert_pngs(plots.plot_all(records, statistics, tmp_path))


@pytest.mark.parametrize("plot", [plots.plot_summary_figure, plots.plot_topology_vs_perplexity,
                                  plots.plot_topo_vs_spectral_correlations,
                                  plots.plot_wasserstein_rate])
def test_a_lone_checkpoint_and_empty_statistics_do_not_crash(tmp_path, plot):
    records = [{"model": "m", "model_label": "m", "step": None, "perplexity": 12.0,
                "features": {"h1_total_persistence": 3.0, "rankme": 9.0}}]
    path = plot(records, {}, tmp_path / "figure.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize(("steps", "scale"), [
    ([0, 1, 2, 4, 16, 64, 256, 1000], "symlog"),
    ([0, 1000, 143000], "symlog"),  # smallest positive step 1000: ratio 143
    ([0, 10, 99], "linear"),  # 99 / 10 < 100
    ([0, 0.5, 99], "linear"),  # smallest positive step floored at 1
    ([0, 0.5, 100], "symlog"),
    ([1000, 2000, 4000], "linear"),
    ([0], "linear"),
    ([None], "linear"),
    ([], "linear"),
])
def test_step_axis_scale(steps, scale):
    assert plots.step_axis_scale(steps) == scale


def test_set_step_axis_sets_scale_and_label():
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2)
    try:
        assert plots.set_step_axis(a, [0, 1, 10, 1000]) == "symlog"
        assert a.get_xscale() == "symlog" and a.get_xlabel() == "training step (symlog)"
        assert plots.set_step_axis(b, [0, 5, 10]) == "linear"
        assert b.get_xscale() == "linear" and b.get_xlabel() == "training step"
    finally:
        plt.close(fig)
