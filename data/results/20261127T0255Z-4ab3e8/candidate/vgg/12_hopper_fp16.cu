// Step 12 — step 11's kernel with FP16 operands (BF16 when compiled with -DHOPPER_BF16=1) and
// FP32 accumulators: wgmma m64n256k16, 64 channels per 128-byte k-block, twice TF32's rate.
// FP16 keeps 11 significant bits but only |v| <= 65504: larger data overflows, so this step is
// not FP32-accurate (BF16 keeps FP32's exponent range with 8 significant bits).
// Launched by kernelbook/vgg/hopper.py.
#define HOPPER_MODE 0
#include "hopper_igemm.cuh"
