"""Plain PyTorch checkpoint files: wrapping styles, steps and losses, series, refusals."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from toposig.sources import checkpoint_files as cf
from toposig.sources.checkpoints import SeriesError, fingerprint, resolve_series
from toposig.sources.revisions import StepSelection


def state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return net.state_dict()


@pytest.mark.parametrize(("name", "step"), [
    ("step_000100.pt", 100), ("step100.safetensors", 100), ("ckpt-100.pt", 100),
    ("epoch=3-step=100.ckpt", 100), ("model_epoch2_step_40.pth", 40), ("iter_7.bin", 7),
    ("model.pt", None), ("final.safetensors", None), ("STEP-5.PT", 5),
])
def test_step_from_name(name, step):
    assert cf.step_from_name(name) == step


WRAPPERS = {
    "bare": lambda sd: sd,
    "lightning": lambda sd: {"state_dict": sd, "epoch": 3, "global_step": 100,
                             "val_loss": torch.tensor(1.25)},
    "training_loop": lambda sd: {"model_state_dict": sd, "optimizer_state_dict": {},
                                 "loss": 2.5, "step": 100},
    "model_key": lambda sd: {"model": sd, "val_loss": 0.75, "loss": 9.0},
}
EXPECTED_LOSS = {"bare": (None, None), "lightning": (1.25, "val_loss"),
                 "training_loop": (2.5, "loss"), "model_key": (0.75, "val_loss")}


@pytest.mark.parametrize("style", sorted(WRAPPERS))
@pytest.mark.parametrize("suffix", [".pt", ".bin", ".ckpt"])
def test_each_wrapping_style_is_read(tmp_path, style, suffix):
    sd = state_dict()
    path = tmp_path / f"w{suffix}"
    torch.save(WRAPPERS[style](sd), path)
    loaded = cf.load_checkpoint_file(path)
    assert sorted(loaded.tensors) == sorted(sd)
    for k, v in sd.items():
        assert torch.equal(loaded.tensors[k], v)
    assert (loaded.loss, loaded.loss_key) == EXPECTED_LOSS[style]
    assert loaded.wrapper == {"bare": None, "lightning": "state_dict",
                              "training_loop": "model_state_dict", "model_key": "model"}[style]


def test_safetensors_with_a_loss_in_its_metadata(tmp_path):
    sd = state_dict()
    save_file(sd, tmp_path / "s.safetensors", metadata={"val_loss": "1.5", "note": "x"})
    loaded = cf.load_checkpoint_file(tmp_path / "s.safetensors")
    assert sorted(loaded.tensors) == sorted(sd) and loaded.loss == 1.5


class Custom:  # a pickled object that weights_only=True must refuse
    pass


@pytest.mark.parametrize(("content", "message"), [
    (b"this is not a checkpoint", "is damaged or not a PyTorch checkpoint"),
    (None, "needs more than weights"),
    (torch.ones(3), "not a state dict"),
    ({"epoch": 3, "config": {"lr": 0.1}}, "holds no tensors"),
])
def test_unusable_files_raise_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is None:
        torch.save({"state_dict": state_dict(), "extra": Custom()}, path)
    else:
        torch.save(content, path)
    with pytest.raises(cf.CheckpointFileError, match=message):
        cf.load_checkpoint_file(path)


def test_broken_safetensors_file_raises(tmp_path):
    (tmp_path / "b.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(cf.CheckpointFileError, match="safetensors"):
        cf.load_checkpoint_file(tmp_path / "b.safetensors")


def test_a_folder_of_files_is_a_series(tmp_path):
    for name in ("step_000200.pt", "ckpt-100.pt", "epoch=0-step=0.ckpt", "_resume.pt",
                 "notes.txt", "optimizer.pt"):
        torch.save(state_dict(), tmp_path / name)
    series = resolve_series(str(tmp_path), None)
    assert [c.step for c in series] == [0, 100, 200]
    assert {c.source for c in series} == {"file"}
    assert Path(series[1].location).name == "ckpt-100.pt"
    assert [c.step for c in resolve_series(str(tmp_path), StepSelection(steps=(100,)))] == [100]
    with pytest.raises(SeriesError, match="not in local series"):
        resolve_series(str(tmp_path), StepSelection(steps=(5,)))


def test_safetensors_is_preferred_and_duplicates_refused(tmp_path):
    torch.save(state_dict(), tmp_path / "step_1.pt")
    save_file(state_dict(), tmp_path / "step_1.safetensors")
    assert cf.discover_files(tmp_path)[1].suffix == ".safetensors"
    torch.save(state_dict(), tmp_path / "ckpt-1.pt")
    with pytest.raises(SeriesError, match="two checkpoint files of step 1"):
        resolve_series(str(tmp_path), None)


def test_a_single_file_is_a_series_of_one_and_fingerprinted(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(state_dict(), path)
    (ckpt,) = resolve_series(str(path), None)
    assert (ckpt.step, ckpt.source, ckpt.label) == (None, "file", "model")
    before = fingerprint(ckpt)
    torch.save(state_dict(seed=1), path)
    import os

    os.utime(path, ns=(1, 1))
    assert fingerprint(ckpt) != before
    with pytest.raises(SeriesError, match="not a checkpoint file"):
        (tmp_path / "x.txt").write_text("hi")
        resolve_series(str(tmp_path / "x.txt"), None)


def test_trainer_state_loss(tmp_path):
    assert cf.trainer_state_loss(tmp_path) == (None, None)
    (tmp_path / "trainer_state.json").write_text('{"step": 3, "val_loss": 1.75}')
    assert cf.trainer_state_loss(tmp_path) == (1.75, "val_loss")
    (tmp_path / "trainer_state.json").write_text(
        '{"log_history": [{"loss": 3.0}, {"eval_loss": 2.0}, {"loss": 2.5}]}')
    assert cf.trainer_state_loss(tmp_path) == (2.0, "log_history.eval_loss")


def test_ordered_dict_state_dict_with_metadata_attribute(tmp_path):
    sd = collections.OrderedDict(state_dict())
    sd._metadata = {"": {"version": 1}}  # what nn.Module.state_dict() attaches
    torch.save(sd, tmp_path / "m.pt")
    assert sorted(cf.load_checkpoint_file(tmp_path / "m.pt").tensors) == sorted(sd)


# --- issue 36, rows 6 and 7: a config.json beside state-dict files -----------------------

def neox_state_dict_folder(folder: Path, steps=(10, 20)) -> dict:
    """State-dict files ``step_<N>.pt`` of a tiny GPT-NeoX, without their config."""
    from conftest import neox_config
    from transformers import GPTNeoXForCausalLM

    config = neox_config(hidden=8, layers=1, heads=2, vocab=64)
    folder.mkdir(parents=True, exist_ok=True)
    for s in steps:
        torch.manual_seed(s)
        torch.save(GPTNeoXForCausalLM(config).state_dict(), folder / f"step_{s}.pt")
    return config.to_dict()


def run_weights(models: Path, out: Path, capsys) -> str:
    import run_experiments

    assert run_experiments.main(["--models", str(models), "--out", str(out),
                                 "--signatures", "weights", "--no-progress"]) == 0
    return capsys.readouterr().out


def test_a_folder_of_state_dicts_with_their_config_is_a_file_series(tmp_path, capsys):
    """Row 7: docs/running.md says to put the model's config.json beside plain state
    dicts; such a folder was taken as one Hugging Face model folder ("no file named
    model.safetensors"), and a new step_30.pt was never measured."""
    import json

    models = tmp_path / "run"
    config = neox_state_dict_folder(models)
    (models / "config.json").write_text(json.dumps(config))
    series = resolve_series(str(models), None)
    assert [(c.step, c.source) for c in series] == [(10, "file"), (20, "file")]
    out = tmp_path / "out"
    assert "computed: 2" in run_weights(models, out, capsys)
    records = sorted((out / "records").glob("*/run/step*.json"))
    assert [json.loads(p.read_text())["status"] for p in records] == ["ok", "ok"]
    neox_state_dict_folder(models, steps=(30,))
    assert "computed: 1  skipped (already done): 2" in run_weights(models, out, capsys)
    (models / "model.safetensors").write_bytes(b"")  # Hugging Face's weights: a model folder
    assert [c.source for c in resolve_series(str(models), None)] == ["local"]


def test_a_config_placed_beside_a_measured_file_changes_its_fingerprint(tmp_path, capsys):
    """Row 6: a config.json placed beside a measured .pt file did not change its
    fingerprint, so the record chosen without the config was reused."""
    import json

    models = tmp_path / "run"
    config = neox_state_dict_folder(models, steps=(10,))
    (ckpt,) = resolve_series(str(models / "step_10.pt"), None)
    alone = fingerprint(ckpt)
    out = tmp_path / "out"
    assert "computed: 1" in run_weights(models / "step_10.pt", out, capsys)
    (models / "config.json").write_text(json.dumps(config))
    with_config = fingerprint(ckpt)
    assert with_config != alone
    assert "computed: 1  skipped (already done): 0" in run_weights(models / "step_10.pt",
                                                                    out, capsys)
    (models / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    assert fingerprint(ckpt) not in (alone, with_config)
    (models / "config.json").unlink()
    assert fingerprint(ckpt) == alone  # no sidecar: the file's own, as before
