"""The report figures (embedding and weight space), drawn from synthetic checkpoint series."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toposig.analysis import correlations
from toposig.families.weights import WEIGHT_STATISTICS
from toposig.records import Record
from toposig.records.sections import Distances
from toposig.records.statistics import Correlations
from toposig.report import figures, panels, plots, style

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = (0, 1, 2, 4, 16, 64, 256, 1000)
SEVEN = ("summary_figure", "topological_evolution", "spectral_evolution",
         "topology_vs_perplexity", "topo_vs_spectral_correlations", "wasserstein_rate",
         "perplexity_curves")
WEIGHT = ("neural_persistence_evolution", "vr_persistence_evolution", "np_vs_loss_scatter",
          "correlation_heatmap")


def as_records(entries: list[dict]) -> list[Record]:
    """The entries (the JSON the synthetic runs write) as Records."""
    return [Record.from_json(e) for e in entries]


def synthetic_records(models: tuple[str, ...] = ("pythia-70m", "pythia-160m", "pythia-410m"),
                      steps: tuple[int, ...] = STEPS, seed: int = 0) -> list[dict]:
    """Records (their JSON) shaped like the store's: perplexity falls and H1 grows with
    training."""
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
                "status": "ok", "perplexity": ppl, "mean_nll": float(np.log(ppl)),
                "num_parameters": 70426624,
                "features": features,
            })
    order = rng.permutation(len(records))  # unsorted and mixed across models
    return [records[i] for i in order]


def synthetic_weight_records(models: tuple[str, ...] = ("pythia-70m", "pythia-160m",
                                                       "pythia-410m"),
                             steps: tuple[int, ...] = STEPS, seed: int = 0) -> list[dict]:
    """Weight-space records (their JSON) with a checkpoint ``loss``, no perplexity and no
    embedding features: loss falls while neural persistence and weight-row H0 persistence
    grow."""
    rng = np.random.default_rng(seed)
    records = []
    for m, label in enumerate(models):
        for step in steps:
            t = np.log1p(step) / np.log1p(max(steps))
            noise = lambda scale: float(scale * rng.normal())  # noqa: E731
            np_mean = 0.2 + 0.4 * t + 0.03 * m + noise(0.01)
            features = {
                "np_mean": np_mean, "np_std": 0.05 + noise(0.005),
                "np_min": np_mean - 0.12, "np_max": np_mean + 0.15,
                "np_seed_mean": 0.1 + 0.3 * t + noise(0.01), "np_seed_std": 0.03,
                "weight_h0_total": 300 + 500 * t + 80 * m + noise(10),
                "weight_h1_total": 5 + 12 * t + noise(0.8),
                "weight_h1_count": 40 + 30 * t + m + noise(3),
                "weight_h0_entropy_mean": 5.0 + 0.3 * t + noise(0.02),
                "weight_h1_entropy_mean": 3.0 + 0.5 * t + noise(0.05),
                "weight_l2_norm": 80 + 40 * t + noise(1), "weight_std": 0.02 + 0.01 * t,
                "weight_max_abs": 0.3 + 0.5 * t + noise(0.02), "weight_mean_abs": 0.016,
                "weight_spectral_norm_mean": 2.0 + t + noise(0.05),
                "weight_stable_rank_mean": 20 - 5 * t + noise(0.5),
                "weight_alpha_mean": 6.0 - 2.5 * t + noise(0.1),
                "weight_alpha_weighted_mean": 1.0 + t + noise(0.05),
                "weight_std_over_max_mean": 0.08 - 0.03 * t + noise(0.002),
            }
            records.append({"model": f"EleutherAI/{label}", "model_label": label,
                            "step": step, "status": "ok",
                            "loss": float(10.8 - (7.0 + 0.4 * m) * t + noise(0.05)),
                            "features": features})
    order = rng.permutation(len(records))
    return [records[i] for i in order]


def synthetic_statistics(entries: list[dict], seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    records = as_records(entries)
    wasserstein = {}
    for label, recs in correlations.by_model(records).items():
        rows = []
        for a, b in zip(recs[:-1], recs[1:], strict=True):
            h0, h1 = rng.uniform(5, 40), rng.uniform(0.5, 4)
            rows.append({"step_from": a.step, "step_to": b.step,
                         "h0_wasserstein": h0, "h1_wasserstein": h1,
                         "h0_wasserstein_persim_l2": 1.3 * h0,
                         "h1_wasserstein_persim_l2": 1.3 * h1})
        wasserstein[label] = rows
    return {"correlations": correlations.correlations_with_target(records),
            "wasserstein": wasserstein}


def assert_pngs(paths: list[Path], names: tuple[str, ...] = SEVEN,
                min_bytes: int = 5_000) -> None:
    assert [p.stem for p in paths] == list(names)
    for p in paths:
        assert p.is_file(), p
        data = p.read_bytes()
        assert data[:8] == PNG_SIGNATURE, p
        assert len(data) > min_bytes, (p, len(data))


def test_plot_all_writes_the_seven_figures_and_the_heatmap_for_an_embedding_run(tmp_path):
    records = synthetic_records()
    out = tmp_path / "plots" / "nested"  # created if missing
    paths = figures.plot_all(records, synthetic_statistics(records), out)
    assert_pngs(paths, (*SEVEN, "correlation_heatmap"))
    assert all(p.parent == out for p in paths)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)


def test_plot_all_writes_only_the_four_weight_figures_for_a_weights_only_run(tmp_path):
    records = as_records(synthetic_weight_records())
    statistics = {"correlations": correlations.correlations_with_target(records, "loss")}
    assert statistics["correlations"]["target"] == "loss"
    paths = figures.plot_all(records, statistics, tmp_path)
    assert_pngs(paths, WEIGHT, min_bytes=20_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.png" for n in WEIGHT)


def stubbed(figs: dict[str, style.Figure], draw) -> dict[str, style.Figure]:
    """The same figures, each applying as before, drawn by ``draw``."""
    return {name: style.Figure(name, draw, f.applies) for name, f in figs.items()}


def _stub(records: list[Record], statistics: dict, arrays=None, ax=None):
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(0.5, 0.5), dpi=10)


@pytest.mark.parametrize(("kind", "with_correlations", "expected"), [
    ("embedding", True, (*SEVEN, "correlation_heatmap")),
    ("embedding", False, SEVEN),
    ("weight", True, WEIGHT),
    ("weight", False, WEIGHT[:3]),
    ("both", True, (*SEVEN, *WEIGHT)),
    ("none", True, ("correlation_heatmap",)),
    ("none", False, ()),
])
def test_plot_all_selects_figures_by_the_features_present(tmp_path, monkeypatch, kind,
                                                          with_correlations, expected):
    # every figure replaced by a stub: this checks the selection only, fast
    monkeypatch.setattr(figures, "ALL_FIGURES", stubbed(figures.ALL_FIGURES, _stub))
    steps = (0, 10, 100)  # three checkpoints: the fewest a correlation figure is drawn for
    weights = {(r["model_label"], r["step"]): r for r in synthetic_weight_records(steps=steps)}
    if kind == "weight":
        records = list(weights.values())
    elif kind == "none":  # an unrelated feature, and weight keys without values
        records = [{"model": "m", "model_label": "m", "step": step, "status": "ok",
                    "loss": 2.0 - step / 100, "features": {"mean_norm": 1.0 + step,
                                                          "np_mean": None,
                                                          "weight_std": float("nan")}}
                   for step in steps]
    else:
        records = synthetic_records(steps=steps)
        if kind == "both":
            for r in records:
                r["features"] |= weights[r["model_label"], r["step"]]["features"]
    statistics = ({"correlations": correlations.correlations_with_target(as_records(records),
                                                                          "loss")}
                  if with_correlations else {})
    paths = figures.plot_all(records, statistics, tmp_path)
    assert [p.stem for p in paths] == list(expected)


def test_heatmap_rows_put_weight_families_first():
    steps = (0, 10)
    records = synthetic_records(steps=steps)
    weights = {(r["model_label"], r["step"]): r for r in synthetic_weight_records(steps=steps)}
    for r in records:
        r["features"] |= weights[r["model_label"], r["step"]]["features"]
    groups = plots._heatmap_features(Correlations.from_json(
        correlations.correlations_with_target(as_records(records))))
    assert [label for label, _ in groups] == ["weight topology", "weight statistics",
                                              "embedding topology", "embedding spectrum",
                                              "other"]
    families = ["weight_topological", "weight_statistics", "embedding_topological",
                "embedding_spectral", "other"]
    for family, (_, members) in zip(families, groups, strict=True):
        assert {correlations.feature_group(f).name for f in members} == {family}
    assert groups[0][1][:4] == ["np_mean", "np_std", "np_min", "np_max"]
    assert groups[1][1] == list(WEIGHT_STATISTICS)
    assert groups[3][1] == [f for f in plots.SPECTRAL_NAMES if f in groups[3][1]]


def test_scatter_and_heatmap_follow_a_perplexity_target(tmp_path):
    records = synthetic_weight_records()
    for r in records:
        r["perplexity"] = float(np.exp(r.pop("loss")))
    records = as_records(records)
    features = ["np_mean", "weight_h0_total", "weight_l2_norm"]
    statistics = {"correlations": correlations.correlations_with_target(records, "perplexity",
                                                                 features)}
    assert plots._target(records, statistics) == "perplexity"
    assert plots._target(records, {}) == "perplexity"
    assert plots._target(as_records(synthetic_weight_records(steps=(0, 10))), {}) == "loss"
    for plot in (plots.plot_np_vs_loss_scatter, plots.plot_correlation_heatmap):
        path = plot(records, statistics, tmp_path / f"{plot.__name__}.png")
        assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_missing_values_and_a_single_checkpoint_model_do_not_crash(tmp_path):
    records = synthetic_records(models=("pythia-70m", "pythia-160m"))
    for r in records[::3]:
        r["features"]["h1_total_persistence"] = None
        r["features"]["rankme"] = float("nan")
        r["features"]["eigenspectrum_decay_alpha"] = None
    records[0]["perplexity"] = None
    records.append({"model": "local/final", "model_label": "final-only", "step": None,
                    "status": "ok", "perplexity": 25.0, "features": {"h1_total_persistence": 30.0,
                                                     "h1_n_features": None}})
    statistics = synthetic_statistics(records)
    statistics["wasserstein"]["final-only"] = []
    statistics["correlations"]["pooled"]["h1_n_features"]["spearman_p"] = None
    assert_pngs(figures.plot_all(records, statistics, tmp_path), (*SEVEN, "correlation_heatmap"))


def test_missing_weight_values_and_a_single_checkpoint_model_do_not_crash(tmp_path):
    records = synthetic_weight_records(models=("pythia-70m", "pythia-160m"))
    for r in records[::3]:
        r["features"]["np_mean"] = None
        r["features"]["np_std"] = float("nan")
        r["features"]["weight_h1_count"] = None
        r["loss"] = None
    for r in records:  # features absent everywhere show "no data"
        del r["features"]["weight_h1_total"]
        del r["features"]["np_seed_mean"]
    records.append({"model": "local/final", "model_label": "final-only", "step": None,
                    "status": "ok", "loss": 3.1,
                    "features": {"np_mean": 0.5, "weight_h0_total": None}})
    features = ["np_mean", "np_std", "weight_h0_total", "weight_h1_count", "weight_std"]
    statistics = {"correlations": correlations.correlations_with_target(as_records(records),
                                                                        "loss", features)}
    statistics["correlations"]["pooled"]["np_mean"]["spearman_p"] = None
    assert_pngs(figures.plot_all(records, statistics, tmp_path), WEIGHT)


@pytest.mark.parametrize("plot", [plots.plot_summary_figure, plots.plot_topology_vs_perplexity,
                                  plots.plot_topo_vs_spectral_correlations,
                                  plots.plot_wasserstein_rate,
                                  plots.plot_neural_persistence_evolution,
                                  plots.plot_vr_persistence_evolution,
                                  plots.plot_np_vs_loss_scatter,
                                  plots.plot_correlation_heatmap])
def test_a_lone_checkpoint_and_empty_statistics_do_not_crash(tmp_path, plot):
    records = [Record.from_json({"model": "m", "model_label": "m", "step": None,
                                 "status": "ok", "perplexity": 12.0,
                                 "features": {"h1_total_persistence": 3.0, "rankme": 9.0}})]
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
    assert panels.step_axis_scale(steps) == scale


def test_set_step_axis_sets_scale_and_label():
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2)
    try:
        assert panels.set_step_axis(a, [0, 1, 10, 1000]) == "symlog"
        assert a.get_xscale() == "symlog" and a.get_xlabel() == "training step (symlog)"
        assert panels.set_step_axis(b, [0, 5, 10]) == "linear"
        assert b.get_xscale() == "linear" and b.get_xlabel() == "training step"
    finally:
        plt.close(fig)


def test_heatmap_marks_significance_by_holm_over_the_cells_shown(tmp_path, monkeypatch):
    """A raw p of 0.03 among four tests is not significant after Holm (0.06): drawn plain."""
    cell = {"np_mean": {"spearman_r": -0.9, "spearman_p": 0.001, "n": 10},
            "rankme": {"spearman_r": 0.5, "spearman_p": 0.03, "n": 10}}
    statistics = {"correlations": {"target": "perplexity", "per_model": {"m": cell},
                                   "pooled": cell}}
    drawn = [plots.plot_correlation_heatmap.plot([], statistics)]
    ax = drawn[0].axes[0]
    weight = {t.get_text(): t.get_fontweight() for t in ax.texts if t.get_text()[:1] in "+-"}
    assert weight == {"-0.90": "bold", "+0.50": "normal"}
    assert "Holm-adjusted" in ax.get_title()
    legend = " ".join(t.get_text() for t in drawn[0].legends[0].get_texts())
    assert "over the 4 tests shown" in legend


@pytest.mark.parametrize(("steps", "per_step"), [((0, 1, 2, 4, 100, 200), True),
                                                 ((0, 100, 200, 300), False)])
def test_diagram_distances_are_per_step_of_gap_where_gaps_differ(steps, per_step):
    rows = [{"step_from": a, "step_to": b, "h1_wasserstein": 2.0 * (b - a)}
            for a, b in zip(steps, steps[1:], strict=False)]
    distances = Distances.from_json({"m": rows})
    assert distances.gaps_differ(["m"]) is per_step
    x, y = plots._wasserstein_series(distances, ["m"], 1, per_step=per_step)["m"]
    assert list(x) == list(steps[1:])
    assert list(y) == ([2.0] * len(rows) if per_step else [r["h1_wasserstein"] for r in rows])


def test_summary_and_topological_evolution_draw_the_bootstrap_bands(tmp_path, monkeypatch):
    records = synthetic_records(models=("a",))
    for r in records:
        r["features_resampled"] = {"h1_total_persistence": {"std": 0.5}}
    records = as_records(records)
    assert records[0].resampled["h1_total_persistence"].std == 0.5
    drawn = [plots.plot_summary_figure.plot(records, {}),
             plots.plot_topological_evolution.plot(records, {})]
    for fig in drawn:
        banded = [ax for ax in fig.axes if ax.collections]
        assert [ax.get_title() for ax in banded] == ["H1 total persistence"]
        legend = banded[0].get_legend()
        assert any("bootstrap" in t.get_text() for t in legend.get_texts())


def test_figures_in_vector_formats_keep_text_and_repeat_byte_for_byte(tmp_path):
    records = synthetic_records(models=("a",))
    output = style.FigureOutput(("svg", "pdf", "png"), dpi=40)
    first = plots.plot_perplexity_curves(records, {}, tmp_path / "p.png", output=output)
    assert first == tmp_path / "p.svg"
    svg, pdf = (tmp_path / "p.svg").read_bytes(), (tmp_path / "p.pdf").read_bytes()
    assert b"<text" in svg and b"Perplexity across training" in svg  # text, not paths
    assert b"/FontFile2" in pdf  # TrueType: selectable text
    width = int.from_bytes((tmp_path / "p.png").read_bytes()[16:20], "big")
    plots.plot_perplexity_curves(records, {}, tmp_path / "d.png")  # default: PNG, DPI
    assert not (tmp_path / "d.svg").exists()
    assert int.from_bytes((tmp_path / "d.png").read_bytes()[16:20], "big") == round(
        width * style.DPI / 40)
    plots.plot_perplexity_curves(records, {}, tmp_path / "p.png", output=output)
    assert (tmp_path / "p.svg").read_bytes() == svg and (tmp_path / "p.pdf").read_bytes() == pdf
    with pytest.raises(ValueError, match="figure formats are png, pdf, svg"):
        style.FigureOutput(("png", "jpg"))
    with pytest.raises(ValueError, match="--dpi"):
        style.FigureOutput(dpi=0)


def test_plot_all_removes_its_figures_in_formats_it_did_not_write(tmp_path):
    records = as_records(synthetic_records(models=("a",)))
    statistics = {"correlations": correlations.correlations_with_target(records)}
    figures.plot_all(records, statistics, tmp_path, output=style.FigureOutput(("pdf",)))
    assert (tmp_path / "summary_figure.pdf").is_file()
    (tmp_path / "notes.pdf").write_bytes(b"mine")
    figures.plot_all(records, statistics, tmp_path)
    assert not list(tmp_path.glob("summary_figure.pdf"))
    assert (tmp_path / "summary_figure.png").is_file()
    assert (tmp_path / "notes.pdf").read_bytes() == b"mine"
