// Step 09 — Winograd F(2×2, K×K) in FP32: fewer multiplies, same layer.
//
// A 2×2 block of convolution outputs needs an α×α input tile (α = K + 1: 6×6 for K = 5).
// Winograd's algorithm computes that block as
//     Y = Aᵀ [ Σ_c (G g_{m,c} Gᵀ) ⊙ (Bᵀ d_c B) ] A
// so per output channel, input channel and 2×2 block it does α² = 36 multiplies instead of
// 4·K² = 100 direct ones (2.8× fewer). The element-wise product summed over c is, for each of
// the α² positions ξ, a matrix product  Mx[ξ] (M × tiles) = U[ξ] (M × C) · V[ξ] (C × tiles):
// 36 independent FP32 GEMMs of the layer's 256 × 256 × 12544 (B = 1).
//
// Why F(2×2) fits this layer: a 2×2 output block at an even row and column is exactly one
// 2×2 pooling window. The output transform therefore produces the four pre-pool values of one
// pooled output in registers, and bias, ReLU and the max follow there; only y is stored. The
// tiles are the B·Hp·Wp pooling windows; an odd last row or column (dropped by the pool) is
// never computed.
//
// Four kernels, one launch each, through an FP32 workspace (the Python class owns it):
//   winograd_weights  U[ξ][c][m] = (G g Gᵀ)[ξ]      (α²·Cp·Mp floats, zeros past C and M)
//   winograd_input    V[ξ][c][p] = (Bᵀ d B)[ξ]      (α²·Cp·Pp floats, zeros past C and P)
//   winograd_gemm     Mx[ξ][m][p] = Σ_c U·V          128×128 block tiles, 8×8 per thread
//   winograd_output   y = max over the 2×2 of ReLU(Aᵀ Mx A + bias)
// Cp, Mp and Pp are C, M and the tile count rounded up to the GEMM's tiles (8, 128, 128), so
// the GEMM loads whole 16-byte vectors with no bounds checks; the padding is zeros.
//
// Rounding: the transforms' entries (up to 5 in Bᵀ, 1/24 in G for K = 5) multiply the FP32
// rounding of the products, so the error is larger than a direct FP32 loop's but measured
// (NumPy, float32 simulation; kernelbook/vgg/winograd.py) at 2.7e-6 relative L2 for the studied
// layer, 6.5e-6 for K = 7 — inside the FP32 tolerance 1e-5. K is a compile-time define (KSIZE):
// tables exist for K = 1, 3, 5, 7 (points 0, ±1, ±2, ±1/2, ∞); the Python class refuses others.

#ifndef KSIZE
#define KSIZE 5
#endif

