"""One ``StepImpl`` per step of the MLP study: parameters, validation and launch.

Call convention (every step): ``launch(y, x, weights, shape, params, stream=None)`` with
``x`` (71, N) and ``y`` (4, N) C-contiguous float32 CuPy arrays, and ``weights`` either the
raw tuple (W1, b1, W2, b2, W3, b3) of float32 CuPy arrays (W_l is outputs x inputs, row-major)
or what ``prepare_weights`` returned for it. Steps that read the weights in another layout
(09-15) pack them on the host in ``prepare_weights``; pass the prepared object to keep that
out of timed regions (``launch`` with a raw tuple packs on every call and cannot be captured
in a CUDA graph). Steps 00 and 01 keep two 64 x N scratch matrices, allocated on the first
launch for an N and reused, so a warm-up launch puts the allocation outside timings.

What a timed launch contains: the step's kernel launches only (no packing, no allocation).

Steps 00-16 declare their launches as data (``DeclaredMlp``: ``launches(shape, params) ->
[Launch]`` and ``launch_args``, see ``kernelbook.steps``); the core's ``launch``, limit checks,
``prepare`` and ``kernels_for`` read that one list, and ``tests/test_declared_launches.py`` holds it
to the launches the earlier ``plan()/args()`` path made (a recorded table). Step 17 declares its
launches too but launches them itself, from a launch plan cached per (N, parameters).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .. import kernels, limits
from ..errors import ParameterError
from ..steps import Launch, StepImpl, opt_in, set_once
from . import pack
from .reference import HALF_THRESHOLD

SMS_WITHOUT_GPU = 132  # the H100's SM count, used to size grids when no GPU is here


@functools.lru_cache(maxsize=1)
def sm_count() -> int:
    from .. import gpu

    return gpu.multiprocessors() if gpu.available() else SMS_WITHOUT_GPU  # asked once per device


@dataclass
class PreparedWeights:
    """The raw weights on the GPU plus the packed copies one step reads (``extra``)."""

    raw: tuple
    extra: dict = field(default_factory=dict)
    slug: str = ""


def _host(weights) -> tuple[np.ndarray, ...]:
    return tuple(w.get() if hasattr(w, "get") else np.asarray(w) for w in weights)


def _int_param(params: dict, name: str, allowed, fix: str) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) not in allowed:
        shown = f"{min(allowed)}..{max(allowed)}" if isinstance(allowed, range) else ", ".join(map(str, allowed))
        raise ParameterError(f"{name}={value!r} is not accepted (allowed: {shown}).", fix)
    return int(value)


def shape_key(shape, params) -> tuple:
    """What a persistent MLP launch depends on: N, the parameters and the GPU's SM count."""
    return shape.N, tuple(params.items()), sm_count()


def per_shape(launches):
    """A step's ``launches`` worked out once per (N, parameters, SM count): the persistent grid
    depends on nothing else (``sm_count`` is asked of the driver once per device), so a repeated
    call costs a dictionary look-up, and another GPU gets its own grid."""
    @functools.wraps(launches)
    def cached(self, shape, params):
        try:
            key = shape_key(shape, params)
            found = self._launch_cache.get(key)
        except AttributeError:
            self._launch_cache = {}
            found = None
        except TypeError:   # unhashable parameter values: no cache
            return launches(self, shape, params)
        if found is None:
            found = launches(self, shape, params)
            if len(self._launch_cache) > 256:
                self._launch_cache.clear()
            self._launch_cache[key] = found
        return found

    return cached


