#!/usr/bin/env python3
"""Session 5 development candidate (not a step): MLP step 19 with layer 1 in 3xTF32
(kernels/mlp/_s19tf32.cu), checked, range-tested and timed beside the committed step 19.

    cd scripts && PYTHONUNBUFFERED=1 PYTHONPATH=.. python3 bench_s19tf32.py --out $OUT [--emulate]

Kept as a record beside its output (data/bench/mlp/s5-s19/call2/): to run it again, copy it into
scripts/ and make the kernel from step 19 at commit a10a6bf with the patch kept here:
    cp kernels/mlp/19_wgmma_full_range.cu kernels/mlp/_s19tf32.cu
    patch kernels/mlp/_s19tf32.cu data/bench/mlp/s5-s19/call2/_s19tf32.patch

The blob: W1 as TF32 hi (bits & 0xffffe000) and lo (w - hi, FP32), K-major without swizzle, 9
k-steps of 2,048 bytes each, the k order inside a k-step permuted as the kernel reads x (logical k
= q at input 8j + 2q, k = q + 4 at 8j + 2q + 1); then step 19's own W2 / W3 / bias / header bytes.
--emulate (CPU only): layer 1 from the packed TF32 halves, with every operand's low 13 bits
cleared as the tensor cores read them, against float64.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_mlp_s19 as s19  # noqa: E402

b, pack = s19.b, s19.pack
K1 = 9
PERM = np.array([8 * j + (2 * kk if kk < 4 else 2 * (kk - 4) + 1) for j in range(K1) for kk in range(8)])
SPAN = 55296


def trunc13(a):
    return (np.asarray(a, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def w1_halves(W1):
    """(hi, lo) of W1 padded to 72 inputs, columns in the kernel's logical k order."""
    W = np.zeros((64, 72), np.float32)
    W[:, :71] = W1
    W = W[:, PERM]
    hi = trunc13(W)
    lo = (W - hi).astype(np.float32)
    return hi, lo


def tf32_b(W):
    """(64, 72) -> wgmma's K-major B without swizzle: [j][row group][core matrix][row][4 values]."""
    return np.ascontiguousarray(W.reshape(8, 8, K1, 2, 4).transpose(2, 0, 3, 1, 4))


def blob(w):
    W1, b1, W2, b2, W3, b3 = (np.asarray(a, np.float32) for a in w)
    # step 19's pack for the rest; W1 replaced by ones so that only W2 decides its exact_only flag
    p = pack.wgmma_full_range((np.ones_like(W1), b1, W2, b2, W3, b3))
    hi, lo = w1_halves(W1)
    nz = np.abs(W1[W1 != 0])
    exact = int(p["exact_only"]) or int(nz.size > 0 and (nz.min() < 2.0 ** -107 or not np.isfinite(nz).all()))
    out = np.concatenate([tf32_b(hi).ravel().view(np.uint8), tf32_b(lo).ravel().view(np.uint8),
                          p["wgmma"][20480:]])
    assert out.size == 54832, out.size
    raw = pack.wgmma_full_range(w)["raw"]
    return out, raw, exact


def nospin(step, src, wgs):
    """Rebuild without SPIN_LIMIT: its trap branch in barrier_wait makes ptxas serialise the
    candidate's wgmma (C7520), which call 2's first run measured by mistake."""
    import cupy as cp
    from kernelbook import kernels

    out = Path("/tmp") / f"nospin_{Path(src).stem}_{wgs}.cubin"
    path, report = kernels.compile_cubin("mlp/" + src, {"WGS": wgs}, arch="sm_90a", out=out)
    print(f"  {step.name} without SPIN_LIMIT: " + "; ".join(f"{r.registers} registers" for r in report))
    step.fn = cp.RawModule(path=str(path)).get_function("wgmmaFullRangeKernel")
    step.fn.max_dynamic_shared_size_bytes = step.smem
    step.name += "-nospin"


class Step19TF32(s19.Step19):
    def __init__(self, wgs, force_exact=False):
        super().__init__(wgs, force_exact=force_exact, src="_s19tf32.cu")
        self.name = self.name.replace("@_s19tf32", "-tf32L1")
        self.smem = 1024 + SPAN + wgs * 2 * 20480
        self.fn.max_dynamic_shared_size_bytes = self.smem

    def prepare(self, w_host, w_dev):
        import cupy as cp

        data, raw, exact = blob(w_host)
        return cp.asarray(data), cp.asarray(raw), int(exact or self.force_exact)


def emulate():
    rng = np.random.default_rng(5)
    for scale in (1.0, 1e-6, 1e6):
        x = (rng.uniform(-1, 1, (71, 256)) * scale).astype(np.float32)
        w = b.make_weights(rng)
        hi, lo = w1_halves(w[0])
        xp = np.zeros((72, 256), np.float32)
        xp[:71] = x
        xp = xp[PERM]
        xh = trunc13(xp)
        xl = trunc13(xp - xh)
        f64 = np.float64
        got = (hi.astype(f64) @ xh.astype(f64) + hi.astype(f64) @ xl.astype(f64)
               + trunc13(lo).astype(f64) @ xh.astype(f64))
        ref = w[0].astype(f64) @ x.astype(f64)
        print(f"scale {scale:g}: layer-1 rel L2 {np.linalg.norm(got - ref) / np.linalg.norm(ref):.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--emulate", action="store_true")
    args = ap.parse_args()
    if args.emulate:
        emulate()
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    res: dict = {"checks": {}, "range": {}, "times": {}}
    steps = [s19.Step19(3), Step19TF32(3), Step19TF32(2), Step19TF32(3, force_exact=True)]
    nospin(steps[0], "19_wgmma_full_range.cu", 3)
    nospin(steps[1], "_s19tf32.cu", 3)
    rng = np.random.default_rng(1234)
    s19.checks(steps, rng, res["checks"])
    b.range_test(steps, rng, res["range"])
    fast = [s for s in steps if not s.name.endswith("-EXACT") and res["checks"].get(s.name, {}).get("passed")]
    s19.time_at(fast, b.N_LARGE, 5, res["times"])
    s19.time_at(fast, b.N_SMALL, 20, res["times"])
    (out_dir / "bench_s19tf32.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
