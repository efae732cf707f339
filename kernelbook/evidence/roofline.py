"""The roofline of a study: the device's measured ceilings, every step as a point.

A point's height is what the step achieved (FLOPs / op time at one batch); its position along
the x-axis is its arithmetic intensity, FLOPs per byte of DRAM traffic. The DRAM bytes are the
ones Nsight Compute counted (``dram_bytes`` of the step's ``-ncu`` part) when they are recorded;
otherwise the fewest bytes the layer must move (input, weights and output once), which is an
upper bound on the intensity: such points are drawn hollow and the legend says so.

The roofs are the ceilings measured on the device (``evidence.ceilings``), never
datasheet numbers: copy bandwidth as the slope, FP32 FMA rate and the tensor rates as roofs.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from ..report import ANY_BATCH
from .ceilings import Ceilings, ceilings_for
from .ncu import load_ncu
from .tools import NOT_RECORDED
from .vendor import vendor as vendor_recording

MARKERS = ("o", "s", "^", "D", "v", "P")
#: Okabe–Ito: distinguishable with every common colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
ROOFS = (("fp32_gflops", "FP32 (CUDA cores)", "-"), ("tf32_tensor_gflops", "TF32 tensor", ":"),
         ("fp16_tensor_gflops", "FP16 tensor", "--"))
POINT_COLUMNS = ["number", "variant", "layer", "batch", "flops", "op_time_ms", "gflops", "intensity", "bytes",
                 "bytes_source", "provenance", "replayed", "run_id"]


def points_from(study, chapters: dict, ncu: dict, vendor_records: list[dict] | None = None,
                size: int | None = None, vendor_label: str = "", vendor_run_id: str | None = None) -> pd.DataFrame:
    """Roofline points from recorded data (pure: tests feed it fabricated records).

    ``chapters`` maps a variant to its ChapterResult (or None); ``ncu`` maps a variant to its
    ncu records (possibly empty). Intensity uses the ncu DRAM bytes at the batch they were
    profiled at (intensity barely depends on the batch), else the fewest bytes at ``batch``.
    """
    batch = size or (None if study.rows == "cases" else study.profile_size)
    at = ANY_BATCH if batch is None else batch
    rows = []
    sources = [(f"{ch.step.number:02d}", v, ch.records, ch.recording.short_label, not ch.session.measuring,
                ch.session.run.run_id) for v, ch in chapters.items() if ch is not None and ch.correct]
    for i, v in enumerate(dict.fromkeys(r["variant"] for r in (vendor_records or [])), start=1):
        sources.append((f"V{i}", v, [r for r in vendor_records if r["variant"] == v], vendor_label, True, vendor_run_id))
    for number, variant, records, provenance, replayed, run_id in sources:
        for layer in study.cases:
            found = [r for r in records if r["metric"] == study.time_metric and r["layer"] == layer
                     and (at is ANY_BATCH or r["batch"] == at)]
            if not found or found[0]["value"] is None:
                continue
            op, size_here = found[0]["value"], found[0]["batch"]
            shape = study.problem(layer, size_here)
            dram = [r for r in ncu.get(variant) or [] if r["metric"] == "dram_bytes" and r["layer"] == layer
                    and r["value"]]
            if dram:
                profiled = study.problem(layer, dram[0].get("batch") or size_here)
                intensity, nbytes, source = profiled.flops / dram[0]["value"], dram[0]["value"], "dram (ncu)"
            else:
                intensity, nbytes, source = shape.flops / shape.min_bytes, shape.min_bytes, "fewest bytes"
            rows.append({"number": number, "variant": variant, "layer": layer, "batch": size_here, "flops": shape.flops,
                         "op_time_ms": op, "gflops": shape.flops / (op / 1e3) / 1e9, "intensity": intensity,
                         "bytes": nbytes, "bytes_source": source, "provenance": provenance, "replayed": replayed,
                         "run_id": run_id})
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def points(study, size: int | None = None, prefer_run: str | None = None, found_vendor=None,
           steps=None) -> pd.DataFrame:
    """Every recorded step's point per case at ``size`` (chapters and ncu parts from ``prefer_run``
    when it holds them, else from their newest runs), plus the vendor library when recorded."""
    from ..chapter import load_recorded

    steps = list(steps or study.steps.slugs())
    chapters = {v: load_recorded(study, v, prefer_run=prefer_run) for v in steps}
    ncu = {v: load_ncu(study, v, prefer_run=prefer_run).records for v in steps}
    found_vendor = found_vendor or vendor_recording(study, "replay", prefer_run=prefer_run)
    vendor_run = found_vendor.session.run.run_id if found_vendor.found else None
    return points_from(study, chapters, ncu, found_vendor.records, size, found_vendor.short_label, vendor_run)


def roofline(frame: pd.DataFrame, ceilings, title: str | None = None, measured_now: bool | None = None):
    """Log-log roofline: roofs from ``ceilings`` (a ``Ceilings`` or dict), points from ``frame``
    (``points``/``points_from``). Each step has its own colour and marker and is labelled by its
    number only (the table beside the chart names it), so labels never pile up over each other.
    Works with either side missing and says so."""
    values = ceilings.values if isinstance(ceilings, Ceilings) else dict(ceilings or {})
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    have = frame[frame["intensity"].notna() & (frame["gflops"] > 0)] if not frame.empty else frame
    lo = min([0.1] + ([float(have["intensity"].min()) / 3] if not have.empty else []))
    bandwidth = values.get("copy_gbs")
    ridges = [values[m] / bandwidth for m, _, _ in ROOFS if values.get(m) and bandwidth]
    hi = max([1000.0] + [r * 10 for r in ridges] + ([float(have["intensity"].max()) * 3] if not have.empty else []))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
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
    variants = list(dict.fromkeys(have["variant"])) if not have.empty else []
    cases = list(dict.fromkeys(have["layer"])) if not have.empty else []
    for i, variant in enumerate(variants):
        color = PALETTE[i % len(PALETTE)]
        for _, p in have[have["variant"] == variant].iterrows():
            hollow = p["bytes_source"] != "dram (ncu)"
            marker = MARKERS[cases.index(p["layer"]) % len(MARKERS)]
            ax.scatter([p["intensity"]], [p["gflops"]], s=60, marker=marker,
                       facecolors="none" if hollow else color, edgecolors=color, linewidths=1.6, zorder=3)
            ax.annotate(str(p["number"]), (p["intensity"], p["gflops"]), textcoords="offset points",
                        xytext=(4, 3 + 7 * (cases.index(p["layer"]) % 2)), fontsize=8, color=color)
        ax.scatter([], [], marker="o", color=color, label=f"{have[have['variant'] == variant]['number'].iloc[0]} {variant}")
    for j, case in enumerate(cases):
        ax.scatter([], [], marker=MARKERS[j % len(MARKERS)], facecolors="0.3", edgecolors="0.3", label=f"case {case}")
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="0.3",
               label="hollow: intensity from fewest bytes (no ncu DRAM bytes recorded)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    heights = list(have["gflops"]) if not have.empty else []
    heights += [v for m, _, _ in ROOFS if (v := values.get(m))] + ([bandwidth * lo] if bandwidth else [])
    if heights:
        ax.set_ylim(min(heights) / 3, max(heights) * 3)
    else:
        ax.set_ylim(1, 1e6)  # nothing to draw: a sensible empty frame
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved GFLOP/s (FLOPs / op time)")
    batch = int(have["batch"].iloc[0]) if not have.empty else 0
    ax.set_title(title or f"Roofline of the steps at size {batch}")
    ax.grid(True, which="both", alpha=0.25)
    if not values:
        ax.text(0.5, 0.5, "device ceilings not recorded yet", transform=ax.transAxes, ha="center", color="tab:red")
    if have.empty:
        ax.text(0.5, 0.42, "no step recorded yet", transform=ax.transAxes, ha="center", color="tab:red")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ceiling_note = (ceilings.short_label if isinstance(ceilings, Ceilings) else
                    ("given" if values else NOT_RECORDED))
    session = ceilings.session if isinstance(ceilings, Ceilings) else None
    if measured_now is None:  # every point recorded by this run, whose ceilings are measured now
        this_run = session.run.run_id if session is not None and session.measuring else None
        measured_now = not have.empty and this_run is not None and set(have["run_id"]) == {this_run}
    runs = sorted({r for r in have["run_id"] if isinstance(r, str)}) if not have.empty else []
    points_note = ("points measured in this run" if measured_now else
                   f"points REPLAYED from run(s) {', '.join(runs)}" if not have.empty else "no points")
    fig.text(0.01, 0.005, f"ceilings: {ceiling_note}; {points_note}", fontsize=7,
             color="0.35" if measured_now else "tab:red")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def for_page(study, size: int | None = None, prefer_run: str | None = None, found_ceilings=None,
             found_vendor=None, title: str | None = None):
    """A study's roofline: recorded points and the ceilings (given, or recorded)."""
    found_ceilings = found_ceilings or ceilings_for(prefer_run)
    frame = points(study, size, prefer_run, found_vendor)
    return roofline(frame, found_ceilings, title=title)


def point_table(frame: pd.DataFrame):
    """The numbers behind the chart."""
    from ..report import format_ms, styled

    if frame.empty:
        return styled(pd.DataFrame({"": [f"no step recorded yet ({NOT_RECORDED})"]}), "Roofline points")
    out = pd.DataFrame({
        "#": frame["number"], "Step": frame["variant"], "Layer": frame["layer"], "Batch": frame["batch"],
        "Op time": frame["op_time_ms"].map(format_ms),
        "GFLOP/s": frame["gflops"].map(lambda v: f"{v:,.0f}"),
        "FLOP/byte": frame["intensity"].map(lambda v: f"{v:.2f}" if v and math.isfinite(v) else "–"),
        "Bytes from": frame["bytes_source"], "Recorded": frame["provenance"],
    })
    return styled(out, "Roofline points: achieved GFLOP/s from op time, intensity from ncu DRAM bytes "
                       "(or the fewest bytes where ncu was not recorded).")
