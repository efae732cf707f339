"""The closing chapter: every study's steps side by side, from the recorded runs.

Per study: the verdict (``kernelbook.verdict``), the targets, a leaderboard (each step's time per
case, speed-up over the baseline, % of its floor, ratio to the vendor library), a step chart, the
write-ups' best reported result beside ours, and, when runs of several devices are recorded, the
devices side by side. Every table but the last reads the device the book was recorded on
(``book_device``). A study is handed in; this module imports none.
"""

from __future__ import annotations

import pandas as pd

from . import results
from .bookrun import book_device, book_vendor, headline_size, load_recorded, vendor_of_run  # noqa: F401 (pages call them here)
from .evidence.ceilings import ceilings_for
from .evidence.floor import floor_ms, step_math
from .plots import PALETTE, footer  # one palette for every figure
from .report import ANY_SIZE, find_record, format_ms, styled
from .verdict import device_limits, precision_of, spread, target_margin, verdict, verdict_frame, within_spread  # noqa: F401 (the page calls them here)

#: Short names of the timing methods, for the leaderboard's "Timed by" column (the caption spells
#: each one out): two methods meet in one table, so each row says which it was.
TIMING_SHORT = {"cuda-graph": "graph", "cuda-graph-calls": "graph of calls", "events": "events",
                "host-bound": "host loop", "torch-events": "events (torch)"}


def timed_by(record: dict) -> str:
    """A record's "Timed by" cell: the method's short name, with R for a graph of R calls."""
    kind = record.get("timing")
    short = TIMING_SHORT.get(kind, kind or "not recorded")
    calls = record.get("calls_per_replay")
    return f"{short} (R = {calls})" if kind == "cuda-graph-calls" and calls else short


def leaderboard_frame(study) -> tuple[pd.DataFrame, list[str]]:
    """Every recorded step per case at the case's largest size: the comparison columns first (time,
    speed-up, % of floor, against the library), then how it was timed, the unit and the run."""
    chapters = {s: load_recorded(study, s) for s in study.steps.slugs()}
    found_vendor = book_vendor(study)
    base = chapters.get(study.steps.baseline.slug)
    rows, runs, ceilings = [], set(), {}
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
            run_id = chapter.session.run.run_id
            if run_id not in ceilings:   # one read per run, not per step and case
                ceilings[run_id] = ceilings_for(run_id)
            floor = floor_ms(problem, ceilings[run_id], step_math(chapter, case))
            row = {"Step": f"{chapter.step.number:02d} {slug}", study.case_header: case, "Size": f"{size:,}",
                   "Time": format_ms(mine["value"]),
                   "Speed-up vs baseline": f"{theirs['value'] / mine['value']:.1f}×" if theirs else "–",
                   "% of its floor": f"{floor / mine['value'] * 100:.1f} %" if floor else "–"}
            for v in dict.fromkeys(r["step"] for r in found_vendor.records):
                ref = find_record([r for r in found_vendor.records if r["step"] == v], study.time_metric, case, size)
                other = found_vendor.found and found_vendor.session.run.run_id != chapter.session.run.run_id
                row[f"vs {v}"] = f"{ref['value'] / mine['value']:.2f}×{' †' if other else ''}" if ref else "–"
            row["Timed by"] = timed_by(mine)
            row["timing"] = mine.get("timing")   # the method's key, for the caption (not shown)
            row["Unit"] = step_math(chapter, case)
            row["Run"] = chapter.session.run.run_id
            rows.append(row)
    if found_vendor.found:
        runs.add(found_vendor.session.run.run_id)
    return pd.DataFrame(rows), sorted(runs)


def _timing_caption(kinds) -> str:
    """The caption's words for the timing methods ``kinds`` (keys of ``TIMING_WORDS``) in one table."""
    from .measure import TIMING_WORDS

    used = [k for k in TIMING_SHORT if k in set(kinds)]
    mixed = len(used) > 1
    both_graphs = "cuda-graph" in used and "cuda-graph-calls" in used
    return ((f" {len(used)} timing methods meet in this table" if mixed else " Timed by") + ": "
            + "; ".join(f"'{TIMING_SHORT[k]}' = {TIMING_WORDS[k]}" for k in used) + "."
            + (" Graph replays leave out the launch cost that events around each call include, so compare "
               "rows of one method first." if mixed else "")
            + (" A 'graph' row also holds one replay's launch latency (a few microseconds), which a "
               "'graph of calls' row spreads over its R calls: at microsecond sizes only rows of one "
               "method compare." if both_graphs else "")) if used else ""


