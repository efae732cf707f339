"""Development candidates (``kernelbook try`` / ``promote``) on a fabricated study: NumPy arrays for
the device, a timer that reads what the last launch was built with, and ``.cu`` files whose text
and ``-D`` values decide what the "kernel" computes. The loop is the book's own (checks against
float64, the sweep, the compiler report with nvcc); only the GPU is pretended."""

from __future__ import annotations

import gzip
import re
import subprocess

import pytest
from toyproblem import Vec, VecStudy

from kernelbook import candidate, develop, harness, limits, paths, results
from kernelbook.errors import GPUUnavailable, ParameterError, ResultsError, StepError
from kernelbook.measure import Measured
from kernelbook.steps import Launch, Step, StepImpl, StepList

# ------------------------------------------------------------------------------ a study in NumPy

HEADER = """#pragma once
#ifndef SCALE
#define SCALE 2
#endif
"""
STEP_SOURCE = """#include "rows.cuh"
#ifndef COST
#define COST 4
#endif
extern "C" __global__ void __launch_bounds__(256, 1) double_rows(float* y, const float* x, int n)
{
    int i = blockIdx.x * n + threadIdx.x;
    if (threadIdx.x < n) y[i] = SCALE * x[i] + 0 * COST;
}
"""
TILED_SOURCE = STEP_SOURCE.replace("double_rows", "double_tiled")
BUILT: list[dict] = []   # what each launch was built with (the fake timer reads the last one)


def _define(text: str, name: str, default: int | None = None) -> int:
    found = re.search(rf"#define {name} (\d+)", text)
    return int(found.group(1)) if found or default is None else default


class Rows(StepImpl):
    kernel_names = ("double_rows",)
    defaults = {"threads": 64}

    def launches(self, shape, params):
        return [Launch(self.kernel_names[0], (shape.b,), (params["threads"],))]

    def launch_args(self, launch, y, operands, shape, params):
        return (y, operands[0], shape.n)

    def kernel(self, name, params, problem):
        """The "build": the file (and its header) read as they are, with the defines over them."""
        folder = paths.kernels_dir()
        text = "".join((folder / rel).read_text() for rel in candidate.compiled_files(self.source))
        assert re.search(rf"\b{name}\s*\(", text), f"{self.source} defines no {name}"
        defines = self.defines(params, problem)
        scale = int(defines.get("SCALE", _define(text, "SCALE")))
        cost = int(defines.get("COST", _define(text, "COST")))
        # a "kernel" with COST below BROKEN_BELOW is wrong on every width but the two cases' (8, 40)
        broken = cost < int(defines.get("BROKEN_BELOW", _define(text, "BROKEN_BELOW", 0)))

        def run(grid, block, args, shared_mem=0, stream=None):
            y, x, n = args
            BUILT.append({"source": self.source, "scale": scale, "cost": cost})
            y[...] = scale * x + (1.0 if broken and n not in (8, 40) else 0.0)

        return run


class Tiled(Rows):
    kernel_names = ("double_tiled",)
    defaults = {"threads": 64, "tile": 4}

    def defines(self, params, problem):
        return {"TILE": params["tile"], **({"WIDE": 1} if params["tile"] > 4 else {})}


class SameKernel(Rows):
    pass


STEPS = StepList("toy", [Step(0, "rows", "00_rows", "Rows", Rows),
                         Step(1, "tiled", "01_tiled", "Tiled", Tiled),
                         Step(2, "same-kernel", "02_same_kernel", "Same kernel", SameKernel)])


def fake_timer(fn, repeats, warmup, graph=False, timing="events"):
    """Runs ``fn``; the "time" is the COST the last launch was built with (so a sweep has a best)."""
    for _ in range(warmup + repeats):
        fn()
    cost = BUILT[-1]["cost"] if BUILT else 1
    return Measured([0.1 * cost] * repeats, extra={"timing": "cuda-graph" if graph else timing})


