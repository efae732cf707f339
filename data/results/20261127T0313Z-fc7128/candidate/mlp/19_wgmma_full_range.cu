// MLP step 19 - FP32-accurate over float's whole range on Hopper's warpgroup tensor cores: wgmma
// with A in registers, x brought in by the TMA, step 17's per-column power-of-two scaling, and an
// exact FP32 path for the column pairs the scaling cannot hold.
//
// Step 17 keeps FP32's accuracy on mma.sync by scaling every column of every layer into FP16's
// range and splitting each value in two; its limiter was instruction issue (1,803 instructions
// per warp and 16 columns, the B fragments of 228 mma.sync among them). This step keeps the
// arithmetic idea and changes the machine:
//
// 1. wgmma. A warpgroup (4 warps) multiplies a 64-column tile at a time: D (64 columns x 64
//    outputs) += A (64 columns x 16 inputs, FP16, registers) x B (16 x 64, FP16, shared memory).
//    The weights are B and never pass through registers; one wgmma replaces 8 mma.sync per warp.
//    A layer's accumulators, paired up, are the next layer's A (wgmma_f16.cuh).
// 2. The split. Each value v (x, then the first hidden layer) is scaled per column by 2^s so that
//    the column's largest magnitude lies in [2^10, 2^11) (x) or [2^9, 2^10) (hidden), then split as
//    v = hi + 2^-16 lo', hi = half(v), lo' = half((v - hi) 2^16); the tensor cores form hi*hi into
//    one accumulator and lo'*hi + hi*lo' into another (3 wgmma per k-step), added as
//    acc + 2^-16 acc_lo in the epilogue, which also multiplies by 2^-(ew + s) (exact) and adds the
//    bias in FP32. Representation error: |v| >= 2^-14 has a normal hi and an error below 2^-21 |v|;
//    below that, hi is subnormal (a grid of 2^-24), the remainder is below 2^-24 and lo' keeps 11
//    of its bits, an error below 2^-35 absolute, so every nonzero value must be at least 2^-16
//    (2^-17 for x, whose hi is rounded, not truncated) to stay within 2^-19 of itself, the bound
//    step 17 works to. Hence the spans: a column whose nonzero values lie more than 2^27 (x) or
//    2^25 (hidden) below its largest or subnormal, an infinite value, or a scale that would leave
//    float's range is flagged; the lane group holding that column pair (a warp ballot after the
//    tile) has it recomputed by its warp on the CUDA cores in plain FP32 (exact_pair). Weights are
//    scaled and split once on the host (max |W_l| into [2^10, 2^11)); a layer whose nonzero weights
//    span more than 2^27 sends every column to the exact path (the host's exact_only argument).
//    The analysis covers how each value is represented; the tensor cores add the products in FP32
//    with their own (not IEEE) rounding of the sums, as for steps 13, 15 and 17: the range test
//    measures the result.
// 3. ReLU inside the split. hi = cvt.rz.relu(v) truncates toward zero and clamps negatives to 0,
//    so v - hi >= 0 and lo' = cvt.rn.relu((v - hi) 2^16) keeps its sign; for v < 0 both halves are
//    0. The ReLU costs nothing; truncation halves the top of the hidden scale (2^10, not 2^11).
//
// Layer 3 (64 -> 4) runs on the CUDA cores in FP32: 128 FMAs per lane and a reduce-scatter over the
// 4 lanes of a row group, cheaper than splitting the second hidden layer for three more wgmma's.
//
// The tile of x: two TMA boxes of 32 columns x 80 rows with the 128-byte swizzle (rows 71-79 and
// columns past n lie outside the tensor; the TMA writes zeros there). Lane (g, q) of warp w takes
// the tile's columns 16w + 2g (A's row g) and 16w + 2g + 1 (row g + 8): one 8-byte load of row k
// gives k for both, so the A of a k-step is four loads, conflict-free under the swizzle.
//
// Block: WGS warpgroups (128 WGS threads), each with its own two x stages (40 KB), persistent over
// tiles of 64 columns; every warpgroup keeps its next two tiles on their way (one per stage): a
// stage is refilled once its four warps have read it (an "empty" barrier per stage) and layer 1's
// products are done. Shared memory: the packed weights (38,448 bytes, one bulk copy at the start,
// laid out by kernelbook/mlp/pack.py:wgmma_full_range), then the stages; 1,024-byte aligned.
// Arguments: x's tensor map (global memory), x, the packed weights, the FP32 weights for the exact
// path (W1^T b1 W2^T b2 W3 b3), y, n, exact_only. Needs n % 4 == 0 and x, y 16-byte
// aligned (the host sends other calls to step 17).
#include <cuda_fp16.h>

