"""The LeNet-86 study's problem: a forward convolution and the network's two layers."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ParameterError, ShapeError
from ..limits import ceil_div  # noqa: F401  (the steps import it from here)

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


# The two layers the book studies ("Op 1" and "Op 2"), per image: x (C,H,W) and k (M,C,K,K).
LAYERS = {
    "C1": {"C": 1, "H": 86, "W": 86, "M": 4, "K": 7},
    "C3": {"C": 4, "H": 40, "W": 40, "M": 16, "K": 7},
}
MAX_BATCH = 10000  # the Fashion-MNIST test set


def check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        raise ParameterError(f"batch={batch!r} must be a positive integer.", "pass a batch size such as 100, 1000 or 10000.")
    return batch


def layer_shape(layer: str, batch: int) -> ConvShape:
    """The network's shape of ``layer`` (``C1`` or ``C3``) for ``batch`` images."""
    if layer not in LAYERS:
        raise ParameterError(f"Unknown layer {layer!r}.", f"use one of: {', '.join(LAYERS)}.")
    check_batch(batch)
    d = LAYERS[layer]
    return ConvShape(B=batch, M=d["M"], C=d["C"], H=d["H"], W=d["W"], K=d["K"])


def int32(*values: int):
    import numpy as np

    return tuple(np.int32(v) for v in values)
