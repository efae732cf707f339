"""What the compiler did with each step: ptxas resources and the SASS instruction mix.

Recorded with the run (part ``<study>-<step>-compiler``) so that a replay shows the evidence of
the build that was timed. ``nvcc`` makes the cubin for sm_90 (the H100's architecture) with the
parameters each case used; ``cuobjdump -sass`` disassembles it where it is installed (on the
device machine; the report says when it was not).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess

from .. import kernels, results
from .. import session as session_mod
from ..errors import KernelbookError

SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\b")
SHOWN_OPCODES = ("FFMA", "FMUL", "FADD", "HFMA2", "HMMA", "HGMMA", "UTMALDG", "UBLKCP", "LDGSTS", "IMAD", "IADD3", "LDG", "LDS", "LDC", "ULDC", "LDL",
                 "STG", "STS", "STL", "BAR", "BRA")


def cuobjdump_path() -> str | None:
    return shutil.which("cuobjdump") or shutil.which("cuobjdump", path="/usr/local/cuda/bin")


def sass_counts(cubin) -> dict[str, collections.Counter]:
    """Opcode counts per kernel function in a cubin (static counts, not executed ones)."""
    tool = cuobjdump_path()
    if tool is None:
        return {}
    text = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True, timeout=120).stdout
    counts: dict[str, collections.Counter] = {}
    current = None
    for line in text.splitlines():
        if "Function :" in line:
            current = counts.setdefault(line.split("Function :", 1)[1].strip(), collections.Counter())
            continue
        match = SASS_LINE.search(line)
        if match and current is not None:
            current[match.group(1)] += 1
    return counts


def collect(study, step: str, case_params: dict) -> list[dict]:
    """Compile each case's configuration with nvcc and describe every kernel in it."""
    impl = study.impl(step)
    records = []
    built = {}
    for case in study.cases:
        params = impl.params(**case_params.get(case, {}))
        problem = compiled_problem(study, case)
        defines = impl.defines(params, problem)
        source = impl.source_for(params, problem)
        key = (source, tuple(sorted(defines.items())))
        if key not in built:
            cubin, report = kernels.compile_cubin(source, defines, arch=build_arch(impl, params, problem))
            built[key] = (report, sass_counts(cubin))
        report, sass = built[key]
        launched = impl.kernels_for(params, problem)
        for fn in report:
            if launched is not None and fn.name not in launched:
                continue  # compiled into the file for another path, never launched for this case
            base = {"kernel": fn.name, "source": source, "built_for": study.size_of(case, 1)}
            for metric in ("registers", "shared_bytes", "constant_bytes", "stack_frame_bytes",
                           "spill_store_bytes", "spill_load_bytes"):
                records.append(results.record(study.name, step, case, None, metric, getattr(fn, metric), **base))
            for opcode, count in sorted(sass.get(fn.name, {}).items()):
                records.append(results.record(study.name, step, case, None, f"sass_{opcode}", count, **base))
    return records


def for_chapter(chapter) -> session_mod.Recording:
    """The compiler evidence of a chapter's build: recorded into its run when it measures, read
    from its run (or the newest run that has it) when it replays."""
    study = chapter.study
    case_params = chapter.case_params()
    run = chapter.session.run

    def measure() -> session_mod.Measurement:
        return session_mod.Measurement(collect(study, chapter.slug, case_params))

    def available() -> tuple[bool, str]:
        return (True, "") if shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin") else (
            False, "nvcc is not installed here, so the compiler report shows the recording")

    mode = "measure" if chapter.session.measuring else "replay"
    return session_mod.recorded(study.part(chapter.slug, "compiler"), study.name, measure, available=available,
                                parameters={study.case_params_name: chapter.parameters.get(study.case_params_name) or {},
                                            "sass": cuobjdump_path() is not None},
                                mode=mode, run_id=run.run_id if mode == "measure" else None, prefer_run=run.run_id,
                                required=False, compare={})


def build_arch(impl, params, problem) -> str | None:
    """The target the kernels that run ``problem`` are built for: the step's ``arch``, or, for a step
    that hands a case to another step's kernels (``arch_for``), that step's."""
    arch_for = getattr(impl, "arch_for", None)
    return arch_for(params, problem) if arch_for is not None else getattr(impl, "arch", "sm_90")


def compiled_problem(study, case: str):
    """The problem each case is compiled for: the case's own size where the study fixes one (a step
    may build or launch other kernels at other sizes: the MLP's steps 15 and 18 switch kernels by
    the number of columns), else one item."""
    return study.problem(case, study.size_of(case, 1))


def _build(impl, params, problem):
    return impl.source_for(params, problem), impl.defines(params, problem), impl.kernels_for(params, problem)


