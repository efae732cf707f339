"""Steps 11-14 of the VGG study: the layer as an implicit GEMM on Hopper's own tensor-core path.

One kernel design (kernels/vgg/hopper_igemm.cuh) in four precisions, one ``.cu`` file each:
``wgmma.mma_async`` fed by TMA tile copies through a 4-stage (3 for the split modes) shared-memory
ring guarded by mbarriers; a producer warpgroup (one thread issues the copies) and two consumer
warpgroups; a persistent grid (one block per SM); bias + ReLU + 2×2 max-pool in registers.

What a call launches: ``hopper_pack`` writes the input as NHWC in the step's operand format
(FP16/BF16, TF32, or big + second planes for the FP32-accurate splits), then ``hopper_conv_pool``
runs the GEMM. The weights, packed as [m][kh][kw][c] in the same format, are packed once per
weight set and kept, as CUTLASS's sm90 convolution does with a prepared filter:

- ``PreparedWeights`` (``vgg.prepare_weights(w, step)``): a copy of ``w`` taken when it is made,
  packed at once for the step's default operand format (other formats on first use) with the TMA
  descriptors that point into it. A call with it packs the input only; it is what the book times.
  Changing ``w`` afterwards does not change it: prepare the new weights.
- a raw weight array: packed on its first call and cached by its address and shape (the last
  ``WEIGHT_CACHE`` arrays); every later call's pack launch also compares the array with the copy
  taken when it was packed, bit for bit, and repacks the 32-channel slices that differ (on the
  device: no copy to the host, no synchronisation), so an array changed in place, or a new array at
  a freed one's address, is never computed with stale weights. That costs a read of ``w`` and of
  the copy per call instead of the packed write.

The input's packed copy lives in a workspace this object allocates once per shape and device and
keeps, together with its TMA descriptors (so a captured CUDA graph stays valid). Two launches of
the same step on different streams at once would share it (and a raw weight array's cache entry).

Build: nvcc for ``sm_90a`` (``wgmma``, ``setmaxnreg`` and the TMA copies exist on Hopper only),
loaded as a cubin; the TMA descriptors come from the driver's ``cuTensorMapEncodeTiled``.
"""

from __future__ import annotations

from collections import OrderedDict

from .. import limits, tma
from ..errors import ParameterError, ShapeError
from ..limits import ceil_div
from ..steps import Launch, StepImpl, set_once
from .impls import VggStep
from .problem import ConvPoolShape

ARCH = "sm_90a"
H100_SMS = 132                   # the persistent grid when no GPU is present (validation, replay)
K_MAX = 15                       # odd kernel sizes up to 15 (the weight pack holds 32*K*K floats)
WORKSPACE_MAX = 8 * 1024 ** 3    # bytes of packed operands; beyond this, split the batch
THREADS = 384                    # producer warpgroup + 2 consumer warpgroups
PACK_THREADS = 256
CHANNEL_GROUP = 64               # the pack moves 64-channel groups: C is padded to a multiple
NULL = __import__("numpy").uint64(0)   # a null pointer argument
WEIGHT_CACHE = 4                 # raw weight arrays whose packed copies a step keeps (least recent dropped)


# ----------------------------------------------------------------------------- TMA descriptors

_DT_FLOAT16, _DT_FLOAT32, _DT_BFLOAT16 = tma.DT_FLOAT16, tma.DT_FLOAT32, tma.DT_BFLOAT16


def tensor_map(address: int, dtype: int, dims: list[int], strides: list[int], box: list[int]) -> bytes:
    """The core's descriptor (``kernelbook.tma``) with 256-byte L2 promotion; a refused tensor is
    a batch too large for one call."""
    return tma.tensor_map(address, dtype, dims, strides, box, l2_promotion=256, fix="split the batch into smaller calls.")


