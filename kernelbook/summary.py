"""The closing chapter: every study's steps side by side, from the recorded runs.

Per study: a leaderboard (each step's time per case, speed-up over the baseline, % of the FP32
floor from the measured ceilings, ratio to the vendor library), a step chart, the write-ups'
best reported result beside ours, and, when runs of several devices are recorded, the devices
side by side. A study is handed in; this module imports none.
"""

from __future__ import annotations

import pandas as pd

from . import results
from .chapter import load_recorded
from .evidence.ceilings import ceilings_for
from .evidence.floor import floor_ms, step_math
from .evidence.vendor import vendor
from .report import find_record, format_ms, styled

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


def headline_size(study, case: str, chapters: dict) -> int | None:
    """The size a case is judged at: its largest recorded size (LeNet: 10,000 images)."""
    sizes = {r["batch"] for ch in chapters.values() if ch is not None
             for r in ch.records if r["metric"] == study.time_metric and r["layer"] == case}
    return max(sizes) if sizes else None


def leaderboard_frame(study) -> tuple[pd.DataFrame, list[str]]:
    chapters = {s: load_recorded(study, s) for s in study.steps.slugs()}
    found_vendor = vendor(study, "replay")
    base = chapters.get(study.steps.baseline.slug)
    rows, runs = [], set()
    for case in study.cases:
        size = headline_size(study, case, chapters)
        if size is None:
            continue
        problem = study.problem(case, size)
        for slug, chapter in chapters.items():
            if chapter is None:
                continue
            runs.add(chapter.session.run.run_id)
            mine = find_record(chapter.records, study.time_metric, case, size) if chapter.correct else None
            if mine is None:
                continue
            theirs = find_record(base.records, study.time_metric, case, size) if base is not None else None
            ceilings = ceilings_for(chapter.session.run.run_id)
            floor = floor_ms(problem, ceilings, step_math(chapter, case))
            row = {study.case_header: case, "Size": f"{size:,}", "Step": f"{chapter.step.number:02d} {slug}",
                   "Unit": step_math(chapter, case),
                   "Time": format_ms(mine["value"]),
                   "Speed-up vs baseline": f"{theirs['value'] / mine['value']:.1f}×" if theirs else "–",
                   "% of its floor": f"{floor / mine['value'] * 100:.1f} %" if floor else "–"}
            for v in dict.fromkeys(r["variant"] for r in found_vendor.records):
                ref = find_record([r for r in found_vendor.records if r["variant"] == v], study.time_metric, case, size)
                row[f"vs {v}"] = f"{ref['value'] / mine['value']:.2f}×" if ref else "–"
            rows.append(row)
    if found_vendor.found:
        runs.add(found_vendor.session.run.run_id)
    return pd.DataFrame(rows), sorted(runs)


def leaderboard(study):
    frame, runs = leaderboard_frame(study)
    return styled(frame, f"{study.title}: every step at each case's largest recorded size (medians); '% of its "
                         f"floor' uses the ceilings measured in the step's run and the rate of the unit it runs on (see "
                         f"each profiles page); 'vs X' is X's time / the step's "
                         f"(above 1: the step is faster). Runs: {', '.join(runs)}.")


