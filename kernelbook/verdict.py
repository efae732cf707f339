"""The summary's verdict per study: per case and precision, the fastest step of the run that
timed the library, the library beside it in that run, their ratio, the spread of the repeats and
the share of the floor; and the devices' limits, the datasheet's peaks beside the measured
ceilings. Read through ``kernelbook.summary``; the book's device and its recordings come from
``kernelbook.bookrun``, below both.
"""

from __future__ import annotations

import pandas as pd

from . import results
from .bookrecording import book_runs, fullest_of_newest_commit
from .bookrun import book_vendor, headline_size, load_recorded, vendor_of_run
from .evidence.ceilings import ceilings_for
from .evidence.floor import floor_ms, step_math
from .report import find_record, format_ms, styled

#: The precision a unit of ``floor.UNITS`` answers to, and the library rows it is compared with:
#: FP32-accurate steps (FP32, Winograd, 3xTF32, 3xFP16, TF32 + 2 BF16) beside the library's FP32.
PRECISION = {"fp32": "fp32", "3xtf32": "fp32", "3xfp16": "fp32", "tf32+2xbf16": "fp32", "tf32": "tf32",
             "fp16": "fp16", "fp16x2": "fp16"}
PRECISION_WORDS = {"fp32": "FP32-accurate", "tf32": "TF32", "fp16": "FP16"}


def precision_of(math: str) -> str:
    """``fp32``, ``tf32`` or ``fp16``: what a step running on the unit ``math`` is compared with."""
    return PRECISION.get(math.partition("*")[0], "fp32")


def spread(rec: dict | None, others: list | None = None) -> str:
    """The repeats behind a median: their range, min–max, and how many (summed over ``others``,
    records of further cases added to ``rec``, as the LeNet target adds its two layers)."""
    recs = [r for r in [rec, *(others or [])] if r is not None]
    if not recs or any(r.get("min") is None or r.get("max") is None for r in recs):
        return "not recorded"
    lo, hi = sum(r["min"] for r in recs), sum(r["max"] for r in recs)
    n = min(len(r.get("samples") or []) or r.get("n_samples") or 0 for r in recs)
    return f"{format_ms(lo)} – {format_ms(hi)}" + (f" (n = {n})" if n else "")


def _fastest(study, chapters: dict, case: str, size: int, run_id: str | None = None):
    """(chapter, record) of the fastest correct step of ``chapters`` at ``case`` and ``size``
    (only those recorded in ``run_id`` when given), or None."""
    best = None
    for chapter in chapters.values():
        if chapter is None or not chapter.correct or (run_id and chapter.session.run.run_id != run_id):
            continue
        rec = find_record(chapter.records, study.time_metric, case, size)
        if rec is not None and rec["value"] is not None and (best is None or rec["value"] < best[1]["value"]):
            best = (chapter, rec)
    return best


def _library_beside(study, found_vendor, case: str, size: int, precision: str):
    """(row name, record) of the fastest library row of ``precision`` at ``case`` and ``size``."""
    from .evidence.floor import vendor_math

    best = None
    for name in dict.fromkeys(r["step"] for r in found_vendor.records):
        if vendor_math(name) != precision:
            continue
        rec = find_record([r for r in found_vendor.records if r["step"] == name], study.time_metric, case, size)
        if rec is not None and rec["value"] is not None and (best is None or rec["value"] < best[1]["value"]):
            best = (name, rec)
    return best