class Toy(VecStudy):
    module = "tests.test_develop"
    steps = STEPS
    default_sizes = (2,)
    repeats = 3
    warmup = 1
    check_shapes = 1

    def check_cases(self, impl, params, n_random, rng):
        return self.doubled(impl, [("short", Vec(1, 8)), ("long", Vec(1, 40))] + [("random", Vec(1, 5))] * n_random, rng)

    def case_records(self, impl, case, shape, params, operands, run, output, op, context, time):
        """A study's own look-up by slug (as LeNet's network does) must reach what is timed."""
        return [("looked_up_is_timed", float(STEPS.impl(impl.slug) is impl), "")]

    def measure(self, impl, case_params, sizes, repeats, warmup, options):
        return harness.measure(self, impl, case_params, sizes, repeats, warmup, options, timer=fake_timer)


STUDY = Toy()


@pytest.fixture
def toy(tmp_path, monkeypatch, results_root):
    """The toy's kernels folder, a development store beside the book's, and a pretended GPU."""
    from kernelbook import gpu

    kernels = tmp_path / "kernels"
    (kernels / "toy").mkdir(parents=True)
    (kernels / "toy" / "rows.cuh").write_text(HEADER)
    (kernels / "toy" / "00_rows.cu").write_text(STEP_SOURCE)
    (kernels / "toy" / "01_tiled.cu").write_text(TILED_SOURCE)
    (kernels / "toy" / "02_same_kernel.cu").write_text(STEP_SOURCE)
    monkeypatch.setattr(paths, "kernels_dir", lambda: kernels)
    dev = tmp_path / "dev"
    monkeypatch.setenv("KERNELBOOK_DEV_DIR", str(dev))
    monkeypatch.setenv("KERNELBOOK_COMMIT", "abc123def456")
    monkeypatch.setattr(gpu, "availability", lambda: (True, "Test GPU 9000"))
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Test GPU 9000", "compute_capability": "9.0"})
    monkeypatch.setattr(limits, "current", lambda: limits.H100)   # the pretended GPU's limits
    from kernelbook.evidence import ncu

    monkeypatch.setattr(ncu, "ncu_path", lambda: None)            # no profiler, on any machine
    BUILT.clear()
    return kernels / "toy", dev, results_root


def _try(source, study=None, timer=fake_timer, **kwargs):
    lines: list[str] = []
    tried = develop.try_candidate(study or STUDY, source, log=lines.append, timer=timer, **kwargs)
    return tried, lines


def _book_run(step="rows"):
    """A book run of a step, made by the chapter loop itself into data/results."""
    from kernelbook.chapter import run_chapter

    return run_chapter(STUDY, step, mode="measure").session.run.run_id


# ------------------------------------------------------------------------------ which step


def test_a_steps_own_file_stands_for_that_step_and_a_new_file_for_the_step_whose_kernels_it_defines(toy):
    folder, _, _ = toy
    assert candidate.choose_step(STUDY, "toy/01_tiled.cu") == "tiled"
    (folder / "tiled_wide.cu").write_text(TILED_SOURCE)
    assert candidate.choose_step(STUDY, "toy/tiled_wide.cu") == "tiled"
    # the kernel names behind __launch_bounds__ and in an included header count alike
    (folder / "wrapper.cu").write_text('#include "tiled_wide.cu"\n')
    assert candidate.kernel_names("toy/wrapper.cu") == {"double_tiled"}
    assert candidate.choose_step(STUDY, "toy/wrapper.cu", step="rows") == "rows"


def test_a_file_whose_kernels_match_several_steps_or_none_is_refused_naming_the_fix(toy):
    folder, _, _ = toy
    (folder / "rows_wide.cu").write_text(STEP_SOURCE)
    with pytest.raises(StepError, match=r"2 steps \(rows, same-kernel\)") as found:
        candidate.choose_step(STUDY, "toy/rows_wide.cu")
    assert "--step SLUG" in found.value.fix and "rows, same-kernel" in found.value.fix
    (folder / "nothing.cu").write_text('extern "C" __global__ void other(float* y) {}\n')
    with pytest.raises(StepError, match="defines the kernels other, which are all of no toy step") as found:
        candidate.choose_step(STUDY, "toy/nothing.cu")
    assert "one of rows, tiled, same-kernel" in found.value.fix


