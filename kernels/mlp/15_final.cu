// MLP step 15 - final: the fastest FP32-accurate kernel per test case, inside half's range.
//
// Step 13 showed that 3xTF32 keeps FP32 accuracy on tensor cores, at three m16n8k8 products
// per product. This file adds the same idea on the FP16 datapath, which does twice the work per
// instruction: every operand is split as v = hi + lo with hi = half(v), lo = half(v - hi), and
//   acc += a_lo * b_hi + a_hi * b_lo + a_hi * b_hi       (mma.sync m16n8k16, FP32 accumulation)
// hi and lo together carry 22 significant bits (float has 24); the dropped a_lo * b_lo term is
// about 2^-22 of a product.
//
// Half's range, from this arithmetic. The split is the only step that leaves float: hi = half(v)
// rounds to nearest, so it overflows to infinity exactly when |v| >= 65520 (what half(v) gives
// above that is inf, and inf - inf makes lo NaN). Below that, products of two halves are exact in
// float (at most 65504^2, about 4.3e9) and a 72-term sum of them stays far inside float's range,
// so no product or accumulator overflows. At the small end, v - hi is exact and lo = half(v - hi)
// keeps 11 bits while |v - hi| >= 2^-14, else it is subnormal with an absolute error below 2^-25;
// so every value is represented to within max(2^-22 |v|, 2^-25), which is within 2^-19 of its
// column's largest magnitude M when M >= 2^-6 (the bound step 17 works to). Zeros are exact
// (hi = lo = 0). So a column is outside half's range, for one layer, when the largest magnitude M
// of its values is at least 65520 or is not 0 but below 2^-6, and only then: a column of zeros, or
// one whose small values sit beside a largest one of at least 2^-6, loses nothing the bound counts.
// The kernel checks that for x, ReLU(h1) and ReLU(h2) on the values themselves, in float (their
// halves cannot tell a 0 from a value below 2^-25, which the split loses whole): each lane keeps
// the largest |v| of its share of each of its two columns (two FMNMX per split pair), per layer,
// and the four lanes that share a column (a lane group) combine theirs by two shuffles before the
// test, so a share of ReLU zeros beside larger values elsewhere in its column flags nothing. After
// the tile a warp ballot finds the lane groups with a column outside, and the warp
// recomputes those columns in plain FP32 on the CUDA cores (exact_fp32.cuh; their fast-path
// results are not stored). Weights outside half's range are found once, on the host, when they
// are packed (kernelbook/mlp/pack.py:f16_split_exact): then every column takes the FP32 path
// (exact_only). So the kernel is FP32-accurate for any finite data, and fast while the data stays
// inside half's range (as this network's shipped weights and signals do). Biases are never split.
//
// Register use and fragment layout are step 14's (k16 accumulators are the next A fragments);
// the weights are packed as uint4 {b0_hi, b1_hi, b0_lo, b1_lo} per lane, then the biases
// (39,456 bytes of static shared memory). Step 13's kernel is compiled into the same module;
// the host (kernelbook.mlp.tensor.Final) picks the kernel and its launch shape per test case.
// Arguments: x, the packed weights, the FP32 weights of the exact path (W1^T b1 W2^T b2 W3 b3), y,
// n, exact_only.
#include "mma_fragments.cuh"     // mma_f16x, split2, mma_3xf16
#include "tc_3xtf32_kernel.cuh"   // step 13's kernel
#include "exact_fp32.cuh"         // exact_columns: the FP32 path

#define S_K1 5
#define S_K2 4
#define S_NT 8
#define S_F1 (S_K1 * S_NT * 32)
#define S_F2 (S_K2 * S_NT * 32)
#define S_F3 (S_K2 * 32)
#define S_UINT4S (S_F1 + S_F2 + S_F3 + 136 / 4)
#define S_SMALL 0.015625f     // 2^-6: a column's largest |v| below this (and not 0) loses bits
#define S_OVERFLOW 65520.0f   // half(v) is infinite from here on

// The two values of a split pair into the running largest |v| of their column (two FMNMX).
static __device__ __forceinline__ void track(float v0, float v1, float &mx)
{
    mx = fmaxf(mx, fmaxf(fabsf(v0), fabsf(v1)));
}

// The same for two hidden values before their ReLU: mx starts at 0, so it keeps max(0, largest c),
// the largest ReLU(c) (a negative c, whatever its size, adds nothing).
static __device__ __forceinline__ void track_relu(float c0, float c1, float &mx)
{
    mx = fmaxf(mx, fmaxf(c0, c1));
}

// A column is outside half's range for one layer: its largest |v| (over the whole column) reaches
// 65520, where half(v) is infinite, or is not 0 but below 2^-6. A column of zeros is exact.
static __device__ __forceinline__ bool outside_half(float top)
{
    return !(top < S_OVERFLOW) || (top > 0.0f && top < S_SMALL);
}

