// Step 03 — step 02 with each channel's K×K weights held in registers.
//
// In step 02 the innermost loop reads a weight from shared memory for every four FMAs. Here,
// once a channel's input window is in shared memory, every thread copies that channel's K²
// weights from shared memory into a register array and the inner loop reads only registers
// (and the window). K becomes a compile-time constant (KSIZE) so that the array is registers
// and the loops unroll. The full weight slice stays in shared memory as in step 02, so the
// shared-memory footprint (and the occupancy it allows) is unchanged.
// Dynamic shared memory: (C*KSIZE*KSIZE + (2*TILE+KSIZE-1)^2) floats.

#ifndef TILE
#define TILE 16
#endif
#ifndef KSIZE
#define KSIZE 5
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_pool_weights_registers(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                            const float* __restrict__ bias, int B, int C, int H, int W, int M)
{
    constexpr int K = KSIZE;
    constexpr int SPAN = 2 * TILE + K - 1;
    extern __shared__ float smem[];
    float* ws = smem;
    float* xs = smem + C * K * K;

    const int Hp = H / 2, Wp = W / 2;
    const int pw = blockIdx.x * TILE + threadIdx.x;
    const int ph = blockIdx.y * TILE + threadIdx.y;
    const int m = blockIdx.z % M;
    const int n = blockIdx.z / M;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int row0 = 2 * blockIdx.y * TILE - K / 2, col0 = 2 * blockIdx.x * TILE - K / 2;

    const float* wm = w + (size_t)m * C * K * K;
    for (int i = tid; i < C * K * K; i += TILE * TILE) ws[i] = wm[i];

    const float* xn = x + (size_t)n * C * H * W;
    const int ly = 2 * threadIdx.y, lx = 2 * threadIdx.x;
    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    for (int c = 0; c < C; ++c) {
        const float* plane = xn + (size_t)c * H * W;
        for (int i = tid; i < SPAN * SPAN; i += TILE * TILE) {
            const int r = row0 + i / SPAN, q = col0 + i % SPAN;
            xs[i] = (r >= 0 && r < H && q >= 0 && q < W) ? plane[r * W + q] : 0.0f;
        }
        __syncthreads();
        float wr[K * K];  // this channel's weights, in registers for the whole channel
#pragma unroll
        for (int i = 0; i < K * K; ++i) wr[i] = ws[c * K * K + i];
#pragma unroll
        for (int kh = 0; kh < K; ++kh) {
            const float* r0 = xs + (ly + kh) * SPAN + lx;
            const float* r1 = r0 + SPAN;
#pragma unroll
            for (int kw = 0; kw < K; ++kw) {
                const float wv = wr[kh * K + kw];
                a00 += wv * r0[kw];
                a01 += wv * r0[kw + 1];
                a10 += wv * r1[kw];
                a11 += wv * r1[kw + 1];
            }
        }
        __syncthreads();
    }
    if (ph >= Hp || pw >= Wp) return;
    const float bm = bias[m];
    const float v = fmaxf(fmaxf(fmaxf(a00 + bm, 0.f), fmaxf(a01 + bm, 0.f)),
                          fmaxf(fmaxf(a10 + bm, 0.f), fmaxf(a11 + bm, 0.f)));
    y[((size_t)(n * M + m) * Hp + ph) * Wp + pw] = v;
}
