"""Tables and sentences for the book, built from recorded records only, for any study.

The page says once, in its banner, where its numbers come from (measured now or replayed, device,
UTC date, commit, run); captions carry a short tag. Which cases (layers, test cases) and which
milestone columns a table has comes from the chapter's study. Every timed table says how its
numbers were timed (CUDA-graph replays, events, a host-bound loop) in a footnote.
"""

from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path

import pandas as pd

from . import paths
from .batch_report import SOURCE_METADATA
from .errors import DataError
from .escape import html_text, md_code, md_text
from .kernels import kept_file, local_headers, read_kept
from .measure import REPLAY_TARGET_MS, TIMING_WORDS


def format_ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value / 1000:.3f} s"
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    if value >= 0.01:
        return f"{value * 1000:.1f} µs"
    return f"{value * 1000:.2f} µs"


ANY_SIZE = object()
ANY_BATCH = ANY_SIZE  # its name before sizes were called sizes (kept one release)


def find_record(records: list[dict], metric: str, layer: str, size=ANY_SIZE) -> dict | None:
    """The first record of ``metric`` for ``layer`` (a case) at ``size``, unless left out."""
    for r in records:
        if r["metric"] == metric and r["layer"] == layer and (size is ANY_SIZE or r["size"] == size):
            return r
    return None


def record_value(records: list[dict], metric: str, layer: str, size=ANY_SIZE) -> float | None:
    found = find_record(records, metric, layer, size)
    return None if found is None else found["value"]


#: Columns of words, not numbers (a write-up's file and GPU, what a row is, how a value was got, a
#: check's shape): they break over lines within ``PROSE_WIDTH``, so that a table of a few numbers
#: and a long description still fits the reading column at 1280 px.
PROSE_HEADER = re.compile(r"^(What|How|Kernel|Check|Shape|Its evidence|Source\b.*|Nsight Compute metric.*|"
                          r"Over a layer's kernels)$")
PROSE_WIDTH = {"white-space": "normal", "min-width": "9em", "max-width": "22em", "text-align": "left"}


def styled(frame: pd.DataFrame, caption: str, wrap: bool = False):
    """A pandas Styler with a caption, index hidden (renders as an HTML table that scrolls sideways
    on a narrow screen, its first column staying: see book/_static/kernelbook.css). ``wrap``: every
    cell is prose that may break over lines (a table of facts, a message) instead of numbers that
    must not; otherwise only the columns PROSE_HEADER names break."""
    classes = "kernelbook-table kernelbook-wrap" if wrap else "kernelbook-table"
    # Cells and headers hold names and values from the store: escaped, never markup.
    table = (frame.style.hide(axis="index").set_caption(html_text(caption))
             .format(escape="html").format_index(escape="html", axis=1)
             .set_table_attributes(f'class="{classes}"'))
    prose = [c for i, c in enumerate(frame.columns) if i and PROSE_HEADER.match(str(c))]
    if prose and not wrap and frame.columns.is_unique:
        table = table.set_properties(subset=prose, **PROSE_WIDTH)
    return table


def message_table(text: str, caption: str):
    """A one-cell table, where a table would stand if there were something to show."""
    return styled(pd.DataFrame({"": [text]}), caption, wrap=True)


def banner(recording):
    """The page's provenance, once, at the top: measured or replayed, device, date, commit, run;
    then any value the reader asked for that the recording does not hold."""
    from IPython.display import Markdown

    session = recording.session
    if session is None:
        text = f"**{'Damaged' if getattr(recording, 'damaged', False) else 'Not recorded'}.** {md_text(recording.label)}"
    else:
        run = session.run
        kind = "Measured now" if session.measuring else f"Replayed (not measured now: {md_text(session.reason)})"
        text = (f"**{kind}** on **{md_text(run.device)}**, {md_text(session.date)}, commit {md_code(run.commit)}, "
                f"run {md_code(run.run_id)}. "
                "Every number on this page comes from this recording unless its caption names another run.")
        from .session import pinned

        shown_run, note = pinned()
        if note and shown_run in (None, run.run_id):
            text += f" {md_text(note)}"
    warning = recording.warning() if hasattr(recording, "warning") else ""
    return Markdown(f"> {text}" + (f"\n\n{warning}" if warning else ""))


