#!/usr/bin/env python3
"""Session 3, FP16 step (helper f18): step 14's FP16 network fed by the TMA, checked and timed beside
step 14 and PyTorch FP16 in one process on the device.

    PYTHONUNBUFFERED=1 python3 scripts/bench_mlp_f18.py --out $OUT [--ncu]

Candidates (now MLP step 18, kernels/mlp/18_tensor_core_fp16_tma.cu + tma_fp16.cuh; the device calls
of NOTES "Session 3, FP16 step" ran the same code as two files, 18_tma_ring_fp16.cu and
18_tma_stages_fp16.cu, kept in git history at commit 1fed618 under data/bench/mlp/s3-fp16/):
tmaRingHalfKernel (each warp keeps RING 32-column tiles of x in shared memory, filled by
cp.async.bulk.tensor.2d with a 128-byte swizzle) and tmaStagesHalfKernel (a producer warp fills
block-wide stages of WARPS adjacent tiles). Shapes the TMA cannot take
(n % 4 != 0, x or y not 16-byte aligned) go to step 14's kernel, as the package would.
1. checks: every variant at N in {1, 31, 33, 12799, 12800, 16239, 2,097,152} plus TMA-path shapes
   with ragged last tiles {4, 36, 100, 12804, 65540}, x offset by 1 float (fallback) and by 4 floats
   (TMA from a 16-byte, not 128-byte, aligned start); output poisoned with NaN before each launch;
   the study's FP16 judge (scaled absolute difference vs the float32 CPU forward, <= 0.15) and the
   relative L2 error vs float64, printed;
2. timing: 2,097,152 columns (CUDA graph of 20 calls, 30 replays, per-call median/min/max) and
   12,800 columns (graph of 20 calls on one input, 30 replays), step 14 and PyTorch FP32/TF32/FP16;
3. --ncu: Nsight Compute on the fastest variant and step 14 at 2,097,152 columns.
Reuses scripts/bench_mlp_hopper.py (data, references, packing, graph timer, PyTorch rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # kernelbook.tma (ctypes only)
import bench_mlp_hopper as b  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "kernels" / "mlp"
SOURCE = "18_tensor_core_fp16_tma.cu"
_mods: dict = {}


def module(src: str, defines: dict):
    """A kernel file of kernels/mlp (NVRTC, the device's architecture)."""
    import cupy as cp

    opts = ("--std=c++17", f"-I{KDIR}") + tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))
    key = (src, opts)
    if key not in _mods:
        _mods[key] = cp.RawModule(code=(KDIR / src).read_text(), options=opts)
        _mods[key].compile()
    return _mods[key]
SLOT = 72 * 128
# (warps, ring, blocks/SM, L2 promotion code: 0 none, 2 128 B, 3 256 B)
VARIANTS = [(8, 2, 1, 3)]   # call 1 also timed (8,2,1,{0,2}), (4,4,1,2), (4,5,1,2), (6,3,1,2), (10,2,1,2), (4,2,2,2), (16,1,1,2)
# stage variants: (consumer warps, stages, blocks/SM, L2 promotion)
STAGE_VARIANTS = [(8, 2, 1, 3), (8, 2, 1, 2), (7, 3, 1, 3), (6, 3, 1, 3), (4, 4, 1, 3), (4, 2, 2, 3)]
TIME_SIZES = (b.N_LARGE, b.N_SMALL)
CHECK_SIZES = (1, 31, 33, 12799, 12800, 16239, 4, 36, 100, 12804, 65540, b.N_LARGE)


PROMOTION_BYTES = {0: 0, 1: 64, 2: 128, 3: 256}   # the variants' L2 promotion codes


def x_map(ptr, n, rows, promo):
    """x (71, n) float32 as a 2-D tensor, box 32 columns x ``rows`` rows, 128-byte swizzle, OOB zeros
    (the package's descriptor, kernelbook/mlp/tensor.py's x_descriptor, with the bench's box)."""
    from kernelbook import tma

    return tma.tensor_map(ptr, tma.DT_FLOAT32, [n, 71], [4 * n], [32, rows], l2_promotion=PROMOTION_BYTES[promo])


def box_rows():
    """72: the kernels need the box taller than the tensor (row 71 zero-filled by the TMA)."""
    return 72


