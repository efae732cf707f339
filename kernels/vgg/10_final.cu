// Step 10 — the final FP32-accurate kernel: step 08's 3xTF32 implicit GEMM with the launch
// parameters that measured fastest on the H100 at B=1 (chosen by the harness through -D:
// BM, TH, TW, WARPS_M, WARPS_N, STAGES, MIN_BLOCKS; the Python step list holds the values).
//
// Why this one: on the H100 three TF32 tensor-core products per multiply-add still beat the
// FP32 FMA kernel of step 06 (see the measurements of steps 06 and 08), and they keep the
// error at FP32 level (~1e-6 relative L2 against float64).

#define SPLIT3 1
#define KERNEL_NAME conv_pool_final
#include "07_tf32_implicit_gemm.cu"
