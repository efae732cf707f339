// MLP step 09 - the weights are read with coalesced loads.
//
// In step 08 thread (unit, half) loaded its registers from row `unit` of W1: consecutive lanes
// read addresses 36 or 71 floats apart, one 32-byte sector per lane per load. The host now packs
// the weights once, in the order the threads consume them (kernelbook.mlp.impls packs them):
//   w1p[i][q] = (W1[q/2][36*(q%2) + 2i], W1[q/2][36*(q%2) + 2i + 1])   i < 18, q < 128
//   w2p[i][q] = (W2[q/2][32*(q%2) + 2i], W2[q/2][32*(q%2) + 2i + 1])   i < 16
//   w3p[o][l] = (W3[o][2l], W3[o][2l + 1])                             o < 4,  l < 32
// each entry a __half2, so load i of the 32 lanes of a warp is one 128-byte transaction.
// Everything else is step 08.
//
// Launch: block = 256 threads, grid chosen by the host.
#include "coalesced_weights_kernel.cuh"
