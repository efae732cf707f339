"""Nsight Compute per step: profile the step's launches (or replay the profile), then show its
metrics beside the baseline's and the previous step's, and the top warp-stall reasons.

A chapter that measures also profiles its step (part ``<study>-<step>-ncu``) in the same run;
a replay reads the part back. One ncu process covers every case; kernels are attributed to a case
by NVTX range, and when that fails one ncu process per case runs without the filter.
"""

from __future__ import annotations

from typing import Iterable

from .. import results
from .. import session as session_mod
from ..phases import timed
from ..report import message_table, record_value, styled
from .ncu_metrics import COMPARED, SPECS, available_metrics, base_name, records_from_csv, resolve_metrics, top_stalls
from .target import range_name
from .tools import (
    NOT_RECORDED,
    ProfilerUnavailable,
    _run,
    _tail,
    classify_failure,
    ncu_path,
    ncu_version,
    profiling_enabled,
    target_command,
)

NCU_TIMEOUT_S = 300


def ncu_command(ncu: str, study, step: str, case_params: dict, size: int, cases: Iterable[str],
                metrics: Iterable[str], nvtx: bool = True) -> list[str]:
    """The exact command: one ncu process over the step's cases, raw page as CSV on stdout."""
    cases = list(cases)
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "--print-units", "base", "--metrics", ",".join(metrics)]
    if nvtx:
        cmd += ["--nvtx"]
        for case in cases:  # push/pop ranges are matched with a trailing '/'; several includes OR
            cmd += ["--nvtx-include", f"{range_name(step, case)}/"]
    return cmd + target_command(study, step, case_params, size, cases)


def _unknown_metrics(output: str, requested: list[str]) -> list[str]:
    bad = []
    for line in output.splitlines():
        if "==ERROR==" in line and "metric" in line.lower():
            bad += [m for m in requested if m in line or base_name(m) in line]
    return sorted(set(bad))


def _ncu_once(ncu, study, step, case_params, size, cases, metrics, nvtx, timeout):
    """One ncu process; drops metrics the tool rejects and retries once."""
    cmd = ncu_command(ncu, study, step, case_params, size, cases, metrics, nvtx)
    rc, out, err = _run(cmd, timeout)
    both = out + "\n" + err
    why = classify_failure(both)
    if why:
        raise ProfilerUnavailable(f"Nsight Compute could not profile here: {why}.\n{_tail(both, 8)}",
                                  "run on a machine where ncu may read counters (as root, or with "
                                  "NVreg_RestrictProfilingToAdminUsers=0); the book shows the recorded evidence meanwhile.")
    rejected = _unknown_metrics(both, list(metrics)) if rc != 0 or "==ERROR==" in both else []
    if rejected:
        metrics = [m for m in metrics if m not in rejected]
        cmd = ncu_command(ncu, study, step, case_params, size, cases, metrics, nvtx)
        rc, out, err = _run(cmd, timeout)
        both = out + "\n" + err
    if rc != 0 and '"ID"' not in out:
        raise ProfilerUnavailable(f"ncu exited with status {rc} for {step}:\n{_tail(both, 20)}",
                                  "read the log above; the target is `python -m kernelbook.evidence.target`, "
                                  "which can be run alone to reproduce.")
    return cmd, out, both, rejected


