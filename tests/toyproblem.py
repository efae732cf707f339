"""The problem of the fabricated studies that test the core without a GPU (``test_harness``,
``test_develop``): y = 2 x for n numbers, b times, on NumPy arrays standing in for the device."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernelbook import harness
from kernelbook.study import Study


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


class VecStudy(Study):
    """What the toy studies share: cases ``short`` (n = 8) and ``long`` (n = 40) of ``size`` rows,
    NumPy for the device, uniform inputs, and float64 ``2 x`` as every check's reference."""

    name = "toy"
    title = "Toy"
    cases = ("short", "long")

    def array_module(self):
        return np

    def problem(self, case, size):
        return Vec(size, {"short": 8, "long": 40}[case])

    def inputs(self, impl, shape, rng, case=None):
        return (rng.uniform(-1, 1, shape.y_shape).astype(np.float32),)

    def doubled(self, impl, shapes, rng) -> list:
        """A check case for each (label, shape): its input drawn from ``rng``, its reference 2 x."""
        out = []
        for label, shape in shapes:
            (x,) = self.inputs(impl, shape, rng)
            out.append(harness.CheckCase(label, shape, (x,), lambda x=x: 2 * x.astype(np.float64)))
        return out
