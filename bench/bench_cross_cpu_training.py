#!/usr/bin/env python
"""Is training bitwise reproducible across x86 instruction sets, and what does it cost?

PyTorch's CPU wheel picks its float32 kernels by the CPU's instruction set, in three
libraries that each read their own environment variable (before torch is imported):

  ATen: softmax, attention, layer norm, AdamW, torch.randn/normal_ (so even the
        initial weights) ...                                       ATEN_CPU_CAPABILITY
  oneMKL: every matmul (SGEMM, also inside scaled_dot_product_attention)  MKL_CBWR
  oneDNN: GELU (an eltwise primitive, jit-compiled for the ISA)       ONEDNN_MAX_CPU_ISA

The thread count matters too: LayerNorm's weight gradients are summed per thread.
(glibc's libm also dispatches, on FMA/AVX2, through ifuncs: GLIBC_TUNABLES; no effect
was seen.) MKL_ENABLE_INSTRUCTIONS and torch.use_deterministic_algorithms(True) change
no bits here.

This script trains a short suite (default: the tiny preset's two smallest models for 200
steps) in subprocesses under several *settings* (what a user would export), each on this
CPU ("native") and on *emulated* older CPUs: the same setting plus the environment
variables that cap every library at the emulated CPU's instruction set (a cap never
raises what the setting asks for, as on a real CPU). It then compares the final
checkpoints' safetensors files with those of the native run of the same setting: same
bytes or not, the largest absolute difference of a weight, the first checkpoint that
differs (step 0 = the initial weights), and the training time against the baseline.

    python bench/bench_cross_cpu_training.py                # ~8 min on 2 idle cores
    python bench/bench_cross_cpu_training.py --configs baseline repro --machines native sse4.2
    python bench/bench_cross_cpu_training.py --full --configs baseline repro --machines native

Measured (torch 2.13.0+cpu: MKL 2024.2, oneDNN 3.12; an AMD EPYC with AVX-512, 2 cores):
with nothing set, every emulated CPU and another thread count train other bits; with
ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41 OMP_NUM_THREADS=2
("repro") the native, AVX2 and SSE4.2 runs are bitwise identical (also for the full tiny
preset), at about 1.9x the training time.

An emulation on one machine is evidence, not proof: it runs on the same physical CPU,
so what depends on the vendor, cache sizes or core count is not exercised. On this AMD
CPU, MKL ignores MKL_ENABLE_INSTRUCTIONS (its non-Intel code path), so MKL's Intel
AVX2/AVX-512 paths were never run: MKL_CBWR=COMPATIBLE is needed for them on the word
of MKL's documentation (it changes the bits here, so MKL's default path is not the
COMPATIBLE one). Results also assume the same torch wheel (it ships MKL and oneDNN) and
the same glibc (the DEFAULT kernels call its expf/logf/erff).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# Every variable that selects a code path; cleared from the inherited environment so
# that only what a configuration sets applies.
CONTROLLED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
              "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "GLIBC_TUNABLES", "OMP_NUM_THREADS",
              "MKL_NUM_THREADS", "MKL_DYNAMIC", "OMP_DYNAMIC", "MKL_VERBOSE",
              "ONEDNN_VERBOSE", "DNNL_VERBOSE")

# ISA orders, lowest first: an emulated CPU caps a library at min(setting, its own ISA).
ATEN_ORDER = ["default", "avx2", "avx512"]
ONEDNN_ORDER = ["SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
                "AVX10_1_512_AMX_FP16", "DEFAULT", "ALL"]

_AVX512 = "-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512VL"
# The emulated CPUs: what a CPU with that instruction set would make each library pick.
# "1-thread" is this CPU with another thread count (a machine with another core count
# runs another number of threads unless the setting pins it).
MACHINES: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "GLIBC_TUNABLES": f"glibc.cpu.hwcaps={_AVX512}"},
    "sse4.2": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
               "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
               "GLIBC_TUNABLES": f"glibc.cpu.hwcaps={_AVX512},-AVX2,-FMA,-AVX"},
    "1-thread": {"OMP_NUM_THREADS": "1"},
}

_REPRO = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
          "ONEDNN_MAX_CPU_ISA": "SSE41", "OMP_NUM_THREADS": "2",
          "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}


def _without(key: str) -> dict[str, str]:
    return {k: v for k, v in _REPRO.items() if k != key}


@dataclass
class Setting:
    name: str
    description: str
    env: dict[str, str]
    machines: list[str]
    flags: dict = field(default_factory=dict)  # done in Python before training starts
    reference: str | None = None  # compare the native run with this setting's native run


SETTINGS = [
    Setting("baseline", "nothing set", {}, ["native", "avx2", "sse4.2", "1-thread"]),
    Setting("repro", "ATen default + MKL_CBWR=COMPATIBLE + oneDNN SSE41, 2 threads", _REPRO,
            ["native", "avx2", "sse4.2", "1-thread"], reference="baseline"),
    Setting("repro-avx2", "ATen avx2 + MKL_CBWR=COMPATIBLE + oneDNN AVX2, 2 threads",
            {**_REPRO, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
            ["native", "avx2"], reference="baseline"),
    Setting("repro-nomkldnn", "repro, torch.backends.mkldnn.enabled=False for the oneDNN cap",
            _without("ONEDNN_MAX_CPU_ISA"), ["native", "sse4.2"], flags={"no_mkldnn": True},
            reference="repro"),
    Setting("repro-no-aten", "repro without ATEN_CPU_CAPABILITY", _without("ATEN_CPU_CAPABILITY"),
            ["native", "sse4.2"]),
    Setting("repro-no-onednn", "repro without ONEDNN_MAX_CPU_ISA", _without("ONEDNN_MAX_CPU_ISA"),
            ["native", "sse4.2"]),
    Setting("repro-no-cbwr", "repro without MKL_CBWR", _without("MKL_CBWR"),
            ["native", "sse4.2"], reference="repro"),
    Setting("deterministic", "baseline + torch.use_deterministic_algorithms(True)", {},
            ["native"], flags={"deterministic": True}, reference="baseline"),
]

# Runs one training in the child: flags applied after `import torch`, then the CLI.
CHILD = """
import json, os, resource, sys, time
flags = json.loads(sys.argv[1])
import torch
if flags.get("deterministic"):
    torch.use_deterministic_algorithms(True)
