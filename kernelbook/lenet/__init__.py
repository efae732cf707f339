"""The LeNet-86 study: the network, its two convolution layers and their kernel variants.

Public API::

    from kernelbook import lenet
    y = lenet.conv_forward(x, k, variant="baseline", tile_width=16)   # CuPy arrays, any valid shape
    lenet.variant_names()                                           # every registered step
"""

from __future__ import annotations

from .variants import REGISTRY, ConvShape, ConvVariant, get_variant
from . import direct, gemm  # noqa: F401  (their @register lines fill REGISTRY, in book order)
from ..errors import ShapeError

# The two layers the book studies ("Op 1" and "Op 2"), per image: x (C,H,W) and k (M,C,K,K).
LAYERS = {
    "C1": {"C": 1, "H": 86, "W": 86, "M": 4, "K": 7},
    "C3": {"C": 4, "H": 40, "W": 40, "M": 16, "K": 7},
}


def layer_shape(layer: str, batch: int) -> ConvShape:
    """The network's shape of ``layer`` (``C1`` or ``C3``) for ``batch`` images."""
    if layer not in LAYERS:
        raise ShapeError(f"Unknown layer {layer!r}.", f"use one of: {', '.join(LAYERS)}.")
    check_batch(batch)
    d = LAYERS[layer]
    return ConvShape(B=batch, M=d["M"], C=d["C"], H=d["H"], W=d["W"], K=d["K"])


def check_batch(batch: int) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        raise ShapeError(f"batch={batch!r} must be a positive integer.", "pass a batch size such as 100, 1000 or 10000.")
    return batch


def variant_names() -> list[str]:
    return list(REGISTRY)


def conv_forward(x, k, variant: str = "baseline", out=None, stream=None, **params):
    """Forward convolution of CuPy arrays x (B,C,H,W) and k (M,C,K,K) with one kernel variant.

    Shapes and parameters are validated before anything is launched; ``out`` (optional) must be
    a float32 C-contiguous CuPy array of shape (B, M, H-K+1, W-K+1).
    """
    import cupy as cp

    impl = get_variant(variant)
    merged = impl.params(**params)
    for name, arr in (("x", x), ("k", k)):
        if not isinstance(arr, cp.ndarray) or arr.dtype != cp.float32 or not arr.flags.c_contiguous:
            raise ShapeError(f"{name} must be a C-contiguous float32 CuPy array (got {type(arr).__name__}"
                             f" {getattr(arr, 'dtype', '')}).",
                             f"convert with cupy.ascontiguousarray({name}, dtype=cupy.float32).")
    shape = ConvShape.from_arrays(x.shape, k.shape)
    impl.validate(shape, merged)
    if out is None:
        out = cp.empty(shape.y_shape, dtype=cp.float32)
    elif out.shape != shape.y_shape or out.dtype != cp.float32 or not out.flags.c_contiguous:
        raise ShapeError(f"out has shape {out.shape} {out.dtype}; expected {shape.y_shape} float32.",
                         "pass out=None to allocate it, or a matching C-contiguous array.")
    impl.launch(out, x, k, shape, merged, stream=stream)
    return out


__all__ = ["ConvShape", "ConvVariant", "LAYERS", "conv_forward", "get_variant", "layer_shape",
           "variant_names", "check_batch"]
