"""The fully connected network study: 71 inputs -> 64 (ReLU) -> 64 (ReLU) -> 4 outputs.

Public API::

    from kernelbook import mlp
    y = mlp.forward(x, weights, step="baseline")     # x: (71, N) float32 CuPy, y: (4, N)
    mlp.STEPS.slugs()                                # every step, in book order
    mlp.CASES                                        # {"5x5": 12800, "100x100": 2097152}

``weights`` is (W1, b1, W2, b2, W3, b3): float32 arrays of shapes (64, 71), (64,), (64, 64),
(64,), (4, 64), (4,), W_l being outputs x inputs. ``kernelbook.mlp.data.load_weights()`` gives
the shipped ones. Every argument is checked before anything is launched.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..errors import ShapeError
from .data import check_weights, load_weights, make_signals, make_weights
from .impls import PreparedWeights
from .problem import CASES, LAYERS, MlpShape, check_columns
from .steps import STEPS

NAME = "mlp"


def check_call(step: str, x, weights, out=None, **params):
    """Check every argument of a forward call (works on NumPy or CuPy arrays; launches nothing).

    Returns ``(impl, shape, params, host_weights)``.
    """
    impl = STEPS.impl(step)
    merged = impl.params(**params)
    shape = _check_signals(x)
    if isinstance(weights, PreparedWeights):
        raw = weights.raw
        if weights.slug not in ("", impl.slug) and (weights.extra or impl.packing is not None):
            raise ShapeError(f"These weights were prepared for step {weights.slug!r}, not {impl.slug!r}.",
                             f"call STEPS.impl({impl.slug!r}).prepare_weights(weights) or pass the raw tuple.")
    else:
        raw = weights
    check_weights(raw, "weights")
    host = tuple(w.get() if hasattr(w, "get") else np.asarray(w) for w in raw)
    for name, arr in zip(("W1", "b1", "W2", "b2", "W3", "b3"), host):
        if not np.isfinite(arr).all():
            raise ShapeError(f"{name} holds {int((~np.isfinite(arr)).sum())} non-finite values.",
                             f"pass finite weights (check how {name} was produced).")
    impl.validate(shape, merged)
    _check_out(out, shape)
    return impl, shape, merged, host


def _check_signals(x) -> MlpShape:
    shape_x = tuple(getattr(x, "shape", ()))
    if len(shape_x) != 2 or shape_x[0] != LAYERS[0]:
        raise ShapeError(f"x has shape {shape_x}; expected (71, N) with one signal per column.",
                         "pass x as a (71, N) array (transpose an (N, 71) batch first).")
    if str(getattr(x, "dtype", "")) != "float32" or not x.flags.c_contiguous:
        raise ShapeError(f"x must be C-contiguous float32 (got {getattr(x, 'dtype', type(x).__name__)}).",
                         "convert with cupy.ascontiguousarray(x, dtype=cupy.float32).")
    return MlpShape(check_columns(shape_x[1]))


def _check_out(out, shape: MlpShape) -> None:
    if out is not None:
        if tuple(out.shape) != shape.y_shape or str(out.dtype) != "float32" or not out.flags.c_contiguous:
            raise ShapeError(f"out has shape {tuple(out.shape)} {out.dtype}; expected {shape.y_shape} float32.",
                             "pass out=None to allocate it, or a matching C-contiguous float32 array.")


def require_gpu() -> None:
    from .. import gpu

    gpu.require("the MLP kernels")


# Weight sets already validated (shapes, dtypes, every value finite: one device->host copy) and
# prepared (packed) for a step, keyed on the step and the six arrays' identities. forward() pays
# that copy once per weight set, not once per call.
_PREPARED: "OrderedDict[tuple, tuple]" = OrderedDict()
CACHE_SIZE = 8


def forget_weights() -> None:
    """Drop every cached weight set: call it after changing weights IN PLACE (forward treats the
    six arrays it was given as constant and reuses their validation and packing)."""
    _PREPARED.clear()


def _identity(step: str, weights) -> tuple:
    """The cache key of a weight set: the step and the identities of the six arrays (or of the
    ``PreparedWeights``). The cache holds the arrays, so an identity cannot be reused meanwhile."""
    if isinstance(weights, PreparedWeights):
        return (step, id(weights))
    return (step, *map(id, weights))


# Calls already validated: (step, params, x's shape, out given) -> (impl, params, shape). A call
# that matches one of them skips the parameter and launch-limit checks (they depend on nothing
# else) and checks only what can differ between arrays of one shape: type, dtype, layout.
_CALLS: dict = {}
_CUPY: list = []


def _fast_call(x, weights, step, out, params):
    """(impl, prepared, params, shape) when this call repeats a validated one, else None."""
    if not _CUPY:
        return None
    ndarray = _CUPY[0].ndarray
    try:
        hit = _CALLS.get((step, tuple(sorted(params.items())) if params else (), x.shape, out is None))
    except (AttributeError, TypeError):   # x without a shape, or unhashable parameters
        return None
    if hit is None or type(x) is not ndarray or x.dtype.char != "f" or not x.flags.c_contiguous:
        return None
    impl, merged, shape = hit
    if out is not None and (type(out) is not ndarray or out.shape != shape.y_shape or out.dtype.char != "f"
                            or not out.flags.c_contiguous):
        return None
    if isinstance(weights, PreparedWeights):
        cached = _PREPARED.get((step, id(weights)))
    elif type(weights) is tuple and len(weights) == 6:
        cached = _PREPARED.get((step, *map(id, weights)))
    else:
        return None
    if cached is None or cached[2] != tuple(a.shape for a in cached[0]):
        return None   # unknown weights, or an array reshaped in place since
    return impl, cached[1], merged, shape


def forward(x, weights, step: str = "baseline", out=None, stream=None, **params):
    """y (4, N) = the network applied to every column of x (71, N), with the kernels of ``step``.

    ``x``, ``out`` and the six weights must be CuPy float32 arrays (C-contiguous); ``params``
    are the step's parameters (``STEPS.impl(step).defaults``). Validation happens before any
    launch. The weights are validated (one copy to the host to check every value is finite) and
    packed for the step once per weight set: later calls with the same six arrays (or the same
    ``PreparedWeights``) reuse both, and a call that repeats a validated one (same step,
    parameters and shape of x) re-checks only the arrays' types, dtypes and layouts, so a call
    costs its launches and a few microseconds. The weights are treated as constant: after
    changing them in place, call ``forget_weights()``.
    """
    fast = _fast_call(x, weights, step, out, params)
    if fast is not None:
        impl, prepared, merged, shape = fast
        if out is None:
            out = _CUPY[0].empty(shape.y_shape, dtype=_CUPY[0].float32)
        impl.launch(out, x, prepared, shape, merged, stream=stream)
        return out
    impl = STEPS.impl(step)
    impl.params(**params)
    require_gpu()
    import cupy as cp

    raw = weights.raw if isinstance(weights, PreparedWeights) else weights
    for name, arr in [("x", x), *zip(("W1", "b1", "W2", "b2", "W3", "b3"), raw or ())] + (
            [("out", out)] if out is not None else []):
        if not isinstance(arr, cp.ndarray):
            raise ShapeError(f"{name} is a {type(arr).__name__}, not a CuPy array.",
                             f"move it to the GPU first: cupy.asarray({name}, dtype=cupy.float32).")
    key = _identity(impl.slug, weights) if isinstance(raw, (tuple, list)) and len(raw) == 6 else None
    cached = _PREPARED.get(key) if key is not None else None
    if cached is not None and cached[2] != tuple(a.shape for a in raw):
        del _PREPARED[key]   # an array reshaped in place since it was validated: check it again
        cached = None
    if cached is None:
        impl, shape, merged, _ = check_call(step, x, weights, out, **params)
        prepared = impl.prepare_weights(weights)
        if key is not None:
            # holding what was passed keeps its ids unique; the shapes are re-checked on every hit
            _PREPARED[key] = (tuple(raw), prepared, tuple(a.shape for a in raw), weights)
            while len(_PREPARED) > CACHE_SIZE:
                _PREPARED.popitem(last=False)
    else:
        _PREPARED.move_to_end(key)
        prepared = cached[1]
        merged = impl.params(**params)
        shape = _check_signals(x)
        impl.validate(shape, merged)
        _check_out(out, shape)
    if not _CUPY:
        _CUPY.append(cp)
    try:
        call_key = (step, tuple(sorted(params.items())) if params else (), x.shape, out is None)
        _CALLS[call_key] = (impl, merged, shape)
        while len(_CALLS) > 4 * CACHE_SIZE:
            _CALLS.pop(next(iter(_CALLS)))
    except TypeError:   # unhashable parameter values: no fast path for this call
        pass
    if out is None:
        out = cp.empty(shape.y_shape, dtype=cp.float32)
    impl.launch(out, x, prepared, shape, merged, stream=stream)
    return out


from .study import STUDY  # noqa: E402  (the study object needs the functions above)

__all__ = ["CASES", "LAYERS", "MlpShape", "NAME", "PreparedWeights", "STEPS", "STUDY", "check_call", "forget_weights",
           "forward",
           "load_weights", "make_signals", "make_weights"]
