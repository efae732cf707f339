// The FP16 tensor-core implicit GEMM with index reuse, as a template over the fragment shape
// (conv_wmma<FM, FN>): the kernel body of LeNet step 11 (11_index_reuse.cu explains it), which
// step 12 instantiates for two fragment shapes.
#pragma once

#include <cuda_fp16.h>

// Compile-time parameters (the harness passes them as -D...):
#ifndef WARPS
#define WARPS 4
#endif
#ifndef FRAGS_N
#define FRAGS_N 2
#endif
#ifndef BK
#define BK 16
#endif

// nvcuda::wmma under the name `wmma`, or the same operations written as PTX where CuPy's NVRTC
// lacks <crt/mma.h> (WMMA_VIA_PTX=1 forces that path): see wmma_compat.cuh.
#include "wmma_compat.cuh"

// gemm_dims, gemm_column (n -> b, hw, x_col) and row_offset (r -> (c*H + p)*W + q, -1 past CKK).
#include "implicit_gemm.cuh"

constexpr int kThreads = WARPS * 32;
constexpr int kFragK = 16;
static_assert(BK % kFragK == 0, "BK must be a multiple of 16");

// The tile geometry for an FM x FN fragment (FRAG_M x FRAG_N in this step's kernel).
template <int FM, int FN>
struct Config {
    static constexpr int BM = FM;
    static constexpr int WARP_N = FRAGS_N * FN;
    static constexpr int BN = WARPS * WARP_N;
    static constexpr int COLS = BN >= kThreads ? BN / kThreads : 1;        // columns per thread
    static constexpr int ROW_GROUPS = kThreads >= BN ? kThreads / BN : 1;  // threads per column
    static constexpr int ROWS_PER_THREAD = BK / ROW_GROUPS;
    // 16 bytes of padding per row: spreads fragment loads over the banks and keeps the wmma
    // alignment rules (16-byte row starts, 32-byte fragment starts).
    static constexpr int LDA = BK + 8;
    static constexpr int LDB = BN + 8;
    static constexpr int LDC = BN + 4;
    static_assert(BN % kThreads == 0 || kThreads % BN == 0, "BN and the thread count must divide one another");
    static_assert(BK % ROW_GROUPS == 0, "BK must be a multiple of the threads sharing a column");
};

// The kernel, for an FM x FN x 16 fragment.
template <int FM, int FN>
__device__ __forceinline__ void conv_wmma(float *y, const float *x, const float *k,
                                          int B, int M, int C, int H, int W, int K)
{
    typedef Config<FM, FN> cfg;
    __shared__ __align__(32) __half k_tile[cfg::BM * cfg::LDA];
    __shared__ __align__(32) __half x_tile[BK * cfg::LDB];
    __shared__ __align__(32) float out_tile[cfg::BM * cfg::LDC];
    __shared__ int x_row[2][BK];

    const auto [H_out, W_out, HW, KK, CKK, N] = gemm_dims(B, C, H, W, K);  // implicit_gemm.cuh

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int m0 = blockIdx.y * cfg::BM;
    const int n0 = blockIdx.x * cfg::BN;  // n0 + BN fits in int (N <= 2^31 - 1 - BN checked)

    // This thread's columns of the x tile, decomposed once for the whole reduction. The same
    // decomposition gives the output address y_col = b*M*HW + hw of the column.
    const int col0 = tid % cfg::BN;
    const int row0 = tid / cfg::BN;
    int x_col[cfg::COLS];
    int y_col[cfg::COLS];
#pragma unroll
    for (int j = 0; j < cfg::COLS; ++j) {
        const int n = n0 + col0 + j * kThreads;
        x_col[j] = -1;
        y_col[j] = -1;
        if (n < N) {
            const GemmColumn col = gemm_column(n, HW, W_out, C, H, W);
            x_col[j] = col.x_col;
            y_col[j] = col.b * M * HW + col.hw;
        }
    }
    if (tid < BK) {
        x_row[0][tid] = row_offset(tid, CKK, KK, K, H, W);
    }
    __syncthreads();  // table 0 is read by every thread in the first K-tile

    wmma::fragment<wmma::accumulator, FM, FN, kFragK, float> acc[FRAGS_N];
#pragma unroll
    for (int f = 0; f < FRAGS_N; ++f) {
        wmma::fill_fragment(acc[f], 0.0f);
    }

    int buf = 0;
    for (int r0 = 0; r0 < CKK; r0 += BK) {
        // Next K-tile's table into the other buffer. Its previous readers were the loads of
        // the tile before this one, which all finished before the last barrier.
        if (tid < BK) {
            x_row[buf ^ 1][tid] = row_offset(r0 + BK + tid, CKK, KK, K, H, W);
        }

        // k tile: BM x BK, consecutive threads along a row of k (coalesced); the i, j split
        // is by compile-time constants (shifts).
#pragma unroll
        for (int e = tid; e < cfg::BM * BK; e += kThreads) {
            const int i = e / BK;
            const int j = e % BK;
            const int m = m0 + i;
            const int r = r0 + j;
            k_tile[i * cfg::LDA + j] = __float2half_rn((m < M && r < CKK) ? k[m * CKK + r] : 0.0f);
        }

        // x tile: the thread's rows times its columns; consecutive threads hold consecutive
        // columns (consecutive w): coalesced global reads, consecutive shared writes.
#pragma unroll
        for (int i = 0; i < cfg::ROWS_PER_THREAD; ++i) {
            const int row = row0 + i * cfg::ROW_GROUPS;
            const int off = x_row[buf][row];  // same entry for the whole warp: a broadcast
#pragma unroll
            for (int j = 0; j < cfg::COLS; ++j) {
                const float v = (off >= 0 && x_col[j] >= 0) ? x[x_col[j] + off] : 0.0f;
                x_tile[row * cfg::LDB + col0 + j * kThreads] = __float2half_rn(v);
            }
        }
        __syncthreads();  // tiles (and the next table) complete before the fragment loads

#pragma unroll
        for (int kk = 0; kk < BK; kk += kFragK) {
            wmma::fragment<wmma::matrix_a, FM, FN, kFragK, __half, wmma::row_major> a;
            wmma::load_matrix_sync(a, k_tile + kk, cfg::LDA);
#pragma unroll
            for (int f = 0; f < FRAGS_N; ++f) {
                wmma::fragment<wmma::matrix_b, FM, FN, kFragK, __half, wmma::row_major> bfrag;
                wmma::load_matrix_sync(bfrag, x_tile + kk * cfg::LDB + warp * cfg::WARP_N + f * FN, cfg::LDB);
                wmma::mma_sync(acc[f], a, bfrag, acc[f]);
            }
        }
        __syncthreads();  // the next K-tile overwrites the tiles
        buf ^= 1;
    }

#pragma unroll
    for (int f = 0; f < FRAGS_N; ++f) {
        wmma::store_matrix_sync(out_tile + warp * cfg::WARP_N + f * FN, acc[f], cfg::LDC, wmma::mem_row_major);
    }
    __syncthreads();  // all slices staged before threads read other warps' columns

    // Each thread writes its own columns, all rows it shares the column for: consecutive
    // threads write consecutive hw of one map (coalesced).
#pragma unroll
    for (int j = 0; j < cfg::COLS; ++j) {
        if (y_col[j] < 0) {
            continue;
        }
        for (int i = row0; i < cfg::BM; i += cfg::ROW_GROUPS) {
            const int m = m0 + i;
            if (m < M) {
                y[y_col[j] + m * HW] = out_tile[i * cfg::LDC + col0 + j * kThreads];
            }
        }
    }
}

