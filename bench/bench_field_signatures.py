#!/usr/bin/env python
"""Cost per checkpoint of the field's own signatures (issue 58), for every preset's model
shapes, and the LLC against devinterp called directly.

For each distinct model shape of the presets (random weights: the cost does not depend on
the values), with the default settings, prints the seconds per checkpoint of

- ``llc``: devinterp's SGLD (``LLCFamily()``: 4 chains of 200 draws, batches of 16 of 64
  windows of 64 tokens; 4 tokens for the grokking model, whose positions stop at 8), and
  the same call made directly (``devinterp.slt.llc.llc`` on the same windows with the
  same arguments, its progress bars silenced as toposig silences them): the ratio of
  the two medians of ``--repeats`` runs, taken in turn, after one short call of each to
  warm up (target: at most 1.1);
- ``dimension``: TwoNN and MLE of the pooled hidden states of 200 WikiText-2 texts at
  the last layer (``DimensionFamily()``), after the forward pass the embedding shares
  with it, whose seconds are printed beside;
- ``drift``: linear CKA and 10-NN overlap of that cloud with another checkpoint's, per
  checkpoint (a model's checkpoints are related twice each: with the previous and the
  last), after the same forward pass;
- ``heads``: prefix matching of every head on 32 repeated random blocks of 8 tokens and
  every head's OV copying score.

Shapes that presets share are measured once (``ensemble`` has ``seed004``'s).
``--skip-llc`` leaves the LLC out.

    python bench/bench_field_signatures.py [--presets tiny,induction,...] [--repeats 4]
        [--skip-llc]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from toposig.families.dimension import DimensionFamily  # noqa: E402
from toposig.families.drift import DriftFamily  # noqa: E402
from toposig.families.heads import HeadsFamily  # noqa: E402
from toposig.families.llc import LLCFamily  # noqa: E402
from toposig.features.drift import drift_series  # noqa: E402
from toposig.features.intrinsic_dimension import intrinsic_dimensions  # noqa: E402
from toposig.model import induction, modular_addition  # noqa: E402
from toposig.model.embedding import texts_forward  # noqa: E402
from toposig.model.heads import head_scores, repeated_sequences  # noqa: E402
from toposig.model.llc import devinterp_kwargs, sample_llc, windows_dataset  # noqa: E402
from toposig.model.loss_probes import probe_windows  # noqa: E402
from toposig.model.placement import Placement  # noqa: E402
from toposig.model.presets import load_preset  # noqa: E402
from toposig.model.training import SuiteConfig, byte_tokenizer, model_config  # noqa: E402
from toposig.sources.corpus import load_texts, probe_texts  # noqa: E402

PRESETS = ("tiny", "seed004", "ensemble-small", "ensemble", "induction", "grokking")


def shapes(preset: str) -> list[tuple[str, object, object, int]]:
    """(name, model config, tokenizer, window) of each model of ``preset``."""
    c = load_preset(preset)
    if isinstance(c, SuiteConfig):
        return [(spec.name, model_config(spec, c), byte_tokenizer(), 64) for spec in c.models]
    if isinstance(c, induction.InductionConfig):
        return [(c.name, induction.model_config(c), byte_tokenizer(), 64)]
    return [(c.name, modular_addition.model_config(c), modular_addition.tokenizer(c.p), 4)]


def paired_medians(a, b, repeats: int) -> tuple[float, float]:
    """The median seconds of ``a()`` and of ``b()``, run in turn ``repeats`` times each,
    which goes first alternating (so that a slower machine for a while, or a first call's
    warming up, slows both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        pairs = ((a, times[0]), (b, times[1]))
        for fn, out in pairs if i % 2 == 0 else pairs[::-1]:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def direct_llc(model, ids, family: LLCFamily) -> None:
    """devinterp's own call, as its README makes it, with the family's arguments."""
    from devinterp.slt.llc import llc

    with tempfile.TemporaryDirectory() as tmp, \
            contextlib.redirect_stderr(io.StringIO()):  # its bars, as toposig's call has
        llc(model, windows_dataset(ids), {}, output_path=str(Path(tmp) / "s.zarr"),
            **devinterp_kwargs(family, len(ids), "cpu"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", default=",".join(PRESETS))
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--skip-llc", action="store_true",
                   help="leave the LLC and its comparison out (the others take seconds)")
    args = p.parse_args(argv)
    from transformers import GPTNeoXForCausalLM

    print(f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    analysed = load_texts(None, 200, 100)
    probe = probe_texts(None, 100)
    placement = Placement("cpu", "float32")
    dims = DimensionFamily()
    intrinsic_dimensions(torch.randn(50, 8).numpy())  # scikit-dimension's first call compiles
    seen: set[str] = set()
    ratios = []
    print(f"{'preset':<15} {'model':<22} {'params':>8} {'llc s':>7} {'direct s':>9} "
          f"{'ratio':>6} {'fwd s':>6} {'dim s':>6} {'drift s':>7} {'heads s':>7}")
    for preset in args.presets.split(","):
        for name, config, tok, window in shapes(preset):
            key = config.to_json_string()
            if key in seen:
                continue
            seen.add(key)
            torch.manual_seed(0)
            model = GPTNeoXForCausalLM(config).eval()
            family = LLCFamily(window=window)
            texts = probe if preset != "grokking" else modular_addition.task_texts(
                load_preset(preset)) * 20
            ids = probe_windows(tok, texts, family.n_windows, family.window, family.seed)
            short = replace(family, draws=5)
            if args.skip_llc:
                ours = theirs = math.nan
            else:
                sample_llc(model, ids, short), direct_llc(model, ids, short)  # warm up
                ours, theirs = paired_medians(partial(sample_llc, model, ids, family),
                                              partial(direct_llc, model, ids, family),
                                              args.repeats)
                ratios.append(ours / theirs)
            shown = analysed if preset != "grokking" else texts[:200]
            t0 = time.perf_counter()
            fwd = texts_forward(model, tok, shown, 128 if preset != "grokking" else 8,
                                placement, "auto")
            t1 = time.perf_counter()
            intrinsic_dimensions(fwd.result.pooled[-1], dims.discard_fraction, dims.k)
            t2 = time.perf_counter()
            cloud = fwd.result.pooled[-1]
            moved = cloud + 0.1 * np.random.default_rng(0).standard_normal(cloud.shape)
            drift_series([moved, cloud], DriftFamily().k)  # two checkpoints: one each
            t3 = time.perf_counter()
            heads = HeadsFamily()
            head_ids = repeated_sequences(config.vocab_size, heads.n_sequences,
                                          min(heads.length, config.max_position_embeddings // 2),
                                          heads.seed)
            head_scores(model, head_ids, head_ids.shape[1] // 2)
            t4 = time.perf_counter()
            n = sum(p.numel() for p in model.parameters())
            print(f"{preset:<15} {name:<22} {n:>8,} {ours:>7.2f} {theirs:>9.2f} "
                  f"{ours / theirs:>6.3f} {t1 - t0:>6.2f} {t2 - t1:>6.3f} "
                  f"{(t3 - t2) / 2:>7.3f} {t4 - t3:>7.3f}", flush=True)
    if ratios:
        print(f"LLC / devinterp direct: median {statistics.median(ratios):.3f}, "
              f"max {max(ratios):.3f} (target: at most 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
