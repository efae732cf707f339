#!/usr/bin/env python3
"""Check and time LeNet step 16 (kernels/lenet/16_wgmma_final.cu, wgmma + bulk copies) beside
step 15, step 14 and cuDNN FP32, on the device, in one process.

Self-contained on purpose: it imports neither ``kernelbook`` nor anything of the repository's
Python package, only NumPy, CuPy and (for the cuDNN rows) PyTorch. It mirrors the launch logic
of step 16 (geometry, shared memory, persistent grid) below.

    PYTHONUNBUFFERED=1 python3 scripts/bench_lenet_hopper.py --out $OUT           # check + time
    ... --ncu            then Nsight Compute on the step-16 kernels at B = 10000
    ... --sanitize       then compute-sanitizer memcheck + racecheck on them at a small batch

What it does:
1. builds every step-16 configuration with nvcc for sm_90a (cubin; ptxas report and the SASS
   opcode counts kept: HGMMA present? LDL/STL?), step 15 and 14 with NVRTC as their steps do;
2. a smoke test of step 16 in a child process with a time limit (a hung mbarrier cannot take
   the whole call);
3. checks every kernel against a float64 NumPy reference on fresh random inputs with the output
   poisoned (NaN): LeNet shapes, odd shapes, and the RANGE TEST (inputs and weights scaled
   independently by 1e-6, 1e-3, 1, 1e3, 1e6, plus tensors mixing magnitudes 1e-6 .. 1e6);
   relative L2 <= 1e-5 for every step that claims FP32 accuracy (14, 15, 16; cuDNN FP32 too);
4. times C1 and C3 at B = 100, 1000, 10000, two ways:
   - graph: a CUDA graph of G launches over rotated input/output buffers, replayed >= 20 times
     between events; per launch = replay / G (median, min, max over replays);
   - user: a Python loop of the launcher (output allocated, shapes validated: cached for the
     new step, as step 15's launcher does it today for step 15 (every device attribute queried
     per call)), events around the loop; per call = loop / calls;
5. writes everything to $OUT/bench_lenet_hopper.json and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "kernels" / "lenet"
SRC16 = KDIR / "16_wgmma_final.cu"
SRC15 = KDIR / "15_hopper_final.cu"
SRC14 = KDIR / "14_specialised.cu"
TOL = 1e-5
LAYERS = {"C1": (4, 1, 86, 86, 7), "C3": (16, 4, 40, 40, 7)}  # (M, C, H, W, K)
BATCHES = (100, 1000, 10000)
OUT = Path(os.environ.get("OUT", "."))

# Step-16 configurations per layer; the first is the default ('auto').
CONFIGS16 = {
    "C3": [
        dict(threads=256, min_blocks=2, group=3, nstage=2, store_cs=1),
        dict(threads=256, min_blocks=1, group=64, nstage=3, store_cs=1),
        dict(threads=256, min_blocks=2, group=4, nstage=2, store_cs=1),
        dict(threads=384, min_blocks=1, group=4, nstage=3, store_cs=1),
    ],
    "C1": [
        dict(threads=256, min_blocks=2, group=64, nstage=2, store_cs=1),
        dict(threads=256, min_blocks=3, group=2, nstage=1, store_cs=1),
        dict(threads=384, min_blocks=1, group=64, nstage=3, store_cs=1),
        dict(threads=128, min_blocks=3, group=64, nstage=1, store_cs=1),
    ],
}
CONFIGS16_QUICK = {k: v[:1] for k, v in CONFIGS16.items()}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------- step 16

def geometry16(M, C, H, W, K, cfg):
    """Mirror of the .cu's compile-time geometry; ``rpp`` chosen as step 16's plan does."""
    rpp = cfg.get("rpp") or (2 if M * 2 <= 16 else 1)
    hout, wout = H - K + 1, W - K + 1
    wp = cdiv(wout, 2)
    hp = cdiv(hout, rpp)
    prows = rpp + K - 1
    nks = cdiv(C * prows, 2)
    mq = M * rpp
    mq = 4 if mq <= 4 else (8 if mq <= 8 else (16 if mq <= 16 else 32))
    n1 = 4 * mq
    hpl = max(rpp * hp + K - 1, H)
    rsw = cdiv(max(2 * wp + 6, W), 2)
    nelem = C * H * W
    stage = cdiv(nelem, 32) * 32
    nplanes = 2 if cfg.get("ws", 0) else 1
    smem = nks * n1 * 32 + cfg["nstage"] * stage * 4 + nplanes * 2 * C * hpl * rsw * 4
    return dict(rpp=rpp, smem=smem, tiles=cdiv(hp * wp, 64), nks=nks, n1=n1)


def supported16(M, C, H, W, K, cfg):
    if K > 7:
        return f"K={K} > 7"
    if M * (cfg.get("rpp") or (2 if 2 * M <= 16 else 1)) > 32:
        return f"M={M}: more than 32 (map, row) columns"
    if geometry16(M, C, H, W, K, cfg)["smem"] > 227 * 1024:
        return "shared memory"
    return None


_cubins: dict = {}


def nvcc_module(src: Path, defines: dict, tag: str):
    """nvcc -> cubin for sm_90a, loaded with CuPy; the ptxas report and SASS opcode counts kept."""
    import cupy as cp

    key = (str(src), tuple(sorted(defines.items())))
    if key in _cubins:
        return _cubins[key]
    build = Path("/tmp/lenet16_build")
    build.mkdir(exist_ok=True)
    cubin = build / f"{tag}_{abs(hash(key)) % 10**10}.cubin"
    cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3", "-Xptxas", "-v", "--std=c++17",
           f"-I{KDIR}", "-o", str(cubin), str(src)] + [f"-D{k}={v}" for k, v in sorted(defines.items())]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    ptxas = [line for line in proc.stderr.splitlines() if "ptxas" in line or "spill" in line or "C75" in line]
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True).stdout
    ops = {}
    func = None
    for line in sass.splitlines():
        if "Function :" in line:
            func = line.split(":")[-1].strip()
        parts = line.split("*/")
        if func == "conv_wgmma" and len(parts) > 1 and "/*" in line:
            body = parts[1].strip()
            if body:
                op = body.split()[0]
                if op.startswith("@"):
                    op = body.split()[1]
                op = op.split(".")[0].rstrip(";")
                ops[op] = ops.get(op, 0) + 1
    mod = cp.RawModule(path=str(cubin))
    _cubins[key] = (mod, ptxas, {k: ops.get(k, 0) for k in ("HGMMA", "LDS", "LDL", "STL", "STG", "SYNCS", "WARPGROUP",
                                                            "BAR", "UBLKCP", "FFMA")}, ops)
    return _cubins[key]


class Step16:
    """One step-16 configuration for one shape; caches module, kernel and grid facts."""

    def __init__(self, M, C, H, W, K, cfg, sms):
        self.shape = (M, C, H, W, K)
        self.cfg = cfg
        self.reason = supported16(M, C, H, W, K, cfg)
        if self.reason is None:
            geo = geometry16(M, C, H, W, K, cfg)
            self.geo = geo
            defines = {"KS": K, "CIN": C, "HIN": H, "WIN": W, "MOUT": M, "RPP": geo["rpp"],
                       "THREADS": cfg["threads"], "NSTAGE": cfg["nstage"], "STORE_CS": cfg["store_cs"],
                       "MIN_BLOCKS": cfg["min_blocks"], "GROUP": cfg["group"], "WS": cfg.get("ws", 0),
                       "PROD4": cfg.get("prod4", 0)}
            self.mod, self.ptxas, self.sass, self.ops = nvcc_module(SRC16, defines, "s16")
            self.kernel = self.mod.get_function("conv_wgmma")
            if geo["smem"] > 48 * 1024:
                self.kernel.max_dynamic_shared_size_bytes = geo["smem"]
            self.per_sm = occupancy(self.kernel, cfg["threads"], geo["smem"])
            self.grid_max = sms * self.per_sm
        else:
            self.mod, self.ptxas, self.sass, self.ops = nvcc_module(SRC16, {"GENERIC_ONLY": 1}, "s16g")
            self.kernel = self.mod.get_function("conv_generic")

    def __call__(self, y, x, k):
        B = x.shape[0]
        if self.reason is None:
            self.kernel((min(B, self.grid_max),), (self.cfg["threads"],), (y, x, k, np.int32(B)),
                        shared_mem=self.geo["smem"])
        else:
            M, C, H, W, K = self.shape
            n = B * M * (H - K + 1) * (W - K + 1)
            self.kernel((min(cdiv(n, 256), 65535 * 8),), (256,), (y, x, k, *(np.int32(v) for v in (B, M, C, H, W, K))))

    def describe(self):
        if self.reason is not None:
            return {"kernel": "conv_generic", "reason": self.reason}
        return {"kernel": "conv_wgmma", **self.cfg, "regs": self.kernel.num_regs, "blocks_per_sm": self.per_sm,
                "smem": self.geo["smem"], "rpp": self.geo["rpp"], "sass": self.sass,
                "ptxas": [p for p in self.ptxas if "conv_wgmma" in p or "Used" in p or "C75" in p][-4:]}


def occupancy(kernel, threads, smem):
    import cupy as cp

    try:
        return max(1, int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, smem)))
    except Exception:
        regs_per_warp = cdiv(kernel.num_regs * 32, 256) * 256
        return max(1, min((65536 // regs_per_warp) // (threads // 32), 233472 // (smem + 1024), 2048 // threads))


# ----------------------------------------------------------------------------- steps 15 and 14 (as their steps launch them)

_nvrtc: dict = {}


def nvrtc_module(src: Path, defines: dict):
    import cupy as cp

    opts = ("--std=c++17", f"-I{KDIR}") + tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))
    key = (str(src), opts)
    if key not in _nvrtc:
        mod = cp.RawModule(code=src.read_text(), options=opts)
        mod.compile()
        _nvrtc[key] = mod
    return _nvrtc[key]


class Step15C3:
    """Step 15's C3 (conv_hopper, its 'auto' wide configuration); C1 of step 15 is step 14's kernel."""

    CFG = {"THREADS": 256, "NT": 5, "MGW": 4, "PREFETCH": 1, "STORE_CS": 0, "MIN_BLOCKS": 1, "MMA_ORDERED": 1,
           "INTERLEAVE": 0}

    def __init__(self, M, C, H, W, K, attributes_per_call=False):
        import cupy as cp

        self.shape = (M, C, H, W, K)
        wp = cdiv(W - K + 1, 2)
        rsw = cdiv(max(2 * wp + 6, W), 2)
        self.smem = 4 * (2 * C * H * rsw + cdiv(C * K, 2) * cdiv(M, 4) * 32 * 4)
        self.kernel = nvrtc_module(SRC15, {"KS": K, "CIN": C, "HIN": H, "WIN": W, "MOUT": M, **self.CFG}).get_function(
            "conv_hopper")
        if self.smem > 48 * 1024:
            self.kernel.max_dynamic_shared_size_bytes = self.smem
        self.attributes_per_call = attributes_per_call
        self.sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.per_sm = occupancy(self.kernel, 256, self.smem)

    def __call__(self, y, x, k):
        import cupy as cp

        B = x.shape[0]
        if self.attributes_per_call:  # what HopperFinal.launch does today: every attribute, every call
            attrs = cp.cuda.Device().attributes
            sms = attrs["MultiProcessorCount"]
            _ = attrs.get("MaxRegistersPerMultiprocessor"), attrs.get("MaxSharedMemoryPerMultiprocessor")
            sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        else:
            sms = self.sms
        self.kernel((min(B, sms * self.per_sm),), (256,), (y, x, k, np.int32(B)), shared_mem=self.smem)


class Step14:
    """kernels/lenet/14_specialised.cu as its step plans the two LeNet layers (C1 FP32 direct with
    constant-memory weights, C3 3xTF32). Step 15 runs the same C1 kernel."""

    FB = {"FB_BM": 16, "FB_BN": 128, "FB_BK": 8, "FB_TM": 4, "FB_TN": 4}

    def __init__(self, layer):
        self.layer = layer
        if layer == "C1":
            self.defines = {"KS": 7, "CIN": 1, "HIN": 86, "WIN": 86, "MOUT": 4, "MG": 4, "TW": 4, "BAND": 80,
                            "THREADS": 320, "MIN_BLOCKS": 4, "WEIGHTS_SMEM": 0, "UNROLL_P": 0, **self.FB}
            self.mod = nvrtc_module(SRC14, self.defines)
            self.kernel = self.mod.get_function("conv_direct")
            self.cw = self.mod.get_global("c_weights")
        else:
            self.defines = {"MATH_3XTF32": 1, "KS": 7, "CIN": 4, "HIN": 40, "WIN": 40, "MOUT": 16, "MG": 16, "TW": 4,
                            "BAND": 34, "THREADS": 320, "MIN_BLOCKS": 2, "WEIGHTS_SMEM": 1, "NT": 4, **self.FB}
            self.mod = nvrtc_module(SRC14, self.defines)
            self.kernel = self.mod.get_function("conv_direct_3xtf32")
            self.kernel.max_dynamic_shared_size_bytes = 84992
            self.kernel.preferred_shared_memory_carveout = 100

    def __call__(self, y, x, k):
        B = x.shape[0]
        if self.layer == "C1":
            self.cw.copy_from_device_async(k.data, 4 * k.size)
            self.kernel((B, 1), (320,), (y, x, k, np.int32(B)))
        else:
            self.kernel((B, 1), (320,), (y, x, k, np.int32(B)), shared_mem=84992)


class Cudnn:
    """torch.nn.functional.conv2d, FP32 (TF32 off), cudnn.benchmark on; CuPy arrays through DLPack."""

    def __init__(self):
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False

    def __call__(self, y, x, k):
        import torch
        import torch.nn.functional as F

        out = F.conv2d(torch.from_dlpack(x), torch.from_dlpack(k))
        torch.from_dlpack(y).copy_(out)


# ----------------------------------------------------------------------------- checks

def reference(x, k):
    from numpy.lib.stride_tricks import sliding_window_view

    K = k.shape[-1]
    win = sliding_window_view(x.astype(np.float64), (K, K), axis=(2, 3))
    return np.einsum("bchwpq,mcpq->bmhw", win, k.astype(np.float64), optimize=True)


def mixed(rng, shape):
    """Standard normal times 10^U(-6, 6): magnitudes from 1e-6 to 1e6 in one tensor."""
    return rng.standard_normal(shape) * 10.0 ** rng.uniform(-6, 6, size=shape)


def check(run, M, C, H, W, K, B, rng, x_scale=1.0, k_scale=1.0, x_mixed=False, k_mixed=False):
    import cupy as cp

    x = (mixed(rng, (B, C, H, W)) if x_mixed else rng.standard_normal((B, C, H, W)) * x_scale).astype(np.float32)
    k = (mixed(rng, (M, C, K, K)) if k_mixed else rng.standard_normal((M, C, K, K)) * k_scale).astype(np.float32)
    y = cp.full((B, M, H - K + 1, W - K + 1), np.nan, dtype=cp.float32)
    run(y, cp.asarray(x), cp.asarray(k))
    cp.cuda.Device().synchronize()
    out = y.get().astype(np.float64)
    ref = reference(x, k)
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


SCALES = (1e-6, 1e-3, 1.0, 1e3, 1e6)


def range_test(run, M, C, H, W, K, rng, B=2):
    """Worst rel. L2 over independent x / k scales and mixed-magnitude tensors; all cases kept."""
    cases = {}
    for xs in SCALES:
        for ks in SCALES:
            cases[f"x{xs:g}_k{ks:g}"] = check(run, M, C, H, W, K, B, rng, x_scale=xs, k_scale=ks)
    cases["x_mixed_k1"] = check(run, M, C, H, W, K, B, rng, x_mixed=True)
    cases["x1_k_mixed"] = check(run, M, C, H, W, K, B, rng, k_mixed=True)
    cases["x_mixed_k_mixed"] = check(run, M, C, H, W, K, B, rng, x_mixed=True, k_mixed=True)
    return cases


ODD_SHAPES = [  # (M, C, H, W, K, B): odd W (scalar path), odd W_out, partial tiles, K < 7, K = 1, RPP 1/2, generic
    (6, 3, 21, 19, 5, 5),
    (9, 2, 17, 30, 7, 3),
    (4, 1, 9, 9, 3, 4),
    (7, 5, 6, 10, 1, 2),
    (3, 2, 12, 11, 7, 3),
    (16, 4, 40, 40, 7, 1),
    (4, 1, 86, 86, 7, 3),
    (16, 1, 30, 28, 7, 3),
    (5, 2, 20, 20, 9, 2),   # K > 7: conv_generic
    (20, 2, 20, 20, 5, 2),  # M > 16: conv_generic
]


# ----------------------------------------------------------------------------- timing

def buffers(M, C, H, W, K, B, rng):
    import cupy as cp

    xb = B * C * H * W * 4
    nrot = max(1, min(8, cdiv(200 * 2**20, xb)))  # >= 200 MB of inputs: small batches miss L2
    xs = [cp.asarray(rng.standard_normal((B, C, H, W)).astype(np.float32)) for _ in range(nrot)]
    ys = [cp.empty((B, M, H - K + 1, W - K + 1), dtype=cp.float32) for _ in range(nrot)]
    k = cp.asarray(rng.standard_normal((M, C, K, K)).astype(np.float32))
    return xs, ys, k


def time_graph(run, bufs, per_graph, replays=25, torch_graph=False):
    """A graph of ``per_graph`` launches over the rotated buffers, replayed; ms per launch."""
    import cupy as cp

    xs, ys, k = bufs
    n = len(xs)
    for i in range(3):
        run(ys[i % n], xs[i % n], k)
    cp.cuda.Device().synchronize()
    if torch_graph:
        import torch

        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(3):
                run(ys[i % n], xs[i % n], k)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for i in range(per_graph):
                run(ys[i % n], xs[i % n], k)
        replay = g.replay
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(replays):
            start.record()
            replay()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) / per_graph)
        return samples
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for i in range(per_graph):
            run(ys[i % n], xs[i % n], k)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        samples = []
        for _ in range(replays):
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, stop) / per_graph)
    return samples


def time_user(call, bufs, calls, repeats=7):
    """A Python loop of ``call(x, k)`` (it allocates its output), events around it; ms per call."""
    import cupy as cp

    xs, _, k = bufs
    n = len(xs)
    for i in range(3):
        call(xs[i % n], k)
    cp.cuda.Device().synchronize()
    samples = []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(repeats):
        start.record()
        for i in range(calls):
            call(xs[i % n], k)
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) / calls)
    return samples


class UserCall:
    """What a user's conv_forward(x, k) does around a launcher: validate the shapes (cached per
    shape when ``cache``), allocate y from the pool, launch."""

    def __init__(self, run, M, C, H, W, K, cache=True):
        self.run, self.shape, self.cache = run, (M, C, H, W, K), cache
        self.seen = set()

    def __call__(self, x, k):
        import cupy as cp

        key = (x.shape, k.shape, x.dtype.char, k.dtype.char)
        if not self.cache or key not in self.seen:
            M, C, H, W, K = self.shape
            if x.ndim != 4 or x.shape[1:] != (C, H, W) or k.shape != (M, C, K, K) or x.dtype != cp.float32:
                raise ValueError("shape")
            if not (x.flags.c_contiguous and k.flags.c_contiguous):
                raise ValueError("contiguous")
            self.seen.add(key)
        M, C, H, W, K = self.shape
        y = cp.empty((x.shape[0], M, H - K + 1, W - K + 1), dtype=cp.float32)
        self.run(y, x, k)
        return y


# ----------------------------------------------------------------------------- phases

def smoke():
    """Child process: one launch of the default step-16 configuration per layer, checked."""
    import cupy as cp

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rng = np.random.default_rng(5)
    for layer, (M, C, H, W, K) in LAYERS.items():
        run = Step16(M, C, H, W, K, CONFIGS16[layer][0], sms)
        err = check(run, M, C, H, W, K, 300, rng)
        log(f"smoke {layer} {run.describe()['regs']} regs err {err:.2e}")


def profile_launches(b, cfgs):
    """For ncu / compute-sanitizer: step-16 launches of the given configurations at batch b."""
    import cupy as cp

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rng = np.random.default_rng(1)
    for layer, cfg in cfgs:
        M, C, H, W, K = LAYERS[layer]
        run = Step16(M, C, H, W, K, cfg, sms)
        x = cp.asarray(rng.standard_normal((b, C, H, W)).astype(np.float32))
        k = cp.asarray(rng.standard_normal((M, C, K, K)).astype(np.float32))
        y = cp.full((b, M, H - K + 1, W - K + 1), np.nan, dtype=cp.float32)
        run(y, x, k)
        cp.cuda.Device().synchronize()
        if b <= 64:
            err = float(np.linalg.norm(y.get() - reference(x.get(), k.get())) / np.linalg.norm(reference(x.get(), k.get())))
            log(f"{layer} b={b} err {err:.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--quick", action="store_true", help="first step-16 configuration per layer only")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes to time (default 100,1000,10000)")
    ap.add_argument("--extra", default=None, help="JSON {layer: [cfg, ...]} appended to the step-16 configurations")
    ap.add_argument("--no-odd", action="store_true")
    ap.add_argument("--ncu-tags", default="C1/16#0,C3/16#0", help="step-16 tags for ncu / the sanitizer")
    ap.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    if args.smoke:
        smoke()
        return
    if args.profile:
        p = json.loads(args.profile)
        profile_launches(p["b"], p["cfgs"])
        return

    import cupy as cp

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = dev.attributes["MultiProcessorCount"]
    result = {"device": name, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cupy": cp.__version__,
              "tolerance": TOL, "builds": {}, "checks": [], "range": {}, "timings": []}
    jpath = out_dir / "bench_lenet_hopper.json"

    def save():
        jpath.write_text(json.dumps(result, indent=1, default=str))

    log(f"device {name}, {sms} SMs")
    # ---- 1. smoke test in a child (a hang costs 40 s, not the call)
    t0 = time.time()
    try:
        proc = subprocess.run([sys.executable, __file__, "--smoke"], capture_output=True, text=True, timeout=60)
        log(proc.stdout[-3000:], proc.stderr[-3000:])
        smoke_ok = proc.returncode == 0
    except subprocess.TimeoutExpired:
        log("SMOKE TIMED OUT (hang): step 16 skipped")
        smoke_ok = False
    result["smoke_ok"] = smoke_ok
    log(f"smoke {time.time() - t0:.1f}s ok={smoke_ok}")
    save()

    rng = np.random.default_rng(int(time.time()))
    configs = {k: list(v) for k, v in (CONFIGS16_QUICK if args.quick else CONFIGS16).items()}
    if args.extra:
        for layer, cfgs in json.loads(args.extra).items():
            configs[layer] += [{**CONFIGS16[layer][0], **c} for c in cfgs]
    batches = tuple(int(b) for b in args.batches.split(",")) if args.batches else BATCHES
    runners = {}  # tag -> (layer, run)
    # ---- 2. build + check
    if smoke_ok:
        for layer, cfgs in configs.items():
            M, C, H, W, K = LAYERS[layer]
            for i, cfg in enumerate(cfgs):
                tag = f"{layer}/16#{i}"
                try:
                    run = Step16(M, C, H, W, K, cfg, sms)
                except Exception as exc:
                    log(f"{tag}: BUILD FAILED {exc}"[:1500])
                    result["checks"].append({"tag": tag, "cfg": cfg, "error": str(exc)[:3000]})
                    continue
                errs = [check(run, M, C, H, W, K, 7, rng), check(run, M, C, H, W, K, 1, rng),
                        check(run, M, C, H, W, K, 300, rng)]
                ok = all(e <= TOL for e in errs)
                d = run.describe()
                log(f"{tag} regs {d['regs']} bps {d['blocks_per_sm']} smem {d['smem']} sass {d['sass']} "
                    f"err {max(errs):.2e} {'ok' if ok else 'FAIL'}")
                result["checks"].append({"tag": tag, "describe": d, "errors": errs, "ok": ok})
                if ok:
                    runners[tag] = (layer, run)
    for layer in LAYERS:
        M, C, H, W, K = LAYERS[layer]
        old = {"14": Step14(layer)}
        if layer == "C3":
            old["15"] = Step15C3(M, C, H, W, K)
        for s, run in old.items():
            err = check(run, M, C, H, W, K, 7, rng)
            result["checks"].append({"tag": f"{layer}/{s}", "errors": [err], "ok": err <= TOL})
            log(f"{layer}/{s} err {err:.2e}")
            if err <= TOL:
                runners[f"{layer}/{s}"] = (layer, run)
        try:
            run = Cudnn()
            err = check(run, M, C, H, W, K, 7, rng)
            result["checks"].append({"tag": f"{layer}/cudnn", "errors": [err], "ok": err <= TOL})
            runners[f"{layer}/cudnn"] = (layer, run)
            log(f"{layer}/cudnn err {err:.2e}")
        except Exception as exc:
            log(f"cudnn: {exc}")
    save()

    # ---- 3. range test: default step 16, step 15, step 14 (and cuDNN FP32), each layer
    for tag, (layer, run) in list(runners.items()):
        if "#" in tag and not tag.endswith("#0"):
            continue
        M, C, H, W, K = LAYERS[layer]
        cases = range_test(run, M, C, H, W, K, rng)
        worst = max(cases.values())
        fails = {k: v for k, v in cases.items() if not v <= TOL}
        result["range"][tag] = {"worst": worst, "cases": cases, "fails": fails}
        log(f"range {tag}: worst {worst:.2e}, {len(fails)} of {len(cases)} over {TOL:g}"
            + (f": {dict(list(fails.items())[:6])}" if fails else ""))
    save()

    # ---- 5. timings
    if not args.no_time:
        for layer in LAYERS:
            M, C, H, W, K = LAYERS[layer]
            for B in batches:
                bufs = buffers(M, C, H, W, K, B, rng)
                per_graph = 20 if B < 10000 else 8
                for tag, (lay, run) in runners.items():
                    if lay != layer:
                        continue
                    is_torch = tag.endswith("cudnn")
                    if is_torch:
                        # cuDNN on torch views of the same buffers, its own output (no copy into y)
                        import torch
                        import torch.nn.functional as F

                        tb = ([torch.from_dlpack(v) for v in bufs[0]], bufs[1], torch.from_dlpack(bufs[2]))
                        s = time_graph(lambda y, x, k: F.conv2d(x, k), tb, per_graph,
                                       replays=25 if B < 10000 else 20, torch_graph=True)
                        su = time_user(lambda x, k: F.conv2d(x, k), tb, 50 if B < 10000 else 10)
                        for how, smp in (("graph", s), ("user", su)):
                            result["timings"].append({"tag": tag, "layer": layer, "B": B, "how": how,
                                                      "median_ms": float(np.median(smp)), "min_ms": float(min(smp)),
                                                      "max_ms": float(max(smp)), "samples_ms": smp})
                        del tb
                        continue
                    s = time_graph(run, bufs, per_graph, replays=25 if B < 10000 else 20)
                    rec = {"tag": tag, "layer": layer, "B": B, "how": "graph", "median_ms": float(np.median(s)),
                           "min_ms": float(min(s)), "max_ms": float(max(s)), "samples_ms": s}
                    result["timings"].append(rec)
                    # as a user calls it: step 16 and 15 with their launchers; step 15's with the
                    # device attributes queried per call, as its step does today
                    if "#" in tag and not tag.endswith("#0"):
                        continue
                    calls = 50 if B < 10000 else 10
                    if tag.endswith("/15"):
                        ucall = UserCall(Step15C3(M, C, H, W, K, attributes_per_call=True), M, C, H, W, K, cache=False)
                    else:
                        ucall = UserCall(run, M, C, H, W, K, cache=not tag.endswith("/14"))
                    su = time_user(ucall, bufs, calls)
                    result["timings"].append({"tag": tag, "layer": layer, "B": B, "how": "user",
                                              "median_ms": float(np.median(su)), "min_ms": float(min(su)),
                                              "max_ms": float(max(su)), "samples_ms": su})
                del bufs
                cp.get_default_memory_pool().free_all_blocks()
                save()
                log(f"timed {layer} B={B}")
        # step 15 C1 = step 14 C1 (same kernel, as step 15's plan takes it)
        save()

    # ---- 4. odd shapes (step 16 default configs)
    if smoke_ok and not args.no_odd:
        for (M, C, H, W, K, B) in ODD_SHAPES:
            for layer in ("C3", "C1"):
                cfg = configs[layer][0]
                try:
                    run = Step16(M, C, H, W, K, cfg, sms)
                    err = check(run, M, C, H, W, K, B, rng)
                    rt = range_test(run, M, C, H, W, K, rng, B=1) if K <= 7 else {}
                    worst = max([err] + list(rt.values()))
                    desc = run.describe()
                except Exception as exc:
                    err, worst, desc = float("nan"), float("nan"), {"kernel": f"error {exc}"[:500]}
                ok = worst <= TOL
                log(f"odd {(M, C, H, W, K, B)} cfg {layer} {desc.get('kernel')} rpp {desc.get('rpp')} "
                    f"err {err:.2e} range-worst {worst:.2e} {'ok' if ok else 'FAIL'}")
                result["checks"].append({"tag": f"odd{(M, C, H, W, K, B)}/{layer}cfg", "errors": [err, worst],
                                         "ok": ok, "kernel": desc.get("kernel")})
        save()

    # ---- 6. table
    tim = {(t["tag"], t["B"], t["how"]): t["median_ms"] for t in result["timings"]}
    log("")
    log(f"{'tag':10} {'B':>6} {'graph ms':>9} {'min':>8} {'max':>8} {'user ms':>9}")
    for t in result["timings"]:
        if t["how"] != "graph":
            continue
        u = tim.get((t["tag"], t["B"], "user"))
        log(f"{t['tag']:10} {t['B']:6d} {t['median_ms']:9.4f} {t['min_ms']:8.4f} {t['max_ms']:8.4f} "
            f"{(f'{u:9.4f}' if u is not None else '        -')}")
    log("")
    log("C1 + C3 (graph, median ms) | user | vs cuDNN FP32 (graph)")
    summary = {}
    for B in batches:
        def best(layer, how="graph"):
            c = [(v, k[0]) for k, v in tim.items() if k[1] == B and k[2] == how and k[0].startswith(layer + "/16")]
            return min(c) if c else (float("nan"), "-")
        b1, b3 = best("C1"), best("C3")
        cud = tim.get(("C1/cudnn", B, "graph"), float("nan")) + tim.get(("C3/cudnn", B, "graph"), float("nan"))
        s15 = tim.get(("C1/14", B, "graph"), float("nan")) + tim.get(("C3/15", B, "graph"), float("nan"))
        s14 = tim.get(("C1/14", B, "graph"), float("nan")) + tim.get(("C3/14", B, "graph"), float("nan"))
        u16 = tim.get(("C1/16#0", B, "user"), float("nan")) + tim.get(("C3/16#0", B, "user"), float("nan"))
        u15 = tim.get(("C1/14", B, "user"), float("nan")) + tim.get(("C3/15", B, "user"), float("nan"))
        tot = b1[0] + b3[0]
        summary[B] = dict(step16=tot, c1=b1, c3=b3, cudnn=cud, step15=s15, step14=s14, user16=u16, user15=u15)
        log(f"B={B:6d}: 16 {tot:.4f} ({b1[1]} {b1[0]:.4f} + {b3[1]} {b3[0]:.4f}) | 15 {s15:.4f} | 14 {s14:.4f} | "
            f"cuDNN {cud:.4f} ({cud / tot:.1f}x) | user 16#0 {u16:.4f} vs 15 {u15:.4f}")
    result["summary"] = summary
    fails = [c["tag"] for c in result["checks"] if not c.get("ok")]
    worst = max((max(c["errors"]) for c in result["checks"] if c.get("ok")), default=float("nan"))
    log(f"worst passing check {worst:.2e}; failures: {fails}")
    log("range worst: " + ", ".join(f"{k} {v['worst']:.1e}" for k, v in result["range"].items()))
    save()

    # ---- 7. Nsight Compute / compute-sanitizer (child processes)
    prof_cfgs = [(tag.split("/")[0], runners[tag][1].cfg) for tag in args.ncu_tags.split(",") if tag in runners]
    log(f"profiling {prof_cfgs}")
    if args.ncu and smoke_ok:
        wanted = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                  "dram__bytes_read.sum", "dram__bytes_write.sum",
                  "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                  "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                  "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                  "sm__inst_executed_pipe_tensor_op_gmma.sum",
                  "sm__warps_active.avg.pct_of_peak_sustained_active",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
                  "launch__registers_per_thread", "launch__occupancy_limit_registers", "sm__cycles_elapsed.avg.per_second"] + [
            f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in (
                "barrier", "long_scoreboard", "short_scoreboard", "math_pipe_throttle", "mio_throttle", "lg_throttle",
                "wait", "membar", "sleeping", "branch_resolving", "not_selected", "selected", "dispatch_stall",
                "no_instruction", "tex_throttle", "drain", "misc")]
        try:
            q = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True, timeout=60).stdout
            have = {line.split()[0] for line in q.splitlines() if line.strip()}
            metrics = [m for m in wanted if m.split(".")[0] in have]
            dropped = [m for m in wanted if m not in metrics]
            log(f"ncu metrics dropped (not on this chip): {dropped}")
            cmd = ["ncu", "--clock-control", "none", "-k", "regex:conv_wgmma", "--metrics", ",".join(metrics), "--csv",
                   sys.executable, __file__, "--profile", json.dumps({"b": 10000, "cfgs": prof_cfgs})]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
            (out_dir / "ncu.csv").write_text(proc.stdout + "\n" + proc.stderr[-5000:])
            for line in proc.stdout.splitlines():
                if "conv_wgmma" in line:
                    parts = [p.strip('"') for p in line.split('","')]
                    if len(parts) > 3:
                        log("ncu", parts[0], parts[-3], parts[-1])
        except Exception as exc:
            log(f"ncu failed: {exc}")
    if args.sanitize and smoke_ok:
        for tool in ("memcheck", "racecheck"):
            try:
                proc = subprocess.run(["compute-sanitizer", "--tool", tool, sys.executable, __file__, "--profile",
                                       json.dumps({"b": 3, "cfgs": prof_cfgs})], capture_output=True, text=True,
                                      timeout=150)
                tail = (proc.stdout + proc.stderr)[-1500:]
                result[f"sanitizer_{tool}"] = tail
                log(f"sanitizer {tool} rc {proc.returncode}: {tail[-600:]}")
            except Exception as exc:
                log(f"sanitizer {tool} failed: {exc}")
        save()


if __name__ == "__main__":
    main()
