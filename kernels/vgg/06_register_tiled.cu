// Step 06 — register tiling on CUDA cores (FP32 FMA), many outputs and channels per block.
//
// Steps 00-05 give each thread 4 outputs of one channel, so every input value read from shared
// memory feeds about one FMA. Here a block computes BM = 64 output channels × a 16×16 tile of
// pre-pool outputs and each thread 8 channels × a 2×4 patch = 64 accumulators: per input channel
// and kernel row a thread reads 2 rows of 4+K−1 inputs and 8·K weights from shared memory and
// issues 64·K FMAs (ratio ~5 FMA per shared-memory load, 128-bit loads).
// The reduction is streamed through shared memory in stages of 8 channels × one kernel row
// (conv_tiles.cuh), STAGES deep with cp.async, so loads overlap the FMAs.
// Warp = one group of 8 channels (weights are broadcasts); lane = one 2×4 patch; the 2×4 patch
// holds two whole pooling windows, so bias, ReLU and the pool happen in registers.

#include "conv_tiles.cuh"

#ifndef BM
#define BM 64
#endif
#ifndef TH
#define TH 16
#endif
#ifndef TW
#define TW 16
#endif
#ifndef KSIZE
#define KSIZE 5
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2
#endif

namespace {
constexpr int K = KSIZE;
constexpr int TM = 8;                          // channels per thread
constexpr int PGX = TW / 4, PGY = TH / 2;      // 2×4 patches per tile row / column
constexpr int PG = PGX * PGY;                  // patches per tile
constexpr int THREADS = (BM / TM) * PG;
constexpr int XN = (4 + K - 1 + 3) / 4 * 4;    // inputs a patch row needs, rounded to float4
using Tile = vgg::ConvTile<BM, TH, TW, K, THREADS>;
static_assert(TW % 4 == 0, "TW must be a multiple of 4");
static_assert(THREADS <= 1024, "BM/8 * (TH/2) * (TW/4) threads must fit in a block");
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv_pool_register_tiled(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ bias, int B, int C, int H, int W, int M)
{
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x;
    int n, oh0, ow0;
    vgg::tile_origin<TH, TW>(H, W, n, oh0, ow0);
    const int m0 = blockIdx.y * BM;
    const float* xn = x + (size_t)n * C * H * W;

    const int pg = tid % PG, mg = tid / PG;
    const int prow = 2 * (pg / PGX), pcol = 4 * (pg % PGX);  // patch origin inside the tile

    float acc[TM][2][4];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][r][j] = 0.f;

    const int n_stages = Tile::stages_for(C);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_stages) Tile::load(smem + s * Tile::STAGE_FLOATS, xn, w, s, m0, oh0, ow0, C, H, W, M, tid);
        vgg::cp_async_commit();
    }
    for (int it = 0; it < n_stages; ++it) {
        vgg::cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage `it` has landed for everyone, and stage it-1 is no longer read
        const int next = it + STAGES - 1;
        if (next < n_stages) Tile::load(smem + (next % STAGES) * Tile::STAGE_FLOATS, xn, w, next, m0, oh0, ow0, C, H, W, M, tid);
        vgg::cp_async_commit();

        const float* ws = smem + (it % STAGES) * Tile::STAGE_FLOATS;
        const float* ps = ws + Tile::W_FLOATS;
#pragma unroll 2
        for (int c = 0; c < Tile::CC; ++c) {
            float xr[2][XN];
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int j = 0; j < XN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(ps + c * Tile::CS + (prow + r) * Tile::PWP + pcol + j);
                    xr[r][j] = v.x; xr[r][j + 1] = v.y; xr[r][j + 2] = v.z; xr[r][j + 3] = v.w;
                }
#pragma unroll
            for (int kw = 0; kw < K; ++kw) {
                const float* wp = ws + (kw * Tile::CC + c) * Tile::MS + mg * TM;
                const float4 wa = *reinterpret_cast<const float4*>(wp);
                const float4 wb = *reinterpret_cast<const float4*>(wp + 4);
                const float wv[TM] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][r][j] = fmaf(wv[i], xr[r][j + kw], acc[i][r][j]);
            }
        }
    }
    vgg::cp_async_wait<0>();

    // Pool in registers: the patch holds windows (cols 0-1) and (cols 2-3) of rows prow, prow+1.
    const int Hp = H / 2, Wp = W / 2;
    const int ph = (oh0 + prow) / 2, pw = (ow0 + pcol) / 2;
    if (ph >= Hp) return;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + mg * TM + i;
        if (m >= M) continue;
        const float bm = bias[m];
        float* yrow = y + ((size_t)(n * M + m) * Hp + ph) * Wp;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            if (pw + j >= Wp) continue;
            const float v = vgg::max4(acc[i][0][2 * j], acc[i][0][2 * j + 1], acc[i][1][2 * j], acc[i][1][2 * j + 1]);
            yrow[pw + j] = fmaxf(v + bm, 0.f);  // max(relu(a + b)) = relu(max(a) + b)
        }
    }
}
