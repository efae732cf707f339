// MLP step 13 - the whole network on tensor cores, FP32-accurate (3xTF32), one warp per tile.
//
// A warp owns M_TILES x 16 columns at a time and carries them through all three layers in
// registers, the way a fully fused MLP keeps activations on chip. Each layer is a product
// (columns x inputs) * (inputs x units) done with mma.sync m16n8k8 on TF32 operands:
//   layer 1: A = x^T (16 columns x 72 inputs, input 71 zero-padded), B = W1^T  (9 k-steps x 8 n-tiles)
//   layer 2: A = h1^T, B = W2^T (8 x 8)     layer 3: A = h2^T, B = W3^T padded to 8 outputs (8 x 1)
//
// Staying in registers between layers. The accumulator of an m16n8 tile gives lane (g, q)
// (g = lane / 4, q = lane % 4) units 2q and 2q + 1 of rows g and g + 8, while an A fragment of
// m16n8k8 wants k = q and k = q + 4. A dot product does not care in which order its k run, so
// layer l + 1 simply numbers its k that way: k-step j takes n-tile j of layer l, with "k = q"
// meaning unit 8j + 2q and "k = q + 4" meaning unit 8j + 2q + 1. The host packs B in the same
// order, so the accumulator registers are the next A fragment as they are - no shuffles.
//
// FP32 accuracy (3xTF32, as in CUTLASS's example 27). TF32 keeps 10 of float's 23 mantissa
// bits. Each operand is split as v = big + small with big = tf32(v), small = tf32(v - big), and
//   acc += a_small * b_big + a_big * b_small + a_big * b_big
// (a_small * b_small, about 2^-22 relative, is dropped). The weights are split once on the
// host; the activations are split in registers. Accumulation is in FP32.
//
// Weights live in shared memory as fragments, in exactly the order the lanes read them:
// entry ((j * NT + nt) * 32 + lane) is a float4 {b0_big, b1_big, b0_small, b1_small}, so a
// warp's load is one conflict-free 512-byte LDS.128. After the three layers come the biases:
// b1 (64), b2 (64), b3 (8, zero-padded). Total 74,272 bytes: dynamic shared memory.
//
// Launch: block = 32 * WARPS threads, grid chosen by the host (persistent, grid-stride over
// tiles of 16 * M_TILES columns), dynamic shared memory = MLP_TC_SMEM_BYTES.
#include "tc_3xtf32_kernel.cuh"