def test_a_source_outside_the_steps_folder_or_numbered_like_a_step_is_refused(toy, tmp_path):
    folder, _, _ = toy
    elsewhere = tmp_path / "x.cu"
    elsewhere.write_text(STEP_SOURCE)
    with pytest.raises(ParameterError, match="not a .cu file in kernels/toy/") as found:
        candidate.resolve_source(STUDY, elsewhere)
    assert "kernels/toy/<name>.cu" in found.value.fix
    (folder / "07_new.cu").write_text(STEP_SOURCE)
    with pytest.raises(ParameterError, match="numbered like a step") as found:
        candidate.resolve_source(STUDY, folder / "07_new.cu")
    assert "kernels/toy/new.cu" in found.value.fix
    with pytest.raises(ParameterError, match="does not exist"):
        candidate.resolve_source(STUDY, "kernels/toy/missing.cu")
    assert candidate.resolve_source(STUDY, folder / "00_rows.cu") == "toy/00_rows.cu"


def test_bad_defines_and_parameters_are_refused_before_anything_runs(toy):
    _, dev, _ = toy
    with pytest.raises(ParameterError, match="sets TILE itself") as found:
        _try("kernels/toy/01_tiled.cu", defines={"TILE": 8})
    assert "-P name=value: threads, tile" in found.value.fix
    with pytest.raises(ParameterError, match="sets WIDE itself"):   # the step sets it for one swept value
        _try("kernels/toy/01_tiled.cu", defines={"WIDE": 1}, sweep={"tile": [4, 8]})
    with pytest.raises(ParameterError, match="-D tile: not a compile-time parameter name"):
        _try("kernels/toy/01_tiled.cu", defines={"tile": 8})
    with pytest.raises(ParameterError, match="has no parameter"):
        _try("kernels/toy/00_rows.cu", params={"blocks": 2})
    with pytest.raises(ParameterError, match="both swept and set"):
        _try("kernels/toy/00_rows.cu", defines={"COST": 2}, sweep={"COST": [1, 2]})
    assert BUILT == [] and not dev.exists()


def test_without_a_gpu_try_is_refused_with_the_device_script(toy, monkeypatch):
    from kernelbook import gpu

    monkeypatch.setattr(gpu, "availability", lambda: (False, "no CUDA GPU on this machine"))
    with pytest.raises(GPUUnavailable) as found:
        _try("kernels/toy/00_rows.cu")
    assert "scripts/device_try.sh toy kernels/toy/00_rows.cu" in found.value.fix


# ------------------------------------------------------------------------------ the loop


def test_a_candidate_goes_through_the_chapter_loop_into_the_development_store_only(toy):
    folder, dev, book = toy
    (folder / "rows_cheap.cu").write_text(STEP_SOURCE.replace("#define COST 4", "#define COST 1"))
    tried, lines = _try("kernels/toy/rows_cheap.cu", step="rows", defines={"SCALE": 2}, profile=True)
    assert list(book.iterdir()) == []                        # nothing in data/results
    # Nsight Compute is asked through the chapter's own evidence code; where it cannot run, it says why
    assert any(line.startswith("Nsight Compute: not profiled:") for line in lines), lines
    run = results.load_run(tried.run.run_id, dev)
    assert run.manifest["candidate"]["step"] == "rows" and run.manifest["candidate"]["defines"] == {"SCALE": 2}
    assert {"toy-rows", "toy-rows-compiler"} <= set(run.part_names())
    part = run.read_part("toy-rows")
    assert part["parameters"]["candidate"]["label"] == "rows_cheap.cu -DSCALE=2"
    assert {r["candidate"] for r in part["records"]} == {"rows_cheap.cu -DSCALE=2"}
    ops = [r for r in part["records"] if r["metric"] == "op_time_ms"]
    assert [(r["layer"], r["value"], r["params"]) for r in ops] == [
        ("short", pytest.approx(0.1), {"threads": 64, "SCALE": 2}), ("long", pytest.approx(0.1), {"threads": 64, "SCALE": 2})]
    assert part["checks"] and all(c["passed"] for c in part["checks"])
    assert [r["value"] for r in part["records"] if r["metric"] == "looked_up_is_timed"] == [1.0, 1.0]
    assert type(STEPS.impl("rows")) is Rows                   # the step's own implementation is back
    assert {b["source"] for b in BUILT} == {"toy/rows_cheap.cu"}   # the candidate's file, never the step's
    # the files it compiled are kept compressed, with their sha256, beside the records
    files = run.manifest["candidate"]["files"]
    assert set(files) == {"toy/rows_cheap.cu", "toy/rows.cuh"}
    kept = run.root / "candidate" / "toy" / "rows.cuh.gz"
    assert gzip.decompress(kept.read_bytes()) == (folder / "rows.cuh").read_bytes()
    assert develop.sha256(folder / "rows.cuh") == files["toy/rows.cuh"]
    assert candidate.kept_problems(run.root, run.manifest["candidate"]) == []
    assert not (run.root / "candidate" / "toy" / "rows.cuh").exists()   # a record, never a source beside the code
    # the compiler report built the candidate with nvcc (the real report, from ptxas)
    compiled = run.read_part("toy-rows-compiler")["records"]
    assert {r["source"] for r in compiled} == {"toy/rows_cheap.cu"} and any(r["metric"] == "registers" for r in compiled)
    assert any(line.startswith("checks: passed") for line in lines) and tried.chapter.correct


