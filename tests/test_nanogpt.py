"""nanoGPT's own checkpoints (issue 26, part 3): ``ckpt.pt`` is a dict with the state dict
under ``model`` (names prefixed ``_orig_mod.`` when the model was compiled), the step as
``iter_num`` and the validation loss as ``best_val_loss``. Both are read; a series with
no quality measure at all is named once before the analysis draws."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from conftest import records_of
from torch import nn

from toposig.analysis.quality import series_without_quality, warn_series_without_quality
from toposig.records import RecordError
from toposig.sources import checkpoint_files as cf
from toposig.sources.checkpoints import resolve_series


class NanoGPT(nn.Module):
    """nanoGPT's ``GPT`` in miniature, with its parameter names: ``transformer.wte``,
    ``wpe``, ``h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}``,
    ``ln_f`` and ``lm_head`` tied to ``wte`` (``bias=False``)."""

    def __init__(self, vocab: int = 64, d: int = 16, block_size: int = 8, layers: int = 2):
        super().__init__()

        def block() -> nn.Module:
            b = nn.Module()
            b.ln_1, b.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
            b.attn, b.mlp = nn.Module(), nn.Module()
            b.attn.c_attn = nn.Linear(d, 3 * d, bias=False)
            b.attn.c_proj = nn.Linear(d, d, bias=False)
            b.mlp.c_fc = nn.Linear(d, 4 * d, bias=False)
            b.mlp.c_proj = nn.Linear(4 * d, d, bias=False)
            return b

        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(block_size, d),
            h=nn.ModuleList([block() for _ in range(layers)]), ln_f=nn.LayerNorm(d, bias=False)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight


def nanogpt_checkpoint(iter_num: int, val_loss: float | None, compiled: bool = False,
                       seed: int = 0) -> dict:
    """What nanoGPT's ``train.py`` saves: model (the compiled wrapper's state dict when
    ``compiled``: every name prefixed ``_orig_mod.``), optimizer, model_args, iter_num,
    best_val_loss (a 0-d tensor, as ``estimate_loss`` makes it; left out when ``None``),
    config."""
    torch.manual_seed(seed)
    model = NanoGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    loss = model.lm_head(model.transformer.wte(torch.arange(4))).logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
    sd = model.state_dict()
    ckpt = {
        "model": {cf.COMPILE_PREFIX + k: v for k, v in sd.items()} if compiled else sd,
        "optimizer": optimizer.state_dict(),
        "model_args": dict(n_layer=2, n_head=2, n_embd=16, block_size=8, bias=False,
                           vocab_size=64, dropout=0.0),
        "iter_num": iter_num,
        "config": {"out_dir": "out", "eval_interval": 100, "always_save_checkpoint": True,
                   "dataset": "shakespeare_char", "learning_rate": 1e-3, "compile": compiled,
                   "dtype": "float32", "device": "cpu"},
    }
    if val_loss is not None:
        ckpt["best_val_loss"] = torch.tensor(val_loss)
    return ckpt


def stored(val_loss: float) -> float:
    """``best_val_loss`` as it comes back: the float32 tensor's value."""
    return float(torch.tensor(val_loss))


def run(models: list[str], out) -> list[dict]:
    from run_experiments import main

    assert main(["--models", *models, "--signatures", "weights", "--out", str(out),
                 "--no-progress"]) == 0
    return json.loads((out / "data" / "all_results.json").read_text())


# ---------------------------------------------------------------------------- reading


@pytest.mark.parametrize("compiled", [False, True])
def test_a_nanogpt_ckpt_gives_its_weights_loss_and_step(tmp_path, compiled):
    path = tmp_path / "ckpt.pt"
    torch.save(nanogpt_checkpoint(250, 1.8765, compiled=compiled), path)
    loaded = cf.load_checkpoint_file(path)
    plain = NanoGPT().state_dict()
    assert sorted(loaded.tensors) == sorted(plain)  # no _orig_mod. left
    assert (loaded.loss, loaded.loss_key) == (stored(1.8765), "best_val_loss")
    assert loaded.wrapper == "model"
    t = loaded.tensors
    assert t["lm_head.weight"].data_ptr() == t["transformer.wte.weight"].data_ptr()  # tied
    assert cf.stored_step(path) == 250


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_prefix_is_the_one_torch_compile_gives():
    model = NanoGPT()
    assert list(torch.compile(model).state_dict()) == [
        cf.COMPILE_PREFIX + k for k in model.state_dict()]


