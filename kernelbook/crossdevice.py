"""One study's steps on two devices: the book's run of the study on the H100 beside its run on the
H200, each step's time on both, their ratio, and what bounds the step on the H100.

The H200 is a Hopper built from the H100's SMs with a memory of about 1.4 times its bandwidth (the
datasheets), so a step bound by its bytes should move by about the bandwidth ratio and a step
bound by its arithmetic should not. The book's run of a study on a device is ``bookrun.book_run``'s. Which bound a step is under is read from its H100 run: its
arithmetic intensity (its FLOPs over the DRAM bytes Nsight Compute counted, else over the fewest
bytes the problem must move, as ``evidence.roofline`` places it) against the ridge point of the
unit it runs on (``evidence.floor.unit``: the unit's rate over the memory's bandwidth). The rates
are the ceilings measured in each device's run, or the datasheet's peaks (``evidence.datasheet``)
where that run measured none; every table and figure says which.

The sentences of the page are computed from the table (``moved_lines``) and checked against it
(``check_lines``): a sentence that names a step in the wrong band, or a ratio the table does not
hold, raises. A study is handed in; this module imports none.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from . import results
from .bookrun import book_run
from .errors import ResultsError
from .evidence.ceilings import ceilings_for
from .evidence.datasheet import PEAK_TITLES, datasheet_for
from .evidence.floor import step_math, unit
from .evidence.ncu import load_ncu
from .evidence.roofline import ROOFS, points_from
from .report import find_record, format_ms, styled
from .stepdata import load_recorded

#: The two devices the page compares, as a substring of the device's name: the book's recorded
#: device first (whose profile decides each step's bound), the other beside it.
BASE, OTHER = "H100", "H200"
BANDWIDTH = "copy_gbs"
#: "About" a ratio: within this share of it. A step within ABOUT of the bandwidth ratio moved with
#: the bandwidth; one within ABOUT of 1 did not move.
ABOUT = 0.10
#: The bands a step's speed-up falls in, in the order the sentences give them.
BANDS = ("bandwidth", "less", "more", "still", "slower")
BAND_WORDS = {
    "bandwidth": "moved by about the bandwidth ratio",
    "less": "moved by less than the bandwidth ratio",
    "more": "moved by more than the bandwidth ratio",
    "still": f"did not move (within {ABOUT:.0%} of the H100's time)",
    "slower": "took longer on the H200",
}


# ----------------------------------------------------------------------------- the runs


@dataclass
class DeviceRecording:
    """What one device's run of a study holds: its steps (from that run only), their Nsight
    Compute parts, and the device's rates with where each comes from."""

    label: str                       # "H100", "H200"
    run: results.Run | None
    chapters: dict = field(default_factory=dict)      # slug -> StepRecording of this run
    ncu: dict = field(default_factory=dict)           # slug -> Nsight Compute records of this run
    rates: dict = field(default_factory=dict)         # metric -> value (GFLOP/s, GB/s)
    sources: dict = field(default_factory=dict)       # metric -> "measured in run X" / "datasheet: H100 SXM"
    #: Without a whole run of the study on this device: each step's newest run there (run ids).
    runs: list = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.run is not None and bool(self.chapters)

    @property
    def device(self) -> str:
        return self.run.device if self.run is not None else self.label

    def ridge(self, metric: str, cost: float = 1.0) -> float | None:
        """FLOPs per byte where ``metric``'s rate (``cost`` products per product) meets the bandwidth."""
        rate, bandwidth = self.rates.get(metric), self.rates.get(BANDWIDTH)
        return rate / (cost * bandwidth) if rate and bandwidth else None


def device_rates(measured: dict, device: str | None, run_id: str | None) -> tuple[dict, dict]:
    """Each rate of ``PEAK_TITLES`` (the units and the bandwidth): the ceiling measured in the
    device's run where it holds one, else the datasheet's peak; and where each value comes from."""
    sheet = datasheet_for(device)
    rates, sources = {}, {}
    for metric in PEAK_TITLES:
        if measured.get(metric):
            rates[metric], sources[metric] = measured[metric], f"measured in run {run_id}"
        elif sheet is not None and sheet.peaks.get(metric):
            rates[metric], sources[metric] = sheet.peaks[metric], f"datasheet: {sheet.model}"
    return rates, sources


