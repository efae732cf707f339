#!/usr/bin/env python3
"""Host cost of ``kernelbook.mlp.forward`` per call, beyond the kernel launch (issue 19).

    PYTHONUNBUFFERED=1 python3 scripts/bench_mlp_forward_host.py [--steps fp32-register-tiled,final-full-range]

For each step, at N = 256 columns (kernels of a few microseconds, so the GPU never holds the host
back; the queue is drained every 25 calls outside the timed region), the host time per call of:

- ``launch``       the step's own launch on prepared weights (``impl.launch``): the floor;
- ``forward``      ``forward(x, weights, step, out=y)`` with the same six arrays every call
                   (validated and packed once, then cached);
- ``prepared``     ``forward`` with ``PreparedWeights``;
- ``uncached``     ``forward`` after ``forget_weights()`` every call (what every call cost before:
                   a device->host copy of the weights, the finite check, packing).

It prints the cost beyond ``launch`` (target: <= 15 us per call on prepared weights).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def per_call(fn, calls: int) -> float:
    import cupy as cp

    for _ in range(20):
        fn()
    cp.cuda.Device().synchronize()
    spent = 0.0
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        spent += time.perf_counter() - t0
        if i % 25 == 24:
            cp.cuda.Device().synchronize()
    cp.cuda.Device().synchronize()
    return spent / calls * 1e6


def main():
    import cupy as cp

    from kernelbook import mlp
    from kernelbook.mlp import STEPS, data, forget_weights, forward

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="fp32-register-tiled,final-full-range,final,tensor-core-fp16")
    ap.add_argument("--n", type=int, default=256)
    args = ap.parse_args()
    n = args.n
    w = tuple(cp.asarray(a) for a in data.make_weights(1))
    x = cp.asarray(data.make_signals(n, 2))
    y = cp.empty((4, n), cp.float32)
    print(f"host time per call, N={n} (us)")
    print(f"{'step':24s} {'launch':>8s} {'forward':>8s} {'prepared':>9s} {'uncached':>9s} {'forward-launch':>15s}")
    for slug in args.steps.split(","):
        impl = STEPS.impl(slug)
        params = impl.params()
        shape = mlp.MlpShape(n)
        prepared = impl.prepare_weights(w)
        impl.launch(y, x, prepared, shape, params)
        launch = per_call(lambda: impl.launch(y, x, prepared, shape, params), 400)
        fwd = per_call(lambda: forward(x, w, step=slug, out=y), 400)
        prep = per_call(lambda: forward(x, prepared, step=slug, out=y), 400)

        def uncached():
            forget_weights()
            forward(x, w, step=slug, out=y)

        unc = per_call(uncached, 40)
        print(f"{slug:24s} {launch:8.1f} {fwd:8.1f} {prep:9.1f} {unc:9.1f} {fwd - launch:15.1f}")
    forget_weights()


if __name__ == "__main__":
    main()
