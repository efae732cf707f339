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
// The kernel body is a template over the tile sizes (register_tiled_conv in
// register_tiled_conv.cuh), so that step 14 can compile it again as its generic fallback with
// its own tiles.
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

// register_tiled_conv<kBM, kBN, kBK, kTM, kTN> (with implicit_gemm.cuh).
#include "register_tiled_conv.cuh"

#define THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(THREADS)
conv_register_tiling(float *y, const float *x, const float *k,
                     int B, int M, int C, int H, int W, int K)
{
    register_tiled_conv<BM, BN, BK, TM, TN>(y, x, k, B, M, C, H, W, K);
}
