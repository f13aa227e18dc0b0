"""Text sources: WikiText-2 raw and plain-text files, and the selection of analysed texts.

WikiText-2 is read from the project's cache ``datasets/wikitext-2-raw-v1/wiki.{split}.raw``
first (or ``$TOPOSIG_DATASETS_DIR``), then from the Hugging Face Hub through
``datasets``. One row per line of the raw file, as the Hub's ``wikitext-2-raw-v1``
dataset yields them.

A texts file (``--texts PATH``) is read lazily and bounded: only the lines a run uses
(``--n-texts`` texts, :data:`PROBE_POOL` probe texts), of each line at most
``4 * MAX_TEXT_CHARS`` bytes, and each text cut to :data:`MAX_TEXT_CHARS` characters
(100,000), so a huge or single-line file takes bounded memory and tokenizer time.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

# The checkout this package runs from (src/toposig/sources/ inside it), if it runs from one.
_ROOT = Path(__file__).resolve().parents[3]
PROJECT_ROOT: Path | None = _ROOT if (_ROOT / "pyproject.toml").is_file() else None
WIKITEXT_NAME = "wikitext-2-raw-v1"
WIKITEXT_FILES = {
    "train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw",
}


# Characters kept of each text of a texts file; the rest of a longer line is dropped (with
# a warning). The embedding stage keeps the first --max-length tokens of a text (128 by
# default) and a token spans a few characters (about 4 in English text), so 100,000
# characters hold far more tokens than it keeps at any --max-length a model's context
# allows; the probe windows of the landscape and gradient families are cut from at most
# PROBE_POOL texts. 1 GB on one line had the tokenizer take ~5 GB and abort.
MAX_TEXT_CHARS = 100_000
_CHUNK = 1 << 20  # bytes per read while the rest of a long line is skipped


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


def read_texts_file(path: str | Path, limit: int | None = None) -> list[str]:
    """One text per non-empty line of a UTF-8 file, stripped, in file order.

    Lines end at ``\\n`` (or ``\\r\\n``) only: U+2028, U+2029, U+0085 and other
    separators that :meth:`str.splitlines` splits at stay inside a text. A UTF-8 byte
    order mark at the start of the file is dropped. The file is read lazily: up to
    ``limit`` texts (every line when ``None``), and of each line only its first
    ``4 * MAX_TEXT_CHARS`` bytes (the rest is skipped, not held in memory); a text longer
    than :data:`MAX_TEXT_CHARS` characters is cut to that many (a warning says how many
    were cut).

    Raises:
        FileNotFoundError: the file does not exist, or is a folder.
        ValueError: a line read is not UTF-8 text, or holds NUL bytes (the message names
            the file and the option).
    """
    p = Path(path)
    if p.is_dir():
        raise FileNotFoundError(f"--texts {str(p)!r} is a folder; it takes a plain-text file "
                                "with one text per line")
    if not p.is_file():
        raise FileNotFoundError(f"texts file {str(p)!r} does not exist")
    line_bytes = 4 * MAX_TEXT_CHARS  # a UTF-8 character is at most 4 bytes
    texts: list[str] = []
    cut = 0
    nul = False
    offset = 0  # of the current line in the file, in bytes
    with p.open("rb") as f:
        while limit is None or len(texts) < limit:
            raw = f.readline(line_bytes)
            if not raw:
                break
            length = len(raw)
            truncated = length == line_bytes and not raw.endswith(b"\n")
            if truncated:  # the line goes on: skip the rest of it
                length += _skip_line(f)
            text = _decode_line(raw, p, offset, truncated)
            nul = nul or "\x00" in text
            offset += length
            if truncated or len(text) > MAX_TEXT_CHARS:
                cut += 1
                text = text[:MAX_TEXT_CHARS].rstrip()
            if text:
                texts.append(text)
    if nul:  # after the lines are decoded: a binary file is reported as not UTF-8 first
        raise ValueError(f"--texts {str(p)!r} holds NUL bytes: it is a binary file, not "
                         "plain text with one text per line")
    if cut:
        logger.warning("--texts %s: %d line(s) longer than %d characters were cut to that "
                       "many", p, cut, MAX_TEXT_CHARS)
    return texts


def _skip_line(f: BinaryIO) -> int:
    """Read past the rest of the current line without keeping it; the bytes skipped."""
    skipped = 0
    while True:
        chunk = f.readline(_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def _decode_line(raw: bytes, p: Path, offset: int, truncated: bool) -> str:
    """The stripped text of one line's bytes, which start at byte ``offset`` of the file.

    A byte order mark at offset 0 is dropped; a ``truncated`` line (cut at its
    ``4 * MAX_TEXT_CHARS``-th byte) may end inside a character, which is dropped.

    Raises:
        ValueError: the bytes are not UTF-8 (the message gives the offset in the file).
    """
    if offset == 0 and raw.startswith(codecs.BOM_UTF8):
        raw, offset = raw[len(codecs.BOM_UTF8):], len(codecs.BOM_UTF8)
    try:  # the incremental decoder holds back a character cut at the end
        text = (codecs.getincrementaldecoder("utf-8")().decode(raw) if truncated
                else raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"--texts {str(p)!r} is not UTF-8 text (byte {offset + exc.start}: "
                         f"{exc.reason}); it takes a plain-text file with one text per "
                         "line") from exc
    return text.strip()


def load_texts(texts_path: str | None, n_texts: int, min_chars: int) -> list[str]:
    """The analysed texts: from ``texts_path`` if given, else WikiText-2 validation.

    A texts file is used as given (every non-empty line, no length filter), and must
    hold at least ``n_texts`` of them; only the lines up to the ``n_texts``-th text are
    read (:func:`read_texts_file`).
    """
    if texts_path is None:
        return select_texts(wikitext_rows("validation"), n_texts, min_chars)
    texts = read_texts_file(texts_path, limit=n_texts)
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
        rows = read_texts_file(texts_path, limit=pool)
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
