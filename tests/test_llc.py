"""The local learning coefficient (toposig.model.llc, the ``llc`` family): devinterp's own
estimate, called as devinterp's users call it; learning coefficients known in closed form
recovered within devinterp's own test's tolerance (3.5 standard deviations over chains);
the chains' flags; the loss it samples is the model's own."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import causal_lm

from toposig.config import SettingsError
from toposig.families.llc import LLCFamily
from toposig.model.llc import DIVERGED, NEGATIVE, OK, chain_flags, sample_llc


@dataclass(frozen=True)
class Options:
    chains: int = 2
    draws: int = 10
    burnin: int = 0
    lr: float = 3e-4
    n_beta: float = 100.0
    localization: float = 100.0
    batch: int = 4
    max_rise: float = 5.0
    seed: int = 7


def windows(n: int = 12, length: int = 17, vocab: int = 264, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(seed))


def test_the_estimate_is_devinterps_own_on_the_same_seed(tmp_path):
    from datasets import Dataset
    from devinterp.slt.llc import llc

    model, ids, o = causal_lm("gpt_neox", seed=1, hidden=16), windows(), Options()
    ours = sample_llc(model, ids, o)
    theirs = llc(model, Dataset.from_dict({"input_ids": ids.tolist()}).with_format("torch"),
                 {}, lr=o.lr, n_beta=o.n_beta, num_chains=o.chains, num_draws=o.draws,
                 batch_size=o.batch, localization=o.localization, num_init_loss_batches=3,
                 init_seed=o.seed, device="cpu", output_path=str(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(ours.loss_trace, theirs["loss_trace"].values)
    # devinterp's own per-chain mean is in float32, ours the same mean in float64: they
    # differ by nβ times float32's rounding of losses near init_loss (a few 1e-7 relative),
    # which on a small LLC is far more than a relative tolerance allows
    np.testing.assert_allclose(ours.per_chain, theirs["llc_per_chain"].values, rtol=0,
                               atol=o.n_beta * ours.init_loss * 1e-6)
    assert ours.init_loss == float(theirs["init_loss"].values)
    again = sample_llc(model, ids, o)  # the same seed, the same chains
    np.testing.assert_array_equal(again.per_chain, ours.per_chain)


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2"])
def test_the_loss_it_samples_is_the_one_the_model_returns_dropout_or_not(arch):
    """GPT-2's config has dropout 0.1: devinterp puts the model in train mode, the LLC's
    loss is the model's in eval mode, as it returns it."""
    model, ids = causal_lm(arch, seed=2, hidden=16), windows(n=8)
    estimate = sample_llc(model, ids, Options(draws=1))  # every window once at the start
    with torch.no_grad():
        loss = float(model(ids, labels=ids).loss)
    assert estimate.init_loss == pytest.approx(loss, rel=1e-5)
    again = sample_llc(model, ids, Options(draws=1))
    np.testing.assert_array_equal(again.loss_trace, estimate.loss_trace)


def test_the_model_the_random_generators_and_the_output_are_left_as_found(capfd, caplog):
    import logging
    import random

    caplog.set_level(logging.INFO)

    model, ids = causal_lm("gpt2", seed=2, hidden=16), windows(n=8)
    model.train()
    model.transformer.h[0].eval()  # a frozen block, kept in eval mode
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    want = torch.rand(3), np.random.rand(3), random.random()
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    sample_llc(model, ids, Options(draws=3))
    got = torch.rand(3), np.random.rand(3), random.random()
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1]) \
        and got[2] == want[2]
    assert model.training and not model.transformer.h[0].training
    assert model.transformer.h[1].training
    assert "Chain" not in capfd.readouterr().err  # devinterp's bars, silenced
    assert "total time" not in caplog.text  # and its log lines at INFO
    assert logging.getLogger("devinterp").level == logging.NOTSET


def test_the_burn_in_is_left_out_of_the_estimate():
    model, ids = causal_lm("gpt_neox", seed=2, hidden=16), windows()
    e = sample_llc(model, ids, Options(draws=8, burnin=4))
    assert e.loss_trace.shape == (2, 12)
    np.testing.assert_allclose(e.per_chain, 100.0 * (e.loss_trace[:, 4:].mean(axis=1)
                                                     - e.init_loss))
    short = sample_llc(model, ids, Options(draws=3))
    assert short.features()["llc_drift"] is None  # fewer than four draws


