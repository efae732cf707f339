"""Step 14: a direct convolution specialised at compile time for each layer's shape."""

from __future__ import annotations

from .. import limits
from ..errors import LaunchLimitError, ParameterError
from ..steps import Launch, Upload, set_once
from .convstep import GRID_YZ_MAX, INT32_MAX, ConvShape, ConvStep, Planned, ceil_div, int32
from .gemm import STATIC_SMEM_MAX, _check_gemm_indices, _choice_param, _int_param

# ----------------------------------------------------------------------------- 14

CONSTANT_MAX = 64 * 1024     # bytes of __constant__ memory a module may declare
CONSTANT_FAST = 4 * 1024     # weights up to this size stay in the per-SM constant cache
DIRECT_UNROLL_MAX = 8192     # FFMAs of a fully unrolled body (constant-memory weights)
DIRECT_STEP_MAX = 4096       # FFMAs of one unrolled (c, p) step (shared-memory weights)
TENSOR_MIN_MAPS = 12         # 'auto' takes the 3xTF32 tensor-core path when 16-row tiles are 3/4 used
TENSOR_SMEM_MAX = 112 * 1024 # dynamic shared memory per block of the 3xTF32 kernel (two blocks per SM)
FALLBACK_TILES = {"FB_BM": 16, "FB_BN": 128, "FB_BK": 8, "FB_TM": 4, "FB_TN": 4}


