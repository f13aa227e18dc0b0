"""The small figure a live run refreshes as it trains: H1 total persistence, RankMe,
neural persistence and the loss against step, with the experimental final-loss
forecast on the loss panel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib as mpl

from toposig.analysis.online import Signal
from toposig.records import Record, records_from_json
from toposig.report.panels import set_step_axis, value_of
from toposig.report.style import RC_PARAMS, save_figure, subplots

LIVE_PANELS = (("h1_total_persistence", "H1 total persistence"),
               ("rankme", "RankMe (effective rank)"),
               ("np_mean", "neural persistence (mean)"))


def draw_live_figure(entries: Sequence[Record | Mapping], path: str | Path,
                     losses: Sequence[float | None],
                     signal: Signal | None = None, loss_name: str = "loss", *,
                     root: str | Path | None = None) -> Path | None:
    """Draw the panels the entries have values for, and the loss with the forecast.

    Args:
        entries: one model's aggregate entries (one per measured step), in step order:
            :class:`~toposig.records.Record`, or their JSON.
        path: the file to write (the suffix is replaced by each output format).
        losses: ``(n,)`` the loss of each entry (nats; ``None`` where unknown).
        signal: the latest :class:`~toposig.analysis.online.Signal`, whose forecast is
            drawn at its final step with a ±2 s.e. bar.
        loss_name: what the losses are, for the panel's title.
        root: the folder the caller was given (default: ``path``'s folder); no folder
            between it and ``path`` is followed through a link.

    Returns:
        The path written, or ``None`` when there is nothing to draw.
    """
    records = records_from_json(entries)
    steps = [r.step for r in records]
    panels = [(key, title, [value_of(r, key) for r in records]) for key, title in LIVE_PANELS]
    panels = [p for p in panels if any(v is not None for v in p[2])]
    if any(v is not None for v in losses):
        panels.append(("loss", f"{loss_name} (nats / token)", list(losses)))
    if not panels:
        return None
    forecast = signal.forecast if signal is not None else None
    with mpl.rc_context(RC_PARAMS):
        fig, axes = subplots(1, len(panels), figsize=(3.2 * len(panels), 2.9),
                                 squeeze=False)
        for ax, (key, title, values) in zip(axes[0], panels, strict=True):
            pts = [(s, v) for s, v in zip(steps, values, strict=True)
                   if s is not None and v is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, lw=1.2,
                    color="#1f77b4")
            ax.set_title(title, fontsize=9 if len(title) > 30 else None)
            span: list[float | None] = list(steps)
            if key == "loss" and forecast is not None:
                span.append(forecast.final_step)
                for name, value, se, color in (
                        ("loss curve", forecast.loss_only, forecast.loss_only_se, "#7f7f7f"),
                        (f"+ {forecast.feature}", forecast.combined, forecast.combined_se,
                         "#d62728")):
                    if value is not None:
                        ax.errorbar([forecast.final_step], [value],
                                    yerr=[2 * se] if se is not None else None, fmt="s",
                                    ms=4, color=color, capsize=3,
                                    label=f"forecast, {name}")
                if forecast.default is not None:
                    ax.errorbar([forecast.final_step], [forecast.default],
                                yerr=[[forecast.default - forecast.default_low],
                                      [forecast.default_high - forecast.default]],
                                fmt="D", ms=4, color="black", capsize=3,
                                label="forecast (default, 95 %)")
                ax.legend(loc="lower left", fontsize=7,
                          title=f"experimental; {forecast.decision or 'no decision'}",
                          title_fontsize=7)
            set_step_axis(ax, span)
        fig.suptitle(f"live measurements, step {max(s for s in steps if s is not None)}",
                     fontsize=10)
        fig.tight_layout()
        return save_figure(fig, path, root=root)
