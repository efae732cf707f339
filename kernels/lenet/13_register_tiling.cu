// LeNet step 13 - register tiling: FP32 implicit GEMM with shared-memory tiles for the block
// and register tiles for each thread.
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]      (r = c*K*K + p*K + q, n = (b, h, w))
//   xu[r][n] = x[x_col(n) + x_row(r)],  x_col = b*C*H*W + h*W + w,  x_row = (c*H + p)*W + q
//
// Back to exact FP32 arithmetic. In step 07 each thread computed one output, so every
// multiply-add needed two shared-memory reads. Here a block computes a BM x BN output tile
// and each of its threads a TM x TN sub-tile held in registers: per reduction index the
// thread reads TM values of the k tile and TN values of the x tile from shared memory and
// does TM * TN multiply-adds with them (an outer product), so shared-memory traffic per
// multiply-add falls by a factor of about TM*TN / (TM + TN).
//
// Thread (tx, ty) owns rows m0 + ty + i*TY (i < TM) and columns n0 + tx + j*TX (j < TN),
// TX = BN / TN, TY = BM / TM. The interleaved ("strided") ownership makes a warp's reads of
// x_tile[kk][tx + j*TX] consecutive words (no bank conflicts) and its final writes to y
// consecutive hw (coalesced), which contiguous TN-wide strips would not give.
//
// The gather of the x tile uses step 11's index reuse: per-thread column offsets in
// registers, a double-buffered table of row offsets per K-tile in shared memory.
//
// Layouts (row-major, float32):
//   x: B x C x H x W     k: M x C x K x K (= M x CKK)     y: B x M x H_out x W_out
//   k_tile is stored transposed, [BK][BM + 1], so that a thread's TM values of one reduction
//   index are one row (the + 1 keeps the transposing stores free of bank conflicts).
//
// Launch (done by kernelbook.lenet.gemm.RegisterTiling):
//   block = (BM / TM) * (BN / TN) threads (1-D)
//   grid  = (ceil(N / BN), ceil(M / BM)),  N = B * H_out * W_out
// Loader mapping: thread t owns column (t % BN) + j*THREADS of the x tile and rows
// t / BN + i*ROW_GROUPS, as in step 11; BN and THREADS divide one another.
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// Compile-time parameters (the harness passes them as -D...):
#ifndef BM
#define BM 16
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif

#define TY (BM / TM)
#define TX (BN / TN)
#define THREADS (TX * TY)
#define COLS (BN >= THREADS ? BN / THREADS : 1)
#define ROW_GROUPS (THREADS >= BN ? THREADS / BN : 1)
#define ROWS_PER_THREAD (BK / ROW_GROUPS)
#define LDK (BM + 1)

#if BM % TM != 0 || BN % TN != 0
#error "TM must divide BM and TN must divide BN"
#endif
#if (BN % THREADS != 0) && (THREADS % BN != 0)
#error "BN and the thread count must divide one another"
#endif
#if BK % ROW_GROUPS != 0
#error "BK must be a multiple of the threads sharing a column"
#endif

// The reduction index r as an offset into x (relative to a column's x_col), or -1 past CKK.
__device__ __forceinline__ int row_offset(int r, int CKK, int KK, int K, int H, int W)
{
    if (r >= CKK) {
        return -1;
    }
    const int c = r / KK;
    const int pq = r - c * KK;
    const int p = pq / K;
    const int q = pq - p * K;
    return (c * H + p) * W + q;
}

extern "C" __global__ void __launch_bounds__(THREADS)
conv_register_tiling(float *y, const float *x, const float *k,
                     int B, int M, int C, int H, int W, int K)
{
    __shared__ float k_tile[BK * LDK];  // [r][m], transposed
    __shared__ float x_tile[BK * BN];   // [r][n]
    __shared__ int x_row[2][BK];

    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int HW = H_out * W_out;
    const int KK = K * K;
    const int CKK = C * KK;
    const int N = B * HW;

    const int tid = threadIdx.x;
    const int tx = tid % TX;
    const int ty = tid / TX;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;  // n0 + BN fits in int (N <= 2^31 - 1 - BN checked)

    // Loader: the thread's columns of the x tile, decomposed once for the whole reduction.
    const int col0 = tid % BN;
    const int row0 = tid / BN;
    int x_col[COLS];
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
        const int n = n0 + col0 + j * THREADS;
        x_col[j] = -1;
        if (n < N) {
            const int b = n / HW;
            const int hw = n - b * HW;
            const int h = hw / W_out;
            const int w = hw - h * W_out;
            x_col[j] = b * C * H * W + h * W + w;
        }
    }
    if (tid < BK) {
        x_row[0][tid] = row_offset(tid, CKK, KK, K, H, W);
    }
    __syncthreads();  // table 0 is read by every thread in the first K-tile

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    int buf = 0;
    for (int r0 = 0; r0 < CKK; r0 += BK) {
        // Next K-tile's table into the other buffer (its last readers finished before the
        // previous barrier).
        if (tid < BK) {
            x_row[buf ^ 1][tid] = row_offset(r0 + BK + tid, CKK, KK, K, H, W);
        }
        // k tile: consecutive threads read consecutive r of a row of k (coalesced) and store
        // down a column of the transposed tile (stride BM + 1: distinct banks).
#pragma unroll
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int i = e / BK;
            const int j = e % BK;
            const int m = m0 + i;
            const int r = r0 + j;
            k_tile[j * LDK + i] = (m < M && r < CKK) ? k[m * CKK + r] : 0.0f;
        }
        // x tile: per element a broadcast table read, an add, a compare and the load.
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; ++i) {
            const int row = row0 + i * ROW_GROUPS;
            const int off = x_row[buf][row];
#pragma unroll
            for (int j = 0; j < COLS; ++j) {
                x_tile[row * BN + col0 + j * THREADS] =
                    (off >= 0 && x_col[j] >= 0) ? x[x_col[j] + off] : 0.0f;
            }
        }
        __syncthreads();  // tiles (and the next table) complete before the outer products

#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM];
            float bv[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                a[i] = k_tile[kk * LDK + ty + i * TY];  // one or two addresses per warp
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                bv[j] = x_tile[kk * BN + tx + j * TX];  // consecutive words across the warp
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
                }
            }
        }
        __syncthreads();  // the next K-tile overwrites the tiles
        buf ^= 1;
    }

    // Consecutive tx write consecutive columns n of one map: coalesced.
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int n = n0 + tx + j * TX;
        if (n >= N) {
            continue;
        }
        const int b = n / HW;
        const int hw = n - b * HW;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + ty + i * TY;
            if (m < M) {
                y[(b * M + m) * HW + hw] = acc[i][j];
            }
        }
    }
}