def verdict_frame(study) -> pd.DataFrame:
    """Per case and precision: the fastest step of the run that timed the library, its time and
    spread, the fastest library row of its precision in that same run, their ratio, and the step's
    % of its floor. Where a faster step of that precision was recorded in another run, a row of
    its own shows it with no library ratio (two runs are two states of the device)."""

    chapters = {s: load_recorded(study, s) for s in study.steps.slugs()}
    found_vendor = book_vendor(study)
    lib_run = found_vendor.session.run.run_id if found_vendor.found else None
    in_lib_run = {s: load_recorded(study, s, prefer_run=lib_run) for s in study.steps.slugs()} if lib_run else {}
    libraries = {lib_run: found_vendor}   # run id -> the library rows it timed itself (None: none)
    rows = []
    for case in study.cases:
        size = headline_size(study, case, chapters)
        if size is None:
            continue
        problem = study.problem(case, size)
        for precision in PRECISION_WORDS:
            def of_precision(pool):
                return {s: ch for s, ch in pool.items() if ch is not None and ch.correct
                        and precision_of(step_math(ch, case)) == precision}
            same_run = _fastest(study, of_precision(in_lib_run), case, size, run_id=lib_run) if lib_run else None
            anywhere = _fastest(study, of_precision(chapters), case, size)
            candidates = [same_run] + ([anywhere] if anywhere and (same_run is None or
                                                                   anywhere[1]["value"] < same_run[1]["value"]) else [])
            for found in [c for c in candidates if c is not None]:
                chapter, rec = found
                run_id = chapter.session.run.run_id
                if run_id not in libraries:
                    libraries[run_id] = vendor_of_run(study, run_id, None)
                own = libraries[run_id]
                lib = _library_beside(study, own, case, size, precision) if own is not None else None
                floor = floor_ms(problem, ceilings_for(run_id), step_math(chapter, case))
                rows.append({study.case_header: case, "Size": f"{size:,}", "Precision": PRECISION_WORDS[precision],
                             "Fastest step": f"{chapter.step.number:02d} {chapter.step.slug}",
                             "Its time": format_ms(rec["value"]), "Spread of its repeats": spread(rec),
                             "Library, same run": (f"{lib[0]} {format_ms(lib[1]['value'])}" if lib else
                                                   "none of this precision" if own is not None else
                                                   "not timed in this run"),
                             "Library / step": f"{lib[1]['value'] / rec['value']:.2f}×" if lib else "–",
                             "% of its floor": f"{floor / rec['value'] * 100:.1f} %" if floor else "–",
                             "Run": run_id})
    return pd.DataFrame(rows)


def verdict(study):
    """The study's verdict table (``verdict_frame``), or a line saying nothing is recorded."""
    frame = verdict_frame(study)
    if frame.empty:
        return styled(pd.DataFrame({"": ["No step of this study is recorded yet."]}), f"{study.title}: verdict")
    runs = sorted(set(frame["Run"]))
    note = ("Every row comes from one run." if len(runs) == 1 else
            f"The rows come from {len(runs)} runs; a ratio is drawn only between a step and the library timed in "
            "the same run, and a row whose step was recorded in a run that timed no library shows none.")
    return styled(frame, f"{study.title}: the verdict per {study.case_header.lower()} and precision (medians). Each "
                         "row's step is the fastest of its precision in the run that timed the library (FP32-accurate "
                         "steps beside the library's FP32 rows); 'Library / step' is the fastest library row of that "
                         "precision over the step, above 1 when the step is faster; '% of its floor' is the floor "
                         "(a limit: the datasheet peaks, or the measured ceilings where higher) over the time; the "
                         f"spread is the fastest and slowest repeat. {note}", wrap=True)


def within_spread(recs: list, limit: float) -> bool:
    """Whether ``limit`` lies between the fastest and the slowest repeat (summed over ``recs``):
    then another run could land on the other side of it."""
    if not recs or any(r is None or r.get("min") is None or r.get("max") is None for r in recs):
        return False
    return sum(r["min"] for r in recs) <= limit <= sum(r["max"] for r in recs)


def target_margin(ms: float, limit: float) -> str:
    """How far a time lies under (or over) its limit, as a share of the limit."""
    gap = (limit - ms) / limit * 100
    return f"{gap:.1f} % under" if gap >= 0 else f"{-gap:.1f} % over"


def device_limits(*studies):
    """Per device recorded: the datasheet's peaks beside the ceilings measured on it, from the
    book's own runs of ``studies`` on that device where they measured them (the fullest of those),
    else as the book's recording is chosen among every run that measured them."""
    from IPython.display import display

    from .evidence.datasheet import peaks_table

    measured: dict = {}   # device -> [run], oldest first
    found: dict = {}      # run id -> its ceilings
    for run in results.list_runs():
        ceilings = ceilings_for(run.run_id)
        if ceilings.session is not None and ceilings.session.run.run_id == run.run_id:
            measured.setdefault(run.device, []).append(run)
            found[run.run_id] = ceilings
    # As the book's recording is chosen: the fullest run of the newest commit that measured them.
    chosen = {}
    per_study = [book_runs(study) for study in studies]   # read once: each lists the store
    for device, runs in measured.items():
        books = {book[device].run_id for book in per_study if device in book}
        theirs = [run for run in runs if run.run_id in books]
        chosen[device] = fullest_of_newest_commit(theirs or runs, lambda run: len(run.part_names()))
    newest = {device: (run, found[run.run_id]) for device, run in chosen.items()}
    if not newest:
        return styled(pd.DataFrame({"": ["No device ceilings are recorded yet."]}), "The devices' limits")
    for device, (run, found) in newest.items():
        display(peaks_table(found.values, run.manifest.get("device"), heading=f"{device}, ceilings of run {run.run_id}. "))
    return None