def test_a_candidate_that_fails_its_float64_check_is_recorded_and_never_timed(toy):
    _, dev, _ = toy
    timed = []

    def timer(*args, **kwargs):
        timed.append(1)
        return fake_timer(*args, **kwargs)

    lines: list[str] = []
    tried = develop.try_candidate(STUDY, "kernels/toy/00_rows.cu", defines={"SCALE": 3}, log=lines.append,
                                  timer=timer)
    assert timed == [] and not tried.chapter.correct
    part = results.load_run(tried.run.run_id, dev).read_part("toy-rows")
    assert {r["metric"] for r in part["records"]} == {"correct"}
    assert any("FAILED" in line and "not timed" in line for line in lines)


def test_a_declared_sweep_is_one_run_then_the_chapter_at_its_best_configuration(toy):
    _, dev, _ = toy
    tried, lines = _try("kernels/toy/00_rows.cu", sweep={"COST": [3, 1, 2], "SCALE": [2, 5]})
    run = results.load_run(tried.run.run_id, dev)
    grid = run.read_part("toy-rows-grid")["records"]
    statuses = {(r["config_label"], r["layer"]): (r["status"], r["value"]) for r in grid}
    assert len(statuses) == 12
    assert all(s.startswith("failed check") and v is None for (label, _), (s, v) in statuses.items()
               if "SCALE=5" in label)
    assert statuses[("COST=1, SCALE=2", "long")] == ("ok", pytest.approx(0.1))
    # one line per configuration, then the chapter at the fastest correct one
    assert [line for line in lines if "] checking" in line][0] == "  [1/6] checking COST=3, SCALE=2 against float64"
    assert sum(1 for line in lines if re.match(r"  \[\d/6\] checking COST=", line)) == 6
    assert "checking the candidate at COST=1, SCALE=2 against float64" in lines
    assert sum(1 for line in lines if re.match(r"  COST=\d, SCALE=\d: ", line)) == 6
    ops = [r for r in run.read_part("toy-rows")["records"] if r["metric"] == "op_time_ms"]
    assert {r["params"]["COST"] for r in ops} == {1} and all(r["candidate"] for r in ops)


class TwoLayers(Toy):
    """As LeNet: the timed problems share what the study's options name (its weights, which only
    ``options()`` knows), and the two layers are timed apart, each with its own fastest COST."""

    def options(self, **given):
        return {"weights": "toy-weights.bin"}

    def timing_context(self, impl, case_params, sizes, options):
        return {"weights": options["weights"], "timing": []}

    def timed_operands(self, impl, case, size, shape, context):
        TIMING.append(case)
        return super().timed_operands(impl, case, size, shape, context)


TIMING: list[str] = []   # the case being timed (the two-layer timer reads the last one)


def layer_timer(fn, repeats, warmup, graph=False, timing="events"):
    """"short" is fastest at the smallest COST, "long" at the largest (of 1..3)."""
    measured = fake_timer(fn, repeats, warmup, graph, timing)
    cost = BUILT[-1]["cost"]
    value = 0.1 * cost if TIMING[-1] == "short" else 0.1 * (10 - cost)
    return Measured([value] * repeats, extra=measured.extra)


