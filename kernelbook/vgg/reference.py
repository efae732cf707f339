"""The float64 reference: convolution with 'same' padding, bias, ReLU, 2×2 max-pool (floor).

Vectorised NumPy on the CPU: the convolution is K² shifted matrix products over the padded
input (``einsum`` over channels), so a check of a small shape takes milliseconds. Too slow for
the full layer (164 GFLOP); ``reference_at`` computes a few chosen pooled outputs instead.
"""

from __future__ import annotations

import numpy as np

from .problem import ConvPoolShape


def conv_same(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B, C, H, W) * (M, C, K, K) with zero padding K // 2, stride 1 -> (B, M, H, W), float64."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    B, C, H, W = x.shape
    M, _, K, _ = w.shape
    p = K // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    out = np.zeros((B, M, H, W), dtype=np.float64)
    for kh in range(K):
        for kw in range(K):
            out += np.einsum("bchw,mc->bmhw", xp[:, :, kh:kh + H, kw:kw + W], w[:, :, kh, kw], optimize=True)
    return out


def pool2x2(z: np.ndarray) -> np.ndarray:
    """2×2 max-pool, stride 2, floor: an odd last row/column is dropped (as PyTorch does)."""
    B, M, H, W = z.shape
    Hp, Wp = H // 2, W // 2
    z = z[:, :, :2 * Hp, :2 * Wp].reshape(B, M, Hp, 2, Wp, 2)
    return z.max(axis=(3, 5))


def reference(x, w, b) -> np.ndarray:
    """The layer in float64: pool(relu(conv_same(x, w) + b))."""
    ConvPoolShape.from_arrays(np.shape(x), np.shape(w), np.shape(b))
    z = conv_same(x, w) + np.asarray(b, dtype=np.float64)[None, :, None, None]
    return pool2x2(np.maximum(z, 0.0))


def reference_at(x, w, b, positions) -> np.ndarray:
    """The float64 pooled outputs at ``positions`` [(n, m, ph, pw), ...] only."""
    x = np.asarray(x)
    w = np.asarray(w)
    b = np.asarray(b, dtype=np.float64)
    _, C, H, W = x.shape
    K = w.shape[2]
    p = K // 2
    values = []
    for n, m, ph, pw in positions:
        best = -np.inf
        for dy in (0, 1):
            for dx in (0, 1):
                oh, ow = 2 * ph + dy, 2 * pw + dx
                r0, r1 = max(oh - p, 0), min(oh - p + K, H)
                c0, c1 = max(ow - p, 0), min(ow - p + K, W)
                patch = x[n, :, r0:r1, c0:c1].astype(np.float64)
                ker = w[m, :, r0 - (oh - p):r1 - (oh - p), c0 - (ow - p):c1 - (ow - p)].astype(np.float64)
                best = max(best, float(np.sum(patch * ker)) + b[m])
        values.append(max(best, 0.0))
    return np.array(values, dtype=np.float64)
