#!/usr/bin/env python3
"""Check and time LeNet step 15 (kernels/lenet/15_hopper_final.cu) against step 14, on the device.

Self-contained on purpose: it imports neither ``kernelbook`` nor anything of the repository's
Python package (which is being restructured), only CuPy and NumPy. It mirrors the launch logic
of ``kernelbook.lenet.hopper.HopperFinal`` (geometry, shared memory, persistent grid) in a few
lines below; keep the two in step when either changes.

    PYTHONUNBUFFERED=1 python3 scripts/bench_lenet_final.py            # check + time, JSON to $OUT
    python3 scripts/bench_lenet_final.py --ncu                         # ... then ncu on B=10000
    python3 scripts/bench_lenet_final.py --quick                       # fewer configurations

What it does:
1. builds every configuration in CONFIGS (CuPy RawModule = NVRTC; mma.sync needs sm_80+, so
   the default architecture of the device is enough: no sm_90a feature is used);
2. checks each against a float64 NumPy reference on fresh random inputs (the LeNet shapes at
   a small batch, odd shapes, extreme scales; the output poisoned with NaN before the launch),
   relative L2 error <= 1e-5;
3. times C1 and C3 at B = 100, 1000, 10000 with CUDA events (warm-up, >= 20 repeats, inputs
   rotated so that small batches do not run from L2), median / min / max;
4. optionally runs Nsight Compute (--clock-control none) once on the best B=10000 launches.
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
SRC15 = KDIR / "15_hopper_final.cu"
SRC14 = KDIR / "14_specialised.cu"
TOL = 1e-5
LAYERS = {  # name: (M, C, H, W, K)
    "C1": (4, 1, 86, 86, 7),
    "C3": (16, 4, 40, 40, 7),
}
BATCHES = (100, 1000, 10000)

# Step-15 configurations tried per layer (threads, tiles per warp, map groups per warp,
# prefetch, streaming stores, min blocks); the first of each list is the default.
CONFIGS = {
    # The chosen configuration per layer (HopperFinal's 'auto'), from sweeps 1-3 (NOTES.md step 15).
    "C1": [
        dict(threads=256, nt=4, mgw=1, prefetch=1, store_cs=1, min_blocks=2, mma_ordered=0, interleave=1),
        dict(threads=256, nt=2, mgw=1, prefetch=1, store_cs=1, min_blocks=2, mma_ordered=0, interleave=1),
    ],
    "C3": [
        dict(threads=256, nt=5, mgw=4, prefetch=1, store_cs=0, min_blocks=1, mma_ordered=1, interleave=0),
        dict(threads=416, nt=3, mgw=4, prefetch=1, store_cs=0, min_blocks=1, mma_ordered=1, interleave=0),
    ],
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def geometry(M, C, H, W, K, threads):
    """Mirror of the .cu's compile-time geometry (and of HopperFinal.geometry)."""
    hout, wout = H - K + 1, W - K + 1
    wp = cdiv(wout, 2)
    rsw = cdiv(max(2 * wp + 6, W), 2)
    npairs = cdiv(C * K, 2)
    ngrp = cdiv(M, 4)
    plane_words = C * H * rsw
    wf_words = npairs * ngrp * 32 * 4
    nelem = C * H * W
    npre = cdiv(nelem // 4, threads) if nelem % 4 == 0 else 1
    return dict(hout=hout, wout=wout, wp=wp, ntiles=cdiv(hout * wp, 16), smem=4 * (2 * plane_words + wf_words),
                npre=npre)


def defines15(M, C, H, W, K, cfg):
    return {"KS": K, "CIN": C, "HIN": H, "WIN": W, "MOUT": M, "THREADS": cfg["threads"], "NT": cfg["nt"],
            "MGW": cfg["mgw"], "PREFETCH": cfg["prefetch"], "STORE_CS": cfg["store_cs"],
            "MIN_BLOCKS": cfg["min_blocks"], "MMA_ORDERED": cfg.get("mma_ordered", 1),
            "INTERLEAVE": cfg.get("interleave", 1)}


def supported15(M, C, H, W, K, cfg) -> str | None:
    """None when conv_hopper takes the shape, else why not (the generic kernel runs then)."""
    if K > 7:
        return f"K={K} > 7: the 8-column window holds both offsets only for K <= 7"
    geo = geometry(M, C, H, W, K, cfg["threads"])
    if geo["smem"] > 200 * 1024:
        return f"{geo['smem']} bytes of shared memory"
    if geo["npre"] > 16:
        return f"{geo['npre']} float4 registers per thread for the image"
    return None


_modules: dict = {}


def module(src: Path, defines: dict):
    import cupy as cp

    opts = ("--std=c++17", f"-I{KDIR}") + tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))
    key = (str(src), opts)
    if key not in _modules:
        mod = cp.RawModule(code=src.read_text(), options=opts)
        mod.compile()
        _modules[key] = mod
    return _modules[key]


