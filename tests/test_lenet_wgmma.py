"""Step 16 (wgmma-final) without a GPU: its plan, its refusals, its cached validation, and that the
Python side's geometry is the kernel's (nvcc, sm_90a)."""

import shutil

import pytest

from kernelbook import kernels, lenet
from kernelbook.errors import LaunchLimitError, ParameterError
from kernelbook.lenet import ConvShape, layer_shape

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def step():
    return lenet.get_step("wgmma-final")


def test_it_follows_the_hopper_final_and_builds_for_sm90a():
    names = lenet.step_names()
    assert names.index("wgmma-final") == names.index("hopper-final") + 1
    assert lenet.STEPS.previous("wgmma-final").slug == "hopper-final"
    assert step().arch == "sm_90a"


def test_plan_both_layers_on_wgmma_and_the_rest_on_the_generic_kernel_with_a_reason():
    impl = step()
    params = impl.params()
    c1, c3 = impl.plan(layer_shape("C1", 100), params), impl.plan(layer_shape("C3", 100), params)
    assert (c1["kernel"], c1["rows_per_position"], c1["k_steps"], c1["tiles"]) == ("conv_wgmma", 2, 4, 25)
    assert (c3["kernel"], c3["rows_per_position"], c3["k_steps"], c3["tiles"]) == ("conv_wgmma", 1, 14, 10)
    assert impl.math_for(params, layer_shape("C3", 100)) == "3xfp16"
    k9 = impl.plan(ConvShape(B=2, M=4, C=2, H=20, W=20, K=9), params)
    assert k9["kernel"] == "conv_generic" and "K=9" in k9["reason"]
    wide = impl.plan(ConvShape(B=2, M=40, C=2, H=20, W=20, K=5), params)
    assert wide["kernel"] == "conv_generic" and "columns" in wide["reason"]
    big = impl.plan(ConvShape(B=2, M=4, C=3, H=200, W=200, K=5), params)
    assert big["kernel"] == "conv_generic" and "shared memory" in big["reason"]
    assert impl.defines(params, ConvShape(B=2, M=4, C=2, H=20, W=20, K=9)) == {"GENERIC_ONLY": 1}
    assert impl.math_for(params, ConvShape(B=2, M=4, C=2, H=20, W=20, K=9)) == "fp32"


@pytest.mark.parametrize("params, error, words", [
    ({"threads": 200}, ParameterError, "multiple of 128"),
    ({"group": 0}, ParameterError, "group=0"),
    ({"stages": 5}, ParameterError, "stages=5"),
    ({"streaming_stores": "yes"}, ParameterError, "streaming_stores"),
    ({"threads": 1024, "min_blocks": 4}, LaunchLimitError, "registers per thread"),
])
def test_bad_parameters_are_refused_before_any_launch(params, error, words):
    impl = step()
    with pytest.raises(error, match=words):
        impl.validate(layer_shape("C3", 10), impl.params(**params))


def test_validation_is_done_once_per_shape_and_parameters(monkeypatch):
    impl = step()
    shape, params = layer_shape("C3", 77), impl.params()
    impl.validate(shape, params)

    def boom(*args):
        raise AssertionError("validated again")

    monkeypatch.setattr(impl, "_plan", boom)
    impl._plans.clear()
    impl.validate(shape, params)  # cached: no new plan
    with pytest.raises(AssertionError, match="validated again"):
        impl.validate(layer_shape("C3", 78), params)


@needs_nvcc
@pytest.mark.parametrize("shape", [layer_shape("C1", 2), layer_shape("C3", 2), ConvShape(B=2, M=6, C=3, H=21, W=19, K=5),
                                   ConvShape(B=2, M=20, C=2, H=20, W=20, K=5)])
def test_the_python_geometry_is_the_kernels(shape, tmp_path):
    impl = step()
    params = impl.params()
    plan = impl.plan(shape, params)
    defines = {**impl.defines(params, shape), "EXPECT_SMEM_BYTES": plan["smem_bytes"]}
    _, report = kernels.compile_cubin(impl.source, defines, arch="sm_90a", out=tmp_path / "k.cubin")
    (fn,) = [r for r in report if r.name == "conv_wgmma"]
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0


