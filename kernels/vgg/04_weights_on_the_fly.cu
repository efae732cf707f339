// Step 04 — no weights in shared memory: each weight is read from global memory when it is used.
//
// All threads of a block read the same weight at the same time (one output channel per block),
// so the read is a single broadcast served by L1 after the first block touches it. Dropping the
// C·K² weight slice from shared memory leaves only the input window; it is double-buffered
// (two channels, 2 × 36² floats ≈ 10 KB for TILE=16, K=5) so that loading channel c+1 overlaps
// computing channel c and one __syncthreads per channel suffices. With ~10 KB per block instead
// of ~30 KB, shared memory no longer limits how many blocks an SM holds.
// Dynamic shared memory: 2*(2*TILE+KSIZE-1)^2 floats.

#ifndef TILE
#define TILE 16
#endif
#ifndef KSIZE
#define KSIZE 5
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_pool_weights_on_the_fly(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                             const float* __restrict__ bias, int B, int C, int H, int W, int M)
{
    constexpr int K = KSIZE;
    constexpr int SPAN = 2 * TILE + K - 1;
    extern __shared__ float xs[];  // two windows: channel c in one, channel c+1 loading in the other

    const int Hp = H / 2, Wp = W / 2;
    const int pw = blockIdx.x * TILE + threadIdx.x;
    const int ph = blockIdx.y * TILE + threadIdx.y;
    const int m = blockIdx.z % M;
    const int n = blockIdx.z / M;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int row0 = 2 * blockIdx.y * TILE - K / 2, col0 = 2 * blockIdx.x * TILE - K / 2;
    const float* xn = x + (size_t)n * C * H * W;
    const float* wm = w + (size_t)m * C * K * K;

    auto load_window = [&](int c, float* dst) {
        const float* plane = xn + (size_t)c * H * W;
        for (int i = tid; i < SPAN * SPAN; i += TILE * TILE) {
            const int r = row0 + i / SPAN, q = col0 + i % SPAN;
            dst[i] = (r >= 0 && r < H && q >= 0 && q < W) ? plane[r * W + q] : 0.0f;
        }
    };

    const int ly = 2 * threadIdx.y, lx = 2 * threadIdx.x;
    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    load_window(0, xs);
    for (int c = 0; c < C; ++c) {
        __syncthreads();  // window c is complete, and nobody still reads the buffer reloaded next
        float* cur = xs + (c & 1) * SPAN * SPAN;
        if (c + 1 < C) load_window(c + 1, xs + ((c + 1) & 1) * SPAN * SPAN);
        const float* wc = wm + c * K * K;
#pragma unroll
        for (int kh = 0; kh < K; ++kh) {
            const float* r0 = cur + (ly + kh) * SPAN + lx;
            const float* r1 = r0 + SPAN;
#pragma unroll
            for (int kw = 0; kw < K; ++kw) {
                const float wv = __ldg(wc + kh * K + kw);  // same address in every thread: a broadcast
                a00 += wv * r0[kw];
                a01 += wv * r0[kw + 1];
                a10 += wv * r1[kw];
                a11 += wv * r1[kw + 1];
            }
        }
    }
    if (ph >= Hp || pw >= Wp) return;
    const float bm = bias[m];
    const float v = fmaxf(fmaxf(fmaxf(a00 + bm, 0.f), fmaxf(a01 + bm, 0.f)),
                          fmaxf(fmaxf(a10 + bm, 0.f), fmaxf(a11 + bm, 0.f)));
    y[((size_t)(n * M + m) * Hp + ph) * Wp + pw] = v;
}
