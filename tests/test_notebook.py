"""The library in a notebook (docs/notebook.md): a results folder opened with
``toposig.open``, every report figure drawn into the user's own Axes, two runs compared on
one figure, ``Measurement.plot``, and the user's matplotlib backend and settings left as
they were. The figures the analysis writes stay byte for byte what they were (the
committed ``results/plots`` are redrawn and compared)."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import toposig
from toposig.report.figures import ALL_FIGURES, RunData, plot_compared
from toposig.report.style import Figure, figure, subplots
from toposig.run.results_folder import arrays_reader

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def entries() -> list[dict]:
    return [r for r in json.loads((RESULTS / "data" / "all_results.json").read_text())
            if r.get("status") == "ok"]


@pytest.fixture(scope="module")
def results():
    return toposig.open(RESULTS)


def test_open_gives_the_folders_records_statistics_and_table(results):
    assert [r.to_json() for r in results.records] == entries()
    stored = json.loads((RESULTS / "data" / "statistics.json").read_text())
    assert results.statistics.to_json() == stored  # the analysis' file: it fits the records
    table = results.table()
    assert len(table) > len(results.records)
    assert set(table["model"]) == {r.model_label for r in results.records}
    text = repr(results)
    assert "54 checkpoints of 3 model(s)" in text and len(text) < 200


def test_opening_a_checkpoint_folder_says_to_measure_it_into_a_results_folder(tmp_path):
    """Issue 37, row 6: toposig.open on a checkpoint folder advised `toposig run --out X`,
    which would write the results into the checkpoint folder."""
    from conftest import neox_config, save_checkpoint

    from toposig.run.results_folder import ResultsMissingError

    model = save_checkpoint(tmp_path / "run" / "step10",
                            neox_config(hidden=8, layers=1, heads=2, vocab=64))
    for folder, what in ((model, "a model folder"), (model.parent, "a folder of checkpoints")):
        with pytest.raises(ResultsMissingError) as refused:
            toposig.open(folder)
        name = folder.name
        assert str(refused.value).startswith(f"{folder} is {what}")
        assert "not a results folder: measure it first" in str(refused.value)
        assert f"toposig run --models {folder} --out results/{name}`" in str(refused.value)
    with pytest.raises(ResultsMissingError, match="does not exist: run `toposig run --out"):
        toposig.open(tmp_path / "empty")


def test_statistics_are_computed_in_memory_when_the_file_does_not_fit(tmp_path, caplog):
    """Records changed since the analysis: the stored statistics are not used; the ones
    computed instead are what the analysis would write (same records digest)."""
    import shutil

    folder = tmp_path / "res"
    (folder / "data").mkdir(parents=True)
    shutil.copytree(RESULTS / "records", folder / "records")
    records = [r for r in entries() if r["model_label"] == "tiny-h16-l1"]
    for name in ("all_results.json", "statistics.json"):
        (folder / "data" / name).write_bytes((RESULTS / "data" / name).read_bytes())
    (folder / "data" / "all_results.json").write_text(json.dumps(records))
    res = toposig.open(folder)
    stats = res.statistics
    assert "records have changed" in caplog.text
    from toposig.analysis.compute import records_digest

    assert stats.records_sha256 == records_digest(records)
    assert set(stats.models) == {"tiny-h16-l1"}
    assert sorted((folder / "data").iterdir()) == sorted(  # nothing written
        [folder / "data" / "all_results.json", folder / "data" / "statistics.json"])
    from toposig.analyze import analyze

    written, _ = analyze(folder, plots=False)  # what `toposig analyze` writes
    assert stats == written


def test_every_report_figure_draws_into_an_axes_of_the_users_figure(results):
    from matplotlib.figure import Figure as MplFigure

    names = results.plot.names()
    # the reference folder has data for every figure but the seed ensemble's, the
    # positive control's and the shared figure over training of the families without one
    # of their own (it is neither and has none; tests/test_seed_ensembles.py,
    # tests/test_positive_controls.py and tests/test_family_contract.py draw those into a
    # user's Axes)
    assert names == [n for n in ALL_FIGURES
                     if n not in ("seed_ensemble", "positive_control", "head_to_head",
                                  "feature_evolution")]
    for name in names:
        user = MplFigure(figsize=(12, 5))
        left, right = user.subplots(1, 2)
        drawn = getattr(results.plot, name)(ax=right)
        assert drawn is not None, name
        assert drawn is right or drawn.get_figure(root=True) is user, name
        assert left in user.axes and not left.has_data(), name  # the user's Axes kept
        if right in user.axes:  # one panel: drawn on the Axes given, which is returned
            assert drawn is right and (right.has_data() or right.texts), name
        else:  # several: a sub-figure in its place, holding every panel
            assert user.subfigs == [drawn], name
            assert drawn.axes and all(a.get_figure(root=True) is user for a in drawn.axes)
            assert drawn._subplotspec.get_geometry() == (1, 2, 1, 1), name  # right's place


def test_a_single_panel_figure_draws_on_the_given_axes_itself(results):
    fig, ax = subplots()
    drawn = results.plot.perplexity_curves(ax=ax)
    assert drawn is ax and ax.get_figure() is fig
    assert ax.get_title() == "Perplexity across training"
    assert len(ax.get_lines()) >= 3


def test_a_figure_drawn_alone_equals_the_file_the_analysis_wrote(results, tmp_path):
    """plot() then savefig: the same PNG as results/plots (the same drawing code)."""
    from toposig.report.style import save_figure

    drawn = results.plot.summary_figure()
    path = save_figure(drawn, tmp_path / "summary_figure.png")
    assert filecmp.cmp(path, RESULTS / "plots" / "summary_figure.png", shallow=False)


def test_unknown_figures_are_named_errors(results):
    with pytest.raises(AttributeError, match="no figure named 'nope'"):
        results.plot.nope  # noqa: B018
    with pytest.raises(ValueError, match="no figure named 'nope'"):
        results.plot("nope")
    assert "summary_figure" in dir(results.plot)


def test_two_runs_share_the_axes_of_a_records_figure(results, tmp_path):
    other = toposig.open(RESULTS, name="rerun")
    fig = results.plot.perplexity_curves(other=other)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert {f"results: {m}" for m in ("tiny-h16-l1", "tiny-h32-l2", "tiny-h64-l3")} <= set(labels)
    assert {f"rerun: {m}" for m in ("tiny-h16-l1", "tiny-h32-l2", "tiny-h64-l3")} <= set(labels)
    a = fig.axes[0].get_lines()[labels.index("results: tiny-h16-l1")].get_ydata()
    b = fig.axes[0].get_lines()[labels.index("rerun: tiny-h16-l1")].get_ydata()
    np.testing.assert_array_equal(a, b)  # the same folder twice: the same curve


def test_two_runs_sit_side_by_side_for_a_statistics_figure(results):
    other = toposig.open(RESULTS, name="rerun")
    fig = results.plot.correlation_heatmap(other=other)
    subs = fig.subfigs
    assert [s.get_suptitle().split("\n")[0] for s in subs] == ["results", "rerun"]
    alone = ALL_FIGURES["correlation_heatmap"].plot(results.records, results.statistics)
    w, h = alone.get_size_inches()
    assert tuple(fig.get_size_inches()) == pytest.approx((2 * w, h))


def test_runs_with_one_name_are_refused():
    run = RunData("same", [], {}, None)
    with pytest.raises(ValueError, match="different names"):
        plot_compared(ALL_FIGURES["perplexity_curves"], [run, run])


def test_a_multi_panel_figure_needs_an_axes_with_a_place_in_a_grid():
    from matplotlib.figure import Figure as MplFigure

    user = MplFigure()
    ax = user.add_axes((0.1, 0.1, 0.8, 0.8))  # no subplot spec

    @figure("two_panels")
    def two(records, statistics, arrays, ax=None):
        fig, _ = subplots(1, 2, target=ax)
        return fig

    with pytest.raises(ValueError, match="several panels"):
        two.plot([], {}, ax=ax)
    assert isinstance(two, Figure)


def test_the_backend_and_settings_of_the_user_are_left_alone(tmp_path):
    """In a fresh interpreter with the non-Agg ``svg`` backend and a custom rcParam: open
    the folder, draw figures into pyplot Axes, compare two runs, draw a measurement's
    diagrams with persim (which calls plt.style.use): the backend, the rcParams and
    pyplot's figure list are what the user set."""
    script = textwrap.dedent(f"""
        import matplotlib
        matplotlib.use("svg")
        import matplotlib.pyplot as plt
        plt.rcParams["lines.linewidth"] = 7.5
        before = dict(plt.rcParams)
        import numpy as np
        import toposig
        from toposig.report.measurement_figures import plot_diagrams
        res = toposig.open({str(RESULTS)!r})
        fig, axes = plt.subplots(1, 2)
        res.plot.summary_figure(ax=axes[0])
        res.plot.perplexity_curves(ax=axes[1])
        res.plot.training_curves(other=toposig.open({str(RESULTS)!r}, name="b"))
        plot_diagrams([np.array([[0, 1.0], [0, 2.0]]), np.array([[0.5, 0.9]])])
        fig.savefig({str(tmp_path / "user.svg")!r})
        assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
        assert plt.get_fignums() == [1], plt.get_fignums()
        after = dict(plt.rcParams)
        changed = {{k for k in before if before[k] != after[k]}}
        assert not changed, changed
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin"},
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
    assert (tmp_path / "user.svg").stat().st_size > 10_000


def test_measurement_plot_draws_diagrams_betti_curves_and_layers():
    from conftest import causal_lm
    from matplotlib.figure import Figure as MplFigure

    from toposig.config import RunSettings
    from toposig.model.training import byte_tokenizer

    texts = [f"text {i}: " + "a quick brown fox jumps over the lazy dog " * (1 + i % 3)
             for i in range(16)]
    m = toposig.measure(causal_lm("gpt_neox", seed=1), byte_tokenizer(), texts,
                        families=["embedding"], layers="all", progress=False,
                        settings=RunSettings(n_texts=16))
    fig = m.plot()
    ax = fig.axes[0]
    n_points = sum(len(c.get_offsets()) for c in ax.collections)
    assert n_points == sum(len(d) for d in m.diagrams())  # every bar, H0 and H1
    user = MplFigure()
    ax = user.subplots()
    assert m.plot("betti", ax=ax) is ax
    assert [line.get_label() for line in ax.get_lines()] == ["β0", "β1"]
    top = max(float(d[np.isfinite(d)].max()) for d in m.diagrams())
    h0 = ax.get_lines()[0]
    x, y = h0.get_xdata(), h0.get_ydata()
    from toposig.features.homology import betti_curve

    np.testing.assert_array_equal(y, betti_curve(m.diagrams()[0], x))
    assert x[-1] == pytest.approx(top * 1.05)
    layers = m.plot("layers")
    assert len(layers.axes) == 2
    assert len(layers.axes[0].get_lines()[0].get_xdata()) == len(m.layer_features)
    with pytest.raises(ValueError, match="kind must be one of"):
        m.plot("nope")
    with pytest.raises(ValueError, match="no diagrams of layer 99"):
        m.plot(layer=99)
    last = m.plot(layer=-1)  # counted from the end, as layers= counts
    n_last = sum(len(c.get_offsets()) for c in last.axes[0].collections)
    assert n_last == sum(len(d) for d in m.diagrams(len(m.layer_features) - 1))


# --- toposig plot ---------------------------------------------------------------------------


def test_plot_of_one_run_writes_the_reports_own_files(tmp_path, capsys):
    from toposig.cli.main import main

    names = ["summary_figure", "correlation_heatmap", "persistence_diagrams"]
    assert main(["plot", str(RESULTS), "--figures", ",".join(names),
                 "--out", str(tmp_path / "one")]) == 0
    for name in names:
        assert filecmp.cmp(tmp_path / "one" / f"{name}.png", RESULTS / "plots" / f"{name}.png",
                           shallow=False), name
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == sorted(
        f"{n}.png" for n in names)
    assert "figures (3, png) of results" in capsys.readouterr().out


def test_plot_compare_draws_one_figure_per_figure_of_both_runs(tmp_path, monkeypatch, capsys):
    from toposig.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").symlink_to(RESULTS)  # its default --out goes beside it: here
    assert main(["plot", "--compare", "results", "results", "--names", "a,b",
                 "--figures", "training_curves,wasserstein_rate", "--formats", "png,svg"]) == 0
    out = tmp_path / "compare-a-vs-b"
    assert sorted(p.name for p in out.iterdir()) == [
        "training_curves.png", "training_curves.svg", "wasserstein_rate.png",
        "wasserstein_rate.svg"]
    svg = (out / "training_curves.svg").read_text()
    assert "a: tiny-h16-l1" in svg and "b: tiny-h64-l3" in svg  # one legend, both runs
    assert "compare-a-vs-b" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["plot"], "give a results folder"),
    (["plot", "--compare", str(RESULTS), str(RESULTS)], "different, non-empty names"),
    (["plot", str(RESULTS), "--names", "a,b"], "2 names for 1 folders"),
    (["plot", str(RESULTS), "--figures", "summary,x"], "no figure named summary, x"),
    (["plot", str(RESULTS), "--formats", "gif"], "figure formats are"),
    (["plot", "no-such-folder"], "no-such-folder"),
])
def test_plot_refuses_bad_input_with_one_error_line(argv, message, capsys, monkeypatch, tmp_path):
    from toposig.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_plot_refuses_an_out_that_is_a_file(tmp_path, capsys):
    from toposig.cli.main import main

    (tmp_path / "f").write_text("mine")
    assert main(["plot", str(RESULTS), "--out", str(tmp_path / "f")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert (tmp_path / "f").read_text() == "mine"


# --- the page's own snippets (docs/notebook.md) ------------------------------------------------

PAGE = ROOT / "docs" / "notebook.md"


def snippet(marker: str) -> str:
    from test_docs import block_after

    return block_after(PAGE, marker)


@pytest.fixture
def in_a_copy_of_the_quick_start(tmp_path, monkeypatch):
    """A working folder whose results/ (and results-lr2/) are the reference results."""
    (tmp_path / "results").symlink_to(RESULTS)
    (tmp_path / "results-lr2").symlink_to(RESULTS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_pages_open_example_runs(in_a_copy_of_the_quick_start, capsys):
    exec(compile(snippet("open-example"), "docs/notebook.md open", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Results('results': 54 checkpoints of 3 model(s)")
    assert out[-1] == str([n for n in ALL_FIGURES if n not in (
        "seed_ensemble", "positive_control", "head_to_head", "feature_evolution")])
    assert (in_a_copy_of_the_quick_start / "summary.png").stat().st_size > 50_000


def test_the_pages_typed_example_runs(in_a_copy_of_the_quick_start, capsys):
    namespace: dict = {}
    exec(compile(snippet("typed-example"), "docs/notebook.md typed", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Record(tiny-h64-l3 step 1000 [embedding, weights, landscape, "
                             "gradients]: 81 features, perplexity 6.367")
    assert out[1].startswith("Statistics(3 model(s), 81 features against perplexity; ")
    entry = json.loads((RESULTS / "data" / "all_results.json").read_text())[-1]
    rec = namespace["rec"]
    last = str(max(map(int, entry["layer_features"])))
    assert rec.layers[max(rec.layers)]["h1_total_persistence"] == \
        entry["layer_features"][last]["h1_total_persistence"]
    assert rec.parts["weights"].settings_hash == entry["weights"]["settings_hash"]
    strongest = [line.split()[0] for line in out[2:5]]
    pooled = namespace["st"].to_json()["correlations"]["pooled"]
    assert strongest == sorted((f for f in pooled if pooled[f]["spearman_r"] is not None),
                               key=lambda f: -abs(pooled[f]["spearman_r"]))[:3]


def test_the_readmes_notebook_example_runs_as_written(in_a_copy_of_the_quick_start):
    """Issue 37, row 4: the README's snippet used an ``ax`` it never defined."""
    from test_docs import block_after

    code = block_after(ROOT / "README.md", "readme-example")
    namespace: dict = {}
    exec(compile(code, "README.md notebook", "exec"), namespace)
    assert namespace["ax"].get_lines()  # both runs' curves on the user's Axes
    import matplotlib.pyplot as plt

    plt.close(namespace["fig"])


def test_the_pages_compare_example_runs(in_a_copy_of_the_quick_start):
    namespace: dict = {}
    exec(compile(snippet("compare-example"), "docs/notebook.md compare", "exec"), namespace)
    assert namespace["a"].name == "lr 1e-3" and namespace["b"].name == "lr 2e-3"


def test_the_pages_shell_commands_run(in_a_copy_of_the_quick_start):
    import shlex

    from toposig.cli.main import main

    lines = [line.split("#")[0] for line in snippet("plot-cli").splitlines()]
    for line in filter(str.strip, lines):
        argv = shlex.split(line)
        assert argv[0] == "toposig"
        assert main(argv[1:]) == 0, line
    here = in_a_copy_of_the_quick_start
    assert sorted(p.name for p in (here / "compare-results-vs-results-lr2").iterdir()) == [
        "controls_summary.png", "training_curves.png"]
    assert [p.name for p in (here / "figs").iterdir()] == ["perplexity_curves.svg"]


def test_the_pages_measurement_example_runs():
    from conftest import causal_lm
    from matplotlib.figure import Figure as MplFigure

    from toposig.model.training import byte_tokenizer

    ax = MplFigure().subplots()
    texts = [f"text {i}: " + "the quick brown fox " * (2 + i % 3) for i in range(12)]
    namespace = {"toposig": toposig, "model": causal_lm("llama", seed=2), "ax": ax,
                 "tokenizer": byte_tokenizer(), "texts": texts}
    exec(compile(snippet("measurement-example"), "docs/notebook.md measure", "exec"),
         namespace)
    assert ax.get_lines()  # the Betti curves went onto the Axes given


# --- found by review: hostile folders and figure-level artists ------------------------------


def test_plot_refuses_an_out_inside_a_compared_folder(tmp_path, monkeypatch, capsys):
    from toposig.cli.main import main

    copy = tmp_path / "copy"
    copy.symlink_to(RESULTS)
    before = {p.name: p.stat().st_mtime_ns for p in (RESULTS / "plots").iterdir()}
    for out in (RESULTS / "plots", RESULTS, copy / "data" / "x"):
        assert main(["plot", str(RESULTS), "--figures", "perplexity_curves", "--out",
                     str(out)]) == 2
        assert "inside the results folder" in capsys.readouterr().err
    monkeypatch.chdir(RESULTS / "data")  # the default --out is beside the folder, never
    assert main(["plot", str(copy), "--figures", "perplexity_curves"]) == 0  # in the cwd
    assert (tmp_path / "plots-copy" / "perplexity_curves.png").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in (RESULTS / "plots").iterdir()} == before
    assert not (RESULTS / "data" / "plots-copy").exists()


