"""LeNet-only figures: op time against batch beside the write-ups, the sweep's heat maps, the
streams' sweep and timelines. Colours are the Okabe–Ito palette (colour-blind safe)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..plots import CASE_COLORS as LAYER_COLORS
from ..plots import _provenance
from ..report import throughput
from .tables import reported

#: Markers of the write-ups' reported series (this book's own are circles).
SEED_MARKERS = ("x", "s", "^", "D", "v", "P", "*")


def op_time_vs_batch(chapter, step: str | None = None):
    """Op time against batch size per layer (log-log), with the seeds' reports as dashed lines."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    frame = throughput(chapter)
    for layer, group in frame.groupby("layer"):
        group = group.sort_values("size")
        ax.plot(group["size"], group["op_time_ms"], "o-", color=LAYER_COLORS.get(layer),
                label=f"{layer} ({chapter.slug}, this book)")
    seeds = reported(step or chapter.slug)
    # each write-up its own marker (the layer keeps its colour): no two series look alike
    for i, ((seed, gpu, what), group) in enumerate(seeds.groupby(["seed", "gpu", "seed_label"])):
        marker = SEED_MARKERS[i % len(SEED_MARKERS)]
        for layer, column in (("C1", "op_time_1_ms"), ("C3", "op_time_2_ms")):
            ax.plot(group["batch"], group[column], ls="--", marker=marker, color=LAYER_COLORS[layer], alpha=0.6,
                    label=f"{layer} reported, {seed[:3]} ({gpu}, {what})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (images)")
    ax.set_ylabel("op time (ms, median)")
    ax.set_title(f"{chapter.slug}: op time against batch size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: never over a line
    _provenance(ax, chapter)
    fig.tight_layout()
    return fig


def sweep_heatmaps(grid, batch: int | None = None):
    """Op time of every configuration per layer: block shape (rows) x coarsening/images (columns)."""
    import numpy as np

    frame = grid.frame()
    metric = grid.parameters["metric"]
    frame = frame[frame["metric"] == metric]
    batch = batch or int(frame["size"].max())
    frame = frame[frame["size"] == batch].copy()
    frame["block"] = frame["tile_w"].astype(str) + "×" + frame["tile_h"].astype(str)
    frame["work"] = "out/thread " + frame["out_per_thread"].astype(str) + ", imgs " + frame["imgs_per_block"].astype(str)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6), dpi=110)
    for ax, layer in zip(axes, ("C1", "C3")):
        sub = frame[frame["layer"] == layer]
        table = sub.pivot_table(index="block", columns="work", values="value", aggfunc="first")
        order = sorted(table.index, key=lambda s: tuple(int(v) for v in s.split("×")))
        table = table.reindex(order)
        data = table.to_numpy(dtype=float)
        ax.set_facecolor("0.85")  # refused or failed cells show as grey with a cross
        image = ax.imshow(np.log10(data), cmap="viridis_r", aspect="auto")
        ax.set_xticks(range(len(table.columns)), table.columns, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(table.index)), table.index, fontsize=8)
        for (i, j), value in np.ndenumerate(data):
            ax.text(j, i, "✕" if np.isnan(value) else f"{value:.2g}", ha="center", va="center",
                    fontsize=7 if np.isnan(value) else 6.5, color="black" if np.isnan(value) else "white",
                    fontweight="bold")
        if np.isfinite(data).any():
            i, j = np.unravel_index(np.nanargmin(data), data.shape)
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        ax.set_title(f"{layer}: op time (ms) at batch {batch}\nred box = fastest; grey ✕ = refused or failed check", fontsize=9)
        fig.colorbar(image, ax=ax, label="log10 ms")
    fig.text(0.01, 0.005, grid.session.short_label, fontsize=7,
             color="0.35" if grid.session.measuring else "tab:red")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def streams_sweep(grid):
    """Layer time against the number of streams, pinned and pageable, per layer and batch."""
    frame = grid.frame()
    frame = frame[frame["metric"] == "layer_time_ms"]
    batches = sorted(frame["size"].unique())
    fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 3.8), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        sub = frame[frame["size"] == batch]
        for (layer, memory), group in sub.groupby(["layer", "host_memory"]):
            group = group.sort_values("n_streams")
            ax.plot(group["n_streams"], group["value"], "o-" if memory == "pinned" else "s--",
                    color=LAYER_COLORS[layer], label=f"{layer}, {memory}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("streams")
        ax.set_ylabel("layer time (ms)")
        ax.set_title(f"batch {batch}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()  # one key under the panels, never over a line
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels), bbox_to_anchor=(0.5, 0.05),
               frameon=False)
    fig.text(0.01, 0.005, grid.session.short_label, fontsize=7,
             color="0.35" if grid.session.measuring else "tab:red")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig


def timeline(grid, layer: str):
    """Per-stream timeline of copies and kernels from the recorded CUDA events."""
    rows = [t for t in grid.extra.get("timelines", []) if t["layer"] == layer]
    colors = {"H2D": "tab:green", "kernel": "tab:blue", "D2H": "tab:red"}
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 1.0 + 0.45 * sum(
        1 + max(e["stream"] for e in r["events"]) for r in rows)), squeeze=False)
    for ax, row in zip(axes[:, 0], rows):
        for event in row["events"]:
            ax.broken_barh([(event["start_ms"], event["end_ms"] - event["start_ms"])],
                           (event["stream"] - 0.4, 0.8), facecolors=colors[event["kind"]])
        n = 1 + max(e["stream"] for e in row["events"])
        ax.set_yticks(range(n), [f"stream {s}" for s in range(n)], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ms since the first copy was enqueued")
        end = max(e["end_ms"] for e in row["events"])
        ax.set_title(f"{layer}, batch {row['batch']}: {row['config_label']} — {end:.1f} ms", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    height = fig.get_figheight()  # the key under the panels, never over a bar
    fig.legend(handles, list(colors), fontsize=8, loc="lower center", ncol=3, bbox_to_anchor=(0.5, 0.25 / height),
               frameon=False)
    fig.text(0.01, 0.005, grid.session.short_label, fontsize=7,
             color="0.35" if grid.session.measuring else "tab:red")
    fig.tight_layout(rect=(0, 0.6 / height, 1, 1))
    return fig


