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


def _f16_b_fragments(weights):
    """Each layer's B fragments of m16n8k16, one array (k step, n tile, lane, 4) a
    layer: {b0 lo, b0 hi, b1 lo, b1 hi} of each lane (the weights padded to whole tiles)."""
    W1, _, W2, _, W3, _ = weights
    g, q = _lane_grid()
    W1p, W3p = _pad(W1, HIDDEN, 80), _pad(W3, 8, HIDDEN)
    for W, ksteps, ntiles in ((W1p, 5, 8), (W2, 4, 8), (W3p, 4, 1)):
        j = np.arange(ksteps)[:, None, None]
        nt = np.arange(ntiles)[None, :, None]
        n = 8 * nt + g[None, None, :]
        k = 16 * j + 2 * q[None, None, :]
        yield np.stack([W[n, k], W[n, k + 1], W[n, k + 8], W[n, k + 9]], axis=-1)


def f16_fragments(weights) -> np.ndarray:
    """Step 14: B fragments of m16n8k16 as two __half2 per lane, then the biases as float32;
    20,000 bytes returned as a uint8 array (kernels/mlp/14_tensor_core_fp16.cu)."""
    chunks = [np.ascontiguousarray(b, dtype=np.float16).tobytes() for b in _f16_b_fragments(weights)]
    chunks.append(_biases(weights).tobytes())
    return np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()


def f16_split_fragments(weights, biases=None, lo_shift: float = 1.0) -> np.ndarray:
    """Step 15's 3xFP16 kernel: as ``f16_fragments`` but each lane's entry is a uint4
    {b0_hi, b1_hi, b0_lo, b1_lo} with hi = half(w), lo = half((w - hi) * lo_shift); then the
    biases as float32 (``biases``: 136 floats instead of the weights' own). 39,456 bytes
    returned as uint8 (kernels/mlp/15_final.cu; step 17 stores lo times 2^11)."""
    chunks = []
    for b in (b.astype(np.float32) for b in _f16_b_fragments(weights)):
        with np.errstate(over="ignore"):
            hi = b.astype(np.float16)
            lo = ((b - hi.astype(np.float32)) * np.float32(lo_shift)).astype(np.float16)
        chunks.append(np.ascontiguousarray(np.concatenate([hi, lo], axis=-1)).tobytes())
    chunks.append((_biases(weights) if biases is None else np.asarray(biases, np.float32)).tobytes())
    return np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()


SPLIT_OVERFLOW = 65520.0    # half(v) rounds to infinity from here (kernels/mlp/15_final.cu)
SPLIT_SMALL = 2.0 ** -6     # S_SMALL: a largest magnitude below this (and not 0) loses bits in the split


def f16_split_exact(weights) -> int:
    """Step 15: 1 when a weight matrix leaves half's range as the 3xFP16 split needs it (a non-finite
    weight, |w| >= 65520, where half(w) is infinite, or a row whose largest magnitude is not 0 but
    below 2^-6, whose residuals turn subnormal), else 0. Set, it sends every column to the kernel's
    FP32 path; the biases are never split and need no check (kernels/mlp/15_final.cu)."""
    for W in (np.asarray(a, np.float32) for a in weights[0::2]):
        if not np.isfinite(W).all():
            return 1
        top = np.abs(W).max(axis=1)
        if (top >= SPLIT_OVERFLOW).any() or ((top > 0) & (top < SPLIT_SMALL)).any():
            return 1
    return 0


def exact_fp32(weights) -> np.ndarray:
    """The FP32 weights of the kernels' exact path (kernels/mlp/exact_fp32.cuh): W1^T, b1, W2^T,
    b2, W3, b3 concatenated, so that a warp's 32 lanes read 128 consecutive bytes."""
    W1, b1, W2, b2, W3, b3 = (np.asarray(a, np.float32) for a in weights)
    return np.concatenate([a.ravel() for a in (W1.T, b1, W2.T, b2, W3, b3)]).astype(np.float32)


