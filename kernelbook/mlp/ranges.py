"""The range test: inputs and weights over FP32's range (magnitudes 1e-6 to 1e6).

A step that claims FP32 accuracy (``kernelbook.checks.claims_fp32_range``) must keep its
relative L2 error against float64 at or below 1e-5 for any finite float32 data whose products
and sums stay finite in float32. These cases probe that: the inputs and each layer's weights
scaled independently by powers of ten from 1e-6 to 1e6 (each bias scaled like its layer's output,
so that it still matters), and tensors whose elements, columns or rows mix magnitudes from 1e-6
to 1e6. ``cases(rng, grid=False)`` gives the chapter's 16; ``grid=True`` the full grid of 630
(5 input scales x 5^3 weight scales, and the 5 scales with the biases left as drawn) plus the
8 mixed cases, which the GPU tests run.
"""

from __future__ import annotations

import itertools

import numpy as np

from .data import make_weights

SCALES = (1e-6, 1e-3, 1.0, 1e3, 1e6)
COLUMNS = 300           # enough for several warp tiles and a ragged last one
# The chapter's subset: (x scale, (W1, W2, W3) scales).
SUBSET = ((1e-6, (1e-6, 1e-6, 1e-6)), (1e6, (1e6, 1e6, 1e6)), (1e-6, (1e6, 1e6, 1e6)), (1e6, (1e-6, 1e-6, 1e-6)),
          (1.0, (1e-6, 1e6, 1e-6)), (1.0, (1e6, 1e-6, 1e6)), (1e-3, (1e3, 1e3, 1e3)), (1e3, (1e-3, 1e-3, 1e-3)))


def _scaled(weights, sx, sw):
    W1, b1, W2, b2, W3, b3 = weights
    s1, s2, s3 = sw
    f = np.float32
    return (W1 * f(s1), b1 * f(sx * s1), W2 * f(s2), b2 * f(sx * s1 * s2), W3 * f(s3), b3 * f(sx * s1 * s2 * s3))


def cases(rng: np.random.Generator, grid: bool = False, n: int = COLUMNS):
    """Yield (label, x (71, n) float32, weights) triples."""
    weights = make_weights(int(rng.integers(2**31)))
    x = rng.uniform(-1, 1, size=(71, n)).astype(np.float32)
    pairs = (itertools.product(SCALES, itertools.product(SCALES, repeat=3)) if grid else SUBSET)
    for sx, sw in pairs:
        yield f"range x*{sx:g} W*{sw[0]:g},{sw[1]:g},{sw[2]:g}", x * np.float32(sx), _scaled(weights, sx, sw)
    if grid:
        for sx in SCALES:
            yield f"range x*{sx:g}, biases as drawn", x * np.float32(sx), weights

    def mixed(shape):
        return (10.0 ** rng.uniform(-6, 6, size=shape)).astype(np.float32)

    W1, b1, W2, b2, W3, b3 = weights
    r = mixed((64, 1))
    yield "range mixed x elements", x * mixed(x.shape), weights
    yield "range mixed x columns", x * mixed((1, n)), weights
    yield "range mixed x rows", x * mixed((71, 1)), weights
    yield "range mixed W1 elements", x, (W1 * mixed(W1.shape), b1, W2, b2, W3, b3)
    yield "range mixed W2 elements", x, (W1, b1, W2 * mixed(W2.shape), b2, W3, b3)
    yield "range mixed W3 elements", x, (W1, b1, W2, b2, W3 * mixed(W3.shape), b3)
    yield "range mixed W1 rows, W2 columns inverse", x, (W1 * r, b1 * r[:, 0], (W2 / r.T).astype(np.float32), b2, W3, b3)
    yield "range mixed everything", x * mixed(x.shape), (W1 * mixed(W1.shape), b1, W2 * mixed(W2.shape), b2,
                                                         W3 * mixed(W3.shape), b3)