def timing_note(records: list[dict], metrics) -> str:
    """How the ``metrics`` in ``records`` were timed, in words (a table's footnote)."""
    parts = []
    for metric in metrics:
        kinds = sorted({r.get("timing") for r in records if r["metric"] == metric and r.get("timing")})
        if kinds:
            words = "; ".join(TIMING_WORDS.get(k, k) for k in kinds)
            host = [r["host_ms"] for r in records if r["metric"] == metric and r.get("host_ms") is not None]
            calls = [f"{r['calls_per_replay']} at {r['layer']}" + (f", size {r['size']:,}" if r.get("size") else "")
                     for r in records if r["metric"] == metric and r.get("calls_per_replay")]
            counts = sorted({len(r["samples"]) for r in records if r["metric"] == metric and r.get("samples")})
            words += f", median of {' or '.join(map(str, counts))} repeats" if counts else ""
            parts.append(f"{metric}: {words}"
                         + (f"; R = {'; '.join(dict.fromkeys(calls))} (chosen per case so that one replay lasts about "
                            f"{REPLAY_TARGET_MS:g} ms)" if calls else "")
                         + ("; the host's time per call is in the run's records as well (host_ms)" if host else ""))
    return ("Timed by — " + " | ".join(parts) + ".") if parts else ""


# ----------------------------------------------------------------------------- chapter tables


def _cell(r: dict | None, kind: str, spread: bool, base: dict | None = None) -> str:
    if r is None or r["value"] is None:
        return "–"
    value = r["value"]
    if kind == "speedup_vs_baseline":
        return "–" if base is None or not value else f"{base['value'] / value:.2f}"
    if kind == "ms":
        text = f"{value:.4g}"
        return text + (f" ({r['min']:.4g}–{r['max']:.4g})" if spread and r.get("min") is not None else "")
    if kind == "accuracy":
        return f"{value:.4f}"
    if kind == "rate":
        return f"{value:,.0f}"
    if kind == "speedup":
        return f"{value:.2f}×"
    if kind == "number":
        return f"{value:,.3g}"
    text = format_ms(value)
    if spread and r.get("min") is not None:
        text += f" ({format_ms(r['min'])}–{format_ms(r['max'])})"
    return text


def sizes_of(chapter) -> list[int]:
    return chapter.parameters.get(chapter.study.size_name) or sorted(
        {r["size"] for r in chapter.records if r["size"]})


def milestone_frame(chapter, spread: bool = False) -> pd.DataFrame:
    """The study's milestone table: a row per size (or per case), the study's columns; a step that
    failed its check shows ``FAILED check`` instead of any number."""
    columns = chapter.study.columns()
    if chapter.study.rows == "cases":
        return _case_rows(chapter, columns, spread)
    rows = []
    for size in sizes_of(chapter):
        row = {chapter.study.size_header: size}
        for col in columns:
            row[col.header] = (_cell(find_record(chapter.records, col.metric, col.case, size), col.kind, spread)
                               if chapter.correct else "FAILED check")
        rows.append(row)
    return pd.DataFrame(rows, columns=[chapter.study.size_header] + [c.header for c in columns])


def _case_rows(chapter, columns, spread: bool) -> pd.DataFrame:
    study = chapter.study
    baseline = None
    if any(c.kind == "speedup_vs_baseline" for c in columns):
        from .stepdata import load_recorded

        baseline = chapter if chapter.slug == study.steps.baseline.slug else load_recorded(
            study, study.steps.baseline.slug, prefer_run=chapter.session.run.run_id)
    rows = []
    for case in sizes_of(chapter):
        row = {study.case_header: case}
        for col in columns:
            r = find_record(chapter.records, col.metric, col.case or case)
            base = find_record(baseline.records, col.metric, col.case or case) if baseline is not None else None
            row[col.header] = _cell(r, col.kind, spread, base) if chapter.correct else "FAILED check"
        rows.append(row)
    return pd.DataFrame(rows, columns=[study.case_header] + [c.header for c in columns])


