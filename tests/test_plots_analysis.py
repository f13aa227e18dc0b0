"""The analysis figures (plots_analysis), drawn from statistics computed by the real
``analysis.compute_statistics`` on synthetic runs with tiny diagram files."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from toposig.analysis import phases
from toposig.analysis.compute import compute_statistics
from toposig.records import Record, Statistics
from toposig.records.sections import PiecewiseFit
from toposig.report import figures, plots, style
from toposig.report import plots_analysis as pa
from toposig.report import plots_diagrams as pd
from toposig.run.results_folder import arrays_reader

# the statistics figures and the embedding's figures of its stored diagrams
FIGURES = {**pa.ANALYSIS_FIGURES, **pd.DIAGRAM_FIGURES}

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = (0, 1, 4, 16, 64, 256, 1000)
MODELS = (("tiny-a", 12_000), ("tiny-b", 42_000), ("tiny-c", 180_000))
ALWAYS = ("training_curves", "controls_summary", "phase_fits", "scaling_relationships",
          "prediction_comparison", "betti_curves", "persistence_diagrams")


def _diagrams(rng: np.random.Generator, t: float, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """An H0 diagram (births 0, one infinite bar) and an H1 diagram that move with ``t``."""
    h0 = np.column_stack([np.zeros(n), np.sort(rng.uniform(0.1, 1.0 + t, n))])
    h0[-1, 1] = np.inf
    m = 10 + int(20 * t)
    births = rng.uniform(0.3, 0.9 + t, m)
    h1 = np.column_stack([births, births + rng.uniform(0.01, 0.2 + 0.3 * t, m)])
    return h0, h1


def make_run(root: Path, models=MODELS, steps=STEPS, embedding: bool = True,
             weights: bool = True, loss: bool = True, layers: bool = False,
             resampled: bool = False, seed: int = 0) -> list[dict]:
    """Records (their JSON) shaped like the store's, with diagram arrays under ``root``
    when ``embedding``: loss falls, topology and spectrum grow with training and size."""
    rng = np.random.default_rng(seed)
    records = []
    for m, (label, n_params) in enumerate(models):
        for step in steps:
            t = math.log1p(step) / math.log1p(max(steps))
            noise = lambda scale: float(scale * rng.normal())  # noqa: E731
            nll = 5.5 - (2.5 + 0.4 * m) * t + noise(0.03)
            record: dict = {"model": f"local/{label}", "model_label": label, "step": step,
                            "num_parameters": n_params, "features": {}, "layer": 2,
                            "status": "ok"}
            if loss:
                record["loss"] = nll
            if embedding:
                record["perplexity"] = math.exp(nll + 0.02)
                record["mean_nll"] = nll + 0.02
                record["features"] |= {
                    "h0_total_persistence": 20 + 8 * t + 4 * m + noise(0.5),
                    "h1_total_persistence": 2 + 5 * t ** 2 + m + noise(0.3),
                    "h1_n_features": 10 + 20 * t + noise(2),
                    "rankme": 10 + 15 * t + 8 * m + noise(0.5),
                    "stable_rank": 1.5 + 2 * t + noise(0.1),
                }
                h0, h1 = _diagrams(rng, t)
                arrays = {"layer2_h0": h0, "layer2_h1": h1}
                if layers:
                    for layer in (0, 1):
                        arrays[f"layer{layer}_h0"], arrays[f"layer{layer}_h1"] = \
                            _diagrams(rng, t / (2 - layer))
                rel = Path("records") / "hash" / label / f"step{step:06d}.npz"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                np.savez(root / rel, **arrays)
                record["arrays_file"] = str(rel)
            if weights:
                record["features"] |= {
                    "np_mean": 0.45 + 0.4 * t + 0.02 * m + noise(0.01),
                    "np_seed_mean": 0.4 + 0.1 * t + noise(0.005),
                    "weight_h0_total": 10 * (m + 1) * (1 + 3 * t) + noise(0.5),
                    "weight_h1_total": 3 + 2 * t + noise(0.2),
                    "weight_l2_norm": 20 + 10 * t + 5 * m + noise(0.2),
                }
            if layers:
                record["layer_features"] = {
                    str(layer): {"h1_total_persistence": (1 + layer) * (1 + t) + noise(0.1),
                                 "rankme": 5 + 3 * layer + 10 * t + noise(0.3)}
                    for layer in range(3)}
            if resampled:
                record["features_resampled"] = {
                    f: {"mean": v, "std": 0.1, "p2_5": v - 0.3, "p97_5": v + 0.3}
                    for f, v in record["features"].items()}
            records.append(record)
    return records


def as_records(entries: list[dict]) -> list[Record]:
    """The entries (the JSON :func:`make_run` writes) as Records."""
    return [Record.from_json(e) for e in entries]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> tuple[Path, list[Record], Statistics]:
    """Three model sizes, embedding and weight features, diagrams on disk."""
    root = tmp_path_factory.mktemp("results")
    records = as_records(make_run(root))
    return root, records, compute_statistics(records, n_bootstrap=50, arrays=arrays_reader(root))


def assert_png(path: Path | None) -> None:
    assert path is not None and path.is_file(), path
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path


def wanted(records, statistics, root: Path | None) -> list[str]:
    """The analysis figures that apply, given the arrays of the results folder ``root``."""
    arrays = None if root is None else arrays_reader(root)
    return style.applicable(FIGURES, records, statistics, arrays)


def test_every_analysis_figure_is_drawn_for_a_full_run(full_run, tmp_path):
    root, records, statistics = full_run
    assert statistics.scaling is not None and not statistics.scaling.reason
    assert statistics.prediction is not None and statistics.prediction.feature == "np_mean"
    assert wanted(records, statistics, root) == list(ALWAYS)
    paths = [FIGURES[n](records, statistics, tmp_path / "plots" / f"{n}.png",
                                    arrays_reader(root)) for n in ALWAYS]
    assert [p.stem for p in paths] == list(ALWAYS)
    for p in paths:
        assert_png(p)
        assert p.stat().st_size > 20_000, p  # a drawn figure, not a "no data" panel
    assert sorted(q.name for q in (tmp_path / "plots").iterdir()) == \
        sorted(f"{n}.png" for n in ALWAYS)  # no layer_heatmaps.png


def _stub(records, statistics, arrays=None, ax=None):
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(0.5, 0.5), dpi=10)


def test_plot_all_appends_the_analysis_figures_and_passes_the_arrays(full_run, tmp_path,
                                                                     monkeypatch):
    root, records, statistics = full_run
    seen = []

    def recording(records, statistics, arrays=None, ax=None):
        seen.append(arrays)
        return _stub(records, statistics)

    monkeypatch.setattr(figures, "ALL_FIGURES", {
        name: style.Figure(name, recording if name in FIGURES else _stub,
                           f.applies)
        for name, f in figures.ALL_FIGURES.items()})
    arrays = arrays_reader(root)
    paths = figures.plot_all(records, statistics, tmp_path, arrays=arrays)
    stems = [p.stem for p in paths]
    assert stems[:len(plots.FIGURES)] == list(plots.FIGURES)
    assert stems[len(plots.FIGURES):] == [*plots.WEIGHT_FIGURES, *ALWAYS]
    assert seen == [arrays] * len(ALWAYS)
    # without arrays: the figures drawn from records and statistics only
    seen.clear()
    stems = [p.stem for p in figures.plot_all(records, statistics, tmp_path / "no_root")]
    assert stems == [*plots.FIGURES, *plots.WEIGHT_FIGURES] and seen == []


def test_analysis_figures_are_chosen_by_the_data_present(full_run):
    root, records, statistics = full_run
    assert wanted(records, statistics, None) == []
    assert wanted(records, {}, root) == [
        "training_curves", "betti_curves", "persistence_diagrams"]
    assert wanted(records, {"phases": {}}, root) == [
        "training_curves", "phase_fits", "betti_curves", "persistence_diagrams"]
    no_quality = [Record.from_json({**r.to_json(), "loss": None, "perplexity": None,
                                    "arrays_file": None}) for r in records]
    assert not any(r.loss or r.perplexity or r.arrays_file() for r in no_quality)
    assert wanted(no_quality, {"scaling": {}}, root) == [
        "scaling_relationships"]


def test_layer_heatmaps_skipped_without_layer_features_and_drawn_with_them(tmp_path):
    records = make_run(tmp_path / "plain", weights=False)
    assert pd.plot_layer_heatmaps(records, {}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    assert "layer_heatmaps" not in wanted(records, {}, tmp_path / "plain")

    root = tmp_path / "layers"
    records = make_run(root, weights=False, layers=True)
    records[3]["layer_features"]["1"]["rankme"] = None  # a gap is drawn grey
    path = pd.plot_layer_heatmaps(records, {}, tmp_path / "layers.png")
    assert_png(path)
    assert wanted(records, {}, root) == [
        "training_curves", "betti_curves", "persistence_diagrams", "layer_heatmaps"]


def test_two_sizes_embedding_only_and_no_stored_loss_do_not_crash(tmp_path):
    """Scaling needs three sizes (a reason instead), no weight features (prediction falls
    back to H1), no stored loss (the loss panel says so)."""
    root = tmp_path / "results"
    records = make_run(root, models=MODELS[:2], weights=False, loss=False, resampled=True)
    statistics = compute_statistics(records, n_bootstrap=20, arrays=arrays_reader(root))
    assert statistics.scaling is not None and statistics.scaling.reason
    assert statistics.prediction is not None \
        and statistics.prediction.feature == "h1_total_persistence"
    # no placeholder for the scaling comparison two sizes cannot make
    assert wanted(records, statistics, root) == [n for n in ALWAYS
                                                 if n != "scaling_relationships"]
    for name in ("training_curves", "controls_summary", "scaling_relationships",
                 "prediction_comparison"):  # drawn directly, each still states its reason
        assert_png(FIGURES[name](records, statistics, tmp_path / f"{name}.png",
                                             arrays_reader(root)))


def test_weights_only_run_does_not_crash(tmp_path):
    records = make_run(tmp_path, embedding=False)
    statistics = compute_statistics(records, n_bootstrap=20, arrays=arrays_reader(tmp_path))
    drawn = wanted(records, statistics, tmp_path)
    assert drawn == list(ALWAYS[:5])  # no arrays: no diagram figures
    for name in ("training_curves", "phase_fits"):  # no perplexity; weight features only
        assert_png(FIGURES[name](records, statistics, tmp_path / f"{name}.png",
                                             arrays_reader(tmp_path)))


@pytest.mark.parametrize("name", [n for n in FIGURES if n != "layer_heatmaps"])
def test_empty_input_a_lone_checkpoint_and_a_missing_arrays_file_do_not_crash(tmp_path, name):
    plot = FIGURES[name]
    assert_png(plot([], {}, tmp_path / "empty.png"))
    lone = [Record.from_json({
        "model": "m", "model_label": "m", "step": None, "status": "ok", "perplexity": 12.0,
        "loss": 2.5, "layer": 1, "arrays_file": "records/hash/m/final.npz",
        "features": {"h1_total_persistence": 3.0, "rankme": 9.0}})]
    assert not (tmp_path / lone[0].arrays_file()).exists()
    broken = {"controlled": {"per_model": {"m": {"rankme": {"spearman_r": None}}}},
              "phases": {"m": {"piecewise_log_step": {"rankme": {"reason": "too few"}}}},
              "scaling": {"reason": "needs three or more model sizes, found 1"},
              "prediction": {"reason": "no neural persistence or H1 feature to predict from"}}
    assert_png(plot(lone, broken, tmp_path / "lone.png", arrays_reader(tmp_path)))


def test_betti_curve_counts_the_bars_alive_at_each_scale():
    diagram = np.array([[0.0, 1.0], [0.0, np.inf], [0.5, 0.7], [0.2, 0.2]])
    grid = np.array([0.0, 0.5, 0.6, 0.7, 1.0, 2.0])
    assert pd.betti_curve(diagram, grid).tolist() == [2, 3, 3, 2, 1, 1]
    assert pd.betti_curve(np.zeros((0, 2)), grid).tolist() == [0] * 6
    rng = np.random.default_rng(3)
    births = rng.uniform(0, 1, 200)
    dgm = np.column_stack([births, births + rng.exponential(0.3, 200)])
    t = np.linspace(0, 2, 57)
    brute = ((dgm[None, :, 0] <= t[:, None]) & (t[:, None] < dgm[None, :, 1])).sum(axis=1)
    assert pd.betti_curve(dgm, t).tolist() == brute.tolist()


def test_piecewise_line_reproduces_the_fitted_values():
    rng = np.random.default_rng(0)
    x = np.log1p(np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000.0]))
    y = np.where(x < 2, 1.0, np.where(x < 4.5, 1 + 2 * (x - 2), 6 - 0.5 * (x - 4.5)))
    y = y + rng.normal(0, 0.05, x.size)
    fitted = phases.piecewise_linear_fit(x, y)
    fit = PiecewiseFit.from_json(fitted)  # as the figure reads it from the statistics
    line = pa.piecewise_line(fit, x)
    assert float(np.sum((y - line) ** 2)) == pytest.approx(fitted["sse"], rel=1e-9, abs=1e-12)
    b1, b2 = fitted["breakpoints"]
    for b in (b1, b2):  # continuous at the breakpoints
        assert pa.piecewise_line(fit, [b - 1e-9])[0] == pytest.approx(
            pa.piecewise_line(fit, [b + 1e-9])[0], abs=1e-6)


def test_select_checkpoints_keeps_first_last_and_log_spaced_ones():
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    picked = pd.select_checkpoints(steps)
    assert len(picked) == 5 and picked[0] == 0 and picked[-1] == len(steps) - 1
    assert picked == sorted(set(picked))
    assert pd.select_checkpoints([0, 10, 100]) == [0, 1, 2]
    assert pd.select_checkpoints([]) == []


def test_bootstrap_bands_are_shaded_when_records_carry_them(tmp_path):
    records = as_records(make_run(tmp_path, models=MODELS[:1], weights=False, resampled=True))
    groups = pa.by_model(records)
    styles = pa.model_styles(groups)
    fig, ax = plt.subplots()
    try:
        assert pa.draw_bootstrap_bands(ax, groups, styles, "rankme", pa._log_step)
        assert len(ax.collections) == 1
        assert not pa.draw_bootstrap_bands(ax, groups, styles, "np_mean", pa._log_step)
    finally:
        plt.close(fig)
