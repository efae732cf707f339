// Step 08 — FP32 accuracy on tensor cores: 3xTF32.
//
// Each FP32 operand v is split into a TF32 "big" part b = tf32(v) and a TF32 "small" part
// s = tf32(v − b); together they carry ~21 mantissa bits. The product of two operands is
//   a·x ≈ a_b·x_b + a_b·x_s + a_s·x_b        (the a_s·x_s term, ~2^-22 relative, is dropped)
// so three tensor-core products replace one, with FP32 accumulators: errors come back to the
// level of an FP32 FMA loop (~1e-6 relative), at three times the tensor-core work of step 07.
// One more change: a tensor core adds products into its accumulator with truncation, so over
// the 6400-term reduction the accumulator drifts (~4e-5 relative, measured); each group of three
// products therefore goes into a fresh accumulator that is added to the running sum in FP32.
// The kernel is step 07's, compiled with SPLIT3=1: the packing kernels write every operand as
// two TF32 planes, big and small, and each stage holds both in shared memory, so the shared
// memory per block and the operand bytes read from global memory are larger than step 07's.

#define SPLIT3 1
#define KERNEL_NAME conv_pool_3xtf32
#include "tc_conv_pool.cuh"   // step 07's kernels
