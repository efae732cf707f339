#!/usr/bin/env python3
"""Issue 19, session 4: step 19 (wgmma, FP32-accurate over float's range) checked and timed beside
steps 17 and 15 in one call on the device.

    PYTHONUNBUFFERED=1 python3 scripts/bench_mlp_s19.py --out $OUT [--wgs 1,2,3] [--ncu] [--quick]

1. builds step 19 with nvcc (sm_90a) for each WGS (warpgroups per block) and prints ptxas;
2. checks vs float64 on fresh data with NaN-poisoned y at N in {4, 32, 36, 64, 100, 1000, 4096,
   12800, 65540}; the forced exact path (every column in FP32); a tile with one value below the
   window (that warp's columns take the exact path) and one above it;
3. the RANGE TEST (scripts/bench_mlp_hopper.py's cases: inputs and weights 1e-6 .. 1e6; rel L2 <= 1e-5);
4. times at 2,097,152 columns (graph of 5 calls) and 12,800 (graph of 20 calls, the book's method),
   per-call median / min / max over 30 replays, beside step 17 (this tree) and step 15;
5. --ncu: Nsight Compute on step 19 at 2,097,152 columns (issue, tensor pipe, DRAM).
JSON to $OUT/bench_mlp_s19.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_mlp_hopper as b  # noqa: E402
import bench_mlp_s17 as s17  # noqa: E402
from kernelbook import kernels, tma  # noqa: E402  (nvcc and ctypes only)

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("kb_pack19", ROOT / "kernelbook" / "mlp" / "pack.py")
pack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pack)
SRC19 = "19_wgmma_full_range.cu"   # the shipped kernel, in kernels/mlp


def cubin(defines: dict, src: str = SRC19) -> str:
    """Step 19 built for sm_90a by the package's nvcc path, its ptxas line printed."""
    out = Path("/tmp") / ("s19_" + Path(src).stem + "_".join(f"{k}{v}" for k, v in sorted(defines.items())) + ".cubin")
    path, report = kernels.compile_cubin("mlp/" + src, defines, arch="sm_90a", out=out)
    print("  " + "; ".join(f"{r.name}: {r.registers} registers, {r.spill_store_bytes} bytes spilled"
                           + (f", WGMMA SERIALIZED ({r.wgmma_serialized})" if r.wgmma_serialized else "")
                           for r in report))
    return str(path)


