"""How much of a small problem's recorded time is the timer's own: a development probe.

The book times a step by replaying a CUDA graph of ONE call per sample, with CUDA events
around the replay (kernelbook.measure.time_gpu(graph=True)). For a kernel of a few
microseconds the sample also holds the graph launch's own latency. This script measures, on
the device, in one process:

  1. an empty kernel, timed the book's way and as a graph of R back-to-back calls per sample
     (the per-call mean): the timer's floor under each method;
  2. MLP steps 14, 15, 17 at 12,800 columns, both ways, and with inputs rotated over 24
     copies (87 MB, so that no call finds its input in L2).

Usage (device): PYTHONPATH=/tmp/site:$PWD python3 scripts/bench_timing_floor.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from bench_mlp_hopper import graph_time  # one CUDA graph of the calls, repeated; per-call times


def main():
    import cupy as cp

    from kernelbook import mlp
    from kernelbook.measure import time_gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    res = {}

    empty = cp.RawKernel(r'extern "C" __global__ void empty_kernel(int n) {}', "empty_kernel")
    call = lambda: empty((1,), (32,), (np.int32(0),))  # noqa: E731
    m = time_gpu(call, repeats=30, warmup=3, graph=True)
    res["empty/book"] = (m.median, m.min, m.max)
    res["empty/graph20"] = graph_time([call], repeats=30, per_graph=20)

    n = mlp.CASES["5x5"]
    rng = np.random.default_rng(5)
    w = tuple(cp.asarray(a) for a in mlp.make_weights(rng)) if callable(getattr(mlp, "make_weights", None)) else None
    if w is None:
        w = tuple(cp.asarray(a) for a in mlp.load_weights())
    xs = [cp.asarray(rng.uniform(-1, 1, size=(71, n)).astype(np.float32)) for _ in range(24)]
    ys = [cp.empty((4, n), cp.float32) for _ in range(24)]
    for step in ("tensor-core-fp16", "final", "final-full-range"):
        prepared = mlp.STEPS.impl(step).prepare_weights(w)
        one = lambda s=step: mlp.forward(xs[0], prepared, step=s, out=ys[0])  # noqa: E731
        m = time_gpu(one, repeats=30, warmup=3, graph=True)
        res[f"{step}/book"] = (m.median, m.min, m.max)
        res[f"{step}/graph20"] = graph_time([one], repeats=30, per_graph=20)
        rot = [(lambda x=x, y=y, s=step: mlp.forward(x, prepared, step=s, out=y)) for x, y in zip(xs, ys)]
        res[f"{step}/graph24rot"] = graph_time(rot, repeats=30, per_graph=1)

    with open(os.path.join(args.out, "timing_floor.json"), "w") as f:
        json.dump({k: list(v) for k, v in res.items()}, f, indent=1)
    for k, (med, lo, hi) in res.items():
        print(f"{k:34s} {med * 1e3:8.2f} us  (min {lo * 1e3:.2f}, max {hi * 1e3:.2f})")


if __name__ == "__main__":
    main()