def blocks_per_sm(kernel, threads: int, smem: int, dev) -> int:
    """Resident blocks per SM from the compiled kernel's registers and the shared memory."""
    regs = kernel.num_regs
    regs_per_warp = cdiv(regs * 32, 256) * 256
    warps = threads // 32
    by_regs = (65536 // regs_per_warp) // warps
    smem_sm = dev.attributes.get("MaxSharedMemoryPerMultiprocessor", 233472)
    by_smem = smem_sm // (smem + 1024) if smem else 32
    by_threads = 2048 // threads
    return max(1, min(by_regs, by_smem, by_threads, 32))


class Step15:
    """One configuration of conv_hopper for one shape (or conv_generic where it does not apply)."""

    def __init__(self, M, C, H, W, K, cfg):
        import cupy as cp

        self.shape = (M, C, H, W, K)
        self.cfg = cfg
        self.reason = supported15(M, C, H, W, K, cfg)
        dev = cp.cuda.Device()
        self.sms = dev.attributes["MultiProcessorCount"]
        if self.reason is None:
            self.geo = geometry(M, C, H, W, K, cfg["threads"])
            self.kernel = module(SRC15, defines15(M, C, H, W, K, cfg)).get_function("conv_hopper")
            if self.geo["smem"] > 48 * 1024:
                self.kernel.max_dynamic_shared_size_bytes = self.geo["smem"]
            self.per_sm = blocks_per_sm(self.kernel, cfg["threads"], self.geo["smem"], dev)
        else:
            self.kernel = module(SRC15, {"GENERIC_ONLY": 1}).get_function("conv_generic")

    def __call__(self, y, x, k):
        M, C, H, W, K = self.shape
        B = x.shape[0]
        if self.reason is None:
            grid = min(B, self.sms * self.per_sm) if self.cfg.get("persistent", 1) else B
            self.kernel((grid,), (self.cfg["threads"],), (y, x, k, np.int32(B)), shared_mem=self.geo["smem"])
        else:
            n = B * M * (H - K + 1) * (W - K + 1)
            self.kernel((min(cdiv(n, 256), 65535 * 8),), (256,),
                        (y, x, k, *(np.int32(v) for v in (B, M, C, H, W, K))))

    def describe(self):
        if self.reason is not None:
            return {"kernel": "conv_generic", "reason": self.reason}
        return {"kernel": "conv_hopper", **self.cfg, "regs": self.kernel.num_regs, "blocks_per_sm": self.per_sm,
                "smem": self.geo["smem"]}


class Step14:
    """kernels/lenet/14_specialised.cu as kernelbook.lenet.gemm.Final plans it for the two LeNet layers
    (its 'auto' plan, written out here: C1 FP32 with constant-memory weights, C3 3xTF32)."""

    FB = {"FB_BM": 16, "FB_BN": 128, "FB_BK": 8, "FB_TM": 4, "FB_TN": 4}

    def __init__(self, layer):
        self.layer = layer
        if layer == "C1":
            self.defines = {"KS": 7, "CIN": 1, "HIN": 86, "WIN": 86, "MOUT": 4, "MG": 4, "TW": 4, "BAND": 80,
                            "THREADS": 320, "MIN_BLOCKS": 4, "WEIGHTS_SMEM": 0, "UNROLL_P": 0, **self.FB}
            self.mod = module(SRC14, self.defines)
            self.kernel = self.mod.get_function("conv_direct")
            self.smem = 0
        else:
            self.defines = {"MATH_3XTF32": 1, "KS": 7, "CIN": 4, "HIN": 40, "WIN": 40, "MOUT": 16, "MG": 16, "TW": 4,
                            "BAND": 34, "THREADS": 320, "MIN_BLOCKS": 2, "WEIGHTS_SMEM": 1, "NT": 4, **self.FB}
            self.mod = module(SRC14, self.defines)
            self.kernel = self.mod.get_function("conv_direct_3xtf32")
            self.smem = 84992
            self.kernel.max_dynamic_shared_size_bytes = self.smem
            self.kernel.preferred_shared_memory_carveout = 100

    def __call__(self, y, x, k):
        B = x.shape[0]
        if self.layer == "C1":
            w = self.mod.get_global("c_weights")
            w.copy_from_device_async(k.data, 4 * k.size)
            self.kernel((B, 1), (320,), (y, x, k, np.int32(B)))
        else:
            self.kernel((B, 1), (320,), (y, x, k, np.int32(B)), shared_mem=self.smem)


def reference(x, k):
    """float64 valid convolution on the CPU."""
    from numpy.lib.stride_tricks import sliding_window_view

    K = k.shape[-1]
    win = sliding_window_view(x.astype(np.float64), (K, K), axis=(2, 3))  # B C Ho Wo K K
    return np.einsum("bchwpq,mcpq->bmhw", win, k.astype(np.float64), optimize=True)


def check(run, M, C, H, W, K, B, rng, x_scale=1.0, k_scale=1.0):
    import cupy as cp

    x = (rng.standard_normal((B, C, H, W)) * x_scale).astype(np.float32)
    k = (rng.standard_normal((M, C, K, K)) * k_scale).astype(np.float32)
    y = cp.full((B, M, H - K + 1, W - K + 1), np.nan, dtype=cp.float32)
    run(y, cp.asarray(x), cp.asarray(k))
    cp.cuda.Device().synchronize()
    out = y.get().astype(np.float64)
    ref = reference(x, k)
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def time_launch(run, M, C, H, W, K, B, rng, warmup=3, repeats=20):
    """Event-timed launches over rotated input/output buffers; returns per-launch ms samples."""
    import cupy as cp

    xb = B * C * H * W * 4
    nrot = max(1, min(8, cdiv(200 * 2**20, xb)))  # >= 200 MB of inputs: small batches miss L2
    xs = [cp.asarray(rng.standard_normal((B, C, H, W)).astype(np.float32)) for _ in range(nrot)]
    ys = [cp.empty((B, M, H - K + 1, W - K + 1), dtype=cp.float32) for _ in range(nrot)]
    k = cp.asarray(rng.standard_normal((M, C, K, K)).astype(np.float32))
    for i in range(warmup):
        run(ys[i % nrot], xs[i % nrot], k)
    cp.cuda.Device().synchronize()
    samples = []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for i in range(repeats):
        j = i % nrot
        start.record()
        run(ys[j], xs[j], k)
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop))
    del xs, ys
    cp.get_default_memory_pool().free_all_blocks()
    return samples


