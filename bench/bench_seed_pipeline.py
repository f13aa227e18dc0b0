#!/usr/bin/env python
"""The embedding stage against the seed pipeline's way of working, on one checkpoint.

The seed pipeline, as its report describes it (rewritten here from that description):

1. load the checkpoint, run the texts in batches of 32 padded to 128 tokens, and
   mean-pool the last hidden layer;
2. PCA to 50 dimensions, Vietoris-Rips H0/H1 with ripser, diagram and spectral features;
3. load the checkpoint a second time and compute perplexity one text at a time
   (``model(ids, labels=ids)`` per text), in float16 as the seed ran it.

Ours (``toposig.run.pipeline.execute``): one load, one batched forward pass that yields the
pooled states of **every** layer and the token loss, features of every layer
(``--layers all``), record and diagrams written atomically.

Both run on the same Pythia-14m-shaped random-weight checkpoint (saved to disk, loaded
from it) and the same WikiText-2 texts, on this machine's CPU. Because float16 is slow on
a CPU, the seed's way is also timed in float32, which isolates the cost of its structure
(two loads, two passes, one text at a time) from that of its precision.

    python bench/bench_seed_pipeline.py [--repeats 3] [--n-texts 200]
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
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

from toposig.config import RunSettings  # noqa: E402
from toposig.families.embedding import EmbeddingFamily  # noqa: E402
from toposig.run.pipeline import execute  # noqa: E402
from toposig.run.plan import plan_run  # noqa: E402
from toposig.sources.corpus import load_texts  # noqa: E402


def seed_features(cloud: np.ndarray) -> dict[str, float]:
    """PCA to 50, ripser H0/H1 and a few diagram and spectral features (the seed's step 2)."""
    from ripser import ripser
    from sklearn.decomposition import PCA

    k = min(50, cloud.shape[0] - 1, cloud.shape[1])
    reduced = PCA(n_components=k).fit_transform(cloud)
    dgms = ripser(reduced, maxdim=1)["dgms"]
    h1 = dgms[1][:, 1] - dgms[1][:, 0]
    s = np.linalg.svd(cloud - cloud.mean(0), compute_uv=False)
    p = s / s.sum() + 1e-7
    lam = s**2
    return {"h1_total_persistence": float(h1.sum()), "h1_n_features": len(h1),
            "rankme": float(np.exp(-(p * np.log(p)).sum())),
            "participation_ratio": float(lam.sum() ** 2 / (lam**2).sum())}


def seed_pipeline(folder: Path, texts: list[str], dtype: torch.dtype) -> dict[str, float]:
    """The seed's three steps for one checkpoint; returns features and perplexity."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # 1. first load: last-layer embeddings, batches of 32 padded to 128 tokens
    tok = AutoTokenizer.from_pretrained(folder)
    tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    pooled = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            enc = tok(texts[i : i + 32], max_length=128, truncation=True,
                      padding="max_length", return_tensors="pt")
            out = model(**enc, output_hidden_states=True)
            h = out.hidden_states[-1].float()
            m = enc["attention_mask"].unsqueeze(-1).float()
            pooled.append(((h * m).sum(1) / m.sum(1)).numpy())
    del model
    # 2. features
    features = seed_features(np.concatenate(pooled))
    # 3. second load: perplexity one text at a time
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tok(text, max_length=128, truncation=True, return_tensors="pt")["input_ids"]
            if ids.shape[1] < 2:
                continue
            loss = model(input_ids=ids, labels=ids).loss
            nll += float(loss) * (ids.shape[1] - 1)
            count += ids.shape[1] - 1
    features["perplexity"] = math.exp(nll / count)
    return features


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--n-texts", type=int, default=200)
    p.add_argument("--skip-fp16", action="store_true",
                   help="leave out the seed's float16 run (slow on a CPU)")
    args = p.parse_args()

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    settings = RunSettings(n_texts=args.n_texts)
    every_layer = {"embedding": EmbeddingFamily(layers="all")}
    rows: dict[str, list[float]] = {"ours": [], "seed_fp32": [], "seed_fp16": []}
    check: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_pythia14m(Path(tmp) / "pythia-14m-random" / "step0")
        texts = load_texts(None, args.n_texts, settings.min_chars)
        seed_pipeline(folder, texts[:4], torch.float32)  # warm-up (imports, caches)
        for r in range(args.repeats):
            plan = plan_run([str(folder.parent)], None, settings, family_settings=every_layer)
            t0 = time.perf_counter()
            outcome = execute(plan, Path(tmp) / f"results{r}", progress=False)
            rows["ours"].append(time.perf_counter() - t0)
            assert outcome.computed == 1 and not outcome.failures
            rec = outcome.records[0]
            check["ours"] = {"perplexity": rec["perplexity"], "layers": len(
                rec["layer_features"]), "rankme": rec["features"]["rankme"]}
            for name, dtype in (("seed_fp32", torch.float32), ("seed_fp16", torch.float16)):
                if name == "seed_fp16" and args.skip_fp16:
                    continue
                t0 = time.perf_counter()
                check[name] = seed_pipeline(folder, texts, dtype)
                rows[name].append(time.perf_counter() - t0)

    ours = statistics.median(rows["ours"])
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}")
    print(f"checkpoint: Pythia-14m shape (6 x 128, vocab 50304), {args.n_texts} WikiText-2 "
          f"texts, <= 128 tokens; median of {args.repeats}")
    print(f"{'way of working':<62}{'seconds':>9}{'x ours':>9}")
    labels = {
        "ours": "ours: one load, one batched pass, every layer (7 clouds)",
        "seed_fp32": "seed's: two loads, per-text perplexity, last layer, fp32",
        "seed_fp16": "seed's: the same in fp16, as the seed ran it",
    }
    for name, times in rows.items():
        if times:
            t = statistics.median(times)
            print(f"{labels[name]:<62}{t:>9.2f}{t / ours:>9.2f}")
    print("perplexity: ours {:.4g} (every non-padding target token), seed fp32 {:.4g}".format(
        check["ours"]["perplexity"], check["seed_fp32"]["perplexity"]))
    print(f"layers analysed: ours {check['ours']['layers']}, seed 1")
    slower = min(statistics.median(t) for k, t in rows.items() if k != "ours" and t)
    return 0 if slower > ours else 1


if __name__ == "__main__":
    sys.exit(main())
