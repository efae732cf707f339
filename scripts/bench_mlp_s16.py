#!/usr/bin/env python3
"""Session 3, step 16 (FP32 on CUDA cores): check and time candidate x rings beside the shipped
kernel and PyTorch FP32, in one process on the device.

    PYTHONUNBUFFERED=1 python3 scripts/bench_mlp_s16.py --out $OUT [--ncu] [--no-range] [--only ship-r8,prev-r4]

Reuses scripts/bench_mlp_hopper.py (data, float64 reference, step 16's packing, range cases,
CUDA-graph timer). Variants (all 4 warps per block, 2 blocks per SM, persistent grid):
  ship-r8 / ship-r4 : kernels/mlp/16_fp32_register_tiled.cu as it is now (RING = 8, the default / 4);
  prev-r4 / prev-r8 : the step as it was before session 3 (one wait, two __syncwarp and the
                      pair's source address rebuilt per pair), when data/bench/mlp/s3-16/16_prev.cu
                      is present (`git show 42bcb1a:kernels/mlp/16_fp32_register_tiled.cu`);
  cand-*            : data/bench/mlp/s3-16/16_candidate.cu when present (restore it with
                      `git show 92b8dda:data/bench/mlp/s3-16/16_candidate.cu`): call 1 of session 3
                      timed it as cand-r{4,8}-pf{0,1}; its RING 8, PF_W 0 build is SASS-identical
                      to ship-r8.
Checks: fresh data (rel L2 vs float64, output poisoned with NaN) at N = 1 .. 262,149 incl.
N % 4 != 0, several tiles per warp, a misaligned x and y (not for prev-*: that kernel assumed a
16-byte aligned x when N % 4 == 0); the RANGE TEST (inputs and weights 1e-6 .. 1e6, mixed
magnitudes; rel L2 <= 1e-5). Timing: 2,097,152 columns (one launch per graph node, 20 per graph,
30 replays, two interleaved rounds) and 12,800 columns (a graph of 20 calls on the same input,
per-call median over 30 replays); PyTorch FP32 (three nn.Linear, TF32 off) in the same process.
--ncu: Nsight Compute (--clock-control none) on the fastest non-prev variant and prev-r4 at 2,097,152.
Writes bench_mlp_s16.json to --out and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mlp_hopper as b  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIP = ROOT / "kernels" / "mlp" / "16_fp32_register_tiled.cu"
PREV = ROOT / "data" / "bench" / "mlp" / "s3-16" / "16_prev.cu"
CAND = ROOT / "data" / "bench" / "mlp" / "s3-16" / "16_candidate.cu"
VARIANTS = [(name, path, d) for name, path, d in (
    ("ship-r8", SHIP, {"RING": 8}),
    ("prev-r4", PREV, {"RING": 4}),
    ("ship-r4", SHIP, {"RING": 4}),
    ("prev-r8", PREV, {"RING": 8}),
    ("cand-r8-pf0", CAND, {"RING": 8, "PF_W": 0}),
    ("cand-r4-pf1", CAND, {"RING": 4, "PF_W": 1}),
    ("cand-r4-pf0", CAND, {"RING": 4, "PF_W": 0}),
    ("cand-r8-pf1", CAND, {"RING": 8, "PF_W": 1}),
) if path.exists()]
_mods: dict = {}


def module_at(path: Path, defines: dict):
    import cupy as cp

    opts = ("--std=c++17",) + tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))
    key = (str(path), opts)
    if key not in _mods:
        mod = cp.RawModule(code=path.read_text(), options=opts)
        mod.compile()
        _mods[key] = mod
    return _mods[key]


class Kernel(b.Step):
    def __init__(self, name, src, defines, warps=4, per_sm=2):
        super().__init__(name)
        self.src, self.defines = src, dict(defines, WARPS=warps)
        self.fn = module_at(src, self.defines).get_function("fp32RegisterTiledKernel")
        self.smem = 4 * 9640 + (16384 + 256 * defines["RING"]) * warps
        self.fn.max_dynamic_shared_size_bytes = self.smem
        self.warps, self.per_sm = warps, per_sm

    def prepare(self, w_host, w_dev):
        import cupy as cp

        return cp.asarray(b.register_tiled_pack(w_host))

    def launch(self, x, y, p, n, stream=None):
        grid = b.persistent(-(-(-(-n // 64)) // self.warps), self.per_sm)
        self.fn((grid,), (32 * self.warps,), (x, p, y, np.int32(n)), shared_mem=self.smem)


def run_on(step, x_host, w, x_offset=0, y_offset=0):
    """Launch on copies of x / y placed x_offset / y_offset floats into a larger buffer; y poisoned."""
    import cupy as cp

    n = x_host.shape[1]
    flat = cp.zeros(b.IN * n + 8, cp.float32)
    xd = flat[x_offset:x_offset + b.IN * n].reshape(b.IN, n)
    xd[...] = cp.asarray(x_host)
    yflat = cp.full(b.OUT * n + 8, np.nan, cp.float32)
    yd = yflat[y_offset:y_offset + b.OUT * n].reshape(b.OUT, n)
    step.launch(xd, yd, step.prepare(w, None), n)
    cp.cuda.Device().synchronize()
    return yd.get()


def checks(steps, rng, out):
    print("\n== fresh data, y poisoned with NaN (rel L2 vs float64; <= 1e-5) ==")
    sizes = (1, 3, 7, 33, 64, 65, 255, 300, 1000, 4096, 4097, 4099, 12800, 12805, 100_003, 262_144, 262_149)
    odd = ((4096, 1, 0), (4098, 2, 0), (12803, 3, 1), (64, 1, 3), (262_144, 1, 2), (262_147, 3, 0))
    for s in steps:
        worst, cases = 0.0, []
        todo = [(n, 0, 0) for n in sizes] + ([c for c in odd] if not s.name.startswith("prev") else [])
        for n, xo, yo in todo:
            x = rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32)
            w = b.make_weights(rng)
            try:
                e = b.rel_l2(run_on(s, x, w, xo, yo), b.forward(x, w, np.float64))
            except Exception as exc:
                e = float("inf")
                print(f"  {s.name} N={n} x+{xo} y+{yo}: {type(exc).__name__}: {exc}")
            cases.append((n, xo, yo, e))
            worst = max(worst, e)
        ok = worst <= b.TOL
        out[s.name] = {"worst": worst, "passed": ok, "cases": cases}
        print(f"  {s.name:14s} {'ok' if ok else 'FAIL'}  worst {worst:.2e} over {len(todo)} cases "
              f"(misaligned x/y: {'yes' if len(todo) > len(sizes) else 'not run'})")


def torch_fp32(w_host, x_cp, reps, per_graph=20, repeats=30):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(71, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda().eval()
    with torch.no_grad():
        for layer, (W, bb) in zip((model[0], model[2], model[4]), zip(w_host[0::2], w_host[1::2])):
            layer.weight.copy_(torch.from_numpy(W))
            layer.bias.copy_(torch.from_numpy(bb))
    inp = torch.as_tensor(x_cp, device="cuda").T.contiguous()
    s = torch.cuda.Stream()
    times = []
    with torch.no_grad(), torch.cuda.stream(s):
        model(inp)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(per_graph):
                model(inp)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        for _ in range(repeats):
            a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(s)
            g.replay()
            e.record(s)
            e.synchronize()
            times.append(a.elapsed_time(e) / per_graph)
    del g, inp
    return {"median_ms": float(np.median(times)), "min_ms": float(np.min(times)), "max_ms": float(np.max(times)),
            "replays": repeats, "calls_per_replay": per_graph}


def timing(steps, out):
    import cupy as cp

    rng = np.random.default_rng(11)
    w_host = b.make_weights(rng)
    for n, rounds in ((b.N_LARGE, 2), (b.N_SMALL, 2)):
        x = cp.asarray(rng.uniform(-1, 1, size=(b.IN, n)).astype(np.float32))
        y = cp.empty((b.OUT, n), cp.float32)
        print(f"\n== timing at N={n} (CUDA graph of 20 calls, same input, 30 replays x {rounds} rounds) ==")
        samples = {s.name: [] for s in steps}
        preps = {s.name: s.prepare(w_host, None) for s in steps}
        for r in range(rounds):
            for s in (steps if r % 2 == 0 else steps[::-1]):
                med, lo, hi = b.graph_time([lambda s=s: s.launch(x, y, preps[s.name], n)], repeats=30, per_graph=20)
                samples[s.name].append((med, lo, hi))
        for s in steps:
            meds = [m for m, _, _ in samples[s.name]]
            res = {"median_ms": float(np.median(meds)), "min_ms": min(lo for _, lo, _ in samples[s.name]),
                   "max_ms": max(hi for _, _, hi in samples[s.name]), "round_medians_ms": meds}
            out[f"{s.name}@{n}"] = res
            print(f"  {s.name:14s} {res['median_ms'] * 1e3:9.2f} us  (min {res['min_ms'] * 1e3:.2f}, "
                  f"max {res['max_ms'] * 1e3:.2f}; rounds {', '.join(f'{m * 1e3:.2f}' for m in meds)})")
        try:
            t = torch_fp32(w_host, x, 1)
            out[f"pytorch-fp32@{n}"] = t
            print(f"  {'pytorch-fp32':14s} {t['median_ms'] * 1e3:9.2f} us  (min {t['min_ms'] * 1e3:.2f}, max {t['max_ms'] * 1e3:.2f})")
        except Exception:
            print(traceback.format_exc())
        del x, y


NCU_TARGET = '''
import sys
sys.path.insert(0, "{root}/scripts")
import numpy as np, cupy as cp
import bench_mlp_hopper as b
import bench_mlp_s16 as s16
rng = np.random.default_rng(3)
w = b.make_weights(rng)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
for name in {names!r}:
    v = [v for v in s16.VARIANTS if v[0] == name][0]
    k = s16.Kernel(*v)
    k.launch(x, y, k.prepare(w, None), b.N_LARGE)
cp.cuda.Device().synchronize()
'''


def run_ncu(out_dir, names, out):
    script = out_dir / "ncu_target.py"
    script.write_text(NCU_TARGET.format(root=str(ROOT), names=list(names)))
    metrics = ",".join([
        "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "smsp__inst_executed.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
        "smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
        "smsp__average_warp_latency_issue_stalled_wait.ratio",
        "smsp__average_warp_latency_issue_stalled_not_selected.ratio",
        "smsp__average_warp_latency_issue_stalled_selected.ratio",
        "smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_mio_throttle.ratio",
        "smsp__average_warp_latency_issue_stalled_barrier.ratio",
        "smsp__average_warp_latency_issue_stalled_no_instruction.ratio",
        "smsp__average_warp_latency_issue_stalled_branch_resolving.ratio",
        "smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio",
        "smsp__average_warp_latency_issue_stalled_lg_throttle.ratio",
    ])
    cmd = (f"cd {ROOT} && ncu --clock-control none --metrics {metrics} --csv -k regex:fp32Register "
           f"python3 {script}")
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
    (out_dir / "ncu.csv").write_text(p.stdout + "\n" + p.stderr[-3000:])
    rows = [l for l in p.stdout.splitlines() if l.startswith('"')]
    print(f"\n== ncu (launch order {list(names)}; full CSV in ncu.csv) ==")
    for l in rows[1:]:
        parts = [c.strip('"') for c in l.split('","')]
        if len(parts) > 14:
            idx = int(parts[0])
            name = names[idx] if idx < len(names) else parts[0]
            out.setdefault(name, {})[parts[-3]] = parts[-1]
            print(f"  {name:14s} {parts[-3][:62]:62s} {parts[-1]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--no-range", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated variant names (default: every one present)")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import cupy as cp

    t0 = time.time()
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    res = {"device": name, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "build": {},
           "checks": {}, "range": {}, "times": {}, "ncu": {}}
    print(f"device {name}, {b.sm_count()} SMs, {res['date']}")
    steps = []
    for v in VARIANTS:
        if args.only and v[0] not in args.only.split(","):
            continue
        try:
            k = Kernel(*v)
            try:
                occ = int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(k.fn.ptr, 128, k.smem))
            except Exception as exc:
                occ = f"? ({type(exc).__name__})"
            regs, local = getattr(k.fn, "num_regs", None), getattr(k.fn, "local_size_bytes", None)
            res["build"][k.name] = {"defines": k.defines, "regs": regs, "local_bytes": local, "smem": k.smem,
                                    "blocks_per_sm": occ}
            print(f"  {k.name:14s} {regs} regs, local {local} B, smem {k.smem} B, {occ} blocks/SM")
            steps.append(k)
        except Exception:
            print(f"  {v[0]}: BUILD FAILED\n{traceback.format_exc()}")
    print(f"[{time.time() - t0:.0f}s]")
    rng = np.random.default_rng(int(time.time()))
    checks(steps, rng, res["checks"])
    print(f"[{time.time() - t0:.0f}s]")
    if not args.no_range:
        try:
            rsteps = [s for s in steps if s.name != "prev-r8"]
            b.range_test(rsteps, rng, res["range"], n=300)
        except Exception:
            print(traceback.format_exc())
        print(f"[{time.time() - t0:.0f}s]")
    good = [s for s in steps if res["checks"][s.name]["passed"]
            and res["range"].get(s.name, {}).get("failed", 0) == 0]
    try:
        timing(good, res["times"])
    except Exception:
        print(traceback.format_exc())
    print(f"[{time.time() - t0:.0f}s]")
    (out_dir / "bench_mlp_s16.json").write_text(json.dumps(res, indent=1, default=str))
    t = res["times"]
    cands = [s.name for s in good if not s.name.startswith("prev") and f"{s.name}@{b.N_LARGE}" in t]
    best = min(cands, key=lambda k: t[f"{k}@{b.N_LARGE}"]["median_ms"]) if cands else None
    if args.ncu and best:
        try:
            run_ncu(out_dir, [best] + (["prev-r4"] if PREV.exists() else []), res["ncu"])
        except Exception:
            print(traceback.format_exc())
        (out_dir / "bench_mlp_s16.json").write_text(json.dumps(res, indent=1, default=str))
    print(f"\n== summary ({name}; CUDA graphs, per-call median (min, max)) ==  [{time.time() - t0:.0f}s]")
    torch2m = t.get(f"pytorch-fp32@{b.N_LARGE}", {}).get("median_ms")
    for key in [s.name for s in good] + ["pytorch-fp32"]:
        big, small = t.get(f"{key}@{b.N_LARGE}"), t.get(f"{key}@{b.N_SMALL}")
        if big:
            sp = f"{torch2m / big['median_ms']:.2f}x torch" if torch2m else ""
            print(f"  {key:14s} 2M: {big['median_ms']:.4f} ms ({big['min_ms']:.4f}, {big['max_ms']:.4f}) {sp:12s}"
                  + (f"  12,800: {small['median_ms'] * 1e3:.2f} us" if small else ""))
    print(f"  fastest candidate: {best}")


if __name__ == "__main__":
    main()
