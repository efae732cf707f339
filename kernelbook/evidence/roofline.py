"""The roofline of a study: the device's measured ceilings, every step as a point.

A point's height is what the step achieved (FLOPs / op time at one size); its position along
the x-axis is its arithmetic intensity, FLOPs per byte of DRAM traffic. The DRAM bytes are the
ones Nsight Compute counted (``dram_bytes`` of the step's ``-ncu`` part) when they are recorded;
otherwise the fewest bytes the layer must move (input, weights and output once), which is an
upper bound on the intensity: such points are drawn hollow and the legend says so.

The roofs are the ceilings measured on the device (``evidence.ceilings``): copy bandwidth as the
slope, FP32 FMA rate and the tensor rates as roofs. A measured roof is one program's rate; the
floors (``evidence.floor``) stand on the datasheet's peaks where those are higher, and a point
above a measured roof but under the peak is noted as such.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from ..plots import PALETTE  # (importing plots also sets PNG figures without inline sizes)
from ..report import ANY_SIZE
from .ceilings import Ceilings, ceilings_for
from .datasheet import limits
from .floor import UNITS, device_of
from .ncu import load_ncu
from .tools import NOT_RECORDED
from .vendor import vendor as vendor_recording

#: Okabe–Ito: distinguishable with every common colour-vision deficiency.
ROOFS = (("fp32_gflops", "FP32 (CUDA cores)", "-"), ("tf32_tensor_gflops", "TF32 tensor", ":"),
         ("fp16_tensor_gflops", "FP16 tensor", "--"))
POINT_COLUMNS = ["number", "step", "layer", "size", "flops", "op_time_ms", "gflops", "intensity", "bytes",
                 "bytes_source", "provenance", "replayed", "run_id"]


def points_from(study, chapters: dict, ncu: dict, vendor_records: list[dict] | None = None,
                size: int | None = None, vendor_label: str = "", vendor_run_id: str | None = None) -> pd.DataFrame:
    """Roofline points from recorded data (pure: tests feed it fabricated records).

    ``chapters`` maps a step to its ChapterResult (or None); ``ncu`` maps a step to its
    ncu records (possibly empty). Intensity uses the ncu DRAM bytes at the size they were
    profiled at (intensity barely depends on the size), else the fewest bytes at ``size``.
    """
    size = size or (None if study.rows == "cases" else study.profile_size)
    at = ANY_SIZE if size is None else size
    rows = []
    sources = [(f"{ch.step.number:02d}", v, ch.records, ch.recording.short_label, not ch.session.measuring,
                ch.session.run.run_id) for v, ch in chapters.items() if ch is not None and ch.correct]
    for i, v in enumerate(dict.fromkeys(r["step"] for r in (vendor_records or [])), start=1):
        sources.append((f"V{i}", v, [r for r in vendor_records if r["step"] == v], vendor_label, True, vendor_run_id))
    for number, step, records, provenance, replayed, run_id in sources:
        for layer in study.cases:
            found = [r for r in records if r["metric"] == study.time_metric and r["layer"] == layer
                     and (at is ANY_SIZE or r["size"] == at)]
            if not found or found[0]["value"] is None:
                continue
            op, size_here = found[0]["value"], found[0]["size"]
            shape = study.problem(layer, size_here)
            dram = [r for r in ncu.get(step) or [] if r["metric"] == "dram_bytes" and r["layer"] == layer
                    and r["value"]]
            if dram:
                profiled = study.problem(layer, dram[0].get("size") or size_here)
                intensity, nbytes, source = profiled.flops / dram[0]["value"], dram[0]["value"], "dram (ncu)"
            else:
                intensity, nbytes, source = shape.flops / shape.min_bytes, shape.min_bytes, "fewest bytes"
            rows.append({"number": number, "step": step, "layer": layer, "size": size_here, "flops": shape.flops,
                         "op_time_ms": op, "gflops": shape.flops / (op / 1e3) / 1e9, "intensity": intensity,
                         "bytes": nbytes, "bytes_source": source, "provenance": provenance, "replayed": replayed,
                         "run_id": run_id})
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def points(study, size: int | None = None, prefer_run: str | None = None, found_vendor=None,
           steps=None) -> pd.DataFrame:
    """Every recorded step's point per case at ``size`` (chapters and ncu parts from ``prefer_run``
    when it holds them, else from their newest runs), plus the vendor library when recorded."""
    from ..stepdata import load_recorded

    steps = list(steps or study.steps.slugs())
    chapters = {v: load_recorded(study, v, prefer_run=prefer_run) for v in steps}
    ncu = {v: load_ncu(study, v, prefer_run=prefer_run).records for v in steps}
    found_vendor = found_vendor or vendor_recording(study, "replay", prefer_run=prefer_run)
    vendor_run = found_vendor.session.run.run_id if found_vendor.found else None
    return points_from(study, chapters, ncu, found_vendor.records, size, found_vendor.short_label, vendor_run)


#: Colour and line style of the split units' roofs, in ``split_roofs``' order: thinner, and no two
#: alike or like the black roofs and the grey bandwidth slope (a line's look is its colour and style).
SPLIT_STYLES = (("#555555", ":"), ("#555555", "--"), ("#999999", ":"))
#: One style per step: 8 colours x 4 marker shapes give 32 distinct (colour, marker) pairs, so no
#: two of a study's steps (18 at most today) or its library rows share a look.
STEP_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: Offsets (points) tried in turn for a point's number, so that no two numbers overlap.
_OFFSETS = tuple((dx, dy) for ring in range(6) for dx, dy in
                 ((6, 3 + 11 * ring), (6, -12 - 11 * ring), (-22, 3 + 11 * ring), (-22, -12 - 11 * ring))) + (
    (30, -4), (-46, -4))


#: Okabe-Ito's yellow is a fill colour: its numbers are written in a darker shade of it.
TEXT_COLOR = {"#F0E442": "#8F8500"}


def step_style(i: int) -> tuple[str, str]:
    """(colour, marker) of the i-th step: no two of the first 64 share both."""
    return PALETTE[i % len(PALETTE)], STEP_MARKERS[(i // len(PALETTE) + i) % len(STEP_MARKERS)]


def roof_at(values: dict, metric: str, intensity: float) -> float | None:
    """The height of one roof at ``intensity``: min(peak, bandwidth x intensity)."""
    peak, bandwidth = values.get(metric), values.get("copy_gbs")
    if not peak:
        return None
    return min(peak, bandwidth * intensity) if bandwidth else peak


#: The units that spend several tensor-core products per product, as the chart names their roofs.
SPLIT_NAMES = {"3xtf32": "3xTF32", "3xfp16": "3xFP16", "tf32+2xbf16": "TF32 + 2 BF16"}


ROOF_NAMES = {m: n for m, n, _ in ROOFS}


def is_split(unit: str) -> bool:
    """Whether ``unit`` (of ``floor.UNITS``) spends several tensor-core products per product."""
    rate, cost = UNITS.get(unit, (None, 1.0))
    return rate is not None and cost > 1 and unit not in ("fp32", "fp16x2")


def split_roof_name(unit: str) -> str:
    """``3xTF32 (TF32 tensor ÷ 3)``: a split unit's roof, the tensor roof it runs on over its cost."""
    rate, cost = UNITS[unit]
    return f"{SPLIT_NAMES.get(unit, unit)} ({ROOF_NAMES[rate]} ÷ {cost:g})"


