"""Steps 13-15 and 17-19: fully fused tensor-core kernels (one warp carries 16-32 columns through all
three layers in registers). Same call convention as ``impls``; every step declares its launches
(``launches``/``launch_args``, see ``kernelbook.steps``)."""

from __future__ import annotations

import numpy as np

from .. import kernels, limits, tma
from ..errors import ParameterError, ShapeError
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
    with its own launch shape (``small_*`` up to ``switch_columns`` columns, ``large_*`` above).

    The 3xFP16 kernel is fast inside half's range and exact outside it: a column whose x or hidden
    values leave half's range (found in the kernel, per column and layer) is recomputed in plain
    FP32 by its warp, and weights outside it (found here once, when they are packed:
    ``pack.f16_split_exact``, kept on the host as ``exact_only``) send every column there. No call
    copies anything to the host."""

    kernel_names = ("fusedTensorCore3xTF32Kernel", "fusedTensorCore3xFP16Kernel")
    # The fast path's accuracy bound is per column (each value within 2^-19 of its column's largest),
    # not per value as step 17's: the range test is not this step's claim, and step 17 is the
    # study's FP32-accurate final over float's whole range. tests/test_mlp_gpu.py checks data
    # outside half's range (x, weights, hidden values) against float64.
    full_range = False
    choices = {"3xtf32": kernel_names[0], "3xfp16": kernel_names[1]}
    smem = {kernel_names[0]: (74272, 0), kernel_names[1]: (0, 39456)}   # (dynamic, static) bytes
    defaults = {"small_kernel": "3xfp16", "small_warps": 4, "small_m_tiles": 2, "small_blocks_per_sm": 2,
                "large_kernel": "3xfp16", "large_warps": 8, "large_m_tiles": 2, "large_blocks_per_sm": 1,
                "switch_columns": 65536}

    @staticmethod
    def packing(host_weights):
        return {"packed": pack.tf32_fragments(host_weights), "split": pack.f16_split_fragments(host_weights),
                "raw": pack.exact_fp32(host_weights), "exact_only": pack.f16_split_exact(host_weights)}

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
        if launch.kernel == self.kernel_names[0]:
            return (x, w.extra["packed"], y, np.int32(shape.N))
        return (x, w.extra["split"], w.extra["raw"], y, np.int32(shape.N), np.int32(w.extra["exact_only"]))


class FinalFullRange(MlpImpl):
    """Step 17: step 15's 3xFP16 arithmetic with per-column power-of-two scaling chosen from the
    data (per layer for the weights), detection of what the scaling cannot represent, and step
    13's 3xTF32 arithmetic for those tiles: FP32-accurate over float's whole range. Each warp
    stages its next tile of x in dynamic shared memory (cp.async) while it computes the current
    one: ``warps * m_tiles * STAGE_BYTES`` bytes a block beside the static weights; the block's
    copy of the weights goes out as cp.async in one batch with the first tiles (one wait).
    ``blocks_per_sm`` is also the kernel's ``__launch_bounds__`` minimum: 2 caps the registers at
    128 (a few spill), so 16 warps share an SM; that measured fastest at 2,097,152 columns
    (kernels/mlp/DESIGN.md)."""

    math = "3xfp16"

    kernel_names = ("fullRange3xFP16Kernel",)
    defaults = {"warps": 8, "m_tiles": 1, "blocks_per_sm": 2}
    packing = staticmethod(pack.full_range)
    static_smem = 39488
    # At blocks_per_sm=2 (128 registers) ptxas keeps a few loop-invariant values (pointers, header
    # exponents) on the stack: stored once before the tile loop, reloaded from L1 a few times a
    # tile. Measured faster than the spill-free 1 block/SM (228 registers); the compile test allows it.
    spill_store_bytes_allowed = 64
    STAGE_BYTES = 80 * 20 * 4   # XS_ROWS * XS_STRIDE floats per m-tile (kernels/mlp/17_final_full_range.cu)

    def defines(self, params, shape):
        return {"WARPS": params["warps"], "M_TILES": params["m_tiles"], "MIN_BLOCKS": params["blocks_per_sm"]}

    def check_params(self, params):
        _int_param(params, "warps", range(1, 17), "pass warps between 1 and 16.")
        _int_param(params, "m_tiles", (1, 2), "pass m_tiles=1 or 2 (16 columns each; 2 spills registers).")
        _int_param(params, "blocks_per_sm", range(1, 5),
                   "pass blocks_per_sm between 1 and 4 (it is also the kernel's __launch_bounds__ minimum).")

    @per_shape
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

    def exact_only(self, prepared) -> bool:
        """True when these weights send every tile down the exact 3xTF32 path (host-side flag)."""
        return bool(prepared.extra["split"][-8:-4].get().view(np.int32)[0])


class TmaFed(MlpImpl):
    """What steps 18 and 19 share: x read by the TMA in boxes of 32 columns x ``BOX_ROWS`` rows (the
    rows past 71 and the columns past N read as zeros), its descriptor from the driver once per
    (device, address, N, promotion) and kept in device memory; ``switch_columns`` and
    ``l2_promotion`` checked; shapes the TMA cannot read (N % 4 != 0, x or y not 16-byte aligned)
    handed to an earlier step (``FALLBACK``) with that step's defaults."""

    #: The TMA (cp.async.bulk.tensor) came with Hopper: an older GPU shows these steps' recording.
    min_capability = (9, 0)
    min_capability_why = "reads x through the TMA (cp.async.bulk.tensor), which Hopper introduced"

    FALLBACK = ""
    BOX_ROWS = 72
    IN_ROWS = 71

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plans: dict = {}
        self._maps: dict = {}

    def check_switch(self, params, fix: str) -> None:
        _int_param(params, "l2_promotion", tuple(tma.L2_PROMOTION), "pass l2_promotion=256 (bytes: 0, 64, 128 or 256).")
        limits.finite_number("switch_columns", params["switch_columns"], 0, 2**31 - 1, example="65536")
        if not isinstance(params["switch_columns"], (int, np.integer)):
            raise ParameterError(f"switch_columns={params['switch_columns']!r} is not a whole number.", fix)

    def validate(self, shape, params):
        self.check_params(params)
        self.check_launches(shape, params)

    def uses_tma(self, shape) -> bool:
        """Whether N lets the TMA read x (row stride 4 N a multiple of 16 bytes); the arrays' own
        alignment is checked per call."""
        return shape.N % 4 == 0

    def readable(self, shape, x, y) -> bool:
        return shape.N % 4 == 0 and x.data.ptr % 16 == 0 and y.data.ptr % 16 == 0

    def fallback(self):
        return self.other(self.FALLBACK)

    def fallback_params(self) -> dict:
        found = getattr(self, "_fallback_params", None)
        if found is None:
            found = self._fallback_params = self.fallback().params()
        return found

    def source_for(self, params, problem) -> str:
        return self.source if self.uses_tma(problem) else self.fallback().source

    def x_map(self, x, n: int, promotion: int, stream=None, device: int | None = None):
        """x's TMA descriptor in device memory: from the driver once per (device, address, N,
        promotion), i.e. per array a caller passes; the same bytes for any array at that address
        and size, so a freed and reallocated x reuses it correctly. ``device``: the current
        device's ordinal when the caller has it (asked of the runtime here otherwise)."""
        import cupy as cp

        key = (cp.cuda.runtime.getDevice() if device is None else device, x.data.ptr, n, promotion)
        found = self._maps.get(key)
        if found is None:
            on = stream or cp.cuda.get_current_stream()
            if on.is_capturing():
                # the upload would become a graph node reading a host buffer that is gone by replay
                raise ShapeError("A call with an x this step has not seen yet is being captured into a CUDA graph: "
                                 "its TMA descriptor must be uploaded first.",
                                 "call the step once with this x (same array, same N) before capturing.")
            raw = x_descriptor(x.data.ptr, n, promotion, self.BOX_ROWS)
            found = cp.empty(len(raw), dtype=cp.uint8)
            found.set(np.frombuffer(raw, dtype=np.uint8), stream=on)
            on.synchronize()   # landed before any stream's kernel reads it
            # Kept for the life of the step object, never freed: a captured graph may hold its address
            # (128 bytes of device memory per distinct x address and N).
            self._maps[key] = found
        return found

    # ------------------------------------------------------------------ building and the call
    def kernel(self, name, params, problem):
        if name not in self.kernel_names:   # the fallback's kernel, for the shapes the TMA cannot take
            return self.fallback().kernel(name, self.fallback_params(), problem)
        return kernels.get_kernel(self.source, name, self.defines(params, problem), arch=self.arch)

    def prepare(self, params, problem):
        """Compile this shape's kernel and the fallback's (a call whose x or y is not 16-byte
        aligned runs it), outside timings."""
        self.fallback().prepare(self.fallback_params(), problem)
        if self.uses_tma(problem):
            import cupy as cp

            self.check_device(cp.cuda.runtime.getDevice())
            self.planned(problem, params)

    def check_device(self, device: int) -> None:
        """Refuse a GPU (the ordinal ``device``) this step's kernel cannot run on, before its module
        is loaded (none here)."""

    def kernel_args(self, x_map, x, w, y, shape) -> tuple:
        """The kernel's arguments, x's descriptor first."""
        raise NotImplementedError

    def handoff(self, shape, params, y, operands):
        """Shapes the TMA cannot read (N % 4 != 0, x or y not 16-byte aligned): the fallback's launches."""
        return None if self.readable(shape, operands[0], y) else (self.fallback(), self.fallback_params())

    def operands(self, operands, shape, params, stream=None):
        """x, the weights prepared for this step, and x's descriptor (``x_map``: a new x's lands on
        ``stream``); the current device asked once per call, for the device check and the key."""
        import cupy as cp

        x, weights = operands
        device = cp.cuda.runtime.getDevice()
        self.check_device(device)
        return x, self.prepare_weights(weights), self.x_map(x, shape.N, params["l2_promotion"], stream, device)

    def launch_args(self, launch, y, operands, shape, params):
        x, w, x_map = operands
        return self.kernel_args(x_map, x, w, y, shape)