namespace {
constexpr int K = KSIZE;
constexpr int ALPHA = K + 1;
constexpr int PAD = K / 2;

// The transform matrices as exact rationals (kernelbook/vgg/winograd.py builds the same ones;
// a test compares them). Local constexpr tables inside a function: every index is a constant
// after unrolling, so the compiler folds the zeros and ones away.
__device__ __forceinline__ float at(int i, int j)   // Aᵀ, 2 × α
{
#if KSIZE == 1
    constexpr float T[2][2] = {{1, 0}, {0, 1}};
#elif KSIZE == 3
    constexpr float T[2][4] = {{1, 1, 1, 0}, {0, 1, -1, 1}};
#elif KSIZE == 5
    constexpr float T[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
#elif KSIZE == 7
    constexpr float T[2][8] = {{1, 1, 1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0.5f, -0.5f, 1}};
#else
#error "09_winograd.cu has transform tables for KSIZE 1, 3, 5 and 7 only"
#endif
    return T[i][j];
}

__device__ __forceinline__ float gm(int i, int j)   // G, α × K
{
#if KSIZE == 1
    constexpr float T[2][1] = {{1}, {1}};
#elif KSIZE == 3
    constexpr float T[4][3] = {{-1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
#elif KSIZE == 5
    constexpr float s6 = 1.f / 6, s12 = 1.f / 12, s24 = 1.f / 24, s3 = 1.f / 3;
    constexpr float T[6][5] = {{0.25f, 0, 0, 0, 0},
                               {-s6, -s6, -s6, -s6, -s6},
                               {-s6, s6, -s6, s6, -s6},
                               {s24, s12, s6, s3, 2 * s3},
                               {s24, -s12, s6, -s3, 2 * s3},
                               {0, 0, 0, 0, 1}};
#elif KSIZE == 7
    constexpr float a = 2.f / 9, b = 1.f / 90, c = 1.f / 45;
    constexpr float T[8][7] = {{-1, 0, 0, 0, 0, 0, 0},
                               {-a, -a, -a, -a, -a, -a, -a},
                               {-a, a, -a, a, -a, a, -a},
                               {b, c, 2 * c, 4 * c, 8 * c, 16 * c, 32 * c},
                               {b, -c, 2 * c, -4 * c, 8 * c, -16 * c, 32 * c},
                               {32 * c, 16 * c, 8 * c, 4 * c, 2 * c, c, b},
                               {32 * c, -16 * c, 8 * c, -4 * c, 2 * c, -c, b},
                               {0, 0, 0, 0, 0, 0, 1}};
#endif
    return T[i][j];
}

__device__ __forceinline__ float bt(int i, int j)   // Bᵀ, α × α
{
#if KSIZE == 1
    constexpr float T[2][2] = {{1, 0}, {0, 1}};
#elif KSIZE == 3
    constexpr float T[4][4] = {{-1, 0, 1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, 0, 1}};
#elif KSIZE == 5
    constexpr float T[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                               {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
#elif KSIZE == 7
    constexpr float T[8][8] = {{-1, 0, 5.25f, 0, -5.25f, 0, 1, 0},
                               {0, 1, 1, -4.25f, -4.25f, 1, 1, 0},
                               {0, -1, 1, 4.25f, -4.25f, -1, 1, 0},
                               {0, 0.5f, 0.25f, -2.5f, -1.25f, 2, 1, 0},
                               {0, -0.5f, 0.25f, 2.5f, -1.25f, -2, 1, 0},
                               {0, 2, 4, -2.5f, -5, 0.5f, 1, 0},
                               {0, -2, 4, 2.5f, -5, -0.5f, 1, 0},
                               {0, -1, 0, 5.25f, 0, -5.25f, 0, 1}};
#endif
    return T[i][j];
}

// GEMM tiling: a block computes 128 m × 128 p of one ξ, the reduction in steps of BK = 8
// channels, three cp.async stages. Thread (tx, ty) of 16 × 16 owns rows ty·4..+3 and 64+ty·4..+3,
// columns tx·4..+3 and 64+tx·4..+3: each operand read is one 16-byte LDS of a 4-wide group, and
// the two halves 64 apart keep a warp's 16 column groups on distinct banks.
constexpr int GB = 128, BK = 8, GSTAGES = 3, GTHREADS = 256;

__device__ __forceinline__ void cp_async16(float* dst, const float* src)
{
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
}  // namespace

// U[ξ][c][m]: one thread per (c, m) of the padded Cp × Mp, m fastest (coalesced stores).
extern "C" __global__ void winograd_weights(float* __restrict__ u, const float* __restrict__ w, int C, int M, int Cp, int Mp)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)Cp * Mp) return;
    const int m = (int)(idx % Mp), c = (int)(idx / Mp);
    float g[K][K];
    const bool ok = m < M && c < C;
    const float* src = w + ((size_t)m * C + c) * (K * K);
#pragma unroll
    for (int i = 0; i < K; ++i)
#pragma unroll
        for (int j = 0; j < K; ++j) g[i][j] = ok ? src[i * K + j] : 0.f;
    float t[ALPHA][K];  // G g
#pragma unroll
    for (int a = 0; a < ALPHA; ++a)
#pragma unroll
        for (int j = 0; j < K; ++j) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < K; ++i) s += gm(a, i) * g[i][j];
            t[a][j] = s;
        }
    const size_t plane = (size_t)Cp * Mp;
#pragma unroll
    for (int a = 0; a < ALPHA; ++a)
#pragma unroll
        for (int b = 0; b < ALPHA; ++b) {
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < K; ++j) s += t[a][j] * gm(b, j);
            u[(a * ALPHA + b) * plane + idx] = s;
        }
}

// V[ξ][c][p]: one thread per (c, p) of the padded Cp × Pp, p fastest. Tile p = (n, ph, pw) reads
// input rows 2·ph − PAD .. + α − 1 and the same columns, zeros outside the image.
extern "C" __global__ void winograd_input(float* __restrict__ v, const float* __restrict__ x, int B, int C, int H, int W,
                                          int Cp, int Pp)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)Cp * Pp) return;
    const int p = (int)(idx % Pp), c = (int)(idx / Pp);
    const int Hp = H / 2, Wp = W / 2;
    float d[ALPHA][ALPHA];
    const bool ok = c < C && p < B * Hp * Wp;
    const int n = p / (Hp * Wp), ph = (p / Wp) % Hp, pw = p % Wp;
    const float* src = x + ((size_t)n * C + c) * H * W;
    const int r0 = 2 * ph - PAD, q0 = 2 * pw - PAD;
#pragma unroll
    for (int i = 0; i < ALPHA; ++i)
#pragma unroll
        for (int j = 0; j < ALPHA; ++j) {
            const int r = r0 + i, q = q0 + j;
            d[i][j] = (ok && r >= 0 && r < H && q >= 0 && q < W) ? src[r * W + q] : 0.f;
        }
    float t[ALPHA][ALPHA];  // Bᵀ d
