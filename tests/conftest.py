"""Shared fixtures: real data from the cache or ../shared/data, random-weight GPT-NeoX series.

No test reaches a network: the Hub is switched off for the whole session. Tests that
need WikiText-2 or the Pythia tokenizer skip when they are missing, and fail instead
when ``TOPOSIG_REQUIRE_DATA=1`` (as CI sets it).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the checkpoint file-hash cache of the tests, not the user's (toposig.files.content_hash)
os.environ["TOPOSIG_CACHE_DIR"] = tempfile.mkdtemp(prefix="toposig-test-cache-")

PROJECT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT.parent / "shared" / "data"
WIKI = "wikitext-2-raw-v1/wiki.valid.raw"
TOKENIZER = Path("pythia-tokenizer") / "20B_tokenizer.json"


def pytest_configure(config) -> None:
    """Under ``pytest -n N`` (pytest-xdist) each worker computes on one core: BLAS, OpenMP
    and torch threads limited to 1, also for the processes a test starts, so that N
    workers on N cores do not oversubscribe them (measured: the whole suite on 2 cores in
    17:35 with two single-threaded workers; one process with default threads took 28–30
    minutes)."""
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the tests of ``tests/slow_tests.txt``, and those that use a fixture of
    :data:`slow_list.SLOW_FIXTURES`, ``slow`` (:mod:`slow_list`), so that
    ``pytest -m "not slow"`` runs the fast set."""
    from slow_list import SLOW_FIXTURES, read_list

    slow = read_list()
    for item in items:
        if item.nodeid in slow or SLOW_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


class FolderHub:
    """A folder-backed stand-in for the Hugging Face Hub.

    Called, it is ``snapshot_download``: its repositories are folders
    ``hub/<org>/<name>/<revision>/``, and what it downloads lands in a real Hugging Face
    cache layout (content-addressed blobs, snapshot links, refs), so the real eviction
    and cache-listing code runs on it unchanged. :meth:`list_repo_refs` lists a
    repository's revisions as ``huggingface_hub.list_repo_refs`` does.
    """

    def __init__(self, hub: Path, cache: Path, delay_s: float = 0.0):
        self.hub, self.cache, self.delay_s = hub, cache, delay_s
        self.downloads: list[tuple[str, float]] = []  # (revision, start time) of real fetches
        self.lock = threading.Lock()

    def _repo(self, repo_id: str) -> Path:
        return self.cache / ("models--" + repo_id.replace("/", "--"))

    def __call__(self, repo_id: str, revision: str | None = None, allow_patterns=None,
                 local_files_only: bool = False, **_) -> str:
        from huggingface_hub.errors import LocalEntryNotFoundError

        repo = self._repo(repo_id)
        ref = repo / "refs" / revision
        if local_files_only:
            if not ref.is_file():
                raise LocalEntryNotFoundError(f"{repo_id}@{revision} is not cached")
            return str(repo / "snapshots" / ref.read_text())
        with self.lock:
            self.downloads.append((revision, time.perf_counter()))
        time.sleep(self.delay_s)
        source = self.hub / repo_id / revision
        if not source.is_dir():
            raise FileNotFoundError(f"fake Hub has no {repo_id}@{revision}")
        commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        (repo / "blobs").mkdir(exist_ok=True)
        for f in sorted(source.iterdir()):
            if allow_patterns and not any(fnmatch.fnmatch(f.name, p) for p in allow_patterns):
                continue
            data = f.read_bytes()
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            if not blob.exists():
                blob.write_bytes(data)
            link = snap / f.name
            if not link.exists():
                link.symlink_to(Path("../../blobs") / blob.name)
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
        return str(snap)

    def snapshots(self, repo_id: str = "fake-org/tiny") -> list[str]:
        snaps = self._repo(repo_id) / "snapshots"
        return sorted(p.name for p in snaps.iterdir()) if snaps.is_dir() else []

    def list_repo_refs(self, repo_id: str):
        """``huggingface_hub.list_repo_refs``: the repository's revisions as branches."""
        from types import SimpleNamespace

        from huggingface_hub.errors import RepositoryNotFoundError

        repo = self.hub / repo_id
        if not repo.is_dir():
            import importlib

            from huggingface_hub import errors  # built on httpx or httpx2, by version

            http = importlib.import_module(errors.Response.__module__.split(".")[0])
            request = http.Request("GET", f"https://huggingface.co/api/models/{repo_id}/refs")
            raise RepositoryNotFoundError(f"fake Hub has no {repo_id}",
                                          response=http.Response(404, request=request))
        branches = [SimpleNamespace(name=p.name) for p in sorted(repo.iterdir()) if p.is_dir()]
        return SimpleNamespace(branches=[SimpleNamespace(name="main"), *branches], tags=[])


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
def seed_measurements() -> Path:
    """../shared/data/seed-measurements: the seed studies' published per-checkpoint tables."""
    folder = SHARED_DATA / "seed-measurements"
    if not (folder / "seed-b-small-gpts" / "tda_features.json").is_file():
        _require_or_skip(f"the seed studies' measurements ({folder})")
    return folder


