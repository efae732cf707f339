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

from kernelbook.vgg import STEPS, run, study
from kernelbook.vgg.sweeps import SWEEPS as DECLARED_SWEEPS

# The tile shapes tried are the study's declared sweeps (kernelbook/vgg/sweeps.py), which the book
# records through the core; this script only times them for a quick look.
SWEEP = {slug: sweep.configurations() for slug, sweep in DECLARED_SWEEPS.items()}


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
            res = study.check_step(slug, n_random=6, seed=1)
            entry["checks"] = [r.as_dict() for r in res]
            passed = sum(r.passed for r in res)
            worst = max((r.rel_l2_error or float("inf")) if r.rel_l2_error is not None else float("inf") for r in res)
            for r in res:
                if not r.passed:
                    print("   FAIL", r.label, r.shape, r.rel_l2_error, r.unwritten, r.error)
            ms = gf = float("nan")
            if passed == len(res):
                recs = study.measure_step(slug, repeats=args.repeats, warmup=2)
                entry["records"] = recs
                ms = recs[0]["value"]
                gf = recs[1]["value"]
            print(f"{slug:20s} {passed}/{len(res):<5d} {worst:10.2e} {ms:9.3f} {gf:9.0f}   ({time.time() - t0:.0f} s)")
        except Exception as exc:  # keep going: one broken step must not hide the others
            entry["error"] = traceback.format_exc()
            print(f"{slug:20s} ERROR {type(exc).__name__}: {exc}")
        report["steps"][slug] = entry
    if "final" in args.steps.split(","):
        # step 10 switches kernels on K: check the 3xTF32 path (K = 9, 3 here) beside the Winograd one
        import numpy as np
        import cupy as cp
        from kernelbook.vgg import ConvPoolShape, forward
        from kernelbook.vgg.reference import reference
        rng = np.random.default_rng(7)
        for shape in (ConvPoolShape(1, 16, 17, 40, 16, 9), ConvPoolShape(2, 9, 33, 3, 35, 3), ConvPoolShape(1, 1, 2, 2, 1, 1)):
            try:
                x, w, b = run.random_inputs(shape, rng)
                dx, dw, db = run.upload(x, w, b)
                y = cp.full(shape.y_shape, cp.nan, dtype=cp.float32)
                forward(dx, dw, db, step="final", out=y)
                got, ref = y.get(), reference(x, w, b)
                err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                print(f"final edge {shape.as_dict()} nan={int(np.isnan(got).sum())} rel={err:.2e}")
            except Exception as exc:
                print(f"final edge {shape.as_dict()} ERROR {type(exc).__name__}: {exc}")
    if args.sweep:
        for slug, configs in SWEEP.items():
            for cfg in configs:
                try:
                    res = study.check_step(slug, params=cfg, n_random=2, seed=2, full_case=None)
                    ok = all(r.passed for r in res)
                    recs = study.measure_step(slug, params=cfg, repeats=args.repeats, warmup=2) if ok else []
                    ms = recs[0]["value"] if recs else float("nan")
                    print(f"sweep {slug:14s} {json.dumps(cfg):60s} ok={ok} {ms:8.3f} ms")
                    report["sweep"].append({"step": slug, "params": cfg, "ok": ok, "ms": ms})
                except Exception as exc:
                    print(f"sweep {slug} {cfg} ERROR {type(exc).__name__}: {exc}")
    if not args.no_vendor:
        try:
            recs = study.measure_vendor(repeats=args.repeats, warmup=2)
            report["vendor"] = recs
            for r in recs:
                if r["metric"] in ("op_time_ms", "rel_l2_error"):
                    print(f"{r['step']:20s} {r['metric']:14s} {r['value']:.4g}")
        except Exception as exc:
            print("vendor ERROR", type(exc).__name__, exc)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "vgg_device.json"), "w") as fh:
            json.dump(report, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
