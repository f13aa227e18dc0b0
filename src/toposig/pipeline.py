"""The embedding-stage driver: plan a run (every check before any work), then run it.

:func:`plan_run` turns the user's models, steps and settings into a :class:`RunPlan`,
raising on any bad input before a model is loaded. :func:`execute` walks the plan's
checkpoints, skipping finished records, recording failures and carrying on, and keeps
the aggregate files current after every checkpoint.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from tqdm.auto import tqdm

from . import homology
from .checkpoints import (
    EXPERIMENT_A_MODELS,
    Checkpoint,
    check_hub_access,
    check_tokenizers,
    parse_steps,
    resolve_series,
    unique_labels,
)
from .config import SCHEMA_VERSION, EmbeddingSettings, settings_hash
from .corpus import load_texts, texts_fingerprint
from .embedding import analyse_checkpoint, checkpoint_fields, resolve_device, resolve_dtype
from .store import ResultStore

logger = logging.getLogger(__name__)

VERSIONED_PACKAGES = ("torch", "transformers", "huggingface_hub", "numpy", "scipy",
                      "scikit-learn", "ripser", "giotto-ph", "gudhi", "persim")


@dataclass
class RunPlan:
    """Everything a run needs, checked."""

    checkpoints: list[Checkpoint]
    texts: list[str]
    settings: EmbeddingSettings
    device: str
    dtype: str
    ph_backend: str
    local_files_only: bool
    settings_hash: str
    texts_source: str
    suite: dict | None = None  # the training suite's config.json, for --preset runs


@dataclass
class RunOutcome:
    records: list[dict]
    computed: int = 0
    skipped: int = 0
    failures: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    config: dict = field(default_factory=dict)


def plan_run(models: list[str] | None, steps: list[str] | None,
             settings: EmbeddingSettings) -> RunPlan:
    """Resolve series, texts, device and Hub access; raise before any work on bad input.

    Args:
        models: Hub ids or local folders; ``None`` or empty for experiment A (Pythia
            70m/160m/410m).
        steps: ``--steps`` values (integers, ``seed`` or ``all``), or ``None``.
        settings: validated settings.
    """
    step_list = parse_steps(steps)
    models = list(models) if models else list(EXPERIMENT_A_MODELS)
    series = unique_labels([resolve_series(m, step_list) for m in models])
    checkpoints = [c for s in series for c in s]
    check_tokenizers(checkpoints, settings.tokenizer)
    ph_backend = homology.resolve_backend(settings.ph_backend)
    device = resolve_device(settings.device)
    dtype = resolve_dtype(settings.dtype, device)
    texts = load_texts(settings.texts, settings.n_texts, settings.min_chars)
    local_only = check_hub_access(checkpoints)
    h = settings_hash(settings, texts_fingerprint(texts), dtype)
    source = settings.texts or "wikitext-2-raw-v1 validation"
    return RunPlan(checkpoints, texts, settings, device, dtype, ph_backend, local_only, h, source)


def failure_record(ckpt: Checkpoint, exc: BaseException) -> dict:
    """A record of a checkpoint that could not be analysed, with the reason."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "failed",
        **checkpoint_fields(ckpt),
        "error_type": type(exc).__name__,
        "error": str(exc).strip() or type(exc).__name__,
        "traceback": "".join(tb[-3:]),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def device_description(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"{platform.processor() or platform.machine()} CPU"


def run_config(plan: RunPlan, outcome: RunOutcome, started: str) -> dict:
    """The run's ``config.json``: settings, inputs, environment, timings, failures."""
    ok = [r for r in outcome.records if r.get("status") == "ok"]
    per_ckpt = [r["timings_s"]["total"] for r in ok if "timings_s" in r]
    series: dict[str, list] = {}
    for c in plan.checkpoints:
        series.setdefault(c.label, []).append(c.step)
    return {
        "schema_version": SCHEMA_VERSION,
        "settings": plan.settings.to_dict(),
        "settings_hash": plan.settings_hash,
        "texts_source": plan.texts_source,
        "texts_sha256": texts_fingerprint(plan.texts),
        "n_texts": len(plan.texts),
        "models": {c.label: c.model for c in plan.checkpoints},
        "steps": series,
        "device": plan.device,
        "device_name": device_description(plan.device),
        "dtype": plan.dtype,
        "ph_backend": plan.ph_backend,
        "seed": plan.settings.seed,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "started_at": started,
        "timings_s": {
            "wall": outcome.wall_s,
            "mean_per_computed_checkpoint": (sum(per_ckpt) / len(per_ckpt)) if per_ckpt else None,
        },
        "n_checkpoints": len(plan.checkpoints),
        "n_computed": outcome.computed,
        "n_skipped": outcome.skipped,
        "training_suite": plan.suite,
        "failures": [
            {"model": f["model_label"], "step": f["step"], "error": f["error"]}
            for f in outcome.failures
        ],
    }


def execute(plan: RunPlan, out_dir: str | Path, force: bool = False,
            progress: bool = True) -> RunOutcome:
    """Analyse every checkpoint of the plan, resuming from finished records.

    A checkpoint that raises is recorded as failed and the run goes on. Records are
    written atomically as each checkpoint finishes; aggregates are refreshed after each.
    """
    store = ResultStore(out_dir, plan.settings_hash)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    outcome = RunOutcome(records=[])
    bar = tqdm(plan.checkpoints, desc="checkpoints", unit="ckpt", disable=not progress)
    for ckpt in bar:
        bar.set_postfix_str(f"{ckpt.label} {ckpt.name}")
        rec = None if force else store.finished(ckpt)
        if rec is not None:
            outcome.skipped += 1
        else:
            try:
                result = analyse_checkpoint(
                    ckpt, plan.texts, plan.settings, device=plan.device, dtype=plan.dtype,
                    local_files_only=plan.local_files_only,
                )
                rec = store.write(result.record, ckpt, result.arrays)
                outcome.computed += 1
                logger.debug("%s: perplexity %.2f", ckpt.describe(), rec["perplexity"])
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                rec = store.write(failure_record(ckpt, exc), ckpt)
                outcome.failures.append(rec)
                logger.error("%s failed: %s: %s", ckpt.describe(), type(exc).__name__, exc)
                _free_device_memory(plan.device)
        outcome.records.append(rec)
        outcome.wall_s = time.perf_counter() - t0
        outcome.config = run_config(plan, outcome, started)
        store.write_aggregates(outcome.records, outcome.config)
    return outcome


def _free_device_memory(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def summary_lines(plan: RunPlan, outcome: RunOutcome, out_dir: str | Path) -> list[str]:
    """The one-screen summary printed at the end of a run."""
    data = Path(out_dir) / "data"
    lines = [
        f"checkpoints: {len(plan.checkpoints)}  computed: {outcome.computed}  "
        f"skipped (already done): {outcome.skipped}  failed: {len(outcome.failures)}  "
        f"wall: {outcome.wall_s:.1f} s",
        f"device: {plan.device} ({plan.dtype}), PH backend: {plan.ph_backend}, "
        f"texts: {len(plan.texts)} from {plan.texts_source}, settings hash: {plan.settings_hash}",
    ]
    ok = [r for r in outcome.records if r.get("status") == "ok"]
    if ok:
        lines.append(f"{'model':<24} {'step':>8} {'perplexity':>12} {'H1 bars':>8} "
                     f"{'H1 entropy':>10} {'RankMe':>8}")
        for r in ok[-8:]:
            f = r["features"]
            lines.append(
                f"{r['model_label'][:24]:<24} {str(r['step']):>8} "
                f"{_fmt(r['perplexity'], '.2f'):>12} "
                f"{_fmt(f.get('h1_n_features'), '.0f'):>8} "
                f"{_fmt(f.get('h1_persistence_entropy'), '.3f'):>10} "
                f"{_fmt(f.get('rankme'), '.2f'):>8}"
            )
        if len(ok) > 8:
            lines.insert(3, f"(last 8 of {len(ok)} records)")
    lines.append(f"results: {data / 'all_results.json'}  (next: python src/analyze_results.py "
                 f"--results {out_dir})")
    if outcome.failures:
        lines.append(f"FAILED checkpoints ({len(outcome.failures)}):")
        for f in outcome.failures:
            lines.append(f"  {f['model_label']} step {f['step']}: {f['error_type']}: "
                         f"{f['error'].splitlines()[0][:200]}")
    return lines


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"
