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
// The kernel is written as a template over the fragment shape (conv_wmma<FM, FN>, with its tile
// geometry Config<FM, FN>, in conv_wmma_index_reuse.cuh; this step's conv_index_reuse is
// conv_wmma<FRAG_M, FRAG_N>), so that step 12 can instantiate it twice from the same header.
//
// Compile-time parameters (the harness passes them as -D...): FRAG_M and FRAG_N here; WARPS,
// FRAGS_N and BK in the header.
#ifndef FRAG_M
#define FRAG_M 16
#endif
#ifndef FRAG_N
#define FRAG_N 16
#endif

// kThreads, Config<FM, FN> and the kernel body conv_wmma<FM, FN> (with wmma_compat.cuh and
// implicit_gemm.cuh).
#include "conv_wmma_index_reuse.cuh"

extern "C" __global__ void __launch_bounds__(kThreads)
conv_index_reuse(float *y, const float *x, const float *k,
                 int B, int M, int C, int H, int W, int K)
{
    conv_wmma<FRAG_M, FRAG_N>(y, x, k, B, M, C, H, W, K);
}
