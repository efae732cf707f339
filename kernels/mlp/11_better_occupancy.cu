// MLP step 11 - a quarter row per thread, at most 64 registers, for a higher occupancy.
//
// Steps 06-10 hold half a row of W1 and W2 per thread and need about 70 registers (or more),
// which limits an SM to a few blocks of 256 threads. Here four threads share each hidden unit:
// quarter r of unit u holds W1[u][18r .. 18r+17] (9 __half2, the last one zero-padded) and
// W2[u][16r .. 16r+15] (8 __half2); two __shfl_xor_sync steps (1, 2) add the four parts.
// In the last layer four threads share each output of a column (16 weights each, 8 __half2),
// 16 columns at a time. __launch_bounds__(256, MIN_BLOCKS) asks ptxas for at most
// 65536 / (256 * MIN_BLOCKS) registers per thread (64 for MIN_BLOCKS = 4).
//
// The block (64 units x 4 quarters) computes every unit of its 32 columns, so each group of 4
// threads walks all 32 columns, the 8 groups of a warp in a circular order: group g takes
// column (g + j) mod 32 in sub-step j. Column strides: x 36 words (quarter r at word 9r),
// h 33 words (quarter r at word 8r): the 32 lanes hit 32 different banks in both.
//
// Packed weights (kernelbook.mlp.impls): w1q[i][t], w2q[i][t] with t = 4u + r, and
// w3q[i][s] with s = 4o + r, each a __half2.
//
// Launch: block = 256 threads, grid chosen by the host.
#include <cuda_fp16.h>

#ifndef MIN_BLOCKS
#define MIN_BLOCKS 4
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS 256
#define TILE_COLUMNS 32
#define Q_IN 18               // halves of W1 per thread (4 x 18 = 72, one of them padding)
#define Q_HIDDEN 16
#define BO_X_STRIDE_H 72      // 36 words
#define BO_H_STRIDE_H 66      // 33 words

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
betterOccupancyKernel(const float *__restrict__ x,
                      const __half2 *__restrict__ w1q, const float *__restrict__ b1,
                      const __half2 *__restrict__ w2q, const float *__restrict__ b2,
                      const __half2 *__restrict__ w3q, const float *__restrict__ b3,
                      float *__restrict__ y, int n)
{
    __shared__ __align__(16) __half xs[TILE_COLUMNS * BO_X_STRIDE_H];
    __shared__ __align__(16) __half h1s[TILE_COLUMNS * BO_H_STRIDE_H];
    __shared__ __align__(16) __half h2s[TILE_COLUMNS * BO_H_STRIDE_H];

    const int t = threadIdx.x;
    const int unit = t / 4, r = t % 4;
    const int group = (t % 32) / 4;
    const int slot = t / 16;              // last layer: column slot 0..15
    const int o = (t % 16) / 4;           // last layer: output

    __half2 w1[Q_IN / 2], w2[Q_HIDDEN / 2], w3[Q_HIDDEN / 2];
#pragma unroll
    for (int i = 0; i < Q_IN / 2; ++i) w1[i] = w1q[i * THREADS + t];
#pragma unroll
    for (int i = 0; i < Q_HIDDEN / 2; ++i) w2[i] = w2q[i * THREADS + t];
#pragma unroll
    for (int i = 0; i < Q_HIDDEN / 2; ++i) w3[i] = w3q[i * 16 + t % 16];
    const float bias1 = b1[unit], bias2 = b2[unit], bias3 = b3[o];

    const int tiles = (n + TILE_COLUMNS - 1) / TILE_COLUMNS;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int col0 = tile * TILE_COLUMNS;
        __syncthreads();
        for (int i = t; i < BO_X_STRIDE_H * TILE_COLUMNS; i += THREADS) {
            const int k = i / TILE_COLUMNS, cc = i % TILE_COLUMNS;
            const float v = (k < IN && col0 + cc < n) ? x[(size_t)k * n + col0 + cc] : 0.0f;
            xs[cc * BO_X_STRIDE_H + k] = __float2half_rn(v);
        }
        __syncthreads();

        for (int j = 0; j < TILE_COLUMNS; ++j) {
            const int c = (group + j) % TILE_COLUMNS;
            const __half2 *xv = reinterpret_cast<const __half2 *>(&xs[c * BO_X_STRIDE_H + r * Q_IN]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < Q_IN / 2; ++i) acc2 = __hfma2(w1[i], xv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (r == 0) h1s[c * BO_H_STRIDE_H + unit] = __float2half_rn(fmaxf(acc + bias1, 0.0f));
        }
        __syncthreads();

        for (int j = 0; j < TILE_COLUMNS; ++j) {
            const int c = (group + j) % TILE_COLUMNS;
            const __half2 *hv = reinterpret_cast<const __half2 *>(&h1s[c * BO_H_STRIDE_H + r * Q_HIDDEN]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < Q_HIDDEN / 2; ++i) acc2 = __hfma2(w2[i], hv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (r == 0) h2s[c * BO_H_STRIDE_H + unit] = __float2half_rn(fmaxf(acc + bias2, 0.0f));
        }
        __syncthreads();

        for (int pass = 0; pass < TILE_COLUMNS / 16; ++pass) {
            const int c = slot + 16 * pass;
            const __half2 *hv = reinterpret_cast<const __half2 *>(&h2s[c * BO_H_STRIDE_H + r * Q_HIDDEN]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < Q_HIDDEN / 2; ++i) acc2 = __hfma2(w3[i], hv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (r == 0 && col0 + c < n) y[(size_t)o * n + col0 + c] = acc + bias3;
        }
    }
}
