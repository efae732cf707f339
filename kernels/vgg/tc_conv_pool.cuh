// The tensor-core implicit GEMM convolution with bias, ReLU and 2x2 max-pool in registers, and
// its two packers (tc_pack_weights, tc_pack_input): the kernels of VGG step 07
// (07_tf32_implicit_gemm.cu explains them). SPLIT3=1 turns each TF32 product into three
// (3xTF32, steps 08 and 10); KERNEL_NAME names the convolution's entry point.
#pragma once

#include "conv_tiles.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef TH
#define TH 8
#endif
#ifndef TW
#define TW 32
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef KSIZE
#define KSIZE 5
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef SPLIT3
#define SPLIT3 0
#endif
#ifndef KERNEL_NAME
#define KERNEL_NAME conv_pool_tf32
#endif

namespace {
constexpr int K = KSIZE;
constexpr int PLANES = SPLIT3 ? 2 : 1;  // big (and small) parts of every operand
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M;       // channels per warp
constexpr int MT = WM / 16;            // 16-row m-tiles per warp
constexpr int ROWS = TH / WARPS_N;     // tile rows per warp
constexpr int NH = TW / 8;             // 8-pixel n-tiles per tile row
constexpr int CC = 8;                  // channels per stage (the mma's k)
static_assert(BM % 16 == 0 && WM % 16 == 0, "BM / WARPS_M must be a multiple of 16");
static_assert(ROWS % 2 == 0 && TH % WARPS_N == 0, "each warp needs whole pairs of rows (pooling)");
static_assert(TW % 8 == 0, "TW must be a multiple of 8");

// Shared-memory stage, in floats (kernelbook/vgg/impls.py: tc_stage_floats mirrors this):
//   ws[plane][kw][BM/16][32][4]  the packed weights of (cg, kh), all kw
//   ps[plane][c][row][col]       8 channels × TH rows × PWP columns, channel pitch CS
// B-fragment reads touch ps[q][.][g + const] and ps[q + 4][.][...]: with CS ≡ 8 (mod 32) the
// 32 lanes (g = 0..7, q = 0..3) fall on 32 different banks.
constexpr int PW = TW + K - 1;                  // input columns a tile row needs
constexpr int PWQ = (PW + 3) / 4;               // ... in 16-byte pieces
constexpr int PWP = PWQ * 4;                    // row pitch
constexpr int CS = ((TH * PWP + 31) / 32) * 32 + 8;
constexpr int WS_FLOATS = K * BM * CC;          // one plane of weights
constexpr int PS_FLOATS = CC * CS;              // one plane of inputs
constexpr int STAGE_FLOATS = PLANES * (WS_FLOATS + PS_FLOATS);
constexpr int W_VECS = K * BM * CC / 4;         // 16-byte copies per plane per stage
constexpr int P_VECS = CC * TH * PWQ;

__device__ __forceinline__ float tf32_round(float v)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
}

__device__ __forceinline__ void cp_async16(float* dst, const float* src)
{
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint4& a, const unsigned (&b)[2])
{
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b[0]), "r"(b[1]));
}