class Tma(b.Step):
    fp32 = False

    def __init__(self, warps, ring, per_sm, promo, fallback):
        super().__init__(f"18tma(w{warps},r{ring},b{per_sm},p{promo})")
        rows = box_rows()
        self.fn = module(SOURCE, {"RING_WARPS": warps, "RING_SLOTS": ring, "RING_MIN_BLOCKS": per_sm,
                                  "SPIN_LIMIT": "(1LL<<24)"}).get_function("tmaRingHalfKernel")
        self.smem = warps * ring * SLOT + 1024
        self.fn.max_dynamic_shared_size_bytes = self.smem
        self.warps, self.ring, self.per_sm, self.promo, self.rows = warps, ring, per_sm, promo, rows
        self.fallback, self.maps, self.tma_calls = fallback, {}, 0
        self.occ = b.occupancy(self.fn, 32 * warps, self.smem)

    def prepare(self, w_host, w_dev):
        import cupy as cp

        return cp.asarray(b.f16_fragments(w_host))

    def launch(self, x, y, p, n, stream=None):
        import cupy as cp

        if n % 4 or x.data.ptr % 16 or y.data.ptr % 16:
            return self.fallback.launch(x, y, p, n)
        key = (x.data.ptr, n)
        m = self.maps.get(key)
        if m is None:
            m = self.maps[key] = cp.asarray(np.frombuffer(x_map(x.data.ptr, n, self.rows, self.promo), np.uint8))
        grid, block = self.grid_block(n)
        self.tma_calls += 1
        self.fn((grid,), (block,), (m, p, y, np.int32(n)), shared_mem=self.smem)

    def grid_block(self, n):
        tiles = -(-n // 32)
        return b.persistent(-(-tiles // self.warps), self.per_sm), 32 * self.warps


class Stages(Tma):
    """tmaStagesHalfKernel: a producer warp fills stages of ``warps`` adjacent tiles."""

    def __init__(self, warps, stages, per_sm, promo, fallback):
        b.Step.__init__(self, f"18stg(w{warps},s{stages},b{per_sm},p{promo})")
        rows = box_rows()
        self.fn = module(SOURCE, {"STAGE_WARPS": warps, "STAGES": stages,
                                  "SPIN_LIMIT": "(1LL<<24)"}).get_function("tmaStagesHalfKernel")
        self.smem = warps * stages * SLOT + 1024
        self.fn.max_dynamic_shared_size_bytes = self.smem
        self.warps, self.ring, self.per_sm, self.promo, self.rows = warps, stages, per_sm, promo, rows
        self.fallback, self.maps, self.tma_calls = fallback, {}, 0
        self.occ = b.occupancy(self.fn, 32 * (warps + 1), self.smem)

    def grid_block(self, n):
        return b.persistent(-(-n // (32 * self.warps)), self.per_sm), 32 * (self.warps + 1)


def step14():
    return b.TensorCore("14_tensor_core_fp16", "14_tensor_core_fp16.cu", "fusedTensorCoreHalfKernel",
                        8, 2, 1, b.f16_fragments, fp32=False)


def run(step, x, w_host, n):
    import cupy as cp

    w_dev = tuple(cp.asarray(a) for a in w_host)
    p = step.prepare(w_host, w_dev)
    y = cp.full((b.OUT, n), np.nan, dtype=cp.float32)
    step.launch(x, y, p, n)
    cp.cuda.Device().synchronize()
    return y.get()


def checks(steps, out):
    import cupy as cp

    print("\n== checks (output poisoned; judge: scaled |diff| vs float32 CPU <= 0.15; rel L2 vs float64) ==")
    rng = np.random.default_rng(7)
    cases = [(f"N={n}", n, 0) for n in CHECK_SIZES] + [("x+1float N=12800", 12800, 1), ("x+4floats N=12800", 12800, 4),
                                                         ("x+4floats N=12804", 12804, 4)]
    res = {s.name: {"cases": {}, "passed": True} for s in steps}
    for label, n, off in cases:
        xh = rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)
        w = b.make_weights(rng)
        r32 = b.forward(xh, w, np.float32).astype(np.float64)
        r64 = b.forward(xh, w, np.float64)
        buf = cp.empty(b.IN * n + off, cp.float32)
        x = buf[off:].reshape(b.IN, n)
        x[...] = cp.asarray(xh)
        for s in steps:
            before = getattr(s, "tma_calls", 0)
            try:
                got = run(s, x, w, n)
                d, e = b.scaled_abs_diff(got, r32), b.rel_l2(got, r64)
            except Exception as exc:
                d = e = float("inf")
                print(f"  {s.name} {label}: {type(exc).__name__}: {exc}")
            path = "tma" if getattr(s, "tma_calls", 0) > before else "14"
            ok = d <= b.HALF_TOL
            res[s.name]["cases"][label] = {"scaled_abs_diff": d, "rel_l2_f64": e, "path": path, "ok": ok}
            res[s.name]["passed"] &= ok
        del buf, x
    for s in steps:
        c = res[s.name]["cases"]
        worst = max(v["scaled_abs_diff"] for v in c.values())
        worst64 = max(v["rel_l2_f64"] for v in c.values())
        tma = sum(v["path"] == "tma" for v in c.values())
        print(f"  {s.name:28s} {'ok' if res[s.name]['passed'] else 'FAIL'}  worst scaled diff {worst:.3e}"
              f"  worst rel L2 f64 {worst64:.3e}  ({tma}/{len(c)} cases on the TMA path)")
    out["checks"] = res
    return {s.name for s in steps if res[s.name]["passed"]}


def timing(steps, out):
    import cupy as cp

    rng = np.random.default_rng(11)
    w_host = b.make_weights(rng)
    w_dev = tuple(cp.asarray(a) for a in w_host)
    res = {}
    for n in TIME_SIZES:
        x = cp.asarray(rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32))
        y = cp.empty((b.OUT, n), cp.float32)
        print(f"\n== timing at N={n} (one CUDA graph of 20 calls on one input, 30 replays, per call) ==")
        for s in steps:
            try:
                p = s.prepare(w_host, w_dev)
                med, lo, hi = b.graph_time([lambda: s.launch(x, y, p, n)], repeats=30, per_graph=20)
                res[f"{s.name}@{n}"] = {"median_ms": med, "min_ms": lo, "max_ms": hi}
                print(f"  {s.name:28s} {med * 1e3:9.2f} us  (min {lo * 1e3:.2f}, max {hi * 1e3:.2f})")
            except Exception:
                print(f"  {s.name}: ERROR\n{traceback.format_exc()}")
        res.update(b.time_torch(w_host, [x], n))
        del x, y
    out["timing"] = res
    return res


NCU_TARGET = '''
import sys
sys.path.insert(0, "{root}/scripts")
import numpy as np, cupy as cp
import bench_mlp_hopper as b, bench_mlp_f18 as f
rng = np.random.default_rng(3)
w = b.make_weights(rng)
wd = tuple(cp.asarray(a) for a in w)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
s14 = f.step14()
for s in (f.{cls}({cfg}, s14), s14):
    p = s.prepare(w, wd)
    s.launch(x, y, p, b.N_LARGE)
cp.cuda.Device().synchronize()
'''


def run_ncu(out_dir, cls, cfg, out):
    script = out_dir / "ncu_target.py"
    script.write_text(NCU_TARGET.format(root=str(ROOT), cls=cls, cfg=", ".join(map(str, cfg))))
    metrics = ",".join([
        "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "smsp__inst_executed.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_barrier.ratio",
        "smsp__average_warp_latency_issue_stalled_membar.ratio",
        "smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_mio_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_lg_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_wait.ratio",
        "smsp__average_warp_latency_issue_stalled_selected.ratio",
        "smsp__average_warp_latency_issue_stalled_not_selected.ratio",
        "smsp__average_warp_latency_issue_stalled_sleeping.ratio",
        "smsp__average_warp_latency_issue_stalled_branch_resolving.ratio",
        "smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio",
        "smsp__average_warp_latency_issue_stalled_no_instruction.ratio",
        "sm__cycles_elapsed.avg.per_second",
    ])
    cmd = (f"ncu --clock-control none --metrics {metrics} --csv -k regex:'tmaRingHalf|tmaStagesHalf|fusedTensorCoreHalf' "
           f"python3 {script}")
    try:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        print("ncu timed out")
        return
    (out_dir / "ncu.csv").write_text(p.stdout + "\n" + p.stderr[-3000:])
    rows = [l for l in p.stdout.splitlines() if l.startswith('"')]
    print(f"\n== ncu ({len(rows)} rows, full CSV in ncu.csv) ==")
    table = {}
    for l in rows[1:]:
        parts = [c.strip('"') for c in l.split('","')]
        if len(parts) > 14:
            table.setdefault(parts[4][:24], {})[parts[-3]] = parts[-1].strip('"')
    for k, v in table.items():
        print(f"  {k}")
        for m, val in v.items():
            print(f"    {m:75s} {val}")
    out["ncu"] = table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--skip-large-check", action="store_true")
    ap.add_argument("--time-n", default="", help="comma-separated column counts to time instead of "
                    "2097152,12800; e.g. 2097152,2097184 tests whether x's power-of-two row stride costs DRAM")
    ap.add_argument("--only", default="", help="name prefixes of the candidates to build, separated by |, e.g. '18stg(w8,s2,b1,p3)|18tma(w8'")
    a = ap.parse_args()
    global TIME_SIZES, VARIANTS, STAGE_VARIANTS
    if a.time_n:
        TIME_SIZES = tuple(int(v) for v in a.time_n.split(","))
    if a.only:
        keep = tuple(a.only.split("|"))
        VARIANTS = [v for v in VARIANTS if f"18tma(w{v[0]},r{v[1]},b{v[2]},p{v[3]})".startswith(keep)]
        STAGE_VARIANTS = [v for v in STAGE_VARIANTS if f"18stg(w{v[0]},s{v[1]},b{v[2]},p{v[3]})".startswith(keep)]
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import cupy as cp

    out = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": b.sm_count(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(out)
    t0 = time.time()
    s14 = step14()
    steps = [s14]
    for v in VARIANTS:
        try:
            s = Tma(*v, s14)
            print(f"  built {s.name}: occupancy {s.occ} blocks/SM, smem {s.smem} B")
            if s.occ >= 1:
                steps.append(s)
        except Exception:
            print(f"  {v}: BUILD ERROR\n{traceback.format_exc()}")
    for v in STAGE_VARIANTS:
        try:
            s = Stages(*v, s14)
            print(f"  built {s.name}: occupancy {s.occ} blocks/SM, smem {s.smem} B")
            if s.occ >= v[2]:
                steps.append(s)
        except Exception:
            print(f"  {v}: BUILD ERROR\n{traceback.format_exc()}")
    out["box_rows"] = box_rows()
    if a.skip_large_check:
        global CHECK_SIZES  # noqa: PLW0603
        CHECK_SIZES = tuple(n for n in CHECK_SIZES if n != b.N_LARGE)
    try:
        body(a, out, out_dir, steps, t0)
    finally:
        (out_dir / "bench_mlp_f18.json").write_text(json.dumps(out, indent=1, default=str))


def body(a, out, out_dir, steps, t0):
    good = checks(steps, out)
    print(f"  checks done at {time.time() - t0:.0f} s")
    timed = [s for s in steps if s.name in good]
    res = timing(timed, out)
    print(f"  timing done at {time.time() - t0:.0f} s")
    cands = [s for s in timed if isinstance(s, Tma)]
    best = min(cands, key=lambda s: res.get(f"{s.name}@{b.N_LARGE}", {}).get("median_ms", 9e9)) if cands else None
    out["best"] = best.name if best else None
    if a.ncu and best is not None:
        run_ncu(out_dir, type(best).__name__, (best.warps, best.ring, best.per_sm, best.promo), out)
    print(f"\n== summary: per-call median (min-max) in ms at N = {', '.join(map(str, TIME_SIZES))} ==")
    for nm in [s.name for s in timed] + ["pytorch-fp16", "pytorch-fp32"]:
        cells = [res.get(f"{nm}@{n}") for n in TIME_SIZES]
        print(f"  {nm:28s} " + "   ".join(f"{c['median_ms']:.4f} ({c['min_ms']:.4f}-{c['max_ms']:.4f})" if c else "-"
                                          for c in cells))
    print(f"  best: {out['best']}; total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