def split_roofs(values: dict, maths: dict | None) -> list[tuple[str, float]]:
    """(name, GFLOP/s) of the roof of each split unit among ``maths`` (``above_roofs``' argument):
    the measured tensor rate over the products each product costs, the roof such a step is judged
    against, drawn beside the tensor roofs it divides."""
    units = sorted({str(m).partition("*")[0] for m in (maths or {}).values()})
    return [(split_roof_name(unit), values[UNITS[unit][0]] / UNITS[unit][1])
            for unit in units if is_split(unit) and values.get(UNITS[unit][0])]


def above_roofs(frame: pd.DataFrame, ceilings, maths: dict | None = None) -> list[str]:
    """Sentences for the points that sit above a roof that should bound them, and why they can.

    ``maths`` maps a step, or (step, case), to the arithmetic it runs on (``StepImpl.math_for``). Above the flat roof of
    its unit: an FP32 step does fewer multiplications than the FLOP count its rate is computed from
    (Winograd); a tensor-core step above the FP32 roof is where it should be and gets no note.
    A tensor-core step above its measured roof but under the datasheet's peak beat cuBLAS's rate,
    which is no limit (the floor stands on the peak). Above the sloped roof: its DRAM traffic ran
    faster than the measured copy bandwidth, a ``cudaMemcpy`` rate and not the DRAM's peak. A library row (no ``maths``) is judged against the
    highest roof only.
    """
    values = ceilings.values if isinstance(ceilings, Ceilings) else dict(ceilings or {})
    sheet_limits = limits(values, device_of(ceilings))   # the datasheet's peaks, where the book holds them
    maths = maths or {}
    bandwidth = values.get("copy_gbs")
    notes = []
    for _, p in frame.iterrows():
        x, y = p["intensity"], p["gflops"]
        if not (x and y and math.isfinite(x)):
            continue
        who = f"{p['number']} ({p['step']}, {p['layer']})"
        kind = maths.get((p["step"], p["layer"]), maths.get(p["step"]))
        unit = (kind or "").partition("*")[0]
        metric, cost = UNITS.get(unit, (None, 1.0))   # the roof of the step's unit (floor.UNITS)
        if metric is None:  # a library row, or a step whose unit is not known here
            peaks = [values[m] for m, _, _ in ROOFS if values.get(m)]
            if peaks and y > max(peaks):
                notes.append(f"{who} sits above every flat roof ({y:,.0f} against {max(peaks):,.0f} GFLOP/s): "
                             "it does fewer operations than the direct FLOP count its rate is computed from.")
            continue
        split = is_split(unit)
        peak = values.get(metric) and values[metric] / (cost if split else 1.0)
        limit = sheet_limits.get(metric) and sheet_limits[metric] / (cost if split else 1.0)
        name = split_roof_name(unit) if split else ROOF_NAMES[metric]
        if peak and y > peak and unit not in ("fp32", "fp16x2") and limit and y <= limit:
            notes.append(f"{who} sits above the measured {name} roof ({y:,.0f} against {peak:,.0f} GFLOP/s): "
                         "that roof is what one program (cuBLAS on a large square matrix product) reached, a rate a "
                         f"kernel can beat; the datasheet's peak{' over the same products' if split else ''}, "
                         f"{limit:,.0f} GFLOP/s, is the limit, and its floor stands on it.")
        elif peak and y > peak:
            why = ("it does fewer multiplications than the direct convolution's FLOP count, from which every "
                   "point's rate is computed (a Winograd transform trades multiplications for additions), so "
                   "its rate is an effective one, not arithmetic faster than the device's"
                   if unit in ("fp32", "fp16x2") else
                   "its rate counts the problem's FLOPs, not the tensor-core operations it issued")
            notes.append(f"{who} sits above the {name} roof ({y:,.0f} against {peak:,.0f} GFLOP/s): {why}.")
        elif bandwidth and y > bandwidth * x and p["bytes_source"] == "dram (ncu)":
            notes.append(f"{who} sits above the bandwidth slope ({y:,.0f} against {bandwidth * x:,.0f} GFLOP/s at "
                         "its intensity): its DRAM traffic, as Nsight Compute counted it, moved faster than the "
                         "measured copy bandwidth, which is a cudaMemcpy rate and not the DRAM's peak.")
    return notes