class Step19(b.Step):
    def __init__(self, wgs, force_exact=False, defines=None, src=SRC19):
        import cupy as cp

        super().__init__(f"19(wgs{wgs})" + "".join(f",{k}={v}" for k, v in (defines or {}).items())
                         + ("" if src == SRC19 else "@" + Path(src).stem)
                         + ("-EXACT" if force_exact else ""))
        self.fn = cp.RawModule(path=cubin({"WGS": wgs, "SPIN_LIMIT": 200000000, **(defines or {})}, src)).get_function(
            "wgmmaFullRangeKernel")
        self.smem = 1024 + 38912 + wgs * 2 * 20480
        self.fn.max_dynamic_shared_size_bytes = self.smem
        self.wgs, self.force_exact, self.maps = wgs, force_exact, {}

    def prepare(self, w_host, w_dev):
        import cupy as cp

        p = pack.wgmma_full_range(w_host)
        exact = p["exact_only"] or self.force_exact
        return cp.asarray(p["wgmma"]), cp.asarray(p["raw"]), int(exact)

    def xmap(self, x, n):
        import cupy as cp

        key = (x.data.ptr, n)
        if key not in self.maps:
            raw = tma.tensor_map(x.data.ptr, tma.DT_FLOAT32, [n, 71], [4 * n], [32, 80], 256)
            d = cp.empty(128, cp.uint8)
            d.set(np.frombuffer(raw, np.uint8))
            cp.cuda.Device().synchronize()
            self.maps[key] = d
        return self.maps[key]

    def launch(self, x, y, p, n, stream=None):
        assert n % 4 == 0 and x.data.ptr % 16 == 0 and y.data.ptr % 16 == 0
        tiles = -(-n // 64)
        grid = min(-(-tiles // self.wgs), b.sm_count())
        self.fn((grid,), (128 * self.wgs,), (self.xmap(x, n), x, p[0], p[1], y, np.int32(n), np.int32(p[2])),
                shared_mem=self.smem)


def checks(steps, rng, out):
    import cupy as cp

    print("\n== checks vs float64 (fresh data, poisoned output) ==")
    sizes = (4, 32, 36, 64, 100, 1000, 4096, 12800, 65540)
    for s in steps:
        worst, fails = 0.0, []
        for n in sizes:
            x = rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)
            w = b.make_weights(rng)
            try:
                e = b.rel_l2(b.run_step(s, x, w), b.forward(x, w, np.float64))
            except Exception as exc:
                e = float("inf")
                print(f"  {s.name} N={n}: {type(exc).__name__}: {exc}")
            if not e <= b.TOL:
                fails.append((n, e))
            worst = max(worst, e) if np.isfinite(e) else float("inf")
        # One value below the window (1e-9) and one above it (3e3) in two different warps' columns.
        n = 4096
        x = rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)
        x[5, 70] = 1e-9
        x[9, 1000] = 3e3
        w = b.make_weights(rng)
        try:
            e = b.rel_l2(b.run_step(s, x, w), b.forward(x, w, np.float64))
        except Exception as exc:
            e = float("inf")
            print(f"  {s.name} window case: {type(exc).__name__}: {exc}")
        if not e <= b.TOL:
            fails.append(("window", e))
        ok = not fails
        out[s.name] = {"worst": worst, "window_case": e, "passed": ok, "fails": fails[:5]}
        print(f"  {s.name:34s} {'ok' if ok else 'FAIL'}  worst {worst:.2e}  window case {e:.2e}"
              + (f"  {fails[:3]}" if fails else ""))
    cp.cuda.Device().synchronize()


def time_at(steps, n, per_graph, out):
    import cupy as cp

    rng = np.random.default_rng(11)
    w_host = b.make_weights(rng)
    w_dev = tuple(cp.asarray(a) for a in w_host)
    x = cp.asarray(rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32))
    y = cp.empty((b.OUT, n), cp.float32)
    print(f"\n== N={n}, graph of {per_graph} calls, 30 replays ==")
    for s in steps:
        try:
            prep = s.prepare(w_host, w_dev)
            med, lo, hi = b.graph_time([lambda: s.launch(x, y, prep, n)], repeats=30, per_graph=per_graph)
            out[f"{s.name}@{n}"] = {"median_us": med * 1e3, "min_us": lo * 1e3, "max_us": hi * 1e3,
                                    "calls_per_graph": per_graph}
            print(f"  {s.name:34s} {med * 1e3:9.2f} us  (min {lo * 1e3:.2f}, max {hi * 1e3:.2f})")
        except Exception:
            print(f"  {s.name}: ERROR\n{traceback.format_exc()}")


NCU_TARGET = '''
import sys
sys.path.insert(0, "{scripts}")
import numpy as np, cupy as cp
import bench_mlp_s19 as t
b = t.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
n = {n}
x = cp.asarray(rng.uniform(-1, 1, size=(71, n)).astype(np.float32))
y = cp.empty((4, n), cp.float32)
s0 = t.variant({first!r})
p0 = s0.prepare(w, None)
s0.launch(x, y, p0, n)   # skipped by ncu
for spec in {specs!r}:
    s = t.variant(spec)
    p = s.prepare(w, None)
    s.launch(x, y, p, n)
cp.cuda.Device().synchronize()
'''