def test_a_two_layer_sweep_times_with_the_studys_options_and_picks_each_layers_fastest(toy):
    _, dev, _ = toy
    TIMING.clear()
    tried, lines = _try("kernels/toy/00_rows.cu", study=TwoLayers(), timer=layer_timer, sweep={"COST": [2, 1, 3]})
    run = results.load_run(tried.run.run_id, dev)
    grid = run.read_part("toy-rows-grid")["records"]
    assert {(r["config_label"], r["layer"]): r["value"] for r in grid} == {
        ("COST=2", "short"): pytest.approx(0.2), ("COST=2", "long"): pytest.approx(0.8),
        ("COST=1", "short"): pytest.approx(0.1), ("COST=1", "long"): pytest.approx(0.9),
        ("COST=3", "short"): pytest.approx(0.3), ("COST=3", "long"): pytest.approx(0.7)}
    # per layer: each layer's own fastest, which is also the smallest sum of the two (timed apart)
    assert "chapter at each case's fastest correct configuration: short: COST=1 (0.1000 ms); " \
           "long: COST=3 (0.7000 ms); sum 0.8000 ms" in lines
    # (a study whose cases are separate problems, a row each, shows no sum)
    assert "sum" not in develop.best_line(tried.sweep, {"short": {"COST": 1}, "long": {"COST": 3}}, summed=False)
    ops = {r["layer"]: (r["params"]["COST"], r["value"]) for r in run.read_part("toy-rows")["records"]
           if r["metric"] == "op_time_ms"}
    assert ops == {"short": (1, pytest.approx(0.1)), "long": (3, pytest.approx(0.7))} and tried.chapter.correct


def test_an_error_of_a_sweeps_timing_is_its_own_never_a_missing_metric(toy):
    class NoOptions(TwoLayers):   # its timing asks for an option it was never given
        def options(self, **given):
            return {}

    with pytest.raises(KeyError, match="weights"):
        _try("kernels/toy/00_rows.cu", study=NoOptions(), timer=layer_timer, sweep={"COST": [1, 2]})


DRAWN: list[list[float]] = []   # the inputs of every check case, per check_cases call


class Drawn(Toy):
    def check_cases(self, impl, params, n_random, rng):
        cases = super().check_cases(impl, params, n_random, rng)
        DRAWN.append([float(c.host[0].sum()) for c in cases])
        return cases


def test_a_sweep_checks_each_configuration_on_the_chapters_own_check_cases(toy):
    folder, dev, _ = toy
    DRAWN.clear()
    # COST=1 is the fastest and right on both cases' widths, wrong on the chapter's random shapes
    (folder / "rows_fragile.cu").write_text("#define BROKEN_BELOW 2\n" + STEP_SOURCE)
    tried, lines = _try("kernels/toy/rows_fragile.cu", study=Drawn(), step="rows", sweep={"COST": [1, 2, 3]})
    run = results.load_run(tried.run.run_id, dev)
    grid = {(r["config_label"], r["layer"]): (r["status"], r["value"]) for r in run.read_part("toy-rows-grid")["records"]}
    assert grid[("COST=1", "short")][0].startswith("failed check: random") and grid[("COST=1", "short")][1] is None
    assert grid[("COST=2", "long")] == ("ok", pytest.approx(0.2))
    assert tried.chapter.correct and any(line.startswith("checks: passed") for line in lines)
    assert {r["params"]["COST"] for r in run.read_part("toy-rows")["records"] if r["metric"] == "op_time_ms"} == {2}
    # three configurations and the chapter: one seed, the same random shapes and inputs each time
    assert len(DRAWN) == 4 and all(d == DRAWN[0] for d in DRAWN) and len(DRAWN[0]) == 2 + Drawn.check_shapes
    seed = run.read_part("toy-rows")["parameters"]["seed"]
    assert isinstance(seed, int) and run.read_part("toy-rows-grid")["parameters"]["seed"] == seed


JUDGED: list[int] = []   # each verdict on a COST=1 build


class Flaky(Toy):
    """COST=1 passes its first check set (the sweep's) and fails every later one (the chapter's):
    a result that varies from launch to launch, on the same check cases."""

    def judge(self, impl, got, case):
        verdict = super().judge(impl, got, case)
        if BUILT[-1]["cost"] == 1:
            JUDGED.append(1)
            verdict.passed = verdict.passed and len(JUDGED) <= 2 + self.check_shapes
        return verdict