@needs_nvcc
def test_a_wrong_geometry_fails_the_build(tmp_path):
    impl = step()
    shape = layer_shape("C3", 2)
    defines = {**impl.defines(impl.params(), shape), "EXPECT_SMEM_BYTES": 12345}
    with pytest.raises(Exception, match="shared-memory size differs"):
        kernels.compile_cubin(impl.source, defines, arch="sm_90a", out=tmp_path / "k.cubin")


def test_a_step_that_no_run_holds_replays_as_not_recorded_yet(no_gpu, monkeypatch):
    from kernelbook import session
    from kernelbook.chapter import run_chapter
    from kernelbook.lenet import STUDY

    monkeypatch.setattr(session, "_replay_run", lambda part, replay_run, prefer_run: None)
    chapter = run_chapter(STUDY, "wgmma-final", mode="auto")
    assert not chapter.recording.found
    assert "Not recorded" in chapter.banner().data
    for section in (chapter.correctness(), chapter.milestone(), chapter.compiler()):
        assert "not recorded yet" in section.to_html()
    assert "not recorded yet" in chapter.verdict().data


def test_the_launch_is_planned_once_per_shape_and_device_and_uses_a_persistent_grid(monkeypatch):
    import cupy as cp

    impl = step()
    impl._launches.clear()
    queries = []

    class FakeKernel:
        ptr, num_regs, max_dynamic_shared_size_bytes = 0, 120, 0
        calls = []

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            self.calls.append((grid, block, len(args), shared_mem))

    fake = FakeKernel()
    monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties",
                        lambda dev: queries.append(dev) or {"major": 9, "minor": 0, "multiProcessorCount": 132})
    monkeypatch.setattr(cp.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor", lambda *a: 2, raising=False)
    monkeypatch.setattr(impl, "kernel", lambda name, params, shape: fake)
    params = impl.params()
    for batch, grid in ((100, 100), (10000, 264)):
        shape = layer_shape("C3", batch)
        for _ in range(3):
            impl.launch(None, None, None, shape, params)
        assert fake.calls[-1] == ((grid,), (256,), 4, impl.plan(shape, params)["smem_bytes"])
    assert len(queries) == 2  # once per shape, not per call
    assert fake.max_dynamic_shared_size_bytes == impl.plan(layer_shape("C3", 100), params)["smem_bytes"]


def test_other_gpus_are_refused_before_launching(monkeypatch):
    import cupy as cp

    impl = step()
    impl._launches.clear()
    monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties",
                        lambda dev: {"major": 8, "minor": 0, "multiProcessorCount": 108})
    monkeypatch.setattr(impl, "kernel", lambda *a: pytest.fail("compiled for a GPU without wgmma"))
    with pytest.raises(ParameterError, match="H100 or H200"):
        impl.launch(None, None, None, layer_shape("C3", 10), impl.params())


def test_each_planned_step_names_the_unit_and_kernel_of_the_kernel_its_plan_picks():
    from kernelbook.lenet import STUDY

    for slug in ("specialised", "hopper-final", "wgmma-final"):
        impl = STUDY.impl(slug)
        for case in ("C1", "C3"):
            for params in (impl.params(), *({**impl.params(), "math": m} for m in ("fp32", "3xtf32") if "math" in impl.defaults)):
                shape = layer_shape(case, 100)
                kernel = impl.plan(shape, params)["kernel"]
                if kernel.startswith("step 14"):   # hopper-final hands C1 to step 14's kernel
                    assert impl.kernels_for(params, shape) == STUDY.impl("specialised").kernels_for(
                        STUDY.impl("specialised").params(), shape)
                    continue
                assert impl.kernels_for(params, shape) == (kernel,)
                assert impl.math_for(params, shape) == {"conv_direct_3xtf32": "3xtf32", "conv_wgmma": "3xfp16",
                                                        "conv_hopper": "3xfp16"}.get(kernel, "fp32")
