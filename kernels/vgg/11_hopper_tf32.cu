// Step 11 — the layer as an implicit GEMM on Hopper's own path (hopper_igemm.cuh) with TF32
// operands and FP32 accumulators: wgmma m64n256k8, 32 channels per 128-byte k-block.
// The pack kernel rounds x and w to TF32 (cvt.rna), the precision of step 07's mma.sync kernel;
// what changes is the path that feeds the tensor cores: TMA tile copies into an mbarrier-guarded
// ring, a producer warpgroup and two consumer warpgroups, asynchronous warpgroup MMAs reading
// both operands from shared memory, a persistent grid. Launched by kernelbook/vgg/hopper.py.
#define HOPPER_MODE 1
#include "hopper_igemm.cuh"
