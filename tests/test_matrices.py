"""Which matrices: linear layers by module type, embeddings and heads by identity, tied
tensors and parameter counts once per storage; the tensor-structure rule for plain state
dicts without a config (tests/test_matrix_layouts.py: the same model in every layout)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ARCHITECTURES, causal_lm
from torch import nn
from transformers.pytorch_utils import Conv1D

from toposig.model.matrices import (
    count_parameters,
    embedding_tables,
    in_layer_stack,
    model_matrices,
    state_dict_matrices,
    state_dict_parameters,
)


def linear_modules(model) -> dict[str, nn.Module]:
    """Every Linear / Conv1D module but the input and output embeddings, independently."""
    emb_in, emb_out = model.get_input_embeddings(), model.get_output_embeddings()
    tied = {emb_in.weight.data_ptr()}
    return {f"{n}.weight": m for n, m in model.named_modules()
            if isinstance(m, (nn.Linear, Conv1D)) and m is not emb_out
            and m.weight.data_ptr() not in tied}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_models_matrices_are_its_linear_layers(arch):
    model = causal_lm(arch)
    chosen = model_matrices(model)
    expected = linear_modules(model)
    assert list(chosen) == list(expected)
    assert chosen, arch
    for name, w in chosen.items():
        m = expected[name]
        out_features = m.nf if isinstance(m, Conv1D) else m.out_features
        assert w.shape[0] == out_features  # (out, in): rows are output neurons
        assert w.data_ptr() == m.weight.data_ptr()  # the stored values, not a copy
    head = model.get_output_embeddings().weight
    assert all(w.data_ptr() != head.data_ptr() for w in chosen.values())
    assert count_parameters(model.parameters()) == model.num_parameters()


def test_gpt2_conv1d_weights_are_transposed_to_out_by_in():
    model = causal_lm("gpt2", hidden=32)
    chosen = model_matrices(model)
    assert chosen["transformer.h.0.attn.c_attn.weight"].shape == (96, 32)
    assert chosen["transformer.h.0.mlp.c_fc.weight"].shape == (128, 32)  # n_inner = 4 d


def test_neox_state_dict_gets_the_models_matrices_without_a_config():
    """The committed suites are GPT-NeoX: a plain state dict of one, with no config to
    build the model from, gets the model's matrices, in the model's order."""
    model = causal_lm("gpt_neox")
    chosen = state_dict_matrices(model.state_dict())
    assert list(chosen) == list(model_matrices(model))
    assert chosen.rule == "tensor structure (no config)"
    assert model_matrices(model).rule == "module type (loaded model)"


class _Attention(nn.Module):
    def __init__(self, d: int, t: int):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))


class _Block(nn.Module):
    def __init__(self, d: int, t: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = _Attention(d, t)
        self.mlp = nn.Sequential()
        self.mlp.add_module("fc", nn.Linear(d, 4 * d))
        self.mlp.add_module("proj", nn.Linear(4 * d, d))


class NanoGPT(nn.Module):
    """A nanoGPT / minGPT-style model: token_emb, pos_emb, head tied to token_emb, and
    causal-mask buffers saved in its state dict."""

    def __init__(self, vocab: int = 64, d: int = 16, t: int = 8, layers: int = 2):
        super().__init__()
        self.token_emb, self.pos_emb = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList([_Block(d, t) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.token_emb.weight

    def linear_names(self) -> list[str]:
        return [f"blocks.{i}.{m}.weight" for i in range(len(self.blocks))
                for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")]


def test_a_nanogpt_state_dict_gets_its_linear_layers_and_the_right_count(tmp_path):
    model = NanoGPT()
    sd = model.state_dict()
    assert sd["head.weight"].data_ptr() == sd["token_emb.weight"].data_ptr()
    assert list(state_dict_matrices(sd)) == model.linear_names()
    n_params = sum(p.numel() for p in model.parameters())  # PyTorch's own, tied once
    naive = sum(t.numel() for t in sd.values() if t.is_floating_point())
    assert state_dict_parameters(sd) == n_params < naive
    torch.save(sd, tmp_path / "m.pt")  # the tie and the count survive a round trip
    loaded = torch.load(tmp_path / "m.pt", weights_only=True)
    assert state_dict_parameters(loaded) == n_params
    assert list(state_dict_matrices(loaded)) == model.linear_names()


def test_a_tensor_tied_to_a_left_out_one_is_left_out_whatever_its_name():
    """The vocabulary is 8, also a layer's input size: the tie alone marks the tables."""
    w = torch.randn(8, 4)
    sd = {"wte.weight": w, "blocks.0.fc.weight": torch.randn(8, 4),
          "blocks.0.proj.weight": torch.randn(4, 8), "decoder.out.weight": w}
    assert list(state_dict_matrices(sd)) == ["blocks.0.fc.weight", "blocks.0.proj.weight"]
    assert list(state_dict_matrices(sd, include=["out", "fc"])) == ["blocks.0.fc.weight",
                                                                    "decoder.out.weight"]


