#!/usr/bin/env python3
"""Issue 19, phase 2: check and time step 17 (FP32-accurate over FP32's range on tensor cores) as
rewritten (x staged per warp with cp.async, mma's of one accumulator spread apart), beside its
previous versions, steps 14, 15, 16 and PyTorch FP32/TF32/FP16, on the device, in one call.

    PYTHONUNBUFFERED=1 python3 scripts/bench_mlp_final.py --out $OUT [--ncu] [--prev DIR]

Reuses scripts/bench_mlp_hopper.py (data, float64 reference, packings, range cases, CUDA-graph
timer, PyTorch rows); adds:
1. build: every variant of kernels/mlp/17_final_full_range.cu listed in VARIANTS (warps, m-tiles,
   blocks/SM = __launch_bounds__ minimum, n-tile groups); the unmeasured candidate
   data/bench/mlp/14_tensor_core_fp16.next.cu (step 14 with x staged ahead; measured slower and removed:
   restore it from history as data/bench/mlp/NOTES.md says) in four launch shapes, when present;
   and, with --prev DIR, older versions kept there (17_prev.cu: the first step 17; 16_next.cu);
2. checks vs float64 (FP16 steps: scaled absolute difference vs float32) on fresh data, output
   poisoned with NaN, at N = 1 .. 12,805, incl. N % 4 != 0 and a misaligned x (both take the
   4-byte staging path);
3. the RANGE TEST (inputs and each layer's weights scaled 1e-6 .. 1e6, mixed magnitudes) on the
   new variants and the forced exact path;
4. timing at 2,097,152 and 12,800 columns (CUDA graphs, 30 replays, median/min/max);
5. host cost of kernelbook.mlp.forward (scripts/bench_mlp_forward_host.py, subprocess);
6. --ncu: Nsight Compute on the new default, the previous 17, 15 and 14 at 2,097,152 columns.
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
import bench_mlp_hopper as b  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "kernels" / "mlp"
STAGE_BYTES = 80 * 20 * 4
# (warps, m_tiles, blocks/SM, NT_GROUPS)
VARIANTS = [(8, 1, 1, 2), (8, 1, 2, 2), (16, 1, 1, 2), (4, 1, 4, 2), (4, 1, 2, 2), (6, 1, 2, 2)]
_mods = {}


def module_at(path: Path, defines: dict):
    import cupy as cp

    opts = ("--std=c++17", f"-I{KDIR}") + tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))
    key = (str(path), opts)
    if key not in _mods:
        mod = cp.RawModule(code=path.read_text(), options=opts)
        mod.compile()
        _mods[key] = mod
    return _mods[key]


class NewFullRange(b.Step):
    """kernels/mlp/17_final_full_range.cu as rewritten: dynamic shared memory for the x stages."""

    def __init__(self, warps, m, per_sm, groups, force_exact=False):
        super().__init__(f"17new(w{warps},m{m},b{per_sm},g{groups})" + ("-EXACT" if force_exact else ""))
        self.fn = module_at(KDIR / "17_final_full_range.cu",
                            {"WARPS": warps, "M_TILES": m, "MIN_BLOCKS": per_sm, "NT_GROUPS": groups}
                            ).get_function("fullRange3xFP16Kernel")
        self.smem = warps * m * STAGE_BYTES
        if self.smem + 39488 > 48 * 1024:   # static + dynamic above 48 KB: opt in
            self.fn.max_dynamic_shared_size_bytes = self.smem
        self.warps, self.m, self.per_sm, self.force_exact = warps, m, per_sm, force_exact

    def prepare(self, w_host, w_dev):
        import cupy as cp

        packed, exact = b.full_range_pack(w_host)
        if self.force_exact:
            packed = packed.copy()
            packed[-8:-4] = np.array([1], np.int32).view(np.uint8)
        return cp.asarray(packed), cp.asarray(b.tf32_fragments(w_host)), exact

    def launch(self, x, y, p, n, stream=None):
        tiles = -(-n // (16 * self.m))
        grid = b.persistent(-(-tiles // self.warps), self.per_sm)
        self.fn((grid,), (32 * self.warps,), (x, p[0], p[1], y, np.int32(n)), shared_mem=self.smem)


class Staged14(b.Step):
    """data/bench/mlp/14_tensor_core_fp16.next.cu: step 14 with x staged one tile ahead (unmeasured
    candidate for the FP16 target)."""

    fp32 = False

    def __init__(self, warps, m, per_sm):
        super().__init__(f"14staged(w{warps},m{m},b{per_sm})")
        self.fn = module_at(ROOT / "data" / "bench" / "mlp" / "14_tensor_core_fp16.next.cu",
                            {"WARPS": warps, "M_TILES": m, "MIN_BLOCKS": per_sm}
                            ).get_function("fusedTensorCoreHalfStagedKernel")
        self.smem = warps * m * STAGE_BYTES
        if self.smem + 20000 > 48 * 1024:
            self.fn.max_dynamic_shared_size_bytes = self.smem
        self.warps, self.m, self.per_sm = warps, m, per_sm

    def prepare(self, w_host, w_dev):
        import cupy as cp

        return cp.asarray(b.f16_fragments(w_host))

    def launch(self, x, y, p, n, stream=None):
        tiles = -(-n // (16 * self.m))
        grid = b.persistent(-(-tiles // self.warps), self.per_sm)
        self.fn((grid,), (32 * self.warps,), (x, p, y, np.int32(n)), shared_mem=self.smem)


class PrevFullRange(b.FullRange):
    """A previous version of step 17 (static shared memory only), from a file."""

    def __init__(self, path: Path, tag, warps=8, m=1, per_sm=1, groups=2):
        b.Step.__init__(self, f"17{tag}(w{warps},m{m},b{per_sm})")
        fn = module_at(path, {"WARPS": warps, "M_TILES": m, "NT_GROUPS": groups}).get_function("fullRange3xFP16Kernel")
        self.cfg = {"small": (fn, warps, m, per_sm), "large": (fn, warps, m, per_sm)}
        self.switch, self.force_exact = 65536, False


class RegisterTiledAt(b.RegisterTiled):
    def __init__(self, path: Path, tag, warps=4, per_sm=2, ring=4):
        b.Step.__init__(self, f"16{tag}(w{warps},r{ring})")
        self.fn = module_at(path, {"WARPS": warps, "RING": ring}).get_function("fp32RegisterTiledKernel")
        self.smem = 4 * 9640 + (16384 + 256 * ring) * warps
        self.fn.max_dynamic_shared_size_bytes = self.smem
        self.warps, self.per_sm = warps, per_sm


def build(prev: Path | None):
    steps = []
    ctors = [lambda v=v: NewFullRange(*v) for v in VARIANTS]
    ctors += [lambda: NewFullRange(8, 1, 1, 2, force_exact=True)]
    if prev is not None:
        ctors += [lambda: PrevFullRange(prev / "17_prev.cu", "prev")]
        ctors += [lambda: RegisterTiledAt(prev / "16_next.cu", "next")]
    if (ROOT / "data" / "bench" / "mlp" / "14_tensor_core_fp16.next.cu").exists():
        ctors += [lambda v=v: Staged14(*v) for v in ((8, 2, 1), (8, 2, 2), (4, 2, 3), (8, 1, 2))]
    ctors += [
        lambda: b.TensorCore("14_tensor_core_fp16", "14_tensor_core_fp16.cu", "fusedTensorCoreHalfKernel", 8, 2, 1,
                             b.f16_fragments, fp32=False),
        lambda: b.TensorCore("14_tensor_core_fp16(w4,m2,b2)", "14_tensor_core_fp16.cu", "fusedTensorCoreHalfKernel",
                             4, 2, 2, b.f16_fragments, fp32=False),
        lambda: b.Final15(),
        lambda: b.RegisterTiled(4, 2, 4),
    ]
    for c in ctors:
        try:
            s = c()
            steps.append(s)
            fn = getattr(s, "fn", None)
            print(f"  built {s.name}" + (f": {fn.num_regs} regs, {fn.local_size_bytes} B local" if fn is not None else ""))
        except Exception:
            print("BUILD FAILED:\n" + traceback.format_exc())
    return steps


def special_checks(steps, rng, out):
    """N % 4 != 0 and a misaligned x (4-byte staging path), ragged tails, fresh data, NaN-poisoned y."""
    import cupy as cp

    print("\n== staging paths of 17new / 14staged (misaligned x, N % 4 != 0) ==")
    for s in steps:
        if not s.name.startswith(("17new", "14staged")):
            continue
        worst = 0.0
        for n, offset in ((4096, 1), (4099, 0), (12803, 3), (64, 2)):
            x = rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)
            w = b.make_weights(rng)
            flat = cp.zeros(b.IN * n + 8, cp.float32)
            xd = flat[offset:offset + b.IN * n].reshape(b.IN, n)
            xd[...] = cp.asarray(x)
            y = cp.full((b.OUT, n), np.nan, cp.float32)
            prep = s.prepare(w, tuple(cp.asarray(a) for a in w))
            s.launch(xd, y, prep, n)
            if s.fp32:
                e = b.rel_l2(y.get(), b.forward(x, w, np.float64))
            else:
                e = b.scaled_abs_diff(y.get(), b.forward(x, w, np.float32).astype(np.float64))
            worst = max(worst, e)
        ok = worst <= (b.TOL if s.fp32 else b.HALF_TOL)
        out[s.name] = {"worst": worst, "passed": ok}
        print(f"  {s.name:44s} {'ok' if ok else 'FAIL'}  worst {worst:.2e}")


def host_cost(out_dir):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_mlp_forward_host.py"),
           "--steps", "fp32-register-tiled,final-full-range,final,tensor-core-fp16"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    text = p.stdout + ("\n" + p.stderr[-3000:] if p.returncode else "")
    (out_dir / "forward_host.txt").write_text(text)
    print("\n== host cost of kernelbook.mlp.forward (scripts/bench_mlp_forward_host.py) ==\n" + text)


NCU_TARGET = '''
import sys
sys.path.insert(0, "{scripts}")
import numpy as np, cupy as cp
import bench_mlp_final as f
from pathlib import Path
b = f.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
wd = tuple(cp.asarray(a) for a in w)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
steps = [f.NewFullRange(*v) for v in {variants}]
prev = {prev!r}
if prev:
    steps.append(f.PrevFullRange(Path(prev) / "17_prev.cu", "prev"))
steps.append(b.Final15())
for s in steps:
    p = s.prepare(w, wd)
    s.launch(x, y, p, b.N_LARGE)
cp.cuda.Device().synchronize()
'''


def run_ncu(out_dir, variants, prev):
    script = out_dir / "ncu_target.py"
    script.write_text(NCU_TARGET.format(scripts=str(ROOT / "scripts"), variants=variants, prev=str(prev) if prev else ""))
    metrics = ",".join([
        "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "smsp__inst_executed.sum", "smsp__inst_executed_pipe_tensor_op_hmma.sum",
        "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_wait.ratio",
        "smsp__average_warp_latency_issue_stalled_barrier.ratio",
        "smsp__average_warp_latency_issue_stalled_not_selected.ratio",
        "smsp__average_warp_latency_issue_stalled_selected.ratio",
        "smsp__average_warp_latency_issue_stalled_mio_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_lg_throttle.ratio",
        "sm__cycles_elapsed.avg.per_second", "launch__registers_per_thread", "launch__occupancy_limit_registers",
    ])
    cmd = (f"ncu --clock-control none --metrics {metrics} --csv -k regex:'fullRange|fusedTensorCore3xFP16' "
           f"{sys.executable} {script}")
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
    (out_dir / "ncu.csv").write_text(p.stdout + "\n" + p.stderr[-3000:])
    rows = [l for l in p.stdout.splitlines() if l.startswith('"')]
    print(f"\n== ncu ({len(rows)} rows, full CSV in ncu.csv) ==")
    for l in rows:
        parts = [c.strip('"') for c in l.split('","')]
        if len(parts) > 14:
            print(f"  {parts[4][:22]:22s} {parts[8][:12]:12s} {parts[-3][:58]:58s} {parts[-1]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--prev", default="")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--no-range", action="store_true")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    prev = Path(args.prev).resolve() if args.prev else None
    import cupy as cp

    t0 = time.time()
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    result = {"device": name, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "checks": {},
              "special": {}, "range": {}, "times": {}}
    print(f"device {name}, {b.sm_count()} SMs, {result['date']}")
    steps = build(prev)
    rng = np.random.default_rng(int(time.time()))
    for label, fn in (("checks", lambda: b.normal_checks(steps, rng, result["checks"])),
                      ("special", lambda: special_checks(steps, rng, result["special"]))):
        try:
            fn()
        except Exception:
            print(traceback.format_exc())
    print(f"[{time.time() - t0:.0f}s]")
    if not args.no_range:
        try:
            rsteps = [s for s in steps if s.name.startswith("17new")]
            b.range_test(rsteps, rng, result["range"])
        except Exception:
            print(traceback.format_exc())
        print(f"[{time.time() - t0:.0f}s]")
    failed = {k for k, v in list(result["checks"].items()) + list(result["special"].items()) if not v["passed"]}
    try:
        b.time_steps([s for s in steps if s.name not in failed], result["times"])
    except Exception:
        print(traceback.format_exc())
    print(f"[{time.time() - t0:.0f}s]")
    try:
        host_cost(out_dir)
    except Exception:
        print(traceback.format_exc())
    (out_dir / "bench_mlp_final.json").write_text(json.dumps(result, indent=1, default=str))
    if args.ncu:
        try:
            run_ncu(out_dir, VARIANTS[:3], prev)
        except Exception:
            print(traceback.format_exc())
    print("\n== summary (median per launch, CUDA graphs) ==")
    t = result["times"]
    for key in sorted(t):
        print(f"  {key:60s} {t[key]['median_ms'] * 1e3:9.2f} us  (min {t[key]['min_ms'] * 1e3:.2f}, "
              f"max {t[key]['max_ms'] * 1e3:.2f})")
    k32 = f"pytorch-fp32@{b.N_LARGE}"
    for s in t:
        if s.startswith("16") and s.endswith(f"@{b.N_LARGE}") and k32 in t:
            print(f"  {s} vs pytorch-fp32: {t[k32]['median_ms'] / t[s]['median_ms']:.2f}x")
    bad = [k for k, v in result["range"].items() if v.get("failed")]
    print(f"range failures: {bad or 'none'}")
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
