// LeNet step 09 - FP16 arithmetic: the fused implicit GEMM of step 07 in half precision.
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]      (r = c*K*K + p*K + q, n = (b, h, w))
//
// Same tiling and same implicit unrolling as step 07; what changes is the arithmetic. The
// tiles are converted to __half as they are stored in shared memory, two neighbouring
// reduction indices per __half2:
//
//   k_tile[m][j] = (k[m][r0 + 2j], k[m][r0 + 2j + 1])
//   x_tile[j][n] = (xu[r0 + 2j][n], xu[r0 + 2j + 1][n])
//
// so one __hfma2 does two multiply-adds of one output: lane .x sums the even reduction
// indices and lane .y the odd ones. The two lanes are added only at the end, in float. A
// packed FP16 FMA is twice the work of an FP32 FMA per instruction, and the tiles take half
// the shared memory; the price is precision (10-bit mantissa, sums rounded to 11 bits).
//
// How long the half2 sums run before they are moved into a float accumulator is the
// compile-time HALF_TILES: after every HALF_TILES x tiles (TILE/2 __hfma2 each) the half2
// lanes are added into a float and restarted at zero. HALF_TILES = 0 keeps the whole
// reduction in half2 (combined in float only at the end): the error then grows with the
// reduction length CKK, because every addition is rounded to 11 bits relative to the
// running sum. The default 1 bounds the half-precision chains to TILE/2 terms.
//
// Layouts (row-major; x, k, y float32 in global memory, __half only in shared memory):
//   x: B x C x H x W     k: M x C x K x K (= M x CKK)     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.gemm.Fp16):
//   block = (TILE, TILE)           TILE even; thread (tx, ty) computes out[m = ty][n = tx]
//   grid  = (ceil(N / TILE), ceil(M / TILE)),  N = B * H_out * W_out
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// Compile-time parameters (the harness passes -DTILE=... -DHALF_TILES=...):
#include <cuda_fp16.h>

#ifndef TILE
#define TILE 16
#endif
#ifndef HALF_TILES
#define HALF_TILES 1
#endif

#if TILE % 2 != 0
#error "TILE must be even: reduction indices are packed in pairs"
#endif

// gemm_dims, gemm_column (n -> b, hw, x_col) and x_row_offset (r -> (c*H + p)*W + q).
#include "implicit_gemm.cuh"

extern "C" __global__ void conv_fp16(float *y, const float *x, const float *k,
                                     int B, int M, int C, int H, int W, int K)
{
    __shared__ __half2 k_tile[TILE][TILE / 2];  // rows m, pairs of reduction indices
    __shared__ __half2 x_tile[TILE / 2][TILE];  // pairs of reduction indices, columns n
    // The loaders write single halves: element (m, r) of k_tile is half number m*TILE + r,
    // element (r, n) of x_tile is half number ((r/2)*TILE + n)*2 + r%2.
    __half *k_half = reinterpret_cast<__half *>(&k_tile[0][0]);
    __half *x_half = reinterpret_cast<__half *>(&x_tile[0][0]);

    const auto [H_out, W_out, HW, KK, CKK, N] = gemm_dims(B, C, H, W, K);  // implicit_gemm.cuh

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int m = blockIdx.y * TILE + ty;
    // Unsigned so that the last column tile cannot wrap negative when N is close to 2^31.
    const unsigned n_unsigned = blockIdx.x * TILE + tx;
    const bool n_valid = n_unsigned < (unsigned)N;

    // The thread's column (b, h, w), decomposed once: it loads and computes this column.
    int b = 0, hw = 0, x_col = 0;
    if (n_valid) {
        const GemmColumn col = gemm_column((int)n_unsigned, HW, W_out, C, H, W);
        b = col.b;
        hw = col.hw;
        x_col = col.x_col;
    }

    const __half2 zero2 = __float2half2_rn(0.0f);
    __half2 acc2 = zero2;  // two interleaved partial sums in half precision
    float acc = 0.0f;      // where the half2 sums end up
    int tiles_in_half = 0;

    for (int r0 = 0; r0 < CKK; r0 += TILE) {
        // Loads exactly as in step 07 (coalesced along tx), converted to half on the way in.
        const int rk = r0 + tx;
        const float kv = (m < M && rk < CKK) ? k[m * CKK + rk] : 0.0f;
        k_half[ty * TILE + tx] = __float2half_rn(kv);

        const int rx = r0 + ty;
        float xv = 0.0f;
        if (n_valid && rx < CKK) {
            xv = x[x_col + x_row_offset(rx, KK, K, H, W)];
        }
        // Rows ty and ty+1 (one warp for TILE = 16) fill the two halves of the same 32-bit
        // word: same word, so no bank conflict.
        x_half[((ty >> 1) * TILE + tx) * 2 + (ty & 1)] = __float2half_rn(xv);
        __syncthreads();  // the tiles are complete before the products read them

#pragma unroll
        for (int j = 0; j < TILE / 2; ++j) {
            // k_tile[ty][j] is a broadcast across tx; x_tile[j][tx] is one word per thread.
            acc2 = __hfma2(k_tile[ty][j], x_tile[j][tx], acc2);
        }
        __syncthreads();  // the next iteration overwrites the tiles

        if (HALF_TILES > 0 && ++tiles_in_half == HALF_TILES) {
            acc += __low2float(acc2) + __high2float(acc2);
            acc2 = zero2;
            tiles_in_half = 0;
        }
    }
    acc += __low2float(acc2) + __high2float(acc2);  // lanes not yet moved (all when HALF_TILES = 0)

    // Coalesced: consecutive tx are consecutive hw of map m.
    if (m < M && n_valid) {
        y[(b * M + m) * HW + hw] = acc;
    }
}
