// Step 01 — the baseline plus the block's weights in shared memory.
//
// Every thread of a block works for the same output channel m, so all TILE×TILE threads read the
// same C·K·K weights. Here the block copies them once into shared memory (C·K·K floats: 25.6 KB
// for C=256, K=5) and the inner loop reads them from there: global weight reads drop from one per
// thread per FMA group to one per block, at the price of the shared-memory footprint (fewer
// blocks per SM) and of a read that was already a cache-friendly broadcast.
// Dynamic shared memory: C*K*K floats, set by the launch.

#ifndef TILE
#define TILE 16
#endif

__device__ __forceinline__ float pixel(const float* __restrict__ plane, int r, int c, int H, int W)
{
    return (r >= 0 && r < H && c >= 0 && c < W) ? plane[r * W + c] : 0.0f;
}

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_pool_weights_shared(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ bias, int B, int C, int H, int W, int M, int K)
{
    extern __shared__ float ws[];  // w[m, :, :, :]
    const int Hp = H / 2, Wp = W / 2;
    const int pw = blockIdx.x * TILE + threadIdx.x;
    const int ph = blockIdx.y * TILE + threadIdx.y;
    const int m = blockIdx.z % M;
    const int n = blockIdx.z / M;
    const int tid = threadIdx.y * TILE + threadIdx.x;

    // Every thread helps load, including those whose output lies outside the image: returning
    // early would leave them out of the __syncthreads below.
    const float* wm = w + (size_t)m * C * K * K;
    for (int i = tid; i < C * K * K; i += TILE * TILE) ws[i] = wm[i];
    __syncthreads();
    if (ph >= Hp || pw >= Wp) return;

    const int pad = K / 2;
    const int oh = 2 * ph - pad, ow = 2 * pw - pad;
    const float* xn = x + (size_t)n * C * H * W;
    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    for (int c = 0; c < C; ++c) {
        const float* plane = xn + (size_t)c * H * W;
        for (int kh = 0; kh < K; ++kh) {
            for (int kw = 0; kw < K; ++kw) {
                const float wv = ws[(c * K + kh) * K + kw];
                a00 += wv * pixel(plane, oh + kh, ow + kw, H, W);
                a01 += wv * pixel(plane, oh + kh, ow + kw + 1, H, W);
                a10 += wv * pixel(plane, oh + kh + 1, ow + kw, H, W);
                a11 += wv * pixel(plane, oh + kh + 1, ow + kw + 1, H, W);
            }
        }
    }
    const float bm = bias[m];
    const float v = fmaxf(fmaxf(fmaxf(a00 + bm, 0.f), fmaxf(a01 + bm, 0.f)),
                          fmaxf(fmaxf(a10 + bm, 0.f), fmaxf(a11 + bm, 0.f)));
    y[((size_t)(n * M + m) * Hp + ph) * Wp + pw] = v;
}
