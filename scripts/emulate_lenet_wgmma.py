"""NumPy emulation of step 16's index math (kernels/lenet/16_wgmma_final.cu), no GPU: the weight
tile in wgmma's no-swizzle K-major layout as the kernel writes it and as the descriptor reads it, the A
fragments as each lane loads them from the planes, the D fragment -> output mapping. No split:
float64 values, so any mismatch with the reference is an index error."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def emulate(M, C, H, W, K, RPP, B=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, C, H, W))
    k = rng.standard_normal((M, C, K, K))
    HOUT, WOUT = H - K + 1, W - K + 1
    WP = (WOUT + 1) // 2
    HP = (HOUT + RPP - 1) // RPP
    NPOS = HP * WP
    NTILES = (NPOS + 63) // 64
    PROWS = RPP + K - 1
    ROWS = C * PROWS
    NKS = (ROWS + 1) // 2
    MQm = M * RPP
    MQ = 4 if MQm <= 4 else (8 if MQm <= 8 else (16 if MQm <= 16 else 32))
    N2 = 2 * MQ
    N1 = 2 * N2
    HPL = max(RPP * HP + K - 1, H)
    RSW = (max(2 * WP + 6, W) + 1) // 2

    # weights as the kernel's loop writes them
    wb = np.zeros(NKS * N1 * 16)
    for idx in range(NKS * N1 * 16):
        ks, rem = divmod(idx, N1 * 16)
        n = (rem >> 7) * 8 + ((rem >> 3) & 7)
        kh = (rem >> 6) & 1
        i = rem & 7
        lo_part = n >= N2
        nn = n - N2 if lo_part else n
        dj, mq = nn & 1, nn >> 1
        mp, di = divmod(mq, RPP)
        r = 2 * ks + kh
        c = r // PROWS
        p = r - c * PROWS - di
        q = i - dj
        ok = r < ROWS and mp < M and 0 <= p < K and 0 <= q < K
        wb[idx] = k[mp, c, p, q] if ok else 0.0   # hi and lo parts both = full value here
    # B[ks][k][n] as the descriptor (LBO 128 B = 64 halfs along k, SBO 256 B = 128 halfs along n) reads it
    Bm = np.zeros((NKS, 16, N1))
    for ks in range(NKS):
        for kk in range(16):
            for n in range(N1):
                Bm[ks, kk, n] = wb[ks * N1 * 16 + (n // 8) * 128 + (kk // 8) * 64 + (n % 8) * 8 + kk % 8]

    def row_offset(r):
        return ((r // PROWS) * HPL + (r % PROWS)) * RSW if r < ROWS else 0

    def pos_offset(pos):
        hp = pos // WP
        return hp * RPP * RSW + (pos - hp * WP)

    y = np.full((B, M, HOUT, WOUT), np.nan)
    for b in range(B):
        # plane as half-precision columns: plane[word][2] (value pairs)
        plane = np.zeros((C * HPL * RSW, 2))
        for e in range(C * H * W):
            crow, col = divmod(e, W)
            c = crow // H
            prow = crow + c * (HPL - H)
            plane[prow * RSW + col // 2, col % 2] = x[b].reshape(-1)[e]
        for tile in range(NTILES):
            A = np.zeros((NKS, 64, 16))
            for wq in range(4):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    p0r = tile * 64 + wq * 16 + g
                    p1r = p0r + 8
                    b0 = pos_offset(p0r if p0r < NPOS else 0) + t
                    b1 = pos_offset(p1r if p1r < NPOS else 0) + t
                    for ks in range(NKS):
                        o0, o1 = row_offset(2 * ks), row_offset(2 * ks + 1)
                        regs = [plane[b0 + o0], plane[b1 + o0], plane[b0 + o1], plane[b1 + o1]]
                        # m16n8k16 / wgmma A layout: a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
                        for j, (rr, cc) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
                            A[ks, wq * 16 + rr, cc:cc + 2] = regs[j]
            D1 = sum(A[ks] @ Bm[ks] for ks in range(NKS))            # 64 x N1
            D2 = sum(A[ks] @ Bm[ks][:, :N2] for ks in range(NKS))    # xl x wh (same values here)
            for wq in range(4):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for c in range(N2 // 8):
                        mq = 4 * c + t
                        mp, di = divmod(mq, RPP)
                        if mp >= M:
                            continue
                        for half in range(2):
                            pos = tile * 64 + wq * 16 + g + 8 * half
                            row64 = wq * 16 + g + 8 * half
                            if pos >= NPOS:
                                continue
                            hp = pos // WP
                            row = hp * RPP + di
                            col = 2 * (pos - hp * WP)
                            if row >= HOUT:
                                continue
                            for e in range(2):
                                n = 8 * c + 2 * t + e
                                # kernel: (d2 + d1[lo chunk]) + d1[hi chunk]; here hi = lo = full -> 3x value
                                v = (D2[row64, n] + D1[row64, n + N2] + D1[row64, n]) / 3.0
                                if col + e < WOUT:
                                    y[b, mp, row, col + e] = v
    win = sliding_window_view(x, (K, K), axis=(2, 3))
    ref = np.einsum("bchwpq,mcpq->bmhw", win, k)
    assert np.all(np.isfinite(y)), "unwritten outputs"
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


if __name__ == "__main__":
    for shape in [(16, 4, 40, 40, 7, 1), (4, 1, 86, 86, 7, 2), (6, 3, 21, 19, 5, 2), (9, 2, 17, 30, 7, 1),
                  (4, 1, 9, 9, 3, 2), (7, 5, 6, 10, 1, 2), (3, 2, 12, 11, 7, 2)]:
        print(shape, f"{emulate(*shape, B=1):.2e}")
