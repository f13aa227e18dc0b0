"""Shared fixtures: real data from the cache or ../shared/data, random-weight GPT-NeoX series.

No test reaches a network: the Hub is switched off for the whole session. Tests that
need WikiText-2 or the Pythia tokenizer skip when they are missing, and fail instead
when ``TOPOSIG_REQUIRE_DATA=1`` (as CI sets it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROJECT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT.parent / "shared" / "data"
WIKI = "wikitext-2-raw-v1/wiki.valid.raw"
TOKENIZER_FILE = SHARED_DATA / "pythia-tokenizer" / "20B_tokenizer.json"


def _require_or_skip(what: str) -> None:
    msg = f"{what} is missing (see README: Data)"
    if os.environ.get("TOPOSIG_REQUIRE_DATA") == "1":
        pytest.fail(f"{msg}; TOPOSIG_REQUIRE_DATA=1 makes this a failure")
    pytest.skip(msg)


def _datasets_dir() -> Path | None:
    env = os.environ.get("TOPOSIG_DATASETS_DIR")
    for candidate in [Path(env)] if env else [PROJECT / "datasets", SHARED_DATA]:
        if (candidate / WIKI).is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def wikitext_dir() -> Path:
    """A folder holding wikitext-2-raw-v1/wiki.valid.raw; exported as TOPOSIG_DATASETS_DIR."""
    found = _datasets_dir()
    if found is None:
        _require_or_skip("WikiText-2 raw (datasets/wikitext-2-raw-v1/ or ../shared/data)")
    os.environ["TOPOSIG_DATASETS_DIR"] = str(found)
    return found


@pytest.fixture(scope="session")
def tokenizer_file() -> Path:
    if not TOKENIZER_FILE.is_file():
        _require_or_skip(f"the Pythia tokenizer ({TOKENIZER_FILE})")
    return TOKENIZER_FILE


def pythia_tokenizer(tokenizer_file: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )


def neox_config(hidden: int = 32, layers: int = 2, heads: int = 2, vocab: int = 50304):
    """A GPT-NeoX config with Pythia's conventions (partial rotary 0.25, parallel residual)."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=4 * hidden, max_position_embeddings=2048,
        use_parallel_residual=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25},
    )


def save_checkpoint(folder: Path, config, tokenizer=None, seed: int = 0) -> Path:
    import torch
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(config)
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def make_series(root: Path, steps, tokenizer, config=None, dirname: str = "step{}") -> Path:
    """A local series ``root/step<N>/`` of random-weight checkpoints, one seed per step."""
    config = config or neox_config()
    for i, step in enumerate(steps):
        save_checkpoint(root / dirname.format(step), config, tokenizer, seed=i)
    return root


@pytest.fixture(scope="session")
def tiny_series(tmp_path_factory, tokenizer_file) -> Path:
    """Three random-weight GPT-NeoX checkpoints (steps 0, 10, 100) with the Pythia tokenizer."""
    root = tmp_path_factory.mktemp("tiny_series")
    return make_series(root, [0, 10, 100], pythia_tokenizer(tokenizer_file))
