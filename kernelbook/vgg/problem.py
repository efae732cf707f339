"""The VGG-style layer: a 'same' convolution, then bias, ReLU and a 2×2 max-pool.

One layer of a VGG-like network, kept whole because its kernels fuse all four operations::

    x (B, C, H, W)  *  w (M, C, K, K)  + b (M,)   ->  ReLU  ->  2×2 max-pool, stride 2
                                                  ->  y (B, M, H // 2, W // 2)

Stride 1, zero padding K // 2 (so the convolution keeps H × W; K must be odd), float32 data.
Pooling floors like PyTorch's ``max_pool2d``: an odd last row or column of the convolution's
output belongs to no pooling window and is dropped, so H and W must be at least 2.

The work unit is the convolution's: FLOPs = 2·B·M·C·K²·H·W (one multiply and one add per
weight per pre-pool output); bias, ReLU and the pool are not counted. ``min_bytes`` is what a
kernel must move at least: x, w and b read once, the pooled y written once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ParameterError, ShapeError

INT32_MAX = 2**31 - 1


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(f"{name}={value!r} must be a positive integer.",
                             f"pass {name} as an int >= 1 (e.g. {name}=1).")
    return value


@dataclass(frozen=True)
class ConvPoolShape:
    """Batch B, input channels C, input height H and width W, output channels M, kernel size K."""

    B: int
    C: int
    H: int
    W: int
    M: int
    K: int

    def __post_init__(self) -> None:
        for name in ("B", "C", "H", "W", "M", "K"):
            _positive_int(name, getattr(self, name))
        if self.K % 2 == 0:
            raise ShapeError(f"K={self.K} is even; 'same' padding K // 2 keeps the size only for odd K.",
                             "use an odd kernel size (1, 3, 5, 7, ...).")
        if self.H < 2 or self.W < 2:
            raise ShapeError(f"The input is {self.H}×{self.W}; a 2×2 pool needs at least 2×2.",
                             "pass an input with H >= 2 and W >= 2.")
        for name, shape in (("x", self.x_shape), ("w", self.w_shape), ("y", self.y_shape)):
            n = 1
            for d in shape:
                n *= d
            if n > INT32_MAX:
                raise ShapeError(f"{name} {shape} has {n} elements; the kernels index with 32-bit integers.",
                                 "split the batch (or the channels) into smaller calls.")

    # ------------------------------------------------------------------ derived sizes
    @property
    def pad(self) -> int:
        return self.K // 2

    @property
    def Hp(self) -> int:  # noqa: N802 - the book's symbol
        return self.H // 2

    @property
    def Wp(self) -> int:  # noqa: N802
        return self.W // 2

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.B, self.C, self.H, self.W)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        return (self.M, self.C, self.K, self.K)

    @property
    def b_shape(self) -> tuple[int]:
        return (self.M,)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        return (self.B, self.M, self.Hp, self.Wp)

    @property
    def flops(self) -> int:
        return 2 * self.B * self.M * self.C * self.K * self.K * self.H * self.W

    @property
    def min_bytes(self) -> int:
        elements = (self.B * self.C * self.H * self.W + self.M * self.C * self.K * self.K + self.M
                    + self.B * self.M * self.Hp * self.Wp)
        return 4 * elements

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_arrays(cls, x_shape, w_shape, b_shape=None) -> "ConvPoolShape":
        """The shape of a call, from its arrays' shapes; inconsistent shapes are a ShapeError."""
        x_shape, w_shape = tuple(x_shape), tuple(w_shape)
        if len(x_shape) != 4:
            raise ShapeError(f"x has shape {x_shape}; it must be 4-D (B, C, H, W).",
                             "reshape a single image with x[None] to (1, C, H, W).")
        if len(w_shape) != 4:
            raise ShapeError(f"w has shape {w_shape}; it must be 4-D (M, C, K, K).",
                             "pass the weights as (output channels, input channels, K, K).")
        if any(d < 1 for d in x_shape + w_shape):
            raise ShapeError(f"x {x_shape} and w {w_shape} must have positive dimensions.",
                             "pass non-empty arrays.")
        B, C, H, W = x_shape
        M, Cw, K, K2 = w_shape
        if K != K2:
            raise ShapeError(f"w has a {K}×{K2} kernel; only square kernels are supported.",
                             "pass w of shape (M, C, K, K).")
        if Cw != C:
            raise ShapeError(f"x has {C} input channels but w expects {Cw}.",
                             "make w.shape[1] equal x.shape[1].")
        if b_shape is not None and tuple(b_shape) != (M,):
            raise ShapeError(f"b has shape {tuple(b_shape)}; it must be ({M},), one bias per output channel.",
                             f"pass a 1-D bias of length {M}.")
        return cls(B=int(B), C=int(C), H=int(H), W=int(W), M=int(M), K=int(K))


def case(batch: int = 1) -> ConvPoolShape:
    """The studied layer (256 → 256 channels, 224×224, 5×5) for ``batch`` images."""
    return ConvPoolShape(_positive_int("batch", batch), 256, 224, 224, 256, 5)


CASES = {"B1": case(1), "B2": case(2)}
