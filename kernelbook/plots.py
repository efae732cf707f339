"""Figures for any study. Every figure carries a short provenance tag (measured or replayed,
device, date, commit, run); colours are the Okabe–Ito palette, distinguishable with every common
colour-vision deficiency, and figures are drawn at 2x resolution for sharp pages."""

from __future__ import annotations

import textwrap
import warnings

import matplotlib
import matplotlib.axes
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
    if shell is not None:
        # A figure is shown as HTML: its PNG at the reading width and, for a phone, a narrow PNG redrawn
        # by ``narrow`` (a <picture> picks one), with what figure_faults found in the output's
        # metadata (tests/test_layout.py reads it). No separate PNG: one rendering per width.
        formatters = shell.display_formatter.formatters
        formatters["image/png"].pop(matplotlib.figure.Figure, None)
        formatters["text/html"].for_type(matplotlib.figure.Figure, figure_html)


#: Output metadata key of a figure's checks (``figure_faults``).
FIGURE_METADATA = "kernelbook_figure"
#: The width a figure is shown at on a 400 px phone (the article's column there), its narrow
#: variant's width in inches, the media query that picks it, and the smallest text a reader must
#: get at that width (CSS px).
NARROW_PX = 368
NARROW_IN = 4.2
NARROW_MEDIA = "(max-width: 600px)"
MIN_TEXT_PX = 9.0
#: A key and a footer are read against the marks and looked up, not glanced at: in the narrow
#: variant they are drawn larger than the floor (CSS px at NARROW_PX).
KEY_TEXT_PX = 11.0
#: A panel with more text labels than this (a heat map's values) shows none in the narrow variant.
CELL_LABELS = 12
#: The reading column at 1280 px (book/_static/kernelbook.css), where the wide PNG is shown.
WIDE_PX = 828


def _png(fig) -> tuple[bytes, float]:
    """The PNG as the book shows it (tight box) and its width in inches."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    width_in = fig.get_tightbbox(fig.canvas.get_renderer()).width
    return buffer.getvalue(), width_in


def smallest_text_px(fig, shown_px: float, width_in: float) -> float:
    """The smallest visible text of ``fig`` in CSS px, its PNG (``width_in`` wide) shown at most
    ``shown_px`` wide (never enlarged past its own pixels)."""
    scale = min(shown_px, width_in * FIGURE_DPI) / (width_in * 72.0)
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and t.get_figure() is not None]
    return min(sizes, default=99.0) * scale


def _cells(fig) -> list:
    """The figure's panels as its grid places them, in reading order: each an axes, or the nested
    grid that a colorbar made beside its panel (moved as one)."""
    from matplotlib.gridspec import GridSpecFromSubplotSpec

    cells: dict = {}
    for ax in fig.axes:
        spec = ax.get_subplotspec() if ax.get_visible() else None
        if spec is None:
            continue
        grid = spec.get_gridspec()
        if isinstance(grid, GridSpecFromSubplotSpec):
            while isinstance(grid._subplot_spec.get_gridspec(), GridSpecFromSubplotSpec):
                grid = grid._subplot_spec.get_gridspec()  # the outermost nested grid of the panel
            cells.setdefault(id(grid), (grid, grid.get_topmost_subplotspec()))
        elif ax.get_label() != "<colorbar>":
            cells.setdefault(id(ax), (ax, spec))
    return sorted(cells.values(), key=lambda c: (c[1].rowspan.start, c[1].colspan.start))


#: A tick label longer than this (a configuration's parameters) breaks over lines in the narrow variant.
TICK_CHARS = 28


def _wrap_text(text, chars: int) -> None:
    """Break a text artist's lines longer than ``chars`` characters at spaces."""
    lines = text.get_text().split("\n")
    if max(len(line) for line in lines) > chars:
        text.set_text("\n".join(textwrap.fill(line, chars) for line in lines))


def _lines(text) -> int:
    return text.get_text().count("\n") + 1