def test_a_configuration_the_chapters_checks_fail_is_failed_in_the_grid_and_the_next_fastest_runs(toy):
    _, dev, _ = toy
    JUDGED.clear()
    tried, lines = _try("kernels/toy/00_rows.cu", study=Flaky(), sweep={"COST": [1, 2, 3]})
    run = results.load_run(tried.run.run_id, dev)
    grid = {(r["config_label"], r["layer"]): (r["status"], r["value"]) for r in run.read_part("toy-rows-grid")["records"]}
    assert grid[("COST=1", "short")] == ("failed check: the chapter's checks at this configuration failed", None)
    assert grid[("COST=2", "short")] == ("ok", pytest.approx(0.2))
    assert any(line.startswith("the chapter's checks failed where the sweep's passed (long: COST=1; short: COST=1)")
               for line in lines), lines
    assert tried.chapter.correct
    ops = [r for r in run.read_part("toy-rows")["records"] if r["metric"] == "op_time_ms"]
    assert {r["params"]["COST"] for r in ops} == {2} and all(r["candidate"] for r in ops)


def test_an_interrupted_candidate_keeps_what_it_recorded_named_and_its_files(toy):
    _, dev, _ = toy
    calls = []

    def timer(*args, **kwargs):   # the sweep's two timings pass, the chapter's first one is interrupted
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("interrupted")
        return fake_timer(*args, **kwargs)

    with pytest.raises(RuntimeError, match="interrupted"):
        develop.try_candidate(STUDY, "kernels/toy/00_rows.cu", sweep={"COST": [1]}, log=lambda line: None,
                              timer=timer)
    (run,) = results.list_runs(dev)
    assert run.part_names() == ["toy-rows-grid"]
    assert {r["candidate"] for r in run.read_part("toy-rows-grid")["records"]} == {"00_rows.cu --sweep COST=1"}
    assert (run.root / "candidate" / "toy" / "00_rows.cu.gz").is_file()


# ------------------------------------------------------------------------------ compare, promote


def test_compare_lines_a_development_run_up_with_a_book_run(toy, capsys):
    from kernelbook import cli

    _, dev, book = toy
    book_run = _book_run()
    (toy[0] / "rows_cheap.cu").write_text(STEP_SOURCE.replace("#define COST 4", "#define COST 1"))
    tried, lines = _try("kernels/toy/rows_cheap.cu", step="rows")
    assert not (book / tried.run.run_id).exists() and (dev / tried.run.run_id).is_dir()
    assert lines[-1].endswith(f"kernelbook compare {book_run} {tried.run.run_id} --study toy")
    status = cli.main(["compare", book_run, tried.run.run_id, "--study", "toy", "--format", "md"])
    out = capsys.readouterr().out
    assert status == 0
    assert f"B: {tried.run.run_id}" in out and "candidate rows_cheap.cu for step rows" in out
    rows = [line for line in out.splitlines() if line.startswith("| toy | rows |") and "op_time_ms" in line]
    assert len(rows) == 2 and all("| toy-rows |" in r and "| faster |" in r for r in rows)  # 0.4 -> 0.1 ms
    from kernelbook.compare import find_run

    with pytest.raises(ResultsError, match="No recorded run"):
        find_run("20260101T0000Z-000000")


def test_promote_copies_a_validated_run_that_never_becomes_the_steps_newest_recording(toy, monkeypatch):
    from kernelbook import gpu, session, summary

    _, dev, book = toy
    book_run = _book_run()
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Other GPU 1", "compute_capability": "9.0"})
    tried, _ = _try("kernels/toy/00_rows.cu", defines={"COST": 1})
    run_id = tried.run.run_id
    promoted = develop.promote(run_id, log=lambda line: None)
    assert promoted.root == book / run_id and (book / run_id / "candidate" / "toy" / "00_rows.cu.gz").is_file()
    assert results.check_store(book) == []
    # the book's replay of the step still shows the book's run, however new the candidate is
    assert results.run_with("toy-rows").run_id == book_run
    shown = session.replayed("toy-rows", "toy")
    assert shown.session.run.run_id == book_run
    assert "Only one device" in summary.devices(STUDY).to_html()   # the candidate's device is no book device
    # a chapter cites the candidate by its id
    from kernelbook.chapter import run_chapter

    cited = run_chapter(STUDY, "rows", mode="replay", replay_run=run_id)
    assert cited.session.run.run_id == run_id and all(r["candidate"] for r in cited.records)
    assert f"run {run_id} (candidate 00_rows.cu -DCOST=1 for step rows)" in cited.session.label   # the banner
    with pytest.raises(ResultsError, match="already"):
        develop.promote(run_id)


