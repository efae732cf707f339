"""The LeNet-86 study: the network, its two convolution layers and the steps that compute them.

Public API::

    from kernelbook import lenet
    y = lenet.conv_forward(x, k, step="baseline", tile_width=16)   # CuPy arrays, any valid shape
    lenet.step_names()                                             # every step, in book order
    lenet.STUDY                                                    # what the harness is handed
"""

from __future__ import annotations

from .. import gpu
from ..errors import ShapeError
from ..steps import renamed
from .convstep import ConvStep
from .problem import LAYERS, MAX_BATCH, ConvShape, check_batch, layer_shape
from .steps import STEPS

STUDY_NAME = "lenet"


def get_step(slug: str) -> ConvStep:
    """The implementation of step ``slug`` (an unknown slug is an error listing the valid ones)."""
    return STEPS.impl(slug)


def get_variant(slug: str) -> ConvStep:
    """Deprecated name of ``get_step`` (kept one release)."""
    return renamed("lenet.get_variant", "lenet.get_step", get_step(slug))


def step_names() -> list[str]:
    return STEPS.slugs()


def variant_names() -> list[str]:
    """Deprecated name of ``step_names`` (kept one release)."""
    return renamed("lenet.variant_names", "lenet.step_names", step_names())


def conv_forward(x, k, step: str = "baseline", out=None, stream=None, variant: str | None = None, **params):
    """Forward convolution of CuPy arrays x (B,C,H,W) and k (M,C,K,K) with one step's kernel.

    Shapes and parameters are validated before anything is launched; ``out`` (optional) must be
    a float32 C-contiguous CuPy array of shape (B, M, H-K+1, W-K+1). (``variant=`` is the
    deprecated name of ``step=``.)
    """
    if variant is not None:
        step = renamed("conv_forward(variant=...)", "conv_forward(step=...)", variant)
    impl = get_step(step)
    merged = impl.params(**params)
    gpu.require("conv_forward")
    import cupy as cp

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


from .study import STUDY  # noqa: E402  (the study object needs the functions above)

__all__ = ["ConvShape", "ConvStep", "LAYERS", "MAX_BATCH", "STEPS", "STUDY", "conv_forward", "get_step",
           "layer_shape", "step_names", "check_batch"]