// Issue (not wait for) the copies of reduction stage `it` = (channel group cg, kernel row kh).
__device__ __forceinline__ void load_stage(float* stage, const float* __restrict__ xpn, const float* __restrict__ wp,
                                           int it, int m0, int oh0, int ow0, int Mp, int Hpd, int Wpd,
                                           size_t xplane, size_t wplane, int tid)
{
    const int cg = it / K, kh = it % K;
    const float* wsrc = wp + ((size_t)(cg * K + kh) * K * Mp + m0) * CC;   // + kw·Mp·8 + piece·4
    const float* xsrc = xpn + ((size_t)cg * CC * Hpd + oh0 + kh) * Wpd + ow0;
    // Loops kept rolled: unrolled, the compiler hoists every copy's 64-bit address out of the
    // main loop and the registers they hold push the 3xTF32 kernel into spilling.
#pragma unroll 1
    for (int pl = 0; pl < PLANES; ++pl) {
        float* ws = stage + pl * (WS_FLOATS + PS_FLOATS);
        float* ps = ws + WS_FLOATS;
#pragma unroll 1
        for (int j = 0; j < (W_VECS + THREADS - 1) / THREADS; ++j) {
            const int i = tid + j * THREADS;
            if (W_VECS % THREADS == 0 || i < W_VECS) {
                const int kw = i / (BM * 2), piece = i % (BM * 2);
                cp_async16(ws + kw * BM * CC + piece * 4, wsrc + pl * wplane + (size_t)kw * Mp * CC + piece * 4);
            }
        }
#pragma unroll 1
        for (int j = 0; j < (P_VECS + THREADS - 1) / THREADS; ++j) {
            const int i = tid + j * THREADS;
            if (P_VECS % THREADS == 0 || i < P_VECS) {
                const int col = i % PWQ, row = (i / PWQ) % TH, c = i / (PWQ * TH);
                cp_async16(ps + c * CS + row * PWP + col * 4,
                           xsrc + pl * xplane + ((size_t)c * Hpd + row) * Wpd + col * 4);
            }
        }
    }
}
}  // namespace

// wp[plane][cg][kh][kw][mt][lane][e], e = 0..3 → (m, c) = (16mt + g + 8(e&1), 8cg + q + 4(e>>1)),
// g = lane / 4, q = lane % 4: the m16n8k8 A-fragment order. One thread per element.
extern "C" __global__ void tc_pack_weights(float* __restrict__ wp, const float* __restrict__ w, int C, int M, int Cp, int Mp)
{
    const long long total = (long long)Cp * K * K * Mp;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int e = (int)(idx % 4), lane = (int)((idx / 4) % 32);
    const int mt = (int)((idx / 128) % (Mp / 16));
    long long rest = idx / (8LL * Mp);
    const int kw = (int)(rest % K);
    rest /= K;
    const int kh = (int)(rest % K), cg = (int)(rest / K);
    const int m = mt * 16 + lane / 4 + 8 * (e & 1), c = cg * CC + lane % 4 + 4 * (e >> 1);
    const float v = (m < M && c < C) ? w[(((size_t)m * C + c) * K + kh) * K + kw] : 0.f;
    const float big = tf32_round(v);
    wp[idx] = big;
#if SPLIT3
    wp[total + idx] = tf32_round(v - big);
#endif
}

