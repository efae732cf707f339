"""The base of every LeNet convolution step, and the baseline.

A step knows which source and compile-time parameters it builds with (``defines``), which shapes
it can take (``validate``: refused with a clear error *before* any launch), and how to launch
(``launch``). Its slug, title and ``.cu`` file come from the study's step list (``steps.py``).
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import LaunchLimitError, ParameterError, ShapeError
from ..steps import StepImpl
from .problem import GRID_YZ_MAX, INT32_MAX, ConvShape, ceil_div, int32  # noqa: F401  (re-exported)


class ConvVariant(StepImpl):
    """Base of every kernel variant. Subclasses set the class attributes and ``launch``."""

    kernel_names: ClassVar[tuple[str, ...]]
    defaults: ClassVar[dict] = {}      # every parameter a caller may set, with its default
    tolerance: ClassVar[float] = 1e-5  # relative L2 error allowed against float64
    precision: ClassVar[str] = "fp32"

    def defines(self, params: dict, shape: ConvShape) -> dict:
        """Compile-time parameters (``-D``) for ``params`` and ``shape`` (e.g. K as a constant)."""
        return {}

    def validate(self, shape: ConvShape, params: dict) -> None:
        """Raise ``ShapeError`` for anything the kernel cannot do; called before any launch."""
        for name, count in (("x", shape.B * shape.C * shape.H * shape.W),
                            ("y", shape.B * shape.M * shape.H_out * shape.W_out)):
            if count > INT32_MAX:
                raise ShapeError(f"{name} would hold {count} elements; the kernels index with 32-bit ints.",
                                 "split the batch into chunks of fewer images.")
        self.check_launches(shape, params)  # a step that declares its launches (steps.Launch)

    # launch(y, x, k, shape, params, stream=None): a step declares ``launches`` and ``launch_args``
    # (the core's ``StepImpl.launch`` runs them), or writes ``launch`` by hand (steps 00-15).

    graph_capturable: ClassVar[bool] = True  # False when launch() uses streams of its own

    def layer_round_trip(self, k, x_host, shape: ConvShape, params: dict):
        """A callable for Layer Time: host input -> device -> kernel(s) -> host output.

        Device buffers are allocated here, once, like the course's prolog; the callable copies,
        computes and copies back, which is what Layer Time times.
        """
        import cupy as cp
        import numpy as np

        x_dev = cp.empty(shape.x_shape, dtype=cp.float32)
        y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
        y_host = np.empty(shape.y_shape, dtype=np.float32)

        def round_trip():
            x_dev.set(x_host)
            self.launch(y_dev, x_dev, k, shape, params)
            y_dev.get(out=y_host)

        return round_trip


class Baseline(ConvVariant):
    kernel_names = ("conv_forward_baseline",)
    defaults = {"tile_width": 16}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"TILE_WIDTH": params["tile_width"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        tile = params["tile_width"]
        if not isinstance(tile, int) or not 1 <= tile <= 32:
            raise ParameterError(f"tile_width={tile!r}: a block of tile_width^2 threads must hold 1..1024 threads.",
                             "pass tile_width between 1 and 32.")
        if shape.M > GRID_YZ_MAX or shape.B > GRID_YZ_MAX:
            raise LaunchLimitError(f"M={shape.M} and B={shape.B} go to grid y and z, which stop at {GRID_YZ_MAX}.",
                             f"split the batch (or the maps) into chunks of at most {GRID_YZ_MAX}.")

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        tile = params["tile_width"]
        kernel = self.kernel(self.kernel_names[0], params, shape)
        tiles = ceil_div(shape.H_out, tile) * ceil_div(shape.W_out, tile)
        kernel((tiles, shape.M, shape.B), (tile, tile, 1),
               (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)), stream=stream)


#: Threads per block of the one-thread-per-output fallback (``conv_generic``) that the Hopper steps
#: take for shapes their fast path cannot run.
GENERIC_THREADS = 256


def generic_plan(shape: ConvShape, reason: str) -> dict:
    """The launch plan of a Hopper step's ``conv_generic`` fallback, with the reason it is taken."""
    n = shape.B * shape.M * shape.H_out * shape.W_out
    return {"kernel": "conv_generic", "reason": reason, "threads": GENERIC_THREADS,
            "grid": min(ceil_div(n, GENERIC_THREADS), 65535 * 8), "smem_bytes": 0}

