"""What a step's ``launch`` issues, recorded on the CPU: every kernel call's name, compile-time
defines, grid, block, shared memory, opt-in dynamic shared memory and arguments, with fake kernels
in place of the compiled ones (``impl.kernel`` is replaced) and named stand-ins for the device
arrays (operands, scratch matrices, workspaces). Used by ``test_declared_launches`` to prove that
a step's declared ``launches()`` issue exactly what its hand-written launch did.

``python tests/launch_recorder.py`` rewrites ``tests/data/launch_table.json`` from the code as it
is (run it only on the code the table must describe).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

TABLE = Path(__file__).parent / "data" / "launch_table.json"


class Named:
    """A stand-in device array: only its name matters (``size`` for the MLP's ReLU launch)."""

    def __init__(self, name, size=0):
        self.name, self.size = name, size

    def __repr__(self):
        return self.name

    def __getitem__(self, key):   # a chunk of the batch: y[start:stop]
        return Named(f"{self.name}[{key.start}:{key.stop}]")

    def reshape(self, *shape):   # a view of another shape: y.reshape(B, M, HW)
        return Named(f"{self.name}.reshape{tuple(int(n) for n in shape)}")


#: The streams made current by ``with stream:`` (CuPy launches on the current stream when a call
#: names none): the fakes record the stream a launch, copy or memset is really ordered on.
CURRENT: list = []


class Aligned(Named):
    """A stand-in device array with a 256-byte aligned address (``.data.ptr``), for a step that
    looks at its operands' alignment (MLP 18: the TMA needs 16 bytes)."""

    def __init__(self, name, size=0):
        super().__init__(name, size)
        self.data = self
        self.ptr = 256 * (1 + sum(map(ord, name)))


class FakeStream(Named):
    def __enter__(self):
        CURRENT.append(self)
        return self

    def __exit__(self, *exc):
        CURRENT.pop()


def _on(stream):
    """The stream an operation is ordered on, for the log (absent: the default stream)."""
    stream = stream if stream is not None else (CURRENT[-1] if CURRENT else None)
    return {"stream": encode(stream)} if stream is not None else {}


class FakeKernel:
    def __init__(self, log, name, defines, source=None):
        self.log, self.name, self.defines, self.source = log, name, defines, source
        self._max_dynamic = None   # logged as set by the step (None: never set)
        self.ptr = len(KERNELS) + 1
        KERNELS[self.ptr] = self

    @property
    def max_dynamic_shared_size_bytes(self):
        return 0 if self._max_dynamic is None else self._max_dynamic   # CuPy's answer when never set

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value):
        self._max_dynamic = value

    @property
    def num_regs(self):
        """A register count that depends on the build only (for the occupancy the Hopper steps ask)."""
        total = sum(v for v in self.defines.values() if isinstance(v, int) and not isinstance(v, bool))
        return 40 + (7 * total + 3 * len(self.name)) % 160

    def __call__(self, grid, block, args, shared_mem=0, stream=None, **kwargs):
        self.log.append({
            "kernel": self.name,
            **({"source": self.source} if self.source is not None else {}),
            "defines": {k: v if isinstance(v, (int, str)) else repr(v) for k, v in sorted(self.defines.items())},
            "grid": [int(g) for g in grid], "block": [int(b) for b in block],
            "shared_mem": int(shared_mem),
            "max_dynamic_smem": self._max_dynamic,
            "args": [encode(a) for a in args],
            "extra": sorted(kwargs),
            **({"carveout": self.preferred_shared_memory_carveout}
               if hasattr(self, "preferred_shared_memory_carveout") else {}),
            **_on(stream),
        })


#: Every fake kernel by its ``ptr``, for the fake occupancy answer.
KERNELS: dict = {}


def encode(arg):
    if isinstance(arg, Named):
        return arg.name
    if isinstance(arg, (np.integer, np.floating)):
        return f"{type(arg).__name__}:{arg.item()!r}"
    return f"?{type(arg).__name__}:{arg!r}"


