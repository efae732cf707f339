// LeNet step 11 - index reuse: the FP16 tensor-core implicit GEMM of step 10 with the
// loader's index arithmetic hoisted out of the per-element path.
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]      (r = c*K*K + p*K + q, n = (b, h, w))
//   xu[r][n] = x[x_col(n) + x_row(r)]
//     x_col(n) = b*C*H*W + h*W + w      (depends on the column only)
//     x_row(r) = (c*H + p)*W + q        (depends on the reduction index only)
//
// Step 10 decomposed both r and n for every element it gathered (four divisions each).
// Here the address is split into its column and row parts and each is computed once:
//
//   - columns: every thread loads the same few columns of the x tile in every K-tile (the
//     loader's mapping is fixed), so it computes x_col for them once, before the reduction
//     loop, and keeps them in registers (-1 marks a column past N);
//   - rows: a table x_row[BK] for the K-tile is computed by BK threads (one division chain
//     each) and read from shared memory by all (-1 marks an index past CKK). Every warp reads
//     one entry at a time, so the read is a broadcast. The table is double-buffered: while the
//     threads gather tile t with table t % 2, the first BK threads already fill table
//     (t + 1) % 2, so no extra barrier is needed.
//
// The gather of one element is then: one shared read (broadcast), one add, one compare, one
// global load. Everything else (fragments, padding with zeros, staged output) is step 10's
// FP16 path; the output write reuses the per-thread column decomposition too.
//
// Layouts (row-major; global arrays float32, shared tiles __half):
//   x: B x C x H x W     k: M x C x K x K (= M x CKK)     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.tensor.IndexReuse):
//   block = WARPS * 32 threads, warps side by side along N
//   grid  = (ceil(N / BN), ceil(M / FRAG_M)),  BN = WARPS * FRAGS_N * FRAG_N
// Loader mapping (THREADS = WARPS * 32, kThreads below; COLS and ROW_GROUPS are in Config):
// thread t owns column (t % BN) + j*THREADS of the x tile (j < COLS) and rows
// t / BN + i*ROW_GROUPS (i < BK / ROW_GROUPS), where COLS = BN / THREADS when BN >= THREADS,
// else ROW_GROUPS = THREADS / BN threads share a column. One of the two divides the other.
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// The kernel is written as a template over the fragment shape (conv_wmma<FM, FN> below; this
// step's conv_index_reuse is conv_wmma<FRAG_M, FRAG_N>), so that step 12 can instantiate it
// twice: 12_per_layer.cu includes this file with INDEX_REUSE_TEMPLATE_ONLY defined, which
// leaves out FRAG_M, FRAG_N and this step's entry point.
//
// Compile-time parameters (the harness passes them as -D...):
#include <cuda_fp16.h>

#ifndef INDEX_REUSE_TEMPLATE_ONLY
#ifndef FRAG_M
#define FRAG_M 16
#endif
#ifndef FRAG_N
#define FRAG_N 16
#endif
#endif  // !INDEX_REUSE_TEMPLATE_ONLY
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

#ifndef INDEX_REUSE_TEMPLATE_ONLY
extern "C" __global__ void __launch_bounds__(kThreads)
conv_index_reuse(float *y, const float *x, const float *k,
                 int B, int M, int C, int H, int W, int K)
{
    conv_wmma<FRAG_M, FRAG_N>(y, x, k, B, M, C, H, W, K);
}
#endif  // !INDEX_REUSE_TEMPLATE_ONLY
