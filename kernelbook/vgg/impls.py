"""One class per step of the VGG layer study: parameters, validation before launch, the launch.

Every ``launch(y, x, w, b, shape, params, stream=None)`` takes float32 C-contiguous CuPy arrays
(x (B,C,H,W), w (M,C,K,K), b (M,), y (B,M,H//2,W//2)) already checked by ``forward``, and
enqueues the step's kernel(s) on ``stream``. ``validate`` runs first and raises
``ParameterError``/``LaunchLimitError`` (a ``ParameterError``) for anything that cannot run.

Steps 00-10 declare their launches as data (``launches(shape, params) -> [Launch]`` and
``launch_args``, see ``kernelbook.steps``): the core's ``launch``, limit checks, ``prepare`` and
``kernels_for`` read that one list. ``tests/test_declared_launches.py`` holds them to the launches
the hand-written paths made before (a recorded table of kernels, grids, blocks, shared memory and
arguments).

Two kernel families:

- steps 00-05 (``DirectStep``): one thread per pooled output, a TILE×TILE block of pooled outputs
  of one output channel, grid (ceil(Wp/TILE), ceil(Hp/TILE), B·M) as in the write-up;
- steps 06-10 (``TiledStep``): a block computes BM output channels × a TH×TW pre-pool tile of
  one image, grid (tiles·B, ceil(M/BM)); shared-memory stages sized as in ``conv_tiles.cuh``.
"""

from __future__ import annotations

import math

from .. import limits
from ..errors import ParameterError, ShapeError
from ..limits import ceil_div
from ..steps import Launch, StepImpl
from .problem import ConvPoolShape

GRID_YZ_MAX = 65535


def _int_param(params: dict, name: str, low: int, high: int, example) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int):
        # finite_number refuses strings, booleans, NaN and inf with the right words
        limits.finite_number(name, value, low, high, example=str(example))
        raise ParameterError(f"{name}={value!r} must be an integer.", f"pass {name}={example}.")
    if not low <= value <= high:
        raise ParameterError(f"{name}={value} is outside {low}..{high}.", f"pass {name}={example}.")
    return value


def _int32(*values):
    import numpy as np

    return tuple(np.int32(v) for v in values)


def cached_workspace(cache: dict, sizes: tuple) -> tuple:
    """Float32 device arrays of ``sizes``, allocated once per size and device and kept in ``cache``
    (so a CUDA graph that captured a launch stays valid)."""
    import cupy as cp

    key = (cp.cuda.Device().id, sizes)
    ws = cache.get(key)
    if ws is None:
        ws = tuple(cp.empty(n, dtype=cp.float32) for n in sizes)
        cache[key] = ws
    return ws


def check_shape_type(shape) -> None:
    if not isinstance(shape, ConvPoolShape):
        raise ParameterError(f"shape must be a ConvPoolShape, not {type(shape).__name__}.",
                             "build it with ConvPoolShape(B, C, H, W, M, K) or ConvPoolShape.from_arrays.")


class VggStep(StepImpl):
    """What every step shares: its launches, checked by ``validate`` before any of them.

    Every step declares ``launches``/``launch_args``; ``geometry`` (grid, block and dynamic shared
    memory of the launch where the time goes, for ``describe``) is read from them."""

    precision = "fp32"
    tolerance = 1e-5
    graph_capturable = True
    runtime_k = False   # True when K is a kernel argument; False when it is the KSIZE define

    def geometry(self, shape: ConvPoolShape, params: dict) -> tuple[tuple, tuple, int]:
        """(grid, block, dynamic shared-memory bytes) of the main launch (the last declared one)."""
        main = self.launches(shape, params)[-1]
        return main.grid, main.block, main.dynamic_smem

    def check_params(self, params: dict) -> None:
        """Parameter values alone (no shape): ParameterError when one is out of range."""

    def validate(self, shape: ConvPoolShape, params: dict) -> None:
        check_shape_type(shape)
        self.check_params(params)
        declared = self.launches(shape, params)
        if declared is not None:
            self.check_launches(shape, params, declared)
            return
        grid, block, smem = self.geometry(shape, params)
        limits.check_launch(grid, block, dynamic_smem=smem, what=f"Step {self.slug!r} on {shape.as_dict()}")


# ----------------------------------------------------------------------------- steps 00-05


