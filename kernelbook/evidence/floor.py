"""The floor: the least time a problem can take on this device, a limit no step passes.

floor = max(fewest bytes / bandwidth, FLOPs / compute rate), where the rate is the FP32 FMA rate
unless a step's precision puts it on tensor cores, and each rate is the higher of the device's
datasheet peak (``evidence.datasheet``) and the ceiling measured on it (``evidence.ceilings``):
a measured ceiling is one program's achieved rate (a library GEMM, a copy), which a kernel may
beat, so on its own it is no floor. "% of floor" = floor / measured time;
"vs <vendor>" = the vendor library's time / the step's (above 1: the step is faster).
"""

from __future__ import annotations

from typing import Iterable

from ..report import ANY_SIZE, format_ms, record_value, styled
from .ceilings import Ceilings, ceilings_for
from .datasheet import limits
from .tools import NOT_RECORDED
from .vendor import vendor as vendor_recording

#: The measured ceiling each arithmetic unit runs at, and how many products it spends per product.
UNITS = {"fp32": ("fp32_gflops", 1.0), "fp16x2": ("fp32_gflops", 0.5), "tf32": ("tf32_tensor_gflops", 1.0),
         "fp16": ("fp16_tensor_gflops", 1.0), "3xtf32": ("tf32_tensor_gflops", 3.0),
         "3xfp16": ("fp16_tensor_gflops", 3.0),
         # one TF32 product plus two BF16 products (BF16 runs at twice TF32's rate): 2 TF32 products
         "tf32+2xbf16": ("tf32_tensor_gflops", 2.0)}


def unit(math: str) -> tuple[str, float]:
    """(ceiling, products per product) of ``math``: a name of ``UNITS``, or ``NAME*F`` for a step
    that spends F of NAME's products per direct product (Winograd F(2x2, KxK) in FP32:
    ``fp32*0.36`` at K = 5, (K+1)^2 multiplies per 4 K^2)."""
    name, _, factor = math.partition("*")
    rate, cost = UNITS[name]
    return rate, cost * (float(factor) if factor else 1.0)


def device_of(ceilings) -> dict | None:
    """The device that measured ``ceilings`` (a ``Ceilings`` read from a run), None for a dict."""
    session = getattr(ceilings, "session", None)
    return session.run.manifest.get("device") if session is not None else None


def floor_ms(problem, ceilings, math: str = "fp32", device=None) -> float | None:
    """max(bytes / bandwidth, FLOPs / rate of the unit ``math``) in ms; ``ceilings`` is a
    ``Ceilings`` or a dict; None when a ceiling is missing. ``fp16x2`` (``__half2`` FMAs on CUDA
    cores) does two products per FP32 slot; ``3xtf32``/``3xfp16`` spend three tensor-core
    products per product, ``tf32+2xbf16`` one TF32 and two BF16 products (two TF32 products' time).

    Each rate is a limit (``datasheet.limits``): the higher of the device's datasheet peak and the
    measured ceiling (bandwidth: the copy, the streaming read), so no step can beat its floor; the
    device is the one that measured ``ceilings`` (or ``device``, a name or manifest dict)."""
    values = ceilings.values if isinstance(ceilings, Ceilings) else ceilings
    values = limits(values, device if device is not None else device_of(ceilings))
    rate_name, cost = unit(math)
    bandwidth, speed = values.get("copy_gbs"), values.get(rate_name)
    if not bandwidth or not speed:
        return None
    return max(problem.min_bytes / (bandwidth * 1e9), problem.flops * cost / (speed * 1e9)) * 1e3


def vendor_math(name: str) -> str:
    """The unit a vendor-library row runs on, from its name (cudnn-tf32, pytorch-fp16, ...)."""
    return "tf32" if "tf32" in name else "fp16" if "fp16" in name else "fp32"


def step_math(chapter, case: str) -> str:
    """The unit the chapter's step runs ``case`` on (decided by the shape; one image is enough), as
    the device of its recording ran it (a step that routes by GPU, VGG's final, routes the same)."""
    from ..limits import as_recorded

    impl = chapter.study.impl(chapter.slug)
    with as_recorded(getattr(chapter, "session", None)):
        return impl.math_for(impl.params(**chapter.case_params().get(case, {})), chapter.study.problem(case, 1))


def _own_ceilings(chapter, default):
    """The ceilings recorded in the chapter's own run (what the summary judges it by), else ``default``."""
    run_id = chapter.session.run.run_id if chapter is not None and chapter.session is not None else None
    if run_id is None:
        return default
    own = ceilings_for(run_id)
    return own if own.recording.found and own.session.run.run_id == run_id else default


