#!/usr/bin/env python3
"""Issue 19, session 3: step 17 at 12,800 columns, checked and timed on the device in one call.

    PYTHONUNBUFFERED=1 python3 scripts/bench_mlp_s17.py --out $OUT [--ncu] [--no-range]
        [--cpa-src FILE] [--main-src FILE] [--small-src FILE --small 2.6,4.4]

Rows (each compiled from a file, kernels/mlp on the include path):
- "17cpa": --cpa-src (default: this tree's kernels/mlp/17_final_full_range.cu), the persistent
  kernel in the launch shapes of CPA; run 2 measured the cp.async-prologue version, which is that
  file on branch s17-cpa (data/bench/mlp/NOTES.md, session 3);
- "17mc" / "17mc90a": --mc-src (NVRTC) / --mc-cubin (nvcc sm_90a, w8 m1 b2), a cluster-of-2 version
  that multicasts the weights (helper s17b; grid rounded up to even);
- "17_shipped": --main-src, step 17 as on main when measured (git show 42bcb1a:kernels/mlp/17_final_full_range.cu);
- "17small": --small-src with --small, run 1's small-N candidate (one 16-column tile per block split
  over SMALL_WARPS warps; NOTES says from which commit to read it);
- steps 14 and 15 (this tree's files).
Reuses scripts/bench_mlp_hopper.py (data, float64 reference, range cases, CUDA-graph timer) and the
package's packing (kernelbook/mlp/pack.py, loaded from its file: NumPy only).
1. builds every row (registers, local memory and blocks per SM printed);
2. checks vs float64 on fresh data, output poisoned with NaN, N in {1, 31, 33, 4096, 12799, 12800,
   16239}; x misaligned (offsets 1, 3) and N % 4 != 0; the forced exact path (header flag);
3. the RANGE TEST on every step-17 row (inputs and weights 1e-6 .. 1e6, mixed magnitudes; relative
   L2 <= 1e-5 vs float64);
4. times at 12,800 columns: a graph of 20 calls on the same input (the book's method) and a graph
   of 24 calls over 24 input copies (x from DRAM); per-call median / min / max over 30 replays;
   then 2,097,152 columns (a graph of 5 calls);
5. --ncu: Nsight Compute at 12,800 columns (the --main-src kernel and the first CPA row).
JSON to $OUT/bench_mlp_s17.json, a short table last.
"""

from __future__ import annotations

import argparse
import importlib.util
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
_spec = importlib.util.spec_from_file_location("kb_pack", ROOT / "kernelbook" / "mlp" / "pack.py")
pack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pack)

SMALL = []   # (SMALL_WARPS, SMALL_MIN_BLOCKS) of the --small-src kernel
CPA = [(8, 2), (4, 4), (4, 3)]   # (warps, blocks_per_sm) of this tree's step 17 (cp.async prologue)
SRC = {"cpa": KDIR / "17_final_full_range.cu", "main": None, "small": None, "mc": None,
       "mc_cubin": None}   # set from the command line
_mods: dict = {}


def module(defines, src=None):
    """src: a file (default kernels/mlp/17_final_full_range.cu), compiled with KDIR on the include path."""
    import cupy as cp

    src = Path(src) if src else KDIR / "17_final_full_range.cu"
    opts = ("--std=c++17", f"-I{KDIR}") + tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))
    if (src, opts) not in _mods:
        mod = cp.RawModule(code=src.read_text(), options=opts)
        mod.compile()
        _mods[(src, opts)] = mod
    return _mods[(src, opts)]


_PACKS: dict = {}


def prepare17(w_host, force_exact):
    """pack.full_range (the package's packing), cached per weight set (the range test repeats it)."""
    import cupy as cp

    key = tuple(np.asarray(a, np.float32).tobytes() for a in w_host)
    if key not in _PACKS:
        if len(_PACKS) > 8:
            _PACKS.clear()
        _PACKS[key] = pack.full_range(w_host)
    p = _PACKS[key]
    split = p["split"].copy()
    if force_exact:
        split[-8:-4] = np.array([1], np.int32).view(np.uint8)
    return cp.asarray(split), cp.asarray(p["packed"])