def run_ncu(out_dir, variants, n, sections=None, metrics=None):
    script = out_dir / "ncu_target19.py"
    specs = [str(v) for v in variants]   # WGS numbers or variant specs
    script.write_text(NCU_TARGET.format(scripts=str(ROOT / "scripts"), specs=specs, n=n, first=specs[0]))
    sections = sections or ["SpeedOfLight", "WarpStateStats", "SchedulerStats", "ComputeWorkloadAnalysis",
                            "Occupancy", "MemoryWorkloadAnalysis"]
    extra = ["--metrics", metrics] if metrics else []
    cmd = ["ncu", *(a for sec in sections for a in ("--section", sec)), *extra, "-k", "wgmmaFullRangeKernel",
           "--launch-skip", "1", "--launch-count", str(len(specs)), sys.executable, str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    (out_dir / "ncu19.txt").write_text(proc.stdout)
    (out_dir / "ncu19.err").write_text(proc.stderr[-4000:])
    print(proc.stdout[-12000:])


def variant(spec: str) -> Step19:
    """'4:TWO_PASS=1,PIPE=2@_head19.cu' -> Step19(4, defines={...}, src=...)."""
    spec, _, src = spec.partition("@")
    w, _, defs = spec.partition(":")
    defines = dict(kv.split("=") for kv in defs.split(",") if kv)
    return Step19(int(w), defines={k: int(v) for k, v in defines.items()}, src=src or SRC19)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--wgs", default="2,3")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--ncu-only", default="", help="variant specs (';'-separated): only Nsight Compute on these (no checks, no timing)")
    ap.add_argument("--sections", default="", help="comma-separated ncu sections")
    ap.add_argument("--metrics", default="", help="ncu --metrics argument")
    ap.add_argument("--quick", action="store_true", help="no range test, no step 15/17 rows")
    ap.add_argument("--ncu-variants", default="", help="with --ncu: these variant specs (';'-separated)")
    ap.add_argument("--variants", default="",
                    help="builds to compare, ';'-separated: WGS[:NAME=VALUE,...][@FILE in kernels/mlp] (instead of --wgs)")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    wgs = [int(v) for v in args.wgs.split(",")]
    if args.ncu_only:
        run_ncu(out_dir, args.ncu_only.split(";"), b.N_LARGE,
                [v for v in args.sections.split(",") if v] or None, args.metrics or None)
        return
    res: dict = {"checks": {}, "range": {}, "times": {}}
    print("== build ==")
    steps = []
    builds = [lambda w=w: Step19(w) for w in wgs]
    if args.variants:
        builds = [lambda v=v: variant(v) for v in args.variants.split(";") if v]
    for ctor in builds + [lambda: Step19(wgs[0], force_exact=True)]:
        try:
            steps.append(ctor())
        except Exception:
            print("BUILD FAILED:\n" + traceback.format_exc())
    others = [] if args.quick else [s17.Shipped17(8, 2, src=s17.KDIR / "17_final_full_range.cu", tag="17"), b.Final15()]
    rng = np.random.default_rng(1234)
    checks(steps, rng, res["checks"])
    if not args.quick:
        b.range_test([s for s in steps if "EXACT" not in s.name] + steps[-1:], rng, res["range"])
    fast = [s for s in steps if not s.name.endswith("-EXACT")]
    if fast and not res["checks"].get(fast[0].name, {}).get("passed"):
        print("\n== the first build failed its checks: the same with B's LBO and SBO swapped ==")
        swapped = Step19(wgs[0], defines={"B_LBO": 256, "B_SBO": 128})
        swapped.name += "-swapped"
        checks([swapped], rng, res["checks"])
    passed = [s for s in fast if res["checks"].get(s.name, {}).get("passed")]
    if len(passed) < len(fast):
        print("\nnot timed (a check failed): " + ", ".join(s.name for s in fast if s not in passed))
    if passed:
        time_at(passed + others, b.N_LARGE, 5, res["times"])
        time_at(passed + others, b.N_SMALL, 20, res["times"])
        if args.ncu:
            run_ncu(out_dir, args.ncu_variants.split(";") if args.ncu_variants else [w for w in wgs if w >= 3], b.N_LARGE,
                    [v for v in args.sections.split(",") if v] or None, args.metrics or None)
    (out_dir / "bench_mlp_s19.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
