"""Steps 11-14 of the VGG study: the layer as an implicit GEMM on Hopper's own tensor-core path.

One kernel design (kernels/vgg/hopper_igemm.cuh) in four precisions, one ``.cu`` file each:
``wgmma.mma_async`` fed by TMA tile copies through a 4-stage (3 for the split modes) shared-memory
ring guarded by mbarriers; a producer warpgroup (one thread issues the copies) and two consumer
warpgroups; a persistent grid (one block per SM); bias + ReLU + 2×2 max-pool in registers.

Two launches per call, both timed: ``hopper_pack`` writes the input as NHWC and the weights as
[m][kh][kw][c] in the step's operand format (FP16/BF16, TF32, or big + second planes for the
FP32-accurate splits), then ``hopper_conv_pool`` runs the GEMM. The packed operands live in a
workspace this object allocates once per shape and device and keeps, together with the TMA
descriptors that point into it (so a captured CUDA graph stays valid). Two launches of the same
step on different streams at once would share it.

Build: nvcc for ``sm_90a`` (``wgmma``, ``setmaxnreg`` and the TMA copies exist on Hopper only),
loaded as a cubin; the TMA descriptors come from the driver's ``cuTensorMapEncodeTiled``.
"""

from __future__ import annotations

import ctypes
import functools

from .. import kernels, limits
from ..errors import ParameterError, ShapeError
from ..limits import ceil_div
from .impls import VggStep
from .problem import ConvPoolShape

ARCH = "sm_90a"
H100_SMS = 132                   # the persistent grid when no GPU is present (validation, replay)
K_MAX = 15                       # odd kernel sizes up to 15 (the weight pack holds 32*K*K floats)
WORKSPACE_MAX = 8 * 1024 ** 3    # bytes of packed operands; beyond this, split the batch
THREADS = 384                    # producer warpgroup + 2 consumer warpgroups
PACK_THREADS = 256
CHANNEL_GROUP = 64               # the pack moves 64-channel groups: C is padded to a multiple


# ----------------------------------------------------------------------------- TMA descriptors

_DT_FLOAT16, _DT_FLOAT32, _DT_BFLOAT16 = 6, 7, 9     # CUtensorMapDataType
_SWIZZLE_128B, _L2_PROMOTION_256B = 3, 3


