"""The devices page's figure: the H200's speed-up over the H100 against each step's arithmetic
intensity, with both devices' ridge points and the bandwidth ratio (``crossdevice`` reads the runs
and builds the table it draws)."""

from __future__ import annotations

import textwrap

from .crossdevice import BANDWIDTH, BASE, OTHER, Comparison, bandwidth_ratio
from .evidence.floor import unit
from .evidence.roofline import ROOFS
from .plots import PALETTE, footer

#: One marker per bound, one colour per study (in the order the page hands them in).
BOUND_MARKERS = {"bytes": "o", "arithmetic": "^", "not known": "s"}
DEVICE_COLORS = {BASE: PALETTE[0], OTHER: PALETTE[5]}


def _from(rec, *metrics: str) -> str:
    """Where a run's ``metrics`` and its bandwidth come from: measured, datasheet, or both."""
    kinds = {"measured" if rec.sources.get(m, "").startswith("measured") else "datasheet"
             for m in set(metrics) | {BANDWIDTH}}
    return kinds.pop() if len(kinds) == 1 else "measured and datasheet"


def speedup_figure(*comparisons: Comparison):
    """The H200's speed-up over the H100 against each step's arithmetic intensity (log x), one
    point per step and case; both devices' ridge points as vertical lines (the units the plotted
    steps run on), the bandwidth ratio as a horizontal line. None when no H200 run is recorded."""
    import matplotlib.pyplot as plt

    shown = [c for c in comparisons if c.other.found and not c.frame.empty]
    frames = [c.frame[c.frame["speedup"].notna() & c.frame["intensity"].notna()] for c in shown]
    if not shown or all(f.empty for f in frames):
        return None
    fig, ax = plt.subplots(figsize=(7.5, 6.2))
    xs = [x for f in frames for x in f["intensity"]]
    ys = [y for f in frames for y in f["speedup"]]
    for i, (c, f) in enumerate(zip(shown, frames)):
        for bound, marker in BOUND_MARKERS.items():
            mine = f[f["bound"] == bound]
            if len(mine):
                ax.scatter(mine["intensity"], mine["speedup"], marker=marker, s=46, color=PALETTE[i % len(PALETTE)],
                           edgecolors="black", linewidths=0.4, zorder=3, label=f"{c.study.name}, {bound}-bound")
    units = {unit(u)[0] for f in frames for u in f["unit"]}
    first = shown[0]
    ridges = []
    for rec in (first.base, first.other):
        for metric, name, style in ROOFS:
            ridge = rec.ridge(metric)
            if metric in units and ridge:
                ridges.append(ridge)
                ax.axvline(ridge, color=DEVICE_COLORS.get(rec.label, "0.4"), ls=style, lw=1.2,
                           label=f"{rec.label} ridge, {name}: {ridge:.0f} FLOP/byte ({_from(rec, metric)})")
    ratio, _ = bandwidth_ratio(first.base, first.other)
    if ratio:
        ax.axhline(ratio, color="0.3", ls="-.", lw=1.0,
                   label=f"bandwidth ratio {ratio:.2f}× ({_from(first.other, BANDWIDTH)} / {_from(first.base, BANDWIDTH)})")
    ax.axhline(1.0, color="0.6", ls="-", lw=0.8, label="no change (1×)")
    ax.set_xscale("log")
    lo, hi = min(xs + ridges) / 2, max(xs + ridges) * 2
    ax.set_xlim(lo, hi)
    top = max(ys + [ratio or 1.0]) * 1.08
    ax.set_ylim(min(ys + [1.0]) * 0.9, top)
    ax.set_xlabel("arithmetic intensity on the H100 (FLOP per DRAM byte)")
    ax.set_ylabel(f"speed-up: {first.base.label} time / {first.other.label} time")
    ax.set_title(f"{first.other.label} against {first.base.label}, every step and case", fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    rows = (len(labels) + 1) // 2
    key = 0.2 * rows + 0.45
    fig.set_size_inches(7.5, 5.2 + key)
    fig.legend(handles, labels, fontsize=8.5, loc="lower left", ncol=2, frameon=False,
               bbox_to_anchor=(0.01, 0.35 / (5.2 + key)))
    runs = "; ".join(f"{c.study.name}: {c.base.run.run_id}, {c.other.run.run_id}" for c in shown)
    sources = (f"ridges and bandwidth ratio from runs {first.base.run.run_id} ({first.base.label}) and "
               f"{first.other.run.run_id} ({first.other.label}); measured: that run's ceilings, datasheet: "
               "the GPU's datasheet peaks")
    footer(fig, textwrap.fill(f"runs {runs}; {sources}.", 150), measuring=True)
    fig.tight_layout(rect=(0, key / (5.2 + key), 1, 1))
    fig._kernelbook_rect = (0, key / (5.2 + key), 1, 1)
    return fig


def figure(*comparisons: Comparison):
    """The speed-up figure for the page, or a sentence saying why there is none yet."""
    from IPython.display import Markdown, display

    fig = speedup_figure(*comparisons)
    if fig is None:
        return Markdown(f"No {OTHER} recording exists yet, so there is no speed-up to draw; the figure appears "
                        f"once a run on the {OTHER} is recorded.")
    import matplotlib.pyplot as plt

    display(fig)
    plt.close(fig)
    return None
