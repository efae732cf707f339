"""compute-sanitizer (memcheck, racecheck, ...) over every step's launches, recorded per study by
``scripts/sanitize.py`` and shown on the study's profiles page."""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from .. import results
from ..report import message_table, styled
from .tools import NOT_RECORDED, ProfilerUnavailable, _run, _tail, classify_failure, sanitizer_path, target_command

SANITIZER_SIZE = 4



_SUMMARY = re.compile(r"ERROR SUMMARY:\s*([\d,]+)\s+errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY:\s*([\d,]+)\s+hazards? displayed\s*\(([\d,]+)\s+errors?,\s*([\d,]+)\s+warnings?\)")


def parse_sanitizer_summary(text: str) -> dict:
    """``ERROR SUMMARY: N errors`` -> {"errors": N}; racecheck's ``RACECHECK SUMMARY: H hazards displayed
    (E errors, W warnings)`` adds hazards and gives E errors when no ERROR SUMMARY line is printed (as
    compute-sanitizer 2025.x's racecheck does); errors None when neither line is there."""
    found = _SUMMARY.findall(text)
    summary: dict = {"errors": int(found[-1].replace(",", "")) if found else None}
    hazards = _HAZARDS.findall(text)
    if hazards:
        shown, errors, warnings = (int(v.replace(",", "")) for v in hazards[-1])
        summary.update(hazards=shown, hazard_errors=errors, hazard_warnings=warnings)
        if summary["errors"] is None:  # racecheck (2025.x) prints only its own summary line
            summary["errors"] = errors
    return summary


def sanitizer_command(study, tool: str, step: str, layer_params: dict, size: int, layers: Iterable[str],
                      sanitizer: str | None = None) -> list[str]:
    smaller = any(study.sanitizer_problem(layer) is not None for layer in layers)
    return [sanitizer or sanitizer_path() or "compute-sanitizer", "--tool", tool, "--error-exitcode", "1",
            "--print-limit", "20", *target_command(study, step, layer_params, size, layers),
            *(["--sanitizer-shape"] if smaller else [])]


def run_sanitizer(study, tool: str, step: str, layer_params: dict | None = None, size: int = SANITIZER_SIZE,
                  layers: Iterable[str] | None = None, timeout: float = 600) -> dict:
    """Run compute-sanitizer ``tool`` (memcheck, racecheck, ...) over one step's launches.

    Returns {"errors", "rc", "passed", "command", "log_tail", ...}; raises ``ProfilerUnavailable``
    when compute-sanitizer is missing or cannot use the GPU.
    """
    sanitizer = sanitizer_path()
    if not sanitizer:
        raise ProfilerUnavailable("compute-sanitizer is not installed here.",
                                  "install the CUDA toolkit (it ships compute-sanitizer) or add it to PATH.")
    layers = list(layers or study.cases)
    cmd = sanitizer_command(study, tool, step, {l: (layer_params or {}).get(l) or {} for l in layers}, size, layers,
                            sanitizer)
    rc, out, err = _run(cmd, timeout)
    text = out + "\n" + err
    summary = parse_sanitizer_summary(text)
    if summary["errors"] is None:
        why = classify_failure(text) or f"it printed no ERROR SUMMARY (exit status {rc})"
        raise ProfilerUnavailable(f"compute-sanitizer --tool {tool} did not check {step}: {why}.\n{_tail(text, 12)}",
                                  "run the command alone on the GPU machine to see why.")
    summary.update(rc=rc, passed=summary["errors"] == 0 and rc == 0, command=" ".join(cmd), log_tail=_tail(text, 30))
    return summary


def sanitizer_record(study, tool: str, step: str, layer: str, size: int, summary: dict) -> dict:
    problem = study.sanitizer_problem(layer)   # the smaller problem launched instead of the case's own
    return results.record(study.name, step, layer, size, "sanitizer_errors", summary["errors"], unit="errors",
                          tool=tool, rc=summary["rc"], passed=summary["passed"],
                          **({"shape": dataclasses.asdict(problem)} if problem is not None else {}),
                          **{k: summary[k] for k in ("hazards", "hazard_errors", "hazard_warnings") if k in summary})


def part(study) -> str:
    return results.part_name(study.name, "sanitizer")


def sanitizer_table(study, prefer_run: str | None = None):
    """The recorded sanitizer results (part ``<study>-sanitizer``), step by case by tool.

    Runs often re-check only the steps that changed, so every run's results are merged: each
    (step, case, tool) shows its newest result, with the run it comes from. A newer partial run
    never hides an older run's checks of the other steps.
    """
    import pandas as pd

    from ..session import shown_here

    runs = [run for run in results.runs_with(part(study)) if shown_here(run)]   # this page's GPU or run only
    if not runs:
        return message_table(f"No compute-sanitizer results are recorded ({NOT_RECORDED}); run "
                             f"`python scripts/sanitize.py --study {study.module}` on the GPU machine.", "compute-sanitizer")
    newest: dict = {}
    for run in runs:  # oldest first: later runs overwrite
        for r in run.read_part(part(study))["records"]:
            if r["step"] in study.steps.slugs():  # a step since renamed or removed is not shown
                newest[(r["step"], r["layer"], r.get("tool"))] = (r, run.run_id)
    # Every step and case has its row, in the step list's order: one never checked shows as such.
    rows: dict = {(step, case): {"Step": step, study.case_header: case}
                  for step in study.steps.slugs() for case in study.cases}
    for (step, layer, tool), (r, run_id) in newest.items():
        row = rows.setdefault((step, layer), {"Step": step, study.case_header: layer})
        value = r["value"]
        row[tool] = ("did not run" if value is None else
                     "pass (0 errors)" if value == 0 and r.get("passed", True) else
                     f"FAIL (exit status {r.get('rc')})" if value == 0 else f"FAIL ({int(value)} errors)")
        row[f"{tool} run"] = run_id
    smaller = {r["layer"]: r["shape"] for r, _ in newest.values() if isinstance(r.get("shape"), dict)}
    used = sorted({run_id for _, run_id in newest.values()})
    devices = sorted({run.device for run in runs if run.run_id in used})
    frame = pd.DataFrame(list(rows.values())).fillna(NOT_RECORDED)   # a tool this case was never checked with
    shown = "; ".join(f"{layer}: " + ", ".join(f"{k}={v}" for k, v in shape.items()) for layer, shape in sorted(smaller.items()))
    return styled(frame, f"compute-sanitizer over every kernel, one small launch per case"
                         f"{f' (where a row checked a smaller problem than its case: {shown})' if smaller else ''}; "
                         f"each row from its newest run (runs {', '.join(used)}; {', '.join(devices)}).")
