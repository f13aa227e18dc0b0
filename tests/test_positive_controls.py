"""Positive controls: a ground truth stored with each checkpoint reaches the records, is
declared the quality, and the analysis places every feature's change-point against its
event; the grokking task trains, measures its own inputs and is analysed end to end."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from conftest import records_of, weights_at_thread_counts

import analyze_results
import run_experiments
from toposig.analysis import ground_truth as G
from toposig.analysis.compute import compute_statistics
from toposig.families.registry import merge_family_records
from toposig.model import modular_addition as M
from toposig.model import training as T
from toposig.model.presets import load_preset
from toposig.records import (
    GroundTruth,
    Record,
    RecordError,
    ground_truth_problem,
)
from toposig.report.summary import summary_markdown
from toposig.sources.checkpoint_files import trainer_state_ground_truth

TRUTH = {"signal": "test_accuracy", "value": 0.5, "event": "rise", "levels": [0.5, 0.9]}


def test_a_ground_truth_is_validated_where_records_are_read():
    assert ground_truth_problem(None) is None
    assert ground_truth_problem(TRUTH) is None
    assert ground_truth_problem({k: v for k, v in TRUTH.items() if k != "levels"}) is None
    for bad, why in [({**TRUTH, "signal": "loss"}, "signal"),
                     ({**TRUTH, "signal": "../x"}, "signal"),
                     ({**TRUTH, "value": float("nan")}, "value"),
                     ({**TRUTH, "value": True}, "value"),
                     ({**TRUTH, "event": "jump"}, "event"),
                     ({**TRUTH, "levels": []}, "levels"),
                     ({**TRUTH, "levels": ["a"]}, "levels"),
                     ({**TRUTH, "extra": 1}, "fields"),
                     ({**TRUTH, "mechanism": {}}, "not an object of signals"),
                     ({**TRUTH, "mechanism": {"m": 1.0}}, "not an object of value"),
                     ({**TRUTH, "mechanism": {"m": {"value": 1, "event": "rise",
                                                    "signal": "x"}}}, "not an object"),
                     ({**TRUTH, "mechanism": {"test_accuracy": {"value": 1,
                                                                "event": "rise"}}},
                      "named as the signal"),
                     ({**TRUTH, "mechanism": {"step": {"value": 1, "event": "rise"}}},
                      "mechanism signal named 'step'"),
                     ({**TRUTH, "mechanism": {"m": {"value": "x", "event": "rise"}}},
                      "mechanism value"),
                     ({**TRUTH, "mechanism": {"m": {"value": 1, "event": "rise",
                                                    "levels": []}}}, "mechanism levels"),
                     ("0.5", "object")]:
        assert why in ground_truth_problem(bad), bad
    record = {"schema_version": 3, "status": "ok", "model": "m", "model_label": "m",
              "step": 1, "source": "local", "location": "m/step1", "revision": None,
              "checkpoint_fingerprint": None, "features": {}, "ground_truth": TRUTH}
    assert Record.from_json(record).ground_truth == GroundTruth("test_accuracy", 0.5, "rise",
                                                                (0.5, 0.9))
    # a mechanism signal not finite where it was measured (written as null) is kept, NaN
    nulled = {**TRUTH, "mechanism": {"copying": {"value": None, "event": "rise"}}}
    assert ground_truth_problem(nulled) is None
    assert math.isnan(Record.from_json({**record, "ground_truth": nulled})
                      .ground_truth.mechanism[0].value)
    assert "value None" in ground_truth_problem({**TRUTH, "value": None})
    with pytest.raises(RecordError, match="ground-truth event"):
        Record.from_json({**record, "ground_truth": {**TRUTH, "event": "jump"}})


def test_the_trainer_state_gives_the_ground_truth_and_a_bad_one_is_left_out(tmp_path, caplog):
    (tmp_path / "trainer_state.json").write_text(json.dumps({"ground_truth": TRUTH}))
    assert trainer_state_ground_truth(tmp_path) == TRUTH
    (tmp_path / "trainer_state.json").write_text(json.dumps(
        {"ground_truth": {**TRUTH, "signal": "step"}}))
    with caplog.at_level(logging.WARNING):
        assert trainer_state_ground_truth(tmp_path) is None
    assert "ground_truth is left out" in caplog.text
    (tmp_path / "trainer_state.json").write_text("{not json")
    assert trainer_state_ground_truth(tmp_path) is None
    assert trainer_state_ground_truth(tmp_path / "none") is None


def test_the_aggregate_entry_declares_the_signal_its_quality():
    weights = {"schema_version": 3, "status": "ok", "family": "weights", "model": "m",
               "model_label": "m", "step": 3, "source": "local", "location": "m/step3",
               "revision": None, "checkpoint_fingerprint": None, "ground_truth": TRUTH,
               "features": {"np_mean": 0.4}, "checkpoint_loss": 2.0}
    entry = merge_family_records({"weights": weights})
    assert entry["test_accuracy"] == 0.5 and entry["ground_truth"] == TRUTH
    assert entry["quality"] == {"column": "test_accuracy", "higher_is_better": True}
    assert entry["loss"] == 2.0


def hand_built(n_runs: int = 3, steps=tuple(range(0, 101, 10))) -> tuple[list[dict], dict]:
    """Runs whose accuracy jumps from 0.1 to 1 between two checkpoints (run k at step
    40 + 10 k); ``h1_total_persistence`` jumps at the same checkpoint, ``rankme`` two
    checkpoints earlier, ``np_mean`` never moves, and the loss falls with the accuracy.
    Each is an aggregate entry as a run writes it: the signal is its declared quality."""
    records, events = [], {}
    for k in range(n_runs):
        label, jump = f"g-seed{k}", 40 + 10 * k
        events[label] = jump
        for step in steps:
            after = step >= jump
            value = 1.0 if after else 0.1 + step / 1000
            records.append({
                "schema_version": 3, "status": "ok", "model": label, "model_label": label,
                "step": step, "source": "local", "location": f"{label}/step{step}",
                "revision": None, "checkpoint_fingerprint": None, "seed": k,
                "seed_group": "g", "loss": 0.2 if after else 3.0,
                "ground_truth": {**TRUTH, "value": value}, "test_accuracy": value,
                "quality": {"column": "test_accuracy", "higher_is_better": True},
                "features": {"h1_total_persistence": 5.0 if after else 1.0 + step / 500,
                             "rankme": 9.0 if step >= jump - 20 else 2.0,
                             "np_mean": 0.3}})
    return records, events


def test_each_feature_is_placed_against_the_event_it_was_built_around():
    records, events = hand_built()
    out = G.positive_control_analysis(records_of(records),
                                      ["h1_total_persistence", "rankme", "np_mean"])
    assert (out["signal"], out["event"], out["events"]) == ("test_accuracy", "rise",
                                                            ["0.5", "0.9"])
    for label, jump in events.items():
        assert out["runs"][label]["event_steps"] == {"0.5": jump, "0.9": jump}
    h1 = out["alignment"]["h1_total_persistence"]["0.5"]
    assert h1["leads"] == [0, 0, 0] and h1["hits"] == [True] * 3 and h1["hit_rate"] == 1.0
    # 3 of the 8 possible change-points (2 checkpoints a side of 11)
    assert h1["chance"] == pytest.approx(3 / 8)
    assert h1["hit_p"] == pytest.approx((3 / 8) ** 3)
    # Holm over the two features that move (the references are no test): twice its p
    assert h1["hit_holm_p"] == pytest.approx(min(1.0, 2 * (3 / 8) ** 3))
    assert "hit_holm_p" not in out["alignment"]["loss"]["0.5"]
    # the events are one checkpoint apart (40, 50, 60): each change-point also hits its
    # neighbours' events, so handing the events to the runs in another order often does
    # as well (3 of the 6 orders give three hits)
    assert h1["swapped_hit_rate"] == pytest.approx(4 / 6)
    assert h1["permutation_p"] == pytest.approx(3 / 6)
    rankme = out["alignment"]["rankme"]["0.5"]
    assert rankme["leads"] == [20, 20, 20] and rankme["apart"] == [2, 2, 2]
    assert rankme["hit_rate"] == 0.0 and rankme["hit_p"] == 1.0
    assert rankme["median_lead"] == 20
    assert "np_mean" not in out["alignment"]  # never moves: no change-point
    assert out["alignment"]["loss"]["0.5"]["hits"] == [True] * 3
    assert G.positive_control_analysis(records_of(
        [{k: v for k, v in r.items() if k != "ground_truth"} for r in records]), []) == {}
    # a run of another task in the same folder is named, not mixed in
    other = [{**r, "model_label": "x", "ground_truth": {**r["ground_truth"], "signal": "score"}}
             for r in records if r["model_label"] == "g-seed0"]
    mixed = G.positive_control_analysis(records_of(records + other), ["h1_total_persistence"])
    assert mixed["runs_left_out"] == ["x"] and list(mixed["runs"]) == list(events)


def test_the_figure_draws_the_best_placed_features_with_each_runs_event_and_change_point():
    from toposig.report.plots_controls import CURVES, plot_positive_control

    records, events = hand_built()
    section = G.positive_control_analysis(records_of(records),
                                          ["h1_total_persistence", "rankme", "np_mean"])
    fig = plot_positive_control.plot(records, {"positive_controls": section})
    curves = [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith(
        ("h1_total_persistence", "rankme"))]
    # the references are not repeated below; the features follow the alignment's ranking
    assert [ax.get_title() for ax in curves] == ["h1_total_persistence (hits 100%)",
                                                 "rankme (hits 0%)"]
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 2 + 2 < 2 + CURVES
    h1 = curves[0]
    dashed = sorted(line.get_xdata()[0] for line in h1.lines if line.get_linestyle() == "--")
    dots = sorted(line.get_xdata()[0] for line in h1.lines if line.get_marker() == "o")
    assert dashed == sorted(events.values()) == dots  # hit at every run's event
    rankme = [line.get_xdata()[0] for line in curves[1].lines if line.get_marker() == "o"]
    assert sorted(rankme) == sorted(e - 20 for e in events.values())  # two checkpoints early
    for line in h1.lines:  # each run's curve scaled to its own range
        if line.get_linestyle() == "-" and line.get_marker() in ("None", None, ""):
            y = np.asarray(line.get_ydata(), dtype=float)
            assert y.min() == 0.0 and y.max() == 1.0


def with_mechanism(records: list[dict]) -> list[dict]:
    """:func:`hand_built`'s runs with two signals of the mechanism: ``circuit`` rises
    from 0 to 1 one checkpoint before each run's event, ``memorised`` reaches 0.99 at
    step 20 in every run."""
    out = []
    for r in records:
        k = int(r["model_label"].removeprefix("g-seed"))
        circuit = 1.0 if r["step"] >= 30 + 10 * k else 0.0
        memorised = 0.995 if r["step"] >= 20 else 0.5
        out.append({**r, "ground_truth": {**r["ground_truth"], "mechanism": {
            "circuit": {"value": circuit, "event": "rise", "levels": [0.5]},
            "memorised": {"value": memorised, "event": "rise", "levels": [0.99]}}}})
    return out


def test_the_signals_of_the_mechanism_have_events_and_a_head_to_head_of_their_own():
    from toposig.records.positive_controls import PositiveControls

    records = with_mechanism(hand_built(5)[0])
    assert ground_truth_problem(records[0]["ground_truth"]) is None
    assert [m.signal for m in Record.from_json(records[0]).ground_truth.mechanism] == [
        "circuit", "memorised"]
    out = G.positive_control_analysis(records_of(records), ["rankme", "h1_total_persistence"])
    assert out["events"] == ["0.5", "0.9"]  # the signal's own
    assert out["mechanism"] == {
        "circuit": {"event": "rise", "levels": [0.5], "events": ["circuit 0.5"]},
        "memorised": {"event": "rise", "levels": [0.99], "events": ["memorised 0.99"]}}
    run = out["runs"]["g-seed2"]
    assert run["event_steps"] == {"0.5": 60, "0.9": 60, "circuit 0.5": 50,
                                  "memorised 0.99": 20}
    assert run["mechanism"]["circuit"][:7] == [0.0] * 5 + [1.0] * 2
    # each feature against the mechanism's events: rankme, two checkpoints before the
    # accuracy, is one before the circuit
    duel = out["head_to_head"]["circuit 0.5"]
    assert duel["rankme"]["leads"] == [1] * 5 and duel["h1_total_persistence"]["leads"] == \
        [-1] * 5
    assert duel["circuit"]["distance"] == 0 and duel["circuit"]["p_adjusted"] == \
        duel["circuit"]["p"]  # the mechanism's own check, alone
    # every run memorises at step 20: the event orders are all alike, nothing can pass
    assert out["head_to_head"]["memorised 0.99"]["memorised"]["p"] == 1.0
    assert "hit_holm_p" not in out["alignment"]["circuit"]["0.5"]  # a reference
    typed = PositiveControls.from_json(out)
    assert typed.references == ("test_accuracy", "circuit", "memorised", "loss")
    assert typed.every_event == ("0.5", "0.9", "circuit 0.5", "memorised 0.99")
    assert typed.runs["g-seed2"].mechanism["memorised"][2] == 0.995
    text = summary_markdown({"positive_controls": out}, records_of(records))
    assert "| Run | Seed | Step reaching 0.5 | Step reaching 0.9 | Step `circuit` reaches " \
           "0.5 | Step `memorised` reaches 0.99 | Final test_accuracy | Final circuit | " \
           "Final memorised |" in text
    assert "| `circuit` | the ground truth's mechanism |" in text.split("### F3.")[1]


def test_runs_are_kept_by_the_ground_truth_most_checkpoints_state():
    records = with_mechanism(hand_built(3)[0])
    # the first record read states no mechanism (written before its run's): that run
    # is named, the others are analysed, not all left out
    odd = {**records[0], "ground_truth": TRUTH}
    out = G.positive_control_analysis(records_of([odd, *records[1:]]), ["rankme"])
    assert out["runs_left_out"] == ["g-seed0"] and list(out["runs"]) == ["g-seed1", "g-seed2"]
    assert list(out["mechanism"]) == ["circuit", "memorised"]
    # every run's step 0 so: no run is left, and the section says why
    mixed = [{**r, "ground_truth": TRUTH} if r["step"] == 0 else r for r in records]
    out = G.positive_control_analysis(records_of(mixed), ["rankme"])
    assert out["runs_left_out"] == ["g-seed0", "g-seed1", "g-seed2"]
    assert "more than one ground truth" in out["reason"] and "runs" not in out
    text = summary_markdown({"positive_controls": out}, records_of(mixed))
    assert "more than one ground truth" in text


def test_the_head_to_head_figure_draws_every_feature_s_leads_run_by_run():
    from toposig.records.positive_controls import PositiveControls
    from toposig.report.plots_controls import has_head_to_head, plot_head_to_head

    records, _ = hand_built(5)
    section = G.positive_control_analysis(records_of(records),
                                          ["h1_total_persistence", "rankme", "np_mean"])
    stats = {"positive_controls": section}
    assert has_head_to_head(records, stats, None)
    fig = plot_head_to_head.plot(records, stats)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("Event")]
    assert [ax.get_title().split(":")[0] for ax in panels] == ["Event 0.5", "Event 0.9"]
    labels = [t.get_text() for t in panels[0].get_yticklabels()]
    # the ground truth first, then by corrected p: the two at the event starred
    assert labels[0].startswith("test_accuracy") and labels[-1].startswith("rankme")
    assert {lab.split()[1] for lab in labels if lab.startswith("* ")} == {
        "loss", "h1_total_persistence"}
    rankme = [line.get_xdata()[0] for line in panels[0].lines
              if line.get_marker() == "o" and abs(line.get_ydata()[0] - 3) < 0.5]
    assert rankme == [2] * 5  # two checkpoints early in every run
    empty = {"positive_controls": {**section, "head_to_head": {}}}
    assert not has_head_to_head(records, empty, None)
    assert PositiveControls.from_json(section).head_to_head["0.5"]["rankme"].leads == (2,) * 5


def test_events_of_a_falling_signal_and_without_levels():
    steps = [0, 10, 20, 30, 40]
    assert G.event_steps(steps, [0.0, -0.1, -2.0, -2.1, -2.2], "fall") == {"halfway": 20}
    assert G.event_steps(steps, [0.0, 0.2, 0.4, 0.95, 1.0], "rise", [0.5, 0.9]) == {
        "0.5": 30, "0.9": 30}
    assert G.event_steps(steps, [3.0, 2.0, 1.0, 0.5, 0.4], "fall", [1.0]) == {"1": 20}
    assert G.change_point(steps, [1.0] * 5) is None
    with pytest.raises(ValueError, match="rise"):
        G.event_steps(steps, [0.0] * 5, "up")
    # 5 checkpoints: one a side, so the change-point is one of steps 10 to 40
    assert G.chance_hit_rate(steps, 0) == pytest.approx(1 / 4)
    assert G.chance_hit_rate(steps, 20) == pytest.approx(3 / 4)
    assert G.chance_hit_rate(list(range(0, 101, 10)), 40) == pytest.approx(3 / 8)


def test_the_head_to_head_tests_each_feature_s_distance_from_the_event_corrected():
    # five runs, events at steps 40 .. 80: 120 orders of the events, the smallest p 1/120
    records, _ = hand_built(5)
    out = G.positive_control_analysis(records_of(records),
                                      ["h1_total_persistence", "rankme", "np_mean"])
    duel = out["head_to_head"]["0.5"]
    assert out["alpha"] == 0.05 and set(out["head_to_head"]) == {"0.5", "0.9"}
    assert set(duel) == {"test_accuracy", "loss", "h1_total_persistence", "rankme"}
    h1, rankme, truth = duel["h1_total_persistence"], duel["rankme"], duel["test_accuracy"]
    assert h1["distance"] == 0 and h1["leads"] == [0] * 5 and h1["n_runs"] == 5
    assert h1["p"] == pytest.approx(1 / 120) == h1["min_p"]
    # corrected over loss, h1 and rankme: only the true order gives any of them p 1/120
    assert h1["p_adjusted"] == pytest.approx(1 / 120) and h1["detects"]
    # two checkpoints early in every run: a lead of +2, no detection
    assert rankme["leads"] == [2] * 5 and rankme["median_lead"] == 2
    assert rankme["p_adjusted"] > rankme["p"] > 0.05 and not rankme["detects"]
    # the ground truth's own check is tested alone: its corrected p is its p
    assert truth["p_adjusted"] == truth["p"] == pytest.approx(1 / 120)
    # an event that happens in one run only has no head-to-head
    late = [r if r["model_label"] == "g-seed0" or r["ground_truth"]["value"] < 0.5 else
            {**r, "ground_truth": {**r["ground_truth"], "value": 0.4}} for r in records]
    assert G.positive_control_analysis(records_of(late), ["rankme"])["head_to_head"] == {}


def test_the_statistics_and_summary_of_a_positive_control():
    records, _ = hand_built(n_runs=4)
    st = compute_statistics(records, n_bootstrap=50, n_surrogates=20, design_runs=0)
    assert st.positive_controls is not None
    assert st.positive_controls.alignment["h1_total_persistence"]["0.5"].hit_rate == 1.0
    assert st.correlations.target == "test_accuracy"  # the declared quality
    # every run of a positive control is under test: the controls run on every seed
    assert st.controlled is not None and len(st.controlled.per_model) == 4
    text = summary_markdown(st.to_json(), records)
    assert "## Part F. Positive control" in text
    assert "hits above chance (Holm p < 0.05) at the first event: " \
           "`h1_total_persistence`." in text
    left = st.to_json()
    left["positive_controls"] = {**left["positive_controls"], "runs_left_out": ["x"]}
    assert "Left out, as they state another ground truth: `x`." in summary_markdown(left,
                                                                                   records)
    part_f = text.split("## Part F", 1)[1]
    # F3: four runs, 24 orders: the smallest p is 1/24, and the two at the event have it
    f3 = part_f.split("### F3.", 1)[1]
    assert ("Step reaching 0.5: `loss`, `h1_total_persistence` (the smallest p these "
            "runs allow: 0.042).") in f3
    assert "| `rankme` | embedding_spectral | 2 (4); 0.75; 0.75; lead +2 |" in f3
    assert "| `h1_total_persistence` | embedding_topological | 0 (4); 0.042; 0.042 " \
           "**detects**; lead +0 |" in f3
    assert f3.index("| `test_accuracy` |") < f3.index("| `h1_total_persistence` |")
    assert part_f.index("| `test_accuracy` | the ground truth itself | 4 of 4") \
        < part_f.index("| `loss` |") < part_f.index("| `h1_total_persistence` |")


# --- the grokking task -----------------------------------------------------------------


def small(**kw) -> M.ModularConfig:
    base = dict(name="grok-unit", p=17, train_fraction=0.5, hidden=16, layers=1, heads=2,
                steps=20, checkpoint_every=10, lr=3e-3, weight_decay=1.0, warmup=2, seeds=2,
                n_texts=40)
    return M.ModularConfig(**{**base, **kw})


def test_the_task_splits_tokenises_and_refuses_nonsense(tmp_path):
    train, test = M.split(17, 0.3, seed=4)
    assert len(train) + len(test) == 289
    seen_train, seen_test = {tuple(x) for x in train}, {tuple(x) for x in test}
    assert len(seen_train | seen_test) == 289 and not seen_train & seen_test  # the table
    # both orders of a pair on the same side: a memorised (a, b) gives away no (b, a)
    assert all((b, a) in seen_train for a, b in seen_train)
    diagonal = sum(a == b for a, b in seen_train)
    assert (len(train) + diagonal) // 2 == int(0.3 * 17 * 18 // 2)
    assert not np.array_equal(train, M.split(17, 0.3, seed=5)[0])
    tok = M.tokenizer(17)
    assert tok("12 7 =")["input_ids"] == [12, 7, 17]
    x, y = M.inputs(np.array([[12, 7], [16, 16]]), 17)
    assert x.tolist() == [[12, 7, 17], [16, 16, 17]] and y.tolist() == [2, 15]
    c = small()
    assert M.task_texts(c) == M.task_texts(small(seed=9))  # the same inputs for any seed
    assert len(M.task_texts(c)) == 40 and M.task_texts(c)[0].endswith(" =")
    for bad, why in [(dict(p=15), "prime"), (dict(p=13), "at least 17"),
                     (dict(train_fraction=1.0), "train_fraction"),
                     (dict(heads=3), "heads"), (dict(n_texts=0), "n_texts"),
                     (dict(name="../x"), "name"), (dict(lr="fast"), "lr")]:
        with pytest.raises(T.TrainingConfigError, match=why):
            small(**bad)
    path = c.write_inputs(tmp_path / "suite")
    assert path.read_text().splitlines() == M.task_texts(c)
    assert c.write_inputs(tmp_path / "suite") == path  # the same lines: left as is
    with pytest.raises(T.TrainingConfigError, match="other lines"):
        small(n_texts=30).write_inputs(tmp_path / "suite")


def test_the_grokking_preset_loads_and_suites_say_what_it_is():
    c = load_preset("grokking")
    assert isinstance(c, M.ModularConfig) and c.seeds >= 5
    assert c.run_names()[0] == "grokking-seed0"
    with pytest.raises(T.TrainingConfigError, match="modular_addition task"):
        T.load_suite_config("grokking")
    assert isinstance(load_preset("tiny"), T.SuiteConfig)
    assert T.with_seeds(c, 7).run_names()[-1] == "grokking-seeds7-seed6"


def test_a_small_grokking_run_trains_measures_and_analyses(tmp_path):
    preset = tmp_path / "grok-unit.json"
    preset.write_text(json.dumps(small().to_dict()))
    out = tmp_path / "res"
    assert run_experiments.main(["--preset", str(preset), "--suite-dir", str(tmp_path / "runs"),
                                 "--out", str(out), "--no-progress"]) == 0
    suite = tmp_path / "runs" / "grok-unit"
    state = json.loads((suite / "grok-unit-seed1" / "step10" / "trainer_state.json").read_text())
    assert state["ground_truth"]["value"] == state["test_accuracy"]
    assert (state["seed"], state["seed_group"]) == (1, "grok-unit")
    # the mechanism: Nanda et al.'s measures from the logits of every pair, with the key
    # frequencies of the run's last checkpoint
    from transformers import GPTNeoXForCausalLM

    from toposig.features import modular_fourier as MF

    def logits_of(step: int) -> np.ndarray:
        folder = suite / "grok-unit-seed1" / f"step{step}"
        return M.all_logits(GPTNeoXForCausalLM.from_pretrained(folder), 17)

    key = MF.key_frequencies(logits_of(20))
    assert state["key_frequencies"] == list(key) and key
    train_pairs, _ = M.split(17, 0.5, 1)
    train = np.zeros((17, 17), dtype=bool)
    train[train_pairs[:, 0], train_pairs[:, 1]] = True
    at10 = logits_of(10)
    mechanism = state["ground_truth"]["mechanism"]
    assert mechanism["train_accuracy"] == {"value": state["train_accuracy"], "event": "rise",
                                           "levels": [M.TRAIN_LEVEL]}
    assert mechanism["restricted_loss"]["value"] == pytest.approx(
        MF.restricted_loss(at10, key), rel=1e-9)
    assert mechanism["excluded_loss"]["value"] == pytest.approx(
        MF.excluded_loss(at10, key, train), rel=1e-9)
    # the held-out accuracy the trainer states is the one these logits give
    a, b = np.meshgrid(np.arange(17), np.arange(17), indexing="ij")
    right = at10.argmax(axis=2) == (a + b) % 17
    assert state["train_accuracy"] == pytest.approx(right[train].mean())
    entries = json.loads((out / "data" / "all_results.json").read_text())
    assert len(entries) == 6 and all(e["ground_truth"]["signal"] == "test_accuracy"
                                     for e in entries)
    assert all(e["n_texts"] == 40 for e in entries if "n_texts" in e)
    assert analyze_results.main(["--out", str(out), "--design-runs", "0"]) == 0
    stats = json.loads((out / "data" / "statistics.json").read_text())
    assert stats["target"] == "test_accuracy"
    assert list(stats["positive_controls"]["runs"]) == ["grok-unit-seed0", "grok-unit-seed1"]
    assert list(stats["positive_controls"]["mechanism"]) == [
        "train_accuracy", "restricted_loss", "excluded_loss"]
    assert len(stats["controlled"]["per_model"]) == 2
    assert "## Part F. Positive control" in (out / "summary.md").read_text()
    assert (out / "plots" / "positive_control.png").is_file()
    # a task preset measures its own inputs
    assert run_experiments.main(["--preset", str(preset), "--suite-dir", str(tmp_path / "runs"),
                                 "--out", str(out), "--texts", str(preset)]) == 2
    # the same seed trains the same run
    with T.torch_threads(T.TRAIN_THREADS):  # as the suite trains, on any core count
        again = M.train_run(small(), 1, tmp_path / "again", M.tokenizer(17), progress=False)
    done = json.loads((suite / "grok-unit-seed1" / "done.json").read_text())
    assert again["final_test_accuracy"] == done["final_test_accuracy"]
    import toposig
    from toposig.report.style import subplots

    fig, (left, right) = subplots(1, 2)
    drawn = toposig.open(out).plot.positive_control(ax=right)
    assert drawn.get_figure(root=True) is fig and not left.has_data()


def test_the_loss_trained_is_the_models_own_and_one_split_gives_the_llc_its_lines(tmp_path):
    import torch
    from transformers import GPTNeoXForCausalLM

    c = small(split_seed=3)
    assert np.array_equal(c.split_of(0)[0], c.split_of(1)[0])  # one split, other inits
    assert not np.array_equal(small().split_of(0)[0], small().split_of(1)[0])
    assert small().llc_settings(tmp_path / "per-seed") is None  # no one training set
    with pytest.raises(T.TrainingConfigError, match="split_seed"):
        small(split_seed=-1)
    # the loss trained: what the model returns with every label but the answer masked
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(M.model_config(c))
    x, y = M.inputs(c.split_of(0)[0], c.p)
    labels = torch.full((len(x), 4), -100)
    labels[:, -1] = y
    with torch.no_grad():
        own = model(input_ids=torch.cat([x, y[:, None]], 1), labels=labels).loss
        assert float(M.answer_loss(model, x, y)) == pytest.approx(float(own), rel=1e-6)
        assert M.evaluate(model, x, y, c.p)[0] == pytest.approx(float(own), rel=1e-6)
    # run --preset samples the LLC on the training lines, their last token's loss alone
    preset = tmp_path / "grok-one.json"
    preset.write_text(json.dumps(small(split_seed=3, seeds=1).to_dict()))
    out, runs = tmp_path / "res", tmp_path / "runs"
    assert run_experiments.main([
        "--preset", str(preset), "--suite-dir", str(runs), "--out", str(out),
        "--no-progress", "--signatures", "llc", "--llc-windows", "8", "--llc-batch", "4",
        "--llc-chains", "1", "--llc-draws", "2"]) == 0
    lines = (runs / "grok-unit" / M.TRAIN_FILE).read_text().splitlines()
    assert lines == [f"{a} {b} = {(a + b) % 17}" for a, b in c.split_of(0)[0]]
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["llc_settings"]["objective"] == "answer"
    assert config["llc_settings"]["texts_file"] == str(runs / "grok-unit" / M.TRAIN_FILE)
    record = json.loads(next((out / "records").rglob("step000020.json")).read_text())
    assert record["settings"]["objective"] == "answer"
    from toposig.model.loss_probes import answer_windows

    ids = answer_windows(M.tokenizer(17), lines, 8, seed=42)  # the run's seed
    trained = GPTNeoXForCausalLM.from_pretrained(runs / "grok-unit" / "grok-unit-seed0" / "step20")
    with torch.no_grad():
        sampled = float(M.answer_loss(trained, ids[:, :-1], ids[:, -1]))
    assert record["features"]["llc_init_loss"] == pytest.approx(sampled, rel=1e-5)
    # --llc-objective answer alone samples the same lines; --llc-texts names others
    other = tmp_path / "other.txt"
    other.write_text("".join(f"{ln}\n" for ln in lines[:8]))
    for extra, texts in [(["--llc-objective", "answer"], runs / "grok-unit" / M.TRAIN_FILE),
                         (["--llc-objective", "answer", "--llc-texts", str(other)], other)]:
        again = tmp_path / f"res-{len(extra)}"
        assert run_experiments.main([
            "--preset", str(preset), "--suite-dir", str(runs), "--out", str(again),
            "--no-progress", "--signatures", "llc", "--llc-windows", "8", "--llc-batch",
            "4", "--llc-chains", "1", "--llc-draws", "2", *extra]) == 0
        settings = json.loads((again / "data" / "config.json").read_text())["llc_settings"]
        assert settings["texts_file"] == str(texts)


def test_train_trains_a_task_preset_and_refuses_to_measure_it_live(tmp_path, capsys):
    from toposig.cli import train

    preset = tmp_path / "grok-unit.json"
    preset.write_text(json.dumps(small(seeds=1, steps=10).to_dict()))
    runs = str(tmp_path / "runs")
    assert train.main(["--preset", str(preset), "--suite-dir", runs, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "grok-unit-seed0" in out and "final test_accuracy" in out
    assert (tmp_path / "runs" / "grok-unit" / "inputs.txt").is_file()
    assert train.main(["--preset", str(preset), "--suite-dir", runs, "--no-progress",
                       "--measure-out", str(tmp_path / "live")]) == 2
    assert "is a task" in capsys.readouterr().err
    assert not (tmp_path / "live").exists()
    # the suite folder of another config of the same name is refused, nothing written
    preset.write_text(json.dumps(small(seeds=1, steps=10, lr=1e-3).to_dict()))
    assert train.main(["--preset", str(preset), "--suite-dir", runs, "--no-progress"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_the_docs_ground_truth_is_one_and_the_readme_commands_parse():
    """docs/analysis.md's example object is a sound ground truth, and its
    positive-control block parses with the commands' own parsers and names the preset."""
    import re
    import shlex
    from pathlib import Path

    from toposig.cli.analyze import build_parser as analyze_parser
    from toposig.cli.run import build_parser as run_parser

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "analysis.md").read_text(encoding="utf-8")
    example = re.search(r"```json\n(.*?)```", doc.split("## Positive controls", 1)[1], re.S)
    truth = json.loads("{" + example.group(1).strip() + "}")["ground_truth"]
    assert ground_truth_problem(truth) is None
    readme = doc
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
                 if "--preset grokking" in b)
    run_line, analyze_line = [ln.split("#")[0] for ln in block.splitlines() if ln.strip()]
    args = run_parser().parse_args(shlex.split(run_line)[2:])
    assert isinstance(load_preset(args.preset), M.ModularConfig)
    assert analyze_parser().parse_args(shlex.split(analyze_line)[2:]).results == args.out


def test_a_grokking_run_is_the_same_at_any_thread_count(tmp_path):
    """Issue 59: a run trains at one torch thread whatever the caller's count (at two, the
    float sums of this shape come in another order, and 60 steps already give other
    weights), and the caller's count is restored."""
    c = small(p=59, train_fraction=0.4, hidden=64, heads=4, steps=60, checkpoint_every=60,
              warmup=10, seeds=1)
    digests = weights_at_thread_counts(c, tmp_path, "grok-unit-seed0/step60")
    assert digests[0] == digests[1]
