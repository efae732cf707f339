// coalescedWeightsReadsKernel: the half-precision kernel with coalesced weight loads, MLP step 09
// (09_coalesced_weights.cu explains it). Step 12 compiles it with its neighbours into one module; their shared
// constants are defined with the same values, which C allows.
#pragma once

#include <cuda_fp16.h>

#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS 256
#define TILE_COLUMNS 32
#define HALF_IN 36
#define HALF_HIDDEN 32
#define X_STRIDE_H 76        // halves per column of xs (38 words)
#define X_SECOND_H 38        // where the second half of a column starts (word 19)
#define H_STRIDE_H 68        // halves per column of h1s/h2s (34 words)
#define H_SECOND_H 34        // word 17

extern "C" __global__ void __launch_bounds__(THREADS)
coalescedWeightsReadsKernel(const float *__restrict__ x,
                            const __half2 *__restrict__ w1p, const float *__restrict__ b1,
                            const __half2 *__restrict__ w2p, const float *__restrict__ b2,
                            const __half2 *__restrict__ w3p, const float *__restrict__ b3,
                           float *__restrict__ y, int n)
{
    __shared__ __align__(16) __half xs[TILE_COLUMNS * X_STRIDE_H];
    __shared__ __align__(16) __half h1s[TILE_COLUMNS * H_STRIDE_H];
    __shared__ __align__(16) __half h2s[TILE_COLUMNS * H_STRIDE_H];

    const int t = threadIdx.x;
    const int side = t / 128;              // which 16 columns of the tile
    const int unit = (t % 128) / 2;
    const int half = t % 2;
    const int pair = (t % 32) / 2;
    const int o = (t % 128) / 32;
    const int lane = t % 32;

    __half2 w1[HALF_IN / 2], w2[HALF_HIDDEN / 2];
    const int q = t % 128;
#pragma unroll
    for (int i = 0; i < HALF_IN / 2; ++i) w1[i] = w1p[i * 128 + q];
#pragma unroll
    for (int i = 0; i < HALF_HIDDEN / 2; ++i) w2[i] = w2p[i * 128 + q];
    const __half2 w3 = w3p[o * 32 + lane];
    const float bias1 = b1[unit], bias2 = b2[unit], bias3 = b3[o];
    const int h_write = (unit < HALF_HIDDEN) ? unit : H_SECOND_H + unit - HALF_HIDDEN;
    const int h_lane = (lane < 16) ? 2 * lane : H_SECOND_H + 2 * (lane - 16);

    const int tiles = (n + TILE_COLUMNS - 1) / TILE_COLUMNS;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int col0 = tile * TILE_COLUMNS;
        __syncthreads();
        for (int i = t; i < 2 * HALF_IN * TILE_COLUMNS; i += THREADS) {
            const int k = i / TILE_COLUMNS, cc = i % TILE_COLUMNS;
            const float v = (k < IN && col0 + cc < n) ? x[(size_t)k * n + col0 + cc] : 0.0f;
            xs[cc * X_STRIDE_H + (k < HALF_IN ? k : X_SECOND_H + k - HALF_IN)] = __float2half_rn(v);
        }
        __syncthreads();

        for (int j = 0; j < 16; ++j) {
            const int c = side * 16 + (pair + j) % 16;
            const __half2 *xv = reinterpret_cast<const __half2 *>(&xs[c * X_STRIDE_H + half * X_SECOND_H]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < HALF_IN / 2; ++i) acc2 = __hfma2(w1[i], xv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            if (half == 0) h1s[c * H_STRIDE_H + h_write] = __float2half_rn(fmaxf(acc + bias1, 0.0f));
        }
        __syncthreads();

        for (int j = 0; j < 16; ++j) {
            const int c = side * 16 + (pair + j) % 16;
            const __half2 *hv = reinterpret_cast<const __half2 *>(&h1s[c * H_STRIDE_H + half * H_SECOND_H]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < HALF_HIDDEN / 2; ++i) acc2 = __hfma2(w2[i], hv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            if (half == 0) h2s[c * H_STRIDE_H + h_write] = __float2half_rn(fmaxf(acc + bias2, 0.0f));
        }
        __syncthreads();

        for (int j = 0; j < 16; ++j) {
            const int c = side * 16 + j;
            const __half2 p = __hmul2(w3, *reinterpret_cast<const __half2 *>(&h2s[c * H_STRIDE_H + h_lane]));
            float acc = __low2float(p) + __high2float(p);
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
            if (lane == 0 && col0 + c < n) y[(size_t)o * n + col0 + c] = acc + bias3;
        }
    }
}