def leaderboard(study):
    """One table per case (the study's cases are judged at different sizes), so that each fits the
    reading width: the step, then what it is judged by."""
    from IPython.display import display

    frame, runs = leaderboard_frame(study)
    if frame.empty:
        return styled(pd.DataFrame({"": ["No step of this study is recorded yet."]}), study.title)
    for case, part in frame.groupby(study.case_header, sort=False):
        size = part["Size"].iloc[0]
        display(styled(part.drop(columns=[study.case_header, "Size", "timing"]),
                       f"{study.title}, {study.case_header.lower()} {case} at size {size}: every step (medians). "
                       f"'% of its floor' uses the limits of the step's device (the datasheet peaks, or the ceilings "
                       f"measured in the step's run where higher; the newest recorded ones when it measured none) at "
                       f"the rate of the unit it runs on (see each profiles page); 'vs X' is X's time / the step's (above 1: the step is "
                       f"faster; † the library was timed in another run than the step, on the same device "
                       f"model).{_timing_caption(part['timing'])}"))
    from IPython.display import Markdown

    return Markdown(f"*Runs read: {', '.join(f'`{r}`' for r in runs)}.*")


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
    runs = sorted({ch.session.run.run_id for ch in chapters.values() if ch is not None and ch.session is not None})
    footer(fig, f"run(s) {', '.join(runs) or 'none recorded'}")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def devices(study):
    """Each device's recording of every step (rows: step and case, columns: devices): the book's
    run of the study on that device where one holds every step, else each step's newest run."""
    from .bookrecording import book_runs

    runs = [r for r in results.list_runs() if not results.is_candidate(r)]   # (a candidate: cited by id)
    wholes = book_runs(study)
    by_device: dict = {}
    read: dict = {}
    for device in dict.fromkeys(r.device for r in runs):
        whole = wholes.get(device)
        for run in [whole] if whole is not None else [r for r in runs if r.device == device]:
            for slug in study.steps.slugs():
                part = results.readable_part(run, study.part(slug))
                if part is None:
                    continue
                for r in part["records"]:
                    if r["metric"] == study.time_metric and r["value"] is not None:
                        by_device.setdefault(device, {})[(slug, r["layer"], r["size"])] = r["value"]
                        read.setdefault(device, set()).add(run.run_id)
    if len(by_device) < 2:
        names = ", ".join(by_device) or "none"
        return styled(pd.DataFrame({"": [f"Only one device is recorded for this study ({names}); a run on another "
                                         "device would appear here beside it."]}), "Devices", wrap=True)
    keys = sorted({k for d in by_device.values() for k in d}, key=lambda k: (study.steps.slugs().index(k[0]), k[1], k[2]))
    rows = [{"Step": k[0], study.case_header: k[1], "Size": k[2],
             **{dev: format_ms(vals[k]) if k in vals else "–" for dev, vals in by_device.items()}} for k in keys]
    named = "; ".join(f"{device}: run {', '.join(sorted(ids))}" for device, ids in read.items())
    return styled(pd.DataFrame(rows), "Each device's recording of every step (medians): the book's run of the "
                  f"study on that device, else each step's newest run ({named}).")


def reported_best(study):
    """The write-ups' best reported result for the study, beside this book's best (or a note)."""
    frame = study.reported_best()
    if frame is None or frame.empty:
        return styled(pd.DataFrame({"": ["The write-up reports no absolute times for this study (only changes "
                                         "between steps); see its chapters."]}), "Reported by the write-ups")
    table = styled(frame, "The write-ups' best reported results (their GPUs; not measured here) beside this book's "
                          "fastest step at the same size.")
    prose = [c for c in ("Step", "Source") if c in frame.columns]  # long names: they wrap, the numbers do not
    return table.set_properties(subset=prose, **{"white-space": "normal", "min-width": "12em", "text-align": "left"})


def _summed(records: list[dict], metric: str, cases, size) -> float | None:
    """The sum of ``metric`` over ``cases`` at ``size`` (any size when None); None if one is missing."""

    found = [find_record(records, metric, c, ANY_SIZE if size is None else size) for c in cases]
    return None if any(f is None or f["value"] is None for f in found) else sum(f["value"] for f in found)


