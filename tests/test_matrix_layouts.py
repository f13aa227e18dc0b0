"""One model, every layout: a model folder, its own ``model.safetensors``, a ``torch.save``
state dict, with and without a ``config.json`` beside the file, give the same matrices
and the same neural persistence (issue 26: plain files used to drop RoBERTa's
``lm_head.dense``, ModernBERT's ``head.dense``, ALBERT's ``embedding_hidden_mapping_in``,
ELECTRA's ``embeddings_project`` and RWKV's ``attention.output``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T
from conftest import ARCHITECTURES, causal_lm_config

from toposig.features.weights import neural_persistence
from toposig.model.matrices import (
    count_parameters,
    embedding_tables,
    model_matrices,
    state_dict_matrices,
    state_dict_parameters,
)
from toposig.sources.checkpoint_files import find_config, load_checkpoint_file
from toposig.sources.checkpoints import Checkpoint
from toposig.sources.loading import MASKED, load_model, model_kind

ENCODERS = ("bert", "roberta", "modernbert", "albert", "electra", "distilbert")
ALL = (*ARCHITECTURES, *ENCODERS, "rwkv")
# what plain files dropped before issue 26, by name; a folder analyses them
ISSUE_NAMED = {
    "roberta": ["lm_head.dense.weight"],
    "modernbert": ["head.dense.weight"],
    "albert": ["albert.encoder.embedding_hidden_mapping_in.weight"],
    "electra": ["electra.embeddings_project.weight"],
    "rwkv": ["rwkv.blocks.0.attention.output.weight", "rwkv.blocks.1.attention.output.weight"],
}
BESIDE = "module type (config.json beside the file)"
NO_CONFIG = "tensor structure (no config)"


def config_of(arch: str, max_positions: int = 40):
    """A tiny config of ``arch``: the causal LMs of conftest, masked-LM encoders, RWKV.
    Positions (40) are no layer's width (32, 64, 16), as in real models."""
    if arch in ARCHITECTURES:
        return causal_lm_config(arch)
    common = dict(vocab_size=264, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=max_positions)
    mlm = [{"bert": "Bert", "roberta": "Roberta", "modernbert": "ModernBert", "albert": "Albert",
            "electra": "Electra", "distilbert": "DistilBert"}.get(arch, "") + "ForMaskedLM"]
    if arch == "bert":
        return T.BertConfig(**common, architectures=mlm)
    if arch == "roberta":
        return T.RobertaConfig(**common, architectures=mlm)
    if arch == "modernbert":
        return T.ModernBertConfig(**common, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  cls_token_id=1, sep_token_id=2, global_attn_every_n_layers=2,
                                  local_attention=16, architectures=mlm)
    if arch == "albert":
        return T.AlbertConfig(**common, embedding_size=16, architectures=mlm)
    if arch == "electra":
        return T.ElectraConfig(**common, embedding_size=16, architectures=mlm)
    if arch == "distilbert":
        return T.DistilBertConfig(vocab_size=264, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                  max_position_embeddings=max_positions, architectures=mlm)
    if arch == "rwkv":
        return T.RwkvConfig(vocab_size=264, hidden_size=32, num_hidden_layers=2,
                            attention_hidden_size=32, intermediate_size=64, context_length=40,
                            architectures=["RwkvForCausalLM"])
    raise ValueError(arch)


def build(config, seed: int = 0):
    """A random-weight model of ``config``, of the class a model folder of it loads."""
    auto = T.AutoModelForMaskedLM if model_kind(config) == MASKED else T.AutoModelForCausalLM
    torch.manual_seed(seed)
    return auto.from_config(config).eval()


def np_mean(matrices) -> float:
    """The checkpoint's mean normalised neural persistence (W_max over all matrices)."""
    arrays = [np.asarray(t.detach().float().numpy()) for t in matrices.values()]
    w_max = max(float(np.abs(a).max()) for a in arrays)
    return float(np.mean([neural_persistence(a, w_max)["np_normalized"] for a in arrays]))


def from_file(path: Path):
    """What the weight stage gets for a plain file: its tensors, its config, the rule."""
    loaded = load_checkpoint_file(path)
    chosen = state_dict_matrices(loaded.tensors, config=loaded.config,
                                 config_source=loaded.config_source or "config")
    return loaded, chosen