// xp[plane][n][c][r][q] = x[n][c][r − pad][q − pad] (zero outside the image and past C), TF32.
extern "C" __global__ void tc_pack_input(float* __restrict__ xp, const float* __restrict__ x, int B, int C, int H, int W,
                                         int Cp, int Hpd, int Wpd)
{
    const long long total = (long long)B * Cp * Hpd * Wpd;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int q = (int)(idx % Wpd) - K / 2, r = (int)((idx / Wpd) % Hpd) - K / 2;
    const long long nc = idx / ((long long)Wpd * Hpd);
    const int c = (int)(nc % Cp), n = (int)(nc / Cp);
    const bool ok = c < C && r >= 0 && r < H && q >= 0 && q < W;
    const float v = ok ? x[(((size_t)n * C + c) * H + r) * W + q] : 0.f;
    const float big = tf32_round(v);
    xp[idx] = big;
#if SPLIT3
    xp[total + idx] = tf32_round(v - big);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
KERNEL_NAME(float* __restrict__ y, const float* __restrict__ xp, const float* __restrict__ wp,
            const float* __restrict__ bias, int B, int Cp, int H, int W, int M, int Mp, int Hpd, int Wpd)
{
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, q = lane % 4;              // fragment row group and column
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    int n, oh0, ow0;
    vgg::tile_origin<TH, TW>(H, W, n, oh0, ow0);
    const int m0 = blockIdx.y * BM;
    const size_t xplane = (size_t)B * Cp * Hpd * Wpd, wplane = (size_t)Cp * K * K * Mp;
    const float* xpn = xp + (size_t)n * Cp * Hpd * Wpd;

    float acc[MT][ROWS][NH][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int h = 0; h < NH; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][r][h][e] = 0.f;

    const int n_stages = (Cp / CC) * K;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_stages) load_stage(smem + s * STAGE_FLOATS, xpn, wp, s, m0, oh0, ow0, Mp, Hpd, Wpd, xplane, wplane, tid);
        vgg::cp_async_commit();
    }
    for (int it = 0; it < n_stages; ++it) {
        vgg::cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage `it` is complete for all threads; stage it-1 is free to refill
        const int next = it + STAGES - 1;
        if (next < n_stages)
            load_stage(smem + (next % STAGES) * STAGE_FLOATS, xpn, wp, next, m0, oh0, ow0, Mp, Hpd, Wpd, xplane, wplane, tid);
        vgg::cp_async_commit();

        const float* stage = smem + (it % STAGES) * STAGE_FLOATS;
        const float* ws = stage + (wm * MT) * 128 + lane * 4;
        const float* ps = stage + WS_FLOATS + (wn * ROWS) * PWP + q * CS + g;
#if SPLIT3
        // Not unrolled: with the next kw's fragments loaded early, 128 accumulators + 2×16
        // fragment registers overflow 255 and ptxas spills (measured with ptxas -v).
#pragma unroll 1
#else
#pragma unroll
#endif
        for (int kw = 0; kw < K; ++kw) {
            uint4 a[MT];
#if SPLIT3
            uint4 a_small[MT];
#endif
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                a[i] = *reinterpret_cast<const uint4*>(ws + kw * BM * CC + i * 128);
#if SPLIT3
                a_small[i] = *reinterpret_cast<const uint4*>(ws + (WS_FLOATS + PS_FLOATS) + kw * BM * CC + i * 128);
#endif
            }
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int h = 0; h < NH; ++h) {
                    const float* pp = ps + r * PWP + h * 8 + kw;
                    const unsigned b[2] = {__float_as_uint(pp[0]), __float_as_uint(pp[4 * CS])};
#if SPLIT3
                    const float* pq = pp + (WS_FLOATS + PS_FLOATS);
                    const unsigned b_small[2] = {__float_as_uint(pq[0]), __float_as_uint(pq[4 * CS])};
#endif
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
#if SPLIT3
                        // The tensor core adds its products to the accumulator with truncation,
                        // not IEEE rounding; over C·K² = 6400 terms that bias reaches ~4e-5.
                        // So the three products go to a fresh accumulator (small terms first)
                        // and reach acc through an ordinary, correctly rounded FP32 add.
                        float part[4] = {0.f, 0.f, 0.f, 0.f};
                        mma_tf32(part, a_small[i], b);
                        mma_tf32(part, a[i], b_small);
                        mma_tf32(part, a[i], b);
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[i][r][h][e] += part[e];
#else
                        mma_tf32(acc[i][r][h], a[i], b);
#endif
                    }
                }
        }
    }
    vgg::cp_async_wait<0>();

    // Epilogue: acc[i][r][h] = {(m, col), (m, col+1), (m+8, col), (m+8, col+1)} of tile row r,
    // col = 8h + 2q. Rows r and r+1 together are a row of pooling windows.
    const int Hp = H / 2, Wp = W / 2;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int m = m0 + wm * WM + i * 16 + g + 8 * half;
            if (m >= M) continue;
            const float bm = bias[m];
            float* ym = y + (size_t)(n * M + m) * Hp * Wp;
#pragma unroll
            for (int r = 0; r < ROWS; r += 2) {
                const int ph = (oh0 + wn * ROWS + r) / 2;
#pragma unroll
                for (int h = 0; h < NH; ++h) {
                    const int pw = (ow0 + 8 * h + 2 * q) / 2;
                    if (ph < Hp && pw < Wp) {
                        const float v = vgg::max4(acc[i][r][h][2 * half], acc[i][r][h][2 * half + 1],
                                                  acc[i][r + 1][h][2 * half], acc[i][r + 1][h][2 * half + 1]);
                        ym[ph * Wp + pw] = fmaxf(v + bm, 0.f);
                    }
                }
            }
        }
    }
}
