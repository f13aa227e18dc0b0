"""Text sources: WikiText-2 raw and plain-text files, and the selection of analysed texts.

WikiText-2 is read from the project's cache ``datasets/wikitext-2-raw-v1/wiki.{split}.raw``
first (or ``$TOPOSIG_DATASETS_DIR``), then from the Hugging Face Hub through
``datasets``. One row per line of the raw file, as the Hub's ``wikitext-2-raw-v1``
dataset yields them.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

# The checkout this package runs from (src/toposig/sources/ inside it), if it runs from one.
_ROOT = Path(__file__).resolve().parents[3]
PROJECT_ROOT: Path | None = _ROOT if (_ROOT / "pyproject.toml").is_file() else None
WIKITEXT_NAME = "wikitext-2-raw-v1"
WIKITEXT_FILES = {
    "train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw",
}


class DataMissingError(RuntimeError):
    """The requested text data is neither cached locally nor reachable."""


def datasets_dir() -> Path:
    """The data cache: ``$TOPOSIG_DATASETS_DIR``, else ``<checkout>/datasets`` when the
    package runs from a checkout, else ``./datasets`` (an installed package)."""
    if env := os.environ.get("TOPOSIG_DATASETS_DIR"):
        return Path(env)
    return (PROJECT_ROOT or Path.cwd()) / "datasets"


def wikitext_rows(split: str = "validation") -> list[str]:
    """All rows of a WikiText-2 raw split (blank lines included as ``""``).

    Raises:
        ValueError: unknown split.
        DataMissingError: neither the local cache nor the Hub has it; the message says
            how to provide it.
    """
    if split not in WIKITEXT_FILES:
        raise ValueError(f"unknown WikiText-2 split {split!r}; allowed: {sorted(WIKITEXT_FILES)}")
    local = datasets_dir() / WIKITEXT_NAME / WIKITEXT_FILES[split]
    if local.is_file():
        text = local.read_text(encoding="utf-8")
        rows = text.split("\n")
        if rows and rows[-1] == "":
            rows.pop()
        logger.info("read %d WikiText-2 %s rows from %s", len(rows), split, local)
        return rows
    try:
        rows = _wikitext_from_hub(split)
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        raise DataMissingError(
            f"WikiText-2 ({split}) is not available: {local} does not exist and the "
            f"Hugging Face Hub could not be reached ({type(exc).__name__}: {exc}).\n"
            f"Either copy the raw files there (mkdir -p {local.parent} && cp "
            f"wiki.*.raw {local.parent}/; on a development machine they are in "
            f"../shared/data/{WIKITEXT_NAME}/), or set TOPOSIG_DATASETS_DIR to the folder "
            f"that holds {WIKITEXT_NAME}/, or run `python datasets/download_wikitext.py` "
            "(in a checkout) on a machine online, or give your own texts (--texts PATH, a "
            "plain-text file; texts=[...] in toposig.measure)."
        ) from exc
    logger.info("read %d WikiText-2 %s rows from the Hub", len(rows), split)
    return rows


def _wikitext_from_hub(split: str) -> list[str]:
    # Probe once, quickly: `datasets` retries an unreachable Hub for ~25 s.
    if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ConnectionError("HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set")
    from huggingface_hub import dataset_info

    dataset_info("Salesforce/wikitext", timeout=5)
    import datasets

    ds = datasets.load_dataset("wikitext", WIKITEXT_NAME, split=split)
    return [row["text"].rstrip("\n") for row in ds]  # one row per line, as in the raw file


def select_texts(rows: list[str], n_texts: int, min_chars: int = 100) -> list[str]:
    """The first ``n_texts`` rows whose stripped text has at least ``min_chars`` characters.

    Texts are returned stripped, in file order.

    Raises:
        ValueError: fewer than ``n_texts`` rows qualify.
    """
    chosen = [r.strip() for r in rows if len(r.strip()) >= min_chars][:n_texts]
    if len(chosen) < n_texts:
        raise ValueError(
            f"only {len(chosen)} texts of at least {min_chars} characters are available, "
            f"but --n-texts asks for {n_texts}"
        )
    return chosen


def read_texts_file(path: str | Path) -> list[str]:
    """One text per non-empty line of a UTF-8 file, stripped.

    Raises:
        FileNotFoundError: the file does not exist, or is a folder.
        ValueError: it is not UTF-8 text (the message names the file and the option).
    """
    p = Path(path)
    if p.is_dir():
        raise FileNotFoundError(f"--texts {str(p)!r} is a folder; it takes a plain-text file "
                                "with one text per line")
    if not p.is_file():
        raise FileNotFoundError(f"texts file {str(p)!r} does not exist")
    try:
        content = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"--texts {str(p)!r} is not UTF-8 text (byte {exc.start}: "
                         f"{exc.reason}); it takes a plain-text file with one text per "
                         "line") from exc
    if "\x00" in content:
        raise ValueError(f"--texts {str(p)!r} holds NUL bytes: it is a binary file, not "
                         "plain text with one text per line")
    return [line.strip() for line in content.splitlines() if line.strip()]


def load_texts(texts_path: str | None, n_texts: int, min_chars: int) -> list[str]:
    """The analysed texts: from ``texts_path`` if given, else WikiText-2 validation.

    A texts file is used as given (every non-empty line, no length filter), and must
    hold at least ``n_texts`` of them.
    """
    if texts_path is None:
        return select_texts(wikitext_rows("validation"), n_texts, min_chars)
    texts = read_texts_file(texts_path)
    if len(texts) < n_texts:
        raise ValueError(
            f"texts file {texts_path!r} has {len(texts)} non-empty lines, "
            f"but --n-texts asks for {n_texts}"
        )
    return texts[:n_texts]


PROBE_POOL = 500  # texts the probe windows of the landscape and gradient families come from


def probe_texts(texts_path: str | None, min_chars: int, pool: int = PROBE_POOL) -> list[str]:
    """The texts the probe windows are cut from: the first ``pool`` WikiText-2 validation
    rows of at least ``min_chars`` characters, or up to ``pool`` lines of ``texts_path``.

    Raises:
        ValueError: no text is available.
    """
    if texts_path is None:
        rows = [r.strip() for r in wikitext_rows("validation") if len(r.strip()) >= min_chars]
    else:
        rows = read_texts_file(texts_path)
    if not rows:
        raise ValueError(f"no texts for the probe windows in {texts_path or 'WikiText-2'}")
    return rows[:pool]


def texts_fingerprint(texts: list[str]) -> str:
    """SHA-256 of the texts (joined by NUL): part of the settings hash."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()