@functools.lru_cache(maxsize=1)
def _encoder():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def tensor_map(address: int, dtype: int, dims: list[int], strides: list[int], box: list[int]) -> bytes:
    """The 128-byte TMA descriptor of a tiled tensor: ``dims`` fastest first, ``strides`` in bytes
    of dims 1.., ``box`` the tile one copy moves; 128-byte swizzle; out-of-bounds reads give zeros."""
    raw = ctypes.create_string_buffer(256)
    aligned = (ctypes.addressof(raw) + 63) & ~63          # CUtensorMap is 64-byte aligned
    rank = len(dims)
    status = _encoder()(ctypes.c_void_p(aligned), dtype, rank, ctypes.c_void_p(address),
                        (ctypes.c_uint64 * rank)(*dims), (ctypes.c_uint64 * max(rank - 1, 1))(*strides),
                        (ctypes.c_uint32 * rank)(*box), (ctypes.c_uint32 * rank)(*([1] * rank)),
                        0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
    if status != 0:
        raise ShapeError(f"cuTensorMapEncodeTiled refused dims {dims}, strides {strides}, box {box} (error {status}).",
                         "split the batch into smaller calls.")
    return ctypes.string_at(aligned, 128)


@functools.lru_cache(maxsize=64)
def _module(source: str, defines: tuple):
    """nvcc -> sm_90a cubin, loaded once per process and (file, defines)."""
    import cupy as cp

    cubin, _ = kernels.compile_cubin(source, dict(defines), arch=ARCH)
    return cp.RawModule(path=str(cubin))


class HopperStep(VggStep):
    """Steps 11-14: TMA + wgmma implicit GEMM, persistent, warp-specialised, fused epilogue."""

    kernel_names = ("hopper_conv_pool", "hopper_pack")
    arch = ARCH
    defaults: dict = {}
    mode = 1            # HOPPER_MODE of kernels/vgg/hopper_igemm.cuh
    graph_capturable = True

    def __init__(self):
        self._workspaces: dict = {}

    # ------------------------------------------------------------------ the build's constants
    def bf16(self, params: dict) -> bool:
        return False

    def esize(self) -> int:
        return 2 if self.mode == 0 else 4

    def bn(self) -> int:
        return 128 if self.mode >= 2 else 256

    def planes(self) -> int:
        return 2 if self.mode >= 2 else 1

    def smem_bytes(self) -> int:
        stages = 3 if self.mode >= 2 else 4
        return stages * self.planes() * (2 * 64 * 128 + self.bn() * 128) + 1024 + 16 * stages

    def defines(self, params, shape):
        d = {"KSIZE": shape.K}
        if self.bf16(params):
            d["HOPPER_BF16"] = 1
        return d

    def kernel(self, name, params, problem):
        return _module(self.source, tuple(sorted(self.defines(params, problem).items()))).get_function(name)

    # ------------------------------------------------------------------ geometry and limits
    def padded_channels(self, shape: ConvPoolShape) -> int:
        return ceil_div(shape.C, CHANNEL_GROUP) * CHANNEL_GROUP

    def sms(self) -> int:
        from .. import gpu

        if not gpu.available():
            return H100_SMS
        import cupy as cp

        return int(cp.cuda.Device().attributes["MultiProcessorCount"])

    def tiles(self, shape: ConvPoolShape) -> int:
        return shape.B * ceil_div(shape.H, 8) * ceil_div(shape.W, 16) * ceil_div(shape.M, self.bn())

    def pack_blocks(self, shape: ConvPoolShape) -> int:
        cp_ = self.padded_channels(shape)
        return ceil_div(shape.W, 32) * (cp_ // 64) * shape.B * shape.H + (cp_ // 32) * shape.M

    def geometry(self, shape, params):
        return (min(self.sms(), self.tiles(shape)), 1, 1), (THREADS, 1, 1), self.smem_bytes()

    def workspace_bytes(self, shape: ConvPoolShape) -> int:
        cp_ = self.padded_channels(shape)
        return 4 * self.planes() * (shape.B * shape.H * shape.W * cp_ + shape.M * shape.K ** 2 * cp_) // (
            2 if self.mode == 0 else 1)

    def validate(self, shape, params):
        super().validate(shape, params)
        if shape.K > K_MAX:
            raise ShapeError(f"Step {self.slug!r} takes odd kernel sizes up to {K_MAX}, not K={shape.K}.",
                             "use another step (e.g. step='final') for this kernel size.")
        nbytes = self.workspace_bytes(shape)
        if nbytes > WORKSPACE_MAX:
            raise ShapeError(f"Step {self.slug!r} needs a {nbytes / 2 ** 30:.1f} GiB packed-operand workspace "
                             f"for {shape.as_dict()}.", "split the batch into smaller calls.")
        limits.check_launch((self.pack_blocks(shape), 1, 1), (PACK_THREADS, 1, 1),
                            what=f"Step {self.slug!r} (packing) on {shape.as_dict()}")

    # ------------------------------------------------------------------ workspace and launch
    def _formats(self) -> list[tuple[int, int]]:
        """(CUtensorMapDataType, elements per channel) of each operand plane."""
        first = _DT_FLOAT16 if self.mode == 0 else _DT_FLOAT32
        if self.mode == 0:
            return [(first, 1)]
        if self.mode == 1:
            return [(first, 1)]
        return [(first, 1), (_DT_BFLOAT16, 2) if self.mode == 3 else (first, 1)]

    def workspace(self, shape: ConvPoolShape, params: dict):
        import cupy as cp
        import numpy as np

        key = (cp.cuda.Device().id, shape, self.bf16(params))
        ws = self._workspaces.get(key)
        if ws is not None:
            return ws
        if str(cp.cuda.Device().compute_capability) != "90":
            raise ParameterError(f"Step {self.slug!r} uses Hopper-only instructions (wgmma, TMA); this GPU is "
                                 f"compute capability {cp.cuda.Device().compute_capability}.",
                                 "run it on an H100 (sm_90), or use step 'tf32' / 'final'.")
        B, C, H, W, M, K = shape.B, shape.C, shape.H, shape.W, shape.M, shape.K
        cp_, e, bn = self.padded_channels(shape), self.esize(), self.bn()
        store = cp.float16 if self.mode == 0 else cp.float32     # 16-bit words for FP16 and BF16
        xs = [cp.empty(B * H * W * cp_, dtype=store) for _ in range(self.planes())]
        ws_ = [cp.empty(M * K * K * cp_, dtype=store) for _ in range(self.planes())]
        formats = self._formats()
        if self.mode == 0 and self.bf16(params):
            formats = [(_DT_BFLOAT16, 1)]
        ck = 128 // e
        maps = b"".join(tensor_map(a.data.ptr, dt, [cp_ * k, W, H, B], [cp_ * e, W * cp_ * e, H * W * cp_ * e],
                                   [ck * k, 8, 8, 1]) for a, (dt, k) in zip(xs, formats))
        maps += b"".join(tensor_map(a.data.ptr, dt, [K * K * cp_ * k, M], [K * K * cp_ * e], [ck * k, bn])
                         for a, (dt, k) in zip(ws_, formats))
        dmaps = cp.asarray(np.frombuffer(maps, dtype=np.uint8))
        ws = (cp_, xs, ws_, dmaps)
        self._workspaces[key] = ws
        return ws

    def prepare(self, params, problem):
        for name in self.kernel_names:
            self.kernel(name, params, problem)
        self.workspace(problem, params)

    def launch(self, y, x, w, b, shape, params, stream=None):
        import numpy as np

        cp_, xs, ws_, dmaps = self.workspace(shape, params)
        pack = self.kernel("hopper_pack", params, shape)
        main = self.kernel("hopper_conv_pool", params, shape)
        smem = self.smem_bytes()
        main.max_dynamic_shared_size_bytes = smem
        grid, block, _ = self.geometry(shape, params)
        i32 = np.int32
        pack((self.pack_blocks(shape),), (PACK_THREADS,),
             (xs[0], xs[-1], ws_[0], ws_[-1], x, w, *map(i32, (shape.B, shape.C, shape.H, shape.W, shape.M, cp_))),
             stream=stream)
        main(grid, block, (y, b, dmaps, *map(i32, (shape.B, shape.H, shape.W, shape.M, cp_))), shared_mem=smem,
             stream=stream)


class HopperTF32(HopperStep):
    """Step 11: TF32 operands (rounded by the pack), wgmma m64n256k8, FP32 accumulators."""

    mode = 1
    math = "tf32"
    precision = "tf32"
    tolerance = 5e-3


class HopperFP16(HopperStep):
    """Step 12: FP16 operands (BF16 with ``operand="bf16"``), wgmma m64n256k16, FP32 accumulators.

    FP16 holds |v| <= 65504: larger inputs or weights overflow (this step is not FP32-accurate;
    BF16 keeps FP32's exponent range with 3 fewer mantissa bits)."""

    mode = 0
    math = "fp16"
    precision = "fp16"
    tolerance = 5e-3
    defaults = {"operand": "fp16"}

    def bf16(self, params):
        return params.get("operand") == "bf16"

    def check_params(self, params):
        if params["operand"] not in ("fp16", "bf16"):
            raise ParameterError(f"operand={params['operand']!r} is not a 16-bit type this step has.",
                                 "pass operand='fp16' or operand='bf16'.")


class Hopper3xTF32(HopperStep):
    """Step 13: 3xTF32 (big·big + big·small + small·big on TF32, wgmma m64n128k8): FP32 accuracy."""

    mode = 2
    math = "3xtf32"
    precision = "3xtf32"
    tolerance = 1e-5


class HopperSplit(HopperStep):
    """Step 14: big·big on TF32, the two cross terms as one BF16 product over a doubled k."""

    mode = 3
    math = "tf32+2xbf16"
    precision = "3xtf32"
    tolerance = 1e-5
