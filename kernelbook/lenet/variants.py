"""The registry of convolution kernel variants: one entry per optimization step.

Adding a step means one ``.cu`` file in ``kernels/lenet/``, one ``ConvVariant`` subclass here
(registered with ``@register``), and one notebook from the chapter template.

A variant knows three things: which source and compile-time parameters it builds with
(``defines``), which shapes it can take (``validate``: refused with a clear error *before* any
launch), and how to launch (``launch``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from ..errors import ShapeError, VariantError

INT32_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


@dataclass(frozen=True)
class ConvShape:
    """A forward convolution problem: x (B,C,H,W) * k (M,C,K,K) -> y (B,M,H_out,W_out)."""

    B: int
    M: int
    C: int
    H: int
    W: int
    K: int

    @property
    def H_out(self) -> int:
        return self.H - self.K + 1

    @property
    def W_out(self) -> int:
        return self.W - self.K + 1

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.B, self.C, self.H, self.W)

    @property
    def k_shape(self) -> tuple[int, int, int, int]:
        return (self.M, self.C, self.K, self.K)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        return (self.B, self.M, self.H_out, self.W_out)

    @property
    def flops(self) -> int:
        """Multiply and add counted separately, as GFLOP/s figures usually do."""
        return 2 * self.B * self.M * self.C * self.K * self.K * self.H_out * self.W_out

    @property
    def min_bytes(self) -> int:
        """The fewest bytes a kernel must move: input, weights and output once each (float32)."""
        return 4 * (self.B * self.C * self.H * self.W + self.M * self.C * self.K * self.K
                    + self.B * self.M * self.H_out * self.W_out)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_arrays(cls, x_shape, k_shape) -> "ConvShape":
        """Validate the two array shapes against each other; any valid shape is accepted."""
        if len(x_shape) != 4 or len(k_shape) != 4:
            raise ShapeError(
                f"x has shape {tuple(x_shape)} and k has shape {tuple(k_shape)}; both must be 4-D.",
                "pass x as (B, C, H, W) and k as (M, C, K, K).",
            )
        B, C, H, W = (int(v) for v in x_shape)
        M, C2, K, K2 = (int(v) for v in k_shape)
        if min(B, C, H, W, M, K) <= 0:
            raise ShapeError(f"Every dimension must be positive (x {tuple(x_shape)}, k {tuple(k_shape)}).",
                             "pass non-empty arrays; a batch needs at least one image.")
        if C2 != C:
            raise ShapeError(f"x has C={C} channels but k expects C={C2}.", "pass weights whose second axis equals x's channel count.")
        if K2 != K:
            raise ShapeError(f"The mask is {K}x{K2}; only square masks are supported.", "pass k of shape (M, C, K, K).")
        if K > H or K > W:
            raise ShapeError(f"The mask (K={K}) is larger than the input ({H}x{W}).", "use K <= min(H, W) (no padding is applied).")
        return cls(B, M, C, H, W, K)


class ConvVariant:
    """Base of every kernel variant. Subclasses set the class attributes and ``launch``."""

    slug: ClassVar[str]
    title: ClassVar[str]
    source: ClassVar[str]              # relative to kernels/
    kernel_names: ClassVar[tuple[str, ...]]
    defaults: ClassVar[dict] = {}      # every parameter a caller may set, with its default
    tolerance: ClassVar[float] = 1e-5  # relative L2 error allowed against float64
    precision: ClassVar[str] = "fp32"

    def params(self, **overrides) -> dict:
        """Defaults merged with overrides; unknown names are an error that lists the valid ones."""
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            valid = ", ".join(sorted(self.defaults)) or "none"
            raise ShapeError(f"Variant {self.slug!r} has no parameter(s) {', '.join(unknown)}.",
                             f"use one of: {valid}.")
        merged = dict(self.defaults)
        merged.update(overrides)
        return merged

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

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        raise NotImplementedError

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

    def prepare(self, params: dict, shape: ConvShape) -> None:
        """Compile everything ``launch`` will need for ``shape``, so compilation stays out of timings."""
        from .. import kernels

        for name in self.kernel_names:
            kernels.get_kernel(self.source, name, self.defines(params, shape))

    def kernel(self, name: str, params: dict, shape: ConvShape):
        from .. import kernels

        return kernels.get_kernel(self.source, name, self.defines(params, shape))


REGISTRY: dict[str, ConvVariant] = {}


def register(cls: type[ConvVariant]) -> type[ConvVariant]:
    REGISTRY[cls.slug] = cls()
    return cls


def get_variant(slug: str) -> ConvVariant:
    try:
        return REGISTRY[slug]
    except KeyError:
        raise VariantError(f"Unknown variant {slug!r}.",
                           f"use one of: {', '.join(REGISTRY)}.") from None


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@register
class Baseline(ConvVariant):
    slug = "baseline"
    title = "Baseline: direct convolution from global memory"
    source = "lenet/00_baseline.cu"
    kernel_names = ("conv_forward_baseline",)
    defaults = {"tile_width": 16}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"TILE_WIDTH": params["tile_width"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        tile = params["tile_width"]
        if not isinstance(tile, int) or not 1 <= tile <= 32:
            raise ShapeError(f"tile_width={tile!r}: a block of tile_width^2 threads must hold 1..1024 threads.",
                             "pass tile_width between 1 and 32.")
        if shape.M > GRID_YZ_MAX or shape.B > GRID_YZ_MAX:
            raise ShapeError(f"M={shape.M} and B={shape.B} go to grid y and z, which stop at {GRID_YZ_MAX}.",
                             f"split the batch (or the maps) into chunks of at most {GRID_YZ_MAX}.")

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        tile = params["tile_width"]
        kernel = self.kernel(self.kernel_names[0], params, shape)
        tiles = ceil_div(shape.H_out, tile) * ceil_div(shape.W_out, tile)
        kernel((tiles, shape.M, shape.B), (tile, tile, 1),
               (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)), stream=stream)


def int32(*values: int):
    import numpy as np

    return tuple(np.int32(v) for v in values)
