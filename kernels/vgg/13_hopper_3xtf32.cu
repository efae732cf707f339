// Step 13 — FP32-accurate on Hopper's path: 3xTF32 with the split done once, in the pack kernel.
// Each operand v is written twice: big = tf32(v) and small = tf32(v - big); both are TF32 numbers
// with FP32's 8-bit exponent, so the split holds for any finite FP32 data whose products stay
// finite. Per k-block a consumer warpgroup computes small*big + big*small + big*big (wgmma
// m64n128k8) into a fresh accumulator and adds it to the running sum in FP32 (the tensor core
// truncates as it accumulates; see hopper_igemm.cuh); two fresh accumulators alternate so the
// tensor cores never wait for the add. Tile: 128 pixels x 128 channels, so that the running sum
// and both fresh accumulators fit in registers. Launched by kernelbook/vgg/hopper.py.
#define HOPPER_MODE 2
#include "hopper_igemm.cuh"