class Tables:
    """Several tables shown as one output, one after the other (a table split in two)."""

    def __init__(self, tables: list):
        self.tables = tables

    def to_html(self) -> str:
        return "\n".join(t.to_html() for t in self.tables)

    def _repr_html_(self) -> str:
        return self.to_html()


#: A milestone table with more timed columns than this shows the medians in one table (the
#: seeds' column order, in view at 1280 px) and their min–max in a second below it.
SPREAD_INLINE_COLUMNS = 2


def milestone_table(chapter, spread: bool = True):
    columns = chapter.study.columns()
    timed = list(dict.fromkeys(c.metric for c in columns if c.kind in ("time", "ms")))
    note = timing_note(chapter.records, timed)
    tag = f"[{chapter.recording.short_label}]"
    timed_columns = [c for c in columns if c.kind in ("time", "ms")]
    if not spread or len(timed_columns) <= SPREAD_INLINE_COLUMNS:
        caption = f"{chapter.slug}: medians{' (min–max)' if spread else ''} over the repeats. {note} {tag}"
        return styled(milestone_frame(chapter, spread=spread), caption)
    medians = styled(milestone_frame(chapter), f"{chapter.slug}: medians over the repeats "
                     f"(their min–max in the next table). {note} {tag}")
    both = milestone_frame(chapter, spread=True)
    first = both.columns[0]
    spreads = pd.DataFrame({first: both[first]})
    for c in timed_columns:
        spreads[c.header] = both[c.header].map(_spread_only)
    return Tables([medians, styled(spreads, f"{chapter.slug}: min–max over the repeats of each median "
                                            f"above. {tag}")])


def _spread_only(cell: str) -> str:
    """"1.2 ms (1.1 ms–1.3 ms)" -> "1.1 ms–1.3 ms"; a cell without a spread stays as it is."""
    found = re.search(r"\(([^()]*–[^()]*)\)$", cell)
    return found.group(1) if found else cell


#: What a check's shape holds that is not its shape: the counts derived from it.
DERIVED = ("flops", "min_bytes")


def check_frame(chapter) -> pd.DataFrame:
    """A row per check: its case and label, then the verdict (Result) and the numbers behind it,
    the shape last (it is long and wraps)."""
    rows = []
    for c in chapter.checks:
        shape = ", ".join(f"{k}={v}" for k, v in c["shape"].items() if k not in DERIVED)
        measure = c.get("measure") or "rel_l2"
        value = c.get("measured", c.get("rel_l2_error"))
        rows.append({
            chapter.study.case_header: c.get("layer", c["label"]),
            "Check": c["label"],
            "Result": "pass" if c["passed"] else f"FAIL {c.get('error') or ''}".strip(),
            "Error": "–" if value is None else f"{value:.2e}",
            "Tolerance": "–" if c.get("tolerance") is None else f"{c['tolerance']:g}",
            "Measure": measure,
            "Unwritten": "–" if c.get("unwritten") is None else c["unwritten"],
            "Shape": shape,
        })
    return pd.DataFrame(rows)


#: What each check's Measure compares the output with (a check names its measure; rel_l2 by default).
MEASURE_WORDS = {"rel_l2": "rel_l2: relative L2 error against float64",
                 "scaled_abs_diff": "scaled_abs_diff: the write-up's scaled absolute difference against the "
                                    "CPU's float32 result (each check records the relative L2 error against "
                                    "float64 too, in the run)"}