def stale_cases(chapter, records: list[dict]) -> list[str]:
    """Cases whose recorded rows describe another build than the case runs now: rows built for
    another size (``built_for``; recordings made before the report compiled each case at its own size
    carry none and were built for one item), where that size builds another kernel or other defines."""
    study, impl = chapter.study, chapter.study.impl(chapter.slug)
    case_params = chapter.case_params()
    stale = []
    built = {r["layer"]: r.get("built_for") for r in records if r.get("built_for") != study.size_of(r["layer"], 1)}
    for case, size in built.items():
        params = impl.params(**case_params.get(case, {}))
        try:
            then = study.problem(case, size if size is not None else 1)
            differs = _build(impl, params, then) != _build(impl, params, compiled_problem(study, case))
        except Exception:  # noqa: BLE001 - a case one item cannot even describe: its old rows are no evidence
            differs = True
        if differs:
            stale.append(case)
    return stale


def launched(chapter, records: list[dict], stale: list[str] | None = None) -> list[dict]:
    """Only the kernels the chapter's step launches for each case (a recording made before this
    filter existed may hold the never-launched stubs of other paths), and none of a stale case
    (``stale``: ``stale_cases`` of these records, when the caller has it already)."""
    impl = chapter.study.impl(chapter.slug)
    case_params = chapter.case_params()
    keep = {}
    cases = chapter.study.cases
    if chapter.study.rows == "cases":  # only the cases the chapter timed
        cases = [c for c in cases if c in (chapter.parameters.get(chapter.study.size_name) or cases)]
        records = [r for r in records if r["layer"] in cases]
    stale = set(stale_cases(chapter, records) if stale is None else stale)
    records = [r for r in records if r["layer"] not in stale]
    from ..limits import as_recorded

    for case in cases:
        with as_recorded(getattr(chapter, "session", None)):   # the kernels its recording's GPU launched
            names = impl.kernels_for(impl.params(**case_params.get(case, {})), compiled_problem(chapter.study, case))
        keep[case] = None if names is None else set(names)
    return [r for r in records if keep.get(r["layer"]) is None or r.get("kernel") in keep[r["layer"]]]


def table(found: session_mod.Recording, chapter=None):
    """Registers, shared memory and spills, then the SASS mix, per kernel and case."""
    import pandas as pd

    from ..report import message_table, styled

    stale = stale_cases(chapter, found.records) if chapter is not None and found.found else []
    records = launched(chapter, found.records, stale) if chapter is not None else found.records
    stale_note = (f" Not shown for {', '.join(stale)}: this run's report compiled {'that case' if len(stale) == 1 else 'those cases'} "
                  "for another size than the case runs, which builds other kernels or defines (a defect of the "
                  "report, fixed after this run; a later recording will show them)." if stale else "")
    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in records])
    if not found.found or frame.empty:
        if stale:
            return message_table("not shown", f"Compiler report of this step.{stale_note} [{found.short_label}]")
        return message_table("no kernels", "No compiler evidence was recorded for this step.")
    wide = frame.pivot_table(index=["kernel", "layer"], columns="metric", values="value", aggfunc="first")
    keep = [c for c in ("registers", "shared_bytes", "spill_store_bytes", "stack_frame_bytes") if c in wide]
    keep += [f"sass_{op}" for op in SHOWN_OPCODES if f"sass_{op}" in wide]
    wide = wide[keep].fillna(0).astype(int)
    # Transposed: a row per quantity, a column per kernel and case, so that the table is as wide as
    # the kernels a step launches (one to four), not as wide as the SASS opcodes it counts.
    tall = wide.T
    tall.columns = [f"{kernel} ({layer})" for kernel, layer in tall.columns]
    tall.insert(0, "ptxas / SASS", [c.replace("sass_", "") for c in tall.index])
    impl = chapter.study.impl(chapter.slug) if chapter is not None else None
    arch = None
    if impl is not None:   # a step that routes a case to another step's kernels builds for that step's target
        from .. import limits

        try:
            case = chapter.study.cases[0]
            with limits.as_recorded(found.session):   # routed as on the device the table was recorded on
                arch = build_arch(impl, impl.params(**chapter.case_params().get(case, {})),
                                  compiled_problem(chapter.study, case))
        except KernelbookError:   # a case the recorded parameters no longer build: the step's own target
            arch = getattr(impl, "arch", None)
    arch = arch or "sm_90"
    note = "" if any(c.startswith("sass_") for c in frame["metric"]) else " (no SASS: cuobjdump was not installed where this was recorded)"
    return styled(tall.reset_index(drop=True), f"ptxas report (registers per thread, shared memory and spills in "
                                               f"bytes; shared_bytes is the static shared memory only: what a kernel "
                                               f"asks for at launch, its dynamic shared memory, is in the profiler "
                                               f"table) and static SASS instruction counts per kernel and case, "
                                               f"{arch}{note}.{stale_note} [{found.short_label}]")
