// fusedTensorCore3xTF32Kernel: the whole network on tensor cores in 3xTF32, one warp per tile -
// the kernel of MLP step 13 (13_tensor_core_3xtf32.cu explains it), compiled again by step 15.
#pragma once

#include "mma_fragments.cuh"   // tf32_bits, mma_tf32, split4, mma_3xtf32

#ifndef WARPS
#define WARPS 4
#endif
#ifndef M_TILES
#define M_TILES 2
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define TC_K1 9                  // 72 / 8 k-steps in layer 1
#define TC_K2 8                  // 64 / 8 k-steps in layers 2 and 3
#define TC_NT 8                  // 64 / 8 n-tiles in layers 1 and 2
#define TC_F1 (TC_K1 * TC_NT * 32)
#define TC_F2 (TC_K2 * TC_NT * 32)
#define TC_F3 (TC_K2 * 32)
#define TC_BIAS_FLOATS 136
#define TC_FLOAT4S (TC_F1 + TC_F2 + TC_F3 + TC_BIAS_FLOATS / 4)
#define MLP_TC_SMEM_BYTES (TC_FLOAT4S * 16)

extern "C" __global__ void __launch_bounds__(WARPS * 32)
fusedTensorCore3xTF32Kernel(const float *__restrict__ x, const float4 *__restrict__ packed,
                            float *__restrict__ y, int n)
{
    extern __shared__ float4 smem[];
    for (int i = threadIdx.x; i < TC_FLOAT4S; i += WARPS * 32) smem[i] = packed[i];
    __syncthreads();
    const float4 *f1 = smem;
    const float4 *f2 = f1 + TC_F1;
    const float4 *f3 = f2 + TC_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + TC_F3);

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + 16 * M_TILES - 1) / (16 * M_TILES);

    for (int tile = blockIdx.x * WARPS + warp; tile < tiles; tile += gridDim.x * WARPS) {
        const int col0 = tile * 16 * M_TILES;

        // Layer 1. acc[m][nt] starts at the bias of units 8 nt + 2q and 8 nt + 2q + 1.
        float acc[M_TILES][TC_NT][4];
        bias_fragments(acc, bias, 0, q);
#pragma unroll
        for (int j = 0; j < TC_K1; ++j) {
            unsigned a_big[M_TILES][4], a_small[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                // Rows of A are columns of x: lanes g = 0..7 read 8 neighbouring floats of a row of x.
                const int col = col0 + 16 * m + g;
                const int k = 8 * j + q;
                float v[4];
                v[0] = (k < IN && col < n) ? x[(size_t)k * n + col] : 0.0f;
                v[1] = (k < IN && col + 8 < n) ? x[(size_t)k * n + col + 8] : 0.0f;
                v[2] = (k + 4 < IN && col < n) ? x[(size_t)(k + 4) * n + col] : 0.0f;
                v[3] = (k + 4 < IN && col + 8 < n) ? x[(size_t)(k + 4) * n + col + 8] : 0.0f;
                split4(v, a_big[m], a_small[m]);
            }
#pragma unroll
            for (int nt = 0; nt < TC_NT; ++nt) {
                const float4 b = f1[(j * TC_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_3xtf32(acc[m][nt], a_big[m], a_small[m], b);
            }
        }

        // Layer 2: ReLU(acc) is the A fragment (see the k order above).
        float acc2[M_TILES][TC_NT][4];
        bias_fragments(acc2, bias, HIDDEN, q);
#pragma unroll
        for (int j = 0; j < TC_K2; ++j) {
            unsigned a_big[M_TILES][4], a_small[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                const float v[4] = {fmaxf(acc[m][j][0], 0.0f), fmaxf(acc[m][j][2], 0.0f),
                                    fmaxf(acc[m][j][1], 0.0f), fmaxf(acc[m][j][3], 0.0f)};
                split4(v, a_big[m], a_small[m]);
            }
#pragma unroll
            for (int nt = 0; nt < TC_NT; ++nt) {
                const float4 b = f2[(j * TC_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_3xtf32(acc2[m][nt], a_big[m], a_small[m], b);
            }
        }

        // Layer 3: one n-tile of 8 outputs, of which the first 4 exist.
        float out[M_TILES][4];
        bias_fragments(out, bias, 2 * HIDDEN, q);
#pragma unroll
        for (int j = 0; j < TC_K2; ++j) {
            const float4 b = f3[j * 32 + lane];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                unsigned a_big[4], a_small[4];
                const float v[4] = {fmaxf(acc2[m][j][0], 0.0f), fmaxf(acc2[m][j][2], 0.0f),
                                    fmaxf(acc2[m][j][1], 0.0f), fmaxf(acc2[m][j][3], 0.0f)};
                split4(v, a_big, a_small);
                mma_3xtf32(out[m], a_big, a_small, b);
            }
        }

        // Lane (g, q) holds outputs 2q, 2q + 1 of columns g and g + 8: only q < 2 are real.
        if (q < OUT / 2) {
            store_output_fragments(y, out, col0, g, q, n);
        }
    }
}