def _label_points(ax, points: list) -> None:
    """Write each point's number at the first offset whose box overlaps no marker and no number
    already written (display pixels, so call it once the figure's layout is final)."""
    scale = ax.figure.dpi / 72.0
    where = [ax.transData.transform((x, y)) for x, y, _, _ in points]
    placed = [(px - 5 * scale, py - 5 * scale, px + 5 * scale, py + 5 * scale) for px, py in where]  # the markers
    for (x, y, text, color), (px, py) in zip(points, where):
        width, height = 6.2 * scale * len(text), 9 * scale
        for dx, dy in _OFFSETS:
            box = (px + dx * scale, py + dy * scale, px + dx * scale + width, py + dy * scale + height)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append(box)
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=10,
                    color=TEXT_COLOR.get(color, color), fontweight="bold")


def roofline(frame: pd.DataFrame, ceilings, title: str | None = None, measured_now: bool | None = None,
             maths: dict | None = None):
    """Log-log roofline, one panel per case: roofs from ``ceilings`` (a ``Ceilings`` or dict), points
    from ``frame`` (``points``/``points_from``). Each step has its own colour *and* marker (no two
    share both) and is labelled by its number, placed where it overlaps no other number; the key
    below the panels names every number. Points above a roof that should bound them are listed
    under the figure with the reason. Works with either side missing and says so."""
    values = ceilings.values if isinstance(ceilings, Ceilings) else dict(ceilings or {})
    have = frame[frame["intensity"].notna() & (frame["gflops"] > 0)] if not frame.empty else frame
    cases = list(dict.fromkeys(have["layer"])) if not have.empty else [None]
    steps = list(dict.fromkeys(have["step"])) if not have.empty else []
    notes = above_roofs(have, ceilings, maths) if not have.empty else []
    splits = split_roofs(values, maths)
    key_rows = (len(steps) + len(ROOFS) + len(splits) + 2 + 1) // 2
    key_height = 0.22 * key_rows + 0.8  # inches under the panels for the key and the provenance line
    height = 5.0 * len(cases) + key_height
    fig, axes = plt.subplots(len(cases), 1, figsize=(7.5, height), dpi=110, squeeze=False)
    axes = [row[0] for row in axes]
    lo = min([0.1] + ([float(have["intensity"].min()) / 3] if not have.empty else []))
    bandwidth = values.get("copy_gbs")
    ridges = [values[m] / bandwidth for m, _, _ in ROOFS if values.get(m) and bandwidth]
    hi = max([1000.0] + [r * 10 for r in ridges] + ([float(have["intensity"].max()) * 3] if not have.empty else []))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    heights = list(have["gflops"]) if not have.empty else []
    heights += [v for m, _, _ in ROOFS if (v := values.get(m))] + ([bandwidth * lo] if bandwidth else [])
    heights += [v for _, v in splits]
    styles = {v: step_style(i) for i, v in enumerate(steps)}
    size = int(have["size"].iloc[0]) if not have.empty else 0
    labels_of: dict = {}
    for ax, case in zip(axes, cases):
        if bandwidth:
            ax.plot(xs, [bandwidth * x for x in xs], color="0.6", lw=0.8, ls="-.",
                    label=f"copy bandwidth {bandwidth:,.0f} GB/s (slope)")
        for metric, name, style in ROOFS:
            peak = values.get(metric)
            if not peak:
                continue
            ys = [min(peak, bandwidth * x) if bandwidth else peak for x in xs]
            ridge = f", ridge {peak / bandwidth:.0f} FLOP/B" if bandwidth else ""
            ax.plot(xs, ys, color="black", ls=style, lw=1.4, label=f"{name}: {peak:,.0f} GFLOP/s{ridge}")
        for (name, peak), (color, style) in zip(splits, SPLIT_STYLES):
            ys = [min(peak, bandwidth * x) if bandwidth else peak for x in xs]
            ax.plot(xs, ys, color=color, ls=style, lw=1.0, label=f"{name}: {peak:,.0f} GFLOP/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(*(min(heights) / 3, max(heights) * 3) if heights else (1, 1e6))
        mine = have[have["layer"] == case] if case is not None else have
        for step in steps:
            color, marker = styles[step]
            for _, p in mine[mine["step"] == step].iterrows():
                hollow = p["bytes_source"] != "dram (ncu)"
                ax.scatter([p["intensity"]], [p["gflops"]], s=70, marker=marker,
                           facecolors="none" if hollow else color, edgecolors=color, linewidths=1.6, zorder=3)
        labels_of[id(ax)] = [(p["intensity"], p["gflops"], str(p["number"]), styles[p["step"]][0])
                             for _, p in mine.sort_values("gflops", ascending=False).iterrows()]
        ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
        ax.set_ylabel("achieved GFLOP/s (FLOPs / op time)")
        where = f"case {case}" if case is not None else ""
        ax.set_title(", ".join(t for t in (title or f"Roofline of the steps at size {size}", where) if t),
                     fontsize=11)
        ax.grid(True, which="both", alpha=0.25)
    ax = axes[0]
    for step in steps:
        color, marker = styles[step]
        ax.scatter([], [], marker=marker, color=color,
                   label=f"{have[have['step'] == step]['number'].iloc[0]} {step}")
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="0.3",
               label="hollow: fewest bytes (no ncu DRAM bytes)")
    if not values:
        ax.text(0.5, 0.5, "device ceilings not recorded yet", transform=ax.transAxes, ha="center", color="tab:red")
    if have.empty:
        ax.text(0.5, 0.42, "no step recorded yet", transform=ax.transAxes, ha="center", color="tab:red")
    # The key below the last panel, two columns: it never covers a point and it stays legible when
    # the figure is shrunk to a phone's width.
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower left", ncol=2, bbox_to_anchor=(0.01, 0.3 / height),
               frameon=False)
    ceiling_note = (ceilings.short_label if isinstance(ceilings, Ceilings) else
                    ("given" if values else NOT_RECORDED))
    session = ceilings.session if isinstance(ceilings, Ceilings) else None
    if measured_now is None:  # every point recorded by this run, whose ceilings are measured now
        this_run = session.run.run_id if session is not None and session.measuring else None
        measured_now = not have.empty and this_run is not None and set(have["run_id"]) == {this_run}
    runs = sorted({r for r in have["run_id"] if isinstance(r, str)}) if not have.empty else []
    points_note = ("points measured in this run" if measured_now else
                   f"points REPLAYED from run(s) {', '.join(runs)}" if not have.empty else "no points")
    import textwrap

    fig.text(0.01, 0.005, textwrap.fill(f"ceilings: {ceiling_note}; {points_note}", 130), fontsize=8,
             color="0.35" if measured_now else "tab:red")
    fig.roof_notes = notes  # the page prints them under the figure (``above_roof_note``)
    fig.tight_layout(rect=(0, key_height / height, 1, 1))
    for ax in axes:  # the numbers last, in the final layout, so that their boxes are where they are drawn
        _label_points(ax, labels_of.get(id(ax), []))
    return fig