class Shipped17(b.Step):
    """Step 17's persistent kernel (warps, m_tiles 1, blocks_per_sm): as shipped on main (a copy of
    main's file, --main-src) or another version of it ("17cpa", --cpa-src)."""

    def __init__(self, warps=8, per_sm=2, force_exact=False, src=None, tag="17_shipped"):
        super().__init__(f"{tag}(w{warps},m1,b{per_sm})" + ("-EXACT" if force_exact else ""))
        self.fn = module({"WARPS": warps, "M_TILES": 1, "MIN_BLOCKS": per_sm}, src).get_function("fullRange3xFP16Kernel")
        self.smem = warps * 6400
        if self.smem + 39488 > 48 * 1024:
            self.fn.max_dynamic_shared_size_bytes = self.smem   # static + dynamic above 48 KB: opt in
        self.warps, self.per_sm, self.force_exact = warps, per_sm, force_exact

    def prepare(self, w_host, w_dev):
        return prepare17(w_host, self.force_exact)

    def launch(self, x, y, p, n, stream=None):
        grid = b.persistent(-(-(-(-n // 16)) // self.warps), self.per_sm)
        self.fn((grid,), (32 * self.warps,), (x, p[0], p[1], y, np.int32(n)), shared_mem=self.smem)


class Mc17(Shipped17):
    """A cluster-of-2 version (--mc-src, NVRTC like the others; or --mc-cubin, a cubin built with
    nvcc for sm_90a, w8 m1 b2 baked in): the grid is rounded up to a multiple of 2."""

    def __init__(self, warps=8, per_sm=2, force_exact=False, cubin=None):
        if cubin is None:
            super().__init__(warps, per_sm, force_exact, src=SRC["mc"], tag="17mc")
        else:
            import cupy as cp

            b.Step.__init__(self, f"17mc90a(w{warps},m1,b{per_sm})" + ("-EXACT" if force_exact else ""))
            self.fn = cp.RawModule(path=str(cubin)).get_function("fullRange3xFP16Kernel")
            self.smem = warps * 6400
            self.fn.max_dynamic_shared_size_bytes = self.smem
            self.warps, self.per_sm, self.force_exact = warps, per_sm, force_exact

    def launch(self, x, y, p, n, stream=None):
        grid = b.persistent(-(-(-(-n // 16)) // self.warps), self.per_sm)
        grid += grid % 2
        self.fn((grid,), (32 * self.warps,), (x, p[0], p[1], y, np.int32(n)), shared_mem=self.smem)


class Small17(b.Step):
    """fullRange3xFP16SmallKernel: grid = one block per 16 columns, 32 * SMALL_WARPS threads."""

    def __init__(self, sw, mb, force_exact=False):
        super().__init__(f"17small(sw{sw},mb{mb})" + ("-EXACT" if force_exact else ""))
        self.fn = module({"WARPS": 8, "M_TILES": 1, "MIN_BLOCKS": 2, "SMALL_WARPS": sw, "SMALL_MIN_BLOCKS": mb},
                         SRC["small"]).get_function("fullRange3xFP16SmallKernel")
        self.sw, self.force_exact = sw, force_exact

    def prepare(self, w_host, w_dev):
        return prepare17(w_host, self.force_exact)

    def launch(self, x, y, p, n, stream=None):
        self.fn((-(-n // 16),), (32 * self.sw,), (x, p[0], p[1], y, np.int32(n)))


def build():
    steps = []
    ctors = [lambda v=v: Small17(*v) for v in SMALL]
    ctors += [lambda v=v: Shipped17(*v, src=SRC["cpa"], tag="17cpa") for v in CPA]
    ctors += [lambda: Shipped17(*CPA[0], force_exact=True, src=SRC["cpa"], tag="17cpa")]
    if SRC["mc"]:
        ctors += [lambda: Mc17(), lambda: Mc17(force_exact=True)]
    if SRC["mc_cubin"]:
        ctors += [lambda: Mc17(cubin=SRC["mc_cubin"]), lambda: Mc17(force_exact=True, cubin=SRC["mc_cubin"])]
    if SRC["main"]:
        ctors += [lambda: Shipped17(src=SRC["main"])]
    ctors += [lambda: b.TensorCore("14_tensor_core_fp16", "14_tensor_core_fp16.cu", "fusedTensorCoreHalfKernel",
                                   8, 2, 1, b.f16_fragments, fp32=False),
              lambda: b.Final15()]
    for c in ctors:
        try:
            s = c()
            steps.append(s)
            fn = getattr(s, "fn", None)
            extra = ""
            if fn is not None:
                occ = b.occupancy(fn, 32 * getattr(s, "sw", 8), getattr(s, "smem", 0))
                extra = f": {fn.num_regs} regs, {fn.local_size_bytes} B local, {occ} blocks/SM"
            print(f"  built {s.name}{extra}")
        except Exception:
            print("BUILD FAILED:\n" + traceback.format_exc())
    return steps


def checks(steps, rng, out):
    """Fresh data, NaN-poisoned y; the sizes of the brief; misaligned x and N % 4 != 0."""
    import cupy as cp

    print("\n== checks vs float64 (fresh data, poisoned output, misaligned x) ==")
    cases = [(n, 0) for n in (1, 31, 33, 4096, 12799, 12800, 16239)] + [(4096, 1), (4099, 0), (12803, 3), (64, 2),
                                                                          (12800, 1)]
    for s in steps:
        worst, fails = 0.0, []
        for n, offset in cases:
            x = rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)
            w = b.make_weights(rng)
            flat = cp.zeros(b.IN * n + 8, cp.float32)
            xd = flat[offset:offset + b.IN * n].reshape(b.IN, n)
            xd[...] = cp.asarray(x)
            y = cp.full((b.OUT, n), np.nan, cp.float32)
            try:
                s.launch(xd, y, s.prepare(w, tuple(cp.asarray(a) for a in w)), n)
                got = y.get()
                if s.fp32:
                    e = b.rel_l2(got, b.forward(x, w, np.float64))
                else:
                    e = b.scaled_abs_diff(got, b.forward(x, w, np.float32).astype(np.float64))
            except Exception as exc:
                e = float("inf")
                print(f"  {s.name} N={n}: {type(exc).__name__}: {exc}")
            if not np.isfinite(e) or e > (b.TOL if s.fp32 else b.HALF_TOL):
                fails.append((n, offset, e))
            worst = max(worst, e) if np.isfinite(e) else float("inf")
        ok = not fails
        out[s.name] = {"worst": worst, "passed": ok, "fails": fails[:5], "cases": len(cases)}
        print(f"  {s.name:34s} {'ok' if ok else 'FAIL'}  worst {worst:.2e}" + (f"  {fails[:3]}" if fails else ""))


def time_at(steps, n, copies, per_graph, out, tag):
    import cupy as cp

    rng = np.random.default_rng(11)
    w_host = b.make_weights(rng)
    w_dev = tuple(cp.asarray(a) for a in w_host)
    xs = [cp.asarray(rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)) for _ in range(copies)]
    ys = [cp.empty((b.OUT, n), cp.float32) for _ in range(copies)]
    print(f"\n== N={n}, {tag} ==")
    for s in steps:
        try:
            prep = s.prepare(w_host, w_dev)
            launches = [(lambda x=x, y=y: s.launch(x, y, prep, n)) for x, y in zip(xs, ys)]
            med, lo, hi = b.graph_time(launches, repeats=30, per_graph=per_graph)
            out[f"{s.name}@{n}:{tag}"] = {"median_us": med * 1e3, "min_us": lo * 1e3, "max_us": hi * 1e3,
                                          "calls_per_graph": per_graph * copies, "replays": 30}
            print(f"  {s.name:34s} {med * 1e3:9.2f} us  (min {lo * 1e3:.2f}, max {hi * 1e3:.2f})")
        except Exception:
            print(f"  {s.name}: ERROR\n{traceback.format_exc()}")
    del xs, ys


NCU_TARGET = '''
import sys
sys.path.insert(0, "{scripts}")
import numpy as np, cupy as cp
import bench_mlp_s17 as t
b = t.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
x = cp.asarray(rng.uniform(-1, 1, size=(71, 12800)).astype(np.float32))
y = cp.empty((4, 12800), cp.float32)
steps = [t.Shipped17(src="{main}")] if "{main}" else []
steps += [t.Shipped17(*v, src="{cpa}", tag="17cpa") for v in t.CPA[:1]]
for s in steps:
    p = s.prepare(w, None)
    for _ in range(3):
        s.launch(x, y, p, 12800)
cp.cuda.Device().synchronize()
'''


def run_ncu(out_dir):
    script = out_dir / "ncu_target.py"
    script.write_text(NCU_TARGET.format(scripts=str(ROOT / "scripts"), main=SRC["main"] or "", cpa=SRC["cpa"]))
    metrics = ",".join([
        "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "smsp__inst_executed.sum",
        "smsp__inst_executed_pipe_tensor_op_hmma.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
        "smsp__issue_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
        "launch__occupancy_limit_registers", "launch__waves_per_multiprocessor",
        "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_barrier.ratio",
        "smsp__average_warp_latency_issue_stalled_wait.ratio",
        "smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio",
    ])
    cmd = f"ncu --clock-control none --metrics {metrics} --csv -k regex:fullRange {sys.executable} {script}"
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=25)
    (out_dir / "ncu.csv").write_text(p.stdout + "\n" + p.stderr[-3000:])
    rows = [l for l in p.stdout.splitlines() if l.startswith('"')]
    print(f"\n== ncu at 12,800 ({len(rows)} rows, ncu.csv) ==")
    for l in rows:
        parts = [c.strip('"') for c in l.split('","')]
        if len(parts) > 14:
            print(f"  {parts[4][:28]:28s} {parts[-3][:58]:58s} {parts[-1]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--no-range", action="store_true")
    ap.add_argument("--small", default="", help="comma list of sw.mb to build, e.g. 4.4,2.6 (needs --small-src)")
    ap.add_argument("--cpa-src", default=str(SRC["cpa"]))
    ap.add_argument("--main-src", default="")
    ap.add_argument("--small-src", default="")
    ap.add_argument("--mc-src", default="", help="cluster-of-2 multicast candidate (NVRTC)")
    ap.add_argument("--mc-cubin", default="", help="the same built with nvcc for sm_90a (w8 m1 b2)")
    args = ap.parse_args()
    for key in ("cpa", "main", "small", "mc", "mc_cubin"):
        value = getattr(args, f"{key}_src" if key != "mc_cubin" else key)
        if value and not Path(value).is_file():
            sys.exit(f"--{key}-src {value}: no such file (NOTES, session 3, says how to restore the measured ones)")
        SRC[key] = Path(value).resolve() if value else None
    if args.small and not SRC["small"]:
        sys.exit("--small needs --small-src (run 1's candidate, restored from history as NOTES says)")
    if args.small:
        SMALL[:] = [tuple(int(a) for a in v.split(".")) for v in args.small.split(",")]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import cupy as cp

    t0 = time.time()
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    res = {"device": name, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "checks": {}, "range": {},
           "times": {}}
    print(f"device {name}, {b.sm_count()} SMs, {res['date']}")
    steps = build()
    print(f"[{time.time() - t0:.0f}s]")
    rng = np.random.default_rng(int(time.time()))
    try:
        checks(steps, rng, res["checks"])
    except Exception:
        print(traceback.format_exc())
    print(f"[{time.time() - t0:.0f}s]")
    if not args.no_range:
        try:
            b.range_test([s for s in steps if s.name.startswith("17")], rng, res["range"])
        except Exception:
            print(traceback.format_exc())
        print(f"[{time.time() - t0:.0f}s]")
    (out_dir / "bench_mlp_s17.json").write_text(json.dumps(res, indent=1, default=str))
    failed = {k for k, v in res["checks"].items() if not v["passed"]}
    failed |= {k for k, v in res["range"].items() if v.get("failed")}
    good = [s for s in steps if s.name not in failed and not s.name.endswith("EXACT")]
    try:
        time_at(good, 12800, 1, 20, res["times"], "same-input")
        time_at(good, 12800, 24, 1, res["times"], "rotated24")
        big = [s for s in good if s.name.startswith(("17_shipped", "17cpa", "17mc"))]
        time_at(big + [s for s in good if s.name.startswith(("14", "15"))], b.N_LARGE, 1, 5, res["times"],
                "same-input")
    except Exception:
        print(traceback.format_exc())
        (out_dir / "bench_mlp_s17.json").write_text(json.dumps(res, indent=1, default=str))
    print(f"[{time.time() - t0:.0f}s]")
    (out_dir / "bench_mlp_s17.json").write_text(json.dumps(res, indent=1, default=str))
    if args.ncu:
        try:
            run_ncu(out_dir)
        except Exception:
            print(traceback.format_exc())
    print("\n== summary: per call, median (min, max) us ==")
    for key, v in res["times"].items():
        print(f"  {key:52s} {v['median_us']:9.2f}  ({v['min_us']:.2f}, {v['max_us']:.2f})")
    bad = [k for k, v in res["range"].items() if v.get("failed")]
    print(f"check failures: {sorted(k for k, v in res['checks'].items() if not v['passed']) or 'none'}")
    print(f"range failures: {bad or 'none'}")
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
