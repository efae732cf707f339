"""Figures for any study. Every figure carries a short provenance tag (measured or replayed,
device, date, commit, run); colours are the Okabe–Ito palette, distinguishable with every common
colour-vision deficiency, and figures are drawn at 2x resolution for sharp pages."""

from __future__ import annotations

import matplotlib
import matplotlib.figure
import matplotlib.pyplot as plt
import matplotlib.text

from .report import throughput

FIGURE_DPI = 200  # pixels per inch of the PNGs in the book: sharp at twice the reading width


def configure_figures() -> None:
    """PNG figures at ``FIGURE_DPI`` with no size metadata.

    IPython's "retina" format tags each PNG with a display width and height, which Jupyter Book
    turns into an inline ``style="width:…px;height:…px"`` on the image; that inline size beats the
    stylesheet, so a figure shrunk to the column kept its height and drew distorted. A plain PNG
    carries no size: the stylesheet scales it to the column (``max-width: 100%; height: auto``)
    and it keeps its aspect ratio at every width (tests/test_book.py reads the built HTML for it).
    """
    matplotlib.rcParams["figure.dpi"] = 110
    matplotlib.rcParams["savefig.dpi"] = FIGURE_DPI
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png", dpi=FIGURE_DPI)
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:  # outside Jupyter/IPython: nothing to configure
        return
    if shell is not None:  # each figure's PNG carries what figure_faults found in it (tests/test_layout.py)
        shell.display_formatter.formatters["image/png"].for_type(matplotlib.figure.Figure, _checked_png)


#: Output metadata key of a figure's checks (``figure_faults``), beside its PNG.
FIGURE_METADATA = "kernelbook_figure"


def _checked_png(fig):
    from IPython.core.pylabtools import print_figure

    faults = figure_faults(fig)
    return print_figure(fig, "png", dpi=FIGURE_DPI, bbox_inches="tight"), {FIGURE_METADATA: {"faults": faults}}


def footer(fig, text: str, measuring: bool = True) -> None:
    """The figure's provenance (run, device, date, commit) in its bottom-left corner."""
    # parse_math=False: a device name or commit from the store is text, never mathtext to parse
    fig.text(0.01, 0.005, text, fontsize=7, ha="left", va="bottom", parse_math=False,
             color="0.35" if measuring else "#D55E00")


def _series_style(line) -> tuple:
    from matplotlib.colors import to_rgba

    return (to_rgba(line.get_color()), str(line.get_marker()))


def figure_faults(fig) -> list[str]:
    """What a reader could not tell apart or read in ``fig``, found from its drawn artists:

    - no run footer: a figure-level text at its foot (``footer``);
    - two labelled line series of one panel with the same colour and marker;
    - a legend that overlaps a panel's data area or a tick label of another panel;
    A layout that warned is not checked here: tests/test_layout.py reads the outputs for it.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bad = []
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
    if not any(t.get_text().strip() and t.get_position()[1] < 0.15 for t in fig.texts):
        bad.append("no run footer (a line of text at the figure's foot: plots.footer)")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    for ax in axes:
        seen: dict = {}
        for line in ax.get_lines():
            label = line.get_label()
            if label.startswith("_") or not line.get_visible():
                continue
            style = _series_style(line)
            if style in seen:
                bad.append(f"series {seen[style]!r} and {label!r} share a colour and marker")
            seen.setdefault(style, label)
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None] + list(fig.legends)
    ticks = [t for ax in axes for t in ax.get_xticklabels() + ax.get_yticklabels()
             if t.get_visible() and t.get_text().strip()]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in axes:
            if box.overlaps(ax.get_window_extent(renderer)) and ax.patch.get_visible():
                bad.append(f"a legend covers the data of panel {ax.get_title()!r}")
        for tick in ticks:
            if box.overlaps(tick.get_window_extent(renderer)):
                bad.append(f"a legend covers the tick label {tick.get_text()!r}")
                break
    return bad


configure_figures()
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
CASE_COLORS = {"C1": PALETTE[0], "C3": PALETTE[1]}


def _provenance(ax, chapter) -> None:
    """The chapter's run footer under the figure."""
    footer(ax.figure, chapter.recording.short_label, chapter.session.measuring)