class Layouts:
    """One random model of an architecture stored four ways, and its folder's matrices.

    Attributes:
        folder: ``save_pretrained`` folder; ``folder_matrices`` as a run loads it.
        with_config: ``torch.save(state_dict)`` with the folder's ``config.json`` beside.
        pt_bare / st_bare: the ``.pt`` and the folder's ``model.safetensors``, no config.
    """

    def __init__(self, arch: str, root: Path):
        self.arch = arch
        self.model = build(config_of(arch))
        self.folder = root / "folder"
        self.model.save_pretrained(self.folder)
        loaded = load_model(Checkpoint(arch, arch, None, "local", str(self.folder)),
                            torch.float32, "cpu")
        self.folder_model = loaded
        self.folder_matrices = model_matrices(loaded)
        self.with_config = self._save(root / "with_config", "model.pt", config=True)
        self.pt_bare = self._save(root / "bare_pt", "model.pt", config=False)
        self.st_bare = root / "bare_st" / "model.safetensors"
        self.st_bare.parent.mkdir()
        shutil.copy(self.folder / "model.safetensors", self.st_bare)

    def _save(self, folder: Path, name: str, config: bool) -> Path:
        folder.mkdir()
        torch.save(self.model.state_dict(), folder / name)
        if config:
            shutil.copy(self.folder / "config.json", folder)
        return folder / name


@pytest.fixture(scope="module", params=ALL)
def layouts(request, tmp_path_factory) -> Layouts:
    return Layouts(request.param, tmp_path_factory.mktemp(request.param))


def test_with_a_config_every_file_gets_exactly_the_folders_matrices(layouts):
    """Done-when: same names in the same order, same tensors (a Conv1D transposed), same
    NP, the same parameter count; the record's rule says a config chose."""
    folder = layouts.folder_matrices
    assert folder.rule == "module type (loaded model)"
    for path in (layouts.folder / "model.safetensors", layouts.with_config):
        loaded, chosen = from_file(path)
        assert chosen.rule == BESIDE, path
        assert list(chosen) == list(folder), path
        for name, w in chosen.items():
            assert torch.equal(w, folder[name]), name
        assert np_mean(chosen) == np_mean(folder)
        assert (state_dict_parameters(loaded.tensors)
                == count_parameters(layouts.folder_model.parameters()))


def test_without_a_config_the_tensor_structure_gives_the_folders_matrices(layouts):
    """Done-when, no config: the same matrix names and NP by the structure rule (a
    ``.safetensors`` keeps its sorted order; GPT-2's Conv1D weights stay as stored,
    (in, out), which neural persistence does not see)."""
    folder = layouts.folder_matrices
    for path in (layouts.pt_bare, layouts.st_bare):
        loaded, chosen = from_file(path)
        assert loaded.config is None
        assert chosen.rule == NO_CONFIG
        assert sorted(chosen) == sorted(folder), path
        assert np_mean(chosen) == pytest.approx(np_mean(folder), rel=1e-12, abs=0)
        for name, w in chosen.items():
            assert torch.equal(w, folder[name]) or torch.equal(w.t(), folder[name]), name
    _, pt = from_file(layouts.pt_bare)
    assert list(pt) == list(folder)  # a torch.save state dict is in module order


@pytest.mark.parametrize("arch", sorted(ISSUE_NAMED))
def test_the_issues_matrices_are_analysed_in_every_layout(arch, tmp_path):
    lay = Layouts(arch, tmp_path)
    for path in (lay.folder / "model.safetensors", lay.with_config, lay.pt_bare, lay.st_bare):
        _, chosen = from_file(path)
        assert set(ISSUE_NAMED[arch]) <= set(chosen), (arch, path.parent.name)
    assert set(ISSUE_NAMED[arch]) <= set(lay.folder_matrices)


def test_gpt2s_conv1d_weights_are_transposed_only_with_a_config(tmp_path):
    lay = Layouts("gpt2", tmp_path)
    name = "transformer.h.0.mlp.c_fc.weight"
    assert tuple(from_file(lay.with_config)[1][name].shape) == (128, 32)  # (out, in)
    assert tuple(from_file(lay.pt_bare)[1][name].shape) == (32, 128)  # as stored


def test_neox_saved_names_are_renamed_as_transformers_loads_them(tmp_path):
    """``save_pretrained`` writes GPT-NeoX's ``lm_head`` as ``embed_out``: still a match."""
    lay = Layouts("gpt_neox", tmp_path)
    loaded, chosen = from_file(lay.folder / "model.safetensors")
    assert "embed_out.weight" in loaded.tensors and "lm_head.weight" not in loaded.tensors
    assert chosen.rule == BESIDE and list(chosen) == list(lay.folder_matrices)


@pytest.mark.parametrize("arch", ["llama", "roberta"])
def test_a_bare_base_model_or_a_wrapped_state_dict_still_matches_the_config(arch, tmp_path):
    """A base model's state dict (no head, no prefix: a masked LM's encoder without its
    pooler) gets the folder's matrices but the head's, under the folder's names; a
    DistributedDataParallel / torch.compile state dict loses its wrapper prefix."""
    lay = Layouts(arch, tmp_path)
    config = json.loads((lay.folder / "config.json").read_text())
    chosen = state_dict_matrices(lay.model.base_model.state_dict(), config=config,
                                 config_source="c")
    assert chosen.rule == "module type (c)"
    assert list(chosen) == [n for n in lay.folder_matrices if not n.startswith("lm_head.")]
    wrapped = {f"module._orig_mod.{k}": v for k, v in lay.model.state_dict().items()}
    chosen = state_dict_matrices(wrapped, config=config, config_source="c")
    assert chosen.rule == "module type (c)" and list(chosen) == list(lay.folder_matrices)


