"""Winograd F(2×2, K×K) transforms for step 09, built exactly (fractions) and checked in float64.

For a 1-D correlation of m = 2 outputs with an r-tap filter (r = K), Toom-Cook picks
α = r + 1 interpolation points (here 0, ±1, ±2, ±1/2, ... and ∞) and writes

    y = Aᵀ [ (G g) ⊙ (Bᵀ d) ]       d: α inputs, g: r taps, y: 2 outputs

with Aᵀ (2×α) evaluating at the points, G (α×r) the filter's values there divided by the
Lagrange denominators, and Bᵀ (α×α) whatever makes the identity exact — found here by solving
the linear system  Σ_j Aᵀ[i][j]·G[j][k]·Bᵀ[j][t] = [t == i + k]  over the rationals.
Nested in 2-D: Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A, α² products for 4 outputs instead of 4·K².

``kernels/vgg/09_winograd.cu`` holds the same matrices as C literals (one table per K);
``tests/test_vgg.py`` checks those literals against ``matrices(K)`` here.
"""

from __future__ import annotations

from fractions import Fraction

# Finite points in the order they are used; the last point is always ∞. Small points keep the
# transforms' entries small, which is what decides the rounding error in float32.
POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2))
SUPPORTED_K = (1, 3, 5, 7)
M_OUT = 2


def _solve(rows: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction]:
    """Least-squares-free exact solve of a consistent (possibly over-determined) system."""
    n = len(rows[0])
    aug = [r[:] + [b] for r, b in zip(rows, rhs)]
    pivots, row = [], 0
    for col in range(n):
        pick = next((i for i in range(row, len(aug)) if aug[i][col] != 0), None)
        if pick is None:
            continue
        aug[row], aug[pick] = aug[pick], aug[row]
        pv = aug[row][col]
        aug[row] = [v / pv for v in aug[row]]
        for i in range(len(aug)):
            if i != row and aug[i][col] != 0:
                f = aug[i][col]
                aug[i] = [a - f * b for a, b in zip(aug[i], aug[row])]
        pivots.append(col)
        row += 1
    for r in aug[row:]:
        if r[-1] != 0:
            raise ValueError("the Winograd system has no exact solution for these points")
    x = [Fraction(0)] * n
    for i, col in enumerate(pivots):
        x[col] = aug[i][-1]
    return x


def matrices(k: int) -> tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]:
    """(Aᵀ 2×α, G α×K, Bᵀ α×α) of F(2, K), exact."""
    if k not in SUPPORTED_K:
        raise ValueError(f"F(2, {k}) is not built here; K must be one of {SUPPORTED_K}")
    alpha = k + 1
    pts = list(POINTS[: alpha - 1])
    at = [[p ** i for p in pts] + [Fraction(int(i == M_OUT - 1))] for i in range(M_OUT)]
    g = []
    for j, p in enumerate(pts):
        denom = Fraction(1)
        for l, q in enumerate(pts):
            if l != j:
                denom *= p - q
        g.append([p ** t / denom for t in range(k)])
    g.append([Fraction(int(t == k - 1)) for t in range(k)])
    # Unknown Bᵀ[j][t], one block of α unknowns per column t: for each (i, kk) one equation.
    bt = [[Fraction(0)] * alpha for _ in range(alpha)]
    for t in range(alpha):
        rows, rhs = [], []
        for i in range(M_OUT):
            for kk in range(k):
                rows.append([at[i][j] * g[j][kk] for j in range(alpha)])
                rhs.append(Fraction(int(t == i + kk)))
        col = _solve(rows, rhs)
        for j in range(alpha):
            bt[j][t] = col[j]
    return at, g, bt


def as_float(m) -> "list[list[float]]":
    return [[float(v) for v in row] for row in m]


def winograd_conv_pool(x, w, b, dtype="float64"):
    """Step 09's arithmetic in NumPy (``dtype`` float32 to see its rounding): same conv, bias, ReLU,
    2×2 max-pool, via F(2×2, K×K) tiles — each 2×2 output tile is exactly one pooling window."""
    import numpy as np

    B, C, H, W = x.shape
    M, _, K, _ = w.shape
    at, g, bt = (np.array(as_float(m), dtype=dtype) for m in matrices(K))
    alpha, pad = K + 1, K // 2
    Hp, Wp = H // 2, W // 2
    xp = np.zeros((B, C, 2 * Hp + alpha, 2 * Wp + alpha), dtype=dtype)
    xp[:, :, pad:pad + H, pad:pad + W] = x
    u = np.einsum("ak,mckl,bl->abcm", g, w.astype(dtype), g)                     # (α, α, C, M)
    tiles = np.lib.stride_tricks.sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::2, ::2][:, :, :Hp, :Wp]
    v = np.einsum("ai,ncpqij,bj->abcnpq", bt, tiles, bt)                         # (α, α, C, B, Hp, Wp)
    mm = np.einsum("abcm,abcnpq->abmnpq", u, v)
    out = np.einsum("ia,abmnpq,jb->nmpqij", at, mm, at)                          # (B, M, Hp, Wp, 2, 2)
    z = np.maximum(out + b.astype(dtype)[None, :, None, None, None, None], 0)
    return z.max(axis=(4, 5))
