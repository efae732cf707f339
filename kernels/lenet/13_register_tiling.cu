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
// Launch (done by kernelbook.lenet.tensor.RegisterTiling):
//   block = (BM / TM) * (BN / TN) threads (1-D)
//   grid  = (ceil(N / BN), ceil(M / BM)),  N = B * H_out * W_out
// Loader mapping: thread t owns column (t % BN) + j*THREADS of the x tile and rows
// t / BN + i*ROW_GROUPS, as in step 11; BN and THREADS divide one another.
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// The kernel body is a template over the tile sizes (register_tiled_conv below), so that step 14
// can compile it again as its generic fallback with its own tiles: 14_specialised.cu includes this file
// with REGISTER_TILING_TEMPLATE_ONLY defined, which leaves out this step's parameters and entry
// point.
//
// Compile-time parameters (the harness passes them as -D...):
#ifndef REGISTER_TILING_TEMPLATE_ONLY
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
#endif  // !REGISTER_TILING_TEMPLATE_ONLY

// gemm_dims, gemm_column (n -> b, hw, x_col) and row_offset (r -> (c*H + p)*W + q, -1 past CKK).
#include "implicit_gemm.cuh"

// kBM, kBN, kBK, kTM, kTN are the BM, BN, BK, TM, TN above (or step 14's FB_* tiles).
template <int kBM, int kBN, int kBK, int kTM, int kTN>
__device__ __forceinline__ void register_tiled_conv(float *y, const float *x, const float *k,
                                                    int B, int M, int C, int H, int W, int K)
{
    constexpr int kTY = kBM / kTM;
    constexpr int kTX = kBN / kTN;
    constexpr int kThreads = kTX * kTY;
    constexpr int kCols = kBN >= kThreads ? kBN / kThreads : 1;        // x-tile columns per thread
    constexpr int kRowGroups = kThreads >= kBN ? kThreads / kBN : 1;  // threads per x-tile column
    constexpr int kRowsPerThread = kBK / kRowGroups;
    constexpr int kLDK = kBM + 1;
    static_assert(kBM % kTM == 0 && kBN % kTN == 0, "TM must divide BM and TN must divide BN");
    static_assert(kBN % kThreads == 0 || kThreads % kBN == 0, "BN and the thread count must divide one another");
    static_assert(kBK % kRowGroups == 0, "BK must be a multiple of the threads sharing a column");

    __shared__ float k_tile[kBK * kLDK];  // [r][m], transposed
    __shared__ float x_tile[kBK * kBN];   // [r][n]
    __shared__ int x_row[2][kBK];

    const auto [H_out, W_out, HW, KK, CKK, N] = gemm_dims(B, C, H, W, K);  // implicit_gemm.cuh

    const int tid = threadIdx.x;
    const int tx = tid % kTX;
    const int ty = tid / kTX;
    const int m0 = blockIdx.y * kBM;
    const int n0 = blockIdx.x * kBN;  // n0 + BN fits in int (N <= 2^31 - 1 - BN checked)

    // Loader: the thread's columns of the x tile, decomposed once for the whole reduction.
    const int col0 = tid % kBN;
    const int row0 = tid / kBN;
    int x_col[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        const int n = n0 + col0 + j * kThreads;
        x_col[j] = -1;
        if (n < N) {
            x_col[j] = gemm_column(n, HW, W_out, C, H, W).x_col;
        }
    }
    if (tid < kBK) {
        x_row[0][tid] = row_offset(tid, CKK, KK, K, H, W);
    }
    __syncthreads();  // table 0 is read by every thread in the first K-tile

    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    int buf = 0;
    for (int r0 = 0; r0 < CKK; r0 += kBK) {
        // Next K-tile's table into the other buffer (its last readers finished before the
        // previous barrier).
        if (tid < kBK) {
            x_row[buf ^ 1][tid] = row_offset(r0 + kBK + tid, CKK, KK, K, H, W);
        }
        // k tile: consecutive threads read consecutive r of a row of k (coalesced) and store
        // down a column of the transposed tile (stride BM + 1: distinct banks).
#pragma unroll
        for (int e = tid; e < kBM * kBK; e += kThreads) {
            const int i = e / kBK;
            const int j = e % kBK;
            const int m = m0 + i;
            const int r = r0 + j;
            k_tile[j * kLDK + i] = (m < M && r < CKK) ? k[m * CKK + r] : 0.0f;
        }
        // x tile: per element a broadcast table read, an add, a compare and the load.
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int row = row0 + i * kRowGroups;
            const int off = x_row[buf][row];
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                x_tile[row * kBN + col0 + j * kThreads] =
                    (off >= 0 && x_col[j] >= 0) ? x[x_col[j] + off] : 0.0f;
            }
        }
        __syncthreads();  // tiles (and the next table) complete before the outer products

#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            float a[kTM];
            float bv[kTN];
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
                a[i] = k_tile[kk * kLDK + ty + i * kTY];  // one or two addresses per warp
            }
#pragma unroll
            for (int j = 0; j < kTN; ++j) {
                bv[j] = x_tile[kk * kBN + tx + j * kTX];  // consecutive words across the warp
            }
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
#pragma unroll
                for (int j = 0; j < kTN; ++j) {
                    acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
                }
            }
        }
        __syncthreads();  // the next K-tile overwrites the tiles
        buf ^= 1;
    }

    // Consecutive tx write consecutive columns n of one map: coalesced.
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
        const int n = n0 + tx + j * kTX;
        if (n >= N) {
            continue;
        }
        const int b = n / HW;
        const int hw = n - b * HW;
#pragma unroll
        for (int i = 0; i < kTM; ++i) {
            const int m = m0 + ty + i * kTY;
            if (m < M) {
                y[(b * M + m) * HW + hw] = acc[i][j];
            }
        }
    }
}

#ifndef REGISTER_TILING_TEMPLATE_ONLY
#define THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(THREADS)
conv_register_tiling(float *y, const float *x, const float *k,
                     int B, int M, int C, int H, int W, int K)
{
    register_tiled_conv<BM, BN, BK, TM, TN>(y, x, k, B, M, C, H, W, K);
}
#endif  // !REGISTER_TILING_TEMPLATE_ONLY