def test_a_config_that_does_not_fit_falls_back_and_says_why(tmp_path):
    lay = Layouts("llama", tmp_path)
    other = json.loads((lay.folder / "config.json").read_text()) | {"intermediate_size": 48}
    chosen = state_dict_matrices(lay.model.state_dict(), config=other,
                                 config_source="config.json beside the file")
    assert chosen.rule.startswith("tensor structure (the config.json beside the file does "
                                  "not fit the tensors: ")
    assert "mlp" in chosen.rule  # the tensors that did not fit are named
    assert list(chosen) == list(lay.folder_matrices)
    remote = {"model_type": "llama", "auto_map": {"AutoModel": "x.Y"}}
    assert state_dict_matrices(lay.model.state_dict(), config=remote).rule.startswith(
        "tensor structure (the config does not fit the tensors: not a config")


def test_the_checkpoints_own_config_is_used_and_a_training_loops_config_is_not(tmp_path):
    from safetensors.torch import save_file

    lay = Layouts("qwen2", tmp_path)
    tensors = {k: v.contiguous() for k, v in lay.model.state_dict().items()
               if k != "lm_head.weight" or not lay.model.config.tie_word_embeddings}
    meta = {"config": (lay.folder / "config.json").read_text()}
    save_file(tensors, tmp_path / "m.safetensors", metadata=meta)
    loaded, chosen = from_file(tmp_path / "m.safetensors")
    assert loaded.config_source == "the file's metadata"
    assert chosen.rule == "module type (the file's metadata)"
    assert list(chosen) == list(lay.folder_matrices)
    (tmp_path / "loop").mkdir()  # nanoGPT-style: its own config.json, no model_type
    (tmp_path / "loop" / "config.json").write_text(json.dumps({"n_layer": 2, "n_embd": 32}))
    torch.save({"model": lay.model.state_dict(), "config": {"n_layer": 2}},
               tmp_path / "loop" / "ckpt.pt")
    assert find_config(tmp_path / "loop" / "ckpt.pt") == (None, None)
    loaded, chosen = from_file(tmp_path / "loop" / "ckpt.pt")
    assert loaded.config is None and chosen.rule == NO_CONFIG
    torch.save({"model": lay.model.state_dict(),
                "config": json.loads((lay.folder / "config.json").read_text())},
               tmp_path / "own.pt")
    loaded, chosen = from_file(tmp_path / "own.pt")
    assert chosen.rule == "module type (the checkpoint's config entry)"


def test_the_structure_rules_documented_limit_a_table_as_wide_as_a_layer(tmp_path):
    """Without a config, a position table whose row count is a layer's input size (here
    64 positions and a 64-wide feed-forward input; GPT-2 medium: 1024 and 1024) cannot be
    told from a layer and is analysed; the config beside the file leaves it out."""
    model = build(config_of("bert", max_positions=64))
    sd = model.state_dict()
    name = "bert.embeddings.position_embeddings.weight"
    assert name not in embedding_tables(sd) and name in state_dict_matrices(sd)
    config = model.config.to_dict()
    assert name not in state_dict_matrices(sd, config=config)
    assert list(state_dict_matrices(sd, config=config)) == list(model_matrices(model))


def test_a_plain_network_without_a_layer_stack_keeps_every_layer():
    """An MLP's output layer has outputs no layer reads, like a head, but with no layer
    stack there is no language model's table or head to leave out."""
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5))
    sd = net.state_dict()
    assert embedding_tables(sd) == []
    chosen = state_dict_matrices(sd)
    assert list(chosen) == ["0.weight", "2.weight"] and chosen.rule == NO_CONFIG


def test_include_and_exclude_are_still_the_users_names(tmp_path):
    lay = Layouts("roberta", tmp_path)
    loaded, _ = from_file(lay.with_config)
    chosen = state_dict_matrices(loaded.tensors, include=[r"word_embeddings"],
                                 config=loaded.config)
    assert list(chosen) == ["roberta.embeddings.word_embeddings.weight"]
    assert chosen.rule == "names (--weight-include)"
    chosen = state_dict_matrices(loaded.tensors, exclude=[r"lm_head"], config=loaded.config)
    assert "lm_head.dense.weight" not in chosen
    assert list(chosen) == [n for n in lay.folder_matrices if "lm_head" not in n]