if flags.get("no_mkldnn"):
    torch.backends.mkldnn.enabled = False
from toposig.cli.train import main
t0, c0 = time.perf_counter(), time.process_time()
rc = main(sys.argv[2:])
print("BENCH " + json.dumps({"rc": rc, "train_s": time.perf_counter() - t0,
      "cpu_s": time.process_time() - c0,
      "capability": torch.backends.cpu.get_cpu_capability(),
      "threads": torch.get_num_threads(), "mkldnn": torch.backends.mkldnn.enabled}))
sys.exit(rc)
"""


def machine_env(setting: dict[str, str], machine: dict[str, str]) -> dict[str, str]:
    """The setting's variables as a CPU with the machine's instruction set applies them."""
    env = dict(setting)
    orders = {"ATEN_CPU_CAPABILITY": ATEN_ORDER, "ONEDNN_MAX_CPU_ISA": ONEDNN_ORDER}
    for key, value in machine.items():
        if key in orders and key in env:
            env[key] = min(env[key], value, key=orders[key].index)
        else:  # OMP_NUM_THREADS of "1-thread" replaces the setting's: another pinned count
            env[key] = value
    return env


def small_preset(steps: int, n_models: int) -> dict:
    sys.path.insert(0, str(SRC))
    from toposig.model.training import load_suite_config

    c = load_suite_config("tiny").to_dict()
    c["name"] = f"xcpu-{steps}"
    c["steps"] = steps
    c["warmup"] = min(c["warmup"], steps // 2)
    c["models"] = c["models"][:n_models]
    return c


def train(preset: Path, out: Path, env_vars: dict[str, str], flags: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env.update(env_vars)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(flags), "--preset",
                           str(preset), "--suite-dir", str(out), "--no-progress"],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"training failed ({env_vars}, {flags}):\n{proc.stderr[-3000:]}")
    info = json.loads(next(line[6:] for line in proc.stdout.splitlines()
                           if line.startswith("BENCH ")))
    info["wall_s"] = wall
    return info


def compare(a: Path, b: Path, models: list[str], steps: list[int]) -> dict:
    """Final checkpoints of two suite folders: identical bytes, max |diff|, first
    differing checkpoint step over all models."""
    from safetensors.torch import load_file

    identical, max_diff, first = True, 0.0, None
    for m in models:
        for s in steps:
            fa, fb = (x / m / f"step{s}" / "model.safetensors" for x in (a, b))
            if fa.read_bytes() != fb.read_bytes():
                first = s if first is None else min(first, s)
                break
        fa, fb = (x / m / f"step{steps[-1]}" / "model.safetensors" for x in (a, b))
        if fa.read_bytes() != fb.read_bytes():
            identical = False
            ta, tb = load_file(fa), load_file(fb)
            for k in ta:
                max_diff = max(max_diff, (ta[k].double() - tb[k].double()).abs().max().item())
    return {"identical": identical, "max_diff": max_diff, "first_step": first}


def short(env: dict[str, str]) -> str:
    abbrev = {"ATEN_CPU_CAPABILITY": "ATEN", "MKL_ENABLE_INSTRUCTIONS": "MKL_EI",
              "ONEDNN_MAX_CPU_ISA": "ONEDNN", "OMP_NUM_THREADS": "OMP"}
    return " ".join(f"{abbrev.get(k, k)}={v}" for k, v in env.items()
                    if k not in ("GLIBC_TUNABLES", "MKL_DYNAMIC", "OMP_DYNAMIC"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="training steps (default: 200)")
    p.add_argument("--models", type=int, default=2,
                   help="the tiny preset's first N models (default: 2)")
    p.add_argument("--full", action="store_true",
                   help="the tiny preset itself (3 models, 1,000 steps: ~2 min a run natively)")
    p.add_argument("--configs", nargs="+", choices=[s.name for s in SETTINGS],
                   default=[s.name for s in SETTINGS], help="settings to run (default: all)")
    p.add_argument("--machines", nargs="+", choices=list(MACHINES), default=list(MACHINES),
                   help="emulated CPUs to run (default: each setting's list)")
    p.add_argument("--repeat", type=int, default=1,
                   help="train every configuration N times, in rounds, and report the "
                        "fastest (timing); repeats are checked for the same bits")
    p.add_argument("--datasets", metavar="DIR", default=None,
                   help="TOPOSIG_DATASETS_DIR for the training runs (default: inherited)")
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="train into DIR and keep it (default: a temporary folder)")
    args = p.parse_args()
    if args.datasets:
        os.environ["TOPOSIG_DATASETS_DIR"] = str(Path(args.datasets).resolve())

    import torch

    print(f"torch {torch.__version__}, ATen capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads, BLAS: "
          f"{'MKL' if torch.backends.mkl.is_available() else '?'}, oneDNN: "
          f"{torch.backends.mkldnn.is_available()}", flush=True)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="xcpu-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.full:
            sys.path.insert(0, str(SRC))
            from toposig.model.training import load_suite_config
            preset = load_suite_config("tiny").to_dict()
        else:
            preset = small_preset(args.steps, args.models)
        preset_path = work / "preset.json"
        preset_path.write_text(json.dumps(preset))
        sys.path.insert(0, str(SRC))
        from toposig.model.training import checkpoint_steps
        steps = checkpoint_steps(preset["steps"], preset["checkpoint_every"],
                                 preset.get("schedule", "pythia"))
        models = [m["name"] for m in preset["models"]]
        print(f"preset: {', '.join(models)}, {preset['steps']} steps; work folder {work}",
              flush=True)

        chosen = [s for s in SETTINGS if s.name in args.configs]
        runs = [(s, m) for s in chosen for m in s.machines if m in args.machines]
        # the baseline's native run twice (first and last): run-to-run determinism and
        # a second timing for the reference
        if any(s.name == "baseline" and m == "native" for s, m in runs):
            runs.append((next(s for s in SETTINGS if s.name == "baseline"), "native (again)"))
        results: dict[tuple[str, str], dict] = {}
        folders: dict[tuple[str, str], Path] = {}
        n = len(runs) * args.repeat
        for rep in range(args.repeat):  # rounds, so that drifting load hits every run alike
            for i, (s, m) in enumerate(runs):
                env = machine_env(s.env, MACHINES[m.split(" (")[0]])
                name = f"{s.name}--{m.replace(' ', '_').replace('(', '').replace(')', '')}"
                folder = work / (name if rep == 0 else f"{name}--r{rep}")
                print(f"[{rep * len(runs) + i + 1}/{n}] {s.name} / {m}: {short(env) or '-'}"
                      f"{' ' + json.dumps(s.flags) if s.flags else ''}", end=" ", flush=True)
                info = train(preset_path, folder, env, s.flags)
                print(f"-> {info['train_s']:.1f} s ({info['capability']}, "
                      f"{info['threads']} thr)", flush=True)
                if rep == 0:
                    results[(s.name, m)] = {**info, "env": env, "times": [info["train_s"]],
                                            "cpus": [info["cpu_s"]], "repeats_same": True}
                    folders[(s.name, m)] = folder / preset["name"]
                else:
                    r = results[(s.name, m)]
                    r["times"].append(info["train_s"])
                    r["cpus"].append(info["cpu_s"])
                    same = compare(folders[(s.name, m)], folder / preset["name"], models, steps)
                    r["repeats_same"] &= same["identical"]
                    shutil.rmtree(folder, ignore_errors=True)
        for r in results.values():  # with --repeat, the fastest of the repeats
            r["train_s"], r["cpu_s"] = min(r["times"]), min(r["cpus"])
        if args.repeat > 1 and not all(r["repeats_same"] for r in results.values()):
            print("WARNING: a repeated run gave other bits than its first run: "
                  + ", ".join(f"{k[0]}/{k[1]}" for k, r in results.items()
                              if not r["repeats_same"]))

        base_times = [results[k]["train_s"] for k in results if k[0] == "baseline"
                      and k[1].startswith("native")]
        base = min(base_times) if base_times else None
        rows = []
        for (sname, m), info in results.items():
            s = next(x for x in SETTINGS if x.name == sname)
            if m == "native":
                ref = (s.reference, "native") if s.reference else None
            elif m == "native (again)":
                ref = ("baseline", "native")
            else:
                ref = (sname, "native")
            cmp = (compare(folders[ref], folders[(sname, m)], models, steps)
                   if ref in folders else None)
            rows.append((sname, m, ref, cmp, info))

        print("\nfinal weights vs the reference run ('vs'); step = first checkpoint that "
              "differs (0 = initial weights); time = training, in the child (with --repeat: the "
              "fastest); ratio to the fastest baseline native run")
        head = (f"{'setting':<16}{'emulated CPU':<16}{'vs':<20}{'identical':>10}"
                f"{'max |diff|':>12}{'step':>6}{'time s':>8}{'cpu s':>8}{'ratio':>7}")
        print(head)
        print("-" * len(head))
        for sname, m, ref, cmp, info in rows:
            vs = f"{ref[0]}/{ref[1]}" if ref else "-"
            ident = "-" if cmp is None else ("yes" if cmp["identical"] else "NO")
            diff = "-" if cmp is None else f"{cmp['max_diff']:.2e}"
            first = "-" if cmp is None or cmp["first_step"] is None else str(cmp["first_step"])
            ratio = f"{info['train_s'] / base:.2f}" if base else "-"
            print(f"{sname:<16}{m:<16}{vs:<20}{ident:>10}{diff:>12}{first:>6}"
                  f"{info['train_s']:>8.1f}{info['cpu_s']:>8.1f}{ratio:>7}")
        print("\nsettings:")
        for s in chosen:
            print(f"  {s.name:<16} {s.description}: {short(s.env) or '(none)'}"
                  f"{' + ' + json.dumps(s.flags) if s.flags else ''}")
        print("emulated CPUs (capped at min(setting, CPU) for ATEN/ONEDNN):")
        for m, env in MACHINES.items():
            glibc = env.get("GLIBC_TUNABLES")
            print(f"  {m:<16} {short(env) or '(this CPU)'}"
                  f"{' GLIBC_TUNABLES=' + glibc if glibc else ''}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