def _bars(ax, groups: dict, batches: list, layer: str, column: str) -> bool:
    """Grouped bars per batch; returns whether any bar has a positive height."""
    width = 0.8 / max(len(groups), 1)
    drawn = False
    for i, (name, frame) in enumerate(groups.items()):
        rows = frame[frame["layer"] == layer].set_index("size")
        values = [rows[column].get(b, float("nan")) for b in batches]
        drawn |= any(v > 0 for v in values)
        ax.bar([j + i * width for j in range(len(batches))], values, width, label=name, color=PALETTE[i % len(PALETTE)])
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(batches))], [str(b) for b in batches])
    return drawn


def step_deltas(steps: dict):
    """Time, GFLOP/s and GB/s per case and size: baseline, previous step and this step.

    ``steps`` maps a role ("baseline: …", "this step: …") to a Chapter; a step that failed its
    check has no timings and shows no bar.
    """
    groups = {name: throughput(ch) for name, ch in steps.items() if ch.correct}
    current = list(steps.values())[-1]
    measured = {c for f in groups.values() for c in f.get("layer", [])}
    cases = [c for c in current.study.cases if c in measured] or list(current.study.cases[:1])
    batches = sorted({b for f in groups.values() for b in f.get("size", [])})
    columns = (("op_time_ms", "time (ms, log)"), ("gflops", "GFLOP/s"), ("gbytes_per_s", "GB/s (fewest bytes)"))
    panels = [(layer, column, title) for layer in cases for column, title in columns]
    # Two panels a row, 7 inches wide with 10-12 pt text: legible at the reading width and, shrunk
    # to a phone's 400 px, still readable (three panels a row were not).
    ncols = 2
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7, 2.9 * nrows + 1.2), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (layer, column, title) in zip(flat, panels):
        mine = sorted({b for f in groups.values() for b in f[f["layer"] == layer]["size"]}) or batches
        drawn = _bars(ax, groups, mine, layer, column) if groups else False
        if column == "op_time_ms" and drawn:
            ax.set_yscale("log")
        ax.set_title(f"{layer}: {title}", fontsize=11)
        ax.set_xlabel(current.study.size_header.lower(), fontsize=10)
        ax.tick_params(labelsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    handles, labels = flat[0].get_legend_handles_labels()
    if handles:  # one legend for the figure, below the plots: it never covers a bar
        fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=1, bbox_to_anchor=(0.5, 0.035), frameon=False)
    runs = {ch.session.run.run_id for ch in steps.values() if ch.session is not None}
    source = (current.recording.short_label if len(runs) <= 1 else
              "; ".join(f"{name.split(':')[0]}: run {ch.session.run.run_id}" for name, ch in steps.items()))
    fig.suptitle(f"{current.slug} against the baseline and the previous step", fontsize=10, parse_math=False)
    footer(fig, source, current.session is None or current.session.measuring)
    height = 2.9 * nrows + 1.2
    fig.tight_layout(rect=(0, (0.2 * len(labels) + 0.3) / height, 1, 1 - 0.35 / height))
    return fig


def time_per_image(steps: dict):
    """Op time per image against batch size: fixed costs show as lines falling with the batch."""
    cases = list(steps.values())[-1].study.cases
    rows = sum(1 for ch in steps.values() if ch.correct)
    fig, axes = plt.subplots(1, len(cases), figsize=(3.6 * len(cases), 3.6 + 0.2 * rows + 0.3), squeeze=False)
    axes = axes[0]
    current = list(steps.values())[-1]
    for ax, layer in zip(axes, current.study.cases):
        for name, chapter in steps.items():
            if not chapter.correct:
                continue
            frame = throughput(chapter)
            frame = frame[frame["layer"] == layer].sort_values("size")
            ax.plot(frame["size"], 1000 * frame["op_time_ms"] / frame["size"], "o-", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("op time per image (µs)")
        ax.set_title(layer)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # below the panels: it never covers a line or a tick label
        fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=1, bbox_to_anchor=(0.5, 0.04),
                   frameon=False)
    _provenance(axes[0], current)
    fig.tight_layout(rect=(0, (0.2 * len(labels) + 0.3) / fig.get_figheight(), 1, 1))
    return fig


