"""The GEMM-family steps without a GPU: parameters, refusals, workspace arithmetic, plans.

Every refusal must name the limit it enforces, so each check matches a fragment of the message.
"""

import re
import shutil

import pytest

from kernelbook import kernels, lenet
from kernelbook.errors import ParameterError, ShapeError
from kernelbook.lenet import ConvShape, final, gemm, layer_shape

GEMM_SLUGS = ["unroll-matmul", "fused-unroll-matmul", "cublas", "fp16", "tensor-cores", "index-reuse",
              "per-layer-kernels", "register-tiling", "specialised"]
GIB = 2**30


def impl(slug):
    return lenet.get_step(slug)


def test_gemm_steps_are_registered_in_book_order_after_the_direct_ones():
    names = lenet.step_names()
    positions = [names.index(s) for s in GEMM_SLUGS]
    assert positions == sorted(positions)
    assert names[-len(GEMM_SLUGS) - 2:-2] == GEMM_SLUGS and names[-2:] == ["hopper-final", "wgmma-final"]


@pytest.mark.parametrize("slug", GEMM_SLUGS)
def test_every_step_documents_itself_and_lists_its_kernels(slug):
    v = impl(slug)
    assert v.__doc__ and "Prediction" in v.__doc__
    text = kernels.source_path(v.source).read_text()
    assert text.startswith("// LeNet step")
    declared = set(re.findall(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\s*\(', text))
    assert declared == set(v.kernel_names)


@pytest.mark.parametrize("slug", GEMM_SLUGS)
def test_unknown_parameters_are_rejected_with_the_valid_names(slug):
    v = impl(slug)
    with pytest.raises(ParameterError, match="no parameter"):
        v.params(tile_widht=3)
    merged = v.params()
    assert merged == v.defaults and merged is not v.defaults


@pytest.mark.parametrize("slug", GEMM_SLUGS)
def test_defaults_accept_both_network_layers_at_full_batch(slug):
    v = impl(slug)
    for layer in ("C1", "C3"):
        v.validate(layer_shape(layer, 10000), v.params())


@pytest.mark.parametrize("slug", GEMM_SLUGS)
def test_tolerance_and_precision_are_declared(slug):
    v = impl(slug)
    if slug in ("fp16", "tensor-cores", "index-reuse", "per-layer-kernels"):
        assert v.tolerance == 5e-3
    else:
        assert v.precision == "fp32" and v.tolerance == 1e-5


# ----------------------------------------------------------------------------- workspace


def test_full_batch_unrolled_c1_is_11_7_gib():
    cub = impl("cublas")
    shape = layer_shape("C1", 10000)
    full = cub.workspace_bytes(shape, cub.params(workspace_mib=None))
    assert full == 10000 * 49 * 6400 * 4 == 12_544_000_000
    assert round(full / GIB, 1) == 11.7
    # step 06 also keeps the GEMM's output (M x chunk*HW) before the permute
    um = impl("unroll-matmul")
    assert um.workspace_bytes(shape, um.params(workspace_mib=None)) == 10000 * (49 + 4) * 6400 * 4


@pytest.mark.parametrize("slug", ["unroll-matmul", "cublas"])
def test_chunked_workspace_stays_under_the_budget(slug):
    v = impl(slug)
    for layer in ("C1", "C3"):
        shape = layer_shape(layer, 10000)
        for mib in (512, 64, 7):
            params = v.params(workspace_mib=mib)
            chunk = v.chunk_images(shape, params)
            per_image = v.workspace_bytes(layer_shape(layer, 1), params)
            assert v.workspace_bytes(shape, params) == chunk * per_image <= mib * 2**20
            assert (chunk + 1) * per_image > mib * 2**20 or chunk == shape.B


def test_c3_unrolled_per_image_sizes():
    shape = layer_shape("C3", 1)
    assert impl("cublas").workspace_bytes(shape, impl("cublas").params()) == 196 * 1156 * 4
    assert impl("unroll-matmul").workspace_bytes(shape, impl("unroll-matmul").params()) == (196 + 16) * 1156 * 4


def test_small_batches_use_one_chunk():
    v = impl("cublas")
    shape = layer_shape("C1", 100)
    assert v.chunk_images(shape, v.params()) == 100


@pytest.mark.parametrize("slug", ["unroll-matmul", "cublas"])
def test_workspace_refusals_name_the_limit(slug):
    v = impl(slug)
    c1 = layer_shape("C1", 10000)
    with pytest.raises(ShapeError, match="32-bit"):
        v.validate(c1, v.params(workspace_mib=None))  # 3.1e9 floats in one chunk
    with pytest.raises(ParameterError, match="workspace_mib"):
        v.validate(c1, v.params(workspace_mib=1))  # one image needs > 1 MiB
    with pytest.raises(ParameterError, match="positive"):
        v.validate(c1, v.params(workspace_mib=-5))
    with pytest.raises(ParameterError, match="positive"):
        v.validate(c1, v.params(workspace_mib=True))
    v.validate(layer_shape("C3", 100), v.params(workspace_mib=None))  # small enough in one go


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("slug", ["unroll-matmul", "fused-unroll-matmul"])
def test_tile_limits(slug):
    v = impl(slug)
    with pytest.raises(ParameterError, match="1..32"):
        v.validate(layer_shape("C1", 1), v.params(tile=33))
    with pytest.raises(ParameterError, match="1..32"):
        v.validate(layer_shape("C1", 1), v.params(tile=0))
    with pytest.raises(ParameterError, match="1..32"):
        v.validate(layer_shape("C1", 1), v.params(tile=16.0))


def test_grid_y_limit_is_named():
    v = impl("fused-unroll-matmul")
    many_maps = ConvShape(B=1, M=65535 * 16 + 1, C=1, H=1, W=1, K=1)
    with pytest.raises(ParameterError, match="65535"):
        v.validate(many_maps, v.params())


def test_32_bit_column_index_limit_is_named():
    v = impl("register-tiling")
    # N = B*H_out*W_out just under 2^31: y fits int32 (M = 1) but a tile past N would not
    shape = ConvShape(B=2**31 - 100, M=1, C=1, H=1, W=1, K=1)
    with pytest.raises(ShapeError, match="2\\^31"):
        v.validate(shape, v.params())


def test_fp16_refuses_odd_tiles_and_negative_flush():
    v = impl("fp16")
    with pytest.raises(ParameterError, match="odd"):
        v.validate(layer_shape("C3", 1), v.params(tile=15))
    with pytest.raises(ParameterError, match="half_tiles"):
        v.validate(layer_shape("C3", 1), v.params(half_tiles=-1))
    assert v.defines(v.params(half_tiles=0), layer_shape("C3", 1)) == {"TILE": 16, "HALF_TILES": 0}


def test_tensor_cores_refuse_tf32_with_the_8x32_fragment():
    v = impl("tensor-cores")
    with pytest.raises(ParameterError, match="m16n16k8"):
        v.validate(layer_shape("C1", 1), v.params(precision="tf32", shape="8x32"))
    v.validate(layer_shape("C1", 1), v.params(precision="fp16", shape="8x32"))


def test_tensor_core_parameter_refusals():
    v = impl("tensor-cores")
    s = layer_shape("C3", 1)
    with pytest.raises(ParameterError, match="'bf16'"):
        v.validate(s, v.params(precision="bf16"))
    with pytest.raises(ParameterError, match="'32x8'"):
        v.validate(s, v.params(precision="fp16", shape="32x8"))
    with pytest.raises(ParameterError, match="multiple of the fragment's K"):
        v.validate(s, v.params(precision="fp16", bk=24))
    with pytest.raises(ParameterError, match="48 KiB"):
        v.validate(s, v.params(warps=16, frags_n=8))


def test_tensor_core_defines_follow_the_parameters():
    v = impl("tensor-cores")
    s = layer_shape("C1", 1)
    d = v.defines(v.params(), s)
    assert (d["USE_TF32"], d["FRAG_M"], d["FRAG_N"]) == (1, 16, 16)
    d = v.defines(v.params(precision="fp16", shape="8x32"), s)
    assert (d["USE_TF32"], d["FRAG_M"], d["FRAG_N"]) == (0, 8, 32)


def test_index_reuse_needs_columns_that_divide_evenly_among_threads():
    v = impl("index-reuse")
    with pytest.raises(ParameterError, match="divide"):
        v.validate(layer_shape("C3", 1), v.params(frags_n=3))
    v.validate(layer_shape("C3", 1), v.params(frags_n=1))  # two threads share a column


def test_per_layer_policy_rule_and_refusal():
    v = impl("per-layer-kernels")
    assert v.choose(layer_shape("C1", 1), v.params()) == "8x32"   # M = 4
    assert v.choose(layer_shape("C3", 1), v.params()) == "16x16"  # M = 16
    assert v.choose(ConvShape(1, 8, 1, 9, 9, 3), v.params()) == "8x32"
    assert v.choose(ConvShape(1, 9, 1, 9, 9, 3), v.params()) == "16x16"
    with pytest.raises(ParameterError, match="'auto'"):
        v.validate(layer_shape("C1", 1), v.params(policy="fastest"))


def test_register_tiling_refusals():
    v = impl("register-tiling")
    s = layer_shape("C3", 1)
    with pytest.raises(ParameterError, match="must divide"):
        v.validate(s, v.params(tm=3))
    with pytest.raises(ParameterError, match="more than 64"):
        v.validate(s, v.params(tm=16, tn=8, bm=16, bn=256))
    with pytest.raises(ParameterError, match="32..1024"):
        v.validate(s, v.params(bm=4, tm=4, bn=16, tn=4))
    with pytest.raises(ParameterError, match="48 KiB"):
        v.validate(s, v.params(bm=64, bn=512, bk=32, tm=4, tn=8))
    with pytest.raises(ParameterError, match="bk="):
        v.validate(s, v.params(bm=16, tm=1, bn=64, tn=4, bk=2))  # 256 threads on 64 columns: groups of 4


# ----------------------------------------------------------------------------- final


def test_final_plans_the_network_layers():
    v = impl("specialised")
    c1 = v.plan(layer_shape("C1", 10000), v.params())
    c3 = v.plan(layer_shape("C3", 10000), v.params())
    # C1 (M = 4): exact FP32 on CUDA cores, weights in constant memory
    assert (c1["kernel"], c1["math"], c1["weights"]) == ("conv_direct", "fp32", "constant")
    assert (c1["maps_per_thread"], c1["outputs_per_thread"], c1["bands"]) == (4, 4, 1)
    assert c1["smem_bytes"] <= gemm.STATIC_SMEM_MAX
    # C3 (M = 16): 3xTF32 on tensor cores, one image per block, > 48 KiB of dynamic shared memory
    assert (c3["kernel"], c3["math"], c3["bands"], c3["groups"]) == ("conv_direct_3xtf32", "3xtf32", 1, 1)
    assert gemm.STATIC_SMEM_MAX < c3["smem_bytes"] <= final.TENSOR_SMEM_MAX
    d = v.defines(v.params(), layer_shape("C3", 2))
    assert (d["KS"], d["CIN"], d["HIN"], d["WIN"], d["MOUT"], d["MATH_3XTF32"]) == (7, 4, 40, 40, 16, 1)
    # math="fp32" keeps C3 on CUDA cores, weights in shared memory
    c3_fp32 = v.plan(layer_shape("C3", 10000), v.params(math="fp32"))
    assert (c3_fp32["kernel"], c3_fp32["weights"], c3_fp32["maps_per_thread"]) == ("conv_direct", "shared", 16)
    assert c3_fp32["smem_bytes"] <= gemm.STATIC_SMEM_MAX
    assert v.defines(v.params(math="fp32"), layer_shape("C3", 2))["WEIGHTS_SMEM"] == 1


def test_final_takes_the_fallback_outside_its_limits_and_says_why():
    v = impl("specialised")
    big_weights = ConvShape(B=2, M=300, C=64, H=50, W=50, K=9)
    plan = v.plan(big_weights, v.params(weights="constant", math="fp32"))
    assert plan["kernel"] == "conv_fallback" and "constant memory" in plan["reason"]
    wide = ConvShape(B=1, M=3, C=8, H=50, W=3000, K=3)
    plan = v.plan(wide, v.params())
    assert plan["kernel"] == "conv_fallback" and "shared memory" in plan["reason"]
    assert v.defines(v.params(), wide)["FALLBACK_ONLY"] == 1
    v.validate(wide, v.params())


def test_final_splits_tall_images_into_bands():
    v = impl("specialised")
    plan = v.plan(ConvShape(B=1, M=4, C=4, H=400, W=200, K=5), v.params())
    assert plan["kernel"] == "conv_direct" and plan["bands"] > 1
    assert plan["band"] * plan["bands"] >= 396 and plan["smem_bytes"] <= gemm.STATIC_SMEM_MAX
    plan = v.plan(ConvShape(B=1, M=16, C=4, H=400, W=200, K=5), v.params())
    assert plan["kernel"] == "conv_direct_3xtf32" and plan["bands"] > 1
    assert plan["band"] * plan["bands"] >= 396 and plan["smem_bytes"] <= final.TENSOR_SMEM_MAX


def test_final_tensor_path_falls_back_to_fp32_when_its_operands_do_not_fit():
    v = impl("specialised")
    plan = v.plan(ConvShape(B=2, M=20, C=6, H=50, W=50, K=9), v.params())  # 2 x 55 KB of split weights
    assert (plan["kernel"], plan["math"]) == ("conv_direct", "fp32")


def test_final_parameter_refusals():
    v = impl("specialised")
    s = layer_shape("C3", 1)
    with pytest.raises(ParameterError, match="more than 64"):
        v.validate(s, v.params(outputs_per_thread=8, math="fp32"))  # 16 maps x 8 outputs
    with pytest.raises(ParameterError, match="multiple of 32"):
        v.validate(s, v.params(threads=100))
    with pytest.raises(ParameterError, match="'constant'"):
        v.validate(s, v.params(weights="global"))
    with pytest.raises(ParameterError, match="'auto' or an integer"):
        v.validate(s, v.params(maps_per_thread=0))
    with pytest.raises(ParameterError, match="unroll_p"):
        v.validate(s, v.params(unroll_p="yes"))
    with pytest.raises(ParameterError, match="'3xtf32'"):
        v.validate(s, v.params(math="tf32"))
    with pytest.raises(ParameterError, match="tiles_per_warp"):
        v.validate(s, v.params(tiles_per_warp=0))


# ----------------------------------------------------------------------------- nvcc at C1 too

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@needs_nvcc
@pytest.mark.parametrize("slug", GEMM_SLUGS)
def test_compiles_without_spills_for_c1_as_well(slug, tmp_path):
    # test_kernels.py compiles at C3's shape; the final step specialises per shape, so C1 differs.
    v = impl(slug)
    _, report = kernels.compile_cubin(v.source, v.defines(v.params(), layer_shape("C1", 2)), out=tmp_path / "k.cubin")
    assert {r.name for r in report} >= set(v.kernel_names)
    assert all(r.spill_store_bytes == 0 for r in report)


@needs_nvcc
def test_tensor_core_files_compile_through_the_ptx_path(tmp_path):
    # CuPy's NVRTC may lack crt/mma.h; the files then use their PTX wmma path, compiled here on purpose.
    for slug, params in (("tensor-cores", {}), ("tensor-cores", {"precision": "fp16", "shape": "8x32"}),
                         ("index-reuse", {}), ("per-layer-kernels", {})):
        v = impl(slug)
        defines = {**v.defines(v.params(**params), layer_shape("C3", 2)), "WMMA_VIA_PTX": 1}
        _, report = kernels.compile_cubin(v.source, defines, out=tmp_path / "k.cubin")
        assert {r.name for r in report} >= set(v.kernel_names)
        assert all(r.spill_store_bytes == 0 for r in report)


def test_non_finite_workspace_is_refused_before_launch():
    impl = lenet.get_step("unroll-matmul")
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ParameterError, match="workspace_mib"):
            impl.validate(layer_shape("C1", 100), impl.params(workspace_mib=bad))


def test_the_final_step_hands_c1_to_step_14s_direct_kernel_and_says_so():
    final_step = impl("hopper-final")
    c1, c3 = layer_shape("C1", 100), layer_shape("C3", 100)
    params = final_step.params()
    assert final_step.direct(c1, params) and not final_step.direct(c3, params)
    assert final_step.source_for(params, c1) == "lenet/14_specialised.cu"
    assert final_step.source_for(params, c3) == "lenet/15_hopper_final.cu"
    assert final_step.defines(params, c1) == impl("specialised").defines(impl("specialised").params(), c1)
    assert not final_step.direct(c1, final_step.params(c1_path="tensor"))
    with pytest.raises(ParameterError, match="c1_path"):
        final_step.validate(c1, final_step.params(c1_path="fast"))