def test_a_page_replaying_a_promoted_candidate_shows_the_file_it_ran_kept_in_its_run(toy):
    from kernelbook import executed
    from kernelbook.chapter import run_chapter

    folder, _, book = toy
    book_run = _book_run()
    ran = STEP_SOURCE.replace("#define COST 4", "#define COST 1")
    (folder / "rows_cheap.cu").write_text(ran)
    tried, _ = _try("kernels/toy/rows_cheap.cu", step="rows")
    develop.promote(tried.run.run_id, log=lambda line: None)
    (folder / "rows_cheap.cu").write_text("// edited since it ran\n")     # what the run kept is shown
    (folder / "rows.cuh").write_text("// the header edited too\n")
    shown = run_chapter(STUDY, "rows", mode="replay", replay_run=tried.run.run_id).source()
    kept = book / tried.run.run_id / "candidate" / "toy"
    assert shown.text == ran and shown.headers == [("toy/rows.cuh.gz", HEADER)]
    assert repr(shown).endswith(f"{tried.run.run_id}/candidate/toy/rows_cheap.cu.gz")
    # the page's metadata names the kept files, which never change: the page is never stale for them
    meta = shown._metadata()["kernelbook_source"]
    assert (paths.REPO_ROOT / meta["path"]) == kept / "rows_cheap.cu.gz"
    assert develop.sha256(kept / "rows_cheap.cu.gz") == meta["sha256"]
    nb = {"cells": [{"outputs": [{"metadata": {"text/markdown": shown._metadata()}}]}]}
    assert executed.stale_sources(type("NB", (), nb)(), paths.REPO_ROOT) == []
    # the step's own page still shows the step's own file
    own = run_chapter(STUDY, "rows", mode="replay", replay_run=book_run).source()
    assert repr(own) == "kernels/toy/00_rows.cu" and "double_rows" in own.text


def test_promote_refuses_a_book_run_an_unknown_run_and_a_changed_candidate_file(toy):
    _, dev, book = toy
    with pytest.raises(ResultsError, match="No development run") as found:
        develop.promote("20260101T0000Z-000000")
    assert "--dev" in found.value.fix
    tried, _ = _try("kernels/toy/00_rows.cu")
    copied = dev / tried.run.run_id / "candidate" / "toy" / "00_rows.cu.gz"
    copied.write_bytes(gzip.compress(gzip.decompress(copied.read_bytes()) + b"// edited afterwards\n"))
    assert results.check_store(dev) == [f"The candidate's file candidate/toy/00_rows.cu in run {tried.run.run_id} "
                                        "is missing or differs from the sha256 recorded when it ran"]
    with pytest.raises(ResultsError, match="differs from the sha256"):
        develop.promote(tried.run.run_id)
    # a run kept before its copies were compressed is read as it lies
    copied.unlink()
    copied.with_suffix("").write_text(STEP_SOURCE)
    assert results.check_store(dev) == []
    assert not (book / tried.run.run_id).exists() and not any(p.name.startswith(".") for p in book.iterdir())


def test_the_profilers_process_rebuilds_the_same_candidate(toy):
    from kernelbook.candidate import candidate_impl, candidate_study
    from kernelbook.evidence.tools import target_command

    impl = candidate_impl(STUDY, "rows", "toy/00_rows.cu", {"COST": 2})
    view = candidate_study(STUDY, impl)
    params = impl.params(SCALE=2)
    cmd = target_command(view, "rows", {"short": params}, 2, ["short"])
    assert cmd[-2:] == ["--source", "toy/00_rows.cu"] and '"COST": 2' in cmd[cmd.index("--case-params") + 1]
    assert "--source" not in target_command(STUDY, "rows", {"short": {}}, 2, ["short"])
    # what the target builds from the recorded parameters alone
    again = candidate_study(STUDY, candidate_impl(STUDY, "rows", "toy/00_rows.cu"))
    rebuilt = again.impl("rows")
    assert rebuilt.defines(rebuilt.params(**params), Vec(2, 8)) == {"COST": 2, "SCALE": 2}
    assert again.impl("tiled") is STUDY.impl("tiled") and STUDY.impl("rows").source == "toy/00_rows.cu"


