// FP32 implicit GEMM with shared-memory tiles for the block and register tiles for each thread,
// as a template over the tile sizes (register_tiled_conv<BM, BN, BK, TM, TN>): the kernel body
// of LeNet step 13 (13_register_tiling.cu explains it), which step 14 compiles again as its
// generic fallback with its own tiles.
#pragma once

// gemm_dims, gemm_column (n -> b, hw, x_col) and row_offset (r -> (c*H + p)*W + q, -1 past CKK).
#include "implicit_gemm.cuh"

// kBM, kBN, kBK, kTM, kTN are step 13's BM, BN, BK, TM, TN (or step 14's FB_* tiles).
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

