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
    # devinterp's own per-chain mean is in float32; ours is the same mean in float64
    np.testing.assert_allclose(ours.per_chain, theirs["llc_per_chain"].values, rtol=2e-4)
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
