// betterOccupancyKernel: the quarter-row, 64-register half-precision kernel, MLP step 11
// (11_better_occupancy.cu explains it). Step 12 compiles it with its neighbours into one module; their shared
// constants are defined with the same values, which C allows.
#pragma once

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