class MlpImpl(StepImpl):
    """Shared machinery: weights prepared once, the persistent grid (every step but 17 declares
    its launches through ``DeclaredMlp``)."""

    precision = "fp32"
    measure = "rel_l2"            # "scaled_abs_diff" for the half-precision steps
    packing = None                # a function of pack.py, or None
    static_smem = 0               # bytes of static shared memory (as ptxas reports it)
    dynamic_smem = 0
    min_blocks = 0                # __launch_bounds__ minimum blocks, 0 when none

    # ------------------------------------------------------------------ weights
    def prepare_weights(self, weights) -> PreparedWeights:
        """Pack once (host NumPy, then one upload each); the result is reused by every launch."""
        if isinstance(weights, PreparedWeights):
            return weights
        extra = {}
        if self.packing is not None:
            import cupy as cp

            for name, arr in self._pack(_host(weights)).items():
                if isinstance(arr, (bool, int)):   # a fact about the weights the host keeps (step 19's exact_only)
                    extra[name] = int(arr)
                    continue
                dev = cp.empty(arr.shape, dtype=arr.dtype)
                dev.set(arr)
                extra[name] = dev
        return PreparedWeights(tuple(weights), extra, self.slug)

    def _pack(self, host_weights) -> dict:
        out = type(self).packing(host_weights)
        return out if isinstance(out, dict) else {"packed": out}

    def planned(self, shape, params) -> tuple:
        """``(kernel, launch)`` of a one-launch step, compiled and opted in once per ``shape_key``:
        what a hand-tuned ``launch`` calls, so that a repeated call costs one look-up."""
        key = shape_key(shape, params)
        plans = self.__dict__.setdefault("_plans", {})
        found = plans.get(key)
        if found is None:
            (launch,) = self.launches(shape, params)
            fn = self.kernel(launch.kernel, params, shape)
            opt_in(fn, launch)
            if len(plans) > 256:
                plans.clear()
            found = plans[key] = (fn, launch)
        return found

    # ------------------------------------------------------------------ building
    def module_source(self, params, shape) -> str:
        return self.source

    def check_params(self, params) -> None:
        if "blocks_per_sm" in params:
            _int_param(params, "blocks_per_sm", range(1, 33), "pass blocks_per_sm between 1 and 32 (e.g. 4).")

    def kernel(self, name, params, problem):
        fn = kernels.get_kernel(self.module_source(params, problem), name, self.defines(params, problem))
        if self.dynamic_smem > limits.H100.static_smem_per_block:
            set_once(fn, "max_dynamic_shared_size_bytes", self.dynamic_smem)
        return fn

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def persistent_grid(work_items: int, blocks_per_sm: int) -> int:
        """Blocks for a grid-stride kernel: enough to fill the GPU, never more than the work."""
        return max(1, min(work_items, sm_count() * blocks_per_sm))


class _Scratch:
    """Steps 00-01: two 64 x N float32 scratch matrices, kept for the last N seen."""

    def scratch(self, n):
        import cupy as cp

        cached = getattr(self, "_scratch", None)
        if cached is None or cached[0] != n or cached[1].device.id != cp.cuda.Device().id:
            cached = (n, cp.empty((64, n), cp.float32), cp.empty((64, n), cp.float32))
            self._scratch = cached
        return cached[1], cached[2]


class DeclaredMlp(MlpImpl):
    """Steps 00-16: launches declared as data; the core launches them (``StepImpl.launch``) on the
    weights prepared for the step (``operands``: packed once per weight set and cached)."""

    def launches(self, shape, params) -> list[Launch]:
        raise NotImplementedError

    def launch_args(self, launch, y, operands, shape, params):
        x, w = operands
        W1, b1, W2, b2, W3, b3 = w.raw
        return (x, W1, b1, W2, b2, W3, b3, y, np.int32(shape.N))

    def validate(self, shape, params) -> None:
        self.check_params(params)
        self.check_launches(shape, params)

    def operands(self, operands, shape, params, stream=None):
        x, weights = operands
        return x, self.prepare_weights(weights)

    def one_launch(self, shape, grid, block, static_smem=None) -> list[Launch]:
        """The single launch of steps 01-12, with the class's shared memory and launch bounds."""
        return [Launch(self.kernel_names[0], grid, block, dynamic_smem=self.dynamic_smem,
                       static_smem=self.static_smem if static_smem is None else static_smem,
                       min_blocks=self.min_blocks)]


