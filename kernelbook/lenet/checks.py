"""The LeNet study's float64 checks: the network's two layers and random valid shapes.

Shapes: the network's two layers (small batches) and random valid shapes, non-square included,
drawn inside what the step accepts. A shape the step refuses is itself checked: it must be
refused by ``validate`` before any launch. The verdict is the core's (``kernelbook.checks``).

The range test: a step that claims FP32 accuracy (tolerance <= 1e-5) is also checked on both
layers with inputs and weights scaled independently by 1e-6 .. 1e6, and with tensors whose
elements mix magnitudes from 1e-6 to 1e6 (RANGE_CASES); tests/test_gpu.py runs a wider grid.
"""

from __future__ import annotations

import numpy as np

from ..checks import claims_fp32_range
from ..errors import KernelbookError
from .problem import ConvShape, layer_shape


def random_shape(rng: np.random.Generator) -> ConvShape:
    """A random valid problem: small, often non-square, K from 1 to 9."""
    K = int(rng.integers(1, 10))
    return ConvShape(B=int(rng.integers(1, 5)), M=int(rng.integers(1, 21)), C=int(rng.integers(1, 7)),
                     H=int(rng.integers(K, K + 48)), W=int(rng.integers(K, K + 48)), K=K)


def network_shapes(batch: int = 3) -> dict[str, ConvShape]:
    return {"C1": layer_shape("C1", batch), "C3": layer_shape("C3", batch)}


def check_case(label: str, shape: ConvShape, rng: np.random.Generator):
    """One problem with fresh inputs in [-1, 1) and its float64 reference."""
    from ..harness import CheckCase
    from .reference import conv2d_reference

    x = rng.uniform(-1.0, 1.0, size=shape.x_shape).astype(np.float32)
    k = rng.uniform(-1.0, 1.0, size=shape.k_shape).astype(np.float32)
    return CheckCase(label, shape, (x, k), lambda: conv2d_reference(x.astype(np.float64), k.astype(np.float64)))


# (x scale, k scale): a number, or "mixed" (standard normal times 10^U(-6, 6) per element)
RANGE_CASES = ((1e-6, 1e-6), (1e6, 1e6), (1e-6, 1e6), (1e6, 1e-6), (1e-3, 1e3), (1e3, 1e-3), ("mixed", 1.0),
               (1.0, "mixed"))


def range_case(layer: str, xs, ks, rng: np.random.Generator, batch: int = 2):
    """One range-test problem: the layer's shape, inputs and weights scaled by ``xs`` / ``ks``."""
    from ..harness import CheckCase
    from .reference import conv2d_reference

    shape = layer_shape(layer, batch)

    def draw(size, scale):
        base = rng.standard_normal(size)
        return (base * (10.0 ** rng.uniform(-6, 6, size=size) if scale == "mixed" else scale)).astype(np.float32)

    x, k = draw(shape.x_shape, xs), draw(shape.k_shape, ks)
    name = lambda v: "mixed" if v == "mixed" else f"{v:g}"  # noqa: E731
    return CheckCase(f"range {layer} x*{name(xs)} k*{name(ks)}", shape, (x, k),
                     lambda: conv2d_reference(x.astype(np.float64), k.astype(np.float64)))


def check_cases(impl, params: dict, n_random: int, rng: np.random.Generator) -> list:
    """The network's two layers (batch 3) plus ``n_random`` random shapes the step accepts, each
    with fresh inputs in [-1, 1) and its float64 reference."""
    shapes = list(network_shapes().items())
    drawn = attempts = 0
    cases = [check_case(label, shape, rng) for label, shape in shapes]
    while drawn < n_random and attempts < 50 * max(n_random, 1):
        attempts += 1
        shape = random_shape(rng)
        try:
            impl.validate(shape, params)
        except KernelbookError:
            continue  # outside this step's limits: not a valid input for it
        cases.append(check_case("random", shape, rng))
        drawn += 1
    if claims_fp32_range(impl):
        cases += [range_case(layer, xs, ks, rng) for layer in ("C1", "C3") for xs, ks in RANGE_CASES]
    return cases
