"""The VGG layer study as the harness sees it: one layer (B = 1 by default), GFLOP/s as the unit.

FLOPs = 2·B·M·C·K²·H·W (164.4 GFLOP at B = 1): the convolution's multiply-adds only; the bias,
the ReLU and the 2×2 max-pool are not counted (they are fused into every kernel's epilogue and
are a rounding error of the arithmetic).

Metrics: ``op_time_ms`` (one launch of the whole layer, inputs on the GPU, CUDA-graph replays),
``gflops`` (FLOPs / median time), ``correct`` (1.0 when every float64 check passed).
"""

from __future__ import annotations

from .. import checks, harness
from ..study import Column, Study
from . import require_gpu
from .problem import CASES
from .steps import STEPS

#: The input and output channels compute-sanitizer launches (``VggStudy.sanitizer_problem``).
SANITIZER_CHANNELS = (40, 72)


class VggStudy(Study):
    title = "VGG-style layer (256 → 256, 224², 5×5, bias + ReLU + 2×2 pool)"
    steps = STEPS
    cases = tuple(CASES)
    profile_cases = ("B1",)
    case_header = "Layer (B1: one image, timed; B2: two, checked)"
    size_header = "Batch"
    size_name = "cases"
    rows = "cases"
    default_sizes = ("B1",)
    vendor_name = "cudnn"
    profile_size = 1
    sanitizer_size = 1


    def sanitizer_problem(self, case: str):
        """compute-sanitizer launches the case's batch on 40 input and 72 output channels and 38 × 37
        pixels instead of 256, 256 and 224²: a partial tile every way (channels past a whole 16 and
        64, an odd column the pool drops) with the case's kernel size, so every step compiles the
        kernels it times (their macros depend on K and the parameters only), at under a thousandth
        of the shared-memory accesses racecheck instruments (at 256 channels a check of a direct
        step took up to minutes even at 38 × 37). Every step takes it by the same route as the
        case's own (tests/test_profiling.py), but the final step on a Hopper GPU, which times its
        two Hopper steps per shape: both have rows of their own."""
        from .problem import ConvPoolShape

        own = CASES[case]
        return ConvPoolShape(B=own.B, C=SANITIZER_CHANNELS[0], H=38, W=37, M=SANITIZER_CHANNELS[1], K=own.K)

    def columns(self) -> list[Column]:
        return [Column("time [ms]", "op_time_ms", None, kind="ms"),
                Column("GFLOP/s (direct-convolution FLOPs)", "gflops", None, kind="rate"),
                Column("speed-up relative to baseline", "op_time_ms", None, kind="speedup_vs_baseline")]

    def size_of(self, case: str, size: int) -> int:
        return CASES[case].B

    def problem(self, case: str, size: int | None = None):
        return CASES[case]

    # ------------------------------------------------------------------ the problem, for the harness

    full_case = "B1"   # the whole layer, checked at sampled pooled outputs

    def inputs(self, impl, shape, rng, case=None):
        from .run import random_inputs

        return random_inputs(shape, rng)

    def operands(self, impl, shape, host):
        """The device operands; a Hopper step (11-14) gets its weights prepared (packed once, outside
        anything timed), so its checked, timed and profiled call packs only the input."""
        x, w, b = super().operands(impl, shape, host)
        if hasattr(impl, "prepare_weights"):
            w = impl.prepare_weights(w)
        return x, w, b

    def check_cases(self, impl, params, n_random, rng):
        from .run import check_cases

        return check_cases(impl, params, n_random, rng, self.full_case)

    def case_records(self, impl, case, shape, params, operands, run, output, op, context, time):
        return [("gflops", shape.flops / (op.median * 1e6), "GFLOP/s")]

    def vendor_runs(self, sizes, seed):
        from .run import vendor_runs

        return vendor_runs(sizes, seed)

    def targets(self) -> list[dict]:
        cuda_fp32 = ["baseline", "weights-shared", "inputs-shared", "weights-registers", "weights-on-the-fly",
                     "two-phase-weights", "register-tiled", "winograd"]
        return [
            {"what": "FP32 on CUDA cores", "case": "B1", "limit_ms": 3.0, "steps": cuda_fp32, "vendor": "cudnn-fp32"},
            {"what": "FP32-accurate on tensor cores with mma.sync (step 08: the final takes Hopper's path on a Hopper GPU)",
             "case": "B1", "limit_ms": 1.5, "steps": ["3xtf32"],
             "vendor": "cudnn-fp32"},
            {"what": "TF32 on tensor cores with mma.sync (step 07)", "case": "B1", "limit_ms": 0.5, "steps": ["tf32"], "vendor": "cudnn-tf32"},
            {"what": "TF32 on Hopper's path (TMA + wgmma)", "case": "B1", "limit_ms": 0.45, "steps": ["hopper-tf32"],
             "vendor": "cudnn-tf32-channels-last"},
            {"what": "FP16 on Hopper's path, at a wgmma + TMA GEMM's rate", "case": "B1", "limit_ms": 0.21, "steps": ["hopper-fp16"],
             "vendor": "cudnn-fp16-channels-last"},
            {"what": "FP32-accurate on Hopper's path", "case": "B1", "limit_ms": 1.2,
             "steps": ["hopper-3xtf32", "hopper-split"], "vendor": "cudnn-fp32"},
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

        from ..report import find_record, format_ms
        from ..stepdata import load_recorded
        from ..summary import opening_lines

        lines = opening_lines(self, chapter)
        if lines is None:
            return ["The step failed its correctness check; nothing was timed."]
        worst = max((c.get("measured") or 0.0 for c in chapter.checks), default=0.0)
        lines.append(f"Accuracy: the worst relative L2 error against float64 over {len(chapter.checks)} checks is "
                     f"{worst:.2e} (limit {chapter.step.impl.tolerance:g}).")
        mine = find_record(chapter.records, "gflops", "B1")
        op = find_record(chapter.records, "op_time_ms", "B1")
        if op is not None:
            from ..evidence.ceilings import ceilings_for
            from ..evidence.floor import floor_ms, step_math, unit

            math = step_math(chapter, "B1")
            floor = floor_ms(self.problem("B1", op["size"]), ceilings_for(chapter), math)
            if floor is not None:
                rate, cost = unit(math)
                label = {"fp32_gflops": "FP32 FMA", "tf32_tensor_gflops": "TF32 tensor-core",
                         "fp16_tensor_gflops": "FP16 tensor-core"}.get(rate, rate)
                spent = "" if cost == 1 else (f": each multiply-add of the direct convolution costs the time of "
                                               f"{cost:g} {label} operations")
                lines.append(f"Floor: at the {label} limit (the datasheet peak, or the rate measured in run "
                             f"{chapter.session.run.run_id} where higher; unit "
                             f"{math}{spent}) the layer takes at least "
                             f"{format_ms(floor)}; this step runs at {floor / op['value'] * 100:.1f} % of that floor's "
                             f"speed.")
        from ..evidence.vendor import vendor

        found = vendor(self, "replay", prefer_run=chapter.session.run.run_id)
        if op is not None and found.found:
            others = []
            for step in dict.fromkeys(r["step"] for r in found.records):
                ref = find_record([r for r in found.records if r["step"] == step], "op_time_ms", "B1")
                if ref is not None:
                    ratio = ref["value"] / op["value"]
                    others.append(f"{step} {format_ms(ref['value'])} "
                                  f"({f'{ratio:.2f}× slower than this step' if ratio >= 1 else f'{1 / ratio:.2f}× faster than this step'})")
            lines.append(f"The library, timed in run {found.session.run.run_id}: " + "; ".join(others) + ".")
        if op is not None and chapter.slug == "final":
            lines.extend(self.against_fp32_accurate(chapter, op))
        previous = chapter.study.steps.previous(chapter.slug)
        for _, row in self.reported_frame(chapter.slug).iterrows():
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

    def against_fp32_accurate(self, chapter, op: dict) -> list[str]:
        """The final step beside the fastest of the study's other FP32-accurate steps (tolerance
        1e-5 over float's whole range: ``checks.claims_fp32_range``) timed in the same run, by how much,
        or that the ranges of their repeats overlap."""
        from ..checks import claims_fp32_range
        from ..report import find_record, format_ms
        from ..stepdata import load_recorded

        run_id = chapter.session.run.run_id
        timed = []
        for step in self.steps:
            if step.slug == chapter.slug or not claims_fp32_range(self.impl(step.slug)):
                continue
            recording = load_recorded(self, step.slug, prefer_run=run_id)
            if recording is None or recording.session.run.run_id != run_id or not recording.correct:
                continue
            found = find_record(recording.records, "op_time_ms", "B1")
            if found is not None:
                timed.append((found["value"], step, found))
        if not timed:
            return []
        _, step, best = min(timed, key=lambda item: item[0])
        ratio = op["value"] / best["value"]
        if op["min"] <= best["max"] and best["min"] <= op["max"]:
            how = "the ranges of their repeats overlap"
        else:
            how = f"{(ratio - 1) * 100:.1f} % slower" if ratio > 1 else f"{(1 / ratio - 1) * 100:.1f} % faster"
        return [f"Of the study's other FP32-accurate steps timed in run {run_id}, the fastest is step "
                f"{step.number:02d} ({step.slug}) at {format_ms(best['value'])}; this step takes "
                f"{format_ms(op['value'])}: {how}."]


STUDY = VggStudy()


# ---------------------------------------------------------------- the harness's loops, by step name


def _study(full_case: str | None = "B1"):
    import copy

    if full_case == STUDY.full_case:
        return STUDY
    study = copy.copy(STUDY)
    study.full_case = full_case
    return study


def check_step(slug: str, params: dict | None = None, n_random: int = 6, seed: int | None = None,
               full_case: str | None = "B1") -> list[checks.CheckResult]:
    """Float64 checks of one step; a launch that raises is a failed check, never a crash."""
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    require_gpu()
    return harness.check_step(_study(full_case), impl, merged, n_random, seed)


def measure_step(slug: str, params: dict | None = None, cases=("B1",), repeats: int = 20, warmup: int = 3
                 ) -> list[dict]:
    """``op_time_ms`` (median of CUDA-graph replays) and ``gflops`` per case."""
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    require_gpu()
    return harness.measure(STUDY, impl, {case: merged for case in STUDY.cases}, list(cases), repeats, warmup, {})


def measure_vendor(cases=("B1",), repeats: int = 20, warmup: int = 3) -> list[dict]:
    require_gpu()
    return harness.vendor(STUDY, list(cases), repeats, warmup)


def launch_once(slug: str, case="B1", params: dict | None = None, seed: int = 0):
    """One launch of the step and nothing else (a clean target for Nsight Compute)."""
    impl = STEPS.impl(slug)
    require_gpu()
    return harness.launch_once(STUDY, slug, case, None, impl.params(**(params or {})), seed)
