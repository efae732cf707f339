"""The problem shape of the fabricated studies that test the core without a GPU
(``test_harness``, ``test_develop``): y = 2 x for n numbers, b times."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Vec:
    """b rows of n numbers: the shape the harness asks a problem for (output shape, work, bytes)."""

    b: int
    n: int

    @property
    def y_shape(self):
        return (self.b, self.n)

    @property
    def flops(self):
        return self.b * self.n

    @property
    def min_bytes(self):
        return 8 * self.b * self.n

    def as_dict(self):
        return {"b": self.b, "n": self.n}