class Specialised(Planned, ConvStep):
    """Specialised: a direct convolution specialised at compile time for the layer's shape.

    Changes: back from GEMM to direct convolution, built for these layers. The shape
    (C, H, W, M, K) is compiled in (``defines`` depend on the shape); each block copies one
    image's input (all channels) into shared memory once and computes every output of that
    image (or band of rows) from there. ``plan`` picks the kernel:

    - ``math="fp32"`` (CUDA cores, exact FP32; 'auto' for M < 12, i.e. C1): each thread
      produces ``maps_per_thread`` maps x ``outputs_per_thread`` neighbouring outputs of a row
      from a register window (one 16-byte shared load per 4 inputs serves MG * TW * K
      multiply-adds), with 16- or 8-byte coalesced stores. Small weights (C1: 784 bytes) sit in
      constant memory with every loop unrolled; larger ones (C3's 12.5 KB thrash the constant
      cache) go to shared memory as 16-byte broadcast loads with rolled loops.
    - ``math="3xtf32"`` (tensor cores; 'auto' for M >= 12, i.e. C3): mma.sync m16n8k8 with
      16 maps x 8 pixels x 8 taps of one input row per product; every operand is split into
      TF32 hi + lo parts once, in shared memory, and accumulated as hi*lo + lo*hi + hi*hi in
      FP32, which keeps the error at FP32 level (~1e-6 relative L2, measured <= 1.7e-6) while
      running on tensor cores.
    - shapes outside both (weights or one band of input beyond shared/constant memory, very
      large masks) run the FP32 register-tiled implicit GEMM compiled from the same file;
      ``plan(shape, params)["reason"]`` says why.

    ``launches`` declares the plan's one launch (``tests/test_declared_launches.py`` holds it to the
    hand-written launch it replaced); ``launch`` first copies constant-memory weights to the
    module's bank.

    Prediction (B=10000, H100): C1 on CUDA cores is issue-bound near the memory floor
    (12.5 G FMAs ~ 0.45 ms at full FP32 rate, 1.32 GB ~ 0.44 ms): ~0.6-0.7 ms. C3 in exact FP32
    needs 36 G FMAs, >= 1.1-1.3 ms at the H100's FP32 rate (~1.8-2 ms reached); 3xTF32 moves it
    to the tensor cores, bounded by shared-memory bandwidth for the operand loads: ~1.5 ms.
    C1 + C3 ~2.2 ms: the 1.0 ms target is out of reach at FP32-level accuracy with these designs.
    """

    plan_math = {"conv_direct_3xtf32": "3xtf32"}

    kernel_names = ("conv_direct", "conv_direct_3xtf32", "conv_fallback")
    defaults = {"math": "auto", "maps_per_thread": "auto", "outputs_per_thread": "auto", "threads": "auto",
                "weights": "auto", "min_blocks": "auto", "unroll_p": False, "tiles_per_warp": 4}
    tolerance = 1e-5

    @staticmethod
    def _register_tile(shape: ConvShape, params: dict) -> tuple[int, int]:
        """(maps, outputs along w) per thread: 'auto' takes up to 16 maps and 4 outputs."""
        mg = params["maps_per_thread"]
        tw = params["outputs_per_thread"]
        return (min(shape.M, 16) if mg == "auto" else mg), (4 if tw == "auto" else tw)

    # -- the plan: which kernel, with which compile-time configuration

    def plan(self, shape: ConvShape, params: dict) -> dict:
        """The configuration ``launch`` uses: ``{"kernel": "conv_direct", ...}`` or the fallback.

        ``reason`` says why the fallback was taken (None for the specialised path). A function of
        (shape, params) alone, so it is worked out once per pair (a call reads it several times:
        its launch, its defines, the constant-memory copy); do not change the dict it returns.
        """
        try:
            key = (shape, tuple((k, type(v), v) for k, v in sorted(params.items())))   # 4 and 4.0 differ
            found = self._plans.get(key)
        except AttributeError:
            self._plans: dict = {}
            found = None
        except TypeError:   # unhashable parameter values: no cache
            return self._plan(shape, params)
        if found is None:
            found = self._plan(shape, params)
            if len(self._plans) > 256:
                self._plans.clear()
            self._plans[key] = found
        return found

    def _plan(self, shape: ConvShape, params: dict) -> dict:
        math = params["math"]
        if math == "auto":
            math = "3xtf32" if shape.M >= TENSOR_MIN_MAPS else "fp32"
        if math == "3xtf32":
            plan = self._plan_3xtf32(shape, params)
            if plan is not None:
                return plan
        kk = shape.K * shape.K
        ckk = shape.C * kk
        mg, tw = self._register_tile(shape, params)
        groups = ceil_div(shape.M, mg)
        strips = ceil_div(shape.W_out, tw)
        window = tw + shape.K - 1
        loaded = ceil_div(window, 4) * 4 if tw % 4 == 0 else window
        rs = ceil_div(max((strips - 1) * tw + loaded, shape.W), 4) * 4
        const_bytes = 4 * groups * mg * ckk

        def fallback(reason: str) -> dict:
            return {"kernel": "conv_fallback", "reason": reason}

        weights = params["weights"]
        if weights == "auto":
            weights = "constant" if const_bytes <= CONSTANT_FAST and ckk * mg * tw <= DIRECT_UNROLL_MAX else "shared"
        if weights == "constant":
            if const_bytes > CONSTANT_MAX:
                return fallback(f"the weights ({const_bytes} bytes) exceed the {CONSTANT_MAX} bytes of constant memory")
            if ckk * mg * tw > 2 * DIRECT_UNROLL_MAX:
                return fallback(f"the fully unrolled body ({ckk * mg * tw} FMAs) exceeds {2 * DIRECT_UNROLL_MAX}")
            weight_smem = 0
        else:
            if shape.K * mg * tw > DIRECT_STEP_MAX:
                return fallback(f"one unrolled (c, p) step ({shape.K * mg * tw} FMAs) exceeds {DIRECT_STEP_MAX}")
            weight_smem = 4 * ckk * ceil_div(mg, 4) * 4
        max_rows = (STATIC_SMEM_MAX - weight_smem) // (4 * shape.C * rs)  # input rows of all channels that fit
        band = max_rows - shape.K + 1
        if band < 1:
            return fallback(f"{shape.K} input rows of {shape.C} channels ({4 * shape.C * shape.K * rs} bytes) and "
                            f"{weight_smem} bytes of weights exceed {STATIC_SMEM_MAX} bytes of shared memory")
        nbands = ceil_div(shape.H_out, min(band, shape.H_out))
        band = ceil_div(shape.H_out, nbands)  # balanced bands
        tasks = band * strips
        threads = params["threads"]
        if threads == "auto":
            # The block size whose last round of tasks wastes least (ties: more threads).
            threads = min(range(128, 385, 32), key=lambda t: (ceil_div(tasks, t) * t - tasks, -t))
        min_blocks = params["min_blocks"]
        if min_blocks == "auto":
            # Registers the thread needs (accumulators, window, addresses) -> blocks per SM to ask for.
            min_blocks = max(1, min(4, 65536 // (threads * (mg * tw + loaded + 16))))
        smem = 4 * shape.C * (band + shape.K - 1) * rs + weight_smem
        return {"kernel": "conv_direct", "reason": None, "math": "fp32", "maps_per_thread": mg, "outputs_per_thread": tw,
                "weights": weights, "groups": groups, "band": band, "bands": nbands, "threads": threads,
                "min_blocks": min_blocks, "row_stride": rs, "const_bytes": const_bytes, "smem_bytes": smem}

    def _plan_3xtf32(self, shape: ConvShape, params: dict) -> dict | None:
        """The tensor-core plan (16 maps x 8 pixels x 8 taps per mma), or None where it does not fit.

        Input and weights are kept twice (TF32 hi and lo parts) in dynamic shared memory, up to
        TENSOR_SMEM_MAX bytes per block; bands of output rows keep tall images under it.
        """
        kq8 = ceil_div(shape.K, 8)
        ksteps = shape.C * shape.K * kq8
        weight_smem = 2 * ksteps * 32 * 4 * 4
        rs = ceil_div(max(shape.W, shape.W_out - 1 + 8 * kq8), 4) * 4
        max_rows = (TENSOR_SMEM_MAX - weight_smem) // (2 * 4 * shape.C * rs)
        band = max_rows - shape.K + 1
        if band < 1:
            return None
        nbands = ceil_div(shape.H_out, min(band, shape.H_out))
        band = ceil_div(shape.H_out, nbands)
        nt = params["tiles_per_warp"]
        warp_tasks = ceil_div(ceil_div(band * shape.W_out, 8), nt)
        threads = params["threads"]
        if threads == "auto":
            # Whole rounds of warp tasks, least idle warps; ties: more threads.
            threads = min(range(128, 385, 32),
                          key=lambda t: (ceil_div(warp_tasks, t // 32) * (t // 32) - warp_tasks, -t))
        min_blocks = params["min_blocks"]
        if min_blocks == "auto":
            min_blocks = max(1, min(4, 65536 // (threads * (8 * nt + 40))))
        smem = 2 * 4 * shape.C * (band + shape.K - 1) * rs + weight_smem
        return {"kernel": "conv_direct_3xtf32", "reason": None, "math": "3xtf32", "groups": ceil_div(shape.M, 16),
                "band": band, "bands": nbands, "threads": threads, "min_blocks": min_blocks, "row_stride": rs,
                "tiles_per_warp": nt, "smem_bytes": smem}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        plan = self.plan(shape, params)
        if plan["kernel"] == "conv_fallback":
            return {"FALLBACK_ONLY": 1, **FALLBACK_TILES}
        if plan["kernel"] == "conv_direct_3xtf32":
            return {"MATH_3XTF32": 1, "KS": shape.K, "CIN": shape.C, "HIN": shape.H, "WIN": shape.W,
                    "MOUT": shape.M, "MG": 16, "TW": 4, "BAND": plan["band"], "THREADS": plan["threads"],
                    "MIN_BLOCKS": plan["min_blocks"], "WEIGHTS_SMEM": 1, "NT": plan["tiles_per_warp"],
                    **FALLBACK_TILES}
        return {"KS": shape.K, "CIN": shape.C, "HIN": shape.H, "WIN": shape.W, "MOUT": shape.M,
                "MG": plan["maps_per_thread"], "TW": plan["outputs_per_thread"], "BAND": plan["band"],
                "THREADS": plan["threads"], "MIN_BLOCKS": plan["min_blocks"],
                "WEIGHTS_SMEM": int(plan["weights"] == "shared"), "UNROLL_P": int(bool(params["unroll_p"])),
                **FALLBACK_TILES}

    # -- the declared launch (one kernel, chosen by the plan)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        plan = self.plan(shape, params)
        if plan["kernel"] == "conv_fallback":
            tiles = FALLBACK_TILES
            threads = (tiles["FB_BM"] // tiles["FB_TM"]) * (tiles["FB_BN"] // tiles["FB_TN"])
            n = shape.B * shape.H_out * shape.W_out
            return [Launch("conv_fallback", (ceil_div(n, tiles["FB_BN"]), ceil_div(shape.M, tiles["FB_BM"])),
                           (threads,))]
        tensor = plan["kernel"] == "conv_direct_3xtf32"   # its operands in dynamic shared memory
        # constant-memory weights: copied to the module's bank first, the last map group's padding
        # maps zeroed (two streams running this shape with different weights at once would share it)
        upload = ([Upload("c_weights", 1, plan["const_bytes"])]
                  if plan["kernel"] == "conv_direct" and plan["weights"] == "constant" else [])
        return upload + [Launch(plan["kernel"], (shape.B * plan["bands"], plan["groups"]), (plan["threads"],),
                                dynamic_smem=plan["smem_bytes"] if tensor else 0,
                                static_smem=0 if tensor else plan["smem_bytes"], min_blocks=plan["min_blocks"])]

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        x, k = operands
        if launch.kernel == "conv_fallback":
            return (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K))
        return (y, x, k, *int32(shape.B))   # the rest of the shape is compiled in

    def kernel(self, name: str, params: dict, problem: ConvShape):
        fn = super().kernel(name, params, problem)
        if name == "conv_direct_3xtf32":
            set_once(fn, "preferred_shared_memory_carveout", 100)  # all of L1 as shared memory: room for 2 blocks
        return fn

    def prepare(self, params: dict, shape: ConvShape) -> None:
        for name in self.kernel_names:  # one build holds the three (the others as stubs)
            self.kernel(name, params, shape)

    # -- limits: the parameters, then the plan's launch

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        for name, lo, hi in (("maps_per_thread", 1, 32), ("outputs_per_thread", 1, 16), ("threads", 32, 512),
                             ("min_blocks", 1, 8)):
            if params[name] != "auto":
                _int_param(params, name, lo, hi, f"pass {name}='auto' or an integer in {lo}..{hi}.")
        if params["threads"] != "auto" and params["threads"] % 32:
            raise ParameterError(f"threads={params['threads']} is not a multiple of 32 (whole warps).",
                             "pass threads='auto' or a multiple of 32.")
        _choice_param(params, "weights", ("auto", "constant", "shared"))
        _choice_param(params, "math", ("auto", "fp32", "3xtf32"))
        _int_param(params, "tiles_per_warp", 1, 8, "pass tiles_per_warp between 1 and 8.")
        if params["unroll_p"] not in (True, False):
            raise ParameterError(f"unroll_p={params['unroll_p']!r} must be True or False.", "pass unroll_p=False.")
        mg, tw = self._register_tile(shape, params)
        if mg * tw > 64:
            raise ParameterError(f"maps_per_thread * outputs_per_thread = {mg} * {tw} = {mg * tw} accumulators per "
                             f"thread; more than 64 spill registers.", "keep their product at most 64.")

    def check_launches(self, shape: ConvShape, params: dict, launches=None) -> None:
        """The specialised kernels' declared launch (grid, block, shared memory, launch bounds) and
        what the device needs for them; the fallback's 32-bit GEMM indices."""
        plan = self.plan(shape, params)
        if plan["kernel"] == "conv_fallback":
            _check_gemm_indices(shape, FALLBACK_TILES["FB_BN"], FALLBACK_TILES["FB_BM"])
            return
        super().check_launches(shape, params, launches)
        if plan["kernel"] == "conv_direct_3xtf32":
            limits.require_compute_capability(8, 0, "The 3xTF32 path (mma.sync with TF32 operands)")
        if shape.B * plan["bands"] > INT32_MAX:
            raise LaunchLimitError(f"B * bands = {shape.B * plan['bands']} blocks exceed grid x ({INT32_MAX}).",
                             "split the batch into chunks of fewer images.")
        if plan["groups"] > GRID_YZ_MAX:
            raise LaunchLimitError(f"{plan['groups']} map groups exceed grid y ({GRID_YZ_MAX}).",
                             "raise maps_per_thread.")

    
