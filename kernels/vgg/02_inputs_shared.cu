// Step 02 — step 01 plus the input tile in shared memory.
//
// A block's TILE×TILE pooled outputs need a (2·TILE + K − 1)² window of each input channel
// (36×36 floats ≈ 5 KB for TILE=16, K=5). Each input value is read by up to 4·K² threads; here
// the block loads the window of one channel into shared memory (one global read per value),
// synchronises, and every thread's K²·4 reads of that channel come from shared memory.
// The weights stay in shared memory as in step 01, so the block needs C·K² + window floats:
// ~30 KB at C=256, which is what limits how many blocks fit on an SM.
// Dynamic shared memory: (C*K*K + (2*TILE+K-1)^2) floats.

#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_pool_inputs_shared(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ bias, int B, int C, int H, int W, int M, int K)
{
    extern __shared__ float smem[];
    const int SPAN = 2 * TILE + K - 1;  // input rows/columns a block's window covers
    float* ws = smem;                   // C*K*K weights of channel m
    float* xs = smem + C * K * K;       // SPAN*SPAN inputs of one channel

    const int Hp = H / 2, Wp = W / 2;
    const int pw = blockIdx.x * TILE + threadIdx.x;
    const int ph = blockIdx.y * TILE + threadIdx.y;
    const int m = blockIdx.z % M;
    const int n = blockIdx.z / M;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int pad = K / 2;
    const int row0 = 2 * blockIdx.y * TILE - pad, col0 = 2 * blockIdx.x * TILE - pad;  // window origin

    const float* wm = w + (size_t)m * C * K * K;
    for (int i = tid; i < C * K * K; i += TILE * TILE) ws[i] = wm[i];

    const float* xn = x + (size_t)n * C * H * W;
    const int ly = 2 * threadIdx.y, lx = 2 * threadIdx.x;  // this thread's window inside the tile
    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    for (int c = 0; c < C; ++c) {
        const float* plane = xn + (size_t)c * H * W;
        // Consecutive threads load consecutive columns: coalesced rows; padding becomes zeros.
        for (int i = tid; i < SPAN * SPAN; i += TILE * TILE) {
            const int r = row0 + i / SPAN, q = col0 + i % SPAN;
            xs[i] = (r >= 0 && r < H && q >= 0 && q < W) ? plane[r * W + q] : 0.0f;
        }
        __syncthreads();  // the window (and, the first time, the weights) are complete
        const float* wc = ws + c * K * K;
        for (int kh = 0; kh < K; ++kh) {
            const float* r0 = xs + (ly + kh) * SPAN + lx;
            const float* r1 = r0 + SPAN;
            for (int kw = 0; kw < K; ++kw) {
                const float wv = wc[kh * K + kw];
                a00 += wv * r0[kw];
                a01 += wv * r0[kw + 1];
                a10 += wv * r1[kw];
                a11 += wv * r1[kw + 1];
            }
        }
        __syncthreads();  // nobody may overwrite the window while a slower warp still reads it
    }
    if (ph >= Hp || pw >= Wp) return;
    const float bm = bias[m];
    const float v = fmaxf(fmaxf(fmaxf(a00 + bm, 0.f), fmaxf(a01 + bm, 0.f)),
                          fmaxf(fmaxf(a10 + bm, 0.f), fmaxf(a11 + bm, 0.f)));
    y[((size_t)(n * M + m) * Hp + ph) * Wp + pw] = v;
}
