"""Weight layouts some steps read instead of the plain row-major (W1, b1, W2, b2, W3, b3).

Each function takes float32 NumPy arrays and returns NumPy arrays; they run once per set of
weights, on the host, outside every timed region (``StepImpl.prepare_weights``). The layouts
are documented next to the kernels that read them.
"""

from __future__ import annotations

import numpy as np

IN, HIDDEN, OUT = 71, 64, 4


def _pad(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    out = np.zeros((rows, cols), dtype=np.float32)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def half_rows(weights) -> dict[str, np.ndarray]:
    """Steps 09-10: thread q = 2u + h holds half h of row u (kernels/mlp/coalesced_weights_kernel.cuh)."""
    W1, _, W2, _, W3, _ = weights
    w1p = _pad(W1, HIDDEN, 72).reshape(HIDDEN, 2, 18, 2).transpose(2, 0, 1, 3).reshape(18, 128, 2)
    w2p = W2.reshape(HIDDEN, 2, 16, 2).transpose(2, 0, 1, 3).reshape(16, 128, 2)
    w3p = W3.reshape(OUT * 32, 2)
    return {name: np.ascontiguousarray(a, dtype=np.float16) for name, a in
            (("w1p", w1p), ("w2p", w2p), ("w3p", w3p))}


def quarter_rows(weights) -> dict[str, np.ndarray]:
    """Step 11: thread t = 4u + r holds quarter r of row u (kernels/mlp/11_better_occupancy.cu)."""
    W1, _, W2, _, W3, _ = weights
    w1q = _pad(W1, HIDDEN, 72).reshape(HIDDEN, 4, 9, 2).transpose(2, 0, 1, 3).reshape(9, 256, 2)
    w2q = W2.reshape(HIDDEN, 4, 8, 2).transpose(2, 0, 1, 3).reshape(8, 256, 2)
    w3q = W3.reshape(OUT, 4, 8, 2).transpose(2, 0, 1, 3).reshape(8, 16, 2)
    return {name: np.ascontiguousarray(a, dtype=np.float16) for name, a in
            (("w1q", w1q), ("w2q", w2q), ("w3q", w3q))}


def tf32_round(v: np.ndarray) -> np.ndarray:
    """Round float32 to TF32 (10 mantissa bits), to nearest with ties away from zero (cvt.rna)."""
    bits = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _lane_grid():
    lane = np.arange(32)
    return lane // 4, lane % 4  # g, q


def _biases(weights) -> np.ndarray:
    _, b1, _, b2, _, b3 = weights
    return np.concatenate([b1, b2, np.pad(b3, (0, 8 - OUT))]).astype(np.float32)


def tf32_fragments(weights) -> np.ndarray:
    """Step 13: B fragments of the three layers as float4 {b0_big, b1_big, b0_small, b1_small},
    then the biases; one float32 array of 18,568 values (kernels/mlp/tc_3xtf32_kernel.cuh)."""
    W1, _, W2, _, W3, _ = weights
    g, q = _lane_grid()
    W1p, W3p = _pad(W1, HIDDEN, 72), _pad(W3, 8, HIDDEN)
    parts = []
    for W, ksteps, ntiles, permuted in ((W1p, 9, 8, False), (W2, 8, 8, True), (W3p, 8, 1, True)):
        j = np.arange(ksteps)[:, None, None]
        nt = np.arange(ntiles)[None, :, None]
        n = 8 * nt + g[None, None, :]
        # Layer 1 reads x in natural k order; layers 2-3 number k as the accumulators lie.
        k0 = 8 * j + (2 * q if permuted else q)[None, None, :]
        k1 = k0 + (1 if permuted else 4)
        b = np.stack([W[n, k0], W[n, k1]], axis=-1).astype(np.float32)      # (k, nt, lane, 2)
        big = tf32_round(b)
        small = tf32_round(b - big)
        parts.append(np.concatenate([big, small], axis=-1).ravel())
    parts.append(_biases(weights))
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def f16_fragments(weights) -> np.ndarray:
    """Step 14: B fragments of m16n8k16 as two __half2 per lane, then the biases as float32;
    20,000 bytes returned as a uint8 array (kernels/mlp/14_tensor_core_fp16.cu)."""
    W1, _, W2, _, W3, _ = weights
    g, q = _lane_grid()
    W1p, W3p = _pad(W1, HIDDEN, 80), _pad(W3, 8, HIDDEN)
    chunks = []
    for W, ksteps, ntiles in ((W1p, 5, 8), (W2, 4, 8), (W3p, 4, 1)):
        j = np.arange(ksteps)[:, None, None]
        nt = np.arange(ntiles)[None, :, None]
        n = 8 * nt + g[None, None, :]
        k = 16 * j + 2 * q[None, None, :]
        b = np.stack([W[n, k], W[n, k + 1], W[n, k + 8], W[n, k + 9]], axis=-1)  # b0 lo, hi, b1 lo, hi
        chunks.append(np.ascontiguousarray(b, dtype=np.float16).tobytes())
    chunks.append(_biases(weights).tobytes())
    return np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()


def f16_split_fragments(weights) -> np.ndarray:
    """Step 15's 3xFP16 kernel: as ``f16_fragments`` but each lane's entry is a uint4
    {b0_hi, b1_hi, b0_lo, b1_lo} with hi = half(w), lo = half(w - hi); then the biases as
    float32. 39,456 bytes returned as uint8 (kernels/mlp/15_final.cu)."""
    W1, _, W2, _, W3, _ = weights
    g, q = _lane_grid()
    W1p, W3p = _pad(W1, HIDDEN, 80), _pad(W3, 8, HIDDEN)
    chunks = []
    for W, ksteps, ntiles in ((W1p, 5, 8), (W2, 4, 8), (W3p, 4, 1)):
        j = np.arange(ksteps)[:, None, None]
        nt = np.arange(ntiles)[None, :, None]
        n = 8 * nt + g[None, None, :]
        k = 16 * j + 2 * q[None, None, :]
        b = np.stack([W[n, k], W[n, k + 1], W[n, k + 8], W[n, k + 9]], axis=-1).astype(np.float32)
        hi = b.astype(np.float16)
        lo = (b - hi.astype(np.float32)).astype(np.float16)
        chunks.append(np.ascontiguousarray(np.concatenate([hi, lo], axis=-1)).tobytes())
    chunks.append(_biases(weights).tobytes())
    return np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()