def test_a_linear_layer_is_a_module_not_a_name():
    """An embedding named like a layer is left out; a layer named like an embedding is in."""

    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense_lookup = nn.Embedding(20, 8)   # an embedding with a layer's name
            self.emb_proj = nn.Linear(8, 8)           # a layer with an embedding's name
            self.out = nn.Linear(8, 20)

        def get_input_embeddings(self):
            return self.dense_lookup

        def get_output_embeddings(self):
            return self.out

    assert list(model_matrices(Odd())) == ["emb_proj.weight"]


def test_include_and_exclude_still_override():
    model = causal_lm("gpt2")
    assert list(model_matrices(model, include=[r"wte"])) == ["transformer.wte.weight"]
    chosen = model_matrices(model, exclude=[r"mlp"])
    assert chosen and not any("mlp" in n for n in chosen)
    assert "transformer.h.0.mlp.c_fc.weight" in model_matrices(model, include=[r"mlp"])


def test_a_folder_of_nanogpt_files_gets_its_linear_layers_only(tmp_path):
    """Done-when: a folder of nanoGPT-style .pt files, run end to end."""
    from run_experiments import main

    model = NanoGPT()
    (tmp_path / "run").mkdir()
    for step in (0, 100):
        torch.manual_seed(step)
        for p in model.parameters():
            nn.init.normal_(p, std=0.1)
        torch.save({"model": model.state_dict(), "iter_num": step, "val_loss": 4.0 - step / 100},
                   tmp_path / "run" / f"ckpt_{step}.pt")
    out = tmp_path / "out"
    assert main(["--models", str(tmp_path / "run"), "--out", str(out), "--no-progress"]) == 0
    recs = json.loads((out / "data" / "all_results.json").read_text())
    assert [r["step"] for r in recs] == [0, 100]
    for r in recs:
        assert [m["name"] for m in r["weights"]["matrices"]] == model.linear_names()
        assert r["num_parameters"] == sum(p.numel() for p in model.parameters())
        assert r["loss"] == pytest.approx(4.0 - r["step"] / 100)


def test_the_structure_rule_reads_no_words_in_the_names():
    """Tables and heads by what they are: an embedding named like a layer is left out,
    layers named like embeddings and heads (ELECTRA's ``embeddings_project``, RoBERTa's
    ``lm_head.dense``, RWKV's ``attention.output``) are analysed; norms and biases are
    1-D, a position table's rows are no layer's input and it sits outside the blocks."""
    sd = {"dense.weight": torch.randn(50, 16),            # the token embedding
          "attention.output.weight": torch.randn(12, 16),  # the position table
          "embeddings_project.weight": torch.randn(24, 16),
          "norm.weight": torch.ones(24), "embeddings_project.bias": torch.zeros(24),
          "layers.0.attention.output.weight": torch.randn(24, 24),
          "layers.0.emb.weight": torch.randn(48, 24),       # a layer inside the block
          "layers.0.head.weight": torch.randn(24, 48),
          "lm_head.dense.weight": torch.randn(24, 24),
          "lm_head.decoder.weight": torch.randn(50, 24), "lm_head.bias": torch.zeros(50)}
    assert embedding_tables(sd) == ["dense.weight", "attention.output.weight",
                                    "lm_head.decoder.weight"]
    assert list(state_dict_matrices(sd)) == [
        "embeddings_project.weight", "layers.0.attention.output.weight",
        "layers.0.emb.weight", "layers.0.head.weight", "lm_head.dense.weight"]
    assert in_layer_stack("layers.0.emb.weight") and not in_layer_stack("layers.0.weight")


def test_a_meta_style_head_and_a_tied_head_saved_as_a_copy_are_left_out(tmp_path):
    from safetensors.torch import load_file, save_file

    emb = torch.randn(20, 8)
    sd = {"tok_embeddings.weight": emb, "layers.0.attention.wq.weight": torch.randn(8, 8),
          "layers.0.feed_forward.w1.weight": torch.randn(16, 8), "decoder.weight": emb.clone()}
    save_file(sd, tmp_path / "m.safetensors")  # safetensors cannot share storage: a copy
    loaded = load_file(tmp_path / "m.safetensors")
    assert list(state_dict_matrices(loaded)) == ["layers.0.attention.wq.weight",
                                                 "layers.0.feed_forward.w1.weight"]
    assert state_dict_parameters(loaded) == 20 * 8 + 64 + 128  # the copy counted once
    meta = {"tok_embeddings.weight": emb, "output.weight": torch.randn(20, 8),
            "layers.0.attention.wq.weight": torch.randn(8, 8)}
    assert list(state_dict_matrices(meta)) == ["layers.0.attention.wq.weight"]


def test_a_model_that_names_no_head_module_still_leaves_its_head_out(monkeypatch):
    model = causal_lm("llama")
    monkeypatch.setattr(type(model), "get_output_embeddings", lambda self: None)
    chosen = model_matrices(model)
    assert "lm_head.weight" not in chosen and chosen
