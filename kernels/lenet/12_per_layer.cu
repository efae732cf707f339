// LeNet step 12 - per-layer kernels: one file, two tensor-core configurations, and a
// dispatcher (in Python) that picks one per layer shape.
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]      (r = c*K*K + p*K + q, n = (b, h, w))
//   xu[r][n] = x[x_col(n) + x_row(r)],  x_col = b*C*H*W + h*W + w,  x_row = (c*H + p)*W + q
//
// The kernel is step 11's FP16 tensor-core implicit GEMM (index reuse included), written as a
// template over the fragment shape in conv_wmma_index_reuse.cuh; this file instantiates it
// twice:
//
//   conv_wmma_m16n16k16   16-row fragments: for M > 8 (C3: M = 16 fills them exactly)
//   conv_wmma_m8n32k16     8-row fragments: for M <= 8 (C1: M = 4 pads 8 rows instead of 16,
//                          so half as many tensor-core operations are wasted on zero rows)
//
// The rule lives in kernelbook.lenet.tensor.PerLayer.launch (policy "auto"): M <= 8 takes the
// 8 x 32 kernel, anything larger the 16 x 16 one. Both kernels are compiled from this file with
// the same -D parameters; only the fragment shape differs.
//
// Per K-tile of BK reduction indices: the k tile (BM x BK) and the gathered x tile (BK x BN)
// are converted to __half in shared memory (zeros past M, CKK and N), then each warp runs
// BM x FRAG_N x 16 fragment products over its FRAGS_N fragments, accumulating in float. The
// row table x_row of the K-tile is double-buffered in shared memory; each thread's column
// offsets x_col live in registers for the whole reduction.
//
// Layouts (row-major; global arrays float32, shared tiles __half):
//   x: B x C x H x W     k: M x C x K x K (= M x CKK)     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.tensor.PerLayer), for the chosen fragment FM x FN:
//   block = WARPS * 32 threads, warps side by side along N
//   grid  = (ceil(N / BN), ceil(M / FM)),  BN = WARPS * FRAGS_N * FN
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// Compile-time parameters (the harness passes them as -D...): WARPS, FRAGS_N and BK, as in
// step 11 (their defaults are in the header); the fragment shape is each entry point's own.
#include "conv_wmma_index_reuse.cuh"

extern "C" __global__ void __launch_bounds__(kThreads)
conv_wmma_m16n16k16(float *y, const float *x, const float *k, int B, int M, int C, int H, int W, int K)
{
    conv_wmma<16, 16>(y, x, k, B, M, C, H, W, K);
}

extern "C" __global__ void __launch_bounds__(kThreads)
conv_wmma_m8n32k16(float *y, const float *x, const float *k, int B, int M, int C, int H, int W, int K)
{
    conv_wmma<8, 32>(y, x, k, B, M, C, H, W, K);
}