class TensorCoreHalfTma(TmaFed):
    """Step 18: step 14's FP16 network with x brought into shared memory by the TMA. Up to
    ``switch_columns`` columns the per-warp ring kernel (``ring_*``: warps per block, slots per
    warp, blocks per SM, also its ``__launch_bounds__`` minimum), above it the block-level stages
    kernel (``stage_*``: consumer warps per block, stages, blocks per SM); ``l2_promotion``: the
    bytes each TMA request brings into L2. Shapes the TMA or the 16-byte stores cannot take
    (N % 4 != 0, x or y not 16-byte aligned) run step 14's kernel with step 14's defaults.

    Defaults: the fastest configurations measured in development (kernels/mlp/DESIGN.md, step
    18): stages 8 x 2, 1 block per SM at 2,097,152 columns; ring 4 warps x 2
    slots, 2 blocks per SM at 12,800; 256-byte promotion. ``switch_columns`` = 65,536: a stage is
    ``32 * stage_warps`` columns, so below 132 SMs x 256 = 33,792 columns the stages kernel leaves
    SMs idle (at 12,800 it measured slower than the ring); 65,536 gives every SM two
    stages, so that its double buffering has something to overlap. Only the two test cases were
    timed; the switch between them is a reasoned choice, not a measured crossover.

    The TMA descriptor of x (address, N, promotion) comes from the driver once per (device,
    address, N, promotion) and is kept in device memory; the launch plan (kernel, grid, block,
    shared memory) once per (N, parameters): a repeated call costs two dictionary look-ups and
    the launch."""

    math = "fp16"

    kernel_names = ("tmaRingHalfKernel", "tmaStagesHalfKernel")
    defaults = {"ring_warps": 4, "ring_slots": 2, "ring_blocks_per_sm": 2,
                "stage_warps": 8, "stages": 2, "stage_blocks_per_sm": 1,
                "l2_promotion": 256, "switch_columns": 65536}
    precision, measure, tolerance = "fp16", "scaled_abs_diff", HALF_THRESHOLD
    packing = staticmethod(pack.f16_fragments)   # step 14's fragments: its kernel reads the same
    FALLBACK = "tensor-core-fp16"
    TILE_BYTES = 72 * 128       # one box: 72 rows x 32 float columns (kernels/mlp/tma_fp16.cuh)
    ALIGN_SLACK = 1024          # the tiles start 1,024-byte aligned inside the dynamic shared memory
    WEIGHT_BYTES = 20000        # step 14's packed weights, static shared memory

    # ------------------------------------------------------------------ parameters and shapes
    def check_params(self, params):
        _int_param(params, "ring_warps", range(1, 17), "pass ring_warps between 1 and 16 (e.g. 4).")
        _int_param(params, "ring_slots", range(1, 9), "pass ring_slots between 1 and 8 (e.g. 2).")
        _int_param(params, "ring_blocks_per_sm", range(1, 5),
                   "pass ring_blocks_per_sm between 1 and 4 (it is also the kernel's __launch_bounds__ minimum).")
        _int_param(params, "stage_warps", range(1, 17), "pass stage_warps between 1 and 16 (e.g. 8).")
        _int_param(params, "stages", range(1, 9), "pass stages between 1 and 8 (e.g. 2).")
        _int_param(params, "stage_blocks_per_sm", range(1, 5), "pass stage_blocks_per_sm between 1 and 4.")
        self.check_switch(params, "pass switch_columns=65536 (columns; the ring kernel up to it, stages above).")

    def ring(self, shape, params) -> bool:
        return shape.N <= params["switch_columns"]

    def defines(self, params, shape):
        if not self.uses_tma(shape):
            return self.fallback().defines(self.fallback_params(), shape)
        return {"RING_WARPS": params["ring_warps"], "RING_SLOTS": params["ring_slots"],
                "RING_MIN_BLOCKS": params["ring_blocks_per_sm"], "STAGE_WARPS": params["stage_warps"],
                "STAGES": params["stages"]}

    @per_shape
    def launches(self, shape, params):
        if not self.uses_tma(shape):
            return self.fallback().launches(shape, self.fallback_params())
        if self.ring(shape, params):
            warps, slots, per_sm = params["ring_warps"], params["ring_slots"], params["ring_blocks_per_sm"]
            tiles = -(-shape.N // 32)                                # 32-column tiles, one warp's each
            work = -(-tiles // warps)                                # blocks' worth of tiles
            return [Launch(self.kernel_names[0], (self.persistent_grid(work, per_sm), 1, 1), (32 * warps, 1, 1),
                           dynamic_smem=warps * slots * self.TILE_BYTES + self.ALIGN_SLACK,
                           static_smem=self.WEIGHT_BYTES + 8 * warps * slots, min_blocks=per_sm)]
        warps, stages, per_sm = params["stage_warps"], params["stages"], params["stage_blocks_per_sm"]
        work = -(-shape.N // (32 * warps))                           # stages of 32 * warps columns
        return [Launch(self.kernel_names[1], (self.persistent_grid(work, per_sm), 1, 1), (32 * (warps + 1), 1, 1),
                       dynamic_smem=warps * stages * self.TILE_BYTES + self.ALIGN_SLACK,
                       static_smem=self.WEIGHT_BYTES + 16 * stages)]

    def kernel_args(self, x_map, x, w, y, shape) -> tuple:
        return (x_map, w.extra["packed"], y, np.int32(shape.N))


def x_descriptor(address: int, n: int, promotion: int, rows: int = 72) -> bytes:
    """The TMA descriptor of x (71 x n float32, row-major): boxes of 32 columns x ``rows`` rows
    (72 for step 18, 80 for step 19; the rows past 71 lie outside the tensor: the TMA fills them
    with zeros, as it does columns past n)."""
    return tma.tensor_map(address, tma.DT_FLOAT32, [n, TmaFed.IN_ROWS], [4 * n], [32, rows],
                          l2_promotion=promotion, fix="pass x as a C-contiguous (71, N) float32 CuPy array.")


class WgmmaFullRange(TmaFed):
    """Step 19: FP32-accurate over float's whole range on Hopper's warpgroup MMA (wgmma, sm_90a).
    Warpgroups of 128 threads take 64-column tiles that the TMA brings into shared memory (two
    stages per warpgroup); x and the first hidden layer are scaled per column by a power of two and
    split into FP16 hi and lo' (step 17's idea), the split weights are wgmma's B in shared memory,
    layer 3 runs in FP32 on the CUDA cores, and a column pair the scaling cannot hold is recomputed
    in plain FP32 by its warp (kernels/mlp/19_wgmma_full_range.cu). ``small_wgs`` / ``large_wgs``:
    warpgroups per block up to / above ``switch_columns``; ``l2_promotion`` as in step 18.

    Defaults: the fastest measured in development (kernels/mlp/DESIGN.md, step 19): 3
    warpgroups at 2,097,152 columns, 2 at 12,800; the switch at 65,536 columns is a reasoned choice
    (between the two measured cases), not a measured crossover. Shapes the TMA cannot take
    (N % 4 != 0, x or y not 16-byte aligned) run step 17 with its defaults; the weights are packed
    for both. wgmma exists only on sm_90a: another GPU is refused before any launch."""

    math = "3xfp16"
    arch = "sm_90a"
    kernel_names = ("wgmmaFullRangeKernel",)
    defaults = {"small_wgs": 2, "large_wgs": 3, "switch_columns": 65536, "l2_promotion": 256}
    FALLBACK = "final-full-range"
    WEIGHT_SPAN = 38912         # the packed weights rounded up to 1,024 bytes (kernels/mlp/19_wgmma_full_range.cu)
    STAGE_BYTES = 2 * 80 * 128  # one 64-column tile of x: two TMA boxes of 32 columns x 80 rows
    ALIGN_SLACK = 1024
    BOX_ROWS = 80

    @staticmethod
    def packing(host_weights):
        return {**pack.wgmma_full_range(host_weights), **pack.full_range(host_weights)}   # + step 17's

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._checked_devices: set = set()

    # ------------------------------------------------------------------ parameters and shapes
    def check_params(self, params):
        for name in ("small_wgs", "large_wgs"):
            _int_param(params, name, range(1, 5), f"pass {name} between 1 and 4 (warpgroups of 128 threads per block).")
        self.check_switch(params, "pass switch_columns=65536 (columns; small_wgs up to it, large_wgs above).")

    def wgs(self, shape, params) -> int:
        return params["small_wgs"] if shape.N <= params["switch_columns"] else params["large_wgs"]

    def defines(self, params, shape):
        if not self.uses_tma(shape):
            return self.fallback().defines(self.fallback_params(), shape)
        return {"WGS": self.wgs(shape, params)}

    @per_shape
    def launches(self, shape, params):
        if not self.uses_tma(shape):
            return self.fallback().launches(shape, self.fallback_params())
        wgs = self.wgs(shape, params)
        work = -(-(-(-shape.N // 64)) // wgs)                       # blocks' worth of 64-column tiles
        return [Launch(self.kernel_names[0], (self.persistent_grid(work, 1), 1, 1), (128 * wgs, 1, 1),
                       dynamic_smem=self.ALIGN_SLACK + self.WEIGHT_SPAN + wgs * 2 * self.STAGE_BYTES,
                       static_smem=8 * (1 + 4 * wgs), min_blocks=1)]

    def check_device(self, device: int) -> None:
        """Refuse a GPU without sm_90a's wgmma, once per device, before its module is loaded."""
        import cupy as cp

        if device in self._checked_devices:
            return
        props = cp.cuda.runtime.getDeviceProperties(device)
        if (int(props["major"]), int(props["minor"])) != (9, 0):
            raise ParameterError(f"step {self.slug} runs wgmma (sm_90a), which this GPU "
                                 f"(compute capability {props['major']}.{props['minor']}) does not have.",
                                 "run it on an H100 or H200, or use step final-full-range.")
        self._checked_devices.add(device)

    def kernel_args(self, x_map, x, w, y, shape) -> tuple:
        return (x_map, x, w.extra["wgmma"], w.extra["raw"], y, np.int32(shape.N), np.int32(w.extra["exact_only"]))

    def exact_only(self, prepared) -> bool:
        """True when these weights send every column down the exact FP32 path (host-side flag)."""
        return bool(prepared.extra["exact_only"])