def register_tiled(weights) -> np.ndarray:
    """Step 16: W1^T (72 rows: row 71 zero) and W2^T, row stride 68 floats with units 0..31 at
    0..31 and units 32..63 at 36..67; then W3^T (64 x 4), b1, b2, b3 padded to 8. 9,640
    float32 (kernels/mlp/16_fp32_register_tiled.cu)."""
    W1, b1, W2, b2, W3, b3 = weights
    out = []
    for W, rows in ((W1, 72), (W2, HIDDEN)):
        t = np.zeros((rows, 68), np.float32)
        t[: W.shape[1], 0:32] = W[0:32].T
        t[: W.shape[1], 36:68] = W[32:64].T
        out.append(t.ravel())
    out += [np.ascontiguousarray(W3.T, dtype=np.float32).ravel(), b1, b2, np.pad(b3, (0, 8 - OUT))]
    return np.ascontiguousarray(np.concatenate(out), dtype=np.float32)


FULL_RANGE_SPAN = 31     # FR_SPAN in kernels/mlp/17_final_full_range.cu
FULL_RANGE_TOP = 14      # FR_TOP - 127: scaled maxima in [2^14, 2^15)
FULL_RANGE_LO_SHIFT = 2048.0


def _exponent_field(a) -> np.ndarray:
    return (np.abs(np.asarray(a, np.float32)).view(np.uint32) >> 23).astype(np.int64)


def _scale_exponent(W: np.ndarray, top: int, span: int) -> tuple[int, bool]:
    """The power of two 2^ew that puts max |W| in [2^top, 2^(top+1)) (0 for an all-zero W), and
    whether W needs the exact path: its largest magnitude subnormal or not finite, or its nonzero
    magnitudes spanning more than 2^span."""
    nonzero = _exponent_field(W[W != 0])
    if not nonzero.size:
        return 0, False
    largest = int(nonzero.max())
    return 127 + top - largest, largest in (0, 255) or int(nonzero.min()) < largest - span


def full_range(weights) -> dict[str, np.ndarray]:
    """Step 17: per layer a power of two 2^ew_l puts max |W_l| in [2^14, 2^15); the 3xFP16
    fragments of the scaled weights (lo stored times 2^11) and the scaled biases
    (``f16_split_fragments``), then a header of 8 int32 {ew1, ew2, ew3, eb1, eb2, eb3, exact_only,
    0}, eb_l the exponent of max |b_l 2^ew_l| (-1000 for an all-zero bias): 39,488 bytes as
    ``"split"``. ``exact_only`` is set when a layer's nonzero magnitudes span more than 2^31 or a
    scaled value leaves float's range: every tile then takes the exact path, which reads step
    13's fragments of the unscaled weights (``"packed"``, ``tf32_fragments``)."""
    scaled, ews, ebs, exact = [], [], [], False
    for W, b in zip(weights[0::2], weights[1::2]):
        W = np.asarray(W, np.float32)
        b = np.asarray(b, np.float32)
        ew, wide = _scale_exponent(W, FULL_RANGE_TOP, FULL_RANGE_SPAN)
        exact |= wide
        if abs(ew) > 125 or not (np.isfinite(W).all() and np.isfinite(b).all()):
            exact, ew = True, 0
        with np.errstate(over="ignore"):
            Ws = np.ldexp(W.astype(np.float64), ew).astype(np.float32)
            bs = np.ldexp(b.astype(np.float64), ew).astype(np.float32)
        if not np.isfinite(bs).all():
            exact, bs = True, b
        nzb = bs[bs != 0]
        ebs.append(int(_exponent_field(nzb).max()) - 127 if nzb.size else -1000)
        ews.append(ew)
        scaled += [Ws, bs]
    if exact:
        scaled = [np.asarray(w, np.float32) for w in weights]
    body = f16_split_fragments(tuple(scaled), _biases(scaled), lo_shift=FULL_RANGE_LO_SHIFT)
    header = np.array(ews + ebs + [int(exact), 0], dtype=np.int32).view(np.uint8)
    return {"split": np.concatenate([body, header]), "packed": tf32_fragments(weights)}