def check_table(chapter):
    n = len(chapter.checks)
    ok = sum(1 for c in chapter.checks if c["passed"])
    measures = sorted({c.get("measure") or "rel_l2" for c in chapter.checks})
    said = "; ".join(MEASURE_WORDS.get(m, m) for m in measures)
    ranged = any(str(c.get("label", "")).startswith("range") for c in chapter.checks)
    caption = (f"Correctness on fresh random inputs, output poisoned with NaN before the launch: "
               f"{ok}/{n} passed; Error is the check's Measure ({said}), Unwritten the "
               f"outputs the kernel left as NaN; a check on a random shape, which belongs to no one case, "
               f"names every case in the first column"
               + ("" if ranged else "; no range checks (inputs and weights from 1e-6 to 1e6 in magnitude): they are "
                  "asked only of the steps that claim FP32 accuracy over that whole range, which this one does not") + f". [{chapter.recording.short_label}]")
    return styled(check_frame(chapter), caption)


def throughput(chapter) -> pd.DataFrame:
    """GFLOP/s and GB/s (fewest bytes a kernel must move) per case and size, from the time metric."""
    rows = []
    for r in chapter.records:
        if r["metric"] != chapter.study.time_metric or r["value"] is None or not r.get("flops"):
            continue
        seconds = r["value"] / 1000
        rows.append({"layer": r["layer"], "size": r["size"], "op_time_ms": r["value"],
                     "gflops": r["flops"] / seconds / 1e9, "gbytes_per_s": r["min_bytes"] / seconds / 1e9})
    return pd.DataFrame(rows, columns=["layer", "size", "op_time_ms", "gflops", "gbytes_per_s"])


def throughput_table(chapter):
    frame = throughput(chapter)
    if frame.empty:
        return message_table("no timings (the check failed)", chapter.recording.short_label)
    out = pd.DataFrame({
        chapter.study.case_header: frame["layer"],
        chapter.study.size_header: frame["size"],
        "Time": frame["op_time_ms"].map(format_ms),
        "GFLOP/s": frame["gflops"].map(lambda v: f"{v:,.0f}"),
        "GB/s (fewest bytes)": frame["gbytes_per_s"].map(lambda v: f"{v:,.1f}"),
    })
    return styled(out, f"Achieved throughput from the medians. [{chapter.recording.short_label}]")


def _role(name: str) -> str:
    return name.split(":")[0]


def _builds_on(other, current) -> str:
    """", the step this one builds on" where ``other`` is the previous step by ``builds_on`` and not
    the one just before ``current`` in the list (the tables call it the previous step either way)."""
    step = getattr(current, "step", None)
    if getattr(step, "builds_on", None) != other.slug:
        return ""
    slugs = current.study.steps.slugs()
    index = slugs.index(step.slug)
    return "" if index and slugs[index - 1] == other.slug else ", the step this one builds on"


def delta_table(steps: dict):
    """The time metric of this step beside the baseline's and the previous step's, with speedups."""
    names = list(steps)
    current = steps[names[-1]]
    metric = current.study.time_metric
    rows = []
    for case in current.study.cases:
        sizes = sorted({r["size"] for r in current.records if r["metric"] == metric and r["layer"] == case})
        for size in sizes:
            row = {current.study.case_header: case, current.study.size_header: size}
            mine = find_record(current.records, metric, case, size) if current.correct else None
            # The comparison first (this step, then its speed-ups), the steps it is compared with
            # after: on a narrow page the columns the verdict rests on stay in view.
            row[f"{_role(names[-1]).capitalize()} ({current.slug})"] = format_ms(mine["value"]) if mine else "–"
            found = {name: find_record(steps[name].records, metric, case, size) if steps[name].correct else None
                     for name in reversed(names[:-1])}
            for name, theirs in found.items():
                row[f"speed-up vs {_role(name)}"] = (f"{theirs['value'] / mine['value']:.2f}×"
                                                     if theirs and mine else "–")
            for name, theirs in found.items():
                row[f"{_role(name).capitalize()} ({steps[name].slug})"] = format_ms(theirs["value"]) if theirs else "–"
            rows.append(row)
    tags = " | ".join(f"{_role(n)}: {ch.recording.short_label}" for n, ch in steps.items())
    return styled(pd.DataFrame(rows), f"{metric} against earlier steps (medians). [{tags}]")