def test_a_single_panel_figure_with_a_figure_legend_keeps_it_in_the_axes_place(results):
    from matplotlib.figure import Figure as MplFigure

    user = MplFigure()
    axes = user.subplots(2, 2)
    for name, ax in (("correlation_heatmap", axes[0, 1]), ("controls_summary", axes[1, 0]),
                     ("topo_vs_spectral_correlations", axes[1, 1])):
        drawn = getattr(results.plot, name)(ax=ax)
        assert drawn in user.subfigs and drawn.legends, name  # the legend is the sub-figure's
    assert user.legends == []  # none on the user's figure, over their other Axes
    assert axes[0, 0] in user.axes


def test_runs_without_the_data_for_a_figure_are_left_out():
    records = [{k: v for k, v in r.items() if k != "layer_features"} for r in entries()]
    fig = ALL_FIGURES["layer_heatmaps"]
    arrays = arrays_reader(RESULTS)
    assert plot_compared(fig, [RunData("bare", records, {}, arrays)]) is None
    both = plot_compared(fig, [RunData("bare", records, {}, arrays),
                               RunData("full", entries(), {}, arrays)])
    assert both is not None and both.subfigs == []  # only the run that has layers: alone


def test_layer_heatmaps_of_two_runs_sit_side_by_side_with_every_model(results):
    fig = results.plot.layer_heatmaps(other=toposig.open(RESULTS, name="b"))
    assert [s.get_suptitle().split("\n")[0] for s in fig.subfigs] == ["results", "b"]


