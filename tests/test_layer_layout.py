"""What each entry of ``hidden_states`` is, found per model and carried into the records
and the figures: index 0 is the embedding output for most architectures, but the first
block's output for Mamba, FalconMamba and RWKV (issue 26, part 2)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
import transformers as T
from conftest import ARCHITECTURES, causal_lm

from toposig.model.forward import (
    EMBEDDINGS,
    FINAL_NORM,
    forward_pass,
    hidden_state_layout,
    tokenize,
)
from toposig.model.training import byte_tokenizer
from toposig.records import Record
from toposig.report import plots_diagrams as pa

STATE_SPACE = ("mamba", "falcon_mamba", "rwkv")
TEXTS = ["Persistent homology tracks loops.", "Short.", "A sentence of medium length.",
         "The quick brown fox jumps over the lazy dog.", "xy", "Another text, a bit longer."]


def state_space_lm(arch: str, layers: int = 2, seed: int = 0, **kw):
    """A tiny random-weight Mamba, FalconMamba or RWKV causal LM in eval mode."""
    torch.manual_seed(seed)
    if arch in ("mamba", "falcon_mamba"):
        cls, config = ((T.MambaForCausalLM, T.MambaConfig) if arch == "mamba"
                       else (T.FalconMambaForCausalLM, T.FalconMambaConfig))
        cfg = config(vocab_size=264, hidden_size=32, num_hidden_layers=layers, state_size=4,
                     expand=2, conv_kernel=2, **kw)
        return cls(cfg).eval()
    cfg = T.RwkvConfig(vocab_size=264, hidden_size=32, num_hidden_layers=layers,
                       attention_hidden_size=32, intermediate_size=64, context_length=64, **kw)
    return T.RwkvForCausalLM(cfg).eval()


def any_lm(arch: str):
    return state_space_lm(arch) if arch in STATE_SPACE else causal_lm(arch)


def blocks_of(model) -> torch.nn.ModuleList:
    base = model.base_model
    for name in ("layers", "h", "blocks"):
        if isinstance(getattr(base, name, None), torch.nn.ModuleList):
            return getattr(base, name)
    return base.decoder.layers  # OPT


def run(model, ids):
    """The model's hidden states and the input of its first block, seen by a hook."""
    seen = []

    def pre(mod, args, kwargs):
        seen.append(args[0] if args else kwargs["hidden_states"])

    handle = blocks_of(model)[0].register_forward_pre_hook(pre, with_kwargs=True)
    try:
        with torch.no_grad():
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    finally:
        handle.remove()
    return hidden, seen[0]


def embedding_output(arch: str, model, ids) -> torch.Tensor | None:
    """The embedding output computed by hand (what the first block gets), for the
    architectures where it is a plain formula; None for OPT (learned offset positions)."""
    emb = model.get_input_embeddings()
    with torch.no_grad():
        if arch in ("gpt_neox", "llama", "mistral", "qwen2", "gemma2"):
            return emb(ids)  # Gemma 2's embedding module scales by sqrt(hidden) itself
        if arch == "gpt2":
            return emb(ids) + model.transformer.wpe(torch.arange(ids.shape[1]))
        if arch == "granite":
            return emb(ids) * model.config.embedding_multiplier
    return None


