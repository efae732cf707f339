"""One step's Nsight Compute rows on the two GPUs side by side: the devices page's evidence for a
step whose speed-up its roofline leaves unexplained. Each column comes from that GPU's book
recording of the study (``crossdevice.recorded_on``), the only page where two runs meet."""

from __future__ import annotations

import pandas as pd

from .compare import MIN_NOISE
from .evidence.ncu_metrics import SPECS
from .report import record_value, styled

#: The rows shown: the time, what kept the SMs busy, what they waited for, and the memory traffic.
ROWS = ("duration_ms", "tensor_pipe_pct", "sm_throughput_pct", "stall_long_scoreboard", "l2_hit_pct",
        "dram_bytes", "dram_throughput_pct")


def _title(metric: str) -> str:
    title = SPECS[metric].title
    if metric == "dram_bytes":
        return f"{title} [MB]"
    return title if "[" in title else f"{title} [{SPECS[metric].unit}]"


def _shown(metric: str, value) -> str:
    if value is None:
        return "not recorded"
    if metric == "dram_bytes":
        return f"{value / 1e6:,.0f}"
    return f"{value:,.3f}" if metric == "duration_ms" else f"{value:,.2f}" if metric.startswith("stall_") else f"{value:,.1f}"


def profile_pair(comparison, step: str, case: str):
    """``step``'s profile rows at ``case`` on both devices of ``comparison`` (a ``Comparison``)."""
    recordings = [r for r in (comparison.base, comparison.other) if r.found]
    frame = pd.DataFrame({"Metric": [_title(m) for m in ROWS]})
    for recording in recordings:
        records = recording.ncu.get(step) or []
        frame[f"{recording.label} (run {recording.run.run_id})"] = [_shown(m, record_value(records, m, case)) for m in ROWS]
    number = comparison.study.steps.get(step).number
    l2 = "; ".join(f"{r.label} {r.run.manifest['device']['l2_bytes'] / 2 ** 20:.0f} MiB" for r in recordings
                   if (r.run.manifest.get("device") or {}).get("l2_bytes"))
    return styled(frame, f"Step {number:02d} ({step}), case {case}: the rows of Nsight Compute's profile of one "
                         "launch on each device, each from that device's book recording (the step's own page "
                         f"explains the rows). L2 size, as each run recorded its device: {l2 or 'not recorded'}.")


def _direction(a: float, b: float, more: str, less: str, same: str) -> str:
    """``same`` within the book's smallest noise band (``compare.MIN_NOISE``) of a value measured once."""
    return more if b > a * (1 + MIN_NOISE) else less if b < a / (1 + MIN_NOISE) else same


def profile_lines(comparison, step: str, case: str) -> list[str]:
    """Sentences read from ``profile_pair``'s rows: how ``step``'s profile at ``case`` moved from the
    base device to the other (each value printed, each direction computed; within ``compare.MIN_NOISE``
    is "about the same")."""
    base, other = comparison.base, comparison.other
    if not (base.found and other.found):
        return []
    mine = {m: (record_value(base.ncu.get(step) or [], m, case), record_value(other.ncu.get(step) or [], m, case)) for m in ROWS}
    if any(a is None or b is None for a, b in mine.values()):
        return [f"Step {step} has no profile at {case} on both devices; nothing is compared."]
    (t0, t1), (s0, s1), (l0, l1), (d0, d1) = (mine[m] for m in ("tensor_pipe_pct", "stall_long_scoreboard",
                                                                 "l2_hit_pct", "dram_bytes"))
    o, b = other.label, base.label
    frame = comparison.frame
    rows = frame[(frame["case"] == case) & frame["speedup"].notna()].sort_values("speedup", ascending=False)
    ranked = list(rows["step"])
    first = []
    if step in ranked:
        steps = comparison.study.steps
        speedup = float(rows[rows["step"] == step]["speedup"].iloc[0])
        top = float(rows["speedup"].iloc[0])
        tied = [s for s, v in zip(ranked, rows["speedup"]) if v * (1 + MIN_NOISE) >= top]   # the same as the largest
        if step in tied and len(tied) > 1:
            others = " and ".join(f"step {steps.get(s).number:02d} ({s})" for s in tied if s != step)
            where = f"it and {others} are the largest, within {MIN_NOISE * 100:g} % of each other"
        elif ranked[0] == step:
            where = "it is the largest"
        else:
            where = f"it is number {ranked.index(step) + 1} from the largest"
        first = [f"The speed-up of step {steps.get(step).number:02d} ({step}) on the {o} is {speedup:.2f}× at "
                 f"{case}; of the study's {len(ranked)} steps timed there on both, {where}."]
    return first + [f"On the {o} the tensor pipe is busy {t1:.1f} % of the launch against {t0:.1f} % on the {b}: "
            f"{_direction(t0, t1, 'busier', 'less busy', 'about as busy')} on the {o}.",
            f"Its warps stall on long scoreboard (waiting for a load from global memory, through L1 and L2) "
            f"{s1:.2f} cycles per instruction on the {o} against {s0:.2f} on the {b}: "
            f"{_direction(s0, s1, 'longer', 'shorter', 'about as long')} waits on the {o}.",
            f"L2 serves {l1:.1f} % of its sectors on the {o} against {l0:.1f} % on the {b}, and DRAM moves "
            f"{d1 / 1e6:,.0f} MB against {d0 / 1e6:,.0f} MB."]


def profile_sentences(comparison, step: str, case: str):
    """``profile_lines`` as the page's bullet list."""
    from IPython.display import Markdown

    from .chapter import whole_sentence
    from .escape import md_safe

    return Markdown("\n".join(f"- {md_safe(whole_sentence(line))}" for line in profile_lines(comparison, step, case)))
