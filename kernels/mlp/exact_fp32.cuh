// The MLP in plain FP32 on the CUDA cores for two columns at a time, by one warp: the exact path of
// the steps whose fast path cannot hold every value (step 15 for values outside half's range, step
// 19 for the column pairs its scaling cannot hold). Needs IN, HIDDEN (64) and OUT defined.
//
// Columns c0 and c1 (c0 < n; c1 is skipped when it is not below n): lane l computes hidden units
// l and l + 32 of both columns; layer 2 gets each layer-1 value by shuffle; layer 3's 8 sums are
// reduced over the warp. About 1,200 instructions: a warp pays this per flagged pair of columns,
// not a recomputation of its whole tile. The weights come transposed (``raw``: W1^T, b1, W2^T, b2,
// W3, b3; kernelbook/mlp/pack.py:exact_fp32) so that the 32 lanes read 128 consecutive bytes.
#pragma once

static __device__ __forceinline__ void exact_columns(const float *__restrict__ x, const float *__restrict__ raw,
                                                     float *__restrict__ y, int n, int c0, int c1, int lane)
{
    const float *W1T = raw, *b1 = W1T + IN * HIDDEN, *W2T = b1 + HIDDEN, *b2 = W2T + HIDDEN * HIDDEN;
    const float *W3 = b2 + HIDDEN, *b3 = W3 + OUT * HIDDEN;
    const bool has1 = c1 < n;
    float h[2][2];   // [unit lane, lane + 32][column c0, c1]
#pragma unroll
    for (int a = 0; a < 2; ++a) h[a][0] = h[a][1] = __ldg(b1 + lane + 32 * a);
#pragma unroll 4
    for (int k = 0; k < IN; ++k) {
        const float v0 = __ldg(x + (size_t)k * n + c0), v1 = has1 ? __ldg(x + (size_t)k * n + c1) : 0.0f;
#pragma unroll
        for (int a = 0; a < 2; ++a) {
            const float w = __ldg(W1T + k * HIDDEN + lane + 32 * a);
            h[a][0] = fmaf(w, v0, h[a][0]);
            h[a][1] = fmaf(w, v1, h[a][1]);
        }
    }
    float z[2][2];
#pragma unroll
    for (int a = 0; a < 2; ++a) {
        h[a][0] = fmaxf(h[a][0], 0.0f);
        h[a][1] = fmaxf(h[a][1], 0.0f);
        z[a][0] = z[a][1] = __ldg(b2 + lane + 32 * a);
    }
#pragma unroll
    for (int src = 0; src < 2; ++src)   // layer-1 units 32 src .. 32 src + 31
#pragma unroll 8
        for (int kk = 0; kk < 32; ++kk) {
            const int k = 32 * src + kk;
            const float hk0 = __shfl_sync(0xffffffffu, h[src][0], kk), hk1 = __shfl_sync(0xffffffffu, h[src][1], kk);
#pragma unroll
            for (int a = 0; a < 2; ++a) {
                const float w = __ldg(W2T + k * HIDDEN + lane + 32 * a);
                z[a][0] = fmaf(w, hk0, z[a][0]);
                z[a][1] = fmaf(w, hk1, z[a][1]);
            }
        }
    float p[OUT][2];
#pragma unroll
    for (int o = 0; o < OUT; ++o)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float t = __ldg(W3 + o * HIDDEN + lane) * fmaxf(z[0][c], 0.0f);
            t = fmaf(__ldg(W3 + o * HIDDEN + lane + 32), fmaxf(z[1][c], 0.0f), t);
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) t += __shfl_xor_sync(0xffffffffu, t, m);
            p[o][c] = t;
        }
    if (lane == 0) {
#pragma unroll
        for (int o = 0; o < OUT; ++o) {
            y[(size_t)o * n + c0] = p[o][0] + __ldg(b3 + o);
            if (has1) y[(size_t)o * n + c1] = p[o][1] + __ldg(b3 + o);
        }
    }
}
