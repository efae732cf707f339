#!/usr/bin/env python3
"""VGG layer on Hopper's own tensor-core path (steps 11-14): build, check, time — self-contained.

Builds kernels/vgg/11_hopper_tf32.cu, 12_hopper_fp16.cu (FP16, and BF16 with -DHOPPER_BF16=1) and
13_hopper_3xtf32.cu (all include hopper_igemm.cuh) with nvcc for sm_90a, plus steps 07 (TF32
mma.sync), 08 (3xTF32 mma.sync) and 09 (Winograd FP32) as kernelbook/vgg launches them; checks every
kernel against a float64 reference (PyTorch, float64, on the GPU) on fresh random inputs with the
output poisoned (NaN) before the launch — the studied layer, odd shapes (K = 1, 3, 5, 7) and the
range test (inputs and weights scaled 1e-6 ... 1e6 independently, plus tensors mixing magnitudes);
then times everything at B = 1 with CUDA-graph replays (3 rotating input sets, warm-up, repeats,
median/min/max) beside cuDNN (PyTorch conv2d + bias, ReLU, max_pool2d; and the convolution alone)
in NCHW and channels_last for FP32, TF32 and FP16, and sweeps B = 1, 2, 4, 8, 16.

A call of a step-11..14 kernel = the pack launch + the persistent wgmma kernel, both inside the
timed graph. The pack launch packs the input (NCHW fp32 -> NHWC operand type) and, by weight mode:
'percall' also packs the weights (-> [m][kh][kw][c]) on every call (how steps 11-14 were first
recorded); 'verify' compares the weights with the snapshot they were packed from and repacks only
slices that changed (raw weights cached by address); 'prepared' packs nothing else (weights packed
once per weight set, outside the timed call). Each mode is timed, and its pack launch alone.

    PYTHONUNBUFFERED=1 python3 scripts/bench_vgg_hopper.py --out $OUT [--quick] [--ncu]
Imports only numpy, cupy, torch (no kernelbook).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cupy as cp
import numpy as np
import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore", category=DeprecationWarning)
ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "kernels" / "vgg"
BUILD = Path(os.environ.get("VGG_HOPPER_BUILD", "/tmp/vgg_hopper_build"))
NVCC = os.environ.get("NVCC", "nvcc")
SM90A = ["-gencode=arch=compute_90a,code=sm_90a"]
SM90 = ["-arch=sm_90"]
LOG: dict = {"builds": {}, "checks": [], "range": [], "times": [], "sweep": [], "errors": []}


def ceil_div(a, b):
    return -(-a // b)


# ----------------------------------------------------------------------------- building
def build(src: str, defines: dict, arch: list[str]) -> Path:
    """nvcc -cubin, cached by (file, defines); ptxas -v output kept in LOG."""
    tag = src.replace(".cu", "") + "".join(f"_{k}{v}" for k, v in sorted(defines.items()))
    out = BUILD / f"{tag}.cubin"
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    cmd = [NVCC, *arch, "-cubin", "-O3", "-std=c++17", "-Xptxas", "-v", f"-I{KDIR}",
           *[f"-D{k}={v}" for k, v in defines.items()], "-o", str(out), str(KDIR / src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    LOG["builds"][tag] = {"cmd": " ".join(cmd), "rc": r.returncode,
                          "ptxas": [ln for ln in r.stderr.splitlines() if "ptxas" in ln or "spill" in ln or "arning" in ln]}
    if r.returncode:
        raise RuntimeError(f"nvcc failed for {tag}:\n{r.stderr[-3000:]}")
    return out


def sass_summary(cubin: Path) -> dict:
    try:
        s = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return {"error": "no cuobjdump"}
    funcs, cur = {}, None
    for ln in s.splitlines():
        if "Function :" in ln:
            cur = ln.split("Function :")[1].strip()
            funcs[cur] = {"HGMMA": 0, "LDL": 0, "STL": 0, "UTMALDG": 0, "SYNCS": 0, "instructions": 0}
        elif cur and "/*" in ln and ";" in ln:
            f = funcs[cur]
            f["instructions"] += 1
            for key in ("HGMMA", "LDL", "STL", "UTMALDG", "SYNCS"):
                if key in ln:
                    f[key] += 1
    return funcs


# ----------------------------------------------------------------------------- TMA descriptors
_libcuda = ctypes.CDLL("libcuda.so.1")
_encode = _libcuda.cuTensorMapEncodeTiled
_encode.restype = ctypes.c_int
_encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                    ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                    ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
DT_FLOAT16, DT_FLOAT32, DT_BFLOAT16 = 6, 7, 9
SWIZZLE_128B, L2_PROMO_256B = 3, 3
NULL = np.uint64(0)


def tensor_map(ptr: int, dtype: int, dims: list[int], strides: list[int], box: list[int]) -> bytes:
    """cuTensorMapEncodeTiled: dims fastest first, strides (bytes) of dims 1.., zero OOB fill."""
    raw = ctypes.create_string_buffer(256)
    addr = (ctypes.addressof(raw) + 63) & ~63
    r = len(dims)
    res = _encode(ctypes.c_void_p(addr), dtype, r, ctypes.c_void_p(ptr),
                  (ctypes.c_uint64 * r)(*dims), (ctypes.c_uint64 * max(r - 1, 1))(*strides),
                  (ctypes.c_uint32 * r)(*box), (ctypes.c_uint32 * r)(*([1] * r)),
                  0, SWIZZLE_128B, L2_PROMO_256B, 0)
    if res != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({res}) for dims {dims} strides {strides} box {box}")
    return ctypes.string_at(addr, 128)


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


def max_active_clusters(func, grid: int, block: int, smem: int) -> int:
    """cuOccupancyMaxActiveClusters for a kernel with compile-time cluster dimensions: how many
    clusters can be resident at once (a persistent grid larger than that runs in two waves)."""
    n = ctypes.c_int(0)
    cfg = _LaunchConfig(grid, 1, 1, block, 1, 1, smem, None, None, 0)
    res = _libcuda.cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(func.kernel.ptr), ctypes.byref(cfg))
    if res != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed ({res})")
    return n.value


# ----------------------------------------------------------------------------- steps 11-13
class HopperStep:
    """Steps 11-13: pack kernels + persistent TMA/wgmma kernel, one launcher per precision."""

    SPEC = {"fp16": ("12_hopper_fp16.cu", 0, 0, 1), "bf16": ("12_hopper_fp16.cu", 0, 1, 1),
            "tf32": ("11_hopper_tf32.cu", 1, 0, 1), "3xtf32": ("13_hopper_3xtf32.cu", 2, 0, 1),
            "split": ("14_hopper_split.cu", 3, 0, 1),
            # the same kernels in 2-block clusters (weight tile multicast by the TMA unit)
            "fp16-cl2": ("12_hopper_fp16.cu", 0, 0, 2), "tf32-cl2": ("11_hopper_tf32.cu", 1, 0, 2),
            "split-cl2": ("14_hopper_split.cu", 3, 0, 2), "3xtf32-cl2": ("13_hopper_3xtf32.cu", 2, 0, 2)}
    FP32_ACCURATE = ("3xtf32", "split", "split-cl2", "3xtf32-cl2")
    K_MAX = 15

    def __init__(self, name: str):
        self.name = name
        self.src, self.mode, self.bf16, self.cluster = self.SPEC[name]
        self.esize = 2 if self.mode == 0 else 4
        self.ck = 128 // self.esize
        self.bn = 128 if self.mode >= 2 else 256
        self.planes = 2 if self.mode >= 2 else 1
        stages = 3 if self.mode >= 2 else 4
        self.smem = stages * self.planes * (2 * 64 * 128 + self.bn * 128) + 1024 + 16 * stages
        self.dtype = {0: DT_BFLOAT16 if self.bf16 else DT_FLOAT16}.get(self.mode, DT_FLOAT32)
        self.np_dtype = cp.float16 if self.mode == 0 else cp.float32   # storage (bf16 as 16-bit words)
        self.mods: dict = {}
        self.ws: dict = {}
        self.sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.pack_only = False   # True: launch the pack kernel alone (to time it)
        self.wmode = "verify"     # percall | verify | prepared (see __call__)
        self.wcache: dict = {}

    def cubin(self, K: int) -> Path:
        d = {"KSIZE": K, "HOPPER_CLUSTER": self.cluster}
        if self.bf16:
            d["HOPPER_BF16"] = 1
        return build(self.src, d, SM90A)

    def module(self, K: int):
        if K not in self.mods:
            m = cp.RawModule(path=str(self.cubin(K)))
            main = m.get_function("hopper_conv_pool")
            main.max_dynamic_shared_size_bytes = self.smem
            self.mods[K] = (m.get_function("hopper_pack"), main)
        return self.mods[K]

    def validate(self, B, C, H, W, M, K):
        if K % 2 == 0 or not 1 <= K <= self.K_MAX:
            raise ValueError(f"{self.name}: K={K} unsupported; the Hopper kernels take odd K from 1 to {self.K_MAX}. "
                             "Use an odd kernel size, or another step.")
        if H < 2 or W < 2:
            raise ValueError(f"{self.name}: input {H}x{W} is smaller than one 2x2 pooling window; pass H, W >= 2.")
        Cp = ceil_div(C, 64) * 64
        if B * H * W * Cp * self.esize * self.planes > 8 * 2 ** 30:
            raise ValueError(f"{self.name}: the packed input would exceed 8 GiB; split the batch.")
        if B * M * (H // 2) * (W // 2) >= 2 ** 31:
            raise ValueError(f"{self.name}: y has 2^31 elements or more; split the batch.")

    def workspace(self, B, C, H, W, M, K):
        key = (B, C, H, W, M, K)
        if key not in self.ws:
            self.validate(*key)
            Cp = ceil_div(C, 64) * 64     # the pack kernel moves 64-channel groups
            e = self.esize
            xs = [cp.empty(B * H * W * Cp, dtype=self.np_dtype) for _ in range(self.planes)]
            maps = b"".join(tensor_map(a.data.ptr, dt, [Cp * k, W, H, B], [Cp * e, W * Cp * e, H * W * Cp * e],
                                       [self.ck * k, 8, 8, 1]) for a, (dt, k) in zip(xs, self.fmt()))
            dmaps = cp.asarray(np.frombuffer(maps, dtype=np.uint8))
            assert dmaps.data.ptr % 64 == 0
            cl = self.cluster
            units = ceil_div(M, self.bn) * ceil_div(B * ceil_div(H, 8) * ceil_div(W, 16), cl)
            resident = self.sms // cl
            if cl > 1:
                # not every SM can join a cluster (GPCs with an odd number of free SMs): a grid of
                # sms/cl clusters could leave a few to run after the rest, doubling the time
                resident = max_active_clusters(self.module(K)[1], (self.sms // cl) * cl, 384, self.smem)
                LOG.setdefault("max_active_clusters", {})[self.name] = resident
            grid = min(resident, units) * cl
            n_in = ceil_div(W, 32) * (Cp // 64) * B * H
            n_w = (Cp // 32) * M
            self.ws[key] = (Cp, xs, dmaps, grid, n_in, n_w)
        return self.ws[key]

    def fmt(self):
        """(CUtensorMapDataType, elements per channel) per plane; mode 3's second plane holds BF16 pairs."""
        return [(self.dtype, 1)] + ([(DT_BFLOAT16, 2)] if self.mode == 3 else [(self.dtype, 1)]) * (self.planes - 1)

    def weights(self, w, C, M, K):
        """The packed weights of w (keyed by its address): planes, TMA maps, the snapshot they were
        packed from. Made on first use by a weights-only pack launch (B = 0)."""
        key = (w.data.ptr, tuple(w.shape))
        if key not in self.wcache:
            Cp, e = ceil_div(C, 64) * 64, self.esize
            wsp = [cp.empty(M * K * K * Cp, dtype=self.np_dtype) for _ in range(self.planes)]
            maps = b"".join(tensor_map(a.data.ptr, dt, [K * K * Cp * k, M], [K * K * Cp * e],
                                       [self.ck * k, self.bn // self.cluster]) for a, (dt, k) in zip(wsp, self.fmt()))
            snap = cp.empty_like(w)
            snap.data.copy_from_device_async(w.data, w.nbytes)
            i32 = np.int32
            self.module(K)[0](((Cp // 32) * M,), (256,), (NULL, NULL, wsp[0], wsp[-1], NULL, w, NULL, i32(0), i32(C),
                                                                   i32(2), i32(2), i32(M), i32(Cp), i32(0)))
            self.wcache[key] = (wsp, cp.asarray(np.frombuffer(maps, dtype=np.uint8)), snap)
        return self.wcache[key]

    def __call__(self, y, x, w, b):
        """One call. wmode: 'percall' packs input and weights on every call (the recorded steps
        before weight caching); 'verify' packs the input and checks the weights against the
        snapshot, repacking slices that changed (raw weights cached by address); 'prepared'
        packs the input only (weights packed once per weight set)."""
        B, C, H, W = x.shape
        M, K = w.shape[0], w.shape[2]
        Cp, xs, xmaps, grid, n_in, n_w = self.workspace(B, C, H, W, M, K)
        wsp, wmaps, snap = self.weights(w, C, M, K)
        pack, main = self.module(K)
        i32 = np.int32
        blocks = n_in if self.wmode == "prepared" else n_in + n_w
        pack((blocks,), (256,), (xs[0], xs[-1], wsp[0], wsp[-1], x, w, snap if self.wmode == "verify" else NULL,
                                 i32(B), i32(C), i32(H), i32(W), i32(M), i32(Cp), i32(0)))
        if not self.pack_only:
            main((grid,), (384,), (y, b, xmaps, wmaps, i32(B), i32(H), i32(W), i32(M), i32(Cp)), shared_mem=self.smem)


# ----------------------------------------------------------------------------- steps 07, 08, 09
class MmaSyncStep:
    """Steps 07 (TF32) and 08 (3xTF32): kernels/vgg/07_tf32_implicit_gemm.cu as kernelbook/vgg/impls.py launches it."""

    def __init__(self, name):
        self.name = name
        self.src, self.kname, self.planes, self.bm = {"07_tf32": ("07_tf32_implicit_gemm.cu", "conv_pool_tf32", 1, 128),
                                                      "08_3xtf32": ("08_3xtf32.cu", "conv_pool_3xtf32", 2, 64)}[name]
        self.th, self.tw, self.wm, self.wn, self.stages = 8, 32, 2, 4, 3
        self.mods, self.ws = {}, {}

    def module(self, K):
        if K not in self.mods:
            d = {"BM": self.bm, "TH": self.th, "TW": self.tw, "WARPS_M": self.wm, "WARPS_N": self.wn,
                 "STAGES": self.stages, "MIN_BLOCKS": 1, "KSIZE": K}
            m = cp.RawModule(path=str(build(self.src, d, SM90)))
            main = m.get_function(self.kname)
            pwp = 4 * ceil_div(self.tw + K - 1, 4)
            cs = ceil_div(self.th * pwp, 32) * 32 + 8
            smem = 4 * self.stages * self.planes * (K * self.bm * 8 + 8 * cs)
            main.max_dynamic_shared_size_bytes = smem
            self.mods[K] = (m.get_function("tc_pack_weights"), m.get_function("tc_pack_input"), main, smem)
        return self.mods[K]

    def __call__(self, y, x, w, b):
        B, C, H, W = x.shape
        M, K = w.shape[0], w.shape[2]
        th, tw, bm = self.th, self.tw, self.bm
        Cp, Mp = ceil_div(C, 8) * 8, ceil_div(M, bm) * bm
        Hpd, Wpd = ceil_div(H, th) * th + K - 1, 4 * ceil_div(ceil_div(W, tw) * tw + K - 1, 4)
        nw, nx = Cp * K * K * Mp, B * Cp * Hpd * Wpd
        key = (B, C, H, W, M, K)
        if key not in self.ws:
            self.ws[key] = (cp.empty(self.planes * nw, cp.float32), cp.empty(self.planes * nx, cp.float32))
        wp, xp = self.ws[key]
        pwk, pin, main, smem = self.module(K)
        i = np.int32
        pwk((ceil_div(nw, 256),), (256,), (wp, w, i(C), i(M), i(Cp), i(Mp)))
        pin((ceil_div(nx, 256),), (256,), (xp, x, i(B), i(C), i(H), i(W), i(Cp), i(Hpd), i(Wpd)))
        grid = (ceil_div(H, th) * ceil_div(W, tw) * B, ceil_div(M, bm), 1)
        main(grid, (32 * self.wm * self.wn,), (y, xp, wp, b, i(B), i(Cp), i(H), i(W), i(M), i(Mp), i(Hpd), i(Wpd)),
             shared_mem=smem)


class WinogradStep:
    """Step 09: kernels/vgg/09_winograd.cu as kernelbook/vgg/final.py launches it (K in 1, 3, 5, 7)."""

    name = "09_winograd"

    def __init__(self):
        self.mods, self.ws = {}, {}

    def __call__(self, y, x, w, b):
        B, C, H, W = x.shape
        M, K = w.shape[0], w.shape[2]
        if K not in self.mods:
            m = cp.RawModule(path=str(build("09_winograd.cu", {"KSIZE": K}, SM90)))
            self.mods[K] = {n: m.get_function(n) for n in ("winograd_weights", "winograd_input", "winograd_gemm", "winograd_output")}
        f = self.mods[K]
        a2, Cp, Mp = (K + 1) ** 2, ceil_div(C, 8) * 8, ceil_div(M, 128) * 128
        Pp = ceil_div(B * (H // 2) * (W // 2), 128) * 128
        key = (B, C, H, W, M, K)
        if key not in self.ws:
            self.ws[key] = tuple(cp.empty(n, cp.float32) for n in (a2 * Cp * Mp, a2 * Cp * Pp, a2 * Mp * Pp))
        u, v, mx = self.ws[key]
        i = np.int32
        t = 256
        f["winograd_weights"]((ceil_div(Cp * Mp, t),), (t,), (u, w, i(C), i(M), i(Cp), i(Mp)))
        f["winograd_input"]((ceil_div(Cp * Pp, t),), (t,), (v, x, i(B), i(C), i(H), i(W), i(Cp), i(Pp)))
        f["winograd_gemm"]((Pp // 128, Mp // 128, a2), (256,), (mx, u, v, i(Cp), i(Mp), i(Pp)))
        f["winograd_output"]((ceil_div(M * B * (H // 2) * (W // 2), t),), (t,), (y, mx, b, i(B), i(H), i(W), i(M), i(Mp), i(Pp)))


# ----------------------------------------------------------------------------- reference and checks
def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    K = w.shape[2]
    z = F.conv2d(x.double(), w.double(), b.double(), padding=K // 2)
    return F.max_pool2d(F.relu(z), 2)


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(got.double() - ref) / torch.linalg.vector_norm(ref))


def launcher(step, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor):
    """A callable that enqueues one call of a CuPy-launched step on PyTorch's current stream
    (the capture stream inside torch.cuda.graph); the CuPy views are made once, outside."""
    cx, cw, cb, cy = (cp.from_dlpack(t) for t in (x, w, b, y))

    def f():
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            step(cy, cx, cw, cb)
    return f


def check(step, x, w, b, ref, label, tol):
    B, M, H, W = x.shape[0], w.shape[0], x.shape[2], x.shape[3]
    y = torch.full((B, M, H // 2, W // 2), float("nan"), device="cuda", dtype=torch.float32)
    try:
        launcher(step, x, w, b, y)()
        torch.cuda.synchronize()
        nan = int(torch.isnan(y).sum())
        err = rel_l2(torch.nan_to_num(y, nan=0.0), ref)
        ok = nan == 0 and err <= tol
        rec = {"step": step.name, "label": label, "shape": [B, x.shape[1], H, W, M, w.shape[2]],
               "rel_l2": err, "nan": nan, "tol": tol, "passed": ok}
    except Exception as exc:
        rec = {"step": step.name, "label": label, "error": f"{type(exc).__name__}: {exc}", "passed": False}
    return rec


def rand_inputs(B, C, H, W, M, K, gen, sx=1.0, sw=1.0, mixed=False):
    x = torch.randn(B, C, H, W, device="cuda", generator=gen)
    w = torch.randn(M, C, K, K, device="cuda", generator=gen) / math.sqrt(C * K * K)
    if mixed:
        x = x * 10 ** (torch.rand(x.shape, device="cuda", generator=gen) * 12 - 6)
        w = w * 10 ** (torch.rand(w.shape, device="cuda", generator=gen) * 12 - 6)
    x, w = (x * sx).float().contiguous(), (w * sw).float().contiguous()
    b = (torch.randn(M, device="cuda", generator=gen) * 0.1 * sx * sw).float()
    return x, w, b


# ----------------------------------------------------------------------------- timing
def time_graph(make_fn, n_sets: int, reps: int, warm: int = 3) -> dict:
    """make_fn(i) -> a callable enqueueing one call on input set i on the current stream.
    One CUDA graph per input set (rotated), each replay timed with its own pair of events."""
    fns = [make_fn(i) for i in range(n_sets)]
    for f in fns:
        f()
    torch.cuda.synchronize()
    graphs = []
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            for _ in range(warm):
                f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for f in fns:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            f()
        graphs.append(g)
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for r in range(reps):
        ev[r][0].record()
        graphs[r % n_sets].replay()
        ev[r][1].record()
    torch.cuda.synchronize()
    ts = np.array([a.elapsed_time(b_) for a, b_ in ev])
    return {"median_ms": float(np.median(ts)), "min_ms": float(ts.min()), "max_ms": float(ts.max()), "reps": reps,
            "how": f"CUDA graph replay, {n_sets} rotating input sets, {warm} warm-up calls per set, events per replay"}


def flops(B, C, H, W, M, K):
    return 2.0 * B * M * C * K * K * H * W


def cudnn_fn(x, w, b, mode: str, layout: str, full: bool):
    if mode == "fp16":
        x, w, b = x.half(), w.half(), b.half()
    if layout == "channels_last":
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    K = w.shape[2]

    def f():
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        z = F.conv2d(x, w, b, padding=K // 2)
        return F.max_pool2d(F.relu(z), 2) if full else z
    return f


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="correctness only, no timing")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--old", action="store_true", help="also steps 07, 08, 09")
    ap.add_argument("--wmodes", default="percall,verify,prepared", help="weight modes timed at B=1")
    ap.add_argument("--rounds", type=int, default=1, help="time every new step this many times, interleaved")
    ap.add_argument("--budget", type=float, default=200, help="seconds after which the batch sweep stops")
    ap.add_argument("--only", default="", help="comma list of new steps to run (tf32,fp16,bf16,3xtf32)")
    ap.add_argument("--ncu", action="store_true", help="Nsight Compute on the new kernels at B=1 (child processes)")
    ap.add_argument("--ncu-steps", default="fp16,tf32,split")
    ap.add_argument("--smoke", default="", help=argparse.SUPPRESS)     # child: one small call of one step
    ap.add_argument("--profile", default="", help=argparse.SUPPRESS)   # child: three calls at B=1, for ncu
    args = ap.parse_args()
    if args.smoke or args.profile:
        name = args.smoke or args.profile
        step = HopperStep(name)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(5)
        shp = (1, 40, 20, 36, 300, 5) if args.smoke else (1, 256, 224, 224, 256, 5)
        x, w, b = rand_inputs(*shp, gen)
        y = torch.full((shp[0], shp[4], shp[2] // 2, shp[3] // 2), float("nan"), device="cuda")
        for _ in range(1 if args.smoke else 3):
            launcher(step, x, w, b, y)()
        torch.cuda.synchronize()
        if args.smoke:
            print(json.dumps({"smoke": name, "rel_l2": rel_l2(torch.nan_to_num(y), reference(x, w, b)),
                              "nan": int(torch.isnan(y).sum())}))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    LOG["device"] = {"name": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__,
                     "cudnn": torch.backends.cudnn.version(), "cupy": cp.__version__,
                     "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    print(LOG["device"])

    names = args.only.split(",") if args.only else ["tf32", "fp16", "bf16", "3xtf32", "split"]
    new = {n: HopperStep(n) for n in names}
    old = {"07_tf32": MmaSyncStep("07_tf32"), "08_3xtf32": MmaSyncStep("08_3xtf32"), "09_winograd": WinogradStep()}
    if not args.old:
        old = {}
    tol = {n: (1e-5 if n in HopperStep.FP32_ACCURATE else 2e-2 if n == "bf16" else 5e-3) for n in HopperStep.SPEC}
    tol.update({"07_tf32": 5e-3, "08_3xtf32": 1e-5, "09_winograd": 1e-5})

    # ---- build everything first (parallel), report ptxas and SASS for the new kernels
    jobs = [(s.src, {"KSIZE": k, "HOPPER_CLUSTER": s.cluster, **({"HOPPER_BF16": 1} if s.bf16 else {})}, SM90A)
            for s in new.values() for k in (1, 3, 5, 7)]
    jobs += [] if not old else [("07_tf32_implicit_gemm.cu", {"BM": 128, "TH": 8, "TW": 32, "WARPS_M": 2, "WARPS_N": 4, "STAGES": 3,
                                           "MIN_BLOCKS": 1, "KSIZE": k}, SM90) for k in (1, 3, 5, 7)]
    jobs += [] if not old else [("08_3xtf32.cu", {"BM": 64, "TH": 8, "TW": 32, "WARPS_M": 2, "WARPS_N": 4, "STAGES": 3,
                               "MIN_BLOCKS": 1, "KSIZE": k}, SM90) for k in (1, 3, 5, 7)]
    jobs += [] if not old else [("09_winograd.cu", {"KSIZE": k}, SM90) for k in (1, 3, 5, 7)]
    t0 = time.time()
    with ThreadPoolExecutor(16) as ex:
        futs = [ex.submit(build, *j) for j in jobs]
        for fu in futs:
            try:
                fu.result()
            except Exception as exc:
                LOG["errors"].append(str(exc))
                print("BUILD ERROR", exc)
    print(f"built {len(jobs)} modules in {time.time() - t0:.1f} s")
    LOG["sass"] = {}
    for n, s in new.items():
        try:
            LOG["sass"][n] = sass_summary(s.cubin(5))["hopper_conv_pool"]
            ptx = [ln for ln in LOG["builds"][s.src.replace(".cu", "") + ("_HOPPER_BF161" if s.bf16 else "")
                                              + f"_HOPPER_CLUSTER{s.cluster}_KSIZE5"]["ptxas"]]
            print(f"{n:7s} SASS {LOG['sass'][n]}  ptxas: {' | '.join(p.strip() for p in ptx if 'Used' in p or 'spill' in p)[:300]}")
        except Exception as exc:
            print("sass", n, exc)

    def dump():
        LOG["wall_s"] = time.time() - t_start
        with open(out / "vgg_hopper.json", "w") as fh:
            json.dump(LOG, fh, indent=1, default=str)

    # ---- smoke test of each new step in a child process: a deadlocked kernel must not eat the run
    bad = set()
    t_smoke = time.time()
    procs = {n: subprocess.Popen([sys.executable, __file__, "--smoke", n], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n in new}
    for n, pr in procs.items():
        try:
            so, se = pr.communicate(timeout=max(5.0, 75 - (time.time() - t_smoke)))
            line = (so.strip().splitlines() or [""])[-1]
            print(f"smoke {n}: rc={pr.returncode} {line} {se[-800:] if pr.returncode else ''}")
            LOG.setdefault("smoke", {})[n] = {"rc": pr.returncode, "out": line, "err": se[-2000:]}
            if pr.returncode:
                bad.add(n)
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.communicate()
            print(f"smoke {n}: TIMEOUT (deadlock?)")
            LOG.setdefault("smoke", {})[n] = {"timeout": True}
            bad.add(n)
    for n in bad:
        new.pop(n)
    dump()

    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    allsteps = {**new, **old}

    def record(rec):
        LOG["checks"].append(rec)
        if not rec["passed"]:
            bad.add(rec["step"])
        e = rec.get("rel_l2")
        print(f"  {rec['step']:12s} {rec['label']:28s} {str(rec.get('shape')):28s} "
              f"{'PASS' if rec['passed'] else 'FAIL'} rel={e if e is None else f'{e:.2e}'} nan={rec.get('nan')} {rec.get('error', '')}")

    # ---- the studied layer at B = 1
    print("checks: studied layer (1, 256, 224, 224) -> 256, K=5")
    x, w, b = rand_inputs(1, 256, 224, 224, 256, 5, gen)
    ref = reference(x, w, b)
    for n, s in allsteps.items():
        record(check(s, x, w, b, ref, "layer B=1", tol[n]))
        if n in new:
            for mode in ("percall", "prepared"):
                s.wmode = mode
                s.wcache.clear()
                rec = check(s, x, w, b, ref, f"layer B=1 {mode}", tol[n])
                rec["step"] = n
                record(rec)
            s.wmode = "verify"
    del ref
    # ---- raw weights cached by address: changed in place, the next call must use the new values
    print("checks: weights changed in place between calls (verify mode)")
    for n, s in new.items():
        x, w, b = rand_inputs(1, 70, 20, 36, 100, 5, gen)
        s.wcache.clear()
        record(check(s, x, w, b, reference(x, w, b), "before change", tol[n]))
        w[:, 3:40] *= -0.75                     # some channels of every m: several slices change
        w[7, 0, 2, 2] = 0.123                  # one float of one slice
        rec = check(s, x, w, b, reference(x, w, b), "after in-place change", tol[n])
        record(rec)
    # ---- odd shapes (C, M not multiples of 16, odd H and W, K = 1, 3, 5, 7)
    print("checks: odd shapes")
    odd = [(2, 37, 33, 45, 35, 5), (1, 13, 17, 9, 300, 3), (3, 70, 18, 30, 100, 7), (1, 1, 2, 2, 1, 1),
           (1, 300, 19, 21, 257, 5), (2, 64, 31, 16, 256, 3), (1, 5, 8, 40, 7, 7)]
    for shp in odd:
        x, w, b = rand_inputs(*shp, gen)
        ref = reference(x, w, b)
        for n, s in allsteps.items():
            record(check(s, x, w, b, ref, "odd", tol[n]))
    # ---- range test: scales 1e-6..1e6 independently for x and w, plus mixed magnitudes
    print("range test (1, 64, 24, 40) -> 48, K=5: worst rel L2 per step")
    scales = [1e-6, 1e-3, 1.0, 1e3, 1e6]
    worst = {}
    cases = [(sx, sw, False) for sx in scales for sw in scales] + [(1.0, 1.0, True), (1e-3, 1e3, True)]
    for sx, sw, mixed in cases:
        x, w, b = rand_inputs(1, 64, 24, 40, 48, 5, gen, sx, sw, mixed)
        ref = reference(x, w, b)
        for n, s in allsteps.items():
            if tol[n] > 1e-5:
                t = 1e30  # reported only: these steps do not claim FP32 accuracy (FP16 overflows past 65504)
            else:
                t = tol[n]
            rec = check(s, x, w, b, ref, f"range x{sx:g} w{sw:g}{' mixed' if mixed else ''}", t)
            LOG["range"].append(rec)
            if t < 1:
                if not rec["passed"]:
                    bad.add(n)
                    print(f"  RANGE FAIL {n} {rec['label']} rel={rec.get('rel_l2')} nan={rec.get('nan')} {rec.get('error', '')}")
            worst[n] = max(worst.get(n, 0.0), rec.get("rel_l2", float("inf")) if rec.get("nan", 1) == 0 else float("inf"))
    for n, v in worst.items():
        print(f"  {n:12s} worst range rel L2 {v:.2e}")
    LOG["range_worst"] = worst
    print("failed steps:", sorted(bad) or "none")
    LOG["failed"] = sorted(bad)
    dump()

    if not args.quick:
        B, C, H, W, M, K = 1, 256, 224, 224, 256, 5
        fl = flops(B, C, H, W, M, K)
        sets = [rand_inputs(B, C, H, W, M, K, gen) for _ in range(3)]
        ys = [torch.empty(B, M, H // 2, W // 2, device="cuda") for _ in range(3)]
        rows = []

        def timed(label, make_fn, kind):
            try:
                r = time_graph(make_fn, 3, args.reps)
                r.update({"label": label, "kind": kind, "B": B, "tflops": fl / r["median_ms"] / 1e9})
                LOG["times"].append(r)
                rows.append(r)
                print(f"  {label:40s} {r['median_ms']:8.4f} ms  [{r['min_ms']:.4f} .. {r['max_ms']:.4f}]  {r['tflops']:6.1f} TFLOP/s")
            except Exception as exc:
                LOG["errors"].append(f"{label}: {traceback.format_exc()}")
                print(f"  {label:40s} ERROR {type(exc).__name__}: {exc}")

        print(f"timing at B=1 ({fl / 1e9:.1f} GFLOP), median of {args.reps} graph replays")
        for n, s in allsteps.items():
            if n in bad:
                print(f"  {n:40s} skipped (failed a check)")
                continue
            if n in new and n != "bf16":
                continue   # timed below in each weight mode
            timed(n, lambda i, s=s: launcher(s, *sets[i], ys[i]), "ours")
        for rnd, n, s in [(r, n, s) for r in range(args.rounds) for n, s in new.items()]:
            if n in bad or n == "bf16":
                continue
            for wmode in args.wmodes.split(","):
                s.wmode = wmode
                s.wcache.clear()
                timed(f"{n} [{wmode}]{f' round {rnd + 1}' if args.rounds > 1 else ''}",
                      lambda i, s=s: launcher(s, *sets[i], ys[i]), "ours")
                if rnd > 0 or n.endswith("cl2"):   # the pack launch does not depend on the cluster
                    continue
                s.pack_only = True
                timed(f"{n} [{wmode}] pack kernel only", lambda i, s=s: launcher(s, *sets[i], ys[i]), "ours-part")
                s.pack_only = False
            s.wmode = "prepared"
        for mode in ("fp32", "tf32", "fp16"):
            for layout in ("nchw", "channels_last"):
                for full in (True,):
                    lab = f"cudnn {mode} {layout} {'layer' if full else 'conv only'}"
                    timed(lab, lambda i, m=mode, l=layout, fu=full: cudnn_fn(*sets[i], m, l, fu), "cudnn")
        # cuDNN errors vs float64 (layer, channels_last)
        ref = reference(*sets[0])
        for mode in ("fp32", "tf32", "fp16"):
            for layout in ("nchw", "channels_last"):
                got = cudnn_fn(*sets[0], mode, layout, True)().float()
                LOG["checks"].append({"step": f"cudnn {mode} {layout}", "label": "layer B=1", "rel_l2": rel_l2(got, ref)})
                print(f"  cudnn {mode} {layout}: rel L2 {LOG['checks'][-1]['rel_l2']:.2e}")
        torch.backends.cudnn.allow_tf32 = True
        del ref, sets, ys
        dump()

        if not args.no_sweep:
            print("batch sweep (TFLOP/s)")
            for Bs in (1, 2, 4, 8, 16):
                fl_b = flops(Bs, C, H, W, M, K)
                ssets = [rand_inputs(Bs, C, H, W, M, K, gen) for _ in range(2)]
                sys_ = [torch.empty(Bs, M, H // 2, W // 2, device="cuda") for _ in range(2)]
                reps = 20 if Bs <= 4 else 10
                cands = [(f"{n} [prepared]", (lambda i, s=s: launcher(s, *ssets[i], sys_[i]))) for n, s in new.items()
                         if n not in bad and n in ("tf32", "fp16", "3xtf32")]
                for n, s in new.items():
                    s.wmode = "prepared"
                    s.wcache.clear()
                cands += [(f"cudnn {m} channels_last layer", (lambda i, m=m: cudnn_fn(*ssets[i], m, "channels_last", True)))
                          for m in ("fp32", "tf32", "fp16")]
                for lab, mk in cands:
                    try:
                        r = time_graph(mk, 2, reps, warm=1)
                        r.update({"label": lab, "B": Bs, "tflops": fl_b / r["median_ms"] / 1e9})
                        LOG["sweep"].append(r)
                        print(f"  B={Bs:2d} {lab:36s} {r['median_ms']:8.3f} ms {r['tflops']:6.1f} TFLOP/s")
                    except Exception as exc:
                        LOG["errors"].append(f"sweep {lab} B={Bs}: {exc}")
                        print(f"  B={Bs} {lab} ERROR {exc}")
                del ssets, sys_
                torch.cuda.empty_cache()
                if time.time() - t_start > args.budget:
                    print("sweep stopped: time budget")
                    break

    if args.ncu:
        LOG["ncu"] = {}
        for n in new:
            if n in bad or n not in args.ncu_steps.split(","):
                continue
            for tag, extra in (("sections", ["--section", "SpeedOfLight", "--section", "WarpStateStats",
                                             "--section", "MemoryWorkloadAnalysis", "--section", "ComputeWorkloadAnalysis"]),
                               ("gmma", ["--metrics", "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,"
                                         "sm__inst_executed_pipe_tensor_op_gmma.sum,dram__bytes_read.sum,dram__bytes_write.sum,"
                                         "lts__t_bytes.sum,gpu__time_duration.sum"])):
                cmd = ["ncu", "--clock-control", "none", "-k", "hopper_conv_pool", "-s", "2", "-c", "1", *extra,
                       sys.executable, __file__, "--profile", n]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
                    txt = r.stdout[-6000:]
                except subprocess.TimeoutExpired:
                    txt = "ncu timeout"
                LOG["ncu"][f"{n}/{tag}"] = txt
                (out / f"ncu_{n}_{tag}.txt").write_text(txt)
                print(f"ncu {n} {tag}:\n" + "\n".join(ln for ln in txt.splitlines()
                                                       if any(k in ln for k in ("Duration", "Throughput", "gmma", "dram__", "lts__", "Stall", "Pipe", "Registers", "Warp Cycles"))))
    dump()
    print("\nsummary (B=1):")
    for r in LOG["times"]:
        print(f"  {r['label']:40s} {r['median_ms']:8.4f} ms {r['tflops']:6.1f} TFLOP/s")
    print("max active clusters:", LOG.get("max_active_clusters"))
    print(f"wall {LOG['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
