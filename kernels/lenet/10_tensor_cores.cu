// LeNet step 10 - tensor cores: the implicit GEMM on WMMA fragments.
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]      (r = c*K*K + p*K + q, n = (b, h, w))
//   xu[r][n] = x[b][c][h + p][w + q]                        (never stored: gathered, as in 07)
//
// The block computes a BM x BN tile of the M x N output (N = B * H_out * W_out) with
// tensor-core matrix fragments (nvcuda::wmma). Per K-tile of BK reduction indices:
//
//   1. all threads copy the k tile (BM x BK) and the gathered x tile (BK x BN) into shared
//      memory, converted to the fragment's input type; rows past M, indices past CKK and
//      columns past N are zeros, so every M, CKK and N is legal;
//   2. each warp multiplies the k tile by its own BK x (FRAGS_N * FRAG_N) slice of the x tile
//      with FRAG_M x FRAG_N x FRAG_K fragment products, accumulating in float.
//
// At the end the accumulators go through shared memory (store_matrix_sync needs whole
// fragments, and the tile may hang over M, over N, or across an image boundary), and the
// threads write y[b][m][h][w] with bounds checks; consecutive threads take consecutive
// columns, so the writes coalesce.
//
// Precisions (compile-time USE_TF32):
//   USE_TF32 = 1   m16n16k8, wmma::precision::tf32: float operands rounded to TF32 (10-bit
//                  mantissa) with __float_to_tf32 as they enter shared memory.
//   USE_TF32 = 0   FP16 operands (__half, 10-bit mantissa, 5-bit exponent: |values| < 65504),
//                  FRAG_M x FRAG_N x 16 with (FRAG_M, FRAG_N) = (16, 16) or (8, 32).
// Both accumulate in float. The 8 x 32 fragment suits M = 4 (C1): a 16-row fragment would
// spend 12 of its 16 rows on padding, an 8-row one spends 4.
//
// In this step every element the loader gathers is decomposed from scratch: its (r, n)
// position in the tile, then r into (c, p, q) and n into (b, h, w) - four divisions and
// some more arithmetic per loaded value. Step 11 removes that.
//
// Layouts (row-major; global arrays float32):
//   x: B x C x H x W     k: M x C x K x K (= M x CKK)     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.tensor.TensorCores):
//   block = WARPS * 32 threads, warps side by side along N
//   grid  = (ceil(N / BN), ceil(M / BM)),  BM = FRAG_M, BN = WARPS * FRAGS_N * FRAG_N
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// Compile-time parameters (the harness passes them as -D...):
#include <cuda_fp16.h>

#ifndef USE_TF32
#define USE_TF32 0
#endif
#ifndef FRAG_M
#define FRAG_M 16
#endif
#ifndef FRAG_N
#define FRAG_N 16
#endif
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

// gemm_dims (H_out, W_out, HW, KK, CKK, N). The gather below keeps its own per-element
// decomposition, written as one address expression.
#include "implicit_gemm.cuh"

#if USE_TF32
#define FRAG_K 8
typedef float elem_t;                     // what shared memory holds
typedef wmma::precision::tf32 frag_t;     // what the fragments hold
#define PAD 4                             // 16 bytes of padding per shared row
__device__ __forceinline__ elem_t to_elem(float v) { return wmma::__float_to_tf32(v); }
#else
#define FRAG_K 16
typedef __half elem_t;
typedef __half frag_t;
#define PAD 8
__device__ __forceinline__ elem_t to_elem(float v) { return __float2half_rn(v); }
#endif

#define THREADS (WARPS * 32)
#define BM FRAG_M
#define WARP_N (FRAGS_N * FRAG_N)
#define BN (WARPS * WARP_N)

#if BK % FRAG_K != 0
#error "BK must be a multiple of the fragment's K"
#endif

