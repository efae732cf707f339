"""The VGG layer study: one 5×5 'same' convolution with bias, ReLU and 2×2 max-pool, step by step.

Public API::

    from kernelbook import vgg
    y = vgg.forward(x, w, b, step="tf32", bm=64)   # CuPy float32 arrays, any valid shape
    vgg.STEPS.slugs()                              # the steps, in book order
    vgg.CASES["B1"]                               # the studied layer, 164.4 GFLOP

Only NumPy and CuPy are needed to import and run this package (PyTorch only for the cuDNN
comparison in ``study.measure_vendor``).
"""

from __future__ import annotations

from ..errors import ShapeError
from .problem import CASES, ConvPoolShape, case
from .steps import STEPS

NAME = "vgg"

__all__ = ["NAME", "STUDY", "STEPS", "CASES", "ConvPoolShape", "case", "forward", "check_arrays"]


def require_gpu() -> None:
    from .. import gpu

    gpu.require("the VGG kernels")


def check_arrays(x, w, b, out=None) -> ConvPoolShape:
    """The call's shape; each array must be a C-contiguous float32 CuPy array of a consistent shape."""
    import cupy as cp

    for name, arr in (("x", x), ("w", w), ("b", b)) + ((("out", out),) if out is not None else ()):
        if not isinstance(arr, cp.ndarray) or arr.dtype != cp.float32 or not arr.flags.c_contiguous:
            got = f"{type(arr).__name__} {getattr(arr, 'dtype', '')}".strip()
            raise ShapeError(f"{name} must be a C-contiguous float32 CuPy array (got {got}).",
                             f"convert with cupy.ascontiguousarray({name}, dtype=cupy.float32).")
    shape = ConvPoolShape.from_arrays(x.shape, w.shape, b.shape)
    if out is not None and tuple(out.shape) != shape.y_shape:
        raise ShapeError(f"out has shape {tuple(out.shape)}; this call writes {shape.y_shape}.",
                         "pass out=None (allocated for you) or an array of shape (B, M, H // 2, W // 2).")
    return shape


def forward(x, w, b, step: str = "baseline", out=None, stream=None, **params):
    """pool2x2(relu(conv_same(x, w) + b)) with one step's kernel; returns ``out``.

    Parameters are merged with the step's defaults; shapes and parameters are validated before
    anything is launched. Without a usable GPU this raises ``GPUUnavailable``.
    """
    impl = STEPS.impl(step)
    merged = impl.params(**params)
    require_gpu()
    import cupy as cp

    shape = check_arrays(x, w, b, out)
    impl.validate(shape, merged)
    if out is None:
        out = cp.empty(shape.y_shape, dtype=cp.float32)
    impl.launch(out, x, w, b, shape, merged, stream=stream)
    return out


from .study import STUDY  # noqa: E402  (the study object needs the functions above)