#include "tma_barriers.cuh"
#include "wgmma_f16.cuh"

#define IN 71
#define HIDDEN 64
#define OUT 4
#define K1_STEPS 5                 // 80 / 16 (inputs 71-79 are zero)
#define K2_STEPS 4
#define LO_SHIFT 65536.0f          // lo' = (v - hi) * 2^16
#define X_TOP 137                  // x: a column's largest |v| is scaled into [2^10, 2^11) (127 + 10) ...
#define X_SPAN 27                  // ... and its nonzero values down to 2^-17 (2^27 below the top)
#define H_TOP 136                  // hidden values (hi truncated): largest into [2^9, 2^10) ...
#define H_SPAN 25                  // ... nonzero ones down to 2^-16

// The packed weights (byte offsets): per layer and k-step j, the B of hi and of lo' as 8 row groups
// x 2 core matrices x 8 rows x 8 halves (2,048 bytes); layer 3 in FP32 as [c][e][q][o]
// (W3[o][8c + 2q + e] as float4 over o: the four lanes q of a row group read 64 consecutive bytes;
// as [q][c][e][o], 256 bytes apart, they hit the same banks, a 4-way conflict, measured); the
// biases; a header of 4 floats {2^-ew1, 2^-(16+ew1), 2^-ew2, 2^-(16+ew2)} and {0, ew1, ew2, 0}.
#define W1_HI 0
#define W1_LO 10240
#define W2_HI 20480
#define W2_LO 28672
#define W3_FP32 36864
#define B1_OFF 37888
#define B2_OFF 38144
#define B3_OFF 38400
#define HDR_OFF 38416
#define PACKED_BYTES 38448
#define WEIGHTS_SPAN 38912         // PACKED_BYTES rounded up to 1,024

#ifndef B_LBO
#define B_LBO 128                  // bytes between the two core matrices of a row group along K
#define B_SBO 256                  // bytes between row groups along N
#endif

#define BOX_ROWS 80
#define BOX_BYTES (BOX_ROWS * 128) // 32 floats x 80 rows
#define STAGE_BYTES (2 * BOX_BYTES)
#ifndef WGS
#define WGS 3
#endif
#define SMEM_BYTES (1024 + WEIGHTS_SPAN + WGS * 2 * STAGE_BYTES)