def recorded_on(study, label: str, run: results.Run | None = None) -> DeviceRecording:
    """The book's run of ``study`` on the device named ``label`` (or ``run``), read from that run only."""
    run = run if run is not None else book_run(study, label)
    if run is None:
        return _newest_per_step(study, label)
    chapters, ncu = {}, {}
    for slug in study.steps.slugs():
        if not run.has_part(study.part(slug)):
            continue
        found = load_recorded(study, slug, prefer_run=run.run_id)
        if found is not None and found.session.run.run_id == run.run_id:
            chapters[slug] = found
            profile = load_ncu(study, slug, prefer_run=run.run_id)
            same = profile.session is not None and profile.session.run.run_id == run.run_id
            ncu[slug] = profile.records if same else []
    own = ceilings_for(run.run_id)
    measured = own.values if own.recording.found and own.session.run.run_id == run.run_id else {}
    rates, sources = device_rates(measured, run.device, run.run_id)
    return DeviceRecording(label, run, chapters, ncu, rates, sources)


def _newest_per_step(study, label: str) -> DeviceRecording:
    """Without a whole run of ``study`` on the device named ``label``: each step from the newest run
    of that device holding it (this page alone reads several runs of one device, and names them),
    the rates from the newest of those runs that measured the ceilings."""
    chapters, ncu, used = {}, {}, {}
    for slug in study.steps.slugs():
        runs = [r for r in results.runs_with(study.part(slug)) if label.lower() in r.device.lower()]
        found = load_recorded(study, slug, prefer_run=runs[-1].run_id) if runs else None
        if found is not None and found.session.run.run_id == runs[-1].run_id:
            chapters[slug], used[runs[-1].run_id] = found, runs[-1]
            profile = load_ncu(study, slug, prefer_run=runs[-1].run_id)
            ncu[slug] = profile.records if profile.found and profile.session.run.run_id == runs[-1].run_id else []
    if not chapters:
        return DeviceRecording(label, None)
    ordered = sorted(used.values(), key=lambda r: (r.created_utc, r.run_id))
    measured, where = {}, ordered[-1]
    for candidate in reversed(ordered):
        own = ceilings_for(candidate.run_id)
        if own.recording.found and own.session.run.run_id == candidate.run_id:
            measured, where = own.values, candidate
            break
    rates, sources = device_rates(measured, where.device, where.run_id)
    return DeviceRecording(label, ordered[-1], chapters, ncu, rates, sources, runs=[r.run_id for r in ordered])


# ----------------------------------------------------------------------------- the table


FRAME_COLUMNS = ["study", "number", "step", "case", "size", "base_ms", "other_ms", "speedup", "unit", "intensity",
                 "bytes_source", "ridge", "bound", "other_note"]


def _sizes(recording: DeviceRecording, study, case: str) -> set:
    return {r["size"] for ch in recording.chapters.values() if ch.correct for r in ch.records
            if r["metric"] == study.time_metric and r["layer"] == case and r["value"] is not None}


def headline_size(study, case: str, base: DeviceRecording, other: DeviceRecording) -> int | None:
    """The size a case is compared at: the largest recorded by both devices' runs (by the H100's
    alone while the H200 has none)."""
    mine = _sizes(base, study, case)
    both = mine & _sizes(other, study, case) if other.found else mine
    return max(both) if both else None


def bound_of(intensity: float | None, ridge: float | None) -> str:
    """``bytes`` under the ridge point, ``arithmetic`` at or above it."""
    if intensity is None or ridge is None or not math.isfinite(intensity):
        return "not known"
    return "bytes" if intensity < ridge else "arithmetic"


