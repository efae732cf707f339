// MLP step 11 - a quarter row per thread, at most 64 registers, for a higher occupancy.
//
// Steps 06-10 hold half a row of W1 and W2 per thread and need about 70 registers (or more),
// which limits an SM to a few blocks of 256 threads. Here four threads share each hidden unit:
// quarter r of unit u holds W1[u][18r .. 18r+17] (9 __half2, the last one zero-padded) and
// W2[u][16r .. 16r+15] (8 __half2); two __shfl_xor_sync steps (1, 2) add the four parts.
// In the last layer four threads share each output of a column (16 weights each, 8 __half2),
// 16 columns at a time. __launch_bounds__(256, MIN_BLOCKS) asks ptxas for at most
// 65536 / (256 * MIN_BLOCKS) registers per thread (64 for MIN_BLOCKS = 4).
//
// The block (64 units x 4 quarters) computes every unit of its 32 columns, so each group of 4
// threads walks all 32 columns, the 8 groups of a warp in a circular order: group g takes
// column (g + j) mod 32 in sub-step j. Column strides: x 36 words (quarter r at word 9r),
// h 33 words (quarter r at word 8r): the 32 lanes hit 32 different banks in both.
//
// Packed weights (kernelbook.mlp.impls): w1q[i][t], w2q[i][t] with t = 4u + r, and
// w3q[i][s] with s = 4o + r, each a __half2.
//
// Launch: block = 256 threads, grid chosen by the host.
#include "better_occupancy_kernel.cuh"