// ---------------------------------------------------------------- splitting
// x: hi = half(v) rounded to nearest, lo' = half((v - hi) * 2^16); a pair of values into one
// register each (the lower half is v0).
static __device__ __forceinline__ void split_x(float v0, float v1, unsigned &hi, unsigned &lo)
{
    const __half2 h = __floats2half2_rn(v0, v1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn((v0 - back.x) * LO_SHIFT, (v1 - back.y) * LO_SHIFT);
    hi = *reinterpret_cast<const unsigned *>(&h);
    lo = *reinterpret_cast<const unsigned *>(&l);
}

// A hidden value before its ReLU: the split of relu(v), hi truncated (see 3. above).
static __device__ __forceinline__ void split_relu(float v0, float v1, unsigned &hi, unsigned &lo)
{
    asm("cvt.rz.relu.f16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(v1), "f"(v0));
    const __half2 h = *reinterpret_cast<const __half2 *>(&hi);
    const float2 back = __half22float2(h);
    asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"((v1 - back.y) * LO_SHIFT), "f"((v0 - back.x) * LO_SHIFT));
}

static __device__ __forceinline__ float pow2f(int e)   // 2^e for -126 <= e <= 127
{
    return __int_as_float((e + 127) << 23);
}

// A column's scale from its largest magnitude `mx` and its smallest nonzero one (`mn`: the smallest
// of 2 |v|bits - 2 as unsigned, where a zero wraps to the top), reduced first over the four lanes
// (q) that share the column. Returns s with max |v| 2^s in [2^(top-127), 2^(top-126)); `bad` when
// a nonzero value lies more than 2^span below the largest or is subnormal, a value is infinite, or
// the scale or the epilogue's factor 2^-(ew + s) (and 2^-(16 + ew + s)) would leave float's normal
// range. (A NaN is outside the contract of finite data: it is not flagged and propagates.)
static __device__ __forceinline__ int column_scale(float mx, unsigned mn, int top, int span, int ew, bool &bad)
{
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, 1));
    mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, 2));
    const int emx = __float_as_int(mx) >> 23;
    if (emx == 0) {               // all zero (zeros code as 0xfffffffe, none as all ones), or subnormals: bad
        bad |= mn < 0xfffffffeu;
        return 0;
    }
    // emn == 0: a subnormal value, which no scale within the limits below would carry to 2^-19
    const int emn = (int)((mn + 2u) >> 24), sc = top - emx;
    bad |= emx == 255 || emn == 0 || emn < emx - span || sc > 120 || sc < -120 || ew + sc > 100 || ew + sc < -100;
    return max(-120, min(120, sc));
}

// x: track the largest |v| and the smallest nonzero one (2 |v|bits - 2: the sign drops out).
static __device__ __forceinline__ void track_x(float v, float &mx, unsigned &mn)
{
    mx = fmaxf(mx, fabsf(v));
    mn = min(mn, __float_as_uint(v) * 2u - 2u);
}

// A hidden value before its ReLU: only positives matter (the ReLU zeroes the rest). bits - 1 as
// unsigned puts zero and negatives above every positive.
static __device__ __forceinline__ void track_hidden(float v, float &mx, unsigned &mn)
{
    mx = fmaxf(mx, v);
    mn = min(mn, __float_as_uint(v) - 1u);
}