def device_frame(study, base: DeviceRecording, other: DeviceRecording) -> pd.DataFrame:
    """One row per step and case timed in the H100's run: its time on each device at the case's
    headline size, the speed-up (H100 time / H200 time), and its bound on the H100."""
    rows = []
    for case in study.cases:
        size = headline_size(study, case, base, other)
        if size is None:
            continue
        points = points_from(study, base.chapters, base.ncu, size=size)
        points = points[points["layer"] == case].set_index("step") if not points.empty else points
        for slug, chapter in base.chapters.items():
            mine = find_record(chapter.records, study.time_metric, case, size) if chapter.correct else None
            if mine is None or mine["value"] is None:
                continue
            theirs = other.chapters.get(slug)
            note = "not in its run" if theirs is None else None if theirs.correct else "failed its check"
            theirs = find_record(theirs.records, study.time_metric, case, size) if note is None else None
            other_ms = theirs["value"] if theirs is not None else None
            math_name = step_math(chapter, case)
            metric, cost = unit(math_name)
            ridge = base.ridge(metric, cost)
            at = points.loc[slug] if not points.empty and slug in points.index else None
            intensity = float(at["intensity"]) if at is not None else None
            rows.append({"study": study.name, "number": chapter.step.number, "step": slug, "case": case,
                         "size": size, "base_ms": mine["value"], "other_ms": other_ms,
                         "speedup": mine["value"] / other_ms if other_ms else None, "unit": math_name,
                         "intensity": intensity, "bytes_source": at["bytes_source"] if at is not None else None,
                         "ridge": ridge, "bound": bound_of(intensity, ridge),
                         "other_note": note or (None if other_ms else "not timed at this size")})
    rows.sort(key=lambda row: (row["number"], study.cases.index(row["case"])))   # each step's cases together
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def bandwidth_ratio(base: DeviceRecording, other: DeviceRecording) -> tuple[float | None, str]:
    """The H200's bandwidth over the H100's, and where the two come from."""
    b, o = base.rates.get(BANDWIDTH), other.rates.get(BANDWIDTH)
    if not b or not o:
        return None, "not recorded"
    return o / b, f"{other.label}: {other.sources[BANDWIDTH]}; {base.label}: {base.sources[BANDWIDTH]}"


def band(speedup: float, ratio: float) -> str:
    """Which of ``BANDS`` a speed-up falls in, against the bandwidth ratio ``ratio``."""
    if abs(speedup / ratio - 1) <= ABOUT:
        return "bandwidth"
    if abs(speedup - 1) <= ABOUT:
        return "still"
    if speedup < 1:
        return "slower"
    return "less" if speedup < ratio else "more"


# ----------------------------------------------------------------------------- sentences

_GROUP = re.compile(r"(?P<number>\d{2}) (?P<step>[a-z0-9][a-z0-9-]*) \((?P<cases>[^()]*)\)")
_CASE = re.compile(r"^(?P<case>\S+) (?P<speedup>\d+\.\d{2})×$")
_HEAD = re.compile(r"^(?P<count>\d+) of the (?P<total>\d+) rows? timed on both devices (?P<words>.+?): ")
_BOUND_LINE = re.compile(r"^Of the (?P<total>\d+) rows? bound by (?P<bound>bytes|arithmetic) on the H100, "
                         r"(?P<count>\d+) moved by about the bandwidth ratio")
#: What a bound's sentence lists: the rows that went against what the bound predicts (bytes-bound
#: rows that did not move with the bandwidth, arithmetic-bound rows that did).
LISTED = {"bytes": ("; the others: ", False), "arithmetic": (": ", True)}


def _rows(count: int) -> str:
    return f"{count} row{'' if count == 1 else 's'}"


def _named(rows) -> str:
    """Rows as the sentences name them, a step's cases together: ``03 tiled (C1 1.40×, C3 1.41×)``."""
    steps: dict = {}
    for row in rows:
        steps.setdefault((row["number"], row["step"]), []).append(f"{row['case']} {row['speedup']:.2f}×")
    return ", ".join(f"{number:02d} {step} ({', '.join(cases)})" for (number, step), cases in steps.items())


def _parse(text: str) -> list[tuple[int, str, str, str]]:
    """(number, step, case, speed-up as written) of every row ``_named`` wrote into ``text``."""
    found = []
    for group in _GROUP.finditer(text):
        for part in group["cases"].split(", "):
            case = _CASE.match(part)
            if case is None:
                raise ClaimMismatch(f"{group.group(0)} names a row the page cannot read ({part!r}).",
                                    "write the sentences with crossdevice.moved_lines.")
            found.append((int(group["number"]), group["step"], case["case"], case["speedup"]))
    return found


