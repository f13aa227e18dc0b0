"""Which matrices: linear layers by module type, embeddings and heads by identity, tied
tensors and parameter counts once per storage; the name rule for plain state dicts."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ARCHITECTURES, causal_lm
from torch import nn
from transformers.pytorch_utils import Conv1D

from toposig.features import weights
from toposig.model.matrices import (
    count_parameters,
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


def test_neox_gets_the_same_matrices_as_the_old_name_rule():
    """The committed suites are GPT-NeoX: their records do not change."""
    model = causal_lm("gpt_neox")
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()
              if v.is_floating_point()}
    assert list(model_matrices(model)) == weights.select_matrices(shapes)


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
    w = torch.randn(10, 4)
    sd = {"wte.weight": w, "decoder.out.weight": w, "decoder.fc.weight": torch.randn(3, 4)}
    assert list(state_dict_matrices(sd)) == ["decoder.fc.weight"]
    assert list(state_dict_matrices(sd, include=["decoder"])) == ["decoder.out.weight",
                                                                  "decoder.fc.weight"]


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


def test_name_rule_components():
    left_out = ["token_emb.weight", "gpt_neox.embed_in.weight", "model.embed_tokens.weight",
                "bert.embeddings.word_embeddings.weight", "tok_embeddings.weight",
                "output.weight", "transformer.wte.weight", "lm_head.weight", "head.weight"]
    kept = ["member.weight", "timestep_embedder.linear.weight", "layers.0.attention.wq.weight",
            "bert.encoder.layer.0.attention.output.dense.weight"]
    shapes = {n: (4, 4) for n in left_out + kept}
    assert weights.select_matrices(shapes) == kept


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
