"""A checkpoint's identity is its content: records travel between machines and copies."""

from __future__ import annotations

import json
import os
import shutil

from conftest import neox_config, save_checkpoint

import run_experiments
from toposig.files import content_hash
from toposig.files.content_hash import content_fingerprint
from toposig.model.training import byte_tokenizer

FAST = ["--n-texts", "12", "--max-length", "24", "--no-progress"]


def test_the_fingerprint_follows_the_bytes_not_the_path_or_the_clock(tmp_path):
    a = tmp_path / "a" / "step0"
    save_checkpoint(a, neox_config(hidden=8, layers=1, heads=2, vocab=264), byte_tokenizer())
    before = content_fingerprint(a)
    b = tmp_path / "b" / "step0"
    shutil.copytree(a, b, copy_function=shutil.copy)  # new modification times
    assert content_fingerprint(b) == before
    os.utime(a / "model.safetensors", ns=(1, 1))
    assert content_fingerprint(a) == before
    (a / "optimizer.pt").write_bytes(b"optimizer state does not change what is measured")
    (a / "rng_state.pth").write_bytes(b"nor does this")
    assert content_fingerprint(a) == before
    data = bytearray((b / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (b / "model.safetensors").write_bytes(bytes(data))
    assert content_fingerprint(b) != before


def test_each_file_is_read_once_until_it_changes(tmp_path, monkeypatch):
    f = tmp_path / "w.pt"
    f.write_bytes(b"x" * 1000)
    reads = []
    real = content_hash.file_sha256
    monkeypatch.setattr(content_hash, "file_sha256", lambda p: reads.append(p) or real(p))
    first = content_fingerprint(f)
    assert content_fingerprint(f) == first and len(reads) == 1
    f.write_bytes(b"y" * 1000)
    os.utime(f, ns=(2, 2))
    assert content_fingerprint(f) != first and len(reads) == 2


def test_the_cache_file_is_parsed_again_only_when_it_changed(tmp_path, monkeypatch):
    """A run fingerprints every checkpoint: the machine's cache (thousands of entries) is
    parsed once, not once per checkpoint, and another process's write is still seen."""
    monkeypatch.setenv("TOPOSIG_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "w.pt"
    f.write_bytes(b"x" * 1000)
    first = content_fingerprint(f)  # hashes and saves: the cache file now exists
    parsed = []
    real = content_hash._read_cache_file
    monkeypatch.setattr(content_hash, "_read_cache_file",
                        lambda p: parsed.append(p) or real(p))
    hashed = []
    real_sha = content_hash.file_sha256
    monkeypatch.setattr(content_hash, "file_sha256", lambda p: hashed.append(p) or real_sha(p))
    for _ in range(5):
        assert content_fingerprint(f) == first
    assert len(parsed) == 1 and hashed == []
    # another process rewrites the cache (a new file in its place): read again, and its
    # entry is used (a planted hash, so the fingerprint shows which entry was read)
    cache = content_hash.cache_path()
    entries = json.loads(cache.read_text())
    (key,) = entries
    entries[key]["sha256"] = "0" * 64
    (cache.parent / "new").write_text(json.dumps(entries))
    os.replace(cache.parent / "new", cache)
    assert content_fingerprint(f) != first
    assert len(parsed) == 2 and hashed == []


def test_a_moved_series_reuses_every_record(tmp_path, wikitext_dir, capsys):
    """A fresh clone or a copied suite: same bytes, new paths and times, nothing redone."""
    cfg = neox_config(hidden=8, layers=1, heads=2, vocab=264)
    for i, step in enumerate((0, 10)):
        save_checkpoint(tmp_path / "here" / "run" / f"step{step}", cfg, byte_tokenizer(), seed=i)
    out = tmp_path / "out"
    assert run_experiments.main(["--models", str(tmp_path / "here" / "run"), "--out", str(out),
                                 *FAST]) == 0
    shutil.copytree(tmp_path / "here" / "run", tmp_path / "there" / "run",
                    copy_function=shutil.copy)
    shutil.rmtree(tmp_path / "here")
    assert run_experiments.main(["--models", str(tmp_path / "there" / "run"), "--out",
                                 str(out), *FAST]) == 0
    assert "computed: 0  skipped (already done): 2" in capsys.readouterr().out
    config = json.loads((out / "data" / "config.json").read_text())
    assert config["models"] == {"run": str(tmp_path / "there" / "run")}
    assert config["last_run"]["n_computed"] == 2  # the run that computed them
