"""The VGG layer study: one 5×5 'same' convolution with bias, ReLU and 2×2 max-pool, step by step.

Public API::

    from kernelbook import vgg
    y = vgg.forward(x, w, b, step="tf32", bm=64)   # CuPy float32 arrays, any valid shape
    vgg.STEPS.slugs()                              # the steps, in book order
    vgg.CASES["B1"]                               # the studied layer, 164.4 GFLOP
    pw = vgg.prepare_weights(w, step="hopper-3xtf32")   # Hopper steps: weights packed once
    y = vgg.forward(x, pw, b, step="hopper-3xtf32")     # each call packs only the input

Only NumPy and CuPy are needed to import and run this package (PyTorch only for the cuDNN
comparison in ``study.measure_vendor``).
"""

from __future__ import annotations

from ..errors import ParameterError, ShapeError
from .problem import CASES, ConvPoolShape, case
from .steps import STEPS

NAME = "vgg"

__all__ = ["NAME", "STUDY", "STEPS", "CASES", "ConvPoolShape", "case", "forward", "check_arrays", "prepare_weights"]


def require_gpu() -> None:
    from .. import gpu

    gpu.require("the VGG kernels")


def _check_array(name, arr) -> None:
    import cupy as cp

    if not isinstance(arr, cp.ndarray) or arr.dtype != cp.float32 or not arr.flags.c_contiguous:
        got = f"{type(arr).__name__} {getattr(arr, 'dtype', '')}".strip()
        raise ShapeError(f"{name} must be a C-contiguous float32 CuPy array (got {got}).",
                         f"convert with cupy.ascontiguousarray({name}, dtype=cupy.float32).")


def check_weights(w) -> None:
    """``w`` alone: a C-contiguous float32 CuPy array of shape (M, C, K, K), K odd."""
    _check_array("w", w)
    ConvPoolShape.from_arrays((1, w.shape[1] if w.ndim == 4 else 1, 2, 2), w.shape)


def check_arrays(x, w, b, out=None) -> ConvPoolShape:
    """The call's shape; each array must be a C-contiguous float32 CuPy array of a consistent shape
    (``w`` may be a ``PreparedWeights`` of a Hopper step: its shape is the prepared array's)."""
    from .hopper import PreparedWeights

    prepared = isinstance(w, PreparedWeights)
    for name, arr in (("x", x),) + ((() if prepared else (("w", w),))) + (("b", b),) + (
            (("out", out),) if out is not None else ()):
        _check_array(name, arr)
    shape = ConvPoolShape.from_arrays(x.shape, w.w_shape if prepared else w.shape, b.shape)
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
    from .hopper import PreparedWeights

    if isinstance(w, PreparedWeights) and w.slug != impl.slug:
        raise ParameterError(f"These weights were prepared for step {w.slug!r}, not {impl.slug!r}.",
                             f"prepare them for it: vgg.prepare_weights(w, step={impl.slug!r}).")
    impl.validate(shape, merged)
    if out is None:
        out = cp.empty(shape.y_shape, dtype=cp.float32)
    impl.launch(out, x, w, b, shape, merged, stream=stream)
    return out


def prepare_weights(w, step: str, **params):
    """``w`` packed once for a Hopper step (11-14): a ``PreparedWeights`` to pass as ``w`` to
    ``forward`` (each call then packs only the input). It holds a copy of ``w`` taken now; later
    changes to ``w`` do not reach it."""
    impl = STEPS.impl(step)
    if not hasattr(impl, "prepare_weights"):
        raise ParameterError(f"Step {step!r} packs no weights ahead of the call.",
                             "pass the weight array itself to forward, or use a Hopper step (hopper-tf32, "
                             "hopper-fp16, hopper-3xtf32, hopper-split).")
    merged = impl.params(**params)
    require_gpu()
    check_weights(w)
    return impl.prepare_weights(w, merged)


from .study import STUDY  # noqa: E402  (the study object needs the functions above)
