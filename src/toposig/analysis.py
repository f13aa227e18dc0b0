"""Stage 3: results/data/ -> statistics.json and figures.

Reads the aggregate written by the run (``data/all_results.json``) and the diagrams
beside each record, computes the correlations of every feature with perplexity (per
model and pooled) and the Wasserstein distances between consecutive checkpoints'
diagrams, and writes ``data/statistics.json`` and ``plots/*.png``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from . import stats
from .store import atomic_write_json, load_arrays, read_json

logger = logging.getLogger(__name__)


class ResultsMissingError(FileNotFoundError):
    """No aggregate results where the analysis looked."""


def load_results(results_dir: str | Path) -> list[dict]:
    """The finished records of the last run under ``results_dir``."""
    path = Path(results_dir) / "data" / "all_results.json"
    if not path.is_file():
        raise ResultsMissingError(
            f"{path} does not exist: run `python src/run_experiments.py --out {results_dir}` "
            "first, or pass --results with the folder a run wrote to"
        )
    records = [r for r in read_json(path) if r.get("status") == "ok"]
    if not records:
        raise ResultsMissingError(f"{path} holds no finished checkpoint to analyse")
    return records


def diagrams_of(results_dir: str | Path, record: dict) -> list:
    """``[H0, H1, ...]`` of the record's analysed (default) layer."""
    arrays = load_arrays(results_dir, record)
    layer = record["layer"]
    out = []
    q = 0
    while f"layer{layer}_h{q}" in arrays:
        out.append(arrays[f"layer{layer}_h{q}"])
        q += 1
    return out


def wasserstein_series(results_dir: str | Path, records: list[dict]) -> dict[str, list[dict]]:
    """Per model, distances between each checkpoint's diagrams and the previous one's."""
    out: dict[str, list[dict]] = {}
    for label, recs in stats.by_model(records).items():
        recs = [r for r in recs if r.get("arrays_file")]
        if len(recs) < 2:
            out[label] = []
            continue
        rows = stats.consecutive_distances([diagrams_of(results_dir, r) for r in recs])
        out[label] = [
            {"step_from": a["step"], "step_to": b["step"], **row}
            for a, b, row in zip(recs[:-1], recs[1:], rows, strict=True)
        ]
    return out


def model_summaries(records: list[dict]) -> dict[str, dict]:
    """Per model: checkpoints analysed and the final checkpoint's quality and features."""
    out = {}
    for label, recs in stats.by_model(records).items():
        last = recs[-1]
        out[label] = {
            "model": last["model"],
            "n_checkpoints": len(recs),
            "steps": [r["step"] for r in recs],
            "num_parameters": last.get("num_parameters"),
            "final_step": last["step"],
            "final_perplexity": last["perplexity"],
            "final_features": last["features"],
        }
    return out


def feature_families(records: list[dict]) -> dict[str, list[str]]:
    """Feature names grouped by :func:`stats.feature_family` (only non-empty groups)."""
    out: dict[str, list[str]] = {}
    for f in stats.feature_names(records):
        out.setdefault(stats.feature_family(f), []).append(f)
    return out


def compute_statistics(results_dir: str | Path, records: list[dict]) -> dict:
    return {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "results_dir": str(results_dir),
        "settings_hash": sorted({r.get("settings_hash") for r in records} - {None}),
        "models": model_summaries(records),
        "features": feature_families(records),
        "correlations": stats.correlations_with_target(records, "perplexity"),
        "wasserstein": wasserstein_series(results_dir, records),
        "notes": {
            "perplexity": "exp(mean next-token NLL over every non-padding target token); "
                          "token counts per record in n_loss_tokens",
            "pearson_log": "Pearson correlation with ln(perplexity), i.e. the mean token loss",
            "wasserstein": "order 1 between consecutive checkpoints' diagrams of the analysed "
                           "layer; *_wasserstein uses the L-infinity ground metric (Hera), "
                           "*_persim_l2 is persim.wasserstein (L2 ground metric, the seed's)",
            "eigenspectrum_decay_alpha": "fitted on the top min(50, rank) eigenvalues "
                                         "(the seed's window)",
        },
    }


def analyse(results_dir: str | Path = "results", plots: bool = True) -> tuple[dict, list[Path]]:
    """Write ``data/statistics.json`` and the figures. Returns the statistics and figure paths."""
    records = load_results(results_dir)
    statistics = compute_statistics(results_dir, records)
    atomic_write_json(Path(results_dir) / "data" / "statistics.json", statistics)
    figures: list[Path] = []
    if plots:
        from .plots import plot_all

        figures = plot_all(records, statistics, Path(results_dir) / "plots")
    return statistics, figures


def summary_lines(statistics: dict, top: int = 8) -> list[str]:
    """Strongest pooled correlations with perplexity, one line each."""
    pooled = statistics["correlations"]["pooled"]
    ranked = sorted(
        ((f, c) for f, c in pooled.items() if c.get("spearman_r") is not None),
        key=lambda fc: -abs(fc[1]["spearman_r"]),
    )
    lines = [f"{len(statistics['models'])} model(s): " + ", ".join(
        f"{k} ({v['n_checkpoints']} ckpts, final ppl {v['final_perplexity']:.2f})"
        for k, v in statistics["models"].items())]
    if ranked:
        lines.append(f"strongest pooled Spearman correlations with perplexity (top {top}):")
        for f, c in ranked[:top]:
            lines.append(f"  {f:<32} rho={c['spearman_r']:+.3f}  p={c['spearman_p']:.2g}  "
                         f"n={c['n']}")
    else:
        lines.append("no correlation is defined (fewer than 3 checkpoints, or constant values)")
    return lines