class HopperStep(VggStep):
    """Steps 11-14: TMA + wgmma implicit GEMM, persistent, warp-specialised, fused epilogue."""

    kernel_names = ("hopper_conv_pool", "hopper_pack")
    arch = ARCH
    defaults: dict = {}
    mode = 1            # HOPPER_MODE of kernels/vgg/hopper_igemm.cuh
    graph_capturable = True

    def __init__(self):
        self._workspaces: dict = {}
        self._weight_cache: OrderedDict = OrderedDict()   # raw weight arrays' packed copies (cached_weights)

    # ------------------------------------------------------------------ the build's constants
    @property
    def precision(self) -> str:
        """The accuracy class its records name: the unit it computes in (a step whose unit is a
        mix, step 14, names the class it matches instead)."""
        return self.math

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

    # ------------------------------------------------------------------ geometry and limits
    def padded_channels(self, shape: ConvPoolShape) -> int:
        return ceil_div(shape.C, CHANNEL_GROUP) * CHANNEL_GROUP

    def sms(self) -> int:
        from .. import gpu

        if not gpu.available():
            return H100_SMS
        return gpu.multiprocessors()  # asked once per device, not per call

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
        if self.mode < 2:   # one plane: FP16 (mode 0) or TF32 read as float (mode 1)
            return [(first, 1)]
        return [(first, 1), (_DT_BFLOAT16, 2) if self.mode == 3 else (first, 1)]

    def _require_hopper(self):
        import cupy as cp

        if str(cp.cuda.Device().compute_capability) != "90":
            raise ParameterError(f"Step {self.slug!r} uses Hopper-only instructions (wgmma, TMA); this GPU is "
                                 f"compute capability {cp.cuda.Device().compute_capability}.",
                                 "run it on an H100 (sm_90), or use step 'tf32' / 'final'.")

    def _store(self):
        import cupy as cp

        return cp.float16 if self.mode == 0 else cp.float32     # 16-bit words for FP16 and BF16

    def workspace(self, shape: ConvPoolShape, params: dict):
        """The input's packed planes and their TMA descriptors, made once per (device, shape, format)."""
        import cupy as cp
        import numpy as np

        key = (cp.cuda.Device().id, shape, self.bf16(params))
        ws = self._workspaces.get(key)
        if ws is not None:
            return ws
        self._require_hopper()
        B, H, W = shape.B, shape.H, shape.W
        cp_, e = self.padded_channels(shape), self.esize()
        xs = [cp.empty(B * H * W * cp_, dtype=self._store()) for _ in range(self.planes())]
        ck = 128 // e
        maps = b"".join(tensor_map(a.data.ptr, dt, [cp_ * k, W, H, B], [cp_ * e, W * cp_ * e, H * W * cp_ * e],
                                   [ck * k, 8, 8, 1]) for a, (dt, k) in zip(xs, self.formats(params)))
        ws = (cp_, xs, cp.asarray(np.frombuffer(maps, dtype=np.uint8)))
        self._workspaces[key] = ws
        return ws

    def formats(self, params: dict) -> list[tuple[int, int]]:
        if self.mode == 0 and self.bf16(params):
            return [(_DT_BFLOAT16, 1)]
        return self._formats()

    def weight_blocks(self, shape: ConvPoolShape) -> int:
        return (self.padded_channels(shape) // 32) * shape.M

    def packed_weights(self, shape: ConvPoolShape, params: dict) -> "PackedWeights":
        """Empty packed-weight planes for ``shape`` in ``params``' format, with their TMA descriptors."""
        import cupy as cp
        import numpy as np

        self._require_hopper()
        M, K = shape.M, shape.K
        cp_, e = self.padded_channels(shape), self.esize()
        planes = [cp.empty(M * K * K * cp_, dtype=self._store()) for _ in range(self.planes())]
        maps = b"".join(tensor_map(a.data.ptr, dt, [K * K * cp_ * k, M], [K * K * cp_ * e], [(128 // e) * k, self.bn()])
                        for a, (dt, k) in zip(planes, self.formats(params)))
        return PackedWeights(planes, cp.asarray(np.frombuffer(maps, dtype=np.uint8)))

    def pack_weights(self, packed: "PackedWeights", w, shape: ConvPoolShape, params: dict, stream=None) -> None:
        """Launch the pack kernel on the weight blocks alone (B = 0: no input blocks)."""
        import numpy as np

        pack = self.kernel("hopper_pack", params, shape)
        i32 = np.int32
        pack((self.weight_blocks(shape),), (PACK_THREADS,),
             (NULL, NULL, packed.planes[0], packed.planes[-1], NULL, w, NULL,
              *map(i32, (0, shape.C, shape.H, shape.W, shape.M, self.padded_channels(shape), 0))), stream=stream)

    def prepare_weights(self, w, params: dict | None = None) -> "PreparedWeights":
        """``w`` (CuPy float32 (M, C, K, K)) packed once for this step: see ``PreparedWeights``."""
        return PreparedWeights(self, w, self.params(**(params or {})))

    def cached_weights(self, w, shape: ConvPoolShape, params: dict, stream=None) -> "PackedWeights":
        """The packed copy of a raw weight array, made on its first call (see the module's notes)."""
        import cupy as cp

        cache = self._weight_cache
        key = (cp.cuda.Device().id, w.data.ptr, tuple(w.shape), shape.C, self.bf16(params))
        packed = cache.get(key)
        if packed is not None:
            cache.move_to_end(key)
            return packed
        packed = self.packed_weights(shape, params)
        packed.snapshot = cp.empty_like(w)
        packed.snapshot.data.copy_from_device_async(w.data, w.nbytes, stream)
        self.pack_weights(packed, w, shape, params, stream)
        cache[key] = packed
        while len(cache) > WEIGHT_CACHE:
            cache.popitem(last=False)
        return packed

    def prepare(self, params, problem):
        for name in self.kernel_names:
            self.kernel(name, params, problem)
        self.workspace(problem, params)

    def kernel(self, name, params, problem):
        fn = super().kernel(name, params, problem)
        if name == "hopper_conv_pool":
            set_once(fn, "max_dynamic_shared_size_bytes", self.smem_bytes())
        return fn

    def pack_launch(self, shape: ConvPoolShape, raw: bool) -> Launch:
        """The pack over the input's blocks, and with a raw weight array (``raw``) the weights'
        blocks too (compared with the packed copy, repacked where they differ)."""
        blocks = self.pack_blocks(shape) - (0 if raw else self.weight_blocks(shape))
        return Launch("hopper_pack", (blocks,), (PACK_THREADS,), key="raw" if raw else "")

    def launches(self, shape, params):
        """Prepared weights (``PreparedWeights``): the input's pack, then the GEMM; a raw weight
        array is handed to ``RawWeightsCall`` (``handoff``), whose pack covers its blocks too."""
        grid, block, smem = self.geometry(shape, params)
        return [self.pack_launch(shape, raw=False), Launch("hopper_conv_pool", grid, block, dynamic_smem=smem)]

    def handoff(self, shape, params, y, operands):
        return None if isinstance(operands[1], PreparedWeights) else (self.raw_call, params)

    def operands(self, operands, shape, params, stream=None):
        """x, b, the input's workspace (planes and descriptors, made once per shape) and the packed
        weights with the raw array and its snapshot (NULL for prepared weights)."""
        x, w, b = operands
        cp_, xs, xmaps = self.workspace(shape, params)
        if isinstance(w, PreparedWeights):
            packed, raw, snapshot = w.packed(self, shape, params, stream), NULL, NULL
        else:
            packed = self.cached_weights(w, shape, params, stream)
            raw, snapshot = w, packed.snapshot
        return x, b, cp_, xs, xmaps, packed, raw, snapshot

    def launch_args(self, launch, y, operands, shape, params):
        import numpy as np

        x, b, cp_, xs, xmaps, packed, raw, snapshot = operands
        i32 = np.int32
        if launch.kernel == "hopper_pack":
            return (xs[0], xs[-1], packed.planes[0], packed.planes[-1], x, raw, snapshot,
                    *map(i32, (shape.B, shape.C, shape.H, shape.W, shape.M, cp_, 0)))
        return (y, b, xmaps, packed.maps, *map(i32, (shape.B, shape.H, shape.W, shape.M, cp_)))

    @property
    def raw_call(self) -> "RawWeightsCall":
        found = self.__dict__.get("_raw_call")
        if found is None:
            found = self._raw_call = RawWeightsCall(self)
        return found


class RawWeightsCall(StepImpl):
    """A Hopper step's call with a raw weight array: its launches with the pack over the input's and
    the weights' blocks (one launch), the weights packed and cached on their first call."""

    def __init__(self, of: HopperStep):
        self.of, self.step, self.step_list = of, of.step, of.step_list

    def launches(self, shape, params):
        pack, main = self.of.launches(shape, params)
        return [self.of.pack_launch(shape, raw=True), main]

    def operands(self, operands, shape, params, stream=None):
        return self.of.operands(operands, shape, params, stream)

    def launch_args(self, launch, y, operands, shape, params):
        return self.of.launch_args(launch, y, operands, shape, params)

    def kernel(self, name, params, problem):
        return self.of.kernel(name, params, problem)


class PackedWeights:
    """Packed weight planes ([m][kh][kw][c], the step's operand format) and their TMA descriptors;
    ``snapshot``: for a raw array's cache entry, the copy of ``w`` they were packed from."""

    def __init__(self, planes, maps):
        self.planes, self.maps, self.snapshot = planes, maps, None


class PreparedWeights:
    """A weight set packed once for one Hopper step (11-14); pass it as ``w`` to ``vgg.forward``.

    Made by ``vgg.prepare_weights(w, step)``: it keeps a copy of ``w`` taken when it was made and
    packs it at once for the step's operand format (``params``, default the step's defaults; another
    format, e.g. step 12's ``operand="bf16"``, is packed from the copy on first use). A call with it
    launches the input's pack and the GEMM only. Later changes to the caller's ``w`` do not reach
    it (the contract): prepare the new weights instead."""

    def __init__(self, step: HopperStep, w, params: dict):
        from . import check_weights

        check_weights(w)
        self.slug = step.slug
        self.w_shape = tuple(int(v) for v in w.shape)
        self.source = w.copy()
        self._packed: dict = {}
        self.packed(step, self.shape(1, 2, 2), params)

    def shape(self, B: int, H: int, W: int) -> ConvPoolShape:
        M, C, K, _ = self.w_shape
        return ConvPoolShape(B, C, H, W, M, K)

    def packed(self, step: HopperStep, shape: ConvPoolShape, params: dict, stream=None) -> PackedWeights:
        import cupy as cp

        if step.slug != self.slug:
            raise ParameterError(f"These weights were prepared for step {self.slug!r}, not {step.slug!r}.",
                                 f"prepare them for it: vgg.prepare_weights(w, step={step.slug!r}).")
        key = (cp.cuda.Device().id, step.bf16(params))
        found = self._packed.get(key)
        if found is None:
            step.kernel("hopper_pack", params, shape)   # compile before anything is launched
            found = step.packed_weights(shape, params)
            step.pack_weights(found, self.source, shape, params, stream)
            self._packed[key] = found
        return found


class HopperTF32(HopperStep):
    """Step 11: TF32 operands (rounded by the pack), wgmma m64n256k8, FP32 accumulators."""

    mode = 1
    math = "tf32"
    tolerance = 5e-3


class HopperFP16(HopperStep):
    """Step 12: FP16 operands (BF16 with ``operand="bf16"``), wgmma m64n256k16, FP32 accumulators.

    FP16 holds |v| <= 65504: larger inputs or weights overflow (this step is not FP32-accurate;
    BF16 keeps FP32's exponent range with 3 fewer mantissa bits)."""

    mode = 0
    math = "fp16"
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
    tolerance = 1e-5


class HopperSplit(HopperStep):
    """Step 14: big·big on TF32, the two cross terms as one BF16 product over a doubled k."""

    mode = 3
    math = "tf32+2xbf16"
    precision = "3xtf32"
    tolerance = 1e-5