#: Steps whose own ``kernel()`` runs in the recording (it opts in to shared memory itself): the
#: compiler (``kernels.get_kernel``) is replaced instead, so the table holds the ``.cu`` file, the
#: defines as compiled and whatever the step sets on the kernel before it launches.
OWN_KERNEL = {("mlp", "tensor-core-3xtf32"), ("mlp", "tensor-core-fp16"), ("mlp", "final"),
              ("mlp", "fp32-register-tiled"), ("mlp", "tensor-core-fp16-tma"), ("mlp", "wgmma-full-range"),
              ("lenet", "specialised"), ("lenet", "hopper-final"),
              ("lenet", "wgmma-final")}

#: The MLP steps fed by the TMA: they ask the current device's ordinal and look x's descriptor up.
TMA_FED = {("mlp", "tensor-core-fp16-tma"), ("mlp", "wgmma-full-range")}

#: Steps whose grid reads device facts (SM count, occupancy, compute capability): the recorder
#: fakes the device, deterministically per case (``fake_device``).
DEVICE_FACTS = {("lenet", "hopper-final"), ("lenet", "wgmma-final")}
_ORDINALS = iter(range(1000, 10 ** 9))


def fake_device(shape: dict, monkeypatch) -> dict:
    """A fresh fake device for one case (a new ordinal, so that no per-device cache answers from an
    earlier case): compute capability 9.0, an SM count that depends on the case's shape (132, 114
    or 78), and an occupancy answer from the fake kernel's registers and the shared memory asked."""
    import cupy as cp

    from kernelbook import gpu
    from kernelbook.lenet import hopper

    sms = (132, 114, 78)[sum(int(v) for v in shape.values()) % 3]
    ordinal = next(_ORDINALS)
    props = {"major": 9, "minor": 0, "multiProcessorCount": sms, "regsPerMultiprocessor": 65536,
             "sharedMemPerMultiprocessor": 233472}
    attributes = {"MultiProcessorCount": sms, "MaxRegistersPerMultiprocessor": 65536,
                  "MaxSharedMemoryPerMultiprocessor": 233472, "MaxThreadsPerMultiProcessor": 2048}

    class Device:
        def __init__(self, device=None):
            self.id = ordinal if device is None else device

        @property
        def attributes(self):
            return dict(attributes)

    def occupancy(ptr, threads, smem):
        regs = KERNELS[ptr].num_regs
        by_regs = (65536 // (-(-regs * 32 // 256) * 256)) // (threads // 32)
        return max(0, min(by_regs, 233472 // (smem + 1024), 2048 // threads))

    monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: ordinal)
    monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties", lambda device: dict(props))
    monkeypatch.setattr(cp.cuda, "Device", Device)
    monkeypatch.setattr(cp.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor", occupancy, raising=False)
    monkeypatch.setattr(gpu, "_SM_COUNTS", {})
    monkeypatch.setattr(hopper, "_ATTRIBUTES", {}, raising=False)
    return {"sms": sms}


class FakeGlobal:
    """A module's ``__constant__`` symbol (``get_global``): an offset into it and a logged memset."""

    def __init__(self, log, symbol, offset=0):
        self.log, self.symbol, self.offset = log, symbol, offset

    def __add__(self, nbytes):
        return FakeGlobal(self.log, self.symbol, self.offset + int(nbytes))

    def memset_async(self, value, nbytes, stream=None):
        self.log.append({"memset": f"{self.symbol}+{self.offset}", "value": int(value), "bytes": int(nbytes),
                         **_on(stream)})


class FakeModule:
    def __init__(self, log, compiled, source, defines):
        self.log, self.compiled, self.source, self.defines = log, compiled, source, defines

    def get_function(self, name):
        self.compiled.append(name)
        return FakeKernel(self.log, name, self.defines, self.source)

    def get_global(self, symbol):
        return FakeGlobal(self.log, symbol)


def _patch_compiler(log, monkeypatch, compiled):
    """The compiler and the constant bank: modules, kernels and uploads become logged fakes."""
    from kernelbook import kernels

    def get_module(source, defines=None, arch=None):
        return FakeModule(log, compiled, source if arch is None else f"{source}@{arch}", dict(defines or {}))

    def get_kernel(source, name, defines=None, arch=None):
        return get_module(source, defines, arch).get_function(name)

    def upload_constant(module, symbol, src, nbytes, stream=None):
        log.append({"upload": encode(src), "symbol": symbol, "bytes": int(nbytes), "module": module.source,
                    "defines": module.defines, **_on(stream)})

    monkeypatch.setattr(kernels, "get_module", get_module)
    monkeypatch.setattr(kernels, "get_kernel", get_kernel)
    monkeypatch.setattr(kernels, "upload_constant", upload_constant)


def _patch(impl, log, monkeypatch, compiled, own_kernel=False):
    """Replace every way ``impl`` reaches the GPU: its kernels (each one fetched is named in
    ``compiled``), scratch and workspaces."""
    if own_kernel:
        _patch_compiler(log, monkeypatch, compiled)
        return

    def kernel(name, params, problem, impl=impl):
        compiled.append(name)
        return FakeKernel(log, name, impl.defines(params, problem))

    def workspace(*args, impl=impl, **kwargs):
        try:
            n = len(impl.workspace_floats(*args))
        except TypeError:
            n = len(impl.workspace_floats(args[0]))
        return tuple(Named(f"ws{i}") for i in range(n))

    for target in (impl, getattr(impl, "_winograd", None)):
        if target is None:
            continue
        monkeypatch.setattr(target, "kernel", lambda name, params, problem, t=target: kernel(name, params, problem, t))
        if hasattr(target, "workspace_floats"):
            monkeypatch.setattr(target, "workspace", lambda *a, t=target, **k: workspace(*a, impl=t, **k))
        if hasattr(target, "scratch"):
            monkeypatch.setattr(target, "scratch", lambda n: (Named("h1", 64 * n), Named("h2", 64 * n)))
        if hasattr(target, "workspace_arrays"):   # LeNet's chunked steps allocate their workspace per call
            import cupy

            allocated = []

            def empty(*args, **kwargs):
                allocated.append(Named(f"alloc{len(allocated)}"))
                return allocated[-1]

            monkeypatch.setattr(cupy, "empty", empty)
            # cuBLAS through CuPy (step 08): each product is a logged event, on the current stream
            monkeypatch.setattr(cupy, "matmul", lambda a, b, out=None: log.append(
                {"library": "matmul", "args": [encode(a), encode(b)], "out": encode(out), **_on(None)}))
        if hasattr(target, "chunks"):   # LeNet's streams step: its pool of streams, by name
            from kernelbook.lenet import streams

            monkeypatch.setattr(streams, "stream_pool", lambda n: [Named(f"stream{i}") for i in range(n)])
        if hasattr(target, "upload_mask"):   # LeNet's constant-memory steps: the copy is a logged event
            monkeypatch.setattr(target, "upload", lambda upload, k, shape, params, stream=None, t=target: log.append(
                {"upload": encode(k), "defines": {a: b for a, b in sorted(t.defines(params, shape).items())}}))


# ----------------------------------------------------------------------------- the cases


def mlp_cases():
    from kernelbook.mlp import STEPS

    sizes = (1, 31, 33, 4096, 12799, 12800, 65536, 65537, 2_097_152)
    variations = {
        "baseline": [{}, {"tile": 8}, {"tile": 32}, {"tile": 4}, {"tile": 64}],
        "fused-global": [{}, {"columns": 1}, {"columns": 16}, {"columns": 17}],
        "fused-shared": [{}, {"columns": 1}, {"columns": 8}, {"columns": 16}],
        "whole-net-shared": [{}, {"columns": 2, "blocks_per_sm": 1}, {"columns": 16, "blocks_per_sm": 8}, {"blocks_per_sm": 0}],
        "shared-and-registers": [{}, {"columns": 1, "blocks_per_sm": 32}, {"columns": 5}],
        "last-layer-coop": [{}, {"columns": 3, "blocks_per_sm": 2}],
        "whole-net-registers": [{}, {"blocks_per_sm": 1}, {"blocks_per_sm": 32}],
        "half-precision": [{}, {"blocks_per_sm": 8}],
        "reduced-bank-conflicts": [{}, {"blocks_per_sm": 2}],
        "coalesced-weights": [{}, {"blocks_per_sm": 8}],
        "inputs-load-hiding": [{}, {"blocks_per_sm": 2}],
        "better-occupancy": [{}, {"blocks_per_sm": 8, "min_blocks": 2}, {"min_blocks": 8}, {"min_blocks": 9}],
        "best": [{}, {"small": "coalesced-weights", "large": "better-occupancy", "switch_columns": 4096},
                 {"small": "better-occupancy", "large": "coalesced-weights", "switch_columns": 33, "blocks_per_sm": 2},
                 {"small": "nope"}],
        "tensor-core-3xtf32": [{}, {"warps": 8, "m_tiles": 1, "blocks_per_sm": 1}, {"warps": 1, "blocks_per_sm": 32},
                               {"warps": 9}, {"m_tiles": 3}, {"blocks_per_sm": 0}],
        "tensor-core-fp16": [{}, {"warps": 1, "m_tiles": 1, "blocks_per_sm": 32}, {"warps": 0}],
        "final": [{}, {"small_kernel": "3xtf32", "switch_columns": 4096},
                  {"large_kernel": "3xtf32", "large_warps": 2, "large_m_tiles": 1, "large_blocks_per_sm": 3,
                   "small_warps": 8, "small_m_tiles": 1, "switch_columns": 33},
                  {"small_kernel": "nope"}, {"switch_columns": 0}, {"large_m_tiles": 3}],
        "fp32-register-tiled": [{}, {"warps": 8, "ring": 8}, {"warps": 1, "ring": 4, "blocks_per_sm": 32},
                                {"ring": 2}, {"ring": 3}, {"warps": 9}],
        "final-full-range": [{}, {"warps": 16, "m_tiles": 2, "blocks_per_sm": 1}, {"warps": 1, "blocks_per_sm": 4},
                             {"m_tiles": 3}, {"warps": 17}],
        "tensor-core-fp16-tma": [{}, {"switch_columns": 0},
                                 {"ring_warps": 8, "ring_slots": 3, "ring_blocks_per_sm": 1, "stage_warps": 4,
                                  "stages": 4, "stage_blocks_per_sm": 2, "l2_promotion": 128, "switch_columns": 4096},
                                 {"ring_warps": 16, "ring_slots": 2}, {"stage_warps": 16, "switch_columns": 0},
                                 {"stages": 9}],
        "wgmma-full-range": [{}, {"switch_columns": 0}, {"small_wgs": 1, "large_wgs": 4, "l2_promotion": 128,
                                                          "switch_columns": 4096},
                             {"large_wgs": 5}, {"small_wgs": 0}, {"l2_promotion": 32}],
    }
    for slug, overrides in variations.items():
        for over in overrides:
            for n in sizes:
                yield "mlp", STEPS.impl(slug), {"N": n}, over


def vgg_cases():
    from kernelbook.vgg import STEPS

    shapes = [(1, 256, 224, 224, 256, 5), (2, 3, 17, 9, 5, 3), (1, 1, 2, 2, 1, 1), (3, 7, 31, 33, 300, 7),
              (1, 64, 56, 56, 128, 3), (1, 16, 30, 30, 40, 9), (4, 2, 8, 8, 70000, 1)]
    variations = {
        "baseline": [{}, {"tile": 8}, {"tile": 32}, {"tile": 33}],
        "weights-shared": [{}, {"tile": 8}],
        "inputs-shared": [{}, {"tile": 4}],
        "weights-registers": [{}, {"tile": 32}],
        "weights-on-the-fly": [{}, {"tile": 8}],
        "two-phase-weights": [{}, {"phases": 4, "tile": 8}, {"phases": 1}],
        "register-tiled": [{}, {"bm": 32, "th": 4, "tw": 16, "stages": 2, "min_blocks": 1},
                           {"bm": 128, "th": 16, "tw": 32}, {"tw": 6}],
        "tf32": [{}, {"bm": 64, "th": 16, "tw": 16, "warps_m": 2, "warps_n": 4, "stages": 2},
                 {"bm": 64, "warps_m": 1, "warps_n": 2, "th": 4, "tw": 8}, {"warps_n": 3}],
        "3xtf32": [{}, {"bm": 128, "th": 8, "tw": 16, "stages": 2}],
        "winograd": [{}, {"threads": 128}, {"threads": 100}],
        "final": [{}, {"bm": 128, "th": 8, "tw": 16}],
    }
    for slug, overrides in variations.items():
        for over in overrides:
            for s in shapes:
                yield "vgg", STEPS.impl(slug), dict(zip("BCHWMK", s)), over
    # the Hopper steps 11-14: raw weights (packed and cached on the first call, compared on the
    # second) and prepared weights (vgg.prepare_weights), on a fake sm_90 device; K=17 is refused
    for slug, overrides in {"hopper-tf32": [{}], "hopper-fp16": [{}, {"operand": "bf16"}, {"operand": "fp32"}],
                            "hopper-3xtf32": [{}], "hopper-split": [{}]}.items():
        for over in overrides:
            for s in shapes + [(2, 3, 20, 20, 8, 17)]:
                yield "vgg", STEPS.impl(slug), dict(zip("BCHWMK", s)), over


def lenet_cases():
    from kernelbook.lenet import STEPS

    shapes = [(10000, 4, 1, 86, 86, 7), (10000, 16, 4, 40, 40, 7), (100, 4, 1, 86, 86, 7), (1, 16, 4, 40, 40, 7),
              (3, 5, 2, 20, 17, 3), (2, 1, 1, 9, 9, 1), (7, 33, 3, 12, 30, 5), (70000, 4, 1, 10, 10, 3),
              (2, 70000, 1, 5, 5, 1), (1, 300, 20, 30, 30, 3)]
    variations = {
        "baseline": [{}, {"tile_width": 8}, {"tile_width": 32}, {"tile_width": 33}, {"tile_width": "16"}],
        "constant-memory": [{}, {"tile_width": 4}, {"tile_width": 40}],
        "sweep": [{}, {"tile_w": 32, "tile_h": 4, "out_per_thread": 2, "imgs_per_block": 2},
                  {"tile_w": 17, "tile_h": 17, "out_per_thread": 4, "imgs_per_block": 1},
                  {"tile_w": 32, "tile_h": 32, "imgs_per_block": 2}, {"out_per_thread": 17}],
        "tiled": [{}, {"tile_width": 8, "imgs_per_block": 1}, {"tile_width": 32, "imgs_per_block": 1},
                  {"tile_width": 16, "imgs_per_block": 16}],
        "restrict-unroll": [{}, {"tile_width": 8, "imgs_per_block": 2}],
        "streams": [{}, {"n_streams": 2, "chunks_per_stream": 3}, {"n_streams": 1, "chunks_per_stream": 1},
                    {"n_streams": 65}],
        "fused-unroll-matmul": [{}, {"tile": 8}, {"tile": 32}, {"tile": 0}],
        "fp16": [{}, {"tile": 8, "half_tiles": 0}, {"tile": 7}],
        "tensor-cores": [{}, {"precision": "fp16", "shape": "8x32", "warps": 2, "frags_n": 1, "bk": 32},
                         {"precision": "fp16", "warps": 8, "frags_n": 4}, {"precision": "tf32", "shape": "8x32"}],
        "index-reuse": [{}, {"shape": "8x32", "warps": 2, "frags_n": 4, "bk": 32}, {"frags_n": 3}],
        "per-layer-kernels": [{}, {"warps": 2, "frags_n": 1, "bk": 32}],
        "register-tiling": [{}, {"bm": 4, "tm": 2, "bn": 256, "tn": 4}, {"bm": 32, "tm": 4, "bn": 64, "tn": 8, "bk": 16},
                            {"tm": 3}],
    }
    for slug, overrides in variations.items():
        for over in overrides:
            for s in shapes:
                yield "lenet", STEPS.impl(slug), dict(zip("BMCHWK", s)), over
    # step 14: its plan picks constant-memory weights, shared-memory weights, 3xTF32 or the fallback
    for over in ({}, {"math": "fp32"}, {"math": "3xtf32"}, {"math": "fp32", "weights": "shared"},
                 {"math": "fp32", "weights": "constant", "maps_per_thread": 4, "outputs_per_thread": 2, "threads": 64,
                  "min_blocks": 2, "unroll_p": True},
                 {"math": "3xtf32", "tiles_per_warp": 1, "threads": 96, "min_blocks": 8},
                 {"math": "fp32", "weights": "constant"}, {"threads": 512, "min_blocks": 8}, {"math": "fp32", "maps_per_thread": 1},
                 {"threads": 100}, {"maps_per_thread": 16, "outputs_per_thread": 8}, {"math": "fp64"}):
        for s in shapes:
            yield "lenet", STEPS.impl("specialised"), dict(zip("BMCHWK", s)), over
    # the chunked step: batches of a few chunks, so that the table stays small
    chunked = [(100, 4, 1, 86, 86, 7), (37, 16, 4, 40, 40, 7), (3, 5, 2, 20, 17, 3), (2, 1, 1, 9, 9, 1),
               (7, 33, 3, 12, 30, 5), (70000, 4, 1, 10, 10, 3)]
    for over in ({}, {"tile": 8, "workspace_mib": 4}, {"workspace_mib": None}, {"workspace_mib": 1},
                 {"tile": 32, "workspace_mib": 2048}, {"tile": 0}, {"workspace_mib": -1}):
        for s in chunked:
            yield "lenet", STEPS.impl("unroll-matmul"), dict(zip("BMCHWK", s)), over
    for over in ({}, {"workspace_mib": 4}, {"workspace_mib": None}, {"workspace_mib": 1}, {"workspace_mib": -1}):
        for s in chunked:
            yield "lenet", STEPS.impl("cublas"), dict(zip("BMCHWK", s)), over
    # the Hopper steps: persistent grids from the (fake) device's SM count and occupancy, C1 on
    # step 14's kernel (hopper-final), the generic fallback, and their refusals
    for over in ({}, {"c1_path": "tensor"}, {"c1_path": "direct"}, {"blocks_per_sm": 1},
                 {"c1_path": "tensor", "threads": 128, "tiles_per_warp": 2, "groups_per_warp": 1, "prefetch": False,
                  "streaming_stores": True, "min_blocks": 2, "blocks_per_sm": 4},
                 {"threads": 512, "tiles_per_warp": 8, "groups_per_warp": 4, "min_blocks": 1},
                 {"c1_path": "nope"}, {"threads": 100}, {"c1_path": "tensor", "threads": 1024, "min_blocks": 4}):
        for s in shapes:
            yield "lenet", STEPS.impl("hopper-final"), dict(zip("BMCHWK", s)), over
    for over in ({}, {"blocks_per_sm": 1}, {"blocks_per_sm": 3, "threads": 128, "min_blocks": 1},
                 {"threads": 384, "group": 1, "stages": 1, "rows_per_position": 1, "streaming_stores": False},
                 {"rows_per_position": 4}, {"stages": 4, "min_blocks": 4}, {"threads": 200},
                 {"threads": 1024, "min_blocks": 4}, {"blocks_per_sm": 33}):
        for s in shapes:
            yield "lenet", STEPS.impl("wgmma-final"), dict(zip("BMCHWK", s)), over


def _problem(study, shape):
    if study == "lenet":
        from kernelbook.lenet.problem import ConvShape
        return ConvShape(**shape)
    if study == "mlp":
        from kernelbook.mlp.problem import MlpShape
        return MlpShape(shape["N"])
    from kernelbook.vgg.problem import ConvPoolShape
    return ConvPoolShape(**shape)


def _operands(study, problem=None):
    if study == "mlp":
        from kernelbook.mlp.impls import PreparedWeights

        raw = tuple(Named(n) for n in ("W1", "b1", "W2", "b2", "W3", "b3"))
        extra = {n: Named(n) for n in ("w1p", "w2p", "w3p", "w1q", "w2q", "w3q", "packed", "split", "wgmma", "raw")}
        extra["exact_only"] = 0
        return Named("y"), (Named("x"), PreparedWeights(raw, extra))
    if study == "lenet":   # k's size: the bytes a constant-memory upload copies
        return Named("y"), (Named("x"), Named("k", problem.M * problem.C * problem.K ** 2 if problem else 0))
    return Named("y"), (Named("x"), Named("w"), Named("b"))


class FakeArray(Named):
    """A device array of the VGG Hopper steps (allocated, copied, given as weights): its address
    (``.data.ptr``) is its name; a device-to-device copy into it is logged."""

    def __init__(self, name, log=None, shape=(), nbytes=0):
        super().__init__(name)
        self.log, self.shape, self.nbytes, self.data = log, tuple(shape), nbytes, self

    @property
    def ptr(self):
        return self.name

    def copy(self):
        return FakeArray(f"copy({self.name})", self.log, self.shape, self.nbytes)

    def copy_from_device_async(self, src, nbytes, stream=None):
        self.log.append({"copy": f"{src.name}->{self.name}", "bytes": int(nbytes), **_on(stream)})


#: The VGG Hopper steps: their sm_90a build, workspaces, TMA descriptors and weight packs.
VGG_HOPPER = {("vgg", s) for s in ("hopper-tf32", "hopper-fp16", "hopper-3xtf32", "hopper-split")}


def _patch_vgg_hopper(log, monkeypatch, compiled, shape):
    """Their kernels (the core's nvcc build for sm_90a), CuPy's allocations and the driver's TMA descriptors become
    named fakes; the device is a fresh fake sm_90 one (``fake_device``)."""
    import cupy as cp

    from kernelbook import gpu
    from kernelbook.vgg import hopper

    fake_device(shape, monkeypatch)
    ordinal = cp.cuda.runtime.getDevice()

    class Device:
        id, compute_capability = ordinal, "90"

        def __init__(self, device=None):
            pass

    count = iter(range(10 ** 6))
    monkeypatch.setattr(cp.cuda, "Device", Device)
    monkeypatch.setattr(gpu, "available", lambda: True)
    _patch_compiler(log, monkeypatch, compiled)   # the core's sm_90a build, as a logged fake
    monkeypatch.setattr(hopper, "tensor_map", lambda address, dtype, dims, strides, box:
                        f"tmap({address},{dtype},{dims},{strides},{box})".encode())
    monkeypatch.setattr(cp, "empty", lambda n, dtype=None: FakeArray(f"alloc{next(count)}:{n}:{cp.dtype(dtype).name}", log))
    monkeypatch.setattr(cp, "empty_like", lambda a: FakeArray(f"alloc{next(count)}:like({a.name})", log))
    monkeypatch.setattr(cp, "asarray", lambda a: FakeArray(f"desc{next(count)}[{bytes(a).decode()}]", log))


def _record_vgg_hopper(impl, problem, params, log):
    """Raw weights: a first call (pack and cache them) and a second on a caller's stream (the cache
    compares them); then prepared weights (packed when made) for two calls likewise."""
    from kernelbook.vgg.hopper import PreparedWeights

    s = problem
    y, x, b = Named("y"), Named("x"), Named("b")
    w = FakeArray("w", log, (s.M, s.C, s.K, s.K), 4 * s.M * s.C * s.K * s.K)
    log.append({"call": "raw weights"})
    impl.launch(y, x, w, b, problem, params)
    log.append({"call": 2, "stream": "caller_stream"})
    impl.launch(y, x, w, b, problem, params, stream=FakeStream("caller_stream"))
    log.append({"call": "prepare_weights"})
    prepared = object.__new__(PreparedWeights)   # PreparedWeights.__init__ without check_weights (a CuPy check)
    prepared.slug, prepared.w_shape, prepared.source, prepared._packed = impl.slug, w.shape, w.copy(), {}
    prepared.packed(impl, prepared.shape(1, 2, 2), params)
    log.append({"call": "prepared weights"})
    impl.launch(y, x, prepared, b, problem, params)
    log.append({"call": 2, "stream": "caller_stream"})
    impl.launch(y, x, prepared, b, problem, params, stream=FakeStream("caller_stream"))


def record_case(study, impl, shape, overrides, monkeypatch) -> dict:
    """What ``validate``, ``prepare`` and ``launch`` do for one case."""
    entry = {"study": study, "step": impl.slug, "shape": shape, "params": overrides}
    try:
        params = impl.params(**overrides)
        problem = _problem(study, shape)
        impl.validate(problem, params)
    except Exception as exc:  # noqa: BLE001 - the refusal is part of what is compared
        entry["refused"] = type(exc).__name__
        return entry
    log: list = []
    compiled: list = []
    with monkeypatch.context() as m:
        if (study, impl.slug) in VGG_HOPPER:
            _patch_vgg_hopper(log, m, compiled, shape)
            impl.prepare(params, problem)
            entry["prepared"] = sorted(set(compiled))
            _record_vgg_hopper(impl, problem, params, log)
            entry["launches"] = log
            return entry
        _patch(impl, log, m, compiled, own_kernel=(study, impl.slug) in OWN_KERNEL)
        if (study, impl.slug) in DEVICE_FACTS:
            entry["device"] = fake_device(shape, m)
        if (study, impl.slug) in TMA_FED:
            import cupy as cp

            m.setattr(cp.cuda.runtime, "getDevice", lambda: 0)   # the TMA steps ask the current device's ordinal
        if (study, impl.slug) == ("mlp", "wgmma-full-range"):   # no device to ask for sm_90a; step 17's
            m.setattr(impl, "check_device", lambda device: log.append({"check_device": "sm_90a"}))   # plans afresh
            m.setattr(impl.fallback(), "_plans", {}, raising=False)
        impl.prepare(params, problem)
        entry["prepared"] = sorted(set(compiled))
        y, operands = _operands(study, problem)
        if (study, impl.slug) in TMA_FED:   # x's TMA descriptor: a named stand-in
            y, operands = Aligned("y"), (Aligned("x"),) + operands[1:]
            # each look-up is logged: one per launch (a second one per call is host cost for nothing)
            m.setattr(impl, "x_map", lambda x, n, promotion, stream=None, device=None: log.append({"x_map": f"{x},{n},{promotion}"})
                      or Named(f"xmap({x},{n},{promotion})"))
            m.setattr(impl, "_plans", {})
        impl.launch(y, *operands, problem, params)
        if (study, impl.slug) in OWN_KERNEL:   # and a second call, on the caller's stream
            log.append({"call": 2, "stream": "caller_stream"})
            impl.launch(y, *operands, problem, params, stream=FakeStream("caller_stream"))
        entry["launches"] = log
    return entry


def all_cases():
    yield from mlp_cases()
    yield from vgg_cases()
    yield from lenet_cases()


def build_table() -> list[dict]:
    from _pytest.monkeypatch import MonkeyPatch

    mp = MonkeyPatch()
    try:
        return [record_case(*case, mp) for case in all_cases()]
    finally:
        mp.undo()


def add_rows(steps: set[tuple[str, str]]) -> list[dict]:
    """The table with the rows of ``steps`` (``(study, slug)``) recorded afresh from the code as
    it is; every other row kept as recorded before."""
    from _pytest.monkeypatch import MonkeyPatch

    kept = [e for e in json.loads(TABLE.read_text()) if (e["study"], e["step"]) not in steps]
    mp = MonkeyPatch()
    try:
        fresh = [record_case(*case, mp) for case in all_cases() if (case[0], case[1].slug) in steps]
    finally:
        mp.undo()
    return kept + fresh


if __name__ == "__main__":
    # python tests/launch_recorder.py                  -> every row, from the code as it is
    # python tests/launch_recorder.py mlp:final ...    -> only these steps' rows (before porting them)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    only = {tuple(a.split(":", 1)) for a in sys.argv[1:]}
    table = add_rows(only) if only else build_table()
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(json.dumps(table, indent=None, separators=(",", ":")) + "\n")
    launched = sum(1 for e in table if "launches" in e)
    print(f"{len(table)} cases ({launched} launched, {len(table) - launched} refused) -> {TABLE}")
