"""The VGG layer study as the harness sees it: one layer (B = 1 by default), GFLOP/s as the unit.

FLOPs = 2·B·M·C·K²·H·W (164.4 GFLOP at B = 1): the convolution's multiply-adds only; the bias,
the ReLU and the 2×2 max-pool are not counted (they are fused into every kernel's epilogue and
are a rounding error of the arithmetic).

Metrics: ``op_time_ms`` (one launch of the whole layer, inputs on the GPU, CUDA-graph replays),
``gflops`` (FLOPs / median time), ``correct`` (1.0 when every float64 check passed).
"""

from __future__ import annotations



from .. import results
from ..study import Column, Study
from .problem import CASES
from .steps import STEPS

NAME = "vgg"


class VggStudy(Study):
    name = NAME
    module = "kernelbook.vgg"
    title = "VGG-style layer (256 → 256, 224², 5×5, bias + ReLU + 2×2 pool)"
    steps = STEPS
    cases = tuple(CASES)
    profile_cases = ("B1",)
    case_header = "Layer (B1: one image)"
    size_header = "Batch"
    size_name = "cases"
    rows = "cases"
    default_sizes = ("B1",)
    vendor_name = "cudnn"
    profile_size = 1
    sanitizer_size = 1


    def columns(self) -> list[Column]:
        return [Column("time [ms]", "op_time_ms", None, kind="ms"),
                Column("GFLOP/s (direct-convolution FLOPs)", "gflops", None, kind="rate"),
                Column("speed-up relative to baseline", "op_time_ms", None, kind="speedup_vs_baseline")]

    def size_of(self, case: str, size: int) -> int:
        return CASES[case].B

    def problem(self, case: str, size: int | None = None):
        return CASES[case]

    def check(self, impl, case_params: dict, n_random: int, seed: int | None):
        from .run import check_step

        params = case_params["B1"]
        found = check_step(impl.slug, params, n_random=n_random, seed=seed, full_case="B1")
        ok = bool(found) and all(c.passed for c in found)
        records = [results.record(NAME, impl.slug, case, None, "correct", 1.0 if ok else 0.0, n_checks=len(found))
                   for case in self.cases]
        return records, [dict(c.as_dict(), layer=c.label.split(" ")[0], params=params) for c in found]

    def measure(self, impl, case_params: dict, sizes: list, repeats: int, warmup: int, options: dict):
        from .run import measure_step

        records = []
        for case in sizes:
            records += measure_step(impl.slug, case_params[case], cases=(case,), repeats=repeats, warmup=warmup)
        return records

    def launch_once(self, slug: str, case: str, size: int, params: dict, seed: int = 0):
        from .run import launch_once

        return launch_once(slug, case, params, seed=seed)

    def vendor(self, sizes: list, repeats: int, warmup: int) -> list[dict]:
        from .run import measure_vendor

        return measure_vendor(tuple(sizes), repeats=repeats, warmup=warmup)

    def reported_frame(self, step: str):
        return self.reported_csv(step)

    def targets(self) -> list[dict]:
        cuda_fp32 = ["baseline", "weights-shared", "inputs-shared", "weights-registers", "weights-on-the-fly",
                     "two-phase-weights", "register-tiled", "winograd"]
        return [
            {"what": "FP32 on CUDA cores", "case": "B1", "limit_ms": 3.0, "steps": cuda_fp32, "vendor": "cudnn-fp32"},
            {"what": "FP32-accurate on tensor cores", "case": "B1", "limit_ms": 1.5, "steps": ["3xtf32"],
             "vendor": "cudnn-fp32"},
            {"what": "TF32 on tensor cores", "case": "B1", "limit_ms": 0.5, "steps": ["tf32"], "vendor": "cudnn-tf32"},
        ]

    def reported(self, step: str):
        import pandas as pd

        from ..report import styled

        frame = self.reported_frame(step)
        if frame.empty:
            return None
        out = pd.DataFrame({"Source (write-up, GPU)": frame["seed"] + ", " + frame["gpu"],
                            "Reported change [GFLOP/s]": frame["reported_change_gflops"].map(
                                lambda v: "not measured" if pd.isna(v) else f"{v:+g}"),
                            "Its evidence": frame["evidence"]})
        return styled(out, "Reported by the write-up: the change against its previous step, in GFLOP/s "
                           "(its GPU; not measured here).")

    def expectations(self, chapter) -> list[str]:
        import pandas as pd

        from ..chapter import load_recorded
        from ..report import find_record

        if not chapter.correct:
            return ["The step failed its correctness check; nothing was timed."]
        lines = []
        if chapter.variant == self.steps.steps[-1].slug:  # the final chapter judges the study's targets
            from ..summary import target_lines

            lines += [f"Target: {line}" for line in target_lines(self)]
        worst = max((c.get("measured") or 0.0 for c in chapter.checks), default=0.0)
        lines.append(f"Accuracy: the worst relative L2 error against float64 over {len(chapter.checks)} checks is "
                     f"{worst:.2e} (limit {chapter.step.impl.tolerance:g}).")
        mine = find_record(chapter.records, "gflops", "B1")
        op = find_record(chapter.records, "op_time_ms", "B1")
        from ..evidence.vendor import vendor
        from ..report import format_ms

        found = vendor(self, "replay", prefer_run=chapter.session.run.run_id)
        if op is not None and found.found:
            others = []
            for variant in dict.fromkeys(r["variant"] for r in found.records):
                ref = find_record([r for r in found.records if r["variant"] == variant], "op_time_ms", "B1")
                if ref is not None:
                    ratio = ref["value"] / op["value"]
                    others.append(f"{variant} {format_ms(ref['value'])} "
                                  f"({f'{ratio:.2f}× slower than this step' if ratio >= 1 else f'{1 / ratio:.2f}× faster than this step'})")
            lines.append(f"The library, timed in run {found.session.run.run_id}: " + "; ".join(others) + ".")
        previous = chapter.study.steps.previous(chapter.variant)
        for _, row in self.reported_frame(chapter.variant).iterrows():
            before = load_recorded(self, previous.slug, prefer_run=chapter.session.run.run_id) if previous else None
            theirs = find_record(before.records, "gflops", "B1") if before is not None and before.correct else None
            if mine and theirs and pd.isna(row["reported_change_gflops"]):
                lines.append(f"The write-up proposes this change (`{row['seed']}`) but reports no measurement of it; "
                             f"here it is {mine['value'] - theirs['value']:+,.0f} GFLOP/s.")
            elif mine and theirs:
                change = mine["value"] - theirs["value"]
                agree = (change > 0) == (row["reported_change_gflops"] > 0)
                lines.append(f"The write-up reports {row['reported_change_gflops']:+g} GFLOP/s for this change "
                             f"(`{row['seed']}`); here it is {change:+,.0f} GFLOP/s "
                             f"({'the same direction' if agree else 'the opposite direction'}).")
        return lines


STUDY = VggStudy()
