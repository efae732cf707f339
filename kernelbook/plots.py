"""Figures for the book. Every figure states where its numbers come from (measured or replayed)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .report import reported, throughput

LAYER_COLORS = {"C1": "tab:blue", "C3": "tab:orange"}


def _provenance(ax, chapter) -> None:
    ax.text(0.0, -0.16, chapter.session.short_label, transform=ax.transAxes, fontsize=8,
            color="0.35" if chapter.session.measuring else "tab:red", va="top")


def op_time_vs_batch(chapter, step: str | None = None):
    """Op time against batch size per layer (log-log), with the seeds' reports as dashed lines."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    frame = throughput(chapter)
    for layer, group in frame.groupby("layer"):
        group = group.sort_values("batch")
        ax.plot(group["batch"], group["op_time_ms"], "o-", color=LAYER_COLORS.get(layer),
                label=f"{layer} ({chapter.variant}, this book)")
    seeds = reported(step or chapter.variant)
    for (seed, gpu), group in seeds.groupby(["seed", "gpu"]):
        for layer, column in (("C1", "op_time_1_ms"), ("C3", "op_time_2_ms")):
            ax.plot(group["batch"], group[column], "x--", color=LAYER_COLORS[layer], alpha=0.5,
                    label=f"{layer} reported, {seed[:3]} ({gpu})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (images)")
    ax.set_ylabel("op time (ms, median)")
    ax.set_title(f"{chapter.variant}: op time against batch size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    _provenance(ax, chapter)
    fig.tight_layout()
    return fig