def moved_lines(frame: pd.DataFrame, ratio: float | None, other_label: str = OTHER) -> list[str]:
    """Sentences from the table: which rows moved by about the bandwidth ratio and which did not
    (one sentence a band, naming every row of it with its speed-up), then, per bound, how many
    rows moved with the bandwidth and which went against their bound."""
    both = frame[frame["speedup"].notna()] if not frame.empty else frame
    if both.empty or ratio is None:
        return [f"No {other_label} recording of this study exists yet, so no step has a speed-up to judge."
                if both.empty else "The bandwidth of the two devices is not recorded, so no row is judged."]
    total = len(both)
    bands = {name: [] for name in BANDS}
    for _, row in both.iterrows():
        bands[band(row["speedup"], ratio)].append(row)
    lines = [f"The bandwidth ratio is {ratio:.2f}× (a row within {ABOUT:.0%} of it moved with the bandwidth)."]
    for name in BANDS:
        if bands[name]:
            lines.append(f"{len(bands[name])} of the {_rows(total)} timed on both devices {BAND_WORDS[name]}: "
                         + _named(bands[name]) + ".")
    for bound, (lead, moved_ones) in LISTED.items():
        mine = [row for _, row in both[both["bound"] == bound].iterrows()]
        if mine:
            moved = [row for row in mine if band(row["speedup"], ratio) == "bandwidth"]
            listed = moved if moved_ones else [row for row in mine if band(row["speedup"], ratio) != "bandwidth"]
            lines.append(f"Of the {_rows(len(mine))} bound by {bound} on the H100, {len(moved)} moved by about the "
                         "bandwidth ratio" + (lead + _named(listed) if listed else "") + ".")
    return lines


class ClaimMismatch(ResultsError):
    """A computed sentence says what its table does not hold."""


def _row_of(both: pd.DataFrame, key: tuple, fix: str):
    number, step, case, speedup = key
    row = both[(both["number"] == number) & (both["step"] == step) & (both["case"] == case)]
    if row.empty:
        raise ClaimMismatch(f"{number:02d} {step} {case} is not a row of the table timed on both devices.", fix)
    row = row.iloc[0]
    if f"{row['speedup']:.2f}" != speedup:
        raise ClaimMismatch(f"{number:02d} {step} {case} is said to be {speedup}×; the table gives "
                            f"{row['speedup']:.2f}×.", fix)
    return row


def check_lines(frame: pd.DataFrame, lines: list[str], ratio: float | None) -> None:
    """Raise ``ClaimMismatch`` when a sentence of ``moved_lines`` contradicts ``frame``: a row named
    in the wrong band or with a speed-up the table does not give it, a count that is not the number
    of rows it stands for, a bound's list that is not the rows it says, or a row of the table left
    out of every band."""
    both = frame[frame["speedup"].notna()] if not frame.empty else frame
    fix = "write the sentences from the table (crossdevice.moved_lines), never by hand."
    named = []
    for line in lines:
        head = _HEAD.match(line)
        if head is not None:
            words = head["words"]
            name = next((n for n, w in BAND_WORDS.items() if w == words), None)
            if name is None or ratio is None:
                raise ClaimMismatch(f"A sentence names no band the page knows: {line!r}.", fix)
            items = _parse(line[head.end():])
            if int(head["count"]) != len(items) or int(head["total"]) != len(both):
                raise ClaimMismatch(f"A sentence counts {head['count']} of {head['total']} rows but names "
                                    f"{len(items)} of {len(both)}: {line!r}.", fix)
            for key in items:
                row = _row_of(both, key, fix)
                if band(row["speedup"], ratio) != name:
                    raise ClaimMismatch(f"{key[0]:02d} {key[1]} {key[2]} is said to have {words}, but its speed-up "
                                        f"{row['speedup']:.2f}× against the bandwidth ratio {ratio:.2f}× "
                                        f"puts it in another band ({BAND_WORDS[band(row['speedup'], ratio)]}).", fix)
                named.append(key[:3])
            continue
        counted = _BOUND_LINE.match(line)
        if counted is not None:
            bound = counted["bound"]
            lead, moved_ones = LISTED[bound]
            mine = both[both["bound"] == bound]
            moved = {(int(r["number"]), r["step"], r["case"]) for _, r in mine.iterrows()
                     if ratio and band(r["speedup"], ratio) == "bandwidth"}
            if (int(counted["total"]), int(counted["count"])) != (len(mine), len(moved)):
                raise ClaimMismatch(f"The table has {len(mine)} rows bound by {bound}, {len(moved)} of them "
                                    f"moving with the bandwidth: {line!r}.", fix)
            rest = line[counted.end():]
            keys = _parse(rest)
            for key in keys:
                _row_of(both, key, fix)   # a row of the table, with its speed-up
            listed = {key[:3] for key in keys}
            everyone = {(int(r["number"]), r["step"], r["case"]) for _, r in mine.iterrows()}
            expected = moved if moved_ones else everyone - moved
            if listed != expected or (listed and not rest.startswith(lead)):
                raise ClaimMismatch(f"The sentence on the rows bound by {bound} lists {sorted(listed)}; the table "
                                    f"gives {sorted(expected)}: {line!r}.", fix)
    keys = [(int(r["number"]), r["step"], r["case"]) for _, r in both.iterrows()]
    if ratio is not None and sorted(named) != sorted(keys):
        missing = sorted(set(keys) - set(named))
        raise ClaimMismatch(f"The sentences name {len(named)} rows; the table has {len(keys)} timed on both "
                            f"devices (left out or repeated: {missing or 'a row named twice'}).", fix)


