// Step 07 — implicit GEMM on tensor cores: mma.sync m16n8k8 with TF32 inputs, FP32 accumulators.
//
// The convolution is a GEMM whose "A" is the weights (M × C·K²) and whose "B" is the im2col
// matrix (C·K² × pixels), never built. The reduction runs over stages of 8 channels × one
// kernel row kh; for each kw of the stage a tensor-core step multiplies
//   A[m][c] = w[m][c][kh][kw]            (16 channels m × 8 channels c)
//   B[c][p] = x[c][oh+kh−pad][ow+kw−pad]  (8 channels c × 8 pixels p of one tile row)
// A block computes BM output channels × a TH×TW pre-pool tile; warp (wm, wn) owns BM/WARPS_M
// channels × TH/WARPS_N tile rows. In the accumulator layout a lane holds two horizontally
// adjacent pixels of a row and the same two pixels of the next row, so each 2×2 pooling window
// lies in one thread: bias, ReLU and the pool run in registers; only the pooled quarter is stored.
//
// Operands are packed once per launch by two small kernels, so the main loop's copies are all
// 16 bytes wide and need no bounds checks or index arithmetic beyond a few constant divisions:
//   tc_pack_weights  wp[cg][kh][kw][m/16][lane][4]: the four A-fragment values lane `lane` of a
//                    warp needs for m-tile m/16 (rows g, g+8 × columns q, q+4), already rounded to
//                    TF32 — one LDS.128 per fragment, no cvt; zeros past C and M.
//   tc_pack_input    xp[n][c][Hpd][Wpd]: the input with its zero halo (pad rows and columns, and the
//                    rest of the last partial tiles) written out, channels padded to a multiple of
//                    8, rounded to TF32. A tile row's K−1+TW input columns start 16-byte aligned.
// The earlier version of this step copied 4 bytes per cp.async with a bounds check and six
// divisions per element (29 copies per thread per stage), and converted every fragment with
// cvt.rna in the inner loop; per stage that cost about as many issue slots as the mma.sync work.
// Packing costs one pass over x (~51 MB read, ~53 MB written at B=1) and over w (6.5 MB).
//
// TF32 keeps 10 mantissa bits: operands are rounded (cvt.rna) before the product, so the result
// differs from FP32 by up to ~5e-4 relative per product; over the layer the error measured
// ~2e-4 relative L2 against float64 on the H100 (tolerance 5e-3).
// Step 08 (SPLIT3=1) recovers FP32 accuracy with three products per pair: the packers then write
// a second plane holding the "small" part tf32(v − tf32(v)) of every operand.

// The kernels (packers, then the convolution) are in tc_conv_pool.cuh, shared with steps 08
// and 10, which compile them with SPLIT3=1 under their own kernel names.
#include "tc_conv_pool.cuh"