class Baseline(_Scratch, DeclaredMlp):
    kernel_names = ("matMulKernel", "reluKernel")
    defaults = {"tile": 16}

    def defines(self, params, shape):
        return {"TILE": params["tile"]}

    def check_params(self, params):
        _int_param(params, "tile", (4, 8, 16, 32), "pass tile=16 (a tile x tile block, at most 32 x 32).")

    def launches(self, shape, params):
        t, n = params["tile"], shape.N

        def mm(rows, key):
            return Launch("matMulKernel", (-(-n // t), -(-rows // t), 1), (t, t, 1), key=key)

        def relu(key):
            return Launch("reluKernel", (-(-64 * n // 256), 1, 1), (256, 1, 1), key=key)

        return [mm(64, "layer1"), relu("relu1"), mm(64, "layer2"), relu("relu2"), mm(4, "layer3")]

    def launch_args(self, launch, y, operands, shape, params):
        x, w = operands
        W1, b1, W2, b2, W3, b3 = w.raw
        h1, h2 = self.scratch(shape.N)
        if launch.key.startswith("relu"):
            h = h1 if launch.key == "relu1" else h2
            return (h, np.int64(h.size))
        A, B, bias, C, rows, k = {"layer1": (W1, x, b1, h1, 64, 71), "layer2": (W2, h1, b2, h2, 64, 64),
                                  "layer3": (W3, h2, b3, y, 4, 64)}[launch.key]
        return (A, B, bias, C, np.int32(rows), np.int32(k), np.int32(shape.N))


class _Columns(DeclaredMlp):
    """Steps 01-05: 64 threads per column, COLUMNS columns per block."""

    max_columns = 16

    def defines(self, params, shape):
        return {"COLUMNS": params["columns"]}

    def check_params(self, params):
        super().check_params(params)
        _int_param(params, "columns", range(1, self.max_columns + 1),
                   f"pass columns between 1 and {self.max_columns} (64 threads per column).")

    def smem_for(self, columns: int) -> int:
        return 0

    def launches(self, shape, params):
        c = params["columns"]
        groups = -(-shape.N // c)
        grid = groups if "blocks_per_sm" not in params else self.persistent_grid(groups, params["blocks_per_sm"])
        return self.one_launch(shape, (grid, 1, 1), (64 * c, 1, 1), static_smem=self.smem_for(c))


class FusedGlobal(_Scratch, _Columns):
    kernel_names = ("fusedGlobalMemoryKernel",)
    defaults = {"columns": 4}

    def launch_args(self, launch, y, operands, shape, params):
        x, w = operands
        h1, h2 = self.scratch(shape.N)
        W1, b1, W2, b2, W3, b3 = w.raw
        return (x, W1, b1, W2, b2, W3, b3, h1, h2, y, np.int32(shape.N))


class FusedShared(_Columns):
    kernel_names = ("fusedSharedMemKernel",)
    defaults = {"columns": 4}

    def smem_for(self, c):
        return 4 * (64 * 71 + 64 * 64 + 4 * 64 + 64 + 64 + 4 + c * (71 + 128))


class WholeNetShared(_Columns):
    kernel_names = ("wholeNetInSharedMemKernel",)
    defaults = {"columns": 4, "blocks_per_sm": 4}

    def smem_for(self, c):
        return 4 * (64 * 71 + 64 * 65 + 4 * 64 + 64 + 64 + 4 + c * (71 + 128))


class SharedAndRegisters(_Columns):
    kernel_names = ("netInSharedMemAndRegsKernel",)
    defaults = {"columns": 4, "blocks_per_sm": 4}
    max_columns = 4   # 64 registers of W2 per thread: keep blocks at 256 threads

    def smem_for(self, c):
        return 4 * (64 * 71 + 4 * 64 + 64 + 4 + c * (71 + 128))


class LastLayerCoop(_Columns):
    kernel_names = ("lastLayerCoopKernel",)
    defaults = {"columns": 4, "blocks_per_sm": 4}
    max_columns = 4

    def smem_for(self, c):
        return 4 * (64 * 71 + 64 + c * (71 + 128))


class _Fixed256(DeclaredMlp):
    """Steps 06-11: 256 threads per block, grid-stride over tiles of ``tile_columns`` columns."""

    tile_columns = 32
    defaults = {"blocks_per_sm": 4}

    def launches(self, shape, params):
        tiles = -(-shape.N // self.tile_columns)
        return self.one_launch(shape, (self.persistent_grid(tiles, params["blocks_per_sm"]), 1, 1), (256, 1, 1))


class WholeNetRegisters(_Fixed256):
    kernel_names = ("wholeNetInRegsKernel",)
    tile_columns = 2
    static_smem = 1600


class HalfPrecision(WholeNetRegisters):
    math = "fp16x2"
    kernel_names = ("wholeNetInRegsHalfKernel",)
    precision, measure, tolerance = "fp16", "scaled_abs_diff", HALF_THRESHOLD
    static_smem = 800


class ReducedBankConflicts(_Fixed256):
    math = "fp16x2"
    kernel_names = ("reducedBankConflictsKernel",)
    precision, measure, tolerance = "fp16", "scaled_abs_diff", HALF_THRESHOLD
    static_smem = 13568


class CoalescedWeights(ReducedBankConflicts):
    kernel_names = ("coalescedWeightsReadsKernel",)
    packing = staticmethod(pack.half_rows)

    def launch_args(self, launch, y, operands, shape, params):
        return packed_args(launch.kernel, y, *operands, shape.N)


class InputsLoadHiding(CoalescedWeights):
    kernel_names = ("inputsLoadHidingKernel",)
    static_smem = 18688


class BetterOccupancy(ReducedBankConflicts):
    kernel_names = ("betterOccupancyKernel",)
    packing = staticmethod(pack.quarter_rows)
    defaults = {"blocks_per_sm": 4, "min_blocks": 4}
    static_smem = 13056

    def defines(self, params, shape):
        return {"MIN_BLOCKS": params["min_blocks"]}

    def check_params(self, params):
        super().check_params(params)
        _int_param(params, "min_blocks", range(1, 9), "pass min_blocks between 1 and 8 (4 caps registers at 64).")
        limits.check_launch_bounds(256, params["min_blocks"], what=f"{self.slug}: betterOccupancyKernel")

    def launch_args(self, launch, y, operands, shape, params):
        return packed_args(launch.kernel, y, *operands, shape.N)


def packed_args(kernel: str, y, x, w: PreparedWeights, n: int) -> tuple:
    """Arguments of the kernels that read packed weights: quarter rows for betterOccupancyKernel,
    half rows for the others."""
    _, b1, _, b2, _, b3 = w.raw
    e = w.extra
    q = "q" if kernel == "betterOccupancyKernel" else "p"
    return (x, e[f"w1{q}"], b1, e[f"w2{q}"], b2, e[f"w3{q}"], b3, y, np.int32(n))


class Best(DeclaredMlp):
    math = "fp16x2"
    """Step 12: the fastest half-precision kernel per N (a choice, not a new kernel)."""

    kernel_names = ("coalescedWeightsReadsKernel", "inputsLoadHidingKernel", "betterOccupancyKernel")
    precision, measure, tolerance = "fp16", "scaled_abs_diff", HALF_THRESHOLD
    choices = {"coalesced-weights": kernel_names[0], "inputs-load-hiding": kernel_names[1],
               "better-occupancy": kernel_names[2]}
    defaults = {"small": "inputs-load-hiding", "large": "inputs-load-hiding", "switch_columns": 65536,
                "blocks_per_sm": 8, "min_blocks": 4}
    static_smem = 18688

    @staticmethod
    def packing(host_weights):
        return {**pack.half_rows(host_weights), **pack.quarter_rows(host_weights)}

    def defines(self, params, shape):
        return {"MIN_BLOCKS": params["min_blocks"]}

    def check_params(self, params):
        super().check_params(params)
        for key in ("small", "large"):
            if params[key] not in self.choices:
                raise ParameterError(f"{key}={params[key]!r} names no candidate kernel.",
                                     f"use one of: {', '.join(self.choices)}.")
        _int_param(params, "min_blocks", range(1, 9), "pass min_blocks between 1 and 8.")
        limits.finite_number("switch_columns", params["switch_columns"], 1, 2**31 - 1, example="65536")

    def launches(self, shape, params):
        name = self.choices[params["small" if shape.N <= params["switch_columns"] else "large"]]
        tiles = -(-shape.N // 32)
        return [Launch(name, (self.persistent_grid(tiles, params["blocks_per_sm"]), 1, 1), (256, 1, 1),
                       static_smem=self.static_smem, min_blocks=self.min_blocks)]

    def launch_args(self, launch, y, operands, shape, params):
        return packed_args(launch.kernel, y, *operands, shape.N)

    def prepare(self, params, problem):
        for name in self.kernel_names:  # one module holds all three
            self.kernel(name, params, problem)

    def kernels_for(self, params, problem):
        return None   # one module holds all three candidates: its compiler report shows them all


class RegisterTiled(DeclaredMlp):
    """Step 16: FP32 on CUDA cores, each thread a register tile of 32 units x 4 columns, weights
    broadcast from shared memory, x streamed through a per-warp cp.async ring of rows."""

    kernel_names = ("fp32RegisterTiledKernel",)
    defaults = {"warps": 4, "ring": 8, "blocks_per_sm": 2}
    packing = staticmethod(pack.register_tiled)
    tile_columns = 64
    weight_bytes = 4 * 9640

    def smem_bytes(self, params) -> int:
        """Dynamic shared memory: the packed weights, then per warp its h1 tile and its x ring."""
        return self.weight_bytes + (16384 + 256 * params["ring"]) * params["warps"]

    def defines(self, params, shape):
        return {"WARPS": params["warps"], "RING": params["ring"]}

    def check_params(self, params):
        super().check_params(params)
        _int_param(params, "warps", range(1, 9), "pass warps between 1 and 8 (each warp needs 18 KB of shared memory).")
        _int_param(params, "ring", (4, 8), "pass ring=4 or 8 (rows of x in flight per warp).")

    @per_shape
    def launches(self, shape, params):
        tiles = -(-shape.N // self.tile_columns)
        grid = self.persistent_grid(-(-tiles // params["warps"]), params["blocks_per_sm"])
        return [Launch(self.kernel_names[0], (grid, 1, 1), (32 * params["warps"], 1, 1),
                       dynamic_smem=self.smem_bytes(params))]

    def launch_args(self, launch, y, operands, shape, params):
        x, w = operands
        return (x, w.extra["packed"], y, np.int32(shape.N))

    def validate(self, shape, params):
        self.check_params(params)
        for launch in self.launches(shape, params):
            limits.check_launch(launch.grid, launch.block, launch.dynamic_smem, 0,
                                what=f"{self.slug}: {launch.kernel} with warps={params['warps']}, ring={params['ring']}")

    def kernel(self, name, params, problem):
        """The compiled kernel (the core's launch opts in to its shared memory: always past 48 KB)."""
        return kernels.get_kernel(self.module_source(params, problem), name, self.defines(params, problem))
