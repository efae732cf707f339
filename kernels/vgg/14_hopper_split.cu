// Step 14 — FP32-accurate with less tensor work: step 13's split, but the two cross terms
// small*big + big*small run on the BF16 path (twice TF32's rate, FP32's exponent range) as ONE
// product over a doubled k: per 32-channel chunk the pack writes [small | big] of x and
// [big | small] of w as 64 BF16 values. big*big stays on TF32. Tensor work: two TF32-units per
// product instead of three; the bytes moved are step 13's. See hopper_igemm.cuh (mode 3).
// Launched by kernelbook/vgg/hopper.py.
#define HOPPER_MODE 3
#include "hopper_igemm.cuh"
