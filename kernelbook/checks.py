"""Correctness gates timing: every variant is checked against a float64 reference first.

Each check draws fresh random inputs (never zeros), poisons the output with NaN before the
launch, and compares with ``reference.conv2d_reference`` in float64 by the relative L2 error
||out - ref|| / ||ref||. An unwritten element stays NaN, and NaN never passes.

Shapes: the network's two layers (small batches) and random valid shapes, non-square
included, drawn inside what the variant accepts. A shape the variant refuses is itself
checked: it must raise ``ShapeError`` before any launch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .errors import ShapeError
from .lenet.variants import ConvShape, ConvVariant


@dataclass
class CheckResult:
    label: str            # "C1", "C3" or "random"
    shape: dict
    passed: bool
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    unwritten: int | None = None
    tolerance: float | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def random_shape(rng: np.random.Generator) -> ConvShape:
    """A random valid problem: small, often non-square, K from 1 to 9."""
    K = int(rng.integers(1, 10))
    return ConvShape(
        B=int(rng.integers(1, 5)),
        M=int(rng.integers(1, 21)),
        C=int(rng.integers(1, 7)),
        H=int(rng.integers(K, K + 48)),
        W=int(rng.integers(K, K + 48)),
        K=K,
    )


def network_shapes(batch: int = 3) -> dict[str, ConvShape]:
    from .lenet import layer_shape

    return {"C1": layer_shape("C1", batch), "C3": layer_shape("C3", batch)}


def check_shape(variant: ConvVariant, params: dict, shape: ConvShape, rng: np.random.Generator,
                label: str = "random") -> CheckResult:
    """Run ``variant`` once on random data of ``shape`` and compare with float64."""
    import cupy as cp

    from .lenet import conv_forward
    from .reference import conv2d_reference

    x = rng.uniform(-1.0, 1.0, size=shape.x_shape).astype(np.float32)
    k = rng.uniform(-1.0, 1.0, size=shape.k_shape).astype(np.float32)
    out = cp.full(shape.y_shape, cp.nan, dtype=cp.float32)  # poison: unwritten stays NaN
    try:
        conv_forward(cp.asarray(x), cp.asarray(k), variant.slug, out=out, **params)
        cp.cuda.get_current_stream().synchronize()
    except Exception as exc:  # a failed launch is a failed check, shown as such
        return CheckResult(label, shape.as_dict(), False, tolerance=variant.tolerance,
                           error=f"{type(exc).__name__}: {exc}")
    got = out.get().astype(np.float64)
    ref = conv2d_reference(x.astype(np.float64), k.astype(np.float64))
    unwritten = int(np.isnan(got).sum())
    diff = np.nan_to_num(got - ref, nan=np.inf)
    denom = float(np.linalg.norm(ref)) or 1.0
    rel = float(np.linalg.norm(diff) / denom)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    passed = unwritten == 0 and np.isfinite(rel) and rel <= variant.tolerance
    return CheckResult(label, shape.as_dict(), bool(passed), rel, max_abs, unwritten, variant.tolerance)


def check_refusal(variant: ConvVariant, params: dict, shape: ConvShape) -> CheckResult:
    """An out-of-limit shape must be refused by ``validate`` (which runs before any launch)."""
    try:
        variant.validate(shape, params)
    except ShapeError as exc:
        return CheckResult("refused", shape.as_dict(), True, error=str(exc))
    return CheckResult("refused", shape.as_dict(), False, error="the shape was accepted")


def check_variant(variant: ConvVariant, params: dict, n_random: int = 8, seed: int | None = None,
                  batch: int = 3) -> list[CheckResult]:
    """The network's two layers plus ``n_random`` random shapes the variant accepts."""
    rng = np.random.default_rng(seed)
    results = [check_shape(variant, params, shape, rng, label)
               for label, shape in network_shapes(batch).items()]
    drawn = 0
    attempts = 0
    while drawn < n_random and attempts < 50 * max(n_random, 1):
        attempts += 1
        shape = random_shape(rng)
        try:
            variant.validate(shape, params)
        except ShapeError:
            continue  # outside this variant's limits: not a valid input for it
        results.append(check_shape(variant, params, shape, rng))
        drawn += 1
    return results


def all_passed(results: list[CheckResult]) -> bool:
    return bool(results) and all(r.passed for r in results)
