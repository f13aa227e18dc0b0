"""Per-example gradients, their projection and the features of their cloud."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import neox_config, pythia_tokenizer

from toposig.model import gradients
from toposig.model.loss_probes import batch_loss, probe_windows


@pytest.fixture(scope="module")
def small_lm():
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(0)
    return GPTNeoXForCausalLM(neox_config(hidden=16, layers=2, heads=2, vocab=97)).eval()


def test_per_example_gradients_equal_one_text_at_a_time(small_lm):
    ids = torch.randint(0, 97, (5, 12), generator=torch.Generator().manual_seed(1))
    chunks = list(gradients.per_example_gradients(small_lm, ids, chunk_size=2))
    assert [c.shape[0] for c in chunks] == [2, 2, 1]
    batched = np.concatenate(chunks)
    n_params = sum(p.numel() for p in small_lm.parameters())
    assert batched.shape == (5, n_params)
    for i in range(5):
        small_lm.zero_grad()
        loss = gradients.window_loss(small_lm(ids[i:i + 1]).logits[0], ids[i])
        loss.backward()
        one = torch.cat([p.grad.reshape(-1) for p in small_lm.parameters()]).numpy()
        assert np.allclose(batched[i], one, atol=1e-6, rtol=1e-4)
    small_lm.zero_grad()
    # the mean of the per-example gradients is the gradient of the batch loss
    batch_loss(small_lm, ids).backward()
    full = torch.cat([p.grad.reshape(-1) for p in small_lm.parameters()]).numpy()
    assert np.allclose(batched.mean(0), full, atol=1e-6, rtol=1e-4)
    small_lm.zero_grad()


def unbiased_noise_scale(g: np.ndarray) -> float:
    """McCandlish et al.'s estimate from the gradients themselves (n, P)."""
    n = len(g)
    trace = np.var(g, axis=0, ddof=1).sum()
    return trace / (np.sum(g.mean(0) ** 2) - trace / n)


def test_the_noise_scale_is_the_trace_of_the_covariance_over_the_squared_mean():
    rng = np.random.default_rng(0)
    mean = np.full(50, 0.2)
    g = mean + 0.5 * rng.standard_normal((4000, 50))  # tr Σ = 50 · 0.25, |G|² = 2
    got = gradients.noise_scale(np.linalg.norm(g, axis=1), g.mean(axis=0))
    assert got == pytest.approx(unbiased_noise_scale(g), rel=1e-9)
    assert got == pytest.approx(50 * 0.25 / 2.0, rel=0.05)
    assert np.isnan(gradients.noise_scale(np.ones(3), np.zeros(5)))


def test_the_noise_scale_is_not_capped_at_the_number_of_examples():
    """64 examples, B = 400: the plain |Ḡ|² would give about 55 (tr Σ / (|G|² + tr Σ / n))."""
    rng = np.random.default_rng(1)
    got = []
    for _ in range(40):
        g = 0.05 + rng.standard_normal((64, 200))  # tr Σ = 200, |G|² = 0.5
        got.append(gradients.noise_scale(np.linalg.norm(g, axis=1), g.mean(axis=0)))
    assert np.nanmedian(got) == pytest.approx(400, rel=0.3)


def test_the_gradients_record_has_the_noise_scale_of_its_windows(small_lm):
    from toposig.families.gradients import GradientsFamily
    from toposig.model.loss_probes import analyse_gradients
    from toposig.sources.checkpoints import Checkpoint

    class Tok:
        eos_token_id = 0

        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[1 + (ord(c) % 96) for c in t] for t in texts]}

    texts = [f"text {i} " * 20 for i in range(12)]
    fam = GradientsFamily(n_windows=6, window=12, proj_dim=8)
    out = analyse_gradients(Checkpoint("m", "m", 0, "memory", "m"),
                            small_lm, Tok(), texts, fam)
    ids = probe_windows(Tok(), texts, 6, 12, fam.seed)
    g = np.concatenate(list(gradients.per_example_gradients(small_lm, ids)))
    want = unbiased_noise_scale(g.astype(np.float64))
    assert out.record["features"]["grad_noise_scale"] == pytest.approx(want, rel=1e-5)


def test_row_norms_equal_numpys_in_float64_without_a_float64_copy():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((5, 300_001)) * np.logspace(-20, 20, 5)[:, None]
         ).astype(np.float32)
    got = gradients.row_norms(g)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.linalg.norm(g.astype(np.float64), axis=1),
                               rtol=1e-13, atol=0)
    # a float32 sum would lose the rows of 1e-20-scale values to underflow
    assert np.all(got > 0)


def test_the_projection_is_seeded_and_keeps_distances():
    a = gradients.sketch(5000, 256, seed=3)
    b = gradients.sketch(5000, 256, seed=3)
    c = gradients.sketch(5000, 256, seed=4)
    x = np.random.default_rng(0).standard_normal((20, 5000)).astype(np.float32)
    assert np.array_equal(a.transform(x), b.transform(x))
    assert not np.array_equal(a.transform(x), c.transform(x))
    d_in = np.linalg.norm(x[:, None] - x[None], axis=-1)[np.triu_indices(20, 1)]
    px = a.transform(x)
    d_out = np.linalg.norm(px[:, None] - px[None], axis=-1)[np.triu_indices(20, 1)]
    assert (d_out / d_in).min() > 0.75 and (d_out / d_in).max() < 1.25


def test_gradient_features_on_known_clouds():
    # Points on a circle: one long H1 bar; equal norms; cosines average to -1/(n-1).
    n = 24
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    circle = np.column_stack([np.cos(t), np.sin(t)])
    feats, diagrams, _ = gradients.gradient_features(circle, np.full(n, 2.0))
    assert feats["grad_h1_n_features"] == 1 and feats["grad_h1_max_persistence"] > 1.0
    assert feats["grad_norm_mean"] == 2.0 and feats["grad_norm_std"] == 0.0
    assert feats["grad_cosine_mean"] == pytest.approx(-1 / (n - 1))
    assert len(diagrams) == 2
    # All examples pulling the same way: cosine 1.
    same = np.outer(np.arange(1, 6), [1.0, 2.0, 0.5])
    assert gradients.gradient_features(same, np.arange(1.0, 6.0))[0][
        "grad_cosine_mean"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 3"):
        gradients.gradient_features(same[:2], np.ones(2))


def test_probe_windows_are_seeded_non_overlapping_and_refuse_short_texts(tokenizer_file):
    tok = pythia_tokenizer(tokenizer_file)
    texts = ["the quick brown fox jumps over the lazy dog " * 8, "a second text " * 20]
    one = probe_windows(tok, texts, 4, 10, seed=0)
    assert one.shape == (4, 10) and one.dtype == torch.long
    assert torch.equal(one, probe_windows(tok, texts, 4, 10, seed=0))
    assert not torch.equal(one, probe_windows(tok, texts, 4, 10, seed=1))
    stream = []
    for ids in tok(texts, add_special_tokens=False)["input_ids"]:
        stream += [*ids, tok.eos_token_id]
    windows = [stream[s:s + 10] for s in range(0, len(stream) - 9, 10)]
    assert all(r.tolist() in windows for r in one)  # whole aligned windows of the stream
    with pytest.raises(ValueError, match="windows"):
        probe_windows(tok, ["short"], 2, 10, seed=0)