// ---------------------------------------------------------------- the exact path (FP32, CUDA cores)
// Columns c0 and c0 + 1 (a lane pair's two A rows) in plain FP32 by the whole warp: lane l computes
// hidden units l and l + 32 of both columns; layer 2 gets each layer-1 value by shuffle; layer 3's
// 8 sums are reduced over the warp. About 1,200 instructions: a warp that meets a value outside
// the window pays this per flagged lane group, not a 16-column recomputation. The weights come
// transposed (``raw``: W1^T, b1, W2^T, b2, W3, b3) so that the 32 lanes read 128 consecutive bytes.
static __device__ __forceinline__ void exact_pair(const float *__restrict__ x, const float *__restrict__ raw,
                                                  float *__restrict__ y, int n, int c0, int lane)
{
    const float *W1T = raw, *b1 = W1T + IN * HIDDEN, *W2T = b1 + HIDDEN, *b2 = W2T + HIDDEN * HIDDEN;
    const float *W3 = b2 + HIDDEN, *b3 = W3 + OUT * HIDDEN;
    const bool has1 = c0 + 1 < n;
    float h[2][2];   // [unit lane, lane + 32][column c0, c0 + 1]
#pragma unroll
    for (int a = 0; a < 2; ++a) h[a][0] = h[a][1] = __ldg(b1 + lane + 32 * a);
#pragma unroll 4
    for (int k = 0; k < IN; ++k) {
        const float v0 = __ldg(x + (size_t)k * n + c0), v1 = has1 ? __ldg(x + (size_t)k * n + c0 + 1) : 0.0f;
#pragma unroll
        for (int a = 0; a < 2; ++a) {
            const float w = __ldg(W1T + k * HIDDEN + lane + 32 * a);
            h[a][0] = fmaf(w, v0, h[a][0]);
            h[a][1] = fmaf(w, v1, h[a][1]);
        }
    }
    float z[2][2];
#pragma unroll
    for (int a = 0; a < 2; ++a) {
        h[a][0] = fmaxf(h[a][0], 0.0f);
        h[a][1] = fmaxf(h[a][1], 0.0f);
        z[a][0] = z[a][1] = __ldg(b2 + lane + 32 * a);
    }
#pragma unroll
    for (int src = 0; src < 2; ++src)   // layer-1 units 32 src .. 32 src + 31
#pragma unroll 8
        for (int kk = 0; kk < 32; ++kk) {
            const int k = 32 * src + kk;
            const float hk0 = __shfl_sync(0xffffffffu, h[src][0], kk), hk1 = __shfl_sync(0xffffffffu, h[src][1], kk);
#pragma unroll
            for (int a = 0; a < 2; ++a) {
                const float w = __ldg(W2T + k * HIDDEN + lane + 32 * a);
                z[a][0] = fmaf(w, hk0, z[a][0]);
                z[a][1] = fmaf(w, hk1, z[a][1]);
            }
        }
    float p[OUT][2];
#pragma unroll
    for (int o = 0; o < OUT; ++o)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float t = __ldg(W3 + o * HIDDEN + lane) * fmaxf(z[0][c], 0.0f);
            t = fmaf(__ldg(W3 + o * HIDDEN + lane + 32), fmaxf(z[1][c], 0.0f), t);
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) t += __shfl_xor_sync(0xffffffffu, t, m);
            p[o][c] = t;
        }
    if (lane == 0) {
#pragma unroll
        for (int o = 0; o < OUT; ++o) {
            y[(size_t)o * n + c0] = p[o][0] + __ldg(b3 + o);
            if (has1) y[(size_t)o * n + c0 + 1] = p[o][1] + __ldg(b3 + o);
        }
    }
}

// One layer on the tensor cores: per k-step j, acc_lo (=|+=) lo' x hi + hi x lo', acc (=|+=) hi x hi,
// B at byte offsets hi_at / lo_at of the weights (2,048 bytes a k-step); returns when the products
// are done (then layer_done ties A's registers and the accumulators to that point for the compiler).
template <int KS>
static __device__ __forceinline__ void layer_wgmma(float (&acc)[32], float (&acc_lo)[32], const unsigned (&ah)[KS][4],
                                                   const unsigned (&al)[KS][4], unsigned desc_lo, unsigned desc_hi,
                                                   unsigned hi_at, unsigned lo_at)
{
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < KS; ++j) {
        const unsigned long long b_hi = desc_at(desc_lo, desc_hi, hi_at + 2048 * j);
        const unsigned long long b_lo = desc_at(desc_lo, desc_hi, lo_at + 2048 * j);
        wgmma_m64n64k16(acc_lo, al[j], b_hi, j > 0);
        wgmma_m64n64k16(acc_lo, ah[j], b_lo, 1);
        wgmma_m64n64k16(acc, ah[j], b_hi, j > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
}

template <int KS>
static __device__ __forceinline__ void layer_done(float (&acc)[32], float (&acc_lo)[32], unsigned (&ah)[KS][4],
                                                  unsigned (&al)[KS][4])
{
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        fence_reg(acc[i]);
        fence_reg(acc_lo[i]);
    }
#pragma unroll
    for (int j = 0; j < KS; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            fence_reg(ah[j][r]);
            fence_reg(al[j][r]);
        }
}

// One x tile (64 columns from col0) into a stage: two boxes, one barrier; the second box only if
// it holds a column below n (the warps of a box past n compute on stale values and store nothing).
static __device__ __forceinline__ void load_tile(unsigned stage, const void *x_map, int col0, int n, unsigned bar)
{
    const bool second = col0 + 32 < n;
    barrier_expect_bytes(bar, second ? STAGE_BYTES : BOX_BYTES);
    tma_copy_2d(stage, x_map, col0, 0, bar);
    if (second) tma_copy_2d(stage + BOX_BYTES, x_map, col0 + 32, 0, bar);
}