@timed("profile")
def run_ncu(study, step: str, case_params: dict | None = None, size: int | None = None,
            cases: Iterable[str] | None = None, timeout: float = NCU_TIMEOUT_S) -> tuple[list[dict], dict]:
    """Profile ``step`` with Nsight Compute: every kernel it launches for each layer at ``size``.

    One ncu process covers the layers; kernels are attributed to layers by NVTX range. When that
    fails (the filter profiled nothing, or a kernel has no range), one ncu process per layer
    runs without NVTX filtering (the target launches that layer's kernels only). Returns
    ``(records, extra)``; ``extra`` keeps the per-kernel rows, the command and what was missing.
    Raises ``ProfilerUnavailable`` when ncu is missing or cannot read counters.
    """
    impl = study.impl(step)
    size = size or study.profile_size
    layers = list(cases or study.cases)
    per_layer = {layer: impl.params(**((case_params or {}).get(layer) or {})) for layer in layers}
    ncu = ncu_path()
    if not ncu:
        raise ProfilerUnavailable("Nsight Compute (ncu) is not installed here.",
                                  "install Nsight Compute or add its folder to PATH; the book shows the recorded evidence.")
    available = available_metrics(ncu)
    requested, chosen, missing = resolve_metrics(available)
    cmd, out, log, rejected = _ncu_once(ncu, study, step, per_layer, size, layers, requested, True, timeout)
    commands = [cmd]
    chosen = {k: v for k, v in chosen.items() if not set(v) & set(rejected)}
    missing = sorted(set(missing) | (set(SPECS) - set(chosen)))
    attribution = "nvtx"
    try:
        records, kernels = records_from_csv(out, study.name, impl.slug, size, chosen, layers)
        if not kernels:
            raise ProfilerUnavailable("the NVTX filter profiled no kernel.", "fall back to one run per layer.")
    except ProfilerUnavailable:
        attribution = "one ncu run per layer"
        records, kernels, logs = [], [], []
        for layer in layers:
            cmd, out, log_one, _ = _ncu_once(ncu, study, step, {layer: per_layer[layer]}, size, [layer],
                                             [m for m in requested if m not in rejected], False, timeout)
            commands.append(cmd)
            logs.append(log_one)
            recs, ks = records_from_csv(out, study.name, impl.slug, size, chosen, [layer], only_layer=layer)
            records += recs
            kernels += ks
        log = "\n".join(logs)
        if not kernels:
            raise ProfilerUnavailable(f"ncu profiled no kernel of {step}.\n{_tail(log, 20)}",
                                      "run the target command (extra['commands']) alone to see whether it launches anything.")
    for r in records:  # a case that fixes its own size (an MLP test case) is recorded at that size
        r["size"] = study.size_of(r["layer"], size)
    extra = {"kernels": kernels, "requested_metrics": requested, "chosen": {k: list(v) for k, v in chosen.items()},
             "missing_metrics": missing, "rejected_metrics": rejected, "metric_list": available is not None,
             "commands": [" ".join(c) for c in commands], "attribution": attribution,
             "ncu_version": ncu_version(ncu), "size": size, "layer_params": per_layer, "log_tail": _tail(log, 30)}
    return records, extra


# ----------------------------------------------------------------------------- chapters


def _frame(records: list[dict]):
    import pandas as pd

    return pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in records])


def load_ncu(study, step: str, prefer_run: str | None = None) -> session_mod.Recording:
    """A step's recorded Nsight Compute part (from ``prefer_run`` when it has it, else the newest)."""
    return session_mod.replayed(study.part(step, "ncu"), study.name, prefer_run)


def for_chapter(chapter, profile: bool = True, size: int | None = None,
                timeout: float = NCU_TIMEOUT_S) -> session_mod.Recording:
    """A chapter's Nsight Compute evidence, profiled now into the chapter's run when it measures
    (with ``profile`` on, a correct kernel and a working ncu), else replayed; ``status`` says which
    and why. Never raises for a missing tool or recording."""
    study = chapter.study
    size = size or study.profile_size
    run = chapter.session.run
    case_params = chapter.case_params()
    parameters = {"step": chapter.slug, "size": size, study.case_params_name: case_params}

    def available() -> tuple[bool, str]:
        if not profiling_enabled(profile):
            return False, "profiling was off for this run (profile=False or KERNELBOOK_PROFILE=0)"
        if not chapter.correct:
            return False, "the kernel failed its correctness check"
        if not ncu_path():
            return False, "Nsight Compute (ncu) is not installed here"
        return True, ""

    def measure() -> session_mod.Measurement:
        records, extra = run_ncu(study, chapter.slug, case_params, size, study.profile_cases or study.cases, timeout)
        return session_mod.Measurement(records, [], extra)

    mode = "measure" if chapter.session.measuring else "replay"
    try:
        found = session_mod.recorded(study.part(chapter.slug, "ncu"), study.name, measure, parameters=parameters,
                                     mode=mode, run_id=run.run_id if mode == "measure" else None,
                                     prefer_run=run.run_id, available=available, required=False, compare={})
    except ProfilerUnavailable as exc:
        found = load_ncu(study, chapter.slug, prefer_run=run.run_id)
        found.status = f"Nsight Compute could not profile here: {exc.message} {found.status}".strip()
    if found.measuring:
        missing = found.extra.get("missing_metrics") or []
        note = f" Not available from this ncu/GPU: {', '.join(missing)}." if missing else ""
        where = "each case at its own size" if study.rows == "cases" else f"{study.size_header.lower()} {size}"
        found.status = (f"Profiled now with Nsight Compute {found.extra.get('ncu_version')}, {where} "
                        f"({found.extra.get('attribution')}).{note}")
    return found