class DirectStep(VggStep):
    """The write-up's mapping: a TILE×TILE block of pooled outputs of one channel, one per thread."""

    defaults = {"tile": 16}

    def check_params(self, params):
        _int_param(params, "tile", 1, 32, 16)

    def defines(self, params, shape):
        d = {"TILE": params["tile"]}
        if not self.runtime_k:
            d["KSIZE"] = shape.K
        return d

    def smem_floats(self, shape: ConvPoolShape, params: dict) -> int:
        return 0

    def span(self, shape: ConvPoolShape, params: dict) -> int:
        """Input rows (and columns) of one block's window: 2·TILE + K − 1."""
        return 2 * params["tile"] + shape.K - 1

    def launches(self, shape, params):
        t = params["tile"]
        grid = (ceil_div(shape.Wp, t), ceil_div(shape.Hp, t), shape.B * shape.M)
        return [Launch(self.kernel_names[0], grid, (t, t, 1), dynamic_smem=4 * self.smem_floats(shape, params))]

    def launch_args(self, launch, y, operands, shape, params):
        x, w, b = operands
        return (y, x, w, b, *_int32(shape.B, shape.C, shape.H, shape.W, shape.M, *([shape.K] if self.runtime_k else [])))


class Baseline(DirectStep):
    """Step 00: every operand from global memory."""

    kernel_names = ("conv_pool_baseline",)
    runtime_k = True


class WeightsShared(DirectStep):
    """Step 01: the block's C·K² weights in shared memory."""

    kernel_names = ("conv_pool_weights_shared",)
    runtime_k = True

    def smem_floats(self, shape, params):
        return shape.C * shape.K ** 2


class InputsShared(DirectStep):
    """Step 02: step 01 plus each channel's input window in shared memory."""

    kernel_names = ("conv_pool_inputs_shared",)
    runtime_k = True

    def smem_floats(self, shape, params):
        return shape.C * shape.K ** 2 + self.span(shape, params) ** 2


class WeightsRegisters(DirectStep):
    """Step 03: step 02 with each channel's K² weights copied into registers (K compile-time)."""

    kernel_names = ("conv_pool_weights_registers",)

    def smem_floats(self, shape, params):
        return shape.C * shape.K ** 2 + self.span(shape, params) ** 2


class WeightsOnTheFly(DirectStep):
    """Step 04: weights read from global memory when used; two input windows (~10 KB) in shared memory."""

    kernel_names = ("conv_pool_weights_on_the_fly",)

    def smem_floats(self, shape, params):
        return 2 * self.span(shape, params) ** 2


class TwoPhaseWeights(DirectStep):
    """Step 05: the weights in shared memory again, loaded in ``phases`` groups of channels."""

    kernel_names = ("conv_pool_two_phase_weights",)
    defaults = {"tile": 16, "phases": 2}

    def check_params(self, params):
        super().check_params(params)
        _int_param(params, "phases", 1, 4096, 2)

    def defines(self, params, shape):
        return {**super().defines(params, shape), "PHASES": params["phases"]}

    def smem_floats(self, shape, params):
        return ceil_div(shape.C, params["phases"]) * shape.K ** 2 + self.span(shape, params) ** 2


# ----------------------------------------------------------------------------- steps 06-10