extern "C" __global__ void __launch_bounds__(128 * WGS, 1)
wgmmaFullRangeKernel(const void *x_map, const float *__restrict__ x, const uint4 *__restrict__ packed,
                     const float *__restrict__ raw, float *__restrict__ y, int n, int exact_only)
{
    extern __shared__ unsigned char dyn[];
    __shared__ __align__(8) unsigned long long bars[1 + 4 * WGS];   // weights; per warpgroup full[2], empty[2]
    const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + 63) / 64, stride = gridDim.x * WGS;
    int tile = blockIdx.x * WGS + wg;

    if (exact_only) {   // weights outside the window: every column pair of every tile exactly
        for (; tile < tiles; tile += stride)
            for (int c = tile * 64 + 16 * warp; c < min(n, tile * 64 + 16 * warp + 16); c += 2) exact_pair(x, raw, y, n, c, lane);
        return;
    }

    const unsigned base = (smem_addr(dyn) + 1023u) & ~1023u;
    const unsigned char *wts = dyn + (base - smem_addr(dyn));
    const unsigned stage0 = base + WEIGHTS_SPAN + wg * 2 * STAGE_BYTES;
    const unsigned wbar = smem_addr(&bars[0]), xbar = smem_addr(&bars[1 + 4 * wg]), ebar = xbar + 16;
    if (tid == 0) {
        tma_prefetch_map(x_map);
        for (int i = 0; i < 1 + 4 * WGS; ++i) barrier_init(smem_addr(&bars[i]), (i > 0 && (i - 1) % 4 >= 2) ? 4 : 1);
        barrier_init_fence();
    }
    __syncthreads();
    if (tid == 0) {
        barrier_expect_bytes(wbar, PACKED_BYTES);
        bulk_copy(base, packed, PACKED_BYTES, wbar);
    }
    if (wtid == 0) {   // this warpgroup's first two tiles, one per stage
        if (tile < tiles) load_tile(stage0, x_map, tile * 64, n, xbar);
        if (tile + stride < tiles) load_tile(stage0 + STAGE_BYTES, x_map, (tile + stride) * 64, n, xbar + 8);
    }
    barrier_wait(wbar, 0);

    const float *hdr = reinterpret_cast<const float *>(wts + HDR_OFF);
    const float c0_1 = hdr[0], c1_1 = hdr[1], c0_2 = hdr[2], c1_2 = hdr[3];
    const int ew1 = reinterpret_cast<const int *>(hdr)[5], ew2 = reinterpret_cast<const int *>(hdr)[6];
    const float2 *bias1 = reinterpret_cast<const float2 *>(wts + B1_OFF);
    const float2 *bias2 = reinterpret_cast<const float2 *>(wts + B2_OFF);
    const float4 *w3 = reinterpret_cast<const float4 *>(wts + W3_FP32) + q;
    const float *bias3 = reinterpret_cast<const float *>(wts + B3_OFF);
    // This lane's two columns in the tile and where row k of them sits in a stage (128-byte swizzle:
    // the 16-byte chunk c of row k is stored at chunk c ^ (k % 8)).
    const int cc = 16 * warp + 2 * g;
    const unsigned lane_box = (cc >> 5) * BOX_BYTES + (cc & 3) * 4;
    const int chunk = (cc & 31) >> 2;
    // The weights' descriptors differ only in their start address (the low word): built once here.
    const unsigned long long desc0 = wgmma_desc(base, B_LBO, B_SBO);
    const unsigned desc_lo = (unsigned)desc0, desc_hi = (unsigned)(desc0 >> 32);

    for (int it = 0; tile < tiles; tile += stride, ++it) {
        const int s = it & 1;
        const unsigned stage = stage0 + s * STAGE_BYTES;
        const unsigned char *stage_ptr = dyn + (stage - smem_addr(dyn));
        barrier_wait(xbar + 8 * s, (it >> 1) & 1);
        const int col0 = tile * 64;
        const bool live = col0 + cc < n;

        // ---- layer 1: A from the stage, scaled per column and split in registers; 3 wgmma per k-step
        float2 xv[K1_STEPS][4];   // k-step j, rows k = 16j + 2q, +1, +8, +9; .x column cc, .y column cc + 1
        float mx0 = 0.0f, mx1 = 0.0f;
        unsigned mn0 = 0xffffffffu, mn1 = 0xffffffffu;
#pragma unroll
        for (int j = 0; j < K1_STEPS; ++j)
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const int k = 16 * j + 2 * q + (t & 1) + 8 * (t >> 1);
                xv[j][t] = *reinterpret_cast<const float2 *>(stage_ptr + lane_box + k * 128 + ((chunk ^ (k & 7)) << 4));
                track_x(xv[j][t].x, mx0, mn0);
                track_x(xv[j][t].y, mx1, mn1);
            }
        __syncwarp();   // the warp's reads of the stage are done (and ordered before the arrival)
        if (lane == 0) barrier_arrive(ebar + 8 * s);
        bool bad = false;
        const int sx0 = column_scale(mx0, mn0, X_TOP, X_SPAN, ew1, bad), sx1 = column_scale(mx1, mn1, X_TOP, X_SPAN, ew1, bad);
        const float px0 = pow2f(sx0), px1 = pow2f(sx1);
        unsigned xh[K1_STEPS][4], xl[K1_STEPS][4];
