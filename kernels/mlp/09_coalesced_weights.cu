// MLP step 09 - the weights are read with coalesced loads.
//
// In step 08 thread (unit, half) loaded its registers from row `unit` of W1: consecutive lanes
// read addresses 36 or 71 floats apart, one 32-byte sector per lane per load. The host now packs
// the weights once, in the order the threads consume them (kernelbook.mlp.impls packs them):
//   w1p[i][q] = (W1[q/2][36*(q%2) + 2i], W1[q/2][36*(q%2) + 2i + 1])   i < 18, q < 128
//   w2p[i][q] = (W2[q/2][32*(q%2) + 2i], W2[q/2][32*(q%2) + 2i + 1])   i < 16
//   w3p[o][l] = (W3[o][2l], W3[o][2l + 1])                             o < 4,  l < 32
// each entry a __half2, so load i of the 32 lanes of a warp is one 128-byte transaction.
// Everything else is step 08.
//
// Launch: block = 256 threads, grid chosen by the host.
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