def evaluate_targets(study) -> list[dict]:
    """Each of the study's targets against its fastest eligible recorded step (and the library).

    A target names one ``case``, or several ``cases`` whose times add up (LeNet's Op Time 1 + Op
    Time 2), and optionally the ``size`` it is judged at."""
    found_vendor = book_vendor(study)
    out = []
    for target in study.targets():
        cases, size = target.get("cases") or [target["case"]], target.get("size")
        best = None
        for slug in target["steps"]:
            chapter = load_recorded(study, slug)
            value = (_summed(chapter.records, study.time_metric, cases, size)
                     if chapter is not None and chapter.correct else None)
            if value is not None and (best is None or value < best[1]):
                best = (slug, value, chapter.session.run.run_id)
        library = vendor_of_run(study, best[2] if best else None, found_vendor)   # the step's own run first
        ref = (_summed([r for r in library.records if r["step"] == target["vendor"]], study.time_metric,
                       cases, size) if target.get("vendor") else None)
        vendor_run = library.session.run.run_id if ref is not None and library.found else None
        out.append({**target, "best": best, "vendor_ms": ref, "vendor_run": vendor_run})
    return out


def vendor_ratio(t: dict, whose: str = "the step's") -> str:
    """The library's time over the step's, said only where both come from one run (ratios across
    runs mix two devices' states), with the study's minimum ratio (``vendor_ratio``) judged."""
    if t.get("vendor_ms") is None or t.get("best") is None:
        return ""
    slug, ms, run_id = t["best"]
    if t.get("vendor_run") != run_id:
        return f" (timed in run {t.get('vendor_run')}, not in the step's: no ratio is drawn)"
    ratio = t["vendor_ms"] / ms
    need = t.get("vendor_ratio")
    judged = "" if need is None else f", target ≥ {need:g}×: {'met' if ratio >= need else 'missed'}"
    return f" ({ratio:.2f}× {whose} time{judged})"


def opening_lines(study, chapter) -> list[str] | None:
    """What a study's verdict starts with: None when the step failed its checks (then the one line
    saying so is the verdict), else every target on the study's final step and, on another step,
    the targets that step is eligible for (so its page says met or missed, and by how much)."""
    if not chapter.correct:
        return None
    if chapter.slug != study.steps.steps[-1].slug:
        return [f"Target: {line}" for line in target_lines(study, step=chapter.slug)]
    return [f"Target: {line}" for line in target_lines(study)]


def target_lines(study, step: str | None = None) -> list[str]:
    """One line per target (only those ``step`` is eligible for, when given)."""
    lines = []   # each names the step it judges: on another step's page, "the step" would read as that page's
    for t in evaluate_targets(study):
        if step is not None and step not in t["steps"]:
            continue
        if t["best"] is None:
            lines.append(f"{t['what']} (≤ {format_ms(t['limit_ms'])}): no eligible step is recorded.")
            continue
        slug, ms, run_id = t["best"]
        outcome = ("met" if ms <= t["limit_ms"] else
                   f"missed by {format_ms(ms - t['limit_ms'])} ({ms / t['limit_ms']:.2f}× the target)")
        number = study.steps.get(slug).number   # a later step is named before its chapter: its number says where
        line = (f"{t['what']} (≤ {format_ms(t['limit_ms'])}): the fastest such step, step {number:02d} ({slug}), "
                f"takes {format_ms(ms)}: {outcome}")
        if t["vendor_ms"] is not None:
            ahead = ms < t["vendor_ms"]
            ratio = vendor_ratio(t, slug + "'s")
            line += (f"; {t['vendor']} takes {format_ms(t['vendor_ms'])}{ratio}, so {slug} is "
                     f"{'ahead of' if ahead else 'behind'} it")
        lines.append(line + f" (run {run_id}).")
    return lines


#: Where a target's limit comes from when the study does not say (``source`` in ``targets()``).
DEFAULT_TARGET_SOURCE = ("the book's target for this study (its own, set past the write-ups: none of them reports "
                         "a number for it), judged beside its floor and the library")