#pragma unroll
        for (int j = 0; j < K1_STEPS; ++j) {
            split_x(xv[j][0].x * px0, xv[j][1].x * px0, xh[j][0], xl[j][0]);   // row g: k, k + 1
            split_x(xv[j][0].y * px1, xv[j][1].y * px1, xh[j][1], xl[j][1]);   // row g + 8
            split_x(xv[j][2].x * px0, xv[j][3].x * px0, xh[j][2], xl[j][2]);   // row g: k + 8, k + 9
            split_x(xv[j][2].y * px1, xv[j][3].y * px1, xh[j][3], xl[j][3]);
        }
        // Layer 1's epilogue factors per row: the accumulators hold (true value) 2^(ew1 + s).
        const float u0 = pow2f(-sx0), u1 = pow2f(-sx1);
        const float e0[2] = {c0_1 * u0, c0_1 * u1}, e1[2] = {c1_1 * u0, c1_1 * u1};

        float acc[32], acc_lo[32];
        layer_wgmma<K1_STEPS>(acc, acc_lo, xh, xl, desc_lo, desc_hi, W1_HI, W1_LO);
        // Layer 1's wgmmas are done and the stage's empty barrier says all four warps have read it:
        // it takes the tile after next.
        if (wtid == 0 && tile + 2 * stride < tiles) {
            barrier_wait(ebar + 8 * s, (it >> 1) & 1);   // all four warps have read it (almost always so by now)
            load_tile(stage, x_map, (tile + 2 * stride) * 64, n, xbar + 8 * s);
        }
        layer_done<K1_STEPS>(acc, acc_lo, xh, xl);

        // ---- layer 2: A from layer 1's accumulators: bias and unscale (true values in FP32), a scale
        // per column, then the split with the ReLU in it
        float hmx[2] = {0.0f, 0.0f};
        unsigned hmn[2] = {0xffffffffu, 0xffffffffu};
        float z[32];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const float2 b = bias1[4 * c + q];
#pragma unroll
            for (int i = 0; i < 4; ++i) {   // i >> 1: row g or g + 8
                z[4 * c + i] = fmaf(acc[4 * c + i], e0[i >> 1], fmaf(acc_lo[4 * c + i], e1[i >> 1], (i & 1) ? b.y : b.x));
                track_hidden(z[4 * c + i], hmx[i >> 1], hmn[i >> 1]);
            }
        }
        int sh[2];