def step_chart(study):
    """Time per step (log scale), one panel per case: the study's path from baseline to final."""
    import matplotlib.pyplot as plt

    chapters = {s: load_recorded(study, s) for s in study.steps.slugs()}
    cases = [c for c in study.cases if headline_size(study, c, chapters) is not None]
    fig, axes = plt.subplots(1, max(len(cases), 1), figsize=(6.2 * max(len(cases), 1), 4.4), squeeze=False)
    for ax, case in zip(axes[0], cases):
        size = headline_size(study, case, chapters)
        labels, values = [], []
        for slug, chapter in chapters.items():
            rec = (find_record(chapter.records, study.time_metric, case, size)
                   if chapter is not None and chapter.correct else None)
            if rec is not None:
                labels.append(f"{chapter.step.number:02d}")
                values.append(rec["value"])
        best = min(values) if values else None
        ax.bar(labels, values, color=[PALETTE[1] if v == best else PALETTE[0] for v in values])
        ax.set_yscale("log")
        ax.set_title(f"{case} (size {size:,})", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("time (ms, log)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{study.title}: time per step (the fastest in orange)", fontsize=11)
    fig.tight_layout()
    return fig


def devices(study):
    """Each device's recording of every step (rows: step and case, columns: devices)."""
    by_device: dict = {}
    for run in results.list_runs():
        for slug in study.steps.slugs():
            part = results.readable_part(run, study.part(slug))
            if part is None:
                continue
            for r in part["records"]:
                if r["metric"] == study.time_metric and r["value"] is not None:
                    by_device.setdefault(run.device, {})[(slug, r["layer"], r["batch"])] = r["value"]
    if len(by_device) < 2:
        names = ", ".join(by_device) or "none"
        return styled(pd.DataFrame({"": [f"Only one device is recorded for this study ({names}); a run on another "
                                         "device would appear here beside it."]}), "Devices")
    keys = sorted({k for d in by_device.values() for k in d}, key=lambda k: (study.steps.slugs().index(k[0]), k[1], k[2]))
    rows = [{"Step": k[0], study.case_header: k[1], "Size": k[2],
             **{dev: format_ms(vals[k]) if k in vals else "–" for dev, vals in by_device.items()}} for k in keys]
    return styled(pd.DataFrame(rows), "The newest recording of each step on each device (medians).")


def reported_best(study):
    """The write-ups' best reported result for the study, beside this book's best (or a note)."""
    frame = study.reported_best()
    if frame is None or frame.empty:
        return styled(pd.DataFrame({"": ["The write-up reports no absolute times for this study (only changes "
                                         "between steps); see its chapters."]}), "Reported by the write-ups")
    return styled(frame, "The write-ups' best reported results (their GPUs; not measured here) beside this book's "
                         "fastest step at the same size.")


def evaluate_targets(study) -> list[dict]:
    """Each of the study's targets against its fastest eligible recorded step (and the library)."""
    found_vendor = vendor(study, "replay")
    out = []
    for target in study.targets():
        best = None
        for slug in target["steps"]:
            chapter = load_recorded(study, slug)
            rec = (find_record(chapter.records, study.time_metric, target["case"])
                   if chapter is not None and chapter.correct else None)
            if rec is not None and (best is None or rec["value"] < best[1]):
                best = (slug, rec["value"], chapter.session.run.run_id)
        ref = (find_record([r for r in found_vendor.records if r["variant"] == target["vendor"]], study.time_metric,
                           target["case"]) if target.get("vendor") else None)
        out.append({**target, "best": best, "vendor_ms": ref["value"] if ref else None})
    return out


def target_lines(study) -> list[str]:
    lines = []
    for t in evaluate_targets(study):
        if t["best"] is None:
            lines.append(f"{t['what']} (≤ {format_ms(t['limit_ms'])}): no eligible step is recorded.")
            continue
        slug, ms, run_id = t["best"]
        verdict = ("met" if ms <= t["limit_ms"] else
                   f"missed by {format_ms(ms - t['limit_ms'])} ({ms / t['limit_ms']:.2f}× the target)")
        line = f"{t['what']} (≤ {format_ms(t['limit_ms'])}): the fastest such step, {slug}, takes {format_ms(ms)}: {verdict}"
        if t["vendor_ms"] is not None:
            ahead = ms < t["vendor_ms"]
            line += (f"; {t['vendor']} takes {format_ms(t['vendor_ms'])}, so the step is "
                     f"{'ahead of' if ahead else 'behind'} it")
        lines.append(line + f" (run {run_id}).")
    return lines


def targets(study):
    from IPython.display import Markdown

    lines = target_lines(study)
    from .escape import md_safe

    return Markdown("\n".join(f"- {md_safe(line)}" for line in lines) if lines else "*This study sets no targets.*")


def banner(*studies):
    """The page's provenance: this page measures nothing; the runs it reads, with device, date, commit."""
    from IPython.display import Markdown

    runs: dict = {}
    for study in studies:
        for slug in study.steps.slugs():
            chapter = load_recorded(study, slug)
            if chapter is not None:
                runs[chapter.session.run.run_id] = chapter.session.run
    from .escape import md_code, md_text

    lines = [f"{md_code(r.run_id)}: {md_text(r.device)}, {md_text(r.created_utc.replace('T', ' ').replace('Z', ' UTC'))}, "
             f"commit {md_code(r.commit)}"
             for r in sorted(runs.values(), key=lambda r: r.run_id)]
    return Markdown("> **Replayed** (this page measures nothing): every number below comes from these recorded "
                    "runs, named in each caption:\n>\n" + "\n".join(f"> - {line}" for line in lines))