class Linear(torch.nn.Module):
    """A regular model of d parameters (its loss is given as ``loss_fn``): learning
    coefficient d / 2."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w.clone())


class Polynomial(torch.nn.Module):
    """y = x · Π w_i^p_i: devinterp's normal-crossing example, whose learning coefficient
    is 1 / (2 max p) (the table of devinterp's accuracy test)."""

    def __init__(self, powers: tuple[int, ...]) -> None:
        super().__init__()
        self.powers = torch.tensor(powers)
        self.w = torch.nn.Parameter(torch.zeros(len(powers)))


N = 1000


def indices() -> torch.Tensor:
    """Each example as a two-token "window" holding its index: devinterp's per-token loss
    of shape (batch, 1) then is the example's loss."""
    return torch.stack([torch.arange(N), torch.zeros(N, dtype=torch.long)], dim=1)


KNOWN = dict(chains=6, draws=600, lr=1e-3, n_beta=N / math.log(N), localization=0.0,
             batch=N, max_rise=100.0, seed=42)


@pytest.mark.parametrize("d", [3, 6])
def test_a_regular_model_has_half_its_dimension(d):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(N, d, generator=g)
    y = x @ torch.linspace(-2.0, 1.0, d) + torch.randn(N, generator=g)
    w_hat = torch.linalg.lstsq(x, y[:, None]).solution[:, 0]  # the minimum: the MLE

    def loss(model, ids):  # the Gaussian negative log-likelihood, less its constant
        i = ids[:, 0]
        return (0.5 * (x[i] @ model.w - y[i]) ** 2)[:, None]

    e = sample_llc(Linear(w_hat), indices(), Options(**KNOWN), loss_fn=loss)
    f = e.features()
    assert f["llc_chains_kept"] == 6
    assert abs(f["llc_mean"] - d / 2) < 3.5 * f["llc_std"], f


@pytest.mark.parametrize(("powers", "known"), [((0, 1), 0.5), ((1, 1), 0.5)])
def test_the_normal_crossing_has_its_known_coefficient(powers, known):
    """Its singular cases mix slowly: at this budget the chains' spread is wide (0.27 for
    (1, 1)), so the regular models carry the precision; (1, 2), whose 1/4 this budget
    does not tell from 1/2, is left out."""
    g = torch.Generator().manual_seed(42)
    x = 2 * torch.randn(N, generator=g)
    y = 0.25 * torch.randn(N, generator=g)
    model = Polynomial(powers)

    def loss(model, ids):  # devinterp's: the squared error of y = x · Π w^p
        i = ids[:, 0]
        return ((x[i] * torch.prod(model.w ** model.powers) - y[i]) ** 2)[:, None]

    f = sample_llc(model, indices(), Options(**KNOWN), loss_fn=loss).features()
    assert abs(f["llc_mean"] - known) < 3.5 * f["llc_std"], (powers, f)


def test_a_chain_that_diverges_or_goes_negative_is_flagged_and_left_out():
    trace = np.full((4, 8), 3.5)
    trace[1, 5] = np.nan  # failed: devinterp stops it, the rest of its trace is NaN
    trace[2, -2:] = 9.0  # its last quarter 5.5 nats above the start
    per_chain = np.array([12.0, np.nan, 30.0, -4.0])
    assert chain_flags(per_chain, trace, 3.0, max_rise=5.0) == (OK, DIVERGED, DIVERGED,
                                                                 NEGATIVE)
    assert chain_flags(per_chain, trace, 3.0, max_rise=7.0)[2] == OK  # within the rise


def test_the_record_keeps_every_chain_and_averages_only_the_kept(monkeypatch):
    from toposig.model import llc

    model, ids = causal_lm("gpt_neox", seed=3, hidden=16), windows()
    estimate = sample_llc(model, ids, Options(chains=3))
    forced = llc.LLCEstimate(np.array([2.0, 4.0, -1.0]), estimate.loss_trace, 3.0,
                             (OK, OK, NEGATIVE), 100.0)
    f = forced.features()
    assert (f["llc_mean"], f["llc_chains_kept"]) == (3.0, 2)
    assert f["llc_std"] == pytest.approx(math.sqrt(2.0))
    none = llc.LLCEstimate(np.array([-1.0]), estimate.loss_trace[:1], 3.0, (NEGATIVE,), 1.0)
    assert none.features()["llc_mean"] is None and none.features()["llc_chains_kept"] == 0


def test_too_few_windows_and_a_batch_beyond_them_are_refused():
    with pytest.raises(ValueError, match="at least one batch of 4 windows"):
        sample_llc(causal_lm("gpt_neox", hidden=16), windows(n=3), Options())
    with pytest.raises(SettingsError, match="--llc-batch 32 is more than the 16 windows"):
        LLCFamily(batch=32, n_windows=16)


def test_the_sampler_settings_are_in_the_settings_hash():
    base = LLCFamily().hash_of("t", "float32")
    for field, value in (("chains", 5), ("draws", 300), ("burnin", 10), ("lr", 1e-3),
                         ("n_beta", 50.0), ("localization", 10.0), ("batch", 8),
                         ("max_rise", 2.0), ("n_windows", 32), ("seed", 1)):
        assert LLCFamily(**{field: value}).hash_of("t", "float32") != base, field


def test_the_live_monitor_refuses_it_in_the_background(tmp_path):
    from toposig.live.monitor import TopologyMonitor
    from toposig.model.training import byte_tokenizer

    with pytest.raises(ValueError, match="llc seeds the process's random generators"):
        TopologyMonitor(byte_tokenizer(), tmp_path / "live", families=["llc"],
                        texts=["a text"] * 4, background=True)
    assert not (tmp_path / "live").exists()


# --- the answer objective: a task trained on its answers alone (the grokking suite) -----


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2"])
def test_the_answer_loss_is_the_models_with_every_label_but_the_last_masked(arch):
    from toposig.model.llc import eval_answer_loss

    model, ids = causal_lm(arch, seed=2, hidden=16), windows(n=8, length=4)
    estimate = sample_llc(model, ids, Options(draws=1), loss_fn=eval_answer_loss)
    labels = torch.full_like(ids, -100)
    labels[:, -1] = ids[:, -1]
    with torch.no_grad():
        answer = float(model(ids, labels=labels).loss)
        every = float(model(ids, labels=ids).loss)
    assert estimate.init_loss == pytest.approx(answer, rel=1e-5)
    assert abs(answer - every) > 1e-3  # not the next-token loss of the whole window
    assert eval_answer_loss(model, ids).shape == (8, 3)  # devinterp's (b, T - 1)


def test_answer_windows_are_whole_texts_of_one_length_drawn_with_the_seed():
    from toposig.model.loss_probes import answer_windows
    from toposig.model.modular_addition import tokenizer

    tok = tokenizer(17)
    lines = [f"{a} {b} = {(a + b) % 17}" for a in range(17) for b in range(3)]
    ids = answer_windows(tok, lines, 10, seed=3)
    assert ids.shape == (10, 4)
    assert {tuple(r) for r in ids.tolist()} <= {tuple(tok(t)["input_ids"]) for t in lines}
    assert torch.equal(ids, answer_windows(tok, lines, 10, seed=3))
    assert not torch.equal(ids, answer_windows(tok, lines, 10, seed=4))
    with pytest.raises(ValueError, match="one token count"):
        answer_windows(tok, [*lines[:5], "1 2 ="], 6, seed=0)
    with pytest.raises(ValueError, match="5 texts, fewer than the 6"):
        answer_windows(tok, lines[:5], 6, seed=0)


def test_the_answer_objective_and_its_texts_content_are_in_the_hash_not_their_path(tmp_path):
    from toposig.config import RunSettings
    from toposig.families.base import FamilyInputs

    (tmp_path / "a.txt").write_text("1 2 = 3\n2 2 = 4\n")
    (tmp_path / "b.txt").write_text("1 2 = 3\n2 2 = 4\n")
    (tmp_path / "c.txt").write_text("1 2 = 3\n2 3 = 5\n")

    def hash_of(**kw):
        family = LLCFamily(**kw)
        return family.settings_hash(FamilyInputs([], ["probe text"], RunSettings(),
                                                 {"llc": family}), "float32")

    base = hash_of()
    assert hash_of(objective="answer") != base
    a = hash_of(objective="answer", texts_file=str(tmp_path / "a.txt"))
    assert a == hash_of(objective="answer", texts_file=str(tmp_path / "b.txt"))
    assert a != hash_of(objective="answer", texts_file=str(tmp_path / "c.txt"))
    with pytest.raises(SettingsError, match="--llc-texts .* is not a file"):
        LLCFamily(texts_file=str(tmp_path / "missing.txt"))
    with pytest.raises(SettingsError, match="--llc-objective"):
        LLCFamily(objective="answers")