def test_a_stored_loss_of_the_checkpoints_own_comes_first():
    sd = NanoGPT().state_dict()
    assert cf.unwrap_state_dict({"model": sd, "best_val_loss": 2.0, "val_loss": 1.5}).loss \
        == 1.5
    assert cf.unwrap_state_dict({"model": sd, "best_val_loss": 2.0}).loss_key \
        == "best_val_loss"


def test_the_compile_prefix_is_stripped_only_when_that_is_safe():
    w = torch.ones(2, 2)
    assert cf.strip_compile_prefix({"_orig_mod.a.weight": w, "b": w}) == {"a.weight": w,
                                                                           "b": w}
    clash = {"_orig_mod.a": w, "a": torch.zeros(2)}
    assert cf.strip_compile_prefix(clash) is clash
    bare = {"x._orig_mod.y": w}
    assert cf.strip_compile_prefix(bare) is bare


def test_stored_step_reads_no_tensors_and_tolerates_what_is_not_a_step(tmp_path):
    from safetensors.torch import save_file

    cases = {"iter.pt": {"model": {}, "iter_num": 7}, "lightning.ckpt": {"global_step": 9},
             "float.pt": {"iter_num": 7.5}, "negative.pt": {"iter_num": -1},
             "flag.pt": {"iter_num": True}, "bare.pt": NanoGPT().state_dict(),
             "list.pt": [1, 2]}
    for name, obj in cases.items():
        torch.save(obj, tmp_path / name)
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    save_file({"w": torch.ones(2)}, tmp_path / "s.safetensors", metadata={"iter_num": "11"})
    got = {p.name: cf.stored_step(p) for p in sorted(tmp_path.iterdir())}
    assert got == {"bare.pt": None, "flag.pt": None, "float.pt": None, "garbage.pt": None,
                   "iter.pt": 7, "lightning.ckpt": 9, "list.pt": None,
                   "negative.pt": None, "s.safetensors": 11}


# -------------------------------------------------------------------------- discovery


def test_a_lone_ckpt_pt_is_the_checkpoint_of_its_iter_num(tmp_path):
    torch.save(nanogpt_checkpoint(500, 1.5), tmp_path / "ckpt.pt")
    (ckpt,) = resolve_series(str(tmp_path / "ckpt.pt"), None)
    assert (ckpt.step, ckpt.source) == (500, "file")
    (ckpt,) = resolve_series(str(tmp_path), None)  # the folder nanoGPT wrote
    assert (ckpt.step, ckpt.source) == (500, "file")


def test_a_step_in_the_name_wins_and_a_copy_is_left_out(tmp_path, caplog):
    for step in (100, 200):
        torch.save(nanogpt_checkpoint(step, 2.0 - step / 1000), tmp_path / f"ckpt_{step}.pt")
    shutil.copy(tmp_path / "ckpt_200.pt", tmp_path / "ckpt.pt")  # the live file: a copy
    with caplog.at_level(logging.WARNING):
        series = resolve_series(str(tmp_path), None)
    assert [(c.step, c.location.rsplit("/", 1)[-1]) for c in series] == [
        (100, "ckpt_100.pt"), (200, "ckpt_200.pt")]
    assert "leaving out ckpt.pt: it records step 200" in caplog.text
    torch.save(nanogpt_checkpoint(300, 1.6), tmp_path / "ckpt.pt")  # the live file, newer
    assert [c.step for c in resolve_series(str(tmp_path), None)] == [100, 200, 300]


# ------------------------------------------------------------------------- end to end