def narrow(fig, min_pt: float | None = None) -> None:
    """Redraw ``fig`` for a phone, in place: its panels in one column NARROW_IN wide, every text at
    least ``min_pt`` (by default MIN_TEXT_PX at NARROW_PX), the legends under the panels, one entry a
    line, the footer wrapped, and a panel's many cell labels (CELL_LABELS) hidden."""
    import warnings

    from matplotlib.gridspec import GridSpec

    min_pt = min_pt or MIN_TEXT_PX * 72.0 * NARROW_IN / NARROW_PX + 0.3
    cells = _cells(fig)
    old_w, old_h = fig.get_size_inches()
    rows = max((c[1].get_geometry()[0] for c in cells), default=1)
    cols = max((c[1].get_geometry()[1] for c in cells), default=1)
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_text().strip() and text.get_fontsize() < min_pt:
            text.set_fontsize(min_pt)
    # long titles, footers and tick labels break over lines: on one line they widen the figure and
    # with it shrink every text when the PNG is fitted to the phone
    tall_rows = 0.0
    for text in [fig._suptitle] + [ax.title for ax in fig.axes] + list(fig.texts):
        if text is not None and text.get_text():
            _wrap_text(text, int(NARROW_IN * 72 / (0.55 * text.get_fontsize())))
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        if labels and max(len(label) for label in labels) > TICK_CHARS:
            labels = [textwrap.fill(label, TICK_CHARS) for label in labels]
            ax.set_yticks(ax.get_yticks(), labels)
        lines = max((label.count("\n") + 1 for label in labels), default=1)
        if lines > 1:  # each wrapped label gets the height of its lines
            size = max(min_pt, ax.get_yticklabels()[0].get_fontsize())
            ax.tick_params(axis="y", labelsize=size)
            tall_rows = max(tall_rows, len(labels) * lines * size * 1.4 / 72 + 1.2)
    for ax in fig.axes:  # a heat map's numbers in its cells: unreadable this narrow, the page's table has them
        if len(ax.texts) > CELL_LABELS:
            for text in ax.texts:
                text.set_visible(False)
    entries: list = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                if label not in [e[1] for e in entries]:
                    entries.append((handle, label))
            legend.remove()
    for legend in list(fig.legends):
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            if text.get_text() not in [e[1] for e in entries]:
                entries.append((handle, text.get_text()))
        legend.remove()
    # each panel keeps its shape, at the narrow width, with room for its labels
    panel_w, panel_h = old_w / cols, old_h / rows
    each = max(min(4.5, max(2.4, panel_h * NARROW_IN / panel_w + 0.9)), tall_rows)
    if len(cells) > 1 and cols > 1:
        grid = GridSpec(len(cells), 1, figure=fig)
        for i, (what, _) in enumerate(cells):
            if isinstance(what, matplotlib.axes.Axes):
                what.set_subplotspec(grid[i, 0])
            else:  # a panel and its colorbar: their nested grid moves to the new cell
                what._subplot_spec = grid[i, 0]
        height = each * len(cells)
    else:
        height = max(each * rows, old_h * NARROW_IN / old_w)
    key_pt = max(min_pt, KEY_TEXT_PX * 72.0 * NARROW_IN / NARROW_PX)
    foot = [t for t in fig.texts if t.get_position()[1] < 0.15]
    for text in foot:   # the run a figure comes from: larger than the floor, wrapped anew at that size
        text.set_fontsize(max(text.get_fontsize(), key_pt * 0.9))
        text.set_text(" ".join(text.get_text().split("\n")))
        _wrap_text(text, int(NARROW_IN * 72 / (0.55 * text.get_fontsize())))
    key_in = (len(entries) * key_pt * 1.45 / 72 + 0.15) if entries else 0.0
    foot_in = max((_lines(t) * t.get_fontsize() * 1.3 / 72 + 0.1 for t in foot), default=0.0)
    top_in = (_lines(fig._suptitle) * fig._suptitle.get_fontsize() * 1.3 / 72 + 0.15) if fig._suptitle else 0.0
    total = height + key_in + foot_in + top_in
    fig.set_size_inches(NARROW_IN, total)
    if fig._suptitle is not None:   # at the very top, the key under it
        fig._suptitle.set_y(1 - 0.06 / total)
        fig._suptitle.set_va("top")
    if entries:   # the key above the panels, under the title: read before the first panel, not after the last
        fig.legend([h for h, _ in entries], [label for _, label in entries], loc="upper center", ncol=1,
                   frameon=False, fontsize=key_pt, bbox_to_anchor=(0.5, 1 - top_in / total))
    fig.set_layout_engine("none")
    for ax in fig.axes:  # each panel where its (new) cell is, before the layout adjusts the margins
        if ax.get_subplotspec() is not None:
            ax._set_position(ax.get_subplotspec().get_position(fig))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what cannot be tightened shows in the measured text size
        fig._kernelbook_rect = (0, foot_in / total, 1, 1 - (top_in + key_in) / total)
        fig.tight_layout(rect=fig._kernelbook_rect)


def colliding_tick_labels(fig) -> list[str]:
    """Tick labels of one axis drawn over each other (too many, too long for the panel's width)."""
    fig.canvas.draw()  # the labels where they are now, at the figure's own dpi (not a PNG's)
    renderer = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for name, labels in (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels())):
            # a label closer than a character's gap to the next reads as one word with it ("0001")
            gap = 0.1 * fig.dpi * min((t.get_fontsize() for t in labels), default=8) / 72
            # slanted labels' boxes overlap where their letters do not: only level or upright ones
            # (an upright label's box already holds its line's spacing: no gap added to it)
            boxes = [(t.get_text(), t.get_window_extent(renderer).padded(gap / 2 if t.get_rotation() % 180 == 0 else 0))
                     for t in labels if t.get_visible() and t.get_text().strip() and t.get_rotation() % 90 == 0]
            for (a, box_a), (b, box_b) in zip(boxes, boxes[1:]):
                if box_a.width and box_b.width and box_a.overlaps(box_b):
                    bad.append(f"the {name} tick labels {a!r} and {b!r} of panel {ax.get_title()!r} overlap")
                    break
    return bad