# ----------------------------------------------------------------------------- a study on two devices


@dataclass
class Comparison:
    """A study's book runs on the two devices, their table and their sentences."""

    study: object
    base: DeviceRecording
    other: DeviceRecording

    @property
    def frame(self) -> pd.DataFrame:
        if not hasattr(self, "_frame"):
            self._frame = device_frame(self.study, self.base, self.other) if self.base.found else pd.DataFrame(
                columns=FRAME_COLUMNS)
        return self._frame

    @property
    def ratio(self) -> float | None:
        return bandwidth_ratio(self.base, self.other)[0] if self.other.found else None

    def lines(self) -> list[str]:
        """The page's sentences for this study, each checked against the table and for a hole."""
        from .chapter import whole_sentence

        if not self.base.found:
            return [f"No {self.base.label} recording of this study exists yet."]
        if not self.other.found:
            return [f"No {self.other.label} recording of this study exists yet: the table gives its "
                    f"{self.base.label} run alone, and the speed-ups appear once a run on the {self.other.label} "
                    "is recorded."]
        lines = moved_lines(self.frame, self.ratio, self.other.label)
        check_lines(self.frame, lines, self.ratio)
        return [whole_sentence(line) for line in lines]

    def sentences(self):
        from IPython.display import Markdown

        from .escape import md_safe

        return Markdown("\n".join(f"- {md_safe(line)}" for line in self.lines()))

    def table(self):
        """The step table: time on each device, the speed-up, and the bound on the H100."""
        study, frame = self.study, self.frame
        if frame.empty:
            return styled(pd.DataFrame({"": [self.lines()[0]]}), f"{study.title} on two devices", wrap=True)
        out = pd.DataFrame({
            "Step": [f"{n:02d} {s}" for n, s in zip(frame["number"], frame["step"])],
            study.case_header: frame["case"], "Size": [f"{s:,}" for s in frame["size"]],
            f"{self.base.label}": frame["base_ms"].map(format_ms)})
        if self.other.found:
            out[f"{self.other.label}"] = [format_ms(v) if v is not None and v == v else note
                                          for v, note in zip(frame["other_ms"], frame["other_note"])]
            out[f"Speed-up ({self.base.label} / {self.other.label})"] = [f"{v:.2f}×" if v is not None and v == v else "–"
                                                              for v in frame["speedup"]]
        out["Bound (H100)"] = frame["bound"]
        out["FLOP/byte"] = [("–" if v is None or v != v else f"{v:.2f}" if source == "dram (ncu)" else
                             f"{v:.2f} (fewest bytes)") for v, source in zip(frame["intensity"], frame["bytes_source"])]
        out["Ridge"] = [f"{v:.1f}" if v is not None and v == v else "–" for v in frame["ridge"]]
        out["Unit"] = frame["unit"]
        runs = f"{self.base.label}: run {', '.join(self.base.runs or [self.base.run.run_id])}" + (
            f"; {self.other.label}: run {', '.join(self.other.runs or [self.other.run.run_id])}"
            if self.other.found else f"; no {self.other.label} run recorded")
        pair = (f"each step's median time on the two devices at each case's largest size timed on both; "
                f"'Speed-up' is the {self.base.label}'s time over the {self.other.label}'s"
                if self.other.found else
                f"each step's median time on the {self.base.label} at each case's largest size (no "
                f"{self.other.label} run is recorded yet, so no speed-up is drawn)")
        caption = (f"{study.title}: {pair}. 'Bound (H100)': bytes when the step's arithmetic intensity on the "
                   f"H100 (FLOPs over the DRAM bytes Nsight Compute counted, or over the fewest bytes where it "
                   f"counted none) is under the ridge point of the unit it runs on (that unit's rate over the "
                   f"bandwidth, FLOP/byte), arithmetic at or above it. [{runs}]")
        return styled(out, caption)


def compare(study) -> Comparison:
    """The book's runs of ``study`` on the H100 and the H200."""
    return Comparison(study, recorded_on(study, BASE), recorded_on(study, OTHER))


# ----------------------------------------------------------------------------- the page's parts


