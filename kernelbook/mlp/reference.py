"""References for the MLP study: float64 (the truth) and the CPU single-precision benchmark.

``forward64`` evaluates the network in float64 from float32 inputs and weights: every kernel's
FP32-accuracy check is its relative L2 error against it. ``forward32`` is the write-up's CPU
single-precision benchmark (NumPy float32, each layer one matrix product); half-precision
steps are judged against it by ``scaled_abs_diff``.
"""

from __future__ import annotations

import numpy as np

HALF_THRESHOLD = 0.15  # the write-up's maximum scaled absolute difference for half precision


def _forward(x, weights, dtype):
    W1, b1, W2, b2, W3, b3 = (np.asarray(w, dtype=dtype) for w in weights)
    x = np.asarray(x, dtype=dtype)
    h = np.maximum(W1 @ x + b1[:, None], 0)
    h = np.maximum(W2 @ h + b2[:, None], 0)
    return W3 @ h + b3[:, None]


def forward64(x, weights) -> np.ndarray:
    """y = W3 relu(W2 relu(W1 x + b1) + b2) + b3 in float64; x (71, N) -> y (4, N)."""
    return _forward(x, weights, np.float64)


def forward32(x, weights) -> np.ndarray:
    """The CPU single-precision benchmark: the same network, every operation in float32."""
    return _forward(x, weights, np.float32).astype(np.float32)


def scaled_abs_diff(got, benchmark) -> float:
    """The largest absolute difference, scaled by the benchmark's largest magnitude:

        max_ij |got_ij - benchmark_ij| / max_ij |benchmark_ij|

    with ``benchmark`` the CPU float32 output (``forward32``). It is 0 for identical outputs
    and reads as "the worst element is off by this fraction of the output's range"; a NaN
    anywhere in ``got`` gives inf. Half-precision steps pass when it is at most 0.15, the
    write-up's threshold (a benchmark that is all zeros scales by 1).
    """
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(benchmark, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"output shape {got.shape} differs from the benchmark's {ref.shape}")
    if got.size == 0:
        return 0.0
    if not np.isfinite(got).all():
        return float("inf")
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got - ref)) / scale)


def rel_l2(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.linalg.norm(got - ref) / (np.linalg.norm(ref) or 1.0))
