// MLP step 10 - producer and consumer warps: the next inputs load while the outputs compute.
//
// Starting from step 09, the tile of x gets two buffers. After layer 2, warps 0-3 (consumers)
// compute the last layer while warps 4-7 (producers) load the block's next tile of x into the
// other buffer, so that load overlaps work instead of standing alone between two barriers.
// The last layer changes shape: consumer warp o computes output o for all 32 columns, lane l
// for column l, reading W3 from shared memory (every lane reads the same weight: a broadcast).
// That is 64 multiply-adds per thread and no butterfly at all, instead of 16 butterflies.
//
// Hidden vectors use a 33-word column stride with the two halves back to back: in layers 1-2
// the 16 pairs read banks c + i and c + 16 + i (disjoint), and a consumer warp reads banks l + i.
// With one tile per block (the 5x5 case: 400 tiles) there is nothing to prefetch.
//
// Launch: block = 256 threads, grid chosen by the host. Weights packed as in step 09.
#include "inputs_load_hiding_kernel.cuh"