def test_a_records_figure_does_not_compute_the_statistics(tmp_path, caplog):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "all_results.json").write_bytes(
        (RESULTS / "data" / "all_results.json").read_bytes())  # no statistics, no arrays
    res = toposig.open(tmp_path)
    assert res.plot.perplexity_curves() is not None
    assert "statistics" not in vars(res) and "computed in memory" not in caplog.text


def test_stored_statistics_are_used_only_when_sound(tmp_path):
    folder = tmp_path / "r"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "all_results.json").write_bytes(
        (RESULTS / "data" / "all_results.json").read_bytes())
    stored = json.loads((RESULTS / "data" / "statistics.json").read_text())

    def problem(statistics, **options) -> str | None:
        (folder / "data" / "statistics.json").write_text(json.dumps(statistics))
        return toposig.open(folder, **options)._stored_problem()

    assert problem(stored) is None
    assert problem([1]) == "it is damaged (the statistics hold a list, not a JSON object)"
    assert "correlations" in problem({**stored, "correlations": "oops"})
    assert "not loss" in problem(stored, target="loss")
    assert toposig.open(folder, fresh=True).fresh


def test_names_and_others_given_as_paths(results, tmp_path):
    assert toposig.open(RESULTS / "data" / "..").name == "results"
    (tmp_path / "again").symlink_to(RESULTS)
    fig = results.plot.perplexity_curves(other=tmp_path / "again")
    labels = {line.get_label() for line in fig.axes[0].get_lines()}
    assert "again: tiny-h16-l1" in labels and "results: tiny-h16-l1" in labels