def stage_floats(bm: int, th: int, tw: int, k: int) -> int:
    """Floats of one shared-memory stage, as ``ConvTile`` in kernels/vgg/conv_tiles.cuh lays it out."""
    cc = 8
    ms = bm + 8
    pw = tw + k - 1
    pwp = ((pw + 7) // 16) * 16 + 8
    cs = ((th * pwp + 31) // 32) * 32 + 8
    return k * cc * ms + cc * cs


class TiledStep(VggStep):
    """A block of BM channels × TH×TW pre-pool outputs, the reduction streamed in cp.async stages."""

    defaults = {"bm": 64, "th": 16, "tw": 16, "stages": 3, "min_blocks": 2}

    def threads(self, params: dict) -> int:
        raise NotImplementedError

    def check_params(self, params):
        bm = _int_param(params, "bm", 32, 256, 64)
        th = _int_param(params, "th", 2, 64, 16)
        _int_param(params, "tw", 8, 64, 16)
        _int_param(params, "stages", 2, 8, 3)
        _int_param(params, "min_blocks", 1, 8, 2)
        if bm % 32:
            raise ParameterError(f"bm={bm} is not a multiple of 32 (the shared-memory layout needs it).",
                                 "pass bm=32, 64 or 128.")
        if th % 2:
            raise ParameterError(f"th={th} is odd; a tile must hold whole rows of 2×2 pooling windows.",
                                 "pass an even th such as 16.")
        threads = self.threads(params)
        if threads > 1024:
            raise ParameterError(f"These parameters give {threads} threads per block; a block holds at most 1024.",
                                 "use a smaller bm or tile.")
        limits.check_launch_bounds(threads, params["min_blocks"], what=f"Step {self.slug!r}")

    def defines(self, params, shape):
        return {"BM": params["bm"], "TH": params["th"], "TW": params["tw"], "STAGES": params["stages"],
                "MIN_BLOCKS": params["min_blocks"], "KSIZE": shape.K}

    def launches(self, shape, params):
        tiles = ceil_div(shape.H, params["th"]) * ceil_div(shape.W, params["tw"])
        grid = (tiles * shape.B, ceil_div(shape.M, params["bm"]), 1)
        smem = 4 * params["stages"] * stage_floats(params["bm"], params["th"], params["tw"], shape.K)
        return [Launch(self.kernel_names[0], grid, (self.threads(params), 1, 1), dynamic_smem=smem)]

    def launch_args(self, launch, y, operands, shape, params):
        x, w, b = operands
        return (y, x, w, b, *_int32(shape.B, shape.C, shape.H, shape.W, shape.M))


class RegisterTiled(TiledStep):
    """Step 06: FP32 FMA on CUDA cores; a thread owns 8 channels × a 2×4 patch (64 accumulators)."""

    kernel_names = ("conv_pool_register_tiled",)
    # an 8×32 tile and 4 stages measured fastest on the H100 at B=1 (4.24 ms vs 4.40 for 16×16, 3)
    defaults = {"bm": 64, "th": 8, "tw": 32, "stages": 4, "min_blocks": 2}

    def threads(self, params):
        return (params["bm"] // 8) * (params["th"] // 2) * (params["tw"] // 4)

    def check_params(self, params):
        tw = params.get("tw")
        if isinstance(tw, int) and not isinstance(tw, bool) and tw % 4:
            raise ParameterError(f"tw={tw} is not a multiple of 4 (a thread's patch is 4 columns wide).",
                                 "pass tw=8, 16 or 32.")
        super().check_params(params)


def tc_stage_floats(bm: int, th: int, tw: int, k: int, planes: int) -> int:
    """Floats of one shared-memory stage of steps 07/08/10, as kernels/vgg/tc_conv_pool.cuh lays it out."""
    pwp = 4 * ceil_div(tw + k - 1, 4)
    cs = ceil_div(th * pwp, 32) * 32 + 8
    return planes * (k * bm * 8 + 8 * cs)


class TensorCoreStep(TiledStep):
    """Implicit GEMM with mma.sync m16n8k8 (TF32); the epilogue adds bias, ReLU and pools.

    Three launches: ``tc_pack_weights`` and ``tc_pack_input`` write the operands TF32-rounded
    (3xTF32: big and small planes) in the layouts the main kernel copies with 16-byte
    ``cp.async`` (the input with its zero halo, the weights in A-fragment order), then the main
    kernel. The packed operands live in a workspace this object allocates once per size and
    device and keeps (a captured CUDA graph stays valid); two launches of the same step on
    different streams at once would share it. Packing is inside every launch, so it is timed.
    """

    # 8 warps of 64 channels × 2 rows × 32 pixels, one block per SM (128 accumulators per thread)
    defaults = {"bm": 128, "th": 8, "tw": 32, "warps_m": 2, "warps_n": 4, "stages": 3, "min_blocks": 1}
    planes = 1
    PACK_THREADS = 256

    def __init__(self):
        self._workspaces: dict = {}

    def threads(self, params):
        return 32 * params["warps_m"] * params["warps_n"]

    def check_params(self, params):
        wm = _int_param(params, "warps_m", 1, 8, 2)
        wn = _int_param(params, "warps_n", 1, 16, 4)
        super().check_params(params)
        bm, th, tw = params["bm"], params["th"], params["tw"]
        if bm % (16 * wm):
            raise ParameterError(f"bm={bm} does not split into warps_m={wm} warps of whole 16-channel tiles.",
                                 "make bm a multiple of 16·warps_m (e.g. bm=64, warps_m=2).")
        if th % wn or (th // wn) % 2:
            raise ParameterError(f"th={th} does not split into warps_n={wn} warps of whole row pairs.",
                                 "make th a multiple of 2·warps_n (e.g. th=16, warps_n=4).")
        if tw % 8:
            raise ParameterError(f"tw={tw} is not a multiple of 8 (an mma n-tile is 8 pixels).",
                                 "pass tw=8, 16 or 32.")

    def defines(self, params, shape):
        return {**super().defines(params, shape), "WARPS_M": params["warps_m"], "WARPS_N": params["warps_n"]}

    def padded(self, shape: ConvPoolShape, params: dict) -> tuple[int, int, int, int]:
        """(Cp, Mp, Hpd, Wpd): channels padded to 8 and BM, the packed input's rows and columns."""
        th, tw, k = params["th"], params["tw"], shape.K
        return (ceil_div(shape.C, 8) * 8, ceil_div(shape.M, params["bm"]) * params["bm"],
                ceil_div(shape.H, th) * th + k - 1, 4 * ceil_div(ceil_div(shape.W, tw) * tw + k - 1, 4))

    def workspace_floats(self, shape, params) -> tuple[int, int]:
        cp_, mp, hpd, wpd = self.padded(shape, params)
        return self.planes * cp_ * shape.K ** 2 * mp, self.planes * shape.B * cp_ * hpd * wpd

    def pack_grids(self, shape, params) -> tuple[tuple, tuple]:
        nw, nx = (n // self.planes for n in self.workspace_floats(shape, params))
        return (ceil_div(nw, self.PACK_THREADS), 1, 1), (ceil_div(nx, self.PACK_THREADS), 1, 1)

    def launches(self, shape, params):
        """Pack the weights, pack the input, then the main kernel (the last: ``geometry``)."""
        tiles = ceil_div(shape.H, params["th"]) * ceil_div(shape.W, params["tw"])
        grid = (tiles * shape.B, ceil_div(shape.M, params["bm"]), 1)
        smem = 4 * params["stages"] * tc_stage_floats(params["bm"], params["th"], params["tw"], shape.K, self.planes)
        gw, gx = self.pack_grids(shape, params)
        pack = (self.PACK_THREADS, 1, 1)
        return [Launch("tc_pack_weights", gw, pack), Launch("tc_pack_input", gx, pack),
                Launch(self.kernel_names[0], grid, (self.threads(params), 1, 1), dynamic_smem=smem)]

    def launch_args(self, launch, y, operands, shape, params):
        x, w, b = operands
        wp, xp = self.workspace(shape, params)
        cp_, mp, hpd, wpd = _int32(*self.padded(shape, params))
        B, C, H, W, M = _int32(shape.B, shape.C, shape.H, shape.W, shape.M)
        if launch.kernel == "tc_pack_weights":
            return (wp, w, C, M, cp_, mp)
        if launch.kernel == "tc_pack_input":
            return (xp, x, B, C, H, W, cp_, hpd, wpd)
        return (y, xp, wp, b, B, cp_, H, W, M, mp, hpd, wpd)

    def validate(self, shape, params):
        check_shape_type(shape)
        self.check_params(params)
        *packs, main = TensorCoreStep.launches(self, shape, params)   # step 10 routes some shapes elsewhere
        self.check_launches(shape, params, [main])
        nbytes = 4 * sum(self.workspace_floats(shape, params))
        if nbytes > 8 * 1024 ** 3:
            raise ShapeError(f"Step {self.slug!r} needs a {nbytes / 2 ** 30:.1f} GiB packed-operand workspace "
                             f"for {shape.as_dict()}.", "split the batch into smaller calls.")
        self.check_launches(shape, params, packs)

    def workspace(self, shape, params):
        return cached_workspace(self._workspaces, self.workspace_floats(shape, params))

    def prepare(self, params, problem):
        super().prepare(params, problem)
        self.workspace(problem, params)


class TF32(TensorCoreStep):
    math = "tf32"
    """Step 07: TF32 inputs (10-bit mantissa), FP32 accumulation. Tolerance 5e-3 rel. L2."""

    kernel_names = ("conv_pool_tf32", "tc_pack_weights", "tc_pack_input")
    precision = "tf32"
    tolerance = 5e-3


class ThreeTF32(TensorCoreStep):
    math = "3xtf32"
    """Step 08: 3xTF32 (big·big + big·small + small·big): FP32 accuracy on tensor cores."""

    kernel_names = ("conv_pool_3xtf32", "tc_pack_weights", "tc_pack_input")
    precision = "3xtf32"
    tolerance = 1e-5
    planes = 2
    # 64 channels × 8×32 pixels: 3.07 ms on the H100 at B=1 vs 3.17 for 128 × 8×16 (exploratory
    # sweep); 128 × 8×32 would hold 128 accumulators plus two planes of fragments, and ptxas spills
    defaults = {**TensorCoreStep.defaults, "bm": 64}


def describe(impl: VggStep, shape: ConvPoolShape, params: dict) -> dict:
    """The launch a step makes for ``shape`` (for chapters and reports)."""
    grid, block, smem = impl.geometry(shape, params)
    return {"grid": list(grid), "block": list(block), "dynamic_smem_bytes": smem,
            "threads_per_block": math.prod(block), "defines": impl.defines(params, shape)}
