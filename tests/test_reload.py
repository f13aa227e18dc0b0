"""A series' next checkpoint copied into the model already built for it
(:mod:`toposig.sources.reload`) holds the tensors ``from_pretrained`` would load, bit for
bit, on every architecture of the test matrix; whatever it cannot vouch for goes the
long way; and a run that reuses the model writes the records a run that does not would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as T
from conftest import ARCHITECTURES, causal_lm_config, make_series, neox_config
from safetensors.torch import load_file, save_file

import run_experiments
from toposig.run import tasks
from toposig.sources import reload
from toposig.sources.checkpoints import Checkpoint
from toposig.sources.loading import load_model

F32 = torch.float32


@pytest.fixture(autouse=True)
def _fresh():
    reload.forget()
    yield
    reload.forget()


def save(folder: Path, config, seed: int, kind: str = "causal", dtype=F32) -> Path:
    torch.manual_seed(seed)
    auto = T.AutoModelForMaskedLM if kind == "masked" else T.AutoModelForCausalLM
    auto.from_config(config).to(dtype).save_pretrained(folder)
    return folder


def from_pretrained(folder: Path, kind: str = "causal"):
    auto = T.AutoModelForMaskedLM if kind == "masked" else T.AutoModelForCausalLM
    return auto.from_pretrained(folder, dtype=F32).eval()


def assert_same_tensors(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype, k
        assert torch.equal(sa[k], sb[k]), k


def bert_config():
    return T.BertConfig(vocab_size=120, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32)


CASES = [(a, "causal") for a in ARCHITECTURES] + [("bert", "masked")]


@pytest.mark.parametrize(("arch", "kind"), CASES)
def test_a_reloaded_checkpoint_has_the_tensors_from_pretrained_gives(tmp_path, arch, kind):
    config = bert_config() if arch == "bert" else causal_lm_config(arch)
    first, second = (save(tmp_path / f"s{i}", config, seed=i, kind=kind) for i in (0, 1))
    model = from_pretrained(first, kind)
    reload.remember(first, model, F32, "cpu")
    reload.release(model)
    again = reload.reload(second, F32, "cpu")
    assert again is model  # reused, not built again
    assert_same_tensors(again, from_pretrained(second, kind))


def test_a_bfloat16_file_loads_into_float32_as_from_pretrained_casts_it(tmp_path):
    config = causal_lm_config("llama")
    first, second = (save(tmp_path / f"s{i}", config, i, dtype=torch.bfloat16) for i in (0, 1))
    model = from_pretrained(first)
    reload.remember(first, model, F32, "cpu")
    reload.release(model)
    again = reload.reload(second, F32, "cpu")
    assert again is model and next(again.parameters()).dtype == F32
    assert_same_tensors(again, from_pretrained(second))


def remembered(folder: Path):
    model = from_pretrained(folder)
    reload.remember(folder, model, F32, "cpu")
    reload.release(model)
    return model


def test_what_it_cannot_vouch_for_goes_the_long_way(tmp_path):
    config = neox_config(hidden=16, vocab=64)
    first = save(tmp_path / "a", config, 0)
    same = save(tmp_path / "c", config, 2)
    # weights from_pretrained would read instead, or on top; no config.json; no folder:
    # the long way, and the series' model stays for the next checkpoint
    model = remembered(first)
    for name in ("model.safetensors.index.json", "pytorch_model.bin", "adapter_config.json"):
        extra = save(tmp_path / name, config, 3)
        (extra / name).write_text("{}")
        assert reload.reload(extra, F32, "cpu") is None
    bare = save(tmp_path / "bare", config, 4)
    (bare / "config.json").unlink()
    assert reload.reload(bare, F32, "cpu") is None
    assert reload.reload(tmp_path / "nowhere", F32, "cpu") is None
    assert reload.reload(same, F32, "cpu") is model
    reload.release(model)
    # another config, byte for byte (a different dropout changes no tensor), another
    # dtype or device asked for, a file with a tensor less: the long way, and the model
    # is let go before from_pretrained builds the next one
    other = save(tmp_path / "b", neox_config(hidden=16, vocab=64), 1)
    text = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(dict(text, attention_dropout=0.1)))
    short = save(tmp_path / "short", config, 5)
    tensors = load_file(short / "model.safetensors")
    save_file({k: v for k, v in list(tensors.items())[1:]}, short / "model.safetensors",
              metadata={"format": "pt"})
    for folder, dtype, device in ((other, F32, "cpu"), (same, torch.bfloat16, "cpu"),
                                  (same, F32, "meta"), (short, F32, "cpu")):
        model = remembered(first)
        assert reload.reload(folder, dtype, device) is None
        assert reload._template is None, (folder, dtype, device)


def test_a_model_in_use_or_moved_since_is_not_handed_out(tmp_path):
    config = neox_config(hidden=16, vocab=64)
    first, second = (save(tmp_path / f"s{i}", config, i) for i in (0, 1))
    model = from_pretrained(first)
    reload.remember(first, model, F32, "cpu")  # in use: not released
    assert reload.reload(second, F32, "cpu") is None and reload._template is None
    model = remembered(first)
    model.to(torch.bfloat16).to(F32)  # new storage: the kept targets are not its tensors
    assert reload.reload(second, F32, "cpu") is None and reload._template is None


def test_a_tied_tensor_saved_under_both_names_is_not_a_plain_renaming(tmp_path):
    config = causal_lm_config("gpt2")  # lm_head.weight is transformer.wte.weight
    folder = save(tmp_path / "a", config, 0)
    model = from_pretrained(folder)
    saved = {k: (tuple(v.shape), v.dtype) for k, v in
             load_file(folder / "model.safetensors").items()}
    assert "lm_head.weight" not in saved
    assert reload.plain_renaming(model, saved) is not None
    both = dict(saved, **{"lm_head.weight": saved["transformer.wte.weight"]})
    assert reload.plain_renaming(model, both) is None
    lacking = {k: v for k, v in saved.items() if k != "transformer.wte.weight"}
    assert reload.plain_renaming(model, lacking) is None  # a tensor nothing fills


def test_a_damaged_file_or_a_failed_copy_goes_the_long_way(tmp_path, monkeypatch):
    config = neox_config(hidden=16, vocab=64)
    model = remembered(save(tmp_path / "a", config, 0))
    damaged = save(tmp_path / "damaged", config, 1)
    data = (damaged / "model.safetensors").read_bytes()
    (damaged / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert reload.reload(damaged, F32, "cpu") is None  # from_pretrained will report it
    with pytest.raises(Exception, match="(?i)safetensors|header|incomplete|deserializ"):
        load_model(Checkpoint(model="d", label="d", step=1, source="local",
                              location=str(damaged)), F32, "cpu", local_files_only=True,
                   reuse=True)
    second = save(tmp_path / "b", config, 2)
    assert reload.reload(second, F32, "cpu") is model  # still the series' model
    reload.release(model)

    def broken(self, value):
        raise RuntimeError("copy failed")

    monkeypatch.setattr(torch.Tensor, "copy_", broken)
    assert reload.reload(second, F32, "cpu") is None  # the long way: load it anew
    monkeypatch.undo()
    assert reload._template is None  # never handed out half copied


def test_load_model_reuses_only_local_folders_without_remote_code(tmp_path):
    config = neox_config(hidden=16, vocab=64)
    make_series(tmp_path / "s", [0, 1, 2], None, config=config)
    ckpts = [Checkpoint(model=str(tmp_path / "s"), label="s", step=i, source="local",
                        location=str(tmp_path / "s" / f"step{i}")) for i in range(3)]
    first = load_model(ckpts[0], F32, "cpu", local_files_only=True, reuse=True)
    reload.release(first)
    assert load_model(ckpts[1], F32, "cpu", local_files_only=True, reuse=True) is first
    reload.release(first)
    assert load_model(ckpts[2], F32, "cpu", local_files_only=True) is not first
    assert load_model(ckpts[2], F32, "cpu", local_files_only=True, reuse=True,
                      trust_remote_code=True) is not first


def test_a_weights_only_run_reuses_the_model_and_writes_the_same_records(tmp_path,
                                                                         monkeypatch):
    series = make_series(tmp_path / "series", [0, 10, 20, 30], None,
                         config=neox_config(hidden=16, vocab=64))
    loads = []
    real = tasks.load_model

    def counting(*a, **k):
        model = real(*a, **k)
        loads.append((k.get("reuse"), id(model)))
        return model

    monkeypatch.setattr(tasks, "load_model", counting)
    args = ["--models", str(series), "--signatures", "weights", "--no-progress"]
    assert run_experiments.main([*args, "--out", str(tmp_path / "reused")]) == 0
    assert [r for r, _ in loads] == [True] * 4 and len({i for _, i in loads}) == 1
    monkeypatch.setattr(reload, "reload", lambda *a, **k: None)  # always the long way
    assert run_experiments.main([*args, "--out", str(tmp_path / "built")]) == 0
    assert len({i for _, i in loads[4:]}) > 1

    def features(out: str) -> list:
        data = json.loads((tmp_path / out / "data" / "all_results.json").read_text())
        return [(r["step"], r["features"]) for r in data]

    assert features("reused") == features("built")


def test_a_run_that_runs_the_model_does_not_reuse_it(tiny_series, wikitext_dir, tmp_path,
                                                    monkeypatch):
    seen = []
    real = tasks.load_model
    monkeypatch.setattr(tasks, "load_model",
                        lambda *a, **k: seen.append(k.get("reuse")) or real(*a, **k))
    assert run_experiments.main([
        "--models", str(tiny_series), "--signatures", "weights,embedding", "--n-texts", "8",
        "--max-length", "16", "--no-progress", "--out", str(tmp_path / "out")]) == 0
    assert seen and not any(seen)


def test_the_run_lets_the_model_go_when_it_ends(tmp_path):
    series = make_series(tmp_path / "series", [0, 10], None,
                         config=neox_config(hidden=16, vocab=64))
    assert run_experiments.main(["--models", str(series), "--signatures", "weights",
                                 "--no-progress", "--out", str(tmp_path / "out")]) == 0
    assert reload._template is None


def test_a_state_dict_it_cannot_vouch_for_is_not_kept_and_the_load_stands(tmp_path,
                                                                           monkeypatch):
    folder = save(tmp_path / "a", neox_config(hidden=16, vocab=64), 0)
    model = from_pretrained(folder)

    def odd(model, saved):
        raise AttributeError("'dict' object has no attribute 'data_ptr'")  # extra state

    monkeypatch.setattr(reload, "plain_renaming", odd)
    reload.remember(folder, model, F32, "cpu")  # does not raise
    assert reload._template is not None and reload._template.model is None


def test_a_checkpoint_that_fails_after_loading_gives_the_model_back(tmp_path, monkeypatch):
    series = make_series(tmp_path / "series", [0, 10, 20], None,
                         config=neox_config(hidden=16, vocab=64))
    models, calls = [], []
    real_load, real_count = tasks.load_model, tasks.count_parameters

    def loading(*a, **k):
        models.append(real_load(*a, **k))
        return models[-1]

    def counting(params):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("checkpoint 10 cannot be counted")
        return real_count(params)

    monkeypatch.setattr(tasks, "load_model", loading)
    monkeypatch.setattr(tasks, "count_parameters", counting)
    assert run_experiments.main(["--models", str(series), "--signatures", "weights",
                                 "--no-progress", "--out", str(tmp_path / "out")]) == 1
    assert len(models) == 3 and models[2] is models[0]  # step 20 reused it all the same