def step_verdict(steps: dict, size: int | None = None, metric: str = "op_time_ms") -> list[str]:
    """Did this step pay off? Its ``metric`` against the baseline's and the previous step's, per case."""
    names = list(steps)
    current = steps[names[-1]]
    if not current.correct:
        return ["This step failed its correctness check, so it takes no part in the comparison."]
    timed = [r for r in current.records if r["metric"] == metric]
    if not timed:
        return ["Nothing was timed for this step."]
    lines = []
    for case in current.study.cases:
        sizes = [r["size"] for r in timed if r["layer"] == case]
        if not sizes:
            continue
        size_here = size or max(sizes)
        mine = find_record(current.records, metric, case, size_here)
        for name in names[:-1]:
            other = steps[name]
            theirs = find_record(other.records, metric, case, size_here) if other.correct else None
            if not (mine and theirs):
                continue
            if other.session.run.device != current.session.run.device:  # never a ratio across devices
                lines.append(f"{case}: the {_role(name)} ({other.slug}) is recorded only on "
                             f"{other.session.run.device} (run {other.session.run.run_id}), another device: "
                             "no ratio is drawn.")
                continue
            ratio = theirs["value"] / mine["value"]
            word = (f"{ratio:.2f}× faster than" if ratio >= 1.05 else
                    f"{1 / ratio:.2f}× slower than" if ratio <= 0.95 else "within 5 % of")
            elsewhere = ("" if other.session.run.run_id == current.session.run.run_id else
                         f", run {other.session.run.run_id}")
            what = "" if metric == current.study.time_metric else f" ({metric})"
            lines.append(f"{case} at {current.study.size_header.lower()} {size_here:,}{what}: {format_ms(mine['value'])}, "
                         f"{word} the {_role(name)} ({other.slug}{_builds_on(other, current)}, "
                         f"{format_ms(theirs['value'])}{elsewhere}).")
    return lines or ["No earlier step is recorded at these sizes to compare with."]


class SourceBlock:
    """A kernel's source as a highlighted block, carrying the file's path and sha256 in the
    output's metadata, so that a strict build can refuse a page whose ``.cu`` changed after the
    page was executed (it would show the old source)."""

    def __init__(self, relpath: str, text: str, sha256: str, headers: list | None = None,
                 header_digests: dict | None = None, folder: str = "kernels/"):
        self.relpath, self.text, self.sha256 = relpath, text, sha256
        self.folder = folder  # where the files lie, from the repository's root (a candidate's: in its run)
        self.headers = headers or []  # (relpath, text) of the local headers the file includes
        self.header_digests = header_digests or {}  # relpath -> sha256 of the header's bytes

    def __repr__(self) -> str:
        return f"{self.folder}{self.relpath}"

    @property
    def data(self) -> str:
        """The Markdown, as ``IPython.display.Markdown(...).data`` would hold it."""
        return self._repr_markdown_()[0]

    def _metadata(self) -> dict:
        shown = {"path": f"{self.folder}{self.relpath}", "sha256": self.sha256}
        if self.headers:  # an edited header makes the page stale too (executed.stale_sources)
            shown["headers"] = {f"{self.folder}{path}": self.header_digests[path] for path, _ in self.headers}
        return {SOURCE_METADATA: shown}

    def _repr_html_(self):
        """A ``<details>`` block with the highlighted code, and each header it includes below it:
        labelled, closed until opened."""
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import CudaLexer

        def block(path: str, text: str, what: str) -> str:
            lines = text.count("\n") + 1
            code = highlight(text, CudaLexer(), HtmlFormatter(cssclass="highlight"))
            return (f'<details class="kernelbook-source"><summary>{what}: <code>{html.escape(self.folder + path)}'
                    f"</code> ({lines} lines; click to open)</summary>\n"
                    f'<div class="highlight-cuda notranslate">{code}</div></details>')

        body = block(self.relpath, self.text, "Kernel source")
        body += "".join("\n" + block(path, text, "Included header") for path, text in self.headers)
        return body, self._metadata()

    def _repr_markdown_(self):
        shown = self.text + "".join(text for _, text in self.headers)
        longest = max((len(m) for m in re.findall(r"`{3,}", shown)), default=0)
        fence = "`" * max(3, longest + 1)
        body = f"{md_code(self.folder + self.relpath)}\n\n{fence}cuda\n{self.text}\n{fence}"
        for path, text in self.headers:  # the shared device code the step includes, shown whole
            body += f"\n\nIncluded: {md_code(self.folder + path)}\n\n{fence}cuda\n{text}\n{fence}"
        return body, self._metadata()


