"""VGG's parameter sweeps, declared as data and run by the core (``kernelbook.sweep``): the
tensor-core steps' tile shapes. Until a measured run records them, their page section says
"not recorded yet"."""

from __future__ import annotations

from ..sweep import Sweep

SWEEPS = {
    "tf32": Sweep("tf32", axes={"tile": [{"th": 8, "tw": 32}, {"th": 16, "tw": 16}]},
                  title="Pre-pool tile shape (rows x columns)"),
    "3xtf32": Sweep("3xtf32", axes={"bm": [64, 128], "tw": [16, 32]},
                    title="Output channels per block and tile width"),
}