// Shared rows are padded by 16 bytes: it spreads the fragment loads over the banks, keeps
// every row start 16-byte aligned (wmma's ldm rule) and keeps every fragment's first element
// 32-byte aligned (fragments start at multiples of FRAG_K rows and FRAG_N columns).
#define LDA (BK + PAD)
#define LDB (BN + PAD)
#define LDC (BN + 4)

extern "C" __global__ void __launch_bounds__(THREADS)
conv_tensor_cores(float *y, const float *x, const float *k,
                  int B, int M, int C, int H, int W, int K)
{
    __shared__ __align__(32) elem_t k_tile[BM * LDA];
    __shared__ __align__(32) elem_t x_tile[BK * LDB];
    __shared__ __align__(32) float out_tile[BM * LDC];

    const auto [H_out, W_out, HW, KK, CKK, N] = gemm_dims(B, C, H, W, K);  // implicit_gemm.cuh

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;  // < N, and n0 + BN fits in int (N <= 2^31 - 1 - BN checked)

    wmma::fragment<wmma::accumulator, FRAG_M, FRAG_N, FRAG_K, float> acc[FRAGS_N];
#pragma unroll
    for (int f = 0; f < FRAGS_N; ++f) {
        wmma::fill_fragment(acc[f], 0.0f);
    }

    for (int r0 = 0; r0 < CKK; r0 += BK) {
        // k tile: consecutive threads read consecutive r of one row of k (coalesced).
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int i = e / BK;
            const int j = e - i * BK;
            const int m = m0 + i;
            const int r = r0 + j;
            k_tile[i * LDA + j] = to_elem((m < M && r < CKK) ? k[m * CKK + r] : 0.0f);
        }
        // x tile: consecutive threads take consecutive columns n (consecutive w: coalesced).
        // Everything about the element is worked out afresh: the cost step 11 attacks.
        for (int e = tid; e < BK * BN; e += THREADS) {
            const int i = e / BN;
            const int j = e - i * BN;
            const int r = r0 + i;
            const int n = n0 + j;
            float v = 0.0f;
            if (r < CKK && n < N) {
                const int c = r / KK;
                const int pq = r - c * KK;
                const int p = pq / K;
                const int q = pq - p * K;
                const int b = n / HW;
                const int hw = n - b * HW;
                const int h = hw / W_out;
                const int w = hw - h * W_out;
                v = x[((b * C + c) * H + h + p) * W + w + q];
            }
            x_tile[i * LDB + j] = to_elem(v);
        }
        __syncthreads();  // both tiles complete before any warp loads fragments

#pragma unroll
        for (int kk = 0; kk < BK; kk += FRAG_K) {
            wmma::fragment<wmma::matrix_a, FRAG_M, FRAG_N, FRAG_K, frag_t, wmma::row_major> a;
            wmma::load_matrix_sync(a, k_tile + kk, LDA);
#pragma unroll
            for (int f = 0; f < FRAGS_N; ++f) {
                wmma::fragment<wmma::matrix_b, FRAG_M, FRAG_N, FRAG_K, frag_t, wmma::row_major> bfrag;
                wmma::load_matrix_sync(bfrag, x_tile + kk * LDB + warp * WARP_N + f * FRAG_N, LDB);
                wmma::mma_sync(acc[f], a, bfrag, acc[f]);
            }
        }
        __syncthreads();  // the next K-tile overwrites both tiles
    }

    // Stage the fragments, then write only the valid part of the tile.
#pragma unroll
    for (int f = 0; f < FRAGS_N; ++f) {
        wmma::store_matrix_sync(out_tile + warp * WARP_N + f * FRAG_N, acc[f], LDC, wmma::mem_row_major);
    }
    __syncthreads();  // every warp's slice is in out_tile before threads read across slices

    for (int e = tid; e < BM * BN; e += THREADS) {
        const int i = e / BN;
        const int j = e - i * BN;
        const int m = m0 + i;
        const int n = n0 + j;
        if (m < M && n < N) {
            const int b = n / HW;
            const int hw = n - b * HW;
            y[(b * M + m) * HW + hw] = out_tile[i * LDC + j];
        }
    }
}
