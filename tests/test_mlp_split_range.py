"""Step 15's per-column range check, modelled in NumPy (no GPU): which columns its kernel sends to
the FP32 path (kernels/mlp/15_final.cu, ``outside_half`` and ``check_layer``), and that the columns
it keeps on the 3xFP16 path are held by the split to its bound. The package has no Python copy of
the kernel's rule, so the model lives here; the last test holds the kernel's source to it."""

from __future__ import annotations

import re

import numpy as np

from kernelbook import kernels
from kernelbook.mlp import data, pack

SOURCE = "mlp/15_final.cu"


def split_layers(x, weights):
    """The values step 15 splits, per layer: x, ReLU(h1), ReLU(h2) (float32, as its fast path holds them)."""
    W1, b1, W2, b2, _, _ = weights
    h1 = np.maximum(W1 @ x + b1[:, None], np.float32(0))
    h2 = np.maximum(W2 @ h1 + b2[:, None], np.float32(0))
    return x, h1, h2


def kernel_flags(a):
    """Step 15's rule for one layer: a column goes the FP32 path when its largest |v| (the four lanes
    of its group combined) reaches 65520, where half(v) is infinite, or is not 0 but below 2^-6."""
    top = np.abs(a).max(axis=0)
    return (top >= pack.SPLIT_OVERFLOW) | ((top > 0) & (top < pack.SPLIT_SMALL))


def lane_shares(a):
    """Lane q's share of each column in the kernel's A fragments, rows 16 j + 2 q + {0, 1, 8, 9}
    (rows padded with zeros to whole k16 steps): shape (4, values a lane holds, columns)."""
    rows = -(-a.shape[0] // 16) * 16
    padded = np.zeros((rows, a.shape[1]), np.float32)
    padded[:a.shape[0]] = a
    return np.stack([padded[[16 * j + 2 * q + d for j in range(rows // 16) for d in (0, 1, 8, 9)]] for q in range(4)])


def per_lane_half_flags(a):
    """The rule the kernel had before: each lane judged its own share by the largest |half(v)|,
    flagging a share outside [2^-6, 65504], zeros included."""
    with np.errstate(over="ignore"):
        top = np.abs(lane_shares(a).astype(np.float16).astype(np.float32)).max(axis=1)
    return (~((top >= pack.SPLIT_SMALL) & (top <= 65504.0))).any(axis=0)


def split_error(a):
    """Each column's largest |v - (hi + lo)| of the 3xFP16 split, hi = half(v), lo = half(v - hi)."""
    with np.errstate(over="ignore", invalid="ignore"):
        hi = a.astype(np.float16).astype(np.float32)
        lo = (a - hi).astype(np.float16).astype(np.float64)
        err = np.abs(a.astype(np.float64) - (hi.astype(np.float64) + lo))
    return np.where(np.isnan(err), np.inf, err).max(axis=0)


def test_no_column_of_the_study_data_takes_the_fp32_path():
    """On the study's 5x5 case (shipped weights, the study's signals) no column leaves half's range.
    The old per-lane rule sent columns whose one lane held only ReLU zeros to the FP32 path, so
    that their warp's tile waited on a serial FP32 recomputation."""
    x, weights = data.make_signals(12_800), data.load_weights()
    layers = split_layers(x, weights)
    assert [int(kernel_flags(a).sum()) for a in layers] == [0, 0, 0]
    old = [int(per_lane_half_flags(a).sum()) for a in layers]
    assert old[1] > 0, old                                             # shares of ReLU(h1) that are all 0
    shares = lane_shares(layers[1])
    assert ((shares == 0).all(axis=1).any(axis=0)).sum() == old[1]     # ... and nothing else flagged them


def test_columns_left_on_the_fast_path_keep_the_split_bound():
    """Columns of many magnitudes, zeros, lone small values and half's edges: every column the rule
    keeps on the fast path is split to within 2^-19 of its largest |v|; a column of zeros is kept
    (hi = lo = 0 is exact); values below 2^-25, whose hi is 0, are not taken for zeros."""
    rng = np.random.default_rng(5)
    cols = rng.uniform(-1, 1, size=(64, 400)).astype(np.float32) * (10.0 ** rng.uniform(-12, 6, size=400))
    cols = cols.astype(np.float32)
    cols[:, 0] = 0                                                     # all zeros
    cols[:, 1] = 0
    cols[5, 1] = np.float32(2.0 ** -6)                                 # one value at the edge, zeros beside it
    cols[:, 2] = np.float32(1e-8)                                      # every hi is 0, every value lost
    cols[:, 3] = np.float32(65504.0)                                   # half's largest, finite
    cols[:, 4] = np.float32(65520.0)                                   # half(v) is infinite
    cols[:, 5] = np.float32(0.5)                                       # lane 0's share all zeros ...
    cols[[r for r in range(64) if r % 16 in (0, 1, 8, 9)], 5] = 0      # ... beside larger values
    flags = kernel_flags(cols)
    top = np.abs(cols).max(axis=0).astype(np.float64)
    err = split_error(cols)
    kept = ~flags
    assert (err[kept] <= 2.0 ** -19 * top[kept]).all()
    assert list(flags[:6]) == [False, False, True, False, True, False]
    assert err[2] == top[2]                                           # the split loses the column whole
    assert kept.sum() > 100 and flags.sum() > 100                      # both sides are exercised
    assert per_lane_half_flags(cols)[[0, 5]].all()                     # the old rule flagged the zeros


def test_the_range_cases_still_reach_the_fp32_path():
    """The GPU range cases of step 15 (tests/test_mlp_gpu.py) flag columns in the layer each names,
    and the case inside half's range flags none: the FP32 path is still what they test."""
    from test_mlp_gpu import _range15_cases

    layer = {"x": 0, "small": 0, "h1": 1, "h2": 2}
    for label, where, x, weights in _range15_cases():
        flags = [kernel_flags(a) for a in split_layers(x, weights)]
        if where == "inside":
            assert not any(f.any() for f in flags), label
        elif where in layer:
            assert flags[layer[where]].any(), label


def test_the_kernel_implements_the_modelled_rule():
    """The kernel's thresholds are pack.py's, its test is the one modelled above, and it takes the
    largest over the four lanes of a group, on the values rather than their halves."""
    source = kernels.source_path(SOURCE).read_text()
    assert f"#define S_SMALL {pack.SPLIT_SMALL!r}f" in source
    assert f"#define S_OVERFLOW {pack.SPLIT_OVERFLOW!r}f" in source
    assert "return !(top < S_OVERFLOW) || (top > 0.0f && top < S_SMALL);" in source
    assert re.search(r"__shfl_xor_sync\(0xffffffffu, mx\[m\]\[c\], 1\)", source)
    assert "__shfl_xor_sync(0xffffffffu, top, 2)" in source
    assert "track_hi" not in source and "__hmax2" not in source
