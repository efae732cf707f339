// LeNet step 07 - fused unroll + matmul ("implicit GEMM").
//
// The same matrix product as step 06,
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]
//     r = c*K*K + p*K + q        (CKK = C*K*K reduction indices)
//     n = b*HW + h*W_out + w      (N = B*HW columns, the whole batch at once)
//     xu[r][n] = x[b][c][h + p][w + q]
//
// but xu never exists in memory: when the GEMM needs a tile of xu in shared memory, the
// loading thread computes (c, p, q) from r and (b, h, w) from n and reads x directly. This
// removes the unrolled matrix (K*K times the size of x, written once and read once), the
// permute kernel and two launches per chunk, so no batch chunking is needed either. The
// output is written straight into y in (B, M, H_out, W_out) order.
//
// The address of xu[r][n] separates into a part that depends on the column only and a part
// that depends on the row only:
//   x index = (b*C*H*W + h*W + w)  +  ((c*H + p)*W + q)
// The column part is computed once per thread (its column never changes); the row part is
// recomputed, with two divisions, for every element the thread loads - step 11 removes that.
//
// Layouts (row-major, float32):
//   x: B x C x H x W     k: M x C x K x K (= the M x CKK matrix)     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.gemm.FusedUnrollMatmul):
//   block = (TILE, TILE)                 thread (tx, ty) computes out[m = ty][n = tx] of its tile
//   grid  = (ceil(N / TILE), ceil(M / TILE))
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// Compile-time parameter (the harness passes -DTILE=...):
#ifndef TILE
#define TILE 16
#endif

// gemm_dims, gemm_column (n -> b, hw, x_col) and x_row_offset (r -> (c*H + p)*W + q).
#include "implicit_gemm.cuh"

extern "C" __global__ void conv_fused_unroll(float *y, const float *x, const float *k,
                                             int B, int M, int C, int H, int W, int K)
{
    __shared__ float k_tile[TILE][TILE];  // rows m, columns r
    __shared__ float x_tile[TILE][TILE];  // rows r, columns n: a tile of the virtual xu

    const auto [H_out, W_out, HW, KK, CKK, N] = gemm_dims(B, C, H, W, K);  // implicit_gemm.cuh

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int m = blockIdx.y * TILE + ty;
    // Unsigned so that the last column tile cannot wrap negative when N is close to 2^31.
    const unsigned n_unsigned = blockIdx.x * TILE + tx;
    const bool n_valid = n_unsigned < (unsigned)N;

    // This thread's column: loaded (row ty of each x tile) and computed (column tx) by it.
    // Its (b, h, w) decomposition is done once, outside the reduction loop.
    int b = 0, hw = 0, x_col = 0;
    if (n_valid) {
        const GemmColumn col = gemm_column((int)n_unsigned, HW, W_out, C, H, W);
        b = col.b;
        hw = col.hw;
        x_col = col.x_col;  // b*C*H*W + h*W + w
    }

    float acc = 0.0f;
    for (int r0 = 0; r0 < CKK; r0 += TILE) {
        // k tile: tx runs along a row of k, so the reads are coalesced. Rows past M and
        // columns past CKK are zeros, so partial tiles need no special case below.
        const int rk = r0 + tx;
        k_tile[ty][tx] = (m < M && rk < CKK) ? k[m * CKK + rk] : 0.0f;

        // x tile: row r = r0 + ty is decomposed into (c, p, q) here, per element.
        const int rx = r0 + ty;
        float v = 0.0f;
        if (n_valid && rx < CKK) {
            // Consecutive tx are consecutive w (within an output row): coalesced reads.
            v = x[x_col + x_row_offset(rx, KK, K, H, W)];  // x_row = (c*H + p)*W + q
        }
        x_tile[ty][tx] = v;
        __syncthreads();  // both tiles complete before the inner product reads them

#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            // k_tile[ty][kk]: one address per warp row (broadcast); x_tile[kk][tx]:
            // consecutive words across tx. No bank conflicts.
            acc += k_tile[ty][kk] * x_tile[kk][tx];
        }
        __syncthreads();  // the tiles are overwritten by the next iteration's loads
    }

    // y[b][m][hw]: consecutive tx are consecutive hw of one map, so the stores coalesce
    // (a tile that straddles two images splits into two contiguous runs).
    if (m < M && n_valid) {
        y[(b * M + m) * HW + hw] = acc;
    }
}