@pytest.fixture(scope="module")
def ids():
    return torch.randint(3, 250, (2, 7), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_entry_0_is_the_embedding_output_for_the_transformer_matrix(arch, ids):
    model = causal_lm(arch)
    layout = hidden_state_layout(model)
    hidden, block_input = run(model, ids)
    n = model.config.num_hidden_layers
    assert len(layout) == len(hidden) == n + 1
    assert layout[0] == EMBEDDINGS
    assert torch.equal(hidden[0], block_input)  # what the first block is given
    by_hand = embedding_output(arch, model, ids)
    if by_hand is not None:
        torch.testing.assert_close(hidden[0], by_hand, rtol=0, atol=0)
    assert layout[1:-1] == [f"block {k}" for k in range(1, n)]
    assert layout[-1] == ("final project_out" if arch == "opt-350m" else FINAL_NORM)


@pytest.mark.parametrize("arch", STATE_SPACE)
def test_entry_0_is_the_first_blocks_output_for_mamba_and_rwkv(arch, ids):
    model = state_space_lm(arch)
    layout = hidden_state_layout(model)
    hidden, block_input = run(model, ids)
    n = model.config.num_hidden_layers
    assert len(layout) == len(hidden) == n + 1  # as many entries, but no embedding output
    assert layout == [*(f"block {k}" for k in range(1, n + 1)), FINAL_NORM]
    with torch.no_grad():
        embedded = model.get_input_embeddings()(ids)
        first = blocks_of(model)[0](embedded)
        first = first if isinstance(first, torch.Tensor) else first[0]
        norm = model.base_model.norm_f if arch != "rwkv" else model.base_model.ln_out
        normed = norm(hidden[-2])
    assert torch.equal(block_input, embedded)
    assert not torch.allclose(hidden[0], embedded)  # not the embedding output ...
    torch.testing.assert_close(hidden[0], first, rtol=0, atol=0)  # ... the first block's
    torch.testing.assert_close(hidden[-1], normed, rtol=0, atol=0)  # last block, normed


def test_rwkv_rescaled_blocks_are_still_blocks(ids):
    """At inference RWKV halves its hidden states every ``rescale_every`` blocks after
    the block returned them: the entries are those blocks' outputs, halved."""
    model = state_space_lm("rwkv", layers=4, rescale_every=1)
    assert hidden_state_layout(model) == ["block 1", "block 2", "block 3", "block 4",
                                          FINAL_NORM]


def test_an_encoder_has_embeddings_and_no_final_norm():
    cfg = T.BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    assert hidden_state_layout(T.BertForMaskedLM(cfg).eval()) == [EMBEDDINGS, "block 1",
                                                                  "block 2"]


def test_a_model_the_probe_cannot_read_gets_no_layout():
    class Odd(torch.nn.Module):
        config = None

        def forward(self, **kwargs):
            raise RuntimeError("no")

    assert hidden_state_layout(Odd()) == []


@pytest.mark.parametrize("arch", ["gpt_neox", "mamba", "rwkv"])
def test_the_forward_pass_names_what_it_pooled(arch):
    tok = byte_tokenizer()
    model = any_lm(arch)
    ids, mask = tokenize(tok, TEXTS, max_length=16)
    result = forward_pass(model, ids, mask, batch_size=4)
    assert result.layer_names == hidden_state_layout(model)
    assert len(result.layer_names) == len(result.pooled)
    assert result.layer_names[0] == ("block 1" if arch in STATE_SPACE else EMBEDDINGS)


@pytest.mark.parametrize("arch", ["llama", "mamba", "falcon_mamba", "rwkv"])
def test_records_and_the_layer_heatmap_label_what_each_index_is(arch, tmp_path, monkeypatch):
    """The embedding record carries ``layer_names``; the heatmap's rows use them."""
    from toposig.config import RunSettings
    from toposig.families.embedding import EmbeddingFamily
    from toposig.model.embedding import analyse_checkpoint
    from toposig.model.placement import Placement
    from toposig.sources.checkpoints import Checkpoint

    model = any_lm(arch)
    run = RunSettings(n_texts=len(TEXTS), max_length=16, batch_size=4, device="cpu",
                      dtype="float32")
    settings = EmbeddingFamily.seeded(run, pca_dim=3, layers="all")
    (tmp_path / arch).mkdir()
    (tmp_path / arch / "weights.bin").write_bytes(b"stand-in")  # for the fingerprint
    records = []
    for step in (0, 10):
        ckpt = Checkpoint(arch, arch, step, "local", str(tmp_path / arch))
        out = analyse_checkpoint(ckpt, TEXTS, settings, run=run, placement=Placement.resolve(
            "cpu", "float32"), model=model, tokenizer=byte_tokenizer())
        records.append({**out.record, "model_label": arch, "status": "ok"})
    record = records[0]
    names = record["layer_names"]
    assert names == hidden_state_layout(model)
    assert sorted(record["layer_features"], key=int) == [str(i) for i in range(len(names))]
    assert record["layer"] == len(names) - 1 and record["num_layers"] == len(names) - 1
    assert names[0] == ("block 1" if arch in STATE_SPACE else EMBEDDINGS)

    figs = [pa.plot_layer_heatmaps.plot(records, {})]
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == names
    assert ax.get_ylabel() == "hidden state"
    plt.close(figs[0])


def record(**fields) -> Record:
    """A finished embedding record with ``fields``."""
    return Record.from_json({"model": "m", "model_label": "m", "step": 0, "status": "ok",
                             "features": {}, **fields})


def test_older_records_are_labelled_from_their_model_type():
    old = {"num_layers": 3, "layer": 3}
    assert pa.layer_names(record(**old, model_type="mamba")) == ["block 1", "block 2",
                                                                 "block 3", FINAL_NORM]
    assert pa.layer_names(record(**old, model_type="rwkv"))[0] == "block 1"
    assert pa.layer_names(record(**old, model_type="gpt_neox")) == [
        EMBEDDINGS, "block 1", "block 2", "last hidden state"]
    assert pa.layer_names(record(**old)) is None
    assert pa.layer_tick_labels([record(**old)], [0, 2]) == ["0", "2"]  # unknown: the index
    own = record(**old, model_type="mamba", layer_names=["a", "b", "c", "d"])
    assert pa.layer_tick_labels([record(**old), own], [3, 0, 7]) == ["d", "a", "7"]


def test_the_fallback_agrees_with_the_probe():
    for arch in (*STATE_SPACE, "gpt_neox", "llama"):
        model = any_lm(arch)
        probed = hidden_state_layout(model)
        derived = pa.layer_names(record(model_type=model.config.model_type,
                                        num_layers=len(probed) - 1))
        assert derived[:-1] == probed[:-1]
