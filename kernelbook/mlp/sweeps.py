"""The MLP's parameter sweeps, declared as data and run by the core (``kernelbook.sweep``): the
tensor-core steps' warps, tiles per warp and blocks per SM, and the candidate choice of step 12.
Until a measured run records them, their page section says "not recorded yet"."""

from __future__ import annotations

from ..sweep import Sweep

SWEEPS = {
    "tensor-core-3xtf32": Sweep("tensor-core-3xtf32", configs=tuple(
        dict(warps=w, m_tiles=m, blocks_per_sm=b)
        for w, m, b in ((4, 1, 4), (4, 2, 2), (8, 1, 2), (2, 2, 4), (8, 2, 1), (2, 1, 8))),
        title="Warps, column tiles per warp and blocks per SM"),
    "tensor-core-fp16": Sweep("tensor-core-fp16", configs=tuple(
        dict(warps=w, m_tiles=m, blocks_per_sm=b)
        for w, m, b in ((4, 1, 6), (4, 2, 3), (8, 2, 1), (8, 1, 3), (2, 2, 6))),
        title="Warps, column tiles per warp and blocks per SM"),
    "best": Sweep("best", axes={"kernel": [dict(small=s, large=s) for s in
                                           ("coalesced-weights", "inputs-load-hiding", "better-occupancy")],
                                "blocks_per_sm": [4, 8]},
                  title="Which half-precision kernel, and how many blocks per SM"),
    "final": Sweep("final", configs=tuple(
        dict(small_kernel=k, large_kernel=k, small_warps=w, large_warps=w, small_m_tiles=m, large_m_tiles=m,
             small_blocks_per_sm=b, large_blocks_per_sm=b)
        for k, w, m, b in (("3xfp16", 4, 1, 4), ("3xfp16", 4, 2, 2), ("3xfp16", 8, 2, 1), ("3xfp16", 8, 1, 2),
                           ("3xfp16", 2, 1, 8), ("3xtf32", 8, 2, 1), ("3xtf32", 4, 1, 4))),
        title="The final kernel's launch shape"),
}
