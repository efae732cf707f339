"""The roofline of the LeNet study: the device's measured ceilings, every step as a point.

A point's height is what the step achieved (FLOPs / op time at one batch); its position along
the x-axis is its arithmetic intensity, FLOPs per byte of DRAM traffic. The DRAM bytes are the
ones Nsight Compute counted (``dram_bytes`` of the step's ``-ncu`` part) when they are recorded;
otherwise the fewest bytes the layer must move (input, weights and output once), which is an
upper bound on the intensity: such points are drawn hollow and the legend says so.

The roofs are the ceilings measured on the device (``kernelbook.profiling.ceilings``), never
datasheet numbers: copy bandwidth as the slope, FP32 FMA rate and the tensor rates as roofs.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from . import profiling
from .report import record_value

LAYER_MARKERS = {"C1": "o", "C3": "s"}
ROOFS = (("fp32_gflops", "FP32 (CUDA cores)", "-"), ("tf32_tensor_gflops", "TF32 tensor", ":"),
         ("fp16_tensor_gflops", "FP16 tensor", "--"))
POINT_COLUMNS = ["variant", "layer", "batch", "flops", "op_time_ms", "gflops", "intensity", "bytes",
                 "bytes_source", "provenance", "replayed", "run_id"]


def points_from(chapters: dict, ncu: dict, cudnn_records: list[dict] | None = None,
                batch: int = profiling.NCU_BATCH, cudnn_label: str = "", cudnn_run_id: str | None = None) -> pd.DataFrame:
    """Roofline points from recorded data (pure: tests feed it fabricated records).

    ``chapters`` maps a variant to its ChapterResult (or None); ``ncu`` maps a variant to its
    ncu records (possibly empty). Intensity uses the ncu DRAM bytes at the batch they were
    profiled at (intensity barely depends on the batch), else the fewest bytes at ``batch``.
    """
    from .lenet import layer_shape

    rows = []
    sources = [(v, ch.records, ch.session.short_label, not ch.session.measuring, ch.session.run.run_id)
               for v, ch in chapters.items() if ch is not None and ch.correct]
    for v in ("cudnn", "cudnn-tf32"):
        recs = [r for r in (cudnn_records or []) if r["variant"] == v]
        if recs:
            sources.append((v, recs, cudnn_label, True, cudnn_run_id))
    for variant, records, provenance, replayed, run_id in sources:
        for layer in profiling.LAYERS:
            op = record_value(records, "op_time_ms", layer, batch)
            if op is None:
                continue
            shape = layer_shape(layer, batch)
            dram = [r for r in ncu.get(variant) or [] if r["metric"] == "dram_bytes" and r["layer"] == layer
                    and r["value"]]
            if dram:
                profiled = layer_shape(layer, dram[0].get("batch") or batch)
                intensity, nbytes, source = profiled.flops / dram[0]["value"], dram[0]["value"], "dram (ncu)"
            else:
                intensity, nbytes, source = shape.flops / shape.min_bytes, shape.min_bytes, "fewest bytes"
            rows.append({"variant": variant, "layer": layer, "batch": batch, "flops": shape.flops,
                         "op_time_ms": op, "gflops": shape.flops / (op / 1e3) / 1e9, "intensity": intensity,
                         "bytes": nbytes, "bytes_source": source, "provenance": provenance, "replayed": replayed,
                         "run_id": run_id})
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def points(variants=None, batch: int = profiling.NCU_BATCH, prefer_run: str | None = None,
           found_cudnn=None) -> pd.DataFrame:
    """Every recorded step's point per layer at ``batch`` (chapters and ncu parts from
    ``prefer_run`` when it holds them, else from their newest runs), plus cuDNN when recorded."""
    from .lenet import variant_names
    from .lenet.study import load_recorded

    variants = list(variants or variant_names())
    chapters = {v: load_recorded(v, prefer_run=prefer_run) for v in variants}
    ncu = {v: profiling.load_ncu(v, prefer_run=prefer_run)[1] for v in variants}
    found_cudnn = found_cudnn or profiling.cudnn("replay", replay_run=prefer_run)
    cudnn_run = found_cudnn.session.run.run_id if found_cudnn.session else None
    return points_from(chapters, ncu, found_cudnn.records, batch, found_cudnn.short_label, cudnn_run)


def roofline(frame: pd.DataFrame, ceilings, title: str | None = None, measured_now: bool | None = None):
    """Log-log roofline: roofs from ``ceilings`` (a ``profiling.Ceilings`` or dict), points from
    ``frame`` (``points``/``points_from``). Works with either side missing and says so."""
    values = ceilings.values if isinstance(ceilings, profiling.Ceilings) else dict(ceilings or {})
    fig, ax = plt.subplots(figsize=(11, 6))
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
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    variants = list(dict.fromkeys(have["variant"])) if not have.empty else []
    for i, variant in enumerate(variants):
        color = colors[i % len(colors)]
        for _, p in have[have["variant"] == variant].iterrows():
            hollow = p["bytes_source"] != "dram (ncu)"
            ax.scatter([p["intensity"]], [p["gflops"]], s=55, marker=LAYER_MARKERS.get(p["layer"], "D"),
                       facecolors="none" if hollow else color, edgecolors=color, linewidths=1.5, zorder=3)
            ax.annotate(f"{variant} {p['layer']}", (p["intensity"], p["gflops"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=7, color=color)
        ax.scatter([], [], marker="o", color=color, label=variant)
    for layer, marker in LAYER_MARKERS.items():
        ax.scatter([], [], marker=marker, facecolors="0.3", edgecolors="0.3", label=f"layer {layer}")
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
    batch = int(have["batch"].iloc[0]) if not have.empty else profiling.NCU_BATCH
    ax.set_title(title or f"Roofline of the LeNet steps at batch {batch}")
    ax.grid(True, which="both", alpha=0.25)
    if not values:
        ax.text(0.5, 0.5, "device ceilings not recorded yet", transform=ax.transAxes, ha="center", color="tab:red")
    if have.empty:
        ax.text(0.5, 0.42, "no step recorded yet", transform=ax.transAxes, ha="center", color="tab:red")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ceiling_note = (ceilings.short_label if isinstance(ceilings, profiling.Ceilings) else
                    ("given" if values else profiling.NOT_RECORDED))
    session = ceilings.session if isinstance(ceilings, profiling.Ceilings) else None
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


def for_page(variants=None, batch: int = profiling.NCU_BATCH, prefer_run: str | None = None,
             found_ceilings=None, found_cudnn=None):
    """The profiles page's roofline: recorded points and the ceilings (given, or recorded)."""
    found_ceilings = found_ceilings or profiling.ceilings_for(prefer_run)
    frame = points(variants, batch, prefer_run, found_cudnn)
    return roofline(frame, found_ceilings)


def point_table(frame: pd.DataFrame):
    """The numbers behind the chart."""
    from .report import format_ms, styled

    if frame.empty:
        return styled(pd.DataFrame({"": [f"no step recorded yet ({profiling.NOT_RECORDED})"]}), "Roofline points")
    out = pd.DataFrame({
        "Step": frame["variant"], "Layer": frame["layer"], "Batch": frame["batch"],
        "Op time": frame["op_time_ms"].map(format_ms),
        "GFLOP/s": frame["gflops"].map(lambda v: f"{v:,.0f}"),
        "FLOP/byte": frame["intensity"].map(lambda v: f"{v:.2f}" if v and math.isfinite(v) else "–"),
        "Bytes from": frame["bytes_source"], "Recorded": frame["provenance"],
    })
    return styled(out, "Roofline points: achieved GFLOP/s from op time, intensity from ncu DRAM bytes "
                       "(or the fewest bytes where ncu was not recorded).")
