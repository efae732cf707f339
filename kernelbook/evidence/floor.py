"""The floor: the least time a problem can take on this device, from the measured ceilings.

floor = max(fewest bytes / copy bandwidth, FLOPs / compute rate), where the rate is the FP32 FMA
rate unless a step's precision puts it on tensor cores. "% of floor" = floor / measured time;
"vs <vendor>" = the vendor library's time / the step's (above 1: the step is faster).
"""

from __future__ import annotations

from typing import Iterable

from ..report import ANY_BATCH, format_ms, record_value, styled
from .ceilings import Ceilings, ceilings_for
from .tools import NOT_RECORDED
from .vendor import vendor as vendor_recording

RATE_OF = {"fp32": "fp32_gflops", "tf32": "tf32_tensor_gflops", "fp16": "fp16_tensor_gflops"}


def floor_ms(problem, ceilings, rate: str = "fp32_gflops") -> float | None:
    """max(bytes / bandwidth, FLOPs / rate) in ms; ``ceilings`` is a ``Ceilings`` or a dict; None
    when a ceiling is missing."""
    values = ceilings.values if isinstance(ceilings, Ceilings) else ceilings
    bandwidth, speed = values.get("copy_gbs"), values.get(rate)
    if not bandwidth or not speed:
        return None
    return max(problem.min_bytes / (bandwidth * 1e9), problem.flops / (speed * 1e9)) * 1e3


def floor_frame(study, chapters: dict, ceilings, vendor_records: list[dict], size: int | None):
    """Every step's time at ``size`` per case: rate, floor, % of floor, ratio to each vendor variant.

    ``chapters`` maps a step to its Chapter (or None: shown as not recorded). ``size`` None: each
    case at its own size (studies whose cases fix their size, like the MLP's test cases).
    """
    at = ANY_BATCH if size is None else size
    import pandas as pd

    metric = study.time_metric
    vendors = list(dict.fromkeys(r["variant"] for r in vendor_records))
    entries = [(v, ch.records if ch is not None and ch.correct else None,
                ch.recording.short_label if ch is not None else NOT_RECORDED) for v, ch in chapters.items()]
    for v in vendors:
        entries.append((v, [r for r in vendor_records if r["variant"] == v], "vendor library"))
    rows = []
    for case in study.cases:
        problem = study.problem(case, None if size is None else size)
        floor = floor_ms(problem, ceilings)
        for variant, records, where in entries:
            op = record_value(records, metric, case, at) if records is not None else None
            row = {study.case_header: case, "Step": variant,
                   "Time": format_ms(op) if op is not None else (NOT_RECORDED if records is None else "–"),
                   study.rate_unit: f"{problem.flops / (op / 1e3) / 1e9:,.0f}" if op else "–",
                   "FP32 floor": format_ms(floor) if floor else "–",
                   "% of floor": f"{floor / op * 100:.1f} %" if op and floor else "–"}
            for v in vendors:
                theirs = record_value([r for r in vendor_records if r["variant"] == v], metric, case, at)
                row[f"vs {v}"] = f"{theirs / op:.2f}×" if op and theirs else "–"
            row["Recorded"] = where
            rows.append(row)
    return pd.DataFrame(rows)


def floor_table(study, size: int | None, steps: Iterable[str] | None = None, found_ceilings: Ceilings | None = None,
                found_vendor=None, prefer_run: str | None = None):
    from ..chapter import load_recorded

    steps = list(steps or study.steps.slugs())
    chapters = {s: load_recorded(study, s, prefer_run=prefer_run) for s in steps}
    found_ceilings = found_ceilings or ceilings_for(prefer_run)
    found_vendor = found_vendor or vendor_recording(study, "replay", prefer_run=prefer_run)
    frame = floor_frame(study, chapters, found_ceilings, found_vendor.records, size)
    where = f"at {study.size_header.lower()} {size}" if size is not None else "per case"
    caption = (f"Time {where} against the FP32 floor (the larger of fewest bytes / copy "
               f"bandwidth and FLOPs / FP32 rate; % of floor = floor / time) and the vendor library (its time / "
               f"the step's; above 1 is faster). [ceilings: {found_ceilings.short_label}] "
               f"[vendor: {found_vendor.short_label}] Steps: each from its newest recording (column Recorded).")
    return styled(frame, caption)
