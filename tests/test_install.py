"""The package as pip installs it, used from outside the checkout: the `toposig` command
runs a shrunken preset and analyses it, with the presets shipped as package data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
TINY_PRESET = {"name": "mini", "models": [{"name": "mini-h8", "hidden": 8, "layers": 1,
                                           "heads": 2}],
               "context": 16, "batch_size": 2, "steps": 4, "warmup": 1,
               "checkpoint_every": 2, "eval_batches": 1}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """``pip install --no-deps <checkout>`` into a folder of its own (the dependencies
    are this environment's), built without network access."""
    source = tmp_path_factory.mktemp("source")  # a copy: the build writes beside it
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT / name, source / name)
    shutil.copytree(PROJECT / "src" / "toposig", source / "src" / "toposig",
                    ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(source)],
                   check=True, capture_output=True)
    return site


def outside(site: Path, cwd: Path, datasets: Path | None = None) -> dict:
    """An environment where ``toposig`` can only come from ``site``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    if datasets is not None:
        env["TOPOSIG_DATASETS_DIR"] = str(datasets)
    return env


def test_the_installed_package_carries_its_presets_and_is_not_the_checkout(installed,
                                                                           tmp_path):
    code = ("import toposig, toposig.model.training as t; print(toposig.__file__); "
            "print(t.preset_names()); from toposig.model.presets import load_preset; "
            "print(type(load_preset('grokking')).__name__, "
            "type(load_preset('induction')).__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True,
                         capture_output=True, text=True, env=outside(installed, tmp_path))
    where, presets, task = out.stdout.splitlines()
    assert Path(where).is_relative_to(installed)
    assert presets == ("['ensemble', 'ensemble-small', 'grokking', 'induction', 'seed004', "
                       "'smoke', 'tiny']")
    assert task == "ModularConfig InductionConfig"  # task presets, read by the installed package
    assert (installed / "toposig" / "py.typed").is_file()  # type checkers read its hints


def test_the_toposig_command_trains_runs_and_analyses_a_preset(installed, tmp_path,
                                                               wikitext_dir):
    toposig = installed / "bin" / "toposig"
    env = outside(installed, tmp_path, wikitext_dir)
    usage = subprocess.run([str(toposig)], cwd=tmp_path, capture_output=True, text=True,
                           env=env)
    assert usage.returncode == 2 and \
        "toposig {run,analyze,train,extract,import,backtest,compare,plot}" in usage.stderr
    version = subprocess.run([str(toposig), "--version"], cwd=tmp_path, capture_output=True,
                             text=True, env=env)
    assert version.returncode == 0 and version.stdout.strip() == "toposig 0.1.0"
    (tmp_path / "mini.json").write_text(json.dumps(TINY_PRESET))
    run = subprocess.run([str(toposig), "run", "--preset", "mini.json", "--n-texts", "12",
                          "--max-length", "24", "--no-progress"],
                         cwd=tmp_path, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "computed: 4" in run.stdout  # steps 0, 1, 2, 4
    assert "(next: toposig analyze --out results)" in run.stdout
    analyze = subprocess.run([str(toposig), "analyze", "--no-plots"], cwd=tmp_path,
                             capture_output=True, text=True, env=env)
    assert analyze.returncode == 0, analyze.stderr[-2000:]
    config = json.loads((tmp_path / "results" / "data" / "config.json").read_text())
    assert config["last_run"]["command"].startswith("toposig run --preset mini.json")
    assert (tmp_path / "results" / "data" / "statistics.json").is_file()
    assert (tmp_path / "runs" / "mini" / "mini-h8" / "step4").is_dir()
    helped = subprocess.run([str(toposig), "train", "--help"], cwd=tmp_path,
                            capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: toposig train")


def test_the_installed_api_measures_a_model_and_loads_results(installed, tmp_path,
                                                              wikitext_dir):
    code = f"""
import toposig
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
from toposig.model.training import byte_tokenizer
cfg = GPTNeoXConfig(vocab_size=264, hidden_size=16, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=64)
m = toposig.measure(GPTNeoXForCausalLM(cfg), byte_tokenizer())
df = toposig.load_results({str(PROJECT / "tests" / "fixtures" / "mini_results")!r})
print(toposig.__file__, round(m.perplexity), len(m.features) > 40, df.shape[0])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env=outside(installed, tmp_path, wikitext_dir))
    assert out.returncode == 0, out.stderr[-2000:]
    where, ppl, many, rows = out.stdout.split()
    assert Path(where).is_relative_to(installed)
    assert 200 < int(ppl) < 400 and many == "True" and int(rows) > 24
