// MLP step 15 - final: the fastest FP32-accurate kernel per test case (a dispatch file).
//
// The FP32-accurate candidates are the CUDA-core kernels of steps 00-06 and the 3xTF32
// tensor-core kernel of step 13. Step 13 is the fastest at both sizes, so this file compiles
// it once; the host (kernelbook.mlp.impls.Final) chooses its launch shape per test case
// (`small_*` parameters up to `switch_columns` columns, `large_*` above) - a small N wants
// more, smaller blocks to reach every SM, a large N wants fewer warps per SM and more
// columns per warp.
#include "13_tensor_core_3xtf32.cu"
