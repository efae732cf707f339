// The FP32 ceiling of the device: every thread runs FMA_CHAINS independent chains of fused
// multiply-adds, so the scheduler always has an FMA ready (one chain would stall on the FMA's
// latency); nothing is loaded inside the loop, so memory never limits it. The harness launches
// 8 blocks of 256 threads per SM and counts 2 FLOP per FMA.
#ifndef FMA_CHAINS
#define FMA_CHAINS 16
#endif

extern "C" __global__ void fp32_fma_peak(float* out, int iters, float a, float b) {
    float v[FMA_CHAINS];
#pragma unroll
    for (int j = 0; j < FMA_CHAINS; ++j) v[j] = threadIdx.x * 1e-3f + j;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < FMA_CHAINS; ++j) v[j] = fmaf(v[j], a, b);
    }
    // Sum and store, so the compiler cannot drop the chains as dead code.
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < FMA_CHAINS; ++j) s += v[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