def above_roof_note(fig):
    """The sentences for the points above a roof, as Markdown (nothing when there are none)."""
    from IPython.display import Markdown

    notes = getattr(fig, "roof_notes", [])
    return Markdown("\n".join(f"- **Above a roof:** {n}" for n in notes)) if notes else Markdown(
        "No point sits above the roof that bounds its arithmetic.")


def for_page(study, size: int | None = None, prefer_run: str | None = None, found_ceilings=None,
             found_vendor=None, title: str | None = None):
    """A study's roofline: recorded points and the ceilings (given, or recorded)."""
    found_ceilings = found_ceilings or ceilings_for(prefer_run)
    frame = points(study, size, prefer_run, found_vendor)
    return roofline(frame, found_ceilings, title=title)


def point_table(frame: pd.DataFrame, size_header: str = "Size", case_header: str = "Layer"):
    """The numbers behind the chart."""
    from ..report import format_ms, styled

    if frame.empty:
        return styled(pd.DataFrame({"": [f"no step recorded yet ({NOT_RECORDED})"]}), "Roofline points")
    out = pd.DataFrame({
        "#": frame["number"], "Step": frame["step"], case_header: frame["layer"], size_header: frame["size"],
        "Op time": frame["op_time_ms"].map(format_ms),
        "GFLOP/s": frame["gflops"].map(lambda v: f"{v:,.0f}"),
        "FLOP/byte": frame["intensity"].map(lambda v: f"{v:.2f}" if v and math.isfinite(v) else "–"),
        "Bytes from": frame["bytes_source"], "Recorded": frame["provenance"],
    })
    return styled(out, "Roofline points: achieved GFLOP/s from op time, intensity from ncu DRAM bytes "
                       "(or the fewest bytes where ncu was not recorded).")
