#!/usr/bin/env python
"""Cost per checkpoint of the landscape and gradient families, and against the plain way.

For the three ``tiny`` model shapes (byte-level, random weights) and a Pythia-14m-shaped
checkpoint (random weights, Pythia tokenizer), with the default settings
(``LandscapeFamily()``, ``GradientsFamily()``), prints the seconds per checkpoint of

- ``landscape``: curvature (Lanczos top-2 + 16 Hutchinson probes) and the 13 × 13 loss
  surface with its merge tree;
- ``gradients``: per-example gradients of 64 windows, projection and Vietoris–Rips.

And two ratios against the straightforward way of doing the same work:

- the top-2 Hessian eigenvalues by ARPACK's restarted Lanczos against power iteration
  with deflation (what PyHessian does), to the same relative tolerance: Hessian-vector
  products used and seconds;
- per-example gradients by ``vmap(grad)`` against one backward pass per example.

With ``--parts``, instead: where the time of the two families goes on issue 38's tiny
Pythia-shaped checkpoint (hidden 64, 2 layers, the 50,304-token vocabulary): one forward
pass and loss with and without the output head, one grid point of the surface, one
Hessian-vector product, one chunk of per-example gradients and its projection, and the
family's cost estimated from them (the HVP count is the most Lanczos may use); then both
families measured on it as a run computes them (target: at most 60 s on 2 cores).
``--landscape-windows``, ``--landscape-res`` and ``--lanczos-tol`` try other settings
(the defaults before 2026-11-29: 16, 21 and 1e-3).

    python bench/bench_loss_probes.py [--skip-pythia] [--parts]
        [--landscape-windows N] [--landscape-res R] [--lanczos-tol T]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_embedding_stage import make_pythia14m  # noqa: E402

from toposig.families.gradients import GradientsFamily  # noqa: E402
from toposig.families.landscape import LandscapeFamily  # noqa: E402
from toposig.model import curvature, gradients  # noqa: E402
from toposig.model.loss_probes import (  # noqa: E402
    analyse_gradients,
    analyse_landscape,
    batch_loss,
    probe_windows,
)
from toposig.model.training import byte_tokenizer, load_suite_config, model_config  # noqa: E402
from toposig.sources.checkpoints import resolve_series  # noqa: E402
from toposig.sources.corpus import probe_texts  # noqa: E402


def power_iteration_top2(hvp, dim: int, tol: float, seed: int, max_iter: int = 500
                         ) -> tuple[list[float], int]:
    """Top-2 eigenvalues (largest magnitude) by power iteration with deflation; stops
    when the Rayleigh quotient changes by less than ``tol`` relative (PyHessian's rule)."""
    rng = np.random.default_rng(seed)
    found: list[tuple[float, np.ndarray]] = []
    calls = 0
    for _ in range(2):
        v = rng.standard_normal(dim)
        v /= np.linalg.norm(v)
        lam = None
        for _ in range(max_iter):
            hv = hvp(v)
            calls += 1
            for mu, u in found:  # deflate
                hv -= mu * (u @ v) * u
            new = float(v @ hv)
            v = hv / np.linalg.norm(hv)
            if lam is not None and abs(new - lam) < tol * abs(lam):
                lam = new
                break
            lam = new
        found.append((lam, v))
    return [mu for mu, _ in found], calls


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def models(tmp: Path, pythia: bool) -> list[tuple[str, Path]]:
    from transformers import GPTNeoXForCausalLM

    suite = load_suite_config("tiny")
    out = []
    for spec in suite.models:
        folder = tmp / spec.name / "step0"
        torch.manual_seed(0)
        GPTNeoXForCausalLM(model_config(spec, suite)).save_pretrained(folder)
        byte_tokenizer().save_pretrained(folder)
        out.append((spec.name, folder))
    if pythia:
        out.append(("pythia-14m shape", make_pythia14m(tmp / "pythia-14m" / "step0")))
    return out


def per_example_loop(model, ids) -> list[torch.Tensor]:
    """The straightforward way: one backward pass per example."""
    rows = []
    for i in range(ids.shape[0]):
        model.zero_grad()
        gradients.window_loss(model(ids[i:i + 1]).logits[0], ids[i]).backward()
        rows.append(torch.cat([q.grad.reshape(-1) for q in model.parameters()]))
    model.zero_grad()
    return rows


def measure(name: str, folder: Path, texts: list[str], ls: LandscapeFamily,
            gs: GradientsFamily) -> str:
    """One table row: both families' timings and the two ratios."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ckpt = resolve_series(str(folder.parent), None)[0]
    n_params = sum(q.numel() for q in model.parameters())
    land = analyse_landscape(ckpt, model, tok, texts, ls).record
    grad = analyse_gradients(ckpt, model, tok, texts, gs).record

    ids = probe_windows(tok, texts, ls.n_windows, ls.window, ls.seed)
    params = list(model.parameters())
    for q in params:
        q.requires_grad_(True)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        hvp = curvature.loss_hvp(lambda: batch_loss(model, ids), params)
    lan, t_lan = timed(lambda: curvature.top_eigenpairs(
        hvp, n_params, 2, tol=ls.lanczos_tol, maxiter=ls.lanczos_maxiter, seed=0))
    (_, n_pow), t_pow = timed(lambda: power_iteration_top2(hvp, n_params, ls.lanczos_tol,
                                                           seed=0))
    gids = probe_windows(tok, texts, gs.n_windows, gs.window, gs.seed)
    _, t_vmap = timed(lambda: list(gradients.per_example_gradients(model, gids,
                                                                   gs.chunk_size)))
    _, t_loop = timed(lambda: per_example_loop(model, gids))
    t = land["timings_s"]
    return (f"{name:<18}{n_params:>11,}{t['curvature']:>8.2f}{t['surface']:>8.2f}"
            f"{t['landscape']:>9.2f}{grad['timings_s']['gradients']:>8.2f}"
            f"{lan.n_hvp:>7d}/{t_lan:<7.2f}{n_pow:>6d}/{t_pow:<7.2f}"
            f"{t_pow / t_lan:>6.1f}{t_vmap:>8.2f}{t_loop:>8.2f}{t_loop / t_vmap:>6.1f}")


def mean_seconds(fn, repeats: int = 3) -> float:
    """Mean seconds of ``fn()`` over ``repeats`` calls after one warm-up call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def next_token_loss(logits, ids):
    """The probes' loss before 2026-11-29: the logits (n, T, V) sliced and copied, then
    the mean next-token cross-entropy (nats) of the windows ``ids`` (n, T)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                           ids[:, 1:].reshape(-1))


def parts(texts: list[str], ls: LandscapeFamily, gs: GradientsFamily) -> None:
    """Print where the probes' time goes on a tiny Pythia-shaped checkpoint."""
    from bench_embedding_stage import TOKENIZER_FILE
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=50304, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256)).float().eval()
    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_FILE), eos_token="<|endoftext|>")
    ids = probe_windows(tok, texts, ls.n_windows, ls.window, ls.seed)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    dim = sum(p.numel() for p in params)
    in_head = model.get_output_embeddings().weight.numel()
    print(f"tiny Pythia shape: {dim:,} parameters ({in_head:,} in the output head); "
          f"landscape batch {tuple(ids.shape)}")
    with torch.no_grad():
        whole = mean_seconds(lambda: batch_loss(model, ids))
        body = mean_seconds(lambda: model.gpt_neox(ids))
    theta = [p.detach() for p in params]
    step = [torch.randn_like(t) for t in theta]
    buffers = dict(model.named_buffers())

    def grid_point() -> float:
        with torch.no_grad():
            point = {n: t + 0.1 * d for n, t, d in zip(names, theta, step, strict=True)}
            return float(functional_call(model, (point, buffers), (ids,), {"labels": ids}).loss)

    def grid_point_copying() -> float:  # the way before 2026-11-29: the logits sliced, copied
        with torch.no_grad():
            point = {n: t + 0.1 * d for n, t, d in zip(names, theta, step, strict=True)}
            return float(next_token_loss(functional_call(model, (point, buffers), (ids,)).logits,
                                         ids))

    point = mean_seconds(grid_point)
    copying = mean_seconds(grid_point_copying)
    with sdpa_kernel(SDPBackend.MATH):
        hvp = curvature.loss_hvp(lambda: batch_loss(model, ids), params)
        vector = np.random.default_rng(0).standard_normal(dim)
        product = mean_seconds(lambda: hvp(vector), repeats=2)
    gids = probe_windows(tok, texts, gs.n_windows, gs.window, gs.seed)

    def chunk() -> np.ndarray:
        return next(iter(gradients.per_example_gradients(model, gids[:gs.chunk_size],
                                                         gs.chunk_size)))

    grads = mean_seconds(chunk, repeats=1)
    proj = gradients.sketch(dim, gs.proj_dim, gs.seed)
    g = chunk()
    projection = mean_seconds(lambda: proj.transform(g), repeats=2)
    n_hvp = ls.top_k * ls.lanczos_maxiter + ls.trace_samples
    chunks = gs.n_windows // gs.chunk_size
    print(f"forward + loss {whole * 1000:.0f} ms, of which the body {body * 1000:.0f} ms: "
          f"the output head and its loss {100 * (whole - body) / whole:.0f} %")
    print(f"one grid point {point * 1000:.0f} ms by the model's own loss "
          f"(model(ids, labels=ids).loss), {copying * 1000:.0f} ms with the logits sliced and "
          f"copied first ({copying / point:.2f}x)")
    print(f"one Hessian-vector product "
          f"{product * 1000:.0f} ms; per-example gradients {grads * 1000:.0f} ms and their "
          f"projection {projection * 1000:.0f} ms per chunk of {gs.chunk_size}")
    print(f"landscape ≈ {ls.res ** 2} grid points × {point:.2f} s + at most {n_hvp} HVPs × "
          f"{product:.2f} s = {ls.res ** 2 * point:.0f} + {n_hvp * product:.0f} s; "
          f"gradients ≈ {chunks} chunks × {grads + projection:.2f} s = "
          f"{chunks * (grads + projection):.0f} s")
    # a run imports these once, before its first checkpoint's probes: not a per-checkpoint cost
    import gph  # noqa: F401
    import sklearn.random_projection  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tiny-pythia" / "step0"
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        ckpt = resolve_series(str(folder.parent), None)[0]
        land = analyse_landscape(ckpt, model, tok, texts, ls).record
        grad = analyse_gradients(ckpt, model, tok, texts, gs).record
    t, g = land["timings_s"], grad["timings_s"]["gradients"]
    total = t["landscape"] + g
    print(f"MEASURED both families, as a run computes them: landscape {t['landscape']:.1f} s "
          f"(curvature {t['curvature']:.1f} s with {land['lanczos']['n_hvp']} + "
          f"{ls.trace_samples} HVPs, surface {t['surface']:.1f} s) + gradients {g:.1f} s "
          f"= {total:.1f} s (target at most 60 s: {'met' if total <= 60 else 'NOT met'})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skip-pythia", action="store_true")
    p.add_argument("--parts", action="store_true",
                   help="where the probes' time goes on a tiny Pythia-shaped checkpoint, "
                        "and both families measured on it")
    p.add_argument("--landscape-windows", type=int, default=LandscapeFamily.n_windows,
                   help="try another probe batch (default: the package's)")
    p.add_argument("--landscape-res", type=int, default=LandscapeFamily.res,
                   help="try another grid (default: the package's)")
    p.add_argument("--lanczos-tol", type=float, default=LandscapeFamily.lanczos_tol,
                   help="try another Lanczos tolerance (default: the package's)")
    args = p.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    ls = LandscapeFamily(n_windows=args.landscape_windows, res=args.landscape_res,
                           lanczos_tol=args.lanczos_tol)
    gs = GradientsFamily()
    texts = probe_texts(None, 100)
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}")
    print(f"landscape: {ls.n_windows} windows x {ls.window} tokens, top {ls.top_k}, "
          f"{ls.trace_samples} trace probes, {ls.res}x{ls.res} grid; gradients: "
          f"{gs.n_windows} windows, projected to {gs.proj_dim}")
    if args.parts:
        parts(texts, ls, gs)
        return 0
    head = (f"{'model':<18}{'params':>11}{'curv s':>8}{'surf s':>8}{'landsc s':>9}"
            f"{'grad s':>8}{'Lanczos hvp/s':>15}{'power hvp/s':>14}{'x':>6}"
            f"{'vmap s':>8}{'loop s':>8}{'x':>6}")
    print(head)
    with tempfile.TemporaryDirectory() as tmp:
        for name, folder in models(Path(tmp), not args.skip_pythia):
            print(measure(name, folder, texts, ls, gs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
