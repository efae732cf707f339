// Step 00 — baseline: one thread per pooled output, everything read from global memory.
//
// The layer: y = maxpool2x2(relu(conv_same(x, w) + b)), x (B,C,H,W), w (M,C,K,K), y (B,M,H/2,W/2).
// Grid (ceil(Wp/TILE), ceil(Hp/TILE), B*M): a block covers a TILE×TILE patch of pooled outputs of
// one output channel (224×224 input: 112/16 = 7 blocks each way, 256 channels in z).
// Each thread accumulates the four pre-pool outputs of its 2×2 window over all C input channels,
// so the pool needs no communication between threads: bias, ReLU, max, one store.

#ifndef TILE
#define TILE 16
#endif

// The zero padding of a 'same' convolution: reads outside the image count as 0.
__device__ __forceinline__ float pixel(const float* __restrict__ plane, int r, int c, int H, int W)
{
    return (r >= 0 && r < H && c >= 0 && c < W) ? plane[r * W + c] : 0.0f;
}

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_pool_baseline(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                   const float* __restrict__ bias, int B, int C, int H, int W, int M, int K)
{
    const int Hp = H / 2, Wp = W / 2;  // floor: an odd last row/column is in no window
    const int pw = blockIdx.x * TILE + threadIdx.x;
    const int ph = blockIdx.y * TILE + threadIdx.y;
    const int m = blockIdx.z % M;
    const int n = blockIdx.z / M;
    if (ph >= Hp || pw >= Wp) return;

    const int pad = K / 2;
    const int oh = 2 * ph - pad, ow = 2 * pw - pad;  // top-left input of the window's first output
    const float* xn = x + (size_t)n * C * H * W;
    const float* wm = w + (size_t)m * C * K * K;

    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    for (int c = 0; c < C; ++c) {
        const float* plane = xn + (size_t)c * H * W;
        for (int kh = 0; kh < K; ++kh) {
            for (int kw = 0; kw < K; ++kw) {
                const float wv = wm[(c * K + kh) * K + kw];
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