ODD_SHAPES = [  # (M, C, H, W, K, B): scalar loads, odd W_out, partial map groups, K < 7, K = 1, generic
    (6, 3, 21, 19, 5, 5),
    (9, 2, 17, 30, 7, 3),
    (4, 1, 9, 9, 3, 4),
    (7, 5, 6, 10, 1, 2),
    (16, 4, 40, 40, 7, 1),
    (4, 1, 86, 86, 7, 3),
    (5, 2, 20, 20, 9, 2),   # K > 7: conv_generic
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="first configuration of each layer only")
    ap.add_argument("--ncu", action="store_true", help="profile the best B=10000 launches with Nsight Compute")
    ap.add_argument("--profile", default=None, help=argparse.SUPPRESS)  # internal: launches for ncu
    ap.add_argument("--no-old", action="store_true", help="skip step 14")
    args = ap.parse_args()

    import cupy as cp

    out_dir = Path(os.environ.get("OUT", "."))
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    if args.profile:  # one launch per named kernel at B=10000, for ncu
        sel = json.loads(args.profile)
        rng = np.random.default_rng(1)
        for layer, cfg in sel.items():
            M, C, H, W, K = LAYERS[layer]
            run = Step15(M, C, H, W, K, cfg) if cfg != "old" else Step14(layer)
            x = cp.asarray(rng.standard_normal((10000, C, H, W)).astype(np.float32))
            k = cp.asarray(rng.standard_normal((M, C, K, K)).astype(np.float32))
            y = cp.empty((10000, M, H - K + 1, W - K + 1), dtype=cp.float32)
            run(y, x, k)
            cp.cuda.Device().synchronize()
        return

    rng = np.random.default_rng(int(time.time()))
    result = {"device": name, "cupy": cp.__version__, "tolerance": TOL, "checks": [], "timings": []}
    configs = {layer: (cfgs[:1] if args.quick else cfgs) for layer, cfgs in CONFIGS.items()}

    # ---- 1. build + check every configuration (LeNet shapes at small B, scaled inputs)
    runners = {}
    for layer, cfgs in configs.items():
        M, C, H, W, K = LAYERS[layer]
        for i, cfg in enumerate(cfgs):
            tag = f"{layer}/15#{i}"
            try:
                t0 = time.perf_counter()
                run = Step15(M, C, H, W, K, cfg)
                build_s = time.perf_counter() - t0
            except Exception as exc:  # a configuration that does not build is reported, not fatal
                print(f"{tag}: BUILD FAILED: {exc}"[:2000])
                result["checks"].append({"tag": tag, "cfg": cfg, "error": str(exc)[:4000]})
                continue
            try:
                errs = [check(run, M, C, H, W, K, 7, rng),
                        check(run, M, C, H, W, K, 3, rng, x_scale=1e-6, k_scale=1e3),
                        check(run, M, C, H, W, K, 3, rng, x_scale=1e4, k_scale=1e-5)]
            except Exception as exc:  # a fault is sticky: report it and stop
                print(f"{tag} {run.describe()}: FAULT {exc}"[:1000])
                sys.stdout.flush()
                os._exit(1)
            ok = all(e <= TOL for e in errs)
            print(f"{tag} {run.describe()} build {build_s:.1f}s err {max(errs):.2e} {'ok' if ok else 'FAIL'}")
            result["checks"].append({"tag": tag, "cfg": cfg, "describe": run.describe(), "errors": errs, "ok": ok})
            if ok:
                runners[tag] = run
        if not args.no_old:
            tag = f"{layer}/14"
            try:
                run = Step14(layer)
                err = check(run, M, C, H, W, K, 7, rng)
                print(f"{tag} err {err:.2e}")
                result["checks"].append({"tag": tag, "errors": [err], "ok": err <= TOL})
                runners[tag] = run
            except Exception as exc:
                print(f"{tag}: FAILED: {exc}"[:2000])
    # ---- 2. timings
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_lenet_final.json").write_text(json.dumps(result, indent=1))
    best = {}
    for layer in LAYERS:
        M, C, H, W, K = LAYERS[layer]
        for tag, run in runners.items():
            if not tag.startswith(layer):
                continue
            for B in BATCHES:
                s = time_launch(run, M, C, H, W, K, B, rng, repeats=30 if B < 10000 else 20)
                med = float(np.median(s))
                result["timings"].append({"tag": tag, "layer": layer, "B": B, "median_ms": med, "min_ms": min(s),
                                          "max_ms": max(s), "samples_ms": s,
                                          "cfg": getattr(run, "cfg", "old")})
                key = (layer, B)
                if tag.split("/")[1] != "14" and (key not in best or med < best[key][1]):
                    best[key] = (tag, med)

    # ---- 2b. odd shapes (after the timings: a fault here cannot cost the timings)
    for (M, C, H, W, K, B) in ODD_SHAPES:
        for i, cfg in enumerate(configs["C3"][:2] + configs["C1"][:1]):
            try:
                run = Step15(M, C, H, W, K, cfg)
                err = check(run, M, C, H, W, K, B, rng)
                ok = err <= TOL
                desc = run.describe()
            except Exception as exc:
                err, ok, desc = float("nan"), False, {"error": str(exc)[:2000]}
                if "CUDA_ERROR" in str(exc) or "cudaError" in str(exc):  # sticky: nothing more can run
                    print(f"odd {(M, C, H, W, K, B)} cfg#{i}: {exc}"[:500])
                    result["checks"].append({"tag": f"odd{(M, C, H, W, K, B)}#{i}", "describe": desc, "errors": [err], "ok": ok})
                    (out_dir / "bench_lenet_final.json").write_text(json.dumps(result, indent=1))
                    sys.stdout.flush()
                    os._exit(1)
            print(f"odd {(M, C, H, W, K, B)} cfg#{i} {desc.get('kernel')} err {err:.2e} {'ok' if ok else 'FAIL'}")
            result["checks"].append({"tag": f"odd{(M, C, H, W, K, B)}#{i}", "describe": desc, "errors": [err], "ok": ok})

    # ---- 3. table
    old = {(t["layer"], t["B"]): t["median_ms"] for t in result["timings"] if t["tag"].endswith("/14")}
    print()
    print(f"{'tag':10} {'B':>6} {'median':>8} {'min':>8} {'max':>8}  cfg")
    for t in result["timings"]:
        cfg = t["cfg"] if t["cfg"] == "old" else "T{threads} NT{nt} MGW{mgw} PF{prefetch} CS{store_cs} MB{min_blocks}".format(**t["cfg"])
        if t["cfg"] != "old" and not t["cfg"].get("persistent", 1):
            cfg += " grid=B"
        if t["cfg"] != "old" and not t["cfg"].get("mma_ordered", 1):
            cfg += " free-mma"
        if t["cfg"] != "old" and not t["cfg"].get("interleave", 1):
            cfg += " per-tile"
        print(f"{t['tag']:10} {t['B']:6d} {t['median_ms']:8.4f} {t['min_ms']:8.4f} {t['max_ms']:8.4f}  {cfg}")
    print()
    print("best step 15 per batch (median ms):  B | C1 | C3 | C1+C3 | step 14 C1+C3")
    for B in BATCHES:
        c1, c3 = best.get(("C1", B)), best.get(("C3", B))
        if c1 and c3:
            o = (old.get(("C1", B), float("nan")) + old.get(("C3", B), float("nan")))
            print(f"  {B:6d} | {c1[1]:.4f} ({c1[0]}) | {c3[1]:.4f} ({c3[0]}) | {c1[1] + c3[1]:.4f} | {o:.4f}")
    result["best"] = {f"{k[0]}@{k[1]}": v for k, v in best.items()}
    worst = max((max(c["errors"]) for c in result["checks"] if c.get("ok")), default=float("nan"))
    print(f"largest error of passing checks: {worst:.2e}; failures: "
          f"{[c['tag'] for c in result['checks'] if not c.get('ok')]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_lenet_final.json").write_text(json.dumps(result, indent=1))

    # ---- 4. Nsight Compute on the best B=10000 launches (one launch each, a few metrics)
    if args.ncu and ("C1", 10000) in best and ("C3", 10000) in best:
        cfgs = {layer: runners[best[(layer, 10000)][0]].cfg for layer in LAYERS}
        metrics = ",".join([
            "gpu__time_duration.sum",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__warps_active.avg.pct_of_peak_sustained_active",
            "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
            "launch__registers_per_thread",
            "launch__occupancy_limit_registers",
        ] + [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in (
            "barrier", "long_scoreboard", "short_scoreboard", "math_pipe_throttle", "mio_throttle", "lg_throttle",
            "wait", "not_selected", "selected", "dispatch_stall", "drain", "no_instruction")])
        cmd = ["ncu", "--clock-control", "none", "-k", "regex:conv_hopper", "--metrics", metrics, "--csv",
               sys.executable, __file__, "--profile", json.dumps(cfgs)]
        print(" ".join(cmd[:8]), "...")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        (out_dir / "ncu.csv").write_text(proc.stdout + "\n" + proc.stderr)
        for line in proc.stdout.splitlines():
            if '"conv_hopper"' in line or "conv_hopper" in line:
                parts = [p.strip('"') for p in line.split('","')]
                if len(parts) > 3:
                    print("ncu", parts[0].strip('"'), parts[-3].replace("smsp__average_warps_issue_", ""),
                          parts[-1])


if __name__ == "__main__":
    main()