#pragma unroll
    for (int a = 0; a < ALPHA; ++a)
#pragma unroll
        for (int j = 0; j < ALPHA; ++j) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < ALPHA; ++i) s += bt(a, i) * d[i][j];
            t[a][j] = s;
        }
    const size_t plane = (size_t)Cp * Pp;
#pragma unroll
    for (int a = 0; a < ALPHA; ++a)
#pragma unroll
        for (int b = 0; b < ALPHA; ++b) {
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < ALPHA; ++j) s += t[a][j] * bt(b, j);
            v[(a * ALPHA + b) * plane + idx] = s;
        }
}

// Mx[ξ][m][p] = Σ_c U[ξ][c][m] · V[ξ][c][p]; grid (Pp/128, Mp/128, α²). Both operands are
// "k-major" (a row of the reduction is contiguous in m or p), so a stage is two 8 × 128 slabs
// copied as 16-byte vectors, one per thread each.
extern "C" __global__ void __launch_bounds__(GTHREADS, 2)
winograd_gemm(float* __restrict__ mx, const float* __restrict__ u, const float* __restrict__ v, int Cp, int Mp, int Pp)
{
    __shared__ __align__(16) float as[GSTAGES][BK][GB];
    __shared__ __align__(16) float bs[GSTAGES][BK][GB];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int p0 = blockIdx.x * GB, m0 = blockIdx.y * GB, xi = blockIdx.z;
    const float* ub = u + (size_t)xi * Cp * Mp + m0;
    const float* vb = v + (size_t)xi * Cp * Pp + p0;
    const int lr = tid / 32, lc = (tid % 32) * 4;   // this thread's 16-byte piece of each slab
    const int steps = Cp / BK;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

#pragma unroll
    for (int s = 0; s < GSTAGES - 1; ++s) {
        if (s < steps) {
            cp_async16(&as[s][lr][lc], ub + (size_t)(s * BK + lr) * Mp + lc);
            cp_async16(&bs[s][lr][lc], vb + (size_t)(s * BK + lr) * Pp + lc);
        }
        cp_commit();
    }
    for (int it = 0; it < steps; ++it) {
        cp_wait<GSTAGES - 2>();
        __syncthreads();  // stage it is visible to all; stage it−1 is no longer read
        const int nx = it + GSTAGES - 1;
        if (nx < steps) {
            const int sb = nx % GSTAGES;
            cp_async16(&as[sb][lr][lc], ub + (size_t)(nx * BK + lr) * Mp + lc);
            cp_async16(&bs[sb][lr][lc], vb + (size_t)(nx * BK + lr) * Pp + lc);
        }
        cp_commit();
        const int sc = it % GSTAGES;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&as[sc][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&as[sc][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&bs[sc][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&bs[sc][k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }
    cp_wait<0>();
    float* out = mx + (size_t)xi * Mp * Pp;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        float* row = out + (size_t)m * Pp + p0;
        *reinterpret_cast<float4*>(row + tx * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *reinterpret_cast<float4*>(row + 64 + tx * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}

// y[n][m][ph][pw] = max over the tile's 2×2 of ReLU((Aᵀ Mx A) + bias[m]); one thread per (m, p).
extern "C" __global__ void winograd_output(float* __restrict__ y, const float* __restrict__ mx, const float* __restrict__ bias,
                                           int B, int H, int W, int M, int Mp, int Pp)
{
    const int Hp = H / 2, Wp = W / 2, P = B * Hp * Wp;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)M * P) return;
    const int p = (int)(idx % P), m = (int)(idx / P);
    const size_t plane = (size_t)Mp * Pp;
    const float* src = mx + (size_t)m * Pp + p;
    float t[2][ALPHA];  // Aᵀ Mx, accumulated row by row of Mx so only α values are live at once
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int b = 0; b < ALPHA; ++b) t[i][b] = 0.f;
#pragma unroll
    for (int a = 0; a < ALPHA; ++a)
#pragma unroll
        for (int b = 0; b < ALPHA; ++b) {
            const float e = src[(a * ALPHA + b) * plane];
#pragma unroll
            for (int i = 0; i < 2; ++i) t[i][b] += at(i, a) * e;
        }
    float o[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float s = 0.f;
#pragma unroll
            for (int b = 0; b < ALPHA; ++b) s += t[i][b] * at(j, b);
            o[i][j] = s;
        }
    const float v = fmaxf(fmaxf(o[0][0], o[0][1]), fmaxf(o[1][0], o[1][1]));
    const int n = p / (Hp * Wp), rest = p % (Hp * Wp);
    y[((size_t)n * M + m) * Hp * Wp + rest] = fmaxf(v + bias[m], 0.f);   // max then bias: same as bias then max
}