WGMMA_TOP = 10            # step 19: scaled weight maxima in [2^10, 2^11) (kernels/mlp/19_wgmma_full_range.cu)
WGMMA_SPAN = 27           # ... and nonzero magnitudes down to 2^-17 (below, the FP16 hi is subnormal and
                          # hi + 2^-16 lo' is off by up to 2^-36: more than 2^-19 of the weight)
WGMMA_LO_SHIFT = 65536.0  # lo' = (w - hi) * 2^16
WGMMA_BYTES = 38448       # PACKED_BYTES in the kernel


def _wgmma_b(W: np.ndarray) -> np.ndarray:
    """A (64, K) FP16 matrix (rows = the layer's outputs, K a multiple of 16) as wgmma's K-major B
    without swizzle, one 2,048-byte block per k-step j: [j][row group][k half][row][8 values]."""
    rows, k = W.shape
    return np.ascontiguousarray(W.reshape(rows // 8, 8, k // 16, 2, 8).transpose(2, 0, 3, 1, 4))


def wgmma_full_range(weights) -> dict[str, np.ndarray]:
    """Step 19: layers 1 and 2 scaled by 2^ew_l (max |W_l| into [2^10, 2^11)) and split into FP16
    hi and lo' = (w - hi) 2^16 in wgmma's B layout (W1 padded to 80 inputs); layer 3 in FP32 as
    [c][e][q][o] = W3[o][8c + 2q + e]; b1, b2, b3; a header of 4 floats {2^-ew1, 2^-(16+ew1),
    2^-ew2, 2^-(16+ew2)} and int32 {0, ew1, ew2, 0}: ``WGMMA_BYTES`` bytes as ``"wgmma"``.
    ``"exact_only"`` (1 or 0, kept on the host: the kernel takes it as an argument) is 1 when a layer's nonzero magnitudes span more than 2^27, a maximum is
    subnormal or the scale leaves float's range: every column then takes the kernel's FP32 path,
    which reads ``"raw"``: W1^T, b1, W2^T, b2, W3, b3 concatenated (a tile that meets a value outside
    the window takes the same path)."""
    W1, b1, W2, b2, W3, b3 = (np.asarray(a, np.float32) for a in weights)
    blocks, header, ews, exact = [], [], [], False
    for W, k in ((W1, 80), (W2, HIDDEN)):
        ew, wide = _scale_exponent(W, WGMMA_TOP, WGMMA_SPAN)
        exact |= wide
        if not -120 <= ew <= 110:
            exact, ew = True, 0
        scaled = _pad(np.ldexp(W.astype(np.float64), ew).astype(np.float32), HIDDEN, k)
        hi = scaled.astype(np.float16)
        lo = ((scaled - hi.astype(np.float32)) * np.float32(WGMMA_LO_SHIFT)).astype(np.float16)
        blocks += [_wgmma_b(hi), _wgmma_b(lo)]
        header += [2.0 ** -ew, 2.0 ** (-16 - ew)]
        ews.append(ew)
    w3 = W3.reshape(OUT, 8, 4, 2).transpose(1, 3, 2, 0)   # [o][c][q][e] -> [c][e][q][o]
    floats = np.concatenate([np.ascontiguousarray(w3).ravel(), b1, b2, b3, np.array(header, np.float32)])
    ints = np.array([0, *ews, 0], np.int32)
    blob = np.concatenate([np.concatenate([b.ravel() for b in blocks]).view(np.uint8),
                           floats.astype(np.float32).view(np.uint8), ints.view(np.uint8)])
    assert blob.size == WGMMA_BYTES
    return {"wgmma": blob, "raw": exact_fp32(weights), "exact_only": int(exact)}
