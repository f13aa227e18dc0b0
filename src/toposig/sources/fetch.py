"""Hub checkpoints onto the disk ahead of the analysis, and off it afterwards.

- :func:`hub_snapshot` downloads one Hub revision's files that the analysis reads
  (config, safetensors weights, tokenizer), with ``huggingface_hub.snapshot_download``
  into the user's Hugging Face cache, and says whether this call put them there.
- :func:`evict_snapshot` deletes one downloaded revision from that cache, keeping the
  files that another cached revision still uses (``huggingface_hub``'s own cache
  bookkeeping does the reference counting).
- :class:`Prefetcher` walks a list in order and fetches the next item in a background
  thread while the caller works on the current one, so a download overlaps the
  analysis of the checkpoint before it and at most ``ahead + 1`` are on disk at once.

The download function is a parameter everywhere, so the same code runs against a
folder-backed stand-in for the Hub in the tests.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from toposig.sources.checkpoints import Checkpoint

logger = logging.getLogger(__name__)

# What the analysis reads from a Hub revision: config and tokenizer files (json, txt,
# sentencepiece) and safetensors weights. Pickled weights only when a revision has no
# safetensors (transformers then loads them with weights_only=True).
HUB_FILE_PATTERNS: tuple[str, ...] = ("*.json", "*.safetensors", "*.txt", "*.model")
PICKLED_WEIGHT_PATTERNS: tuple[str, ...] = ("*.bin",)
WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin")

Download = Callable[..., str]  # snapshot_download's signature: repo_id, revision=, ...


@dataclass(frozen=True)
class Fetched:
    """Where a checkpoint's files are, and whether this run downloaded them.

    Attributes:
        path: folder holding the revision's files (a snapshot of the HF cache).
        downloaded: True when the files were fetched by this call, so ``--evict`` may
            delete them; False when they were already cached (the user's to keep).
        seconds: wall time of the fetch.
    """

    path: Path
    downloaded: bool
    seconds: float


def _has_weights(folder: Path) -> bool:
    return folder.is_dir() and any(p.suffix in WEIGHT_SUFFIXES for p in folder.iterdir())


def _snapshot_download() -> Download:
    from huggingface_hub import snapshot_download

    return snapshot_download


def hub_snapshot(ckpt: Checkpoint, *, local_files_only: bool = False,
                 download: Download | None = None) -> Fetched:
    """The local folder of a Hub checkpoint's config, weights and tokenizer.

    Looks in the cache first (no network); downloads only what is missing, unless
    ``local_files_only``, in which case a revision that is not cached raises at once.

    Raises:
        FileNotFoundError: the revision is not cached and ``local_files_only`` is set, or
            it holds no weights file.
        whatever ``download`` raises for an unknown revision or an unreachable Hub.
    """
    download = download or _snapshot_download()
    t0 = time.perf_counter()
    kwargs = {"repo_id": ckpt.location, "revision": ckpt.revision}
    try:
        cached = Path(download(**kwargs, allow_patterns=list(HUB_FILE_PATTERNS),
                               local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any cache miss means: not there
        if local_files_only:
            raise FileNotFoundError(
                f"{ckpt.describe()} is not in the local Hugging Face cache and the run is "
                f"offline ({type(exc).__name__})") from exc
        cached = None
    if cached is not None and _has_weights(cached):
        return Fetched(cached, downloaded=False, seconds=time.perf_counter() - t0)
    if local_files_only:
        raise FileNotFoundError(f"{ckpt.describe()}: the cached snapshot {cached} holds no "
                                "weights and the run is offline")
    path = Path(download(**kwargs, allow_patterns=list(HUB_FILE_PATTERNS)))
    if not _has_weights(path):  # an old revision with pickled weights only
        path = Path(download(**kwargs, allow_patterns=list(PICKLED_WEIGHT_PATTERNS)))
    if not _has_weights(path):
        raise FileNotFoundError(f"{ckpt.describe()}: the revision has no safetensors or "
                                ".bin weights")
    logger.debug("downloaded %s to %s", ckpt.describe(), path)
    return Fetched(path, downloaded=True, seconds=time.perf_counter() - t0)


def evict_snapshot(path: str | Path) -> int:
    """Delete one downloaded revision from the Hugging Face cache; returns bytes freed.

    ``path`` is ``<cache>/models--<org>--<name>/snapshots/<commit>``. The revision's
    snapshot links go, and so do the files they point to unless another cached revision
    links to the same file (tokenizer files are often shared across revisions). Only
    that one revision is touched.
    """
    from huggingface_hub import scan_cache_dir

    path = Path(path)
    commit = path.name
    cache_dir = path.parents[2]
    info = scan_cache_dir(cache_dir)
    strategy = info.delete_revisions(commit)
    freed = strategy.expected_freed_size
    strategy.execute()
    logger.debug("evicted %s (%d bytes)", path, freed)
    return int(freed)


T = TypeVar("T")
R = TypeVar("R")


class Prefetcher(Generic[T, R]):
    """Iterate ``items`` in order as ``(item, fetch(item) or the exception it raised)``.

    ``fetch`` runs in one background thread, up to ``ahead`` items beyond the one the
    caller holds: while the caller works on item k, item k + 1 is being fetched. The next
    fetch is started only when the caller asks for the next item, so whatever the caller
    does with item k before that (evicting its files) happens before item k + 2 arrives.
    """

    def __init__(self, items: Iterable[T], fetch: Callable[[T], R], ahead: int = 1):
        if ahead < 0:
            raise ValueError(f"ahead must be >= 0, got {ahead}")
        self.items, self.fetch, self.ahead = items, fetch, ahead

    def __iter__(self) -> Iterator[tuple[T, R | BaseException]]:
        it = iter(self.items)
        pending: deque[tuple[T, Future]] = deque()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") as pool:
            try:
                def submit() -> None:
                    for item in it:
                        pending.append((item, pool.submit(self.fetch, item)))
                        return

                for _ in range(self.ahead + 1):
                    submit()
                while pending:
                    item, future = pending.popleft()
                    try:
                        result: R | BaseException = future.result()
                    except Exception as exc:  # noqa: BLE001 - handed to the caller
                        result = exc
                    yield item, result
                    submit()
            finally:
                for _, future in pending:
                    future.cancel()