def banner(*comparisons: Comparison):
    """The runs the page reads, one per study and device, and plainly which are not recorded yet."""
    from IPython.display import Markdown

    from .escape import md_code, md_text

    lines = []
    for c in comparisons:
        for rec in (c.base, c.other):
            if rec.found and rec.runs:
                lines.append(f"{md_text(c.study.title)}, {rec.label}: no run holds every step; each step from the "
                             f"newest run of the {md_text(rec.run.device)} holding it: "
                             + ", ".join(md_code(r) for r in rec.runs))
            elif rec.found:
                run = rec.run
                lines.append(f"{md_text(c.study.title)}, {rec.label}: run {md_code(run.run_id)} ({md_text(run.device)}, "
                             f"{md_text(run.created_utc[:10])}, commit {md_code(run.commit)})")
            else:
                lines.append(f"{md_text(c.study.title)}, {rec.label}: no recording of this study exists yet")
    none = ("" if any(c.other.found for c in comparisons) else
            f"\n>\n> **No {OTHER} recording exists yet.** The tables give the {BASE}'s runs alone, and the "
            f"speed-ups, the figure and the sentences about them appear once a run on the {OTHER} is recorded."
            if any(c.base.found for c in comparisons) else
            f"\n>\n> **No {BASE} or {OTHER} recording of a study exists yet.** Every table, the figure and the "
            "sentences of this page appear once the book's runs of the studies on these GPUs are recorded.")
    return Markdown("> **Replayed** (this page measures nothing): the runs of each study and device, "
                    "named below and in every caption:\n>\n" + "\n".join(f"> - {line}" for line in lines) + none)


def _where(rec: DeviceRecording) -> str:
    """Where a run's rates come from, in a few words: measured in it, the datasheet, or which of each."""
    names = {"fp32_gflops": "FP32", "tf32_tensor_gflops": "TF32", "fp16_tensor_gflops": "FP16", BANDWIDTH: "bandwidth"}
    kinds = {m: ("measured in this run" if where.startswith("measured") else where) for m, where in rec.sources.items()}
    if len(set(kinds.values())) == 1:
        return next(iter(kinds.values()))
    sheet = [names[m] for m, k in kinds.items() if k != "measured in this run"]
    return f"measured in this run; {', '.join(sheet)} from the {next(k for k in kinds.values() if k.startswith('data'))}"


def rates_frame(*recordings: DeviceRecording, studies: dict | None = None) -> pd.DataFrame:
    """Each run's bandwidth and unit rates, where they come from, and its ridge points
    (``studies``: run id -> the studies it is read for)."""
    rows = []
    for rec in recordings:
        if rec.run is None:
            continue
        row = {"Device": rec.label, "Run": rec.run.run_id}
        if studies:
            row["Read for"] = ", ".join(studies.get(rec.run.run_id, []))
        row["Bandwidth"] = f"{rec.rates[BANDWIDTH]:,.0f} GB/s" if rec.rates.get(BANDWIDTH) else "not recorded"
        for metric, name, _ in ROOFS:
            value = rec.rates.get(metric)
            row[name] = f"{value:,.0f}" if value else "not recorded"
        row["Ridges (FLOP/byte)"] = " / ".join(f"{r:.1f}" if (r := rec.ridge(m)) else "–" for m, _, _ in ROOFS)
        row["Source of the rates"] = _where(rec)
        rows.append(row)
    return pd.DataFrame(rows)


def rates_table(*comparisons: Comparison):
    """The rates and ridge points of the runs the page reads (one row per device and run)."""
    studies: dict = {}
    recordings = []
    for c in comparisons:
        for rec in (c.base, c.other):
            if rec.run is not None:
                if rec.run.run_id not in studies:
                    recordings.append(rec)
                studies.setdefault(rec.run.run_id, []).append(c.study.name)
    frame = rates_frame(*recordings, studies=studies)
    if frame.empty:
        return styled(pd.DataFrame({"": ["No run of either device is recorded yet."]}), "Rates and ridge points",
                      wrap=True)
    units = ", ".join(name for _, name, _ in ROOFS)
    return styled(frame, f"The rates each run gives its steps: the bandwidth (its ceilings' copy rate; the read rate is "
                         f"on the summary), and the {units} rates in GFLOP/s; each is the ceiling measured in that "
                         "run where it holds one, else the datasheet's peak ('Source of the rates' says which). The "
                         "ridges, in the same order, are each rate over the bandwidth, in FLOPs per byte.")
