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

from .. import harness
from ..checks import CheckResult
from ..study import Column, Study
from . import require_gpu
from .problem import CASES, MlpShape
from .steps import STEPS


class MlpStudy(Study):
    title = "Fully connected network inference (71 → 64 → 64 → 4)"
    steps = STEPS
    cases = tuple(CASES)
    case_header = "Test case"
    size_header = "Columns"
    size_name = "cases"
    rows = "cases"
    default_sizes = tuple(CASES)
    vendor_name = "pytorch"   # the recorded part's name (kept: runs are stored under it)
    old_vendor_names = {"pytorch-fp32": "torch-fp32", "pytorch-tf32": "torch-tf32", "pytorch-fp16": "torch-fp16"}
    profile_size = CASES["100x100"]
    sanitizer_size = CASES["5x5"]
    SANITIZER_COLUMNS = 2 * 65_536 + 36

    def sanitizer_problem(self, case: str):
        """compute-sanitizer launches the 100x100 case on ``SANITIZER_COLUMNS`` columns instead of
        its 2,097,152: above every step's default ``switch_columns`` (65,536, so the same kernels
        run), a multiple of 4 as the case's own (the vectorised loads), with a partial tile at the
        end, at a sixteenth of the accesses memcheck instruments (the whole case took up to a minute a
        check). The 5x5 case is checked on its own 12,800 columns."""
        return None if CASES[case] <= self.SANITIZER_COLUMNS else MlpShape(self.SANITIZER_COLUMNS)


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

    # ------------------------------------------------------------------ the problem, for the harness

    def inputs(self, impl, shape, rng, case=None):
        """The shipped weights and the study's signals (the same for every seed: what is profiled
        is what is timed)."""
        from .data import load_weights, make_signals

        return make_signals(shape.N), load_weights()

    def operands(self, impl, shape, host):
        from .run import operands

        return operands(impl, shape, host)

    def check_cases(self, impl, params, n_random, rng):
        from .run import check_cases

        return check_cases(impl, params, n_random, rng)

    def judge(self, impl, got, case):
        from .run import judge

        return judge(impl, got, case)

    def case_records(self, impl, case, shape, params, operands, run, output, op, context, time):
        from .run import case_records

        return case_records(case, operands[0], run, output, time)

    def vendor_runs(self, sizes, seed):
        from .run import vendor_runs

        return vendor_runs(sizes, seed)

    def targets(self) -> list[dict]:
        """The book's targets for this study (H100; its own, past the write-ups): FP32 on CUDA cores
        <= 0.9 ms at 100x100 (and >= 2.5x PyTorch FP32 in the same run: ``vendor_ratio``);
        FP32-accurate over float's range on tensor cores <= 0.25 ms; 5x5 <= 6 us per
        inference, judged on every step (that target names no precision) and, in a row of its own, on
        the steps that are FP32-accurate over float's whole range. FP16 has no time target: its best
        step moves the bytes at nearly the measured copy rate, so its floor is the target."""
        cuda_fp32 = ["baseline", "fused-global", "fused-shared", "whole-net-shared", "shared-and-registers",
                     "last-layer-coop", "whole-net-registers", "fp32-register-tiled"]
        return [
            {"what": "100x100, FP32 on CUDA cores", "case": "100x100", "limit_ms": 0.90, "steps": cuda_fp32,
             "vendor": "torch-fp32", "vendor_ratio": 2.5},
            {"what": "100x100, FP32-accurate (whole range) on tensor cores", "case": "100x100", "limit_ms": 0.25,
             "steps": ["tensor-core-3xtf32", "final-full-range", "wgmma-full-range"], "vendor": "torch-fp32"},
            {"what": "5x5, per call in a graph of back-to-back calls", "case": "5x5",
             "limit_ms": 0.006,
             "steps": self.steps.slugs(), "vendor": None},
            {"what": "5x5, per call, FP32-accurate over float's range", "case": "5x5",
             "limit_ms": 0.006,
             "steps": ["tensor-core-3xtf32", "final-full-range", "wgmma-full-range"], "vendor": None},
        ]

    def reported_best(self):
        import pandas as pd

        from ..bookrun import load_recorded
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
        from ..summary import opening_lines

        lines = opening_lines(self, chapter)
        if lines is None:
            return ["The step failed its correctness check; nothing was timed."]
        measure = "scaled absolute difference against the CPU float32 result" if chapter.step.impl.precision == "fp16" \
            else "relative L2 error against float64"
        worst = max((c.get("measured") or 0.0 for c in chapter.checks), default=0.0)
        limit = chapter.checks[0].get("tolerance") if chapter.checks else None
        lines.append(f"Accuracy: the worst {measure} over the correctness table's {len(chapter.checks)} checks is "
                     f"{worst:.2e}" + (f" (limit {limit:g})" if limit else "")
                     + "; the measurement table gives each timed case's own.")
        for case in self.cases:
            op = find_record(chapter.records, "op_time_ms", case)
            up = find_record(chapter.records, "time_with_upload_ms", case)
            if op is None:
                continue
            seconds = op["value"] / 1e3
            line = (f"{case} ({op['size']:,} columns): {format_ms(op['value'])}, {op['flops'] / seconds / 1e9:,.0f} "
                    f"GFLOP/s and {op['min_bytes'] / seconds / 1e9:,.0f} GB/s of the fewest bytes")
            if up is not None:
                line += f"; with the upload of x, {format_ms(up['value'])} ({up['value'] / op['value']:.1f}× longer)"
            lines.append(line + ".")
            for _, row in self.reported_frame(chapter.slug).iterrows():
                if row["case"] == case:  # another device: shown, never divided (its table has both)
                    lines.append(f"{case}: the write-up reports {row['time_ms']:g} ms on its {row['gpu']} "
                                 f"(`{row['seed']}`), a different GPU: the write-ups' table sets the two side by "
                                 "side; no ratio across devices is drawn here.")
        return lines


STUDY = MlpStudy()


# ---------------------------------------------------------------- the harness's loops, by step name


def check_step(slug: str, params: dict | None = None, n_random: int = 6, seed: int | None = None
               ) -> list[CheckResult]:
    """The step against float64 on N in FIXED_COLUMNS plus ``n_random`` random N (2..20000)."""
    require_gpu()
    impl = STEPS.impl(slug)
    return harness.check_step(STUDY, impl, impl.params(**(params or {})), n_random, seed)


def measure_step(slug: str, params: dict | None = None, cases=("5x5", "100x100"), repeats: int = 20,
                 warmup: int = 3) -> list[dict]:
    """Records op_time_ms, time_with_upload_ms, scaled_abs_diff and rel_l2_error per case."""
    require_gpu()
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    return harness.measure(STUDY, impl, {case: merged for case in STUDY.cases}, list(cases), repeats, warmup, {})


def measure_vendor(cases=("5x5", "100x100"), repeats: int = 20, warmup: int = 3) -> list[dict]:
    require_gpu()
    return harness.vendor(STUDY, list(cases), repeats, warmup)


def launch_once(slug: str, case: str, params: dict | None = None):
    """Prepare, and return a callable that launches the step once for a test case."""
    require_gpu()
    impl = STEPS.impl(slug)
    return harness.launch_once(STUDY, slug, case, None, impl.params(**(params or {})))