def test_a_folder_of_nanogpt_checkpoints_named_by_step_end_to_end(tmp_path):
    """Done-when: nanoGPT's checkpoints, plain and compiled, give their best_val_loss as
    each entry's loss, with the same matrices."""
    losses = {100: 2.75, 200: 2.25, 300: 2.0}
    for folder, compiled in (("plain", False), ("compiled", True)):
        (tmp_path / folder).mkdir()
        for step, loss in losses.items():
            torch.save(nanogpt_checkpoint(step, loss, compiled=compiled, seed=step),
                       tmp_path / folder / f"ckpt_{step}.pt")
    entries = run([str(tmp_path / "plain"), str(tmp_path / "compiled")], tmp_path / "out")
    by_label = {}
    for e in entries:
        by_label.setdefault(e["model_label"], []).append(e)
    assert sorted(by_label) == ["compiled", "plain"]
    for es in by_label.values():
        assert [e["step"] for e in es] == [100, 200, 300]
        assert [e["loss"] for e in es] == [stored(losses[e["step"]]) for e in es]
        assert {e["loss_key"] for e in es} == {"best_val_loss"}
        names = [m["name"] for m in es[0]["weights"]["matrices"]]
        assert names and not any(n.startswith("_orig_mod.") for n in names)
    assert [m["name"] for m in by_label["plain"][0]["weights"]["matrices"]] == \
        [m["name"] for m in by_label["compiled"][0]["weights"]["matrices"]]
    assert [e["features"] for e in by_label["plain"]] == \
        [e["features"] for e in by_label["compiled"]]  # the same weights, the same numbers
    assert series_without_quality(records_of(entries)) == []


def test_nanogpts_live_ckpt_pt_end_to_end(tmp_path):
    """nanoGPT overwrites one ckpt.pt per evaluation: each run measures the checkpoint of
    the file's iter_num, and runs into the same results folder build the series."""
    live = tmp_path / "out-shakespeare" / "ckpt.pt"
    live.parent.mkdir()
    torch.save(nanogpt_checkpoint(1000, 1.4695, compiled=True), live)
    (entry,) = run([str(live)], tmp_path / "out-file")
    assert (entry["step"], entry["loss"], entry["loss_key"]) == (1000, stored(1.4695),
                                                                 "best_val_loss")
    run([str(live.parent)], tmp_path / "out")
    torch.save(nanogpt_checkpoint(2000, 1.3125, compiled=True, seed=1), live)  # next eval
    entries = run([str(live.parent)], tmp_path / "out")
    assert [(e["step"], e["loss"]) for e in entries] == [(1000, stored(1.4695)),
                                                         (2000, stored(1.3125))]


# --------------------------------------------------------------- no quality measure


def test_a_series_without_any_quality_measure_is_named(tmp_path, caplog):
    (tmp_path / "noloss").mkdir()
    for step in (100, 200):
        torch.save(nanogpt_checkpoint(step, None), tmp_path / "noloss" / f"ckpt_{step}.pt")
    entries = run([str(tmp_path / "noloss")], tmp_path / "out")
    assert all(e.get("loss") is None for e in entries)
    assert series_without_quality(records_of(entries)) == ["noloss"]
    with caplog.at_level(logging.WARNING, logger="toposig.analysis.quality"):
        assert warn_series_without_quality(records_of(entries)) == ["noloss"]
    warnings = [r for r in caplog.records if r.name == "toposig.analysis.quality"]
    assert len(warnings) == 1  # once per series, not per checkpoint
    assert "'noloss' has no quality measure" in warnings[0].getMessage()
    assert "2 checkpoint(s)" in warnings[0].getMessage()


def test_series_without_quality_counts_any_measure_and_skips_failures():
    nan = float("nan")
    records = [
        {"model_label": "a", "step": 0, "status": "ok", "loss": None, "perplexity": nan},
        {"model_label": "a", "step": 1, "status": "ok", "loss": 2.0},   # one is enough
        {"model_label": "b", "step": 0, "status": "ok", "perplexity": 30.0},
        {"model_label": "c", "step": 0, "status": "ok", "mlm_loss": 1.1},
        {"model_label": "d", "step": 0, "status": "ok", "loss": None},
        {"model_label": "d", "step": 1, "status": "failed", "loss": 3.0},  # not counted
        {"model_label": "e", "step": 0, "status": "failed"},  # nothing finished
    ]
    assert series_without_quality(records_of(records)) == ["d"]
    assert series_without_quality([]) == []
    for unsound in ({"model_label": "f", "step": 0, "loss": True},  # not a number
                    {"step": 0, "loss": None}):  # no label
        with pytest.raises(RecordError):  # refused where records are read, not here
            records_of([unsound])