def show_source(relpath: str, start: str | None = None, folder: Path | None = None):
    """The kernel source from ``kernels/`` (never pasted into a notebook) in its own block, labelled
    with its file and closed until the reader opens it; the output carries the file's sha256.
    ``folder``: where ``relpath`` and its headers lie instead (a candidate's files kept in its run)."""

    root = paths.kernels_dir() if folder is None else Path(folder)
    path = kept_file(relpath, root)
    if path is None:
        raise DataError(f"Kernel source {root / relpath} does not exist.", "check the step list's file stem.")
    text = read_kept(path).decode("utf-8", errors="replace")
    if start:
        index = text.find(start)
        text = text[index:] if index >= 0 else text
    digests: dict[str, str] = {}
    headers = included_headers(relpath, digests, root)
    shown = "kernels/" if folder is None else _from_repo(root)
    return SourceBlock(_stored(path, root), text, _sha256(path), headers, digests, shown)


def _stored(path: Path, root: Path) -> str:
    """The name of the file as it lies under ``root`` (a kept copy with its ``.gz``): what the page
    labels and what ``executed.stale_sources`` hashes again."""
    return path.relative_to(root).as_posix()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _from_repo(folder: Path) -> str:
    """``folder`` as a page names it: from the repository's root where it lies inside, with a slash."""
    try:
        return Path(folder).resolve().relative_to(paths.REPO_ROOT.resolve()).as_posix() + "/"
    except ValueError:
        return Path(folder).resolve().as_posix() + "/"


def included_headers(relpath: str, digests: dict | None = None, folder: Path | None = None) -> list[tuple[str, str]]:
    """The local headers (``#include "x.cuh"``) a kernel file includes, depth first, each once
    (headers that include each other are walked once); ``digests`` receives each header's sha256
    of its bytes, as ``executed.stale_sources`` hashes them."""
    root = paths.kernels_dir() if folder is None else Path(folder)
    seen: list[tuple[str, str]] = []
    for child in local_headers(relpath, root):
        path = kept_file(child, root)
        seen.append((_stored(path, root), read_kept(path).decode("utf-8", errors="replace")))
        if digests is not None:
            digests[_stored(path, root)] = _sha256(path)
    return seen


# ----------------------------------------------------------------------------- grids


def grid_table(grid):
    """Every configuration of a grid: its status and its time per case and size."""
    frame = grid.frame()
    metric = grid.parameters["metric"]
    frame = frame[frame["metric"] == metric]
    rows = []
    for (label, layer), group in frame.groupby(["config_label", "layer"], sort=False):
        row = {"Configuration": label, "Layer": layer, "Check": group["status"].iloc[0]}
        for _, r in group.sort_values("size").iterrows():
            row[f"B={r['size']}"] = format_ms(r["value"]) if r["value"] == r["value"] and r["value"] is not None else "–"
        rows.append(row)
    what = metric.replace("_ms", "").replace("_", " ")
    return styled(pd.DataFrame(rows), f"{grid.step}: {what} (median) of every configuration. [{grid.short_label}]")


def best_config_table(grid, layers=None):
    layers = layers or grid.cases
    rows = [{"Layer": layer, "Best configuration": ", ".join(f"{k}={v}" for k, v in grid.best(layer).items())}
            for layer in layers]
    return styled(pd.DataFrame(rows), f"Fastest correct configuration per layer at the largest batch. [{grid.short_label}]")