#pragma unroll
        for (int rw = 0; rw < 2; ++rw)   // to column_scale's code for the smallest: 2 bits - 2, none = all ones
            sh[rw] = column_scale(hmx[rw], hmn[rw] >= 0x7f800000u ? 0xffffffffu : 2u * hmn[rw], H_TOP, H_SPAN, ew2, bad);
        const float ph0 = pow2f(sh[0]), ph1 = pow2f(sh[1]);
        unsigned hh[K2_STEPS][4], hl[K2_STEPS][4];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            split_relu(z[4 * c] * ph0, z[4 * c + 1] * ph0, hh[c / 2][2 * (c & 1)], hl[c / 2][2 * (c & 1)]);   // row g
            split_relu(z[4 * c + 2] * ph1, z[4 * c + 3] * ph1, hh[c / 2][2 * (c & 1) + 1], hl[c / 2][2 * (c & 1) + 1]);
        }
        const float f0[2] = {c0_2 * pow2f(-sh[0]), c0_2 * pow2f(-sh[1])};
        const float f1[2] = {c1_2 * pow2f(-sh[0]), c1_2 * pow2f(-sh[1])};
        layer_wgmma<K2_STEPS>(acc, acc_lo, hh, hl, desc_lo, desc_hi, W2_HI, W2_LO);
        layer_done<K2_STEPS>(acc, acc_lo, hh, hl);

        // ---- layer 3 in FP32: p[o][r] = sum over this lane's 16 hidden units of W3[o][.] h2[row r]
        float p[OUT][2];
#pragma unroll
        for (int o = 0; o < OUT; ++o) p[o][0] = p[o][1] = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const float2 b = bias2[4 * c + q];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float4 w = w3[4 * (2 * c + e)];
                const float bb = e ? b.y : b.x;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int i = 4 * c + 2 * r + e;
                    const float h2 = fmaxf(fmaf(acc[i], f0[r], fmaf(acc_lo[i], f1[r], bb)), 0.0f);
                    p[0][r] = fmaf(w.x, h2, p[0][r]);
                    p[1][r] = fmaf(w.y, h2, p[1][r]);
                    p[2][r] = fmaf(w.z, h2, p[2][r]);
                    p[3][r] = fmaf(w.w, h2, p[3][r]);
                }
            }
        }
        // Reduce over the 4 lanes of the row group and scatter: lane q ends with output
        // o = 2 (q & 1) + (q >> 1) of both its rows.
        const int b0 = q & 1, b1 = q >> 1;
        float keep[2][2];
#pragma unroll
        for (int oo = 0; oo < 2; ++oo)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float mine = b0 ? p[2 + oo][r] : p[oo][r], theirs = b0 ? p[oo][r] : p[2 + oo][r];
                keep[oo][r] = mine + __shfl_xor_sync(0xffffffffu, theirs, 1);
            }
        float out[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float mine = b1 ? keep[1][r] : keep[0][r], theirs = b1 ? keep[0][r] : keep[1][r];
            out[r] = mine + __shfl_xor_sync(0xffffffffu, theirs, 2);
        }
        const int o = 2 * b0 + b1;

        // Lane group g (lanes 4g .. 4g + 3) holds columns cc, cc + 1: if any of its lanes saw a value
        // outside the window, the warp recomputes that pair exactly and the group stores nothing.
        unsigned flagged = __ballot_sync(0xffffffffu, live && bad);
        const bool mine_flagged = (flagged >> (lane & ~3)) & 0xFu;
        while (flagged) {
            const int first = __ffs(flagged) - 1;
            flagged &= ~(0xFu << (first & ~3));
            exact_pair(x, raw, y, n, col0 + 16 * warp + 2 * (first >> 2), lane);
        }
        if (live && !mine_flagged) {
            const float bo = bias3[o];
            float *dst = y + (size_t)o * n + col0 + cc;
            if (col0 + cc + 1 < n)
                *reinterpret_cast<float2 *>(dst) = make_float2(out[0] + bo, out[1] + bo);
            else
                dst[0] = out[0] + bo;
        }
    }
}
