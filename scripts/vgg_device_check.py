"""On a GPU: check every VGG step against float64, time it at B=1, time cuDNN beside it.

Exploratory (not a recorded run): prints a compact table and writes $OUT/vgg_device.json.
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 scripts/vgg_device_check.py [--steps a,b] [--sweep]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback

from kernelbook.vgg import STEPS, run

SWEEP = {
    "register-tiled": [{"th": 8, "tw": 32}, {"th": 8, "tw": 32, "stages": 4}, {"bm": 128, "th": 8, "tw": 16, "min_blocks": 1}],
    "tf32": [{"stages": 4}, {"tw": 32, "th": 8, "warps_n": 4}, {"bm": 128, "warps_m": 4, "warps_n": 2, "th": 16, "tw": 32},
             {"bm": 64, "warps_m": 1, "warps_n": 4, "tw": 32, "th": 8}],
    "3xtf32": [{"stages": 4}, {"stages": 2}, {"tw": 32, "th": 8, "warps_n": 4}, {"bm": 128, "warps_m": 4, "warps_n": 2, "th": 16, "tw": 32},
               {"bm": 64, "warps_m": 1, "warps_n": 4, "tw": 32, "th": 8}, {"bm": 64, "min_blocks": 2}],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default=",".join(STEPS.slugs()))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-vendor", action="store_true")
    args = ap.parse_args()
    report = {"steps": {}, "sweep": [], "vendor": []}
    print(f"{'step':20s} {'checks':>7s} {'worst rel':>10s} {'ms':>9s} {'GFLOP/s':>9s}")
    for slug in args.steps.split(","):
        t0 = time.time()
        entry = {}
        try:
            res = run.check_step(slug, n_random=6, seed=1)
            entry["checks"] = [r.as_dict() for r in res]
            passed = sum(r.passed for r in res)
            worst = max((r.rel_l2_error or float("inf")) if r.rel_l2_error is not None else float("inf") for r in res)
            for r in res:
                if not r.passed:
                    print("   FAIL", r.label, r.shape, r.rel_l2_error, r.unwritten, r.error)
            ms = gf = float("nan")
            if passed == len(res):
                recs = run.measure_step(slug, repeats=args.repeats, warmup=2)
                entry["records"] = recs
                ms = recs[0]["value"]
                gf = recs[1]["value"]
            print(f"{slug:20s} {passed}/{len(res):<5d} {worst:10.2e} {ms:9.3f} {gf:9.0f}   ({time.time() - t0:.0f} s)")
        except Exception as exc:  # keep going: one broken step must not hide the others
            entry["error"] = traceback.format_exc()
            print(f"{slug:20s} ERROR {type(exc).__name__}: {exc}")
        report["steps"][slug] = entry
    if args.sweep:
        for slug, configs in SWEEP.items():
            for cfg in configs:
                try:
                    res = run.check_step(slug, params=cfg, n_random=2, seed=2, full_case=None)
                    ok = all(r.passed for r in res)
                    recs = run.measure_step(slug, params=cfg, repeats=args.repeats, warmup=2) if ok else []
                    ms = recs[0]["value"] if recs else float("nan")
                    print(f"sweep {slug:14s} {json.dumps(cfg):60s} ok={ok} {ms:8.3f} ms")
                    report["sweep"].append({"step": slug, "params": cfg, "ok": ok, "ms": ms})
                except Exception as exc:
                    print(f"sweep {slug} {cfg} ERROR {type(exc).__name__}: {exc}")
    if not args.no_vendor:
        try:
            recs = run.measure_vendor(repeats=args.repeats, warmup=2)
            report["vendor"] = recs
            for r in recs:
                if r["metric"] in ("op_time_ms", "rel_l2_error"):
                    print(f"{r['variant']:20s} {r['metric']:14s} {r['value']:.4g}")
        except Exception as exc:
            print("vendor ERROR", type(exc).__name__, exc)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "vgg_device.json"), "w") as fh:
            json.dump(report, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
