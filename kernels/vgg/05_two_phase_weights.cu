// Step 05 — weights back in shared memory, but loaded in PHASES parts (two by default).
//
// Step 02 kept all C·K² weights of a block's channel in shared memory (~25 KB at C=256, K=5),
// which cut the blocks per SM. Here the channels are split into PHASES groups of
// ceil(C/PHASES); at the start of each group the block loads only that group's weights
// (12.8 KB for 128 channels), then walks the group's channels with the input window in shared
// memory as in step 02. Shared memory per block: ceil(C/PHASES)·K² + (2·TILE+K−1)² floats,
// ~18 KB by default, so more blocks (and warps) fit per SM while weights are still read from
// shared memory instead of global memory.

#ifndef TILE
#define TILE 16
#endif
#ifndef KSIZE
#define KSIZE 5
#endif
#ifndef PHASES
#define PHASES 2
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_pool_two_phase_weights(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                            const float* __restrict__ bias, int B, int C, int H, int W, int M)
{
    constexpr int K = KSIZE;
    constexpr int SPAN = 2 * TILE + K - 1;
    extern __shared__ float smem[];
    const int group = (C + PHASES - 1) / PHASES;  // channels whose weights are resident at once
    float* ws = smem;                            // group*K*K weights
    float* xs = smem + group * K * K;            // SPAN*SPAN window of one channel

    const int Hp = H / 2, Wp = W / 2;
    const int pw = blockIdx.x * TILE + threadIdx.x;
    const int ph = blockIdx.y * TILE + threadIdx.y;
    const int m = blockIdx.z % M;
    const int n = blockIdx.z / M;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int row0 = 2 * blockIdx.y * TILE - K / 2, col0 = 2 * blockIdx.x * TILE - K / 2;
    const float* xn = x + (size_t)n * C * H * W;
    const float* wm = w + (size_t)m * C * K * K;

    const int ly = 2 * threadIdx.y, lx = 2 * threadIdx.x;
    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    for (int c_first = 0; c_first < C; c_first += group) {
        const int c_last = min(C, c_first + group);
        // The previous phase's last __syncthreads guarantees nobody still reads ws.
        for (int i = tid; i < (c_last - c_first) * K * K; i += TILE * TILE) ws[i] = wm[c_first * K * K + i];
        for (int c = c_first; c < c_last; ++c) {
            const float* plane = xn + (size_t)c * H * W;
            for (int i = tid; i < SPAN * SPAN; i += TILE * TILE) {
                const int r = row0 + i / SPAN, q = col0 + i % SPAN;
                xs[i] = (r >= 0 && r < H && q >= 0 && q < W) ? plane[r * W + q] : 0.0f;
            }
            __syncthreads();
            const float* wc = ws + (c - c_first) * K * K;
#pragma unroll
            for (int kh = 0; kh < K; ++kh) {
                const float* r0 = xs + (ly + kh) * SPAN + lx;
                const float* r1 = r0 + SPAN;
#pragma unroll
                for (int kw = 0; kw < K; ++kw) {
                    const float wv = wc[kh * K + kw];
                    a00 += wv * r0[kw];
                    a01 += wv * r0[kw + 1];
                    a10 += wv * r1[kw];
                    a11 += wv * r1[kw + 1];
                }
            }
            __syncthreads();
        }
    }
    if (ph >= Hp || pw >= Wp) return;
    const float bm = bias[m];
    const float v = fmaxf(fmaxf(fmaxf(a00 + bm, 0.f), fmaxf(a01 + bm, 0.f)),
                          fmaxf(fmaxf(a10 + bm, 0.f), fmaxf(a11 + bm, 0.f)));
    y[((size_t)(n * M + m) * Hp + ph) * Wp + pw] = v;
}