# --- the page run as a notebook, in a real Jupyter kernel (issue 37, rows 3 and 5) -----------

# The page's examples in order, each a cell, and the images each shows: a figure drawn on a
# pyplot Axes once (pyplot shows it at the end of the cell), a figure toposig made once
# when it is the cell's value, and nothing for a figure assigned or drawn on an Axes of a
# figure pyplot does not hold.
KERNEL_CELLS = (("plain", 1), ("open-example", 1), ("display-example", 1), ("axes-example", 1),
                ("figure-given", 1),
                ("typed-example", 0), ("compare-example", 1), ("setup", 0),
                ("measurement-example", 1))
# First, a kernel that has not loaded pyplot (so no inline display is set up): a figure
# toposig made still shows as an image, not as "<Figure size ... with 1 Axes>".
KERNEL_PLAIN = """
import sys
import toposig
assert "matplotlib.pyplot" not in sys.modules
toposig.open("results").plot.perplexity_curves()
"""
# A pyplot Figure given as ax: shown once by pyplot, not a second time as the value (a
# review found it twice)
KERNEL_FIGURE = """
f = plt.figure(figsize=(6, 4))
res.plot.perplexity_curves(ax=f)
"""
KERNEL_SETUP = """
from matplotlib.figure import Figure
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
from toposig.model.training import byte_tokenizer

model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=264, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=64))
tokenizer = byte_tokenizer()
texts = [f"text {i}: " + "the quick brown fox " * (2 + i % 3) for i in range(12)]
ax = Figure().subplots()
"""


