"""The induction-head positive control: its in-context score on hand-built models whose
score is known, its data, its attention-only model, and a small run trained, measured
and analysed end to end."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import weights_at_thread_counts

import analyze_results
import run_experiments
from toposig.analysis import ground_truth as G
from toposig.model import induction as I  # noqa: E741 - the task's module, as M is grokking's
from toposig.model import training as T
from toposig.model.presets import is_task, load_preset


def small(**kw) -> I.InductionConfig:
    base = dict(name="ind-unit", hidden=16, layers=2, heads=2, context=16, batch_size=4,
                block_min=2, block_max=6, steps=20, checkpoint_every=10, warmup=2,
                probe_sequences=8, probe_length=4, eval_windows=4, seeds=2, n_texts=20)
    return I.InductionConfig(**{**base, **kw})


class Copier(torch.nn.Module):
    """A model that is one induction head: at each position it attends to the token after
    the previous occurrence of the current token and predicts it; with no earlier
    occurrence, every token is equally likely."""

    def __init__(self, vocab: int, confidence: float = 30.0):
        super().__init__()
        self.vocab, self.confidence = vocab, confidence

    def forward(self, input_ids: torch.Tensor):
        n, t = input_ids.shape
        logits = torch.zeros(n, t, self.vocab)
        for i in range(n):
            for pos in range(t):
                earlier = (input_ids[i, :pos] == input_ids[i, pos]).nonzero().flatten()
                if len(earlier):
                    logits[i, pos, input_ids[i, earlier[-1] + 1]] = self.confidence
        return SimpleNamespace(logits=logits)


def test_a_copying_head_scores_minus_log_vocabulary_and_a_uniform_model_zero():
    c = small(probe_sequences=32, probe_length=8)
    vocab, length = 264, 8
    rng = np.random.default_rng(0)
    blocks = np.stack([rng.choice(I.ALPHABET, size=length, replace=False) for _ in range(32)])
    distinct = torch.from_numpy(np.concatenate([blocks, blocks], 1).astype(np.int64))
    copier = Copier(vocab)
    # every first-copy token is new (loss log 264), every second-copy one copied (loss ~0);
    # to float32's precision
    assert I.in_context_score(copier, distinct) == pytest.approx(-math.log(vocab), abs=1e-6)
    uniform = Copier(vocab, confidence=0.0)
    assert I.in_context_score(uniform, distinct) == pytest.approx(0.0, abs=1e-12)
    sequences = I.probe(c)  # blocks drawn with replacement: a copier still scores far below 0
    assert I.in_context_score(copier, sequences) < -2.0
    # the task's score is the analysis's definition, on any model's token losses
    model = __import__("transformers").GPTNeoXForCausalLM(I.model_config(c))
    losses = I.token_losses(model, sequences)
    assert I.in_context_score(model, sequences) == pytest.approx(
        G.induction_score(losses, c.probe_length), rel=1e-12)
    assert I.in_context_score(copier, sequences) == pytest.approx(
        G.induction_score(I.token_losses(copier, sequences), c.probe_length), rel=1e-12)


def test_every_window_holds_a_random_block_twice_and_the_probe_is_fixed():
    c = small(context=32, block_min=4, block_max=16)
    windows = torch.full((64, c.context + 1), 32, dtype=torch.long)  # spaces
    out = I.repeat_blocks(windows.clone(), c, torch.Generator().manual_seed(3))
    letters = set(I.ALPHABET.tolist())
    lengths = []
    for row in out.tolist():
        placed = [i for i, b in enumerate(row) if b in letters]
        n = len(placed) // 2
        first, second = placed[:n], placed[n:]
        assert 2 * n == len(placed) and c.block_min <= n <= c.block_max
        assert first == list(range(first[0], first[0] + n))  # contiguous blocks
        assert second == list(range(second[0], second[0] + n))
        assert [row[i] for i in first] == [row[i] for i in second]
        lengths.append(n)
    assert min(lengths) < max(lengths)  # the length varies, so a fixed look-back does not help
    again = I.repeat_blocks(windows.clone(), c, torch.Generator().manual_seed(3))
    assert torch.equal(out, again)
    p = I.probe(c)
    assert p.shape == (c.probe_sequences, 2 * c.probe_length)
    assert torch.equal(p[:, :c.probe_length], p[:, c.probe_length:])
    assert torch.equal(p, I.probe(small(context=32, seed=7)))  # the same for every seed
    assert set(p.flatten().tolist()) <= letters


def test_the_attention_only_model_keeps_zero_mlps_through_training():
    torch.manual_seed(0)
    model = __import__("transformers").GPTNeoXForCausalLM(I.model_config(small()))
    trained = I.attention_only(model)
    mlp = [p for layer in model.gpt_neox.layers for p in layer.mlp.parameters()]
    assert mlp and all(not p.requires_grad and not p.any() for p in mlp)
    assert {id(p) for p in trained}.isdisjoint({id(p) for p in mlp})
    opt = torch.optim.AdamW(trained, lr=1e-2, weight_decay=0.1)
    x = torch.randint(0, 256, (4, 9))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    assert all(not p.any() for p in mlp)
    # what the weight family leaves out is exactly the MLP matrices
    import re

    names = [n for n, p in model.named_parameters() if p.dim() == 2]
    left_out = [n for n in names if re.search(I.WEIGHT_EXCLUDE, n)]
    assert left_out and all(".mlp." in n for n in left_out)
    assert len(left_out) == 2 * small().layers


def test_the_config_refuses_nonsense_and_the_preset_is_a_task():
    for bad, why in [(dict(block_max=9), "two blocks"), (dict(block_min=1), "block_min"),
                     (dict(probe_length=9), "probe_length"), (dict(heads=3), "heads"),
                     (dict(val_fraction=1.0), "val_fraction"), (dict(name="a/b"), "name"),
                     (dict(lr="fast"), "lr"), (dict(seeds=0), "seeds")]:
        with pytest.raises(T.TrainingConfigError, match=why):
            small(**bad)
    with pytest.raises(T.TrainingConfigError, match="unknown induction settings"):
        I.InductionConfig.from_dict({"name": "x", "p": 59})
    c = load_preset("induction")
    assert isinstance(c, I.InductionConfig) and is_task(c) and c.seeds >= 5
    assert list(c.WEIGHT_EXCLUDE) == [I.WEIGHT_EXCLUDE] and c.SIGNAL == I.SIGNAL
    assert not is_task(load_preset("tiny"))
    with pytest.raises(T.TrainingConfigError, match="induction task"):
        T.load_suite_config("induction")
    assert I.InductionConfig.from_dict(c.to_dict()) == c


def test_the_inputs_are_text_spans_written_twice(wikitext_dir, tmp_path):
    c = small()
    lines = I.task_texts(c)
    assert len(lines) == c.n_texts and lines == I.task_texts(small(seed=5))
    half = I.INPUT_SPAN
    assert all(len(t) == 2 * half and t[:half] == t[half:] and t == t.strip() for t in lines)
    path = c.write_inputs(tmp_path / "suite")
    assert path.read_text().splitlines() == lines
    with pytest.raises(T.TrainingConfigError, match="other lines"):
        small(n_texts=21).write_inputs(tmp_path / "suite")


def test_a_small_induction_run_trains_measures_and_analyses(wikitext_dir, tmp_path, capsys):
    preset = tmp_path / "ind-unit.json"
    preset.write_text(json.dumps(small().to_dict()))
    out, runs = tmp_path / "res", tmp_path / "runs"
    assert run_experiments.main(["--preset", str(preset), "--suite-dir", str(runs),
                                 "--out", str(out), "--no-progress"]) == 0
    state = json.loads((runs / "ind-unit" / "ind-unit-seed1" / "step10" /
                        "trainer_state.json").read_text())
    truth = state["ground_truth"]
    assert {k: truth[k] for k in ("signal", "value", "event", "levels")} == {
        "signal": "in_context_score", "value": state["in_context_score"], "event": "fall",
        "levels": [-0.5, -1.0]}
    # the mechanism: the best prefix-matching head's scores, as the heads module gives them
    from transformers import GPTNeoXForCausalLM

    from toposig.model.heads import head_scores

    model = GPTNeoXForCausalLM.from_pretrained(runs / "ind-unit" / "ind-unit-seed1" / "step10")
    prefix, copying = head_scores(model.eval(), I.probe(small()), small().probe_length)
    best = np.unravel_index(np.argmax(prefix), prefix.shape)
    assert truth["mechanism"] == {
        "prefix_matching": {"value": pytest.approx(prefix[best], abs=1e-6), "event": "rise",
                            "levels": [I.PREFIX_LEVEL]},
        "copying": {"value": pytest.approx(copying[best], abs=1e-6), "event": "rise",
                    "levels": [I.COPYING_LEVEL]}}
    assert (state["seed"], state["seed_group"]) == (1, "ind-unit")
    entries = json.loads((out / "data" / "all_results.json").read_text())
    assert len(entries) == 6
    assert all(e["ground_truth"]["signal"] == "in_context_score" for e in entries)
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["weight_settings"]["exclude"] == [I.WEIGHT_EXCLUDE]  # the zero MLPs
    weights = [json.loads(f.read_text()) for f in (out / "records").glob("w*/*/*.json")]
    assert len(weights) == 6 and {w["n_matrices"] for w in weights} == {2 * small().layers}
    assert all(np.isfinite(w["features"]["np_mean"]) for w in weights)
    assert analyze_results.main(["--out", str(out), "--design-runs", "0"]) == 0
    stats = json.loads((out / "data" / "statistics.json").read_text())
    assert stats["target"] == "in_context_score"
    assert list(stats["positive_controls"]["runs"]) == ["ind-unit-seed0", "ind-unit-seed1"]
    assert list(stats["positive_controls"]["mechanism"]) == ["prefix_matching", "copying"]
    assert (out / "plots" / "positive_control.png").is_file()
    # the same seed trains the same run
    text = T.load_training_text(small().val_fraction)
    with T.torch_threads(T.TRAIN_THREADS):  # as the suite trains, on any core count
        again = I.train_run(small(), 1, tmp_path / "again", T.byte_tokenizer(), text,
                            progress=False)
    done = json.loads((runs / "ind-unit" / "ind-unit-seed1" / "done.json").read_text())
    assert again["final_in_context_score"] == done["final_in_context_score"]
    # train says what it trained, and the weights of a trained checkpoint have zero MLPs
    from toposig.cli import train

    capsys.readouterr()
    assert train.main(["--preset", str(preset), "--suite-dir", str(runs), "--no-progress"]) == 0
    assert "final in_context_score" in capsys.readouterr().out
    from safetensors.numpy import load_file

    weights = load_file(runs / "ind-unit" / "ind-unit-seed0" / "step20" / "model.safetensors")
    assert not any(np.any(v) for k, v in weights.items() if ".mlp." in k)


def test_the_readme_commands_parse_and_name_the_preset():
    """docs/analysis.md's induction block parses with the commands' own parsers."""
    import re
    import shlex
    from pathlib import Path

    from toposig.cli.analyze import build_parser as analyze_parser
    from toposig.cli.run import build_parser as run_parser

    readme = (Path(__file__).resolve().parents[1] / "docs" / "analysis.md").read_text(
        encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
                 if "--preset induction" in b)
    run_line, analyze_line = [ln.split("#")[0] for ln in block.splitlines() if ln.strip()]
    args = run_parser().parse_args(shlex.split(run_line)[2:])
    assert isinstance(load_preset(args.preset), I.InductionConfig)
    assert analyze_parser().parse_args(shlex.split(analyze_line)[2:]).results == args.out


def test_an_induction_run_is_the_same_at_any_thread_count(wikitext_dir, tmp_path):
    """Issue 59: the suite trains at one torch thread whatever the caller's count, so a
    retrained run has the committed weights on any machine; the count is restored."""
    c = small(hidden=32, context=32, block_max=16, steps=40, checkpoint_every=40, seeds=1,
              batch_size=16)
    digests = weights_at_thread_counts(c, tmp_path, "ind-unit-seed0/step40")
    assert digests[0] == digests[1]


def test_the_llc_samples_windows_of_the_training_context(wikitext_dir, tmp_path):
    """The model has ``context`` positions: ``run --preset`` samples its LLC in windows of
    that many bytes, unless ``--probe-length`` says otherwise."""
    preset = tmp_path / "ind-one.json"
    preset.write_text(json.dumps(small(seeds=1, steps=10, checkpoint_every=10).to_dict()))
    runs = tmp_path / "runs"
    llc = ["--signatures", "llc", "--llc-windows", "8", "--llc-batch", "4", "--llc-chains",
           "1", "--llc-draws", "2"]
    for extra, window in [([], small().context), (["--probe-length", "12"], 12)]:
        out = tmp_path / f"res-{window}"
        assert run_experiments.main(["--preset", str(preset), "--suite-dir", str(runs),
                                     "--out", str(out), "--no-progress", *llc, *extra]) == 0
        settings = json.loads((out / "data" / "config.json").read_text())["llc_settings"]
        assert settings["window"] == window and settings["objective"] == "next_token"
        record = json.loads(next((out / "records").rglob("step000010.json")).read_text())
        assert record["settings"]["window"] == window