def floor_frame(study, chapters: dict, ceilings, vendor_records: list[dict], size: int | None,
                vendor_run: str | None = None):
    """Every step's time at ``size`` per case: rate, floor, % of floor, ratio to each vendor row.

    ``chapters`` maps a step to its Chapter (or None: shown as not recorded). ``size`` None: each
    case at its own size (studies whose cases fix their size, like the MLP's test cases). A step's
    floor comes from the ceilings of its own run when that run holds them (else ``ceilings``); a
    ratio to the library from another run than ``vendor_run`` is marked with a dagger.
    """
    at = ANY_SIZE if size is None else size
    import pandas as pd

    metric = study.time_metric
    vendors = list(dict.fromkeys(r["step"] for r in vendor_records))
    entries = [(v, ch.records if ch is not None and ch.correct else None,
                ch.recording.short_label if ch is not None else NOT_RECORDED, ch) for v, ch in chapters.items()]
    for v in vendors:
        entries.append((v, [r for r in vendor_records if r["step"] == v], "vendor library", None))
    owns = {step: _own_ceilings(chapter, ceilings) for step, _, _, chapter in entries}   # read once per run
    rows = []
    for case in study.cases:
        if not any(record_value(records, metric, case, at) is not None for _, records, _, _ in entries if records):
            continue  # nothing was timed for this case: no rows of dashes
        problem = study.problem(case, None if size is None else size)
        for step, records, where, chapter in entries:
            op = record_value(records, metric, case, at) if records is not None else None
            math = step_math(chapter, case) if chapter is not None else vendor_math(step)
            own = owns[step]
            floor = floor_ms(problem, own, math)
            fp32_floor = floor_ms(problem, own)
            other_run = (vendor_run is not None and chapter is not None and chapter.session is not None
                         and chapter.session.run.run_id != vendor_run)
            failed = chapter is not None and not chapter.correct
            # The comparison first (time, % of floor, against the library), the inputs to it after.
            row = {study.case_header: case, "Step": step,
                   "Time": format_ms(op) if op is not None else ("FAILED check" if failed else
                                                                  NOT_RECORDED if records is None else "–"),
                   "% of its floor": f"{floor / op * 100:.1f} %" if op and floor else "–"}
            for v in vendors:
                theirs = record_value([r for r in vendor_records if r["step"] == v], metric, case, at)
                row[f"vs {v}"] = f"{theirs / op:.2f}×{' †' if other_run else ''}" if op and theirs else "–"
            row.update({"Unit": math, study.rate_unit: f"{problem.flops / (op / 1e3) / 1e9:,.0f}" if op else "–",
                        "Floor of its unit": format_ms(floor) if floor else "–",
                        "FP32 floor": format_ms(fp32_floor) if fp32_floor else "–",
                        "Recorded": where})
            rows.append(row)
    return pd.DataFrame(rows)


def floor_table(study, size: int | None, steps: Iterable[str] | None = None, found_ceilings: Ceilings | None = None,
                found_vendor=None, prefer_run: str | None = None):
    from ..stepdata import load_recorded

    steps = list(steps or study.steps.slugs())
    chapters = {s: load_recorded(study, s, prefer_run=prefer_run) for s in steps}
    found_ceilings = found_ceilings or ceilings_for(prefer_run)
    found_vendor = found_vendor or vendor_recording(study, "replay", prefer_run=prefer_run)
    vendor_run = found_vendor.session.run.run_id if getattr(found_vendor, "session", None) is not None else None
    frame = floor_frame(study, chapters, found_ceilings, found_vendor.records, size, vendor_run=vendor_run)
    where = f"at {study.size_header.lower()} {size}" if size is not None else "per case"
    units = set(frame["Unit"]) if not frame.empty else set()
    split = [text for unit, text in (("3xtf32", "a third of that for 3xTF32"), ("3xfp16", "a third for 3xFP16"),
                                     ("tf32+2xbf16", "half the TF32 rate for one TF32 and two BF16 products"))
             if unit in units]
    winograd = any("*" in str(u) for u in units)
    dagger = not frame.empty and frame.apply(lambda row: any("†" in str(v) for v in row.values), axis=1).any()
    caption = (f"Time {where} against the floor (the larger of fewest bytes / the memory's bandwidth and FLOPs / "
               f"the rate of the unit the step runs on: FP32 or __half2 CUDA cores, TF32 or FP16 tensor cores"
               f"{''.join(', ' + text for text in split)}"
               f"{', Winograd counted by its own multiplies' if winograd else ''}; each rate is a "
               f"limit, the device's datasheet peak or the measured ceiling where that is higher; % = floor / time) "
               f"and the vendor library (its time / "
               f"the step's; above 1 is faster"
               f"{'; † the step and the library come from different runs' if dagger else ''}). "
               f"Each step's floor uses the ceilings of its own run where that run holds them, else these: "
               f"[ceilings: {found_ceilings.short_label}] "
               f"[vendor: {found_vendor.short_label}] Steps: each from its newest recording (column Recorded).")
    return styled(frame, caption)
