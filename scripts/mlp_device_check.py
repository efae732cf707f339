"""MLP study on the device machine: check every step against float64, time it at both test
cases, sweep a few launch shapes, and time PyTorch. Exploratory numbers, printed as a table
and written to $OUT/mlp_device_check.json (not a recorded run).

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 scripts/mlp_device_check.py [--steps a,b] [--sweep] [--vendor]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback

from kernelbook.mlp import STEPS
from kernelbook.mlp import study as mlp_study
from kernelbook.mlp.sweeps import SWEEPS as DECLARED_SWEEPS

# The launch shapes tried are the study's declared sweeps (kernelbook/mlp/sweeps.py), which the
# book records through the core; this script only times them for a quick look.
SWEEPS = {slug: sweep.configurations() for slug, sweep in DECLARED_SWEEPS.items()}


def median(rec):
    return rec["value"]


def time_step(slug, params=None, repeats=20):
    recs = mlp_study.measure_step(slug, params, repeats=repeats, warmup=3)
    row = {}
    for r in recs:
        row[(r["layer"], r["metric"])] = r["value"]
    return row, recs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-steps", default="")
    ap.add_argument("--vendor", action="store_true")
    ap.add_argument("--n-random", type=int, default=2)
    args = ap.parse_args()
    slugs = args.steps.split(",") if args.steps else STEPS.slugs()
    out = {"checks": {}, "times": {}, "sweeps": {}, "vendor": []}
    t0 = time.time()
    print(f"{'step':26s} {'check':>6s} {'worst':>9s} {'5x5 ms':>9s} {'100x100 ms':>10s} "
          f"{'+upload':>8s} {'relL2':>8s} {'scaled':>8s}")
    for slug in slugs:
        try:
            res = mlp_study.check_step(slug, n_random=args.n_random, seed=1)
            ok = all(r.passed for r in res)
            worst = max((r.measured if r.measured is not None else float("inf")) for r in res)
            out["checks"][slug] = [r.as_dict() for r in res]
            bad = [f"{r.label}:{r.error or r.measured}" for r in res if not r.passed]
            row, recs = time_step(slug)
            out["times"][slug] = recs
            print(f"{slug:26s} {'ok' if ok else 'FAIL':>6s} {worst:9.2e} {row[('5x5', 'op_time_ms')]:9.4f} "
                  f"{row[('100x100', 'op_time_ms')]:10.4f} {row[('100x100', 'time_with_upload_ms')]:8.3f} "
                  f"{row[('100x100', 'rel_l2_error')]:8.1e} {row[('100x100', 'scaled_abs_diff')]:8.1e}"
                  f"  [{time.time() - t0:.0f}s]" + (f"  {bad[:3]}" if bad else ""))
        except Exception:
            print(f"{slug:26s} ERROR\n{traceback.format_exc()}")
    if args.sweep:
        chosen = args.sweep_steps.split(",") if args.sweep_steps else list(SWEEPS)
        for slug, grid in ((s, SWEEPS[s]) for s in chosen):
            for params in grid:
                try:
                    row, _ = time_step(slug, params, repeats=10)
                    out["sweeps"].setdefault(slug, []).append({"params": params, **{f"{k[0]}:{k[1]}": v for k, v in row.items()}})
                    print(f"sweep {slug} {params}: 5x5 {row[('5x5', 'op_time_ms')]:.4f} ms, "
                          f"100x100 {row[('100x100', 'op_time_ms')]:.4f} ms, rel {row[('100x100', 'rel_l2_error')]:.1e}")
                except Exception as exc:
                    print(f"sweep {slug} {params}: {type(exc).__name__}: {exc}")
    if args.vendor:
        try:
            recs = mlp_study.measure_vendor(repeats=20, warmup=3)
            out["vendor"] = recs
            for r in recs:
                if r["metric"] in ("op_time_ms", "rel_l2_error"):
                    print(f"vendor {r['step']:14s} {r['layer']:8s} {r['metric']:14s} {r['value']:.4g} {r.get('timing', '')}")
        except Exception:
            print(traceback.format_exc())
    dest = os.environ.get("OUT", ".")
    with open(os.path.join(dest, "mlp_device_check.json"), "w") as fh:
        json.dump(out, fh, default=str)
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
