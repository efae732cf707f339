"""The MLP study as the harness sees it: two test cases, the write-up's table, checks, timing.

Metrics:

- ``op_time_ms``           the step's kernels alone, inputs and weights already on the GPU (the
                           write-up's measure: the upload of the signals is not counted), timed
                           as CUDA-graph replays
- ``time_with_upload_ms``  the host-to-device copy of x (pinned memory) plus the kernels
- ``scaled_abs_diff``      max |GPU - CPU float32| / max |CPU float32| (threshold 0.15 for the
                           half-precision steps, the write-up's rule)
- ``rel_l2_error``         ||GPU - float64|| / ||float64||
- ``correct``              1.0 when every check passed (then the step is timed)
"""

from __future__ import annotations



from .. import results
from ..errors import ParameterError
from ..study import Column, Study
from .problem import CASES, MlpShape
from .steps import STEPS

NAME = "mlp"


class MlpStudy(Study):
    name = NAME
    module = "kernelbook.mlp"
    title = "Fully connected network inference (71 → 64 → 64 → 4)"
    steps = STEPS
    cases = tuple(CASES)
    case_header = "Test case"
    size_header = "Columns"
    size_name = "cases"
    rows = "cases"
    default_sizes = tuple(CASES)
    vendor_name = "pytorch"
    profile_size = CASES["100x100"]
    sanitizer_size = CASES["5x5"]


    def columns(self) -> list[Column]:
        return [Column("time [ms]", "op_time_ms", None, kind="ms"),
                Column("speed-up relative to baseline", "op_time_ms", None, kind="speedup_vs_baseline"),
                Column("time with upload [ms]", "time_with_upload_ms", None, kind="ms"),
                Column("scaled abs. difference", "scaled_abs_diff", None, kind="number"),
                Column("rel. L2 vs float64", "rel_l2_error", None, kind="number")]

    def size_of(self, case: str, size: int) -> int:
        return CASES[case]

    def problem(self, case: str, size: int | None = None):
        return MlpShape(CASES[case] if size is None or case in CASES and size == CASES[case] else size)

    def check(self, impl, case_params: dict, n_random: int, seed: int | None):
        from .run import check_step

        params = case_params[self.cases[0]]
        if any(p != params for p in case_params.values()):
            raise ParameterError("The MLP checks run one configuration for every N.",
                                 "give both test cases the same parameters (the steps dispatch by N themselves).")
        found = check_step(impl.slug, params, n_random=n_random, seed=seed)
        ok = bool(found) and all(c.passed for c in found)
        records = [results.record(NAME, impl.slug, case, None, "correct", 1.0 if ok else 0.0, n_checks=len(found))
                   for case in self.cases]
        return records, [dict(c.as_dict(), layer="any N", params=params) for c in found]

    def measure(self, impl, case_params: dict, sizes: list, repeats: int, warmup: int, options: dict):
        from .run import measure_step

        records = []
        for case in sizes:
            records += measure_step(impl.slug, case_params[case], cases=(case,), repeats=repeats, warmup=warmup)
        return records

    def launch_once(self, slug: str, case: str, size: int, params: dict, seed: int = 0):
        from .run import launch_once

        return launch_once(slug, case, params)

    def vendor(self, sizes: list, repeats: int, warmup: int) -> list[dict]:
        from .run import measure_vendor

        return measure_vendor(tuple(sizes), repeats=repeats, warmup=warmup)

    def reported_frame(self, step: str):
        return self.reported_csv(step)

    def targets(self) -> list[dict]:
        cuda_fp32 = ["baseline", "fused-global", "fused-shared", "whole-net-shared", "shared-and-registers",
                     "last-layer-coop", "whole-net-registers"]
        half = ["half-precision", "reduced-bank-conflicts", "coalesced-weights", "inputs-load-hiding",
                "better-occupancy", "best", "tensor-core-fp16"]
        return [
            {"what": "100x100, FP32 on CUDA cores", "case": "100x100", "limit_ms": 0.70, "steps": cuda_fp32,
             "vendor": "pytorch-fp32"},
            {"what": "100x100, FP32-accurate on tensor cores", "case": "100x100", "limit_ms": 0.30,
             "steps": ["tensor-core-3xtf32", "final"], "vendor": "pytorch-fp32"},
            {"what": "100x100, FP16 within the 0.15 threshold", "case": "100x100", "limit_ms": 0.25, "steps": half,
             "vendor": "pytorch-fp16"},
            {"what": "5x5, per inference (CUDA-graph replays)", "case": "5x5", "limit_ms": 0.006,
             "steps": self.steps.slugs(), "vendor": None},
        ]

    def reported_best(self):
        import pandas as pd

        from ..chapter import load_recorded
        from ..report import find_record

        rows = []
        frame = self.reported_frame("best")
        for _, r in frame.iterrows():
            rows.append({"Test case": r["case"], "time [ms]": f"{r['time_ms']:g}", "Step": r["seed_label"],
                         "Source": f"{r['seed']} ({r['gpu']}), reported"})
        for case in self.cases:
            best = None
            for slug in self.steps.slugs():
                chapter = load_recorded(self, slug)
                rec = find_record(chapter.records, "op_time_ms", case) if chapter is not None and chapter.correct else None
                if rec is not None and (best is None or rec["value"] < best[0]["value"]):
                    best = (rec, slug, chapter)
            if best is not None:
                rec, slug, chapter = best
                rows.append({"Source": f"this book ({chapter.session.run.device}, run {chapter.session.run.run_id})",
                             "Test case": case, "Step": slug, "time [ms]": f"{rec['value']:.4g}"})
        return pd.DataFrame(rows)

    def reported(self, step: str):
        import pandas as pd

        from ..report import format_ms, styled

        frame = self.reported_frame(step)
        if frame.empty:
            return None
        # The numbers first, where they come from last: on a narrow page the times stay in view.
        out = pd.DataFrame({"Test case": frame["case"],
                            "time [ms]": frame["time_ms"].map(lambda v: f"{v:g}"),
                            "Speed-up vs baseline": frame["speedup"].map(lambda v: f"{v:g}"),
                            "as read here": frame["time_ms"].map(format_ms),
                            "Kernel": frame["seed_label"],
                            "Source (write-up, GPU)": frame["seed"] + ", " + frame["gpu"]})
        return styled(out, "Reported by the write-up (its GPUs; not measured here).")

    def expectations(self, chapter) -> list[str]:
        from ..report import find_record, format_ms

        if not chapter.correct:
            return ["The step failed its correctness check; nothing was timed."]
        lines = []
        if chapter.variant == self.steps.steps[-1].slug:  # the final chapter judges the study's targets
            from ..summary import target_lines

            lines += [f"Target: {line}" for line in target_lines(self)]
        measure = "scaled absolute difference against the CPU float32 result" if chapter.step.impl.precision == "fp16" \
            else "relative L2 error against float64"
        worst = max((c.get("measured") or 0.0 for c in chapter.checks), default=0.0)
        limit = chapter.checks[0].get("tolerance") if chapter.checks else None
        lines.append(f"Accuracy: the worst {measure} over {len(chapter.checks)} checked column counts is {worst:.2e}"
                     + (f" (limit {limit:g})." if limit else "."))
        for case in self.cases:
            op = find_record(chapter.records, "op_time_ms", case)
            up = find_record(chapter.records, "time_with_upload_ms", case)
            if op is None:
                continue
            seconds = op["value"] / 1e3
            line = (f"{case} ({op['batch']:,} columns): {format_ms(op['value'])}, {op['flops'] / seconds / 1e9:,.0f} "
                    f"GFLOP/s and {op['min_bytes'] / seconds / 1e9:,.0f} GB/s of the fewest bytes")
            if up is not None:
                line += f"; with the upload of x, {format_ms(up['value'])} ({up['value'] / op['value']:.1f}× longer)"
            lines.append(line + ".")
            for _, row in self.reported_frame(chapter.variant).iterrows():
                if row["case"] == case:  # another device: shown, never divided (its table has both)
                    lines.append(f"{case}: the write-up reports {row['time_ms']:g} ms on its {row['gpu']} "
                                 f"(`{row['seed']}`), a different GPU: the write-ups' table sets the two side by "
                                 "side; no ratio across devices is drawn here.")
        return lines


STUDY = MlpStudy()