def test_the_development_store_is_git_ignored_and_try_imports_no_notebook_stack():
    ignored = subprocess.run(["git", "check-ignore", "-q", "data/dev/20260101T0000Z-000000/manifest.json"],
                             cwd=paths.REPO_ROOT)
    assert ignored.returncode == 0
    code = ("import sys, kernelbook.cli, kernelbook.develop, kernelbook.chapter, kernelbook.sweep, "
            "kernelbook.evidence.compiler, kernelbook.evidence.ncu; "
            "bad = [m for m in ('papermill', 'IPython', 'jupytext', 'nbclient', 'ipykernel') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    found = subprocess.run([__import__("sys").executable, "-c", code], cwd=paths.REPO_ROOT, capture_output=True,
                           text=True)
    assert found.returncode == 0, found.stdout + found.stderr
    assert paths.dev_results_dir() != paths.results_dir()


# ------------------------------------------------------------------------------ the device scripts

STAND_IN = """#!/usr/bin/env bash
# stands in for `python3 -m kernelbook try ARGS` on a machine without a GPU: records a valid run
echo "try $*"
exec {python} - "$@" <<'PY'
import sys
from kernelbook import results
run = results.create_run({{"device": {{"name": "Test GPU 9000"}}, "commit": "abc123def456", "host": "device",
                          "candidate": {{"step": "rows", "label": " ".join(sys.argv[3:])}}}},
                         root=__import__("kernelbook.paths").paths.dev_results_dir())
run.write_part("toy-rows", "toy", [results.record("toy", "rows", "short", 2, "op_time_ms", 0.1)])
PY
"""


def test_the_device_script_packs_each_candidates_run_and_the_import_puts_them_in_the_development_store(
        tmp_path, results_root):
    import sys
    import tarfile

    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    out, device_dev, home_dev = tmp_path / "out", tmp_path / "device-dev", tmp_path / "home-dev"
    out.mkdir()
    env = {**__import__("os").environ, "OUT": str(out), "PYTHON": str(stand_in), "KERNELBOOK_DEV_DIR": str(device_dev),
           "KERNELBOOK_COMMIT": "abc123def456"}
    done = subprocess.run(["bash", "scripts/device_try.sh", "toy", "kernels/toy/a.cu", "-D", "BM=128", "::",
                           "toy", "kernels/toy/a.cu", "-D", "BM=64"], cwd=paths.REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "try -m kernelbook try toy kernels/toy/a.cu -D BM=128\n" in done.stdout
    assert "try -m kernelbook try toy kernels/toy/a.cu -D BM=64\n" in done.stdout
    with tarfile.open(out / "try.tar.gz") as tar:
        names = tar.getnames()
    runs = sorted({n.split("/")[2] for n in names if n.startswith("data/dev/")})
    assert len(runs) == 2 and "logs/try.log" in names
    assert all(f"data/dev/{r}/parts/toy-rows.json" in names for r in runs)
    env["KERNELBOOK_DEV_DIR"] = str(home_dev)
    done = subprocess.run(["bash", "scripts/import_device_run.sh", str(out / "try.tar.gz")], cwd=paths.REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in home_dev.iterdir()) == runs and list(results_root.iterdir()) == []
    again = subprocess.run(["bash", "scripts/import_device_run.sh", str(out / "try.tar.gz")], cwd=paths.REPO_ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "exists already" in again.stderr


def test_results_runs_dev_lists_the_development_store_not_the_books(toy, capsys, monkeypatch):
    from kernelbook import cli

    _, dev, book = toy
    book_run = _book_run()
    (toy[0] / "rows_cheap.cu").write_text(STEP_SOURCE.replace("#define COST 4", "#define COST 1"))
    tried, _ = _try("kernels/toy/rows_cheap.cu", step="rows")
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(book))   # cli --dev may change it; restored after
    assert cli.main(["results", "--runs", "--dev"]) == 0
    out = capsys.readouterr().out
    assert tried.run.run_id in out and book_run not in out
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(book))
    assert cli.main(["results", "--runs"]) == 0
    out = capsys.readouterr().out
    assert book_run in out and tried.run.run_id not in out
