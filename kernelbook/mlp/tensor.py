"""Steps 13-15 and 17: fully fused tensor-core kernels (one warp carries 16-32 columns through all
three layers in registers). Same call convention as ``impls``; every step declares its launches
(``launches``/``launch_args``, see ``kernelbook.steps``)."""

from __future__ import annotations

import contextlib

import numpy as np

from .. import kernels, limits
from ..errors import ParameterError
from ..steps import Launch
from . import pack
from .impls import DeclaredMlp, MlpImpl, _int_param, per_shape
from .reference import HALF_THRESHOLD


class TensorCore3xTF32(DeclaredMlp):
    math = "3xtf32"
    """Step 13: fully fused mma.sync m16n8k8 TF32 kernel, 3xTF32 for FP32 accuracy."""

    kernel_names = ("fusedTensorCore3xTF32Kernel",)
    defaults = {"warps": 4, "m_tiles": 2, "blocks_per_sm": 2}
    packing = staticmethod(pack.tf32_fragments)
    dynamic_smem = 74272
    max_warps = 8

    def keys(self, shape, params):
        return params["warps"], params["m_tiles"], params["blocks_per_sm"]

    def defines(self, params, shape):
        warps, m_tiles, _ = self.keys(shape, params)
        return {"WARPS": warps, "M_TILES": m_tiles}

    def check_params(self, params):
        for prefix in self.prefixes():
            _int_param(params, f"{prefix}warps", range(1, self.max_warps + 1),
                       f"pass {prefix}warps between 1 and {self.max_warps} (registers limit the block).")
            _int_param(params, f"{prefix}m_tiles", (1, 2), f"pass {prefix}m_tiles=1 or 2 (16 columns each).")
            _int_param(params, f"{prefix}blocks_per_sm", range(1, 33), f"pass {prefix}blocks_per_sm, e.g. 2.")

    def prefixes(self):
        return ("",)

    def launch_shape(self, shape, params) -> tuple[tuple, tuple]:
        """(grid, block): a persistent grid of ``warps``-warp blocks over 16*m_tiles-column tiles."""
        warps, m_tiles, per_sm = self.keys(shape, params)
        tiles = -(-shape.N // (16 * m_tiles))
        return (self.persistent_grid(-(-tiles // warps), per_sm), 1, 1), (32 * warps, 1, 1)

    @per_shape
    def launches(self, shape, params):
        grid, block = self.launch_shape(shape, params)
        return [Launch(self.kernel_names[0], grid, block, dynamic_smem=self.dynamic_smem, static_smem=self.static_smem)]

    def launch_args(self, launch, y, operands, shape, params):
        x, w = operands
        return (x, w.extra["packed"], y, np.int32(shape.N))

    def kernel(self, name, params, problem):
        """The compiled kernel (the core's launch opts in to its shared memory past 48 KB)."""
        return kernels.get_kernel(self.source, name, self.defines(params, problem))


class TensorCoreHalf(TensorCore3xTF32):
    math = "fp16"
    """Step 14: the same in FP16 (m16n8k16, FP32 accumulation)."""

    kernel_names = ("fusedTensorCoreHalfKernel",)
    defaults = {"warps": 8, "m_tiles": 2, "blocks_per_sm": 1}
    precision, measure, tolerance = "fp16", "scaled_abs_diff", HALF_THRESHOLD
    packing = staticmethod(pack.f16_fragments)
    dynamic_smem = 0
    static_smem = 20000


class Final(TensorCore3xTF32):
    math = "3xfp16"  # both test cases take the 3xFP16 kernel by default
    """Step 15: per N, step 13's 3xTF32 kernel or the 3xFP16 kernel of 15_final.cu, each
    with its own launch shape (``small_*`` up to ``switch_columns`` columns, ``large_*`` above)."""

    kernel_names = ("fusedTensorCore3xTF32Kernel", "fusedTensorCore3xFP16Kernel")
    # 3xFP16 keeps half's exponent range: FP32-accurate only while every value stays between about
    # 6e-5 and 6.5e4 (the range test fails it; tests/test_mlp_gpu.py keeps that true). Step 17 is
    # the study's FP32-accurate final over float's whole range.
    full_range = False
    choices = {"3xtf32": kernel_names[0], "3xfp16": kernel_names[1]}
    smem = {kernel_names[0]: (74272, 0), kernel_names[1]: (0, 39456)}   # (dynamic, static) bytes
    defaults = {"small_kernel": "3xfp16", "small_warps": 4, "small_m_tiles": 2, "small_blocks_per_sm": 2,
                "large_kernel": "3xfp16", "large_warps": 8, "large_m_tiles": 2, "large_blocks_per_sm": 1,
                "switch_columns": 65536}

    @staticmethod
    def packing(host_weights):
        return {"packed": pack.tf32_fragments(host_weights), "split": pack.f16_split_fragments(host_weights)}

    def prefixes(self):
        return ("small_", "large_")

    def prefix(self, shape, params):
        return "small_" if shape.N <= params["switch_columns"] else "large_"

    def keys(self, shape, params):
        p = self.prefix(shape, params)
        return params[p + "warps"], params[p + "m_tiles"], params[p + "blocks_per_sm"]

    def check_params(self, params):
        super().check_params(params)
        for key in ("small_kernel", "large_kernel"):
            if params[key] not in self.choices:
                raise ParameterError(f"{key}={params[key]!r} names no kernel.", f"use one of: {', '.join(self.choices)}.")
        limits.finite_number("switch_columns", params["switch_columns"], 1, 2**31 - 1, example="65536")

    @per_shape
    def launches(self, shape, params):
        grid, block = self.launch_shape(shape, params)
        name = self.choices[params[self.prefix(shape, params) + "kernel"]]
        dynamic, static = self.smem[name]
        return [Launch(name, grid, block, dynamic_smem=dynamic, static_smem=static)]

    def launch_args(self, launch, y, operands, shape, params):
        x, w = operands
        return (x, w.extra["packed" if launch.kernel == self.kernel_names[0] else "split"], y, np.int32(shape.N))


_KERNELS: dict = {}   # (kernel, warps, m_tiles, blocks_per_sm) -> compiled kernel, opted in to its shared memory


class FinalFullRange(MlpImpl):
    math = "3xfp16"
    """Step 17: step 15's 3xFP16 arithmetic with per-column power-of-two scaling chosen from the
    data (per layer for the weights), detection of what the scaling cannot represent, and step
    13's 3xTF32 arithmetic for those tiles: FP32-accurate over float's whole range. Each warp
    stages its next tile of x in dynamic shared memory (cp.async) while it computes the current
    one: ``warps * m_tiles * STAGE_BYTES`` bytes a block beside the static weights; the block's
    copy of the weights goes out as cp.async in one batch with the first tiles (one wait).
    ``blocks_per_sm`` is also the kernel's ``__launch_bounds__`` minimum: 2 caps the registers at
    128 (a few spill), so 16 warps share an SM; that measured fastest at 2,097,152 columns
    (data/bench/mlp/NOTES.md, attempts 6-7)."""

    kernel_names = ("fullRange3xFP16Kernel",)
    defaults = {"warps": 8, "m_tiles": 1, "blocks_per_sm": 2}
    packing = staticmethod(pack.full_range)
    static_smem = 39488
    # At blocks_per_sm=2 (128 registers) ptxas keeps a few loop-invariant values (pointers, header
    # exponents) on the stack: stored once before the tile loop, reloaded from L1 a few times a
    # tile. Measured faster than the spill-free 1 block/SM (228 registers); the compile test allows it.
    spill_store_bytes_allowed = 64
    STAGE_BYTES = 80 * 20 * 4   # XS_ROWS * XS_STRIDE floats per m-tile (kernels/mlp/17_final_full_range.cu)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plans: dict = {}

    def defines(self, params, shape):
        return {"WARPS": params["warps"], "M_TILES": params["m_tiles"], "MIN_BLOCKS": params["blocks_per_sm"]}

    def check_params(self, params):
        _int_param(params, "warps", range(1, 17), "pass warps between 1 and 16.")
        _int_param(params, "m_tiles", (1, 2), "pass m_tiles=1 or 2 (16 columns each; 2 spills registers).")
        _int_param(params, "blocks_per_sm", range(1, 5),
                   "pass blocks_per_sm between 1 and 4 (it is also the kernel's __launch_bounds__ minimum).")

    def launches(self, shape, params):
        warps, m_tiles, per_sm = params["warps"], params["m_tiles"], params["blocks_per_sm"]
        tiles = -(-shape.N // (16 * m_tiles))
        grid = self.persistent_grid(-(-tiles // warps), per_sm)
        return [Launch(self.kernel_names[0], (grid, 1, 1), (32 * warps, 1, 1),
                       dynamic_smem=warps * m_tiles * self.STAGE_BYTES, static_smem=self.static_smem,
                       min_blocks=per_sm)]

    def launch_args(self, launch, y, operands, shape, params):
        x, weights = operands
        w = self.prepare_weights(weights)
        return (x, w.extra["split"], w.extra["packed"], y, np.int32(shape.N))

    def validate(self, shape, params):
        self.check_params(params)
        self.check_launches(shape, params)

    def kernel(self, name, params, problem):
        key = (name, params["warps"], params["m_tiles"], params["blocks_per_sm"])
        fn = _KERNELS.get(key)
        if fn is None:
            fn = kernels.get_kernel(self.source, name, self.defines(params, problem))
            need = params["warps"] * params["m_tiles"] * self.STAGE_BYTES
            if need + self.static_smem > limits.H100.static_smem_per_block:
                fn.max_dynamic_shared_size_bytes = need   # static + dynamic above 48 KB: opt in, once
            _KERNELS[key] = fn
        return fn

    def launch(self, y, x, weights, shape, params, stream=None):
        w = self.prepare_weights(weights)
        key = (shape.N, params["warps"], params["m_tiles"], params["blocks_per_sm"])
        plan = self._plans.get(key)
        if plan is None:   # the launch shape and kernel depend on these four numbers only
            (launch,) = self.launches(shape, params)
            plan = (self.kernel(launch.kernel, params, shape), launch.grid, launch.block, launch.dynamic_smem)
            if len(self._plans) > 64:
                self._plans.clear()
            self._plans[key] = plan
        fn, grid, block, smem = plan
        with (stream if stream is not None else contextlib.nullcontext()):
            fn(grid, block, (x, w.extra["split"], w.extra["packed"], y, np.int32(shape.N)), shared_mem=smem)
        return y

    def exact_only(self, prepared) -> bool:
        """True when these weights send every tile down the exact 3xTF32 path (host-side flag)."""
        return bool(prepared.extra["split"][-8:-4].get().view(np.int32)[0])
