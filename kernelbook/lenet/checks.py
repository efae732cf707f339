"""The LeNet study's float64 checks: the network's two layers and random valid shapes.

Shapes: the network's two layers (small batches) and random valid shapes, non-square included,
drawn inside what the step accepts. A shape the step refuses is itself checked: it must be
refused by ``validate`` before any launch. The verdict is the core's (``kernelbook.checks``).
"""

from __future__ import annotations

import numpy as np

from ..checks import CheckResult, all_passed, poisoned, run_check  # noqa: F401  (all_passed: for study.py)
from ..errors import KernelbookError
from .problem import ConvShape, layer_shape


def random_shape(rng: np.random.Generator) -> ConvShape:
    """A random valid problem: small, often non-square, K from 1 to 9."""
    K = int(rng.integers(1, 10))
    return ConvShape(B=int(rng.integers(1, 5)), M=int(rng.integers(1, 21)), C=int(rng.integers(1, 7)),
                     H=int(rng.integers(K, K + 48)), W=int(rng.integers(K, K + 48)), K=K)


def network_shapes(batch: int = 3) -> dict[str, ConvShape]:
    return {"C1": layer_shape("C1", batch), "C3": layer_shape("C3", batch)}


def check_shape(impl, params: dict, shape: ConvShape, rng: np.random.Generator, label: str = "random") -> CheckResult:
    """Run the step once on fresh random data of ``shape`` and compare with float64."""
    import cupy as cp

    from . import conv_forward
    from .reference import conv2d_reference

    x = rng.uniform(-1.0, 1.0, size=shape.x_shape).astype(np.float32)
    k = rng.uniform(-1.0, 1.0, size=shape.k_shape).astype(np.float32)

    def launch():
        out = poisoned(shape.y_shape)
        conv_forward(cp.asarray(x), cp.asarray(k), impl.slug, out=out, **params)
        cp.cuda.get_current_stream().synchronize()
        return out

    return run_check(label, shape.as_dict(), impl.tolerance, launch,
                     lambda: conv2d_reference(x.astype(np.float64), k.astype(np.float64)))


def check_variant(impl, params: dict, n_random: int = 8, seed: int | None = None, batch: int = 3) -> list[CheckResult]:
    """The network's two layers plus ``n_random`` random shapes the step accepts."""
    rng = np.random.default_rng(seed)
    results = [check_shape(impl, params, shape, rng, label) for label, shape in network_shapes(batch).items()]
    drawn = attempts = 0
    while drawn < n_random and attempts < 50 * max(n_random, 1):
        attempts += 1
        shape = random_shape(rng)
        try:
            impl.validate(shape, params)
        except KernelbookError:
            continue  # outside this step's limits: not a valid input for it
        results.append(check_shape(impl, params, shape, rng))
        drawn += 1
    return results