def _untangle_ticks(fig) -> None:
    """Turn x tick labels that run into each other upright (steps 00, 01, … under narrow bars)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        gap = 0.25 * fig.dpi * min((t.get_fontsize() for t in ax.get_xticklabels()), default=8) / 72
        boxes = [t.get_window_extent(renderer).padded(gap / 2) for t in ax.get_xticklabels()
                 if t.get_visible() and t.get_text()]
        if any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])):
            ax.tick_params(axis="x", labelrotation=90)  # the axis's setting: the labels are remade on drawing


def figure_html(fig):
    """``fig`` for the book: a <picture> of its wide PNG and its narrow variant (``narrow``), and
    what ``figure_faults`` found, with the smallest text at each width (CSS px), as output
    metadata. The narrow variant must have text of at least MIN_TEXT_PX; the wide one is recorded."""
    import base64

    faults = figure_faults(fig) + colliding_tick_labels(fig)
    wide, wide_in = _png(fig)
    wide_px = smallest_text_px(fig, WIDE_PX, wide_in)
    narrow(fig)
    small, small_in = _png(fig)
    small_px = smallest_text_px(fig, NARROW_PX, small_in)
    for _ in range(2):  # wider than NARROW_IN (a long legend line): larger text, laid out again
        if small_px >= MIN_TEXT_PX:
            break
        narrow(fig, min(t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip())
               * MIN_TEXT_PX / small_px + 0.2)
        small, small_in = _png(fig)
        small_px = smallest_text_px(fig, NARROW_PX, small_in)
    if small_px < MIN_TEXT_PX - 0.05:
        faults.append(f"text of {small_px:.1f} px at 400 px (at least {MIN_TEXT_PX:g})")
    if colliding_tick_labels(fig):  # upright, then laid out again
        _untangle_ticks(fig)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig.tight_layout(rect=getattr(fig, "_kernelbook_rect", (0, 0, 1, 1)))
        small, small_in = _png(fig)
    faults += [f"{found} at 400 px" for found in colliding_tick_labels(fig)]

    def uri(data: bytes) -> str:
        return "data:image/png;base64," + base64.b64encode(data).decode("ascii")

    title = fig._suptitle.get_text() if fig._suptitle is not None else next(
        (ax.get_title() for ax in fig.axes if ax.get_title()), "figure")
    from .escape import html_text

    body = (f'<picture class="kernelbook-figure"><source media="{NARROW_MEDIA}" srcset="{uri(small)}">'
            f'<img src="{uri(wide)}" alt="{html_text(title)}"></picture>')
    return body, {FIGURE_METADATA: {"faults": faults, "text_px": {"wide": round(float(wide_px), 1),
                                                                   "narrow": round(float(small_px), 1)}}}


def footer(fig, text: str, measuring: bool = True) -> None:
    """The figure's provenance (run, device, date, commit) in its bottom-left corner."""
    # parse_math=False: a device name or commit from the store is text, never mathtext to parse
    fig.text(0.01, 0.005, text, fontsize=7, ha="left", va="bottom", parse_math=False,
             color="0.35" if measuring else "#D55E00")


def _series_style(line) -> tuple:
    from matplotlib.colors import to_rgba

    return (to_rgba(line.get_color()), str(line.get_marker()), str(line.get_linestyle()))


def figure_faults(fig) -> list[str]:
    """What a reader could not tell apart or read in ``fig``, found from its drawn artists:

    - no run footer: a figure-level text at its foot (``footer``);
    - two labelled line series of one panel with the same colour, marker and line style;
    - a legend that overlaps a panel's data area or a tick label of another panel;
    A layout that warned is not checked here: tests/test_layout.py reads the outputs for it.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bad = []
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
                bad.append(f"series {seen[style]!r} and {label!r} share a colour, marker and line style")
            seen.setdefault(style, label)
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None] + list(fig.legends)
    ticks = []  # the tick labels drawn: matplotlib also keeps labels for ticks outside the view
    for ax in axes:
        box = ax.get_window_extent(renderer)
        for axis, labels in ((0, ax.get_xticklabels()), (1, ax.get_yticklabels())):
            for t in labels:
                if t.get_visible() and t.get_text().strip():
                    centre = t.get_window_extent(renderer).get_points().mean(axis=0)[axis]
                    if (box.x0 if axis == 0 else box.y0) - 1 <= centre <= (box.x1 if axis == 0 else box.y1) + 1:
                        ticks.append(t)
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
    fig.tight_layout(rect=(0, (0.21 * len(labels) + 0.5) / height, 1, 1 - 0.35 / height))
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


