// inputsLoadHidingKernel: the producer/consumer half-precision kernel, MLP step 10
// (10_inputs_load_hiding.cu explains it). Step 12 compiles it with its neighbours into one module; their shared
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
#define X_STRIDE_H 76
#define X_SECOND_H 38
#define LH_H_STRIDE_H 66     // 33 words per column of h1s/h2s, halves back to back

extern "C" __global__ void __launch_bounds__(THREADS)
inputsLoadHidingKernel(const float *__restrict__ x,
                       const __half2 *__restrict__ w1p, const float *__restrict__ b1,
                       const __half2 *__restrict__ w2p, const float *__restrict__ b2,
                       const __half2 *__restrict__ w3p, const float *__restrict__ b3,
                       float *__restrict__ y, int n)
{
    __shared__ __align__(16) __half xs[2][TILE_COLUMNS * X_STRIDE_H];
    __shared__ __align__(16) __half h1s[TILE_COLUMNS * LH_H_STRIDE_H];
    __shared__ __align__(16) __half h2s[TILE_COLUMNS * LH_H_STRIDE_H];
    __shared__ __half2 w3s[OUT * 32];

    const int t = threadIdx.x;
    const int warp = t / 32, lane = t % 32;
    const int side = t / 128;
    const int unit = (t % 128) / 2;
    const int half = t % 2;
    const int pair = lane / 2;
    const int q = t % 128;

    __half2 w1[HALF_IN / 2], w2[HALF_HIDDEN / 2];
#pragma unroll
    for (int i = 0; i < HALF_IN / 2; ++i) w1[i] = w1p[i * 128 + q];
#pragma unroll
    for (int i = 0; i < HALF_HIDDEN / 2; ++i) w2[i] = w2p[i * 128 + q];
    if (t < OUT * 32) w3s[t] = w3p[t];
    const float bias1 = b1[unit], bias2 = b2[unit];
    const float bias3 = b3[warp % OUT];

    const int tiles = (n + TILE_COLUMNS - 1) / TILE_COLUMNS;
    int tile = blockIdx.x;
    if (tile >= tiles) return;  // the whole block leaves together: no barrier is skipped

    // Loads one tile of x into buffer `buf`, `count` threads starting at `first`.
    auto load = [&](int buf, int which, int first, int count) {
        const int col0 = which * TILE_COLUMNS;
        for (int i = t - first; i < 2 * HALF_IN * TILE_COLUMNS; i += count) {
            const int k = i / TILE_COLUMNS, cc = i % TILE_COLUMNS;
            const float v = (k < IN && col0 + cc < n) ? x[(size_t)k * n + col0 + cc] : 0.0f;
            xs[buf][cc * X_STRIDE_H + (k < HALF_IN ? k : X_SECOND_H + k - HALF_IN)] = __float2half_rn(v);
        }
    };
    load(0, tile, 0, THREADS);

    int buf = 0;
    for (; tile < tiles; tile += gridDim.x, buf ^= 1) {
        const int col0 = tile * TILE_COLUMNS;
        __syncthreads();  // x of this tile is in xs[buf]; last tile's consumers are done

        for (int j = 0; j < 16; ++j) {
            const int c = side * 16 + (pair + j) % 16;
            const __half2 *xv = reinterpret_cast<const __half2 *>(&xs[buf][c * X_STRIDE_H + half * X_SECOND_H]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < HALF_IN / 2; ++i) acc2 = __hfma2(w1[i], xv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            if (half == 0) h1s[c * LH_H_STRIDE_H + unit] = __float2half_rn(fmaxf(acc + bias1, 0.0f));
        }
        __syncthreads();

        for (int j = 0; j < 16; ++j) {
            const int c = side * 16 + (pair + j) % 16;
            const __half2 *hv = reinterpret_cast<const __half2 *>(&h1s[c * LH_H_STRIDE_H + half * HALF_HIDDEN]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < HALF_HIDDEN / 2; ++i) acc2 = __hfma2(w2[i], hv[i], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            if (half == 0) h2s[c * LH_H_STRIDE_H + unit] = __float2half_rn(fmaxf(acc + bias2, 0.0f));
        }
        __syncthreads();

        if (warp < OUT) {
            // Consumer: output `warp` of column `lane`.
            const __half2 *hv = reinterpret_cast<const __half2 *>(&h2s[lane * LH_H_STRIDE_H]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int i = 0; i < HIDDEN / 2; ++i) acc2 = __hfma2(w3s[warp * 32 + i], hv[i], acc2);
            if (col0 + lane < n) y[(size_t)warp * n + col0 + lane] = __low2float(acc2) + __high2float(acc2) + bias3;
        } else if (tile + gridDim.x < tiles) {
            load(buf ^ 1, tile + gridDim.x, OUT * 32, THREADS - OUT * 32);  // producer
        }
    }
}