@pytest.fixture(scope="session")
def tokenizer_file() -> Path:
    """The Pythia (GPT-NeoX-20B) tokenizer: datasets/pythia-tokenizer/20B_tokenizer.json
    (or under $TOPOSIG_DATASETS_DIR, or ../shared/data)."""
    env = os.environ.get("TOPOSIG_DATASETS_DIR")
    places = [Path(env)] if env else []
    places += [PROJECT / "datasets", SHARED_DATA]
    for folder in places:
        if (folder / TOKENIZER).is_file():
            return folder / TOKENIZER
    _require_or_skip(f"the Pythia tokenizer (datasets/{TOKENIZER}; a Pythia-shaped model "
                     "needs a real tokenizer)")


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


# --- tiny random models of many architectures (all build offline) --------------------

ARCHITECTURES = ("gpt_neox", "gpt2", "llama", "mistral", "qwen2", "opt", "opt-350m",
                 "gemma2", "granite")


def causal_lm_config(arch: str, vocab: int = 264, hidden: int = 32, layers: int = 2):
    """A tiny config of ``arch``. ``opt-350m`` has OPT-350m's quirks (post-layer norm and
    ``word_embed_proj_dim`` != ``hidden_size``: project_in/project_out); ``gemma2`` has
    final-logit and attention soft-capping; ``granite`` scales embeddings, residuals,
    attention and logits."""
    import transformers as T

    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=4, intermediate_size=2 * hidden)
    gqa = dict(common, num_key_value_heads=2)
    if arch == "gpt_neox":
        return neox_config(hidden=hidden, layers=layers, heads=4, vocab=vocab)
    if arch == "gpt2":
        return T.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4,
                            n_positions=256, bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    if arch == "llama":
        return T.LlamaConfig(**gqa)
    if arch == "mistral":
        return T.MistralConfig(**gqa)
    if arch == "qwen2":
        return T.Qwen2Config(**gqa)
    if arch in ("opt", "opt-350m"):
        quirks = (dict(word_embed_proj_dim=hidden // 2, do_layer_norm_before=False)
                  if arch == "opt-350m" else {})
        return T.OPTConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                           ffn_dim=2 * hidden, num_attention_heads=4, pad_token_id=1,
                           bos_token_id=2, eos_token_id=2, **quirks)
    if arch == "gemma2":
        return T.Gemma2Config(**gqa, head_dim=hidden // 4, final_logit_softcapping=3.0,
                              attn_logit_softcapping=5.0)
    if arch == "granite":
        return T.GraniteConfig(**gqa, logits_scaling=4.0, embedding_multiplier=2.0,
                               residual_multiplier=0.5, attention_multiplier=0.3)
    raise ValueError(arch)


def causal_lm(arch: str, seed: int = 0, **kw):
    """A random-weight causal LM of ``arch`` in eval mode (see :func:`causal_lm_config`)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(causal_lm_config(arch, **kw)).eval()


def records_of(entries) -> list:
    """Typed records (:class:`toposig.records.Record`) of synthetic aggregate entries,
    the fields a test leaves out filled in as a run writes them: ``status`` ``ok``, the
    ``model`` named as its label, empty ``features``, ``step`` ``None``. Each entry's
    dict is not changed."""
    from toposig.records import Record

    return [Record.from_json({"status": "ok", "model": e.get("model_label"), "step": None,
                              "features": {}, **e}) for e in entries]


def weights_at_thread_counts(config, root: Path, checkpoint: str, counts=(2, 1)) -> list[str]:
    """Train a task config's suite once at each torch thread count of ``counts`` (each
    into its own folder under ``root``) and return the SHA-256 of ``checkpoint``'s weights
    (a path inside the suite folder) each time; checks that the caller's count is back
    after each and that the suite states it trained at one thread (issue 59)."""
    import json

    import torch

    before = torch.get_num_threads()
    digests = []
    try:
        for n in counts:
            torch.set_num_threads(n)
            suite, _ = config.train(root / f"threads{n}", progress=False)
            assert torch.get_num_threads() == n
            weights = suite / checkpoint / "model.safetensors"
            digests.append(hashlib.sha256(weights.read_bytes()).hexdigest())
            assert json.loads((suite / "config.json").read_text())["torch_threads"] == 1
    finally:
        torch.set_num_threads(before)
    return digests
