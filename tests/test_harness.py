"""The core harness on a fabricated study: NumPy arrays stand in for the device, a fake timer for
CUDA events. Nothing here knows LeNet, the MLP or VGG: what the core promises (validate before
any launch, poison, compare with float64, one timer, one record shape, one profiler launch)
holds for any study that answers the harness's questions."""

from __future__ import annotations

import numpy as np
import pytest
from toyproblem import Vec, VecStudy

from kernelbook import harness
from kernelbook.errors import LaunchLimitError, ShapeError
from kernelbook.measure import Measured
from kernelbook.steps import Launch, Step, StepImpl, StepList

LAUNCHES: list[str] = []


class Double(StepImpl):
    defaults = {"limit": 64}

    def validate(self, shape, params):
        if shape.n > params["limit"]:
            raise ShapeError(f"n={shape.n} is over {params['limit']}.", "pass a smaller n.")

    def launch(self, y, x, shape, params, stream=None):
        LAUNCHES.append(self.slug)
        y[...] = 2 * x


class HalfWritten(Double):
    def launch(self, y, x, shape, params, stream=None):
        LAUNCHES.append(self.slug)
        y[:, : shape.n // 2] = 2 * x[:, : shape.n // 2]


class Rounded(Double):
    tolerance = 1e-5

    def launch(self, y, x, shape, params, stream=None):
        LAUNCHES.append(self.slug)
        y[...] = (2 * x).astype(np.float16)


class Raises(Double):
    def launch(self, y, x, shape, params, stream=None):
        raise RuntimeError("the kernel fell over")


class Declared(StepImpl):
    """A step written the new way: its launches as data, nothing launched by hand."""

    defaults = {"threads": 32}

    def launches(self, shape, params):
        t = params["threads"]
        return [Launch("double_rows", (shape.b,), (t,), dynamic_smem=4 * t)]

    def launch_args(self, launch, y, operands, shape, params):
        (x,) = operands
        return (y, x, shape.n)

    def kernel(self, name, params, problem):
        def run(grid, block, args, shared_mem=0, stream=None):
            LAUNCHES.append((name, grid, block, shared_mem))
            y, x, n = args
            y[...] = 2 * x

        return run


STEPS = StepList("toy", [Step(0, "double", "00_double", "Double", Double),
                         Step(1, "half-written", "01_half_written", "Half written", HalfWritten),
                         Step(2, "rounded", "02_rounded", "Rounded", Rounded),
                         Step(3, "raises", "03_raises", "Raises", Raises),
                         Step(4, "declared", "04_declared", "Declared", Declared)])


class Toy(VecStudy):
    steps = STEPS
    default_sizes = (2, 3)

    def check_cases(self, impl, params, n_random, rng):
        shapes = [("short", Vec(1, 8)), ("long", Vec(1, 40))]
        while len(shapes) < 2 + n_random:  # random shapes inside what the step accepts
            shape = Vec(1, int(rng.integers(1, 100)))
            try:
                impl.validate(shape, params)
            except ShapeError:
                continue
            shapes.append(("random", shape))
        return self.doubled(impl, shapes, rng)

    def case_records(self, impl, case, shape, params, operands, run, output, op, context, time):
        got = output()
        return [("max_out", float(np.abs(got).max()), "")]

    def size_records(self, impl, size, context, time):
        return [("all", "size_time_ms", time(lambda: None), "ms")]

    def vendor_runs(self, sizes, seed):
        rng = np.random.default_rng(seed)
        for size in sizes:
            for case in self.cases:
                shape = self.problem(case, size)
                (x,) = self.inputs(None, shape, rng)
                yield harness.VendorRun("numpy-fp32", case, size, shape, lambda x=x: 2 * x,
                                        accuracy=lambda out, x=x: {"rel_l2_error": float(
                                            np.linalg.norm(out - 2 * x) / np.linalg.norm(2 * x))})


STUDY = Toy()
TIMED: list[dict] = []


def fake_timer(fn, repeats, warmup, graph=False, timing="events"):
    """Runs ``fn`` warm-up + repeats times and says how it was asked to time."""
    for _ in range(warmup + repeats):
        fn()
    TIMED.append({"graph": graph, "timing": timing})
    return Measured([1.0] * repeats, extra={"timing": "cuda-graph" if graph else timing})


def test_correct_step_passes_every_check_and_each_case_counts_random_shapes():
    records, rows = STUDY.check(STUDY.impl("double"), {"short": {"limit": 64}, "long": {"limit": 64}}, 4, 1)
    assert [(r["layer"], r["value"], r["n_checks"]) for r in records] == [("short", 1.0, 5), ("long", 1.0, 5)]
    assert len(rows) == 6 and all(r["passed"] and r["rel_l2_error"] == 0.0 for r in rows)
    assert [r["layer"] for r in rows] == ["short", "long"] + ["short, long"] * 4


def test_unwritten_output_stays_nan_and_fails():
    found = harness.check_step(STUDY, STUDY.impl("half-written"), {"limit": 64}, 0, 0)
    assert [c.passed for c in found] == [False, False]
    assert found[0].unwritten == 4 and found[1].unwritten == 20


def test_precision_loss_beyond_tolerance_fails():
    found = harness.check_step(STUDY, STUDY.impl("rounded"), {"limit": 64}, 0, 0)
    assert not any(c.passed for c in found)
    assert all(c.rel_l2_error > 1e-5 for c in found)


def test_a_launch_that_raises_is_a_failed_check_not_a_crash():
    records, rows = STUDY.check(STUDY.impl("raises"), {"short": {"limit": 64}, "long": {"limit": 64}}, 0, 0)
    assert all(r["value"] == 0.0 for r in records)
    assert all("the kernel fell over" in r["error"] for r in rows)


def test_per_case_parameters_are_checked_separately():
    records, rows = STUDY.check(STUDY.impl("double"), {"short": {"limit": 8}, "long": {"limit": 64}}, 0, 0)
    # with limit 8 the long case is refused; the short case's verdict does not count it
    assert [(r["layer"], r["value"]) for r in records] == [("short", 1.0), ("long", 1.0)]
    assert any(r["layer"] == "long" and r["params"] == {"limit": 8} and r["error"] for r in rows)


def test_measure_times_every_problem_with_one_timer_and_records_one_shape():
    TIMED.clear()
    impl = STUDY.impl("double")
    records = harness.measure(STUDY, impl, {"short": {"limit": 64}, "long": {"limit": 64}}, [2, 3], 3, 1, {},
                              timer=fake_timer)
    ops = [r for r in records if r["metric"] == "op_time_ms"]
    assert [(r["layer"], r["size"]) for r in ops] == [("short", 2), ("long", 2), ("short", 3), ("long", 3)]
    assert all(r["flops"] and r["min_bytes"] and r["params"] == {"limit": 64} and len(r["samples"]) == 3
               for r in ops)
    assert [r["size"] for r in records if r["metric"] == "size_time_ms"] == [2, 3]
    assert all(r["value"] > 0 for r in records if r["metric"] == "max_out")
    assert TIMED[0] == {"graph": True, "timing": "events"}


def test_measure_refuses_an_invalid_problem_before_any_launch():
    LAUNCHES.clear()
    with pytest.raises(ShapeError):
        harness.measure(STUDY, STUDY.impl("double"), {"short": {"limit": 4}, "long": {"limit": 4}}, [2], 3, 1, {},
                        timer=fake_timer)
    assert LAUNCHES == []


def test_launch_once_launches_nothing_until_called_then_once():
    LAUNCHES.clear()
    launch = STUDY.launch_once("double", "short", 2, {"limit": 64})
    assert LAUNCHES == []
    launch()
    assert LAUNCHES == ["double"]


def test_vendor_runs_are_checked_and_timed_with_one_timer():
    TIMED.clear()
    records = harness.vendor(STUDY, [2], 2, 0, timer=fake_timer)
    assert {r["step"] for r in records} == {"numpy-fp32"}
    ops = [r for r in records if r["metric"] == "op_time_ms"]
    assert len(ops) == 2 and all(r["rel_l2_error"] == 0.0 for r in ops)
    assert [r["metric"] for r in records].count("rel_l2_error") == 2


def test_a_step_declared_as_launches_is_checked_launched_and_profiled_from_one_list():
    impl = STUDY.impl("declared")
    LAUNCHES.clear()
    found = harness.check_step(STUDY, impl, impl.params(), 2, 0)
    assert all(c.passed for c in found) and LAUNCHES[0] == ("double_rows", (1,), (32,), 128)
    assert impl.kernels_for(impl.params(), Vec(2, 8)) == ("double_rows",)
    with pytest.raises(LaunchLimitError, match="2048"):
        impl.validate(Vec(1, 8), impl.params(threads=2048))
    LAUNCHES.clear()
    records, rows = STUDY.check(impl, {"short": {"threads": 2048}, "long": {"threads": 2048}}, 0, 0)
    assert LAUNCHES == [] and all(r["value"] == 0.0 for r in records)
    assert all("LaunchLimitError" in r["error"] for r in rows)


# ---------------------------------------------------------------------------------------- sweeps


def _pretend_gpu(monkeypatch):
    from kernelbook import gpu, limits

    monkeypatch.setattr(gpu, "availability", lambda: (True, "Test GPU 9000"))
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Test GPU 9000", "compute_capability": "9.0"})
    monkeypatch.setattr(limits, "_current", lambda: limits.H100)   # never a driver query: no GPU is here


def test_a_declared_sweep_is_the_product_of_its_axes_with_joint_values():
    from kernelbook.sweep import Sweep

    sweep = Sweep("double", axes={"block": [{"w": 4, "h": 4}, {"w": 8, "h": 2}], "limit": [8, 64]})
    assert sweep.configurations() == [{"w": 4, "h": 4, "limit": 8}, {"w": 4, "h": 4, "limit": 64},
                                      {"w": 8, "h": 2, "limit": 8}, {"w": 8, "h": 2, "limit": 64}]
    assert Sweep("double", configs=({"limit": 4},)).configurations() == [{"limit": 4}]


def test_a_sweep_checks_then_times_each_configuration_records_refusals_and_replays(results_root, monkeypatch):
    from kernelbook import results
    from kernelbook.sweep import Sweep, run_sweep

    _pretend_gpu(monkeypatch)
    TIMED.clear()
    sweep = Sweep("double", axes={"limit": [4, 16, 64]}, sizes=(2, 3), repeats=2, warmup=1)
    got = run_sweep(STUDY, sweep, mode="measure", run_id="20261123T0000Z-bbbbbb", timer=fake_timer)
    rows = {(r["config"]["limit"], r["layer"], r["size"]): (r["status"], r["value"]) for r in got.records}
    assert len(rows) == 12 and {r["metric"] for r in got.records} == {"op_time_ms"}
    assert all(s.startswith("refused: n=") and v is None for (limit, _, _), (s, v) in rows.items() if limit == 4)
    assert rows[(16, "short", 3)][0] == "ok" and rows[(16, "short", 3)][1] is not None
    assert rows[(16, "long", 2)][0].startswith("refused") and rows[(16, "long", 2)][1] is None
    timed = [r for r in got.records if r["value"] is not None]  # each keeps its spread and how it was timed
    assert timed and all(r["min"] <= r["value"] <= r["max"] and r["timing"] == "cuda-graph" for r in timed)
    # only the step's own launches (graph-captured), only where the check passed: limit=16 short
    # at 2 sizes, limit=64 both cases at 2 sizes; no per-size extras (the toy's size_time_ms)
    assert len(TIMED) == sum(t["graph"] for t in TIMED) == 2 + 2 * 2
    assert got.best("long") == {"limit": 64}
    stored = results.load_run("20261123T0000Z-bbbbbb").read_part("toy-double-grid")
    assert stored["parameters"]["configs"] == [{"limit": 4}, {"limit": 16}, {"limit": 64}]
    assert stored["parameters"]["repeats"] == 2 and stored["parameters"]["metric"] == "op_time_ms"

    def no_timer(*args, **kwargs):
        raise AssertionError("a replay times nothing")

    again = run_sweep(STUDY, sweep, mode="replay", timer=no_timer)
    assert again.found and again.records == got.records and not again.recording.mismatches


def test_a_sweep_never_times_a_configuration_that_fails_its_check(results_root, monkeypatch):
    from kernelbook.sweep import Sweep, run_sweep

    _pretend_gpu(monkeypatch)
    TIMED.clear()
    got = run_sweep(STUDY, Sweep("rounded", axes={"limit": [64]}, sizes=(2,)), mode="measure",
                    run_id="20261123T0000Z-cccccc", timer=fake_timer)
    assert TIMED == []
    assert all(r["status"].startswith("failed check") and r["value"] is None for r in got.records)


def test_a_sweep_not_recorded_yet_renders_as_a_message(results_root, no_gpu):
    import matplotlib

    matplotlib.use("Agg")
    from kernelbook import sweep as sweep_mod

    got = sweep_mod.run_sweep(STUDY, sweep_mod.Sweep("double", axes={"limit": [8]}), mode="replay", required=False)
    assert not got.found and got.records == []
    assert "not recorded yet" in sweep_mod.table(got).to_html()
    fig = sweep_mod.figure(got)
    assert any("not recorded yet" in t.get_text() for t in fig.axes[0].texts)


def test_a_sweep_counts_check_cases_labelled_with_no_case_for_every_case(results_root, monkeypatch):
    from kernelbook.sweep import Sweep, run_sweep

    _pretend_gpu(monkeypatch)
    TIMED.clear()
    sweep = Sweep("double", axes={"limit": [99]}, sizes=(2,), check_shapes=3)
    got = run_sweep(STUDY, sweep, mode="measure", run_id="20261123T0000Z-dddddd", timer=fake_timer)
    # random shapes up to 99 columns pass (the step doubles any n within its limit)
    assert [r["status"] for r in got.records] == ["ok", "ok"] and got.parameters["check_shapes"] == 3
    broken = run_sweep(STUDY, Sweep("half-written", axes={"limit": [99]}, sizes=(2,), check_shapes=2),
                       mode="measure", run_id="20261123T0000Z-dddddd", timer=fake_timer)
    assert all(r["status"].startswith("failed check") and r["value"] is None for r in broken.records)


def test_a_sweep_of_a_metric_the_study_never_records_is_refused(results_root, monkeypatch):
    from kernelbook.errors import ParameterError
    from kernelbook.sweep import Sweep, run_sweep

    _pretend_gpu(monkeypatch)
    with pytest.raises(ParameterError, match="records no 'layer_time_ms'"):
        run_sweep(STUDY, Sweep("double", axes={"limit": [64]}, sizes=(2,), metric="layer_time_ms"), mode="measure",
                  run_id="20261123T0000Z-eeeeee", timer=fake_timer)


def test_a_round_trip_is_timed_at_most_its_repeats_and_the_note_says_how_many():
    """A record that moves its data across PCIe asks for fewer repeats after one warm-up; the op
    time keeps the chapter's; the timing note names the count of each; a sweep of the op time
    skips the study's other records."""
    from kernelbook.report import timing_note

    calls = []

    def timer(fn, repeats, warmup, graph=False, timing="events"):
        calls.append((repeats, warmup))
        return Measured([1.0] * repeats, extra={"timing": timing})

    class RoundTrip(Toy):
        def case_records(self, impl, case, shape, params, operands, run, output, op, context, time):
            return [("layer_time_ms", time(run, timing="events", repeats=5), "ms")]

    study = RoundTrip()
    params = {case: {"limit": 64} for case in study.cases}
    records = harness.measure(study, study.impl("double"), params, [2], 20, 3, {}, timer=timer, size_records=False)
    assert calls == [(20, 3), (5, 1)] * 2
    note = timing_note(records, ["op_time_ms", "layer_time_ms"])
    assert "median of 20 repeats" in note and "median of 5 repeats" in note
    calls.clear()
    harness.measure(study, study.impl("double"), params, [2], 3, 3, {}, timer=timer, size_records=False,
                    case_records=False)
    assert calls == [(3, 3)] * 2   # the op time alone
    calls.clear()
    harness.measure(study, study.impl("double"), params, [2], 3, 3, {}, timer=timer, size_records=False)
    assert calls == [(3, 3), (3, 1)] * 2   # a reader's fewer repeats are kept


def test_a_step_is_set_beside_its_sweeps_fastest_configuration_in_numbers(results_root, monkeypatch):
    from kernelbook import results, session
    from kernelbook.stepdata import load_recorded
    from kernelbook.sweep import Sweep, against_step, run_sweep

    _pretend_gpu(monkeypatch)
    run_id = "20261123T0000Z-eeeeee"
    swept = run_sweep(STUDY, Sweep("double", axes={"limit": [16, 64]}, sizes=(3,), repeats=2, warmup=1),
                      mode="measure", run_id=run_id, timer=fake_timer)   # every configuration: 1.0 ms
    own = {"short": 1.5, "long": 0.5}   # the step's own time: 50 % slower, and faster
    mine = [results.record(STUDY.name, "double", case, 3, "op_time_ms", value, unit="ms") for case, value in own.items()]
    session.recorded(STUDY.part("double"), STUDY.name, lambda: session.Measurement(mine, []), parameters={},
                     mode="measure", run_id=run_id)
    shown = against_step(swept, load_recorded(STUDY, "double", prefer_run=run_id))
    rows = shown.data.set_index("Case")["The step against it"].to_dict()
    assert rows["short"].startswith("50.0 % slower") and rows["long"] == "as fast or faster"
    assert run_id in shown.caption and "one run" in shown.caption