// After a layer's splits: the lane group's largest |v| per column (lanes 4g .. 4g + 3 hold the
// same two columns), flagged where the column left half's range; then start the next layer.
template <int M>
static __device__ __forceinline__ void check_layer(float (&mx)[M][2], unsigned &outside)
{
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float top = fmaxf(mx[m][c], __shfl_xor_sync(0xffffffffu, mx[m][c], 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
            if (outside_half(top)) outside |= 1u << (2 * m + c);
            mx[m][c] = 0.0f;
        }
}

// Columns col0 + 16 m + gg and + 8 on the FP32 path (kept out of line: the fast path's registers
// stay the fast path's).
static __device__ __noinline__ void exact_group(const float *__restrict__ x, const float *__restrict__ raw,
                                                float *__restrict__ y, int n, int c0, int lane)
{
    exact_columns(x, raw, y, n, c0, c0 + 8, lane);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
fusedTensorCore3xFP16Kernel(const float *__restrict__ x, const uint4 *__restrict__ packed,
                            const float *__restrict__ raw, float *__restrict__ y, int n, int exact_only)
{
    __shared__ uint4 smem[S_UINT4S];
    for (int i = threadIdx.x; i < S_UINT4S; i += WARPS * 32) smem[i] = packed[i];
    __syncthreads();
    const uint4 *f1 = smem;
    const uint4 *f2 = f1 + S_F1;
    const uint4 *f3 = f2 + S_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + S_F3);

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + 16 * M_TILES - 1) / (16 * M_TILES);

    if (exact_only) {   // weights outside half's range (found on the host): every column in FP32
        for (int tile = blockIdx.x * WARPS + warp; tile < tiles; tile += gridDim.x * WARPS)
            for (int c0 = tile * 16 * M_TILES; c0 < min(n, (tile + 1) * 16 * M_TILES); c0 += 16)
                for (int gg = 0; gg < 8 && c0 + gg < n; ++gg) exact_group(x, raw, y, n, c0 + gg, lane);
        return;
    }

    for (int tile = blockIdx.x * WARPS + warp; tile < tiles; tile += gridDim.x * WARPS) {
        const int col0 = tile * 16 * M_TILES;
        // Bit 2 m + c: column col0 + 16 m + g + 8 c left half's range in a layer.
        unsigned outside = 0;
        float mx[M_TILES][2];   // this lane's largest |v| of each of its columns in the current layer
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) mx[m][0] = mx[m][1] = 0.0f;

        float acc[M_TILES][S_NT][4];
        bias_fragments(acc, bias, 0, q);
#pragma unroll
        for (int j = 0; j < S_K1; ++j) {
            unsigned hi[M_TILES][4], lo[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                const int col = col0 + 16 * m + g;
                float v[8];  // k = 2q, 2q+1 of rows g, g+8, then k = 2q+8, 2q+9
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int k = 16 * j + 2 * q + (e & 1) + ((e & 4) ? 8 : 0);
                    const int c = col + ((e & 2) ? 8 : 0);
                    v[e] = (k < IN && c < n) ? x[(size_t)k * n + c] : 0.0f;
                }
#pragma unroll
                for (int r = 0; r < 4; ++r) {   // r even: column g, r odd: column g + 8
                    split2(v[2 * r], v[2 * r + 1], hi[m][r], lo[m][r]);
                    track(v[2 * r], v[2 * r + 1], mx[m][r & 1]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < S_NT; ++nt) {
                const uint4 b = f1[(j * S_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_3xf16(acc[m][nt], hi[m], lo[m], b);
            }
        }

        check_layer(mx, outside);

        float acc2[M_TILES][S_NT][4];
        bias_fragments(acc2, bias, HIDDEN, q);
#pragma unroll
        for (int j = 0; j < S_K2; ++j) {
            unsigned hi[M_TILES][4], lo[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m)
#pragma unroll
                for (int r = 0; r < 4; ++r) {   // r even: row g (column g), r odd: row g + 8
                    const float *c = acc[m][2 * j + r / 2] + 2 * (r % 2);
                    split2(fmaxf(c[0], 0.0f), fmaxf(c[1], 0.0f), hi[m][r], lo[m][r]);
                    track_relu(c[0], c[1], mx[m][r & 1]);
                }
#pragma unroll
            for (int nt = 0; nt < S_NT; ++nt) {
                const uint4 b = f2[(j * S_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_3xf16(acc2[m][nt], hi[m], lo[m], b);
            }
        }

        check_layer(mx, outside);

        float out[M_TILES][4];
        bias_fragments(out, bias, 2 * HIDDEN, q);
#pragma unroll
        for (int j = 0; j < S_K2; ++j) {
            const uint4 b = f3[j * 32 + lane];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                unsigned hi[4], lo[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float *c = acc2[m][2 * j + r / 2] + 2 * (r % 2);
                    split2(fmaxf(c[0], 0.0f), fmaxf(c[1], 0.0f), hi[r], lo[r]);
                    track_relu(c[0], c[1], mx[m][r & 1]);
                }
                mma_3xf16(out[m], hi, lo, b);
            }
        }

        check_layer(mx, outside);

        // Only columns below n count (the zeros past n leave the biases, which may be small).
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) {
            if (col0 + 16 * m + g >= n) outside &= ~(1u << (2 * m));
            if (col0 + 16 * m + g + 8 >= n) outside &= ~(2u << (2 * m));
        }
        // Lane group g (lanes 4g .. 4g + 3) holds columns g and g + 8 of each m-tile: where any of
        // its lanes saw a column outside half's range, the warp recomputes the pair in FP32 and the
        // group stores nothing of that m-tile. Lane (g, q) holds outputs 2q, 2q + 1: only q < 2 store.
        unsigned skip = 0;   // bit m: this lane group's m-tile pair went the FP32 path
        if (__any_sync(0xffffffffu, outside != 0)) {
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                unsigned flagged = __ballot_sync(0xffffffffu, (outside >> (2 * m)) & 3u);
                if ((flagged >> (lane & ~3)) & 0xFu) skip |= 1u << m;
                while (flagged) {
                    const int first = __ffs(flagged) - 1;
                    flagged &= ~(0xFu << (first & ~3));
                    exact_group(x, raw, y, n, col0 + 16 * m + (first >> 2), lane);
                }
            }
        }
        if (q < OUT / 2) {
            store_output_fragments(y, out, col0, g, q, n, skip);
        }
    }
}