def test_the_page_runs_in_a_jupyter_kernel_with_one_image_per_figure(
        in_a_copy_of_the_quick_start):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    own = {"plain": KERNEL_PLAIN, "setup": KERNEL_SETUP, "figure-given": KERNEL_FIGURE}
    cells = [nbformat.v4.new_code_cell(own[name] if name in own else snippet(name))
             for name, _ in KERNEL_CELLS]
    notebook = nbformat.v4.new_notebook(cells=cells)
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin",
           "HOME": str(in_a_copy_of_the_quick_start), "HF_HUB_OFFLINE": "1"}
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(in_a_copy_of_the_quick_start)}})
    client.execute(env=env)  # a cell that raises fails the test, naming it
    for (name, images), cell in zip(KERNEL_CELLS, notebook.cells, strict=True):
        outputs = cell["outputs"]
        shown = [o for o in outputs if "image/png" in o.get("data", {})]
        assert len(shown) == images, (name, [o.get("data", o.get("text")) for o in outputs])
        text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                       for o in outputs if o not in shown)
        assert "<Figure size" not in text, (name, text)  # a figure shown as its repr
        assert "IProgress" not in text and "Warning" not in text, (name, text)
    axes_value = next(o for o in notebook.cells[3]["outputs"]
                      if o["output_type"] == "execute_result")
    assert axes_value["data"]["text/plain"].startswith("<Axes")  # the Axes, not the figure