def format_metric(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    if metric == "duration_ms":
        from ..report import format_ms

        return format_ms(value)
    if metric in ("dram_bytes", "shared_mem_per_block"):
        for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if value >= size:
                return f"{value / size:.3g} {unit}"
        return f"{value:.0f} B"
    if metric in ("registers_per_thread", "instructions", "shared_bank_conflicts"):
        return f"{value:,.0f}"
    if metric.endswith("_pct"):
        return f"{value:.1f} %"
    return f"{value:.3g}"


def change(new: float | None, old: float | None) -> str:
    """Relative change in % (``+12.3 %``); ``–`` when either side is missing or zero.

    A base near zero makes a percentage meaningless ("+68257.1 %" for 0.01 → 6.8): beyond a
    tenfold change either way the change is written as a factor (``×683``, ``÷12``).
    """
    if new is None or old is None or old == 0:
        return "–"
    ratio = new / old
    if ratio >= 10:
        return f"×{ratio:,.0f}" if ratio >= 100 else f"×{ratio:.1f}"
    if 0 < ratio <= 0.1:
        return f"÷{1 / ratio:,.0f}" if ratio <= 0.01 else f"÷{1 / ratio:.1f}"
    percent = (new - old) / abs(old) * 100
    return "0.0 %" if round(percent, 1) == 0 else f"{percent:+.1f} %"   # never "-0.0 %"


def _steps(chapter, evidence: session_mod.Recording | None = None) -> dict:
    """{role: (slug, session, records)} for the baseline, the previous step and this step."""
    run_id = chapter.session.run.run_id
    steps = {}
    previous = chapter.study.steps.previous(chapter.slug)
    for role, step in (("baseline", chapter.study.steps.baseline), ("previous step", previous)):
        if step and step.slug != chapter.slug and all(step.slug != s for s, _, _ in steps.values()):
            found = load_ncu(chapter.study, step.slug, prefer_run=run_id)
            if found.found:
                steps[role] = (step.slug, found.session, found.records)
    found = evidence if evidence is not None else load_ncu(chapter.study, chapter.slug, prefer_run=run_id)
    if found.found:
        steps["this step"] = (chapter.slug, found.session, found.records)
    return steps


def comparison_frame(steps: dict, layers: Iterable[str], metrics: Iterable[str] = COMPARED, case_header: str = "Layer"):
    """Rows (layer, metric); a column per step; then the change against previous and baseline."""
    import pandas as pd

    rows = []
    for layer in layers:
        for metric in metrics:
            values = {role: record_value(records, metric, layer) for role, (_, _, records) in steps.items()}
            if all(v is None for v in values.values()):
                continue
            row = {case_header: layer, "Metric": SPECS[metric].title if metric in SPECS else metric}
            # The comparison first: this step and its changes, then the steps it is compared with,
            # so that what the argument rests on is in view on a narrow page.
            for role in ("this step", "previous step", "baseline"):
                if role not in steps:
                    continue
                row[f"{role.capitalize()} ({steps[role][0]})"] = format_metric(metric, values[role])
                if role == "this step":
                    for other in ("previous step", "baseline"):
                        if other in steps:
                            row[f"vs {other}"] = change(values["this step"], values[other])
            rows.append(row)
    return pd.DataFrame(rows)


def _caption_tags(steps: dict) -> str:
    return " | ".join(f"{role}: {sess.short_label}" for role, (_, sess, _) in steps.items())


def unprofiled(study, run) -> bool:
    """Whether ``run`` was measured without Nsight Compute: it holds no profile of any of
    ``study``'s steps (a batch with ``PROFILE=0``)."""
    return run is not None and not any(run.has_part(study.part(slug, "ncu")) for slug in study.steps.slugs())


def _absent(study, run, what: str, kind: str = "Nsight Compute metrics") -> str:
    """Why there is no profile of ``what`` here: the run was measured without profiles, or none yet."""
    if unprofiled(study, run):
        return f"No {kind} for {what}: run {run.run_id} was measured without Nsight Compute (make book PROFILE=0)."
    return f"No {kind} recorded for {what} ({NOT_RECORDED})."


def ncu_comparison(chapter, evidence: session_mod.Recording | None = None, metrics: Iterable[str] = COMPARED):
    """The write-ups' profiler table: this step's metrics per case, changes against the previous
    step and the baseline (each from the chapter's run when it holds them, else its newest)."""
    steps = _steps(chapter, evidence)
    if "this step" not in steps:
        return message_table(_absent(chapter.study, chapter.session.run, chapter.slug), "Nsight Compute")
    frame = comparison_frame(steps, chapter.study.cases, metrics, chapter.study.case_header)
    size = next((r["size"] for r in steps["this step"][2] if r.get("size")), chapter.study.profile_size)
    where = ("each case at its own size" if chapter.study.rows == "cases"
             else f"{chapter.study.size_header.lower()} {size}")
    others = [role for role in steps if role != "this step"]
    relative = (f"; a change column is this step against the {' and the '.join(others)}, relative" if others else
                "; the first step of the study: nothing to compare with")
    caption = (f"Nsight Compute (ncu --clock-control none), one launch of the step per case, {where}{relative}; "
               f"a step of several kernels shows each metric summed, the largest or weighted by duration over "
               f"them (the profiles page's metric table says which); Tensor pipe is a share of cycles, which "
               f"reads a few per cent even for kernels without tensor-core instructions (the compiler table's "
               f"SASS counts say which kernels have them). [{_caption_tags(steps)}]")
    return styled(frame, caption)


def stall_frame(steps: dict, layers: Iterable[str], case_header: str = "Layer"):
    """Rows (layer, stall reason) for the top reasons of every step; cycles per issued instruction."""
    import pandas as pd

    rows = []
    for layer in layers:
        reasons: list[str] = []
        for _, _, records in steps.values():
            agg = {r["metric"]: r["value"] for r in records if r["layer"] == layer and r["metric"].startswith("stall_")}
            reasons += [name for name, _ in top_stalls(agg) if name not in reasons]
        for reason in reasons:
            row = {case_header: layer, "Stall reason": reason.replace("_", " ")}
            for role in [r for r in ("this step", "previous step", "baseline") if r in steps]:
                slug, _, records = steps[role]
                value = record_value(records, f"stall_{reason}", layer)
                rank = next((int(r["stall_rank"]) for r in records if r["metric"] == f"stall_{reason}"
                             and r["layer"] == layer and r.get("stall_rank")), None)  # may be a float from pandas
                row[f"{role.capitalize()} ({slug})"] = ("–" if value is None else
                                                        f"{value:.2f}" + (f" (#{rank})" if rank else ""))
            rows.append(row)
    return pd.DataFrame(rows)


def stall_table(chapter, evidence: session_mod.Recording | None = None):
    """Top warp-stall reasons per case: cycles a warp spends stalled per issued instruction."""
    steps = _steps(chapter, evidence)
    if "this step" not in steps:
        return message_table(_absent(chapter.study, chapter.session.run if chapter.session else None,
                                     chapter.slug, "warp-stall reasons"), "Warp stalls")
    return styled(stall_frame(steps, chapter.study.cases, chapter.study.case_header),
                  f"Top warp-stall reasons (warp cycles stalled per issued instruction, #rank within the step). "
                  f"[{_caption_tags(steps)}]")


def show_chapter(chapter, profile: bool = True, size: int | None = None) -> session_mod.Recording:
    """One notebook cell: profile (or replay), then the status line, the metric and stall tables."""
    from IPython.display import Markdown, display

    evidence = for_chapter(chapter, profile=profile, size=size)
    from ..escape import md_text

    display(Markdown(f"*{md_text(evidence.status)}*"))
    display(ncu_comparison(chapter, evidence))
    display(stall_table(chapter, evidence))
    return evidence


#: The most steps one overview table holds before it is split.
OVERVIEW_STEPS = 6


def ncu_overview(study, steps: Iterable[str] | None = None, prefer_run: str | None = None,
                 metrics: Iterable[str] = COMPARED):
    """Every recorded step's metrics side by side: rows (layer, metric), a column per step.

    Steps without a recorded profile are named in the caption (a column of "not recorded yet"
    per step would bury the ones that are)."""
    import pandas as pd

    steps = list(steps or study.steps.slugs())
    loaded = {v: load_ncu(study, v, prefer_run=prefer_run) for v in steps}
    found = {v: (f.session, f.records) for v, f in loaded.items()}
    recorded = {v: f for v, f in found.items() if f[0] is not None}
    absent = [v for v in steps if v not in recorded]
    if not recorded:
        run_id = prefer_run or session_mod.pinned()[0]
        run = results.load_run(run_id) if run_id else None
        return message_table(_absent(study, run, "any step"), "Nsight Compute, every step")
    rows = []
    for layer in study.cases:
        for metric in metrics:
            row = {study.case_header: layer, "Metric": SPECS[metric].title}
            row.update({v: format_metric(metric, record_value(f[1], metric, layer)) for v, f in recorded.items()})
            if any(row[v] != "–" for v in recorded):
                rows.append(row)
        row = {study.case_header: layer, "Metric": "Top stalls (cycles/instr)"}
        for v, f in recorded.items():
            agg = {r["metric"]: r["value"] for r in f[1] if r["layer"] == layer}
            row[v] = ", ".join(f"{n.replace('_', ' ')} {x:.1f}" for n, x in top_stalls(agg)) or "–"
        if any(row[v] != "–" for v in recorded):   # a case no step was profiled on gets no row
            rows.append(row)
    labels = "; ".join(f"{v}: {f[0].short_label}" for v, f in recorded.items())
    missing = f" Not recorded yet: {', '.join(absent)}." if absent else ""
    frame = pd.DataFrame(rows)
    caption = (f"Nsight Compute metrics of every profiled step (each from its newest "
               f"recording{' or run ' + prefer_run if prefer_run else ''}).{missing} {labels}")
    names = list(recorded)
    if len(names) <= OVERVIEW_STEPS:
        return styled(frame, caption, wrap=True)  # the stall lists wrap, the numbers stay whole
    # Split: at most OVERVIEW_STEPS steps a table, so that each fits the reading width (one table
    # a step a column would be 18 columns wide); every part keeps the case and metric columns.
    from IPython.display import display

    parts = [names[i:i + OVERVIEW_STEPS] for i in range(0, len(names), OVERVIEW_STEPS)]
    for n, part in enumerate(parts, start=1):
        table = styled(frame[[study.case_header, "Metric", *part]],
                       f"Part {n} of {len(parts)}: steps {part[0]} to {part[-1]}. " + (caption if n == 1 else ""),
                       wrap=True)
        if n < len(parts):
            display(table)
    return table
