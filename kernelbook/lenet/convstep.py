"""The base of every LeNet convolution step, and the baseline.

A step knows which source and compile-time parameters it builds with (``defines``), which shapes it
can take (``check_params``, then the declared launches' limits: ``validate`` refuses with a clear
error *before* any launch), and how to launch: its ``launches`` and ``launch_args`` as data, the
core's ``StepImpl.launch`` running them (a constant-memory step's mask copy is an ``Upload`` in the
list, the chunked step's workspace its ``operands``, step 15 hands step 14's shapes to it with
``handoff``, step 08's cuBLAS products are ``LibraryCall``s between its im2col launches, step 05's
chunks name the step's own streams (``Launch.stream``); the Hopper steps 15-16 read their
persistent grid from the device once per shape, parameters and device). Its slug, title and
``.cu`` file come from the study's step list (``steps.py``). ``tests/test_declared_launches.py``
holds the declared launches to those the hand-written ones made before (a recorded table).
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import LaunchLimitError, ParameterError, ShapeError
from ..limits import check_launch, check_launch_bounds
from ..steps import Launch, StepImpl
from .problem import GRID_YZ_MAX, INT32_MAX, ConvShape, ceil_div, int32  # noqa: F401  (re-exported)


class ConvStep(StepImpl):
    """Base of every LeNet convolution step. Subclasses set the class attributes and ``launches``."""

    kernel_names: ClassVar[tuple[str, ...]]
    defaults: ClassVar[dict] = {}      # every parameter a caller may set, with its default
    tolerance: ClassVar[float] = 1e-5  # relative L2 error allowed against float64
    precision: ClassVar[str] = "fp32"
    #: The parameters the kernel takes as compile-time macros: parameter name -> macro name.
    macros: ClassVar[dict] = {}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        """Compile-time parameters (``-D``) for ``params`` and ``shape``: each of ``macros`` from its
        parameter (a step that needs more, e.g. K as a constant, adds them)."""
        return {macro: params[name] for name, macro in self.macros.items()}

    def validate(self, shape: ConvShape, params: dict) -> None:
        """Raise ``ShapeError``/``ParameterError`` for anything the kernel cannot do; called before
        any launch: the 32-bit index limit, the step's own checks, then its declared launches."""
        for name, count in (("x", shape.B * shape.C * shape.H * shape.W),
                            ("y", shape.B * shape.M * shape.H_out * shape.W_out)):
            if count > INT32_MAX:
                raise ShapeError(f"{name} would hold {count} elements; the kernels index with 32-bit ints.",
                                 "split the batch into chunks of fewer images.")
        self.check_params(shape, params)
        self.check_launches(shape, params)  # a step that declares its launches (steps.Launch)

    def check_params(self, shape: ConvShape, params: dict) -> None:
        """The step's parameters against the shape (before its launches are computed)."""

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        """The arguments of most LeNet kernels: y, x, k and the shape as 32-bit ints."""
        x, k = operands
        return (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K))

    # launch(y, x, k, shape, params, stream=None): a step declares ``launches`` and ``launch_args``
    # (the core's ``StepImpl.launch`` runs them, the same for every step).

    graph_capturable: ClassVar[bool] = True  # False when its launches use streams of their own

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


class Planned:
    """A step whose ``plan(shape, params)`` picks one kernel per call: that kernel is what the call
    compiles and launches, and its unit is ``plan_math``'s (FP32 for a kernel not named there)."""

    plan_math: ClassVar[dict[str, str]] = {}

    def kernels_for(self, params: dict, shape: ConvShape) -> tuple[str, ...]:
        return (self.plan(shape, params)["kernel"],)

    def math_for(self, params: dict, shape: ConvShape) -> str:
        return self.plan_math.get(self.plan(shape, params)["kernel"], "fp32")


