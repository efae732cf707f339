// Step 10 — the final FP32-accurate kernel.
//
// On a Hopper GPU step 10 runs one of the two FP32-accurate steps of Hopper's own path (TMA +
// wgmma) for every shape they take (odd K up to 15): step 13 (13_hopper_3xtf32.cu, 3xTF32) or
// step 14 (14_hopper_split.cu, the cross terms on BF16). The first call of a shape times both
// and hands that shape to the faster (kernelbook/vgg/final.py decides, once per shape and GPU).
// Elsewhere (the Hopper steps need sm_90a):
//
// For K = 1, 3, 5, 7 (the studied layer has K = 5) step 10 launches step 09's Winograd
// F(2×2, K×K) kernels from 09_winograd.cu, faster there than 3xTF32 in the recorded runs (the
// chapter's table gives both): Winograd does 36 multiplies per 2×2 outputs per channel pair
// instead of 100, in plain FP32 FMA; 3xTF32 does three tensor-core products per multiply and
// mma.sync reaches a fraction of Hopper's peak.
//
// For any other K there are no transform tables, and step 10 runs what this file compiles:
// step 08's 3xTF32 implicit GEMM (big·big + big·small + small·big TF32 products, FP32 sums) with
// its launch parameters from the Python step list (BM, TH, TW, WARPS_M, WARPS_N, STAGES,
// MIN_BLOCKS through -D).

#define SPLIT3 1
#define KERNEL_NAME conv_pool_final
#include "tc_conv_pool.cuh"   // step 07's kernels
