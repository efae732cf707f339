"""``kernelbook compare RUN_A RUN_B``: two recorded runs side by side, noise-aware.

For every (study, step, case, size, metric) present in both runs: the two medians, their ratio
(B / A), each one's spread from its recorded samples (max − min), and a verdict — *same* unless
the difference of the medians exceeds the noise band, then *faster* or *slower* (for times;
*higher*/*lower* for other metrics, *better*/*worse* where the direction is known).

The noise band is the larger of the two spreads and ``MIN_NOISE`` (2 %) of the larger median: a
value measured once (a single Nsight Compute pass, a count) has no spread of its own, and a 0.2 %
difference between two such values is not a regression. Runs of different devices are compared
with a warning in the header: their timings say more about the devices than about the code.

Exit status of ``kernelbook compare``: 0 when nothing regressed, 1 when something did (slower or
worse beyond the band), 2 when it refused (an unknown run or study, a damaged run, two runs with
no measurement in common: a gate that compared nothing has not passed).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import results
from .errors import ResultsError

#: The smallest noise band, as a fraction of the larger median (see the module's docstring).
MIN_NOISE = 0.02

KEY = ("study", "step", "layer", "size", "metric")
HIGHER_IS_BETTER = ("gflops", "accuracy", "copy_gbs", "fp32_gflops", "fp16_tensor_gflops", "tf32_tensor_gflops")


@dataclass
class Row:
    key: tuple
    a: float
    b: float
    spread_a: float
    spread_b: float
    unit: str

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a else None

    @property
    def band(self) -> float:
        """The difference below which the two values are the same (see ``MIN_NOISE``)."""
        return max(self.spread_a, self.spread_b, MIN_NOISE * max(abs(self.a), abs(self.b)))

    @property
    def verdict(self) -> str:
        if abs(self.b - self.a) <= self.band:
            return "same"
        metric = self.key[4]
        lower_better = metric.endswith("_ms") or metric.endswith("_time")
        if lower_better:
            return "faster" if self.b < self.a else "slower"
        if metric in HIGHER_IS_BETTER:
            return "better" if self.b > self.a else "worse"
        return "higher" if self.b > self.a else "lower"

    @property
    def regression(self) -> bool:
        return self.verdict in ("slower", "worse")


def _spread(record: dict) -> float:
    samples = record.get("samples")
    if isinstance(samples, list) and len(samples) > 1:
        return float(max(samples) - min(samples))
    if record.get("min") is not None and record.get("max") is not None:
        return float(record["max"] - record["min"])
    return 0.0


def _numbers(run: results.Run, study: str | None) -> dict:
    found = {}
    for name in run.part_names():
        part = results.readable_part(run, name)
        if part is None:
            continue
        for record in part["records"]:
            if study and record["study"] != study:
                continue
            if isinstance(record.get("value"), (int, float)) and not isinstance(record["value"], bool):
                # Several records can share (step, case, size, metric): a grid's configurations, a
                # build's kernels, a sanitizer's tools. What tells them apart is part of the key.
                detail = "/".join(str(record[k]) for k in ("config_label", "kernel", "tool") if record.get(k))
                found.setdefault(tuple(record.get(k) for k in KEY) + (name, detail), record)
    return found


def _studies(run: results.Run) -> set:
    found = set()
    for name in run.part_names():
        part = results.readable_part(run, name)
        if part is not None:
            found.add(part["study"])
            found.update(r["study"] for r in part["records"])
    return found


def find_run(run_id: str) -> results.Run:
    """A run of the book's store or, when that has no such folder, of the development store
    (``kernelbook try``)."""
    from . import paths

    results.validate_run_id(run_id)
    book, dev = paths.results_dir(), paths.dev_results_dir()
    if not (book / run_id).exists() and (dev / run_id).is_dir():
        return results.load_run(run_id, dev)
    if not (book / run_id).exists():
        raise ResultsError(f"No recorded run {run_id} under {book} or {dev}.",
                           "list the recorded runs with `kernelbook results --runs` (development runs: "
                           "`kernelbook results --runs --dev`).")
    return results.load_run(run_id)


def compare_runs(run_a: str, run_b: str, study: str | None = None,
                 require_common: bool = False) -> tuple[list[str], list[Row]]:
    """The header lines and one row per measurement present in both runs (``require_common``:
    none is a ``ResultsError`` that says what each run holds)."""
    a, b = find_run(run_a), find_run(run_b)
    if study:
        present = sorted(_studies(a) | _studies(b))
        if study not in present:
            raise ResultsError(f"Neither run {a.run_id} nor {b.run_id} holds measurements of a study {study!r}; they "
                               f"hold: {', '.join(present) or 'nothing'}.",
                               f"pass --study as one of {', '.join(present)}, or leave it out." if present
                               else "pick runs that hold measurements (`kernelbook results --runs`).")
    header = [f"{name}: {run.run_id} ({run.device}, {run.created_utc}, commit {run.commit})"
              + (f", candidate {run.manifest['candidate'].get('label', '')} for step "
                 f"{run.manifest['candidate'].get('step', '')}" if results.is_candidate(run) else "")
              for name, run in (("A", a), ("B", b))]
    if a.device != b.device:
        header.append(f"WARNING: the runs were measured on different devices ({a.device} vs {b.device}); "
                      "differences in time say more about the devices than about the code.")
    numbers_a, numbers_b = _numbers(a, study), _numbers(b, study)
    rows = [Row(key, ra["value"], numbers_b[key]["value"], _spread(ra), _spread(numbers_b[key]), ra.get("unit") or "")
            for key, ra in numbers_a.items() if key in numbers_b]
    rows.sort(key=lambda r: tuple("" if v is None else str(v) for v in r.key))
    if require_common and not rows:
        def holds(numbers: dict) -> str:
            studies = sorted({str(key[0]) for key in numbers})
            return (f"{len(numbers)} measurement(s) of {', '.join(studies)}" if numbers
                    else "no readable measurement" + (f" of {study}" if study else ""))

        raise ResultsError(f"Runs {a.run_id} and {b.run_id} have nothing in common to compare: {a.run_id} holds "
                           f"{holds(numbers_a)}, {b.run_id} holds {holds(numbers_b)}.",
                           "compare two runs that measured the same steps (`kernelbook results --runs` lists what "
                           "each holds), or pass --study with a study both hold.")
    return header, rows


def render(header: list[str], rows: list[Row], fmt: str = "md") -> str:
    """A Markdown table with the runs in a header, or plain CSV (a header row, then one row per
    measurement: nothing else, so any CSV reader takes it)."""
    columns = ["study", "step", "case", "size", "metric", "part", "detail", "A", "B", "B/A", "spread A", "spread B",
               "band", "verdict"]
    body = []
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.3f}"
        body.append([*("" if v is None else str(v) for v in r.key), f"{r.a:.6g}", f"{r.b:.6g}", ratio,
                     f"{r.spread_a:.3g}", f"{r.spread_b:.3g}", f"{r.band:.3g}", r.verdict])
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(body)
        return out.getvalue()
    escape = str.maketrans({"|": "\\|", "\n": " "})
    lines = [f"{line}  " for line in header] + [
        f"Same unless the medians differ by more than the band: the larger spread (max − min of the samples), "
        f"and at least {MIN_NOISE:.0%} of the larger median.  ",
        "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell.translate(escape) or "–" for cell in row) + " |" for row in body]
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("same", "faster", "slower", "better", "worse",
                                                                   "higher", "lower")}
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "nothing in common"]
    return "\n".join(lines) + "\n"