class Baseline(ConvStep):
    kernel_names = ("conv_forward_baseline",)
    defaults = {"tile_width": 16}
    macros = {"tile_width": "TILE_WIDTH"}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        tile = params["tile_width"]
        if not isinstance(tile, int) or not 1 <= tile <= 32:
            raise ParameterError(f"tile_width={tile!r}: a block of tile_width^2 threads must hold 1..1024 threads.",
                             "pass tile_width between 1 and 32.")
        if shape.M > GRID_YZ_MAX or shape.B > GRID_YZ_MAX:
            raise LaunchLimitError(f"M={shape.M} and B={shape.B} go to grid y and z, which stop at {GRID_YZ_MAX}.",
                             f"split the batch (or the maps) into chunks of at most {GRID_YZ_MAX}.")

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        tile = params["tile_width"]
        tiles = ceil_div(shape.H_out, tile) * ceil_div(shape.W_out, tile)
        return [Launch(self.kernel_names[0], (tiles, shape.M, shape.B), (tile, tile, 1))]


#: Threads per block of the one-thread-per-output fallback (``conv_generic``) that the Hopper steps
#: take for shapes their fast path cannot run.
GENERIC_THREADS = 256


def generic_plan(shape: ConvShape, reason: str) -> dict:
    """The launch plan of a Hopper step's ``conv_generic`` fallback, with the reason it is taken."""
    n = shape.B * shape.M * shape.H_out * shape.W_out
    return {"kernel": "conv_generic", "reason": reason, "threads": GENERIC_THREADS,
            "grid": min(ceil_div(n, GENERIC_THREADS), 65535 * 8), "smem_bytes": 0}


#: The SM count a Hopper step's persistent grid is checked with when no GPU is asked (an H100's).
H100_SMS = 132


def check_persistent(step, shape: ConvShape, params: dict, kernel: str, min_regs: int, why: str = "") -> None:
    """A Hopper step's declared launch (``step._declared``), checked without asking the device: the
    plan's ``conv_generic`` fallback as planned; else ``kernel`` with at least ``min_regs`` registers
    per thread (``why``: what needs them), launch bounds an SM can hold, and its grid as on an H100
    with ``blocks_per_sm`` (or ``min_blocks`` for 'auto') blocks each, at most B anyway."""
    plan = step.plan(shape, params)
    if plan["kernel"] == "conv_generic":
        (launch,) = step._declared(shape, params, 0)
        check_launch(launch.grid, launch.block, 0, 0, what=f"{step.slug} (conv_generic)")
        return
    regs = 65536 // (plan["threads"] * plan["min_blocks"])
    if regs < min_regs:
        raise LaunchLimitError(f"threads={plan['threads']} x min_blocks={plan['min_blocks']} leaves {regs} "
                               f"registers per thread{why}.", "lower min_blocks or threads.")
    check_launch_bounds(plan["threads"], plan["min_blocks"], what=f"{step.slug} ({kernel})")
    blocks = params["blocks_per_sm"] if params["blocks_per_sm"] != "auto" else plan["min_blocks"]
    (launch,) = step._declared(shape, params, H100_SMS * blocks)
    check_launch(launch.grid, launch.block, launch.dynamic_smem, launch.static_smem, what=f"{step.slug} ({kernel})")
    if shape.B * shape.M * shape.H_out * shape.W_out > INT32_MAX:
        raise ShapeError("the output exceeds 2^31 - 1 elements.", "split the batch.")


def persistent_launches(plan: dict, kernel: str, images: int, blocks: int, static_smem: int) -> list[Launch]:
    """A Hopper step's one launch from its plan: ``kernel`` on a persistent grid of at most
    ``blocks`` blocks (never more than the ``images``), or the plan's ``conv_generic`` fallback."""
    if plan["kernel"] == "conv_generic":
        return [Launch("conv_generic", (plan["grid"],), (GENERIC_THREADS,))]
    return [Launch(kernel, (min(images, blocks),), (plan["threads"],), dynamic_smem=plan["smem_bytes"],
                   static_smem=static_smem, min_blocks=plan["min_blocks"])]
