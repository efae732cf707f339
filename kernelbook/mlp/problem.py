"""The fully connected network of the MLP study and its two test cases.

    x (71 x N) -> h1 = relu(W1 x + b1) (64 x N) -> h2 = relu(W2 h1 + b2) (64 x N) -> y = W3 h2 + b3 (4 x N)

The columns of ``x`` are the signals (one inference each); every array is row-major float32.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ShapeError

LAYERS = (71, 64, 64, 4)            # inputs, hidden, hidden, outputs
CASES = {"5x5": 12_800, "100x100": 2_097_152}
# Kernels index x with 32-bit integers in places; 71 * N must stay below 2**31.
MAX_COLUMNS = (2**31 - 1) // LAYERS[0]


def check_columns(n) -> int:
    """``n`` must be a Python (or NumPy) integer, at least 1 and at most ``MAX_COLUMNS``."""
    import numbers

    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ShapeError(f"N={n!r} is not an integer.", "pass the number of columns (signals) as an int, e.g. 12800.")
    n = int(n)
    if n < 1:
        raise ShapeError(f"N={n} columns: the network needs at least one signal.", "pass N >= 1.")
    if n > MAX_COLUMNS:
        raise ShapeError(f"N={n} columns is more than the {MAX_COLUMNS} the kernels index with 32-bit integers.",
                         f"split x into chunks of at most {MAX_COLUMNS} columns and call forward per chunk.")
    return n


def case_columns(case: str) -> int:
    if case not in CASES:
        raise ShapeError(f"Unknown test case {case!r}.", f"use one of: {', '.join(CASES)}.")
    return CASES[case]


@dataclass(frozen=True)
class MlpShape:
    """One problem: N columns through the 71-64-64-4 network."""

    N: int

    def __post_init__(self) -> None:
        check_columns(self.N)

    layers = LAYERS

    @property
    def x_shape(self) -> tuple[int, int]:
        return (LAYERS[0], self.N)

    @property
    def y_shape(self) -> tuple[int, int]:
        return (LAYERS[-1], self.N)

    @staticmethod
    def weight_shapes() -> tuple[tuple[int, ...], ...]:
        """(W1, b1, W2, b2, W3, b3): W_l is (outputs, inputs), b_l is (outputs,)."""
        shapes = []
        for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
            shapes += [(fan_out, fan_in), (fan_out,)]
        return tuple(shapes)

    @staticmethod
    def weight_count() -> int:
        return sum(a * b for a, b in zip(LAYERS[:-1], LAYERS[1:])) + sum(LAYERS[1:])

    @property
    def flops(self) -> int:
        """Multiply and add counted separately (biases and ReLU not counted)."""
        return 2 * self.N * sum(a * b for a, b in zip(LAYERS[:-1], LAYERS[1:]))

    @property
    def min_bytes(self) -> int:
        """x read once, y written once, every weight and bias read once (float32)."""
        return 4 * (LAYERS[0] * self.N + LAYERS[-1] * self.N + self.weight_count())

    def as_dict(self) -> dict:
        return {"N": self.N, "layers": list(LAYERS), "flops": self.flops, "min_bytes": self.min_bytes}
