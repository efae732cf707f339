"""The VGG layer study without a GPU: shapes, parameters and launch limits are refused before
any launch; the float64 reference agrees with a naive loop; the step list matches the files;
every kernel compiles for sm_90."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest

from kernelbook import kernels, paths
from kernelbook.errors import GPUUnavailable, LaunchLimitError, ParameterError, ShapeError
from kernelbook.vgg import CASES, STEPS, ConvPoolShape
from kernelbook.vgg.reference import conv_same, pool2x2, reference, reference_at

SMALL = ConvPoolShape(1, 3, 9, 8, 5, 3)


# ----------------------------------------------------------------------------- the problem


def test_the_studied_layer():
    s = CASES["B1"]
    assert (s.B, s.C, s.H, s.W, s.M, s.K) == (1, 256, 224, 224, 256, 5)
    assert s.flops == 2 * 256 * 256 * 25 * 224 * 224
    assert round(s.flops / 1e9, 1) == 164.4
    assert s.y_shape == (1, 256, 112, 112)
    assert s.min_bytes == 4 * (256 * 224 * 224 + 256 * 256 * 25 + 256 + 256 * 112 * 112)
    assert CASES["B2"].flops == 2 * s.flops
    assert s.as_dict() == {"B": 1, "C": 256, "H": 224, "W": 224, "M": 256, "K": 5}


def test_odd_sizes_pool_with_floor():
    s = ConvPoolShape(2, 3, 7, 9, 4, 5)
    assert s.y_shape == (2, 4, 3, 4)
    assert ConvPoolShape.from_arrays((1, 2, 5, 6), (3, 2, 1, 1), (3,)).y_shape == (1, 3, 2, 3)


@pytest.mark.parametrize("x_shape, w_shape, b_shape, match", [
    ((1, 3, 8, 8), (4, 3, 4, 4), (4,), "odd"),
    ((1, 3, 8, 8), (4, 2, 3, 3), (4,), "input channels"),
    ((3, 8, 8), (4, 3, 3, 3), (4,), "4-D"),
    ((1, 3, 8, 8), (4, 3, 3), (4,), "4-D"),
    ((1, 3, 8, 8), (4, 3, 3, 5), (4,), "square"),
    ((1, 3, 8, 8), (4, 3, 3, 3), (5,), "one bias per output channel"),
    ((1, 3, 1, 8), (4, 3, 3, 3), (4,), "at least 2"),
    ((0, 3, 8, 8), (4, 3, 3, 3), (4,), "positive"),
])
def test_bad_shapes_are_refused_with_a_fix(x_shape, w_shape, b_shape, match):
    with pytest.raises(ShapeError, match=match) as info:
        ConvPoolShape.from_arrays(x_shape, w_shape, b_shape)
    assert "Fix:" in str(info.value)


def test_bad_parameter_values_of_the_shape():
    with pytest.raises(ParameterError, match="positive integer"):
        ConvPoolShape(1, 0, 8, 8, 4, 3)
    with pytest.raises(ParameterError):
        ConvPoolShape(1, 3, 8.0, 8, 4, 3)
    with pytest.raises(ShapeError, match="32-bit"):
        ConvPoolShape(40000, 256, 224, 224, 256, 5)


# ----------------------------------------------------------------------------- the reference


def naive(x, w, b):
    B, C, H, W = x.shape
    M, _, K, _ = w.shape
    p = K // 2
    z = np.zeros((B, M, H, W))
    for n, m, i, j in itertools.product(range(B), range(M), range(H), range(W)):
        s = float(b[m])
        for c, kh, kw in itertools.product(range(C), range(K), range(K)):
            r, q = i + kh - p, j + kw - p
            if 0 <= r < H and 0 <= q < W:
                s += float(x[n, c, r, q]) * float(w[m, c, kh, kw])
        z[n, m, i, j] = max(s, 0.0)
    y = np.zeros((B, M, H // 2, W // 2))
    for n, m, i, j in itertools.product(range(B), range(M), range(H // 2), range(W // 2)):
        y[n, m, i, j] = z[n, m, 2 * i:2 * i + 2, 2 * j:2 * j + 2].max()
    return y


@pytest.mark.parametrize("shape", [(1, 2, 5, 6, 3, 3), (2, 3, 6, 7, 2, 5), (1, 1, 4, 4, 2, 1), (1, 2, 7, 5, 2, 7)])
def test_reference_matches_a_naive_loop(shape):
    B, C, H, W, M, K = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C, K, K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    got = reference(x, w, b)
    np.testing.assert_allclose(got, naive(x, w, b), rtol=1e-12, atol=1e-12)
    positions = [(n, m, i, j) for n in range(B) for m in range(M) for i in range(H // 2) for j in range(W // 2)]
    np.testing.assert_allclose(reference_at(x, w, b, positions), got.reshape(-1), rtol=1e-12, atol=1e-12)


def test_pool_drops_the_odd_last_row_and_column():
    z = np.arange(15, dtype=float).reshape(1, 1, 3, 5)
    assert pool2x2(z).tolist() == [[[[6.0, 8.0]]]]
    assert conv_same(np.ones((1, 1, 3, 3)), np.ones((1, 1, 3, 3)))[0, 0, 1, 1] == 9.0


# ----------------------------------------------------------------------------- the step list


def test_step_list_is_consistent_with_the_kernel_files():
    assert STEPS.study == "vgg"
    assert STEPS.slugs()[0] == "baseline" and "final" in STEPS.slugs()
    for step in STEPS:
        assert (paths.kernels_dir() / step.source).is_file(), step.source
        impl = STEPS.impl(step.slug)
        assert impl.kernel_names and impl.precision in ("fp32", "tf32", "fp16", "3xtf32")
        assert impl.tolerance == (5e-3 if impl.precision in ("tf32", "fp16") else 1e-5)
    stems = {s.stem for s in STEPS}
    for path in (paths.kernels_dir() / "vgg").glob("[0-9][0-9]_*.cu"):
        assert path.stem in stems, f"{path.name} is numbered like a step but is not in the list"


@pytest.mark.parametrize("slug", STEPS.slugs())
def test_every_step_accepts_the_studied_layer_and_odd_shapes(slug):
    impl = STEPS.impl(slug)
    for shape in (CASES["B1"], CASES["B2"], ConvPoolShape(1, 17, 13, 11, 33, 7), ConvPoolShape(2, 1, 2, 3, 1, 1)):
        impl.validate(shape, impl.params())


# ----------------------------------------------------------------------------- parameters and limits


def test_unknown_and_bad_parameters_are_refused():
    with pytest.raises(ParameterError, match="no parameter"):
        STEPS.impl("baseline").params(tile_width=8)
    base = STEPS.impl("baseline")
    for bad in (0, 33, "16", True, float("nan"), 15.5):
        with pytest.raises(ParameterError):
            base.validate(SMALL, base.params(tile=bad))
    tf32 = STEPS.impl("tf32")
    for bad, match in (({"bm": 48}, "multiple of 32"), ({"th": 15}, "odd"), ({"tw": 12}, "multiple of 8"),
                       ({"bm": 64, "warps_m": 8}, "16-channel"), ({"warps_n": 3}, "row pairs"),
                       ({"stages": 1}, "outside"), ({"stages": float("inf")}, "not finite")):
        with pytest.raises(ParameterError, match=match):
            tf32.validate(SMALL, tf32.params(**bad))
    with pytest.raises(ParameterError, match="multiple of 4"):
        STEPS.impl("register-tiled").validate(SMALL, STEPS.impl("register-tiled").params(tw=10))
    with pytest.raises(ParameterError, match="phases"):
        STEPS.impl("two-phase-weights").validate(SMALL, STEPS.impl("two-phase-weights").params(phases=0))


def test_launch_limits_are_refused_before_any_launch():
    # 4096 channels × 25 weights of step 01 = 400 KB of shared memory: no SM has that much
    with pytest.raises(LaunchLimitError, match="shared memory"):
        STEPS.impl("weights-shared").validate(ConvPoolShape(1, 4096, 8, 8, 2, 5), STEPS.impl("weights-shared").params())
    # B·M blocks in grid z stop at 65535
    with pytest.raises(LaunchLimitError, match="65535"):
        STEPS.impl("baseline").validate(ConvPoolShape(300, 2, 8, 8, 256, 3), STEPS.impl("baseline").params())
    # 16 warps (512 threads) × 5 resident blocks: more threads than an SM holds
    with pytest.raises(LaunchLimitError, match="launch_bounds"):
        STEPS.impl("tf32").validate(SMALL, STEPS.impl("tf32").params(warps_n=8, min_blocks=5))
    # a 64×64 tile with bm=256 needs more threads than a block has
    with pytest.raises(ParameterError, match="1024"):
        STEPS.impl("register-tiled").validate(SMALL, STEPS.impl("register-tiled").params(bm=256, th=32, tw=32))
    # stages too deep for shared memory
    with pytest.raises(LaunchLimitError, match="shared memory"):
        STEPS.impl("3xtf32").validate(ConvPoolShape(1, 8, 8, 8, 8, 15), STEPS.impl("3xtf32").params(bm=256, warps_m=4, stages=8))


def test_the_geometry_of_the_write_up():
    impl = STEPS.impl("baseline")
    grid, block, smem = impl.geometry(CASES["B1"], impl.params())
    assert grid == (7, 7, 256) and block == (16, 16, 1) and smem == 0
    wof = STEPS.impl("weights-on-the-fly")
    assert 9 * 1024 < wof.geometry(CASES["B1"], wof.params())[2] < 11 * 1024   # ~10 KB per block


def test_forward_without_a_gpu_says_so(no_gpu):
    from kernelbook import vgg

    with pytest.raises(GPUUnavailable, match="CUDA GPU is needed"):
        vgg.forward(None, None, None, step="baseline")


# ----------------------------------------------------------------------------- kernels compile


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("slug", STEPS.slugs())
def test_every_step_compiles_for_sm90(slug, tmp_path):
    """sm_90, or sm_90a for the steps that use Hopper-only instructions (their ``arch``)."""
    impl = STEPS.impl(slug)
    shape = CASES["B1"]
    source = impl.source_for(impl.params(), shape)  # the final step runs step 09's kernels at K = 5
    cubin, report = kernels.compile_cubin(source, impl.defines(impl.params(), shape), arch=getattr(impl, "arch", "sm_90"),
                                          out=tmp_path / "k.cubin")
    assert cubin.stat().st_size > 0
    names = {r.name for r in report}
    for kernel in (impl.kernel_names if source == impl.source else ()):
        assert kernel in names, f"{kernel} missing from ptxas report {names}"
    for r in report:
        assert 0 < r.registers <= 255
        assert r.spill_store_bytes == 0, f"{r.name} spills registers"


# ----------------------------------------------------------------------------- step 09 (Winograd)


@pytest.mark.parametrize("k", [1, 3, 5, 7])
def test_winograd_transforms_compute_the_layer(k):
    from kernelbook.vgg import winograd

    rng = np.random.default_rng(k)
    x = rng.standard_normal((2, 3, 9, 8))
    w = rng.standard_normal((4, 3, k, k))
    b = rng.standard_normal(4)
    np.testing.assert_allclose(winograd.winograd_conv_pool(x, w, b), reference(x, w, b), rtol=1e-10, atol=1e-10)


def test_winograd_float32_rounding_is_inside_the_fp32_tolerance():
    from kernelbook.vgg import winograd

    rng = np.random.default_rng(0)
    shape = ConvPoolShape(1, 256, 12, 10, 4, 5)
    from kernelbook.vgg.run import random_inputs

    x, w, b = random_inputs(shape, rng)
    ref = reference(x, w, b)
    err = np.linalg.norm(winograd.winograd_conv_pool(x, w, b, "float32") - ref) / np.linalg.norm(ref)
    assert err < STEPS.impl("winograd").tolerance / 2


def test_winograd_tables_in_the_kernel_match_the_exact_matrices():
    import re
    from fractions import Fraction

    from kernelbook.vgg import winograd

    src = (paths.kernels_dir() / "vgg" / "09_winograd.cu").read_text()
    block = src.split("#elif KSIZE == 5", 3)[3].split("#elif", 1)[0]   # the Bᵀ table for K = 5
    nums = [Fraction(v) for v in re.findall(r"-?\d+(?:\.\d+)?", block.split("=", 1)[1])]
    assert nums == [v for row in winograd.matrices(5)[2] for v in row]


def test_winograd_refuses_kernel_sizes_without_tables_and_final_falls_back():
    impl = STEPS.impl("winograd")
    with pytest.raises(ShapeError, match="another step"):
        impl.validate(ConvPoolShape(1, 4, 8, 8, 4, 9), impl.params())
    with pytest.raises(ParameterError, match="multiple of 32"):
        impl.validate(SMALL, impl.params(threads=100))
    final = STEPS.impl("final")
    assert final.uses_winograd(ConvPoolShape(1, 4, 8, 8, 4, 5))
    assert not final.uses_winograd(ConvPoolShape(1, 4, 8, 8, 4, 9))
    final.validate(ConvPoolShape(1, 4, 8, 8, 4, 9), final.params())


def test_final_routes_to_a_hopper_step_on_a_hopper_gpu(monkeypatch):
    """On a Hopper GPU the final step hands the call to one of Hopper's FP32-accurate steps (13 or
    14); where neither can tell which is faster (no GPU to time, no recording), step 13, the
    first; a shape they refuse (K > 15) keeps the 3xTF32 kernel, and another GPU keeps Winograd
    (K in 1, 3, 5, 7) or 3xTF32."""
    from kernelbook.vgg import final as final_module

    final = STEPS.impl("final")
    layer = ConvPoolShape(1, 256, 224, 224, 256, 5)
    monkeypatch.setattr(final, "_hopper_shapes", {})
    monkeypatch.setattr(final_module, "on_hopper", lambda: True)
    monkeypatch.setattr(final_module, "recorded_faster", lambda steps, device: None)
    step, params = final.handoff(layer, final.params(), None, ())
    assert step.slug == "hopper-3xtf32" and params == step.params() and step.tolerance <= 1e-5
    assert final.source_for(final.params(), layer) == "vgg/13_hopper_3xtf32.cu"
    assert final.math_for(final.params(), layer) == "3xtf32" and not final.uses_winograd(layer)
    assert final.kernels_for(final.params(), layer) == step.kernel_names
    wide = ConvPoolShape(1, 4, 40, 40, 4, 17)   # the Hopper steps take K <= 15
    assert final.handoff(wide, final.params(), None, ()) is None and final.source_for(final.params(), wide) == final.source
    monkeypatch.setattr(final, "_hopper_shapes", {})
    monkeypatch.setattr(final_module, "on_hopper", lambda: False)
    step, _ = final.handoff(layer, final.params(), None, ())
    assert step.slug == "winograd" and final.source_for(final.params(), layer) == "vgg/09_winograd.cu"


def test_on_a_hopper_gpu_the_final_runs_the_step_timed_faster_there_once_per_shape(monkeypatch):
    """Measuring on a Hopper GPU, the final step times steps 13 and 14 on the first call of a shape
    and routes every call of that shape to the faster, without timing again; both are FP32-accurate."""
    from kernelbook.vgg import final as final_module

    final = STEPS.impl("final")
    timed = []

    def faster_is_split(steps, shape):
        timed.append((tuple(step.slug for step in steps), shape))
        return next(step for step in steps if step.slug == "hopper-split")

    monkeypatch.setattr(final, "_hopper_shapes", {})
    monkeypatch.setattr(final_module, "on_hopper", lambda: True)
    monkeypatch.setattr(final_module, "measuring", lambda: True)
    monkeypatch.setattr(final_module, "timed_faster", faster_is_split)
    layer = ConvPoolShape(1, 256, 224, 224, 256, 5)
    for _ in range(3):
        step, params = final.handoff(layer, final.params(), None, ())
        assert step.slug == "hopper-split" and params == step.params() and step.tolerance <= 1e-5
    assert final.math_for(final.params(), layer) == step.math_for(params, layer)
    assert final.source_for(final.params(), layer) == "vgg/14_hopper_split.cu"
    assert timed == [(("hopper-3xtf32", "hopper-split"), layer)]
    other = ConvPoolShape(2, 64, 56, 56, 64, 3)
    final.handoff(other, final.params(), None, ())
    assert [shape for _, shape in timed] == [layer, other]


def test_a_replayed_page_routes_the_final_as_the_recording_of_its_gpu_timed_the_two_steps():
    """Replaying, the final step takes the Hopper step with the lower time of the timed case in the
    book's recording of the page's GPU (read here from the records themselves)."""
    from kernelbook.bookrecording import book_run
    from kernelbook.vgg import STUDY
    from kernelbook.vgg.final import recorded_faster

    steps = [STEPS.impl("hopper-3xtf32"), STEPS.impl("hopper-split")]
    checked = 0
    for device in ("H100", "H200"):
        run = book_run(STUDY, device)
        if run is None:
            continue
        times = {step.slug: min(r["value"] for r in run.read_part(STUDY.part(step.slug))["records"]
                                if r["metric"] == "op_time_ms" and r["layer"] == "B1") for step in steps}
        assert recorded_faster(steps, run.device).slug == min(times, key=times.get)
        checked += 1
    assert checked, "no book recording of the VGG study to replay"
    assert recorded_faster(steps, "a GPU with no recording") is None


def test_the_compiler_report_builds_the_final_steps_hopper_kernels_for_sm_90a(monkeypatch):
    """On a Hopper GPU the final step's compiler report builds step 13's file for sm_90a (wgmma and
    the TMA exist only there), the kernels that run the call; elsewhere its own targets."""
    from kernelbook.evidence import compiler
    from kernelbook.vgg import STUDY
    from kernelbook.vgg import final as final_module

    built = []
    monkeypatch.setattr(kernels, "compile_cubin", lambda source, defines, arch=None: built.append((source, arch))
                        or ("cubin", []))
    monkeypatch.setattr(compiler, "sass_counts", lambda cubin: {})
    final = STEPS.impl("final")
    for hopper, want in ((True, ("vgg/13_hopper_3xtf32.cu", "sm_90a")), (False, ("vgg/09_winograd.cu", None))):
        monkeypatch.setattr(final, "_hopper_shapes", {})
        monkeypatch.setattr(final_module, "on_hopper", lambda: hopper)
        built.clear()
        compiler.collect(STUDY, "final", {})
        assert built and set(built) == {want}


# ----------------------------------------------------------------------------- steps 11-14 (Hopper)

HOPPER = ["hopper-tf32", "hopper-fp16", "hopper-3xtf32", "hopper-split"]


@pytest.mark.parametrize("slug", HOPPER)
def test_hopper_steps_refuse_what_they_cannot_run(slug):
    impl = STEPS.impl(slug)
    with pytest.raises(ShapeError, match="odd kernel sizes up to 15"):
        impl.validate(ConvPoolShape(1, 4, 40, 40, 4, 17), impl.params())
    huge = ConvPoolShape(42, 512, 224, 224, 8, 3)    # x fits int32 indexing; the packed copy does not fit 8 GiB
    if impl.mode >= 2:
        with pytest.raises(ShapeError, match="workspace"):
            impl.validate(huge, impl.params())


def test_hopper_fp16_takes_fp16_or_bf16_operands_only():
    impl = STEPS.impl("hopper-fp16")
    impl.validate(SMALL, impl.params(operand="bf16"))
    assert impl.defines(impl.params(operand="bf16"), SMALL)["HOPPER_BF16"] == 1
    with pytest.raises(ParameterError, match="operand"):
        impl.validate(SMALL, impl.params(operand="fp8"))


@pytest.mark.parametrize("slug", HOPPER)
def test_hopper_launch_is_one_persistent_block_per_sm(slug):
    impl = STEPS.impl(slug)
    grid, block, smem = impl.geometry(CASES["B1"], impl.params())
    assert grid[0] <= 132 and block == (384, 1, 1) and 192 * 1024 < smem <= 227 * 1024
    small = ConvPoolShape(1, 3, 8, 16, 5, 3)    # one tile: one block
    assert impl.geometry(small, impl.params())[0] == (1, 1, 1)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("slug", HOPPER)
@pytest.mark.parametrize("k", [1, 15])
def test_hopper_steps_compile_for_the_smallest_and_largest_kernel(slug, k, tmp_path):
    impl = STEPS.impl(slug)
    shape = ConvPoolShape(1, 8, 16, 16, 8, k)
    _, report = kernels.compile_cubin(impl.source, impl.defines(impl.params(), shape), arch=impl.arch,
                                      out=tmp_path / "k.cubin")
    assert {"hopper_conv_pool", "hopper_pack"} <= {r.name for r in report}
    assert all(r.spill_store_bytes == 0 for r in report)


def test_fp32_accurate_steps_check_the_fp32_range():
    """Every step that claims FP32 accuracy (the FP32 direct steps, 3xTF32, Winograd, the final and
    Hopper's 13 and 14) has the range test in its check cases (the rows of the correctness table),
    inputs and weights from 1e-6 to 1e6; the TF32 and FP16 steps do not."""
    from kernelbook.vgg import run

    ranged_steps = []
    for slug in STEPS.slugs():
        cases = run.check_cases(STEPS.impl(slug), {}, 1, np.random.default_rng(0), full_case=None)
        ranged = [c for c in cases if c.label.startswith("range test")]
        if ranged:
            ranged_steps.append(slug)
            assert len(ranged) == len(run.RANGE_SCALES)
            magnitudes = np.concatenate([np.abs(np.concatenate([c.host[0].ravel(), c.host[1].ravel()]))
                                         for c in ranged])
            magnitudes = magnitudes[magnitudes > 0]
            assert magnitudes.min() < 1e-6 and magnitudes.max() > 1e5
    assert ranged_steps == ["baseline", "weights-shared", "inputs-shared", "weights-registers", "weights-on-the-fly",
                            "two-phase-weights", "register-tiled", "3xtf32", "winograd", "final", "hopper-3xtf32",
                            "hopper-split"]


def test_prepare_weights_is_refused_for_steps_that_pack_nothing():
    from kernelbook.vgg import prepare_weights

    with pytest.raises(ParameterError, match="packs no weights"):
        prepare_weights(np.zeros((4, 3, 3, 3), np.float32), "tf32")


def test_batch_sweep_table_and_figure_from_records():
    """The batch sweep's page section: TFLOP/s per step and batch beside cuDNN channels_last, from
    records (fabricated here); with nothing recorded, a message in place of both."""
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    from kernelbook.vgg import sweeps

    def found(records):
        return SimpleNamespace(found=True, records=records, session=SimpleNamespace(run=SimpleNamespace(run_id="R1")))

    flops = {b: CASES["B1"].flops * int(b[1:]) for b in sweeps.BATCHES}
    # as the core's sweep records them: the case names the batch ("B4"), the size is empty
    steps = {step: found([{"metric": "op_time_ms", "layer": b, "size": None, "value": 1.0 * int(b[1:]),
                           "flops": flops[b], "status": "ok"} for b in sweeps.BATCHES]) for step in sweeps.BATCH_STEPS}
    library = found([{"metric": "op_time_ms", "step": v, "size": int(b[1:]), "value": 2.0 * int(b[1:]),
                      "flops": flops[b]} for v in sweeps.BATCH_STEPS.values() for b in sweeps.BATCHES])
    rows = sweeps._rows(steps, library)
    assert len(rows) == 2 * len(sweeps.BATCH_STEPS) * len(sweeps.BATCHES)
    ours = [r for r in rows if r["what"] == "hopper-tf32"]
    assert all(abs(r["tflops"] - CASES["B1"].flops / 1e9) < 1e-6 for r in ours)   # 1 ms per image
    html = sweeps.batch_table(steps, library).to_html()
    assert "cudnn-fp32-channels-last" in html and "B=16" in html and "TFLOP/s" in html
    tf32 = sweeps.batch_table(steps, library).data.set_index("Kernel").loc["hopper-tf32"]
    assert list(tf32) == [f"{CASES['B1'].flops / 1e9:.0f}"] * len(sweeps.BATCHES)
    times = sweeps.batch_table(steps, library, "time").data.set_index("Kernel")
    assert times.loc["hopper-tf32", "B=16"] == "16.000 ms" and times.loc["cudnn-fp16-channels-last", "B=2"] == "4.000 ms"
    assert len(sweeps.batch_figure(steps, library).axes[0].lines) == 6
    empty = SimpleNamespace(found=False, records=[], session=None)
    assert "not recorded yet" in sweeps.batch_table({s: empty for s in sweeps.BATCH_STEPS}, empty).to_html()


def test_batch_sweep_cases_are_the_studied_layer_at_each_batch():
    from kernelbook.vgg import sweeps

    study = sweeps.batch_study()
    assert study.sizes(list(sweeps.BATCHES)) == list(sweeps.BATCHES)
    for name in sweeps.BATCHES:
        assert study.problem(name).flops == CASES["B1"].flops * int(name[1:]) and study.size_of(name, None) == int(name[1:])
    assert set(sweeps.BATCH_SWEEPS) == set(sweeps.BATCH_STEPS) <= set(STEPS.slugs())