def target_frame(study) -> pd.DataFrame:
    """Each target defined where it is judged: its limit, the fastest eligible step's time, the
    margin and the spread of the repeats behind it, where the limit comes from, the floor of its
    case on this device (from the ceilings of the best step's run), the library, and the step.
    A target that also asks for a ratio to the library (``vendor_ratio``, LeNet's ``vendor_factor``)
    has a row of its own for it, judged only when the library was timed in the step's run."""
    rows = []
    for t in evaluate_targets(study):
        floor, recs = None, []
        if t["best"] is not None:
            chapter = load_recorded(study, t["best"][0])
            floors = []
            for case in t.get("cases") or [t["case"]]:
                rec = (find_record(chapter.records, study.time_metric, case, t["size"]) if t.get("size") else
                       find_record(chapter.records, study.time_metric, case))
                recs.append(rec)
                floors.append(floor_ms(study.problem(case, rec["size"]), ceilings_for(t["best"][2]),
                                       step_math(chapter, case)))
            floor = None if None in floors else sum(floors)
        slug, ms, run_id = t["best"] if t["best"] else ("–", None, "–")
        common = {"Fastest eligible step": slug, "Spread of its repeats": spread(recs[0], recs[1:]) if recs else "–",
                  "Its floor": format_ms(floor),
                  "Library": (f"{t['vendor']} {format_ms(t['vendor_ms'])}{vendor_ratio(t)}" if t.get("vendor")
                              and t.get("vendor_ms") is not None else "–"),
                  "Limit set by": t.get("source") or DEFAULT_TARGET_SOURCE, "Run": run_id}
        rows.append({"Target": t["what"],
                     "Verdict": "no eligible step recorded" if ms is None else (
                         ("met" if ms <= t["limit_ms"] else
                          f"missed by {format_ms(ms - t['limit_ms'])} ({ms / t['limit_ms']:.2f}× the limit)")
                         + (", the limit inside the spread of its repeats" if within_spread(recs, t["limit_ms"]) else "")),
                     "Its time": format_ms(ms), "Limit": f"≤ {format_ms(t['limit_ms'])}",
                     "Margin": "–" if ms is None else target_margin(ms, t["limit_ms"]), **common})
        need = t.get("vendor_ratio") or t.get("vendor_factor")
        if need and t.get("vendor"):
            same = ms is not None and t.get("vendor_ms") is not None and t.get("vendor_run") == run_id
            ratio = t["vendor_ms"] / ms if same else None
            rows.append({"Target": f"{t['what']}: ≥ {need:g}× {t['vendor']} (same run)",
                         "Verdict": ("not judged: the library was not timed in the step's run" if ratio is None else
                                     "met" if ratio >= need else "missed"),
                         "Its time": "–" if ratio is None else f"{ratio:.2f}× ({format_ms(t['vendor_ms'])} / "
                                                              f"{format_ms(ms)})",
                         "Limit": f"≥ {need:g}×",
                         "Margin": "–" if ratio is None else (f"{(ratio - need) / need * 100:.1f} % over" if ratio >= need
                                                             else f"{(need - ratio) / need * 100:.1f} % short"),
                         **common})
    return pd.DataFrame(rows)


def targets(study):
    frame = target_frame(study)
    if frame.empty:
        return styled(pd.DataFrame({"": [f"No target is declared for this study ({type(study).__name__}.targets() "
                                         "is empty)."]}), f"{study.title}: targets")
    sources = set(frame["Limit set by"])
    source_note = ""
    if len(sources) == 1:  # one source for every target: said once, in the caption
        source_note = f" Every limit here is {sources.pop()}."
        frame = frame.drop(columns=["Limit set by"])
    return styled(frame, wrap=True, caption=f"{study.title}: each target, where its limit comes from, and the numbers it is judged "
                         "beside ('Its floor': the least time the case can take on this device at the rate of the "
                         "step's unit, a limit: the datasheet peak, or the ceiling measured in the step's run where "
                         "higher; 'Margin': how far under or over the limit; the spread: the fastest and slowest "
                         "repeat behind the time)." + source_note)


def banner(*studies, device: str | None = None):
    """The page's provenance: this page measures nothing; the runs it reads, with device, date,
    commit. ``device`` (part of a GPU's name, e.g. "H200") shows the book's recordings on that GPU."""
    from IPython.display import Markdown

    from .bookrun import choose

    choose(device, studies)
    runs: dict = {}
    for study in studies:
        for slug in study.steps.slugs():
            chapter = load_recorded(study, slug)
            if chapter is not None:
                runs[chapter.session.run.run_id] = chapter.session.run
    from .bookrecording import book_runs
    from .escape import md_code, md_text

    # the other GPUs' book runs: the devices tables and the device limits read them
    others = {run.run_id: run for study in studies for run in book_runs(study).values() if run.run_id not in runs}

    def said(found: dict) -> list[str]:
        return [f"> - {md_code(r.run_id)}: {md_text(r.device)}, "
                f"{md_text(r.created_utc.replace('T', ' ').replace('Z', ' UTC'))}, commit {md_code(r.commit)}"
                for r in sorted(found.values(), key=lambda r: r.run_id)]

    text = ("> **Replayed** (this page measures nothing): every number below comes from these recorded runs, "
            "named in each caption:\n>\n" + "\n".join(said(runs)))
    if others:
        text += ("\n>\n> and, in the devices tables and the devices' limits, the other GPU's recordings:\n>\n"
                 + "\n".join(said(others)))
    return Markdown(text)
