// BENCH-ONLY CANDIDATE (helper s17b): step 17 with the weights multicast to a cluster of 2 blocks.
// MLP step 17 - final, FP32-accurate over FP32's whole range: 3xFP16 with power-of-two scaling
// chosen from the data, and an exact 3xTF32 path for whatever the scaling cannot represent.
//
// Step 15's 3xFP16 split (v = hi + lo, both half) carries 22 significant bits, but only inside
// half's exponent range: above 65504 hi overflows, and below about 2^-3 the residual lo turns
// subnormal and bits are lost (at 1e-6 almost all of them). Multiplying by a power of two is
// exact in float, and because every layer is linear up to a ReLU, which commutes with positive
// scaling (relu(s z) = s relu(z) for s > 0), the network can run on scaled values:
//
//   weights     W_l' = W_l * 2^ew_l, b_l' = b_l * 2^ew_l, ew_l chosen on the host once per weight
//               set so that max |W_l'| lies in [2^14, 2^15);
//   activations per COLUMN c and per layer, a power of two 2^s puts the column's largest
//               |value| in [2^14, 2^15) (x for layer 1, ReLU(h) for layers 2 and 3); a column's
//               scale multiplies one row of the mma's A operand, so it factors out of the dot
//               product and the accumulators hold the true values times 2^(S_c), S_c the sum of
//               the exponents so far; each layer's bias enters as b_l' * 2^(S_c) and the outputs
//               are multiplied by 2^-(S_c + ew_3) at the end.
//
// The residual is stored shifted, lo' = half((v - hi) * 2^11), so that it stays a normal half
// far below hi's range; the two products with a lo' go to their own accumulators, added as
// acc + 2^-11 * acc_lo after each layer (registers, no extra mma). With the largest magnitude at
// 2^14, hi + 2^-11 lo' represents every element v to within max(2^-22 |v|, 2^-36), so every v
// with |v| >= 2^-17 after scaling (within 2^31 of its column's largest) to 2^-19 of itself, and
// zeros exactly. Each product the tensor cores form is then within about 3 * 2^-19 of the exact
// one, which keeps a 71-term dot product inside FP32's own worst-case bound (71 * 2^-24). What
// the scaling cannot represent is detected, not approximated: a column (or a layer of weights)
// whose nonzero magnitudes span more than 2^31,
// a non-finite value, or exponents so extreme that a scaled bias would leave float's range. A
// warp that finds any of these in its tile (a warp vote after each layer) recomputes the whole
// tile with step 13's 3xTF32 arithmetic (TF32 keeps float's 8-bit exponent), reading step 13's
// packed fragments from global memory; weights outside the range send every tile there
// (header flag set by the host). The fast path is step 15's kernel plus the scaling.
//
// Second version (after profiling the first): (1) each warp stages its NEXT tile of x in shared
// memory with cp.async while it computes the current one (the first version loaded x into
// registers at the top of each tile and waited a DRAM latency there: long-scoreboard stalls);
// (2) within a k-step the three products of a group of n-tiles go in three passes, so that the
// two products into one lo accumulator are not back to back; (3) the last layer alternates two
// pairs of accumulators; (4) the outputs are scaled back by two exact power-of-two factors
// instead of ldexpf. MIN_BLOCKS (the host's blocks_per_sm) is the __launch_bounds__ minimum.
// Third change, for small N (a few thousand columns: one tile per warp, so the prologue is on the
// critical path): the block's copy of the weights is cp.async too, issued together with every
// warp's first x tile and waited for once; the plain copy (load, then store) waited a round trip
// to L2 every few 16-byte loads before the first tile could even be staged.
//
// Shared memory: step 15's fragments of the SCALED weights, the scaled biases (136 floats), then
// a header of 8 ints {ew1, ew2, ew3, eb1, eb2, eb3, exact_only, 0}, eb_l being the exponent of
// max |b_l'| (-1000 for an all-zero bias): 39,488 bytes, static. Dynamic: per warp M_TILES x 80
// rows x 20 floats of staged x (6,400 bytes per m-tile), WARPS * M_TILES * 6,400 bytes a block.
//
// Launch: block = 32 * WARPS threads, grid chosen by the host (persistent, grid-stride over
// tiles of 16 * M_TILES columns), dynamic shared memory as above. Arguments: x, the packed
// 3xFP16 weights above, step 13's packed 3xTF32 weights (global memory), y, n.
#include "15_final.cu"

#define FR_UINT4S (S_UINT4S + 2)
#define FR_SPAN 31                   // largest allowed span of nonzero magnitudes: 2^31
#define FR_TOP 141                   // 127 + 14: scaled maxima land in [2^14, 2^15)
#define FR_LO_SHIFT 2048.0f          // lo is stored times 2^11 ...
#define FR_LO_UNSHIFT 4.8828125e-4f  // ... and its products are accumulated apart, times 2^-11

// (v0, v1) -> a __half2 of their hi parts and one of their residuals times 2^11.
static __device__ __forceinline__ void split2_shifted(float v0, float v1, unsigned &hi, unsigned &lo)
{
    const __half2 h = __floats2half2_rn(v0, v1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn((v0 - back.x) * FR_LO_SHIFT, (v1 - back.y) * FR_LO_SHIFT);
    hi = *reinterpret_cast<const unsigned *>(&h);
    lo = *reinterpret_cast<const unsigned *>(&l);
}

// hi * hi into acc; lo' * hi + hi * lo' (both lo' shifted by 2^11) into acc_lo.
static __device__ __forceinline__ void mma_3xf16_split(float (&acc)[4], float (&acc_lo)[4], const unsigned (&a_hi)[4],
                                                       const unsigned (&a_lo)[4], uint4 b)
{
    mma_f16x(acc_lo, a_lo, b.x, b.y);
    mma_f16x(acc_lo, a_hi, b.z, b.w);
    mma_f16x(acc, a_hi, b.x, b.y);
}

static __device__ __forceinline__ float pow2f(int e)  // 2^e for -126 <= e <= 127
{
    return __int_as_float((e + 127) << 23);
}

// Track a column's largest magnitude (a float max with |.| is one instruction) and its smallest
// nonzero one as 2 |v|bits - 1, unsigned: the shift drops the sign, zeros wrap to the largest
// value and so never win the minimum (one multiply-add and one min).
static __device__ __forceinline__ void track(float v, float &mx, unsigned &mn)
{
    mx = fmaxf(mx, fabsf(v));
    mn = min(mn, (__float_as_uint(v) << 1) - 1u);
}

// Reduce over the four lanes (q = 0..3) that share a column, then turn the column's largest and
// smallest nonzero magnitudes into a scale exponent; flags what the scaling cannot represent.
static __device__ __forceinline__ int column_scale(float mxf, unsigned mn, bool &bad)
{
    mxf = fmaxf(mxf, __shfl_xor_sync(0xffffffffu, mxf, 1));
    mxf = fmaxf(mxf, __shfl_xor_sync(0xffffffffu, mxf, 2));
    mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, 1));
    mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, 2));
    const unsigned mx = __float_as_uint(mxf);
    if (mx == 0) return 0;                           // an all-zero column: nothing to scale
    const int emx = (int)(mx >> 23), emn = (int)((mn + 1u) >> 24);
    bad |= emx == 255;                               // inf (a NaN propagates as in FP32)
    bad |= emn < emx - FR_SPAN;                      // a nonzero value too small beside the largest
    const int s = FR_TOP - emx;
    bad |= s > 100 || s < -100;
    return max(-100, min(100, s));
}

// ---------------------------------------------------------------- the exact path (3xTF32)
// Step 13's tile computation for one tile of 16 * M_TILES columns, one 16-column m-tile at a
// time, with the packed fragments read from global memory (L1/L2-resident, 297 KB).
static __device__ __noinline__ void exact_tile(const float *__restrict__ x, const float4 *__restrict__ tp,
                                               float *__restrict__ y, int n, int col0, int lane)
{
    const float4 *f1 = tp, *f2 = f1 + TC_F1, *f3 = f2 + TC_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + TC_F3);
    const int g = lane / 4, q = lane % 4;
    for (int m = 0; m < M_TILES; ++m) {
        const int col = col0 + 16 * m + g;
        float acc[TC_NT][4];
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt) {
            acc[nt][0] = acc[nt][2] = __ldg(bias + 8 * nt + 2 * q);
            acc[nt][1] = acc[nt][3] = __ldg(bias + 8 * nt + 2 * q + 1);
        }
#pragma unroll
        for (int j = 0; j < TC_K1; ++j) {
            const int k = 8 * j + q;
            float v[4];
            v[0] = (k < IN && col < n) ? __ldg(x + (size_t)k * n + col) : 0.0f;
            v[1] = (k < IN && col + 8 < n) ? __ldg(x + (size_t)k * n + col + 8) : 0.0f;
            v[2] = (k + 4 < IN && col < n) ? __ldg(x + (size_t)(k + 4) * n + col) : 0.0f;
            v[3] = (k + 4 < IN && col + 8 < n) ? __ldg(x + (size_t)(k + 4) * n + col + 8) : 0.0f;
            unsigned big[4], small[4];
            split4(v, big, small);
#pragma unroll
            for (int nt = 0; nt < TC_NT; ++nt) mma_3xtf32(acc[nt], big, small, __ldg(f1 + (j * TC_NT + nt) * 32 + lane));
        }
        float acc2[TC_NT][4];
#pragma unroll
        for (int nt = 0; nt < TC_NT; ++nt) {
            acc2[nt][0] = acc2[nt][2] = __ldg(bias + HIDDEN + 8 * nt + 2 * q);
            acc2[nt][1] = acc2[nt][3] = __ldg(bias + HIDDEN + 8 * nt + 2 * q + 1);
        }
#pragma unroll
        for (int j = 0; j < TC_K2; ++j) {
            const float v[4] = {fmaxf(acc[j][0], 0.0f), fmaxf(acc[j][2], 0.0f), fmaxf(acc[j][1], 0.0f),
                                fmaxf(acc[j][3], 0.0f)};
            unsigned big[4], small[4];
            split4(v, big, small);
#pragma unroll
            for (int nt = 0; nt < TC_NT; ++nt) mma_3xtf32(acc2[nt], big, small, __ldg(f2 + (j * TC_NT + nt) * 32 + lane));
        }
        float out[4];
        out[0] = out[2] = __ldg(bias + 2 * HIDDEN + 2 * q);
        out[1] = out[3] = __ldg(bias + 2 * HIDDEN + 2 * q + 1);
#pragma unroll
        for (int j = 0; j < TC_K2; ++j) {
            const float v[4] = {fmaxf(acc2[j][0], 0.0f), fmaxf(acc2[j][2], 0.0f), fmaxf(acc2[j][1], 0.0f),
                                fmaxf(acc2[j][3], 0.0f)};
            unsigned big[4], small[4];
            split4(v, big, small);
            mma_3xtf32(out, big, small, __ldg(f3 + j * 32 + lane));
        }
        if (q < OUT / 2) {
            if (col < n) {
                y[(size_t)(2 * q) * n + col] = out[0];
                y[(size_t)(2 * q + 1) * n + col] = out[1];
            }
            if (col + 8 < n) {
                y[(size_t)(2 * q) * n + col + 8] = out[2];
                y[(size_t)(2 * q + 1) * n + col + 8] = out[3];
            }
        }
    }
}

// ---------------------------------------------------------------- staging x (cp.async)
// Each warp owns a buffer of M_TILES x 80 rows x XS_STRIDE floats in dynamic shared memory. The
// warp copies its NEXT tile's x there (cp.async: no registers, no wait) right after it has read
// the current tile's fragments, so a whole tile of tensor work hides the DRAM latency. Rows 71-79
// are zeroed once and never written; columns past n are zero-filled by the copy (src-size 0).
// Row stride 20 floats: lane (g, q) reads row 16 j + 2q + .., column g + ..: bank 8q + g + const,
// so the 40 fragment reads per m-tile are conflict-free.
#define XS_STRIDE 20
#define XS_ROWS 80
#define XS_FLOATS (XS_ROWS * XS_STRIDE)   // 6,400 bytes per m-tile

static __device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}

// Copy the 71 x (16 M_TILES) block of x starting at column col0 into buf (one commit group).
// vec (x 16-byte aligned, n % 4 == 0) and a full tile: 16-byte chunks; lane l copies chunk l % 4
// of rows l / 4 + 8 t (t = 0..8, rows < 71), so its source only moves by 8 rows per copy and its
// destination is a compile-time offset. Otherwise (a ragged last tile, or x not 16-byte aligned)
// one 4-byte copy per element, columns past n zero-filled (src-size 0).
static __device__ __forceinline__ void stage_x(float *buf, const float *__restrict__ x, int n, int col0, int lane,
                                               bool vec)
{
    if (vec && col0 + 16 * M_TILES <= n) {
        const float *src = x + (size_t)(lane >> 2) * n + col0 + 4 * (lane & 3);
        float *dst = buf + (lane >> 2) * XS_STRIDE + 4 * (lane & 3);
        const size_t step = (size_t)8 * n;
#pragma unroll
        for (int t = 0; t < 9; ++t) {
            if (t < 8 || (lane >> 2) < IN - 64) {
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) cp_async16(dst + m * XS_FLOATS + 8 * t * XS_STRIDE, src + 16 * m, 16);
            }
            src += step;
        }
    } else {
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) {
            float *b = buf + m * XS_FLOATS;
            const int c0 = col0 + 16 * m;
#pragma unroll 4
            for (int i = lane; i < IN * 16; i += 32) {
                const int row = i >> 4, c = c0 + (i & 15);
                cp_async4(b + row * XS_STRIDE + (i & 15), c < n ? x + (size_t)row * n + c : x, c < n ? 4 : 0);
            }
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// ---------------------------------------------------------------- the scaled 3xFP16 path
#ifndef NT_GROUPS
#define NT_GROUPS 2
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#define NT_G (S_NT / NT_GROUPS)

// One hidden layer on split operands (KS k-steps): acc[m][nt] = bias * 2^S + A * B, with the
// two lo' products of each n-tile group accumulated apart and folded in as acc + 2^-11 acc_lo.
// Within a k-step the group's products go in three passes (lo' x hi, hi x lo', hi x hi) so that
// two products into one accumulator are NT_G * M_TILES mma's apart, not back to back.
template <int KS>
static __device__ __forceinline__ void layer_groups(float (&acc)[M_TILES][S_NT][4], const unsigned (&ah)[M_TILES][KS][4],
                                                    const unsigned (&al)[M_TILES][KS][4], const uint4 *frag,
                                                    const float *bias, const int (&S)[M_TILES][2], int q, int lane)
{
#pragma unroll
    for (int grp = 0; grp < NT_GROUPS; ++grp) {
        float lo_acc[M_TILES][NT_G][4];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) {
            const float p0 = pow2f(S[m][0]), p1 = pow2f(S[m][1]);
#pragma unroll
            for (int t = 0; t < NT_G; ++t) {
                const int nt = grp * NT_G + t;
                const float b0 = bias[8 * nt + 2 * q], b1 = bias[8 * nt + 2 * q + 1];
                acc[m][nt][0] = b0 * p0;
                acc[m][nt][1] = b1 * p0;
                acc[m][nt][2] = b0 * p1;
                acc[m][nt][3] = b1 * p1;
                lo_acc[m][t][0] = lo_acc[m][t][1] = lo_acc[m][t][2] = lo_acc[m][t][3] = 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < KS; ++j) {
            uint4 b[NT_G];
#pragma unroll
            for (int t = 0; t < NT_G; ++t) b[t] = frag[(j * S_NT + grp * NT_G + t) * 32 + lane];
#pragma unroll
            for (int t = 0; t < NT_G; ++t)
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_f16x(lo_acc[m][t], al[m][j], b[t].x, b[t].y);
#pragma unroll
            for (int t = 0; t < NT_G; ++t)
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_f16x(lo_acc[m][t], ah[m][j], b[t].z, b[t].w);
#pragma unroll
            for (int t = 0; t < NT_G; ++t)
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_f16x(acc[m][grp * NT_G + t], ah[m][j], b[t].x, b[t].y);
        }
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int t = 0; t < NT_G; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    acc[m][grp * NT_G + t][i] = fmaf(lo_acc[m][t][i], FR_LO_UNSHIFT, acc[m][grp * NT_G + t][i]);
    }
}

// v * 2^e for |e| <= 252 (|S| <= 126 by the votes, |ew| <= 125 by the host): two factors 2^(e/2)
// and 2^(e - e/2), each a normal float. The first product is exact unless it is already subnormal,
// in which case the result lies below 2^-126 and may be one subnormal step off; otherwise only
// the second product rounds, correctly, also into subnormals (what ldexpf gives, in 2 FMULs).
static __device__ __forceinline__ float unscale(float v, int e)
{
    const int h = e / 2;
    return (v * pow2f(h)) * pow2f(e - h);
}

// ReLU, then rescale per column (rows g: c = 0, acc[..][0..1]; rows g + 8: c = 1, acc[..][2..3]);
// S[m][c] += ew + r; flags a span or exponent the scaling cannot hold.
static __device__ __forceinline__ void relu_rescale(float (&acc)[M_TILES][S_NT][4], int (&S)[M_TILES][2], int ew,
                                                    int eb_next, bool &bad)
{
#pragma unroll
    for (int m = 0; m < M_TILES; ++m)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float mx = 0.0f;
            unsigned mn = 0xffffffffu;
#pragma unroll
            for (int nt = 0; nt < S_NT; ++nt) {
                acc[m][nt][2 * c] = fmaxf(acc[m][nt][2 * c], 0.0f);
                acc[m][nt][2 * c + 1] = fmaxf(acc[m][nt][2 * c + 1], 0.0f);
                track(acc[m][nt][2 * c], mx, mn);
                track(acc[m][nt][2 * c + 1], mx, mn);
            }
            const int r = column_scale(mx, mn, bad);
            const float p = pow2f(r);
#pragma unroll
            for (int nt = 0; nt < S_NT; ++nt) {
                acc[m][nt][2 * c] *= p;
                acc[m][nt][2 * c + 1] *= p;
            }
            S[m][c] += ew + r;
            bad |= S[m][c] + eb_next > 120 || S[m][c] > 126 || S[m][c] < -126;
        }
}

// Wait until phase 0 of the mbarrier at shared address bar has completed (acquire: the copies that
// arrived on it are visible); once it has, this returns at once.
static __device__ __forceinline__ void wait_ready(unsigned bar)
{
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar) : "memory");
    } while (!done);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(WARPS * 32, MIN_BLOCKS)
fullRange3xFP16Kernel(const float *__restrict__ x, const uint4 *__restrict__ packed,
                      const float4 *__restrict__ tf32_packed, float *__restrict__ y, int n)
{
    __shared__ uint4 smem[FR_UINT4S];
    __shared__ unsigned long long bars[2];   // [0]: f1, biases, header; [1]: f2, f3 (bytes landed)
    extern __shared__ __align__(16) float xstage[];   // WARPS x M_TILES x XS_FLOATS
    // MULTICAST candidate (bench only): a cluster of 2 blocks fetches the weights once; block rank
    // 0 copies f1, rank 1 the biases + header and f2 + f3, each as one bulk copy multicast to both
    // blocks; each block's barrier counts the bytes landing in its own shared memory.
    const unsigned ready = (unsigned)__cvta_generic_to_shared(&bars[0]);
    const unsigned ready2 = (unsigned)__cvta_generic_to_shared(&bars[1]);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float *buf = xstage + warp * (M_TILES * XS_FLOATS);
    const int tiles = (n + 16 * M_TILES - 1) / (16 * M_TILES);
    const int stride = gridDim.x * WARPS;
    const bool vec = (reinterpret_cast<size_t>(x) % 16 == 0) && (n % 4 == 0);
    int tile = blockIdx.x * WARPS + warp;
    if (tile < tiles) stage_x(buf, x, n, tile * 16 * M_TILES, lane, vec);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ready) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ready2) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    for (int i = lane; i < M_TILES * (XS_ROWS - IN) * XS_STRIDE; i += 32) {
        const int m = i / ((XS_ROWS - IN) * XS_STRIDE), r = i % ((XS_ROWS - IN) * XS_STRIDE);
        buf[m * XS_FLOATS + IN * XS_STRIDE + r] = 0.0f;
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (threadIdx.x == 0) {
        unsigned rank;
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ready), "r"((S_F1 + 36) * 16) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ready2), "r"((S_F2 + S_F3) * 16) : "memory");
        const unsigned short mask = 3;
        const unsigned s0 = (unsigned)__cvta_generic_to_shared(smem);
        if (rank == 0) {
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                         ::"r"(s0), "l"(packed), "r"(S_F1 * 16), "r"(ready), "h"(mask) : "memory");
        } else {
            const int o = S_F1 + S_F2 + S_F3;
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                         ::"r"(s0 + o * 16), "l"(packed + o), "r"(36 * 16), "r"(ready), "h"(mask) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                         ::"r"(s0 + S_F1 * 16), "l"(packed + S_F1), "r"((S_F2 + S_F3) * 16), "r"(ready2), "h"(mask) : "memory");
        }
    }
    wait_ready(ready);   // f1, biases and header have landed
    const uint4 *f1 = smem;
    const uint4 *f2 = f1 + S_F1;
    const uint4 *f3 = f2 + S_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + S_F3);
    const int *hdr = reinterpret_cast<const int *>(smem + S_UINT4S);
    const int ew1 = hdr[0], ew2 = hdr[1], ew3 = hdr[2], eb1 = hdr[3], eb2 = hdr[4], eb3 = hdr[5];
    const bool exact_only = hdr[6] != 0;

    const int g = lane / 4, q = lane % 4;

    if (exact_only) {   // weights the scaling cannot hold: every tile takes the 3xTF32 path
        for (; tile < tiles; tile += stride) exact_tile(x, tf32_packed, y, n, tile * 16 * M_TILES, lane);
        wait_ready(ready2);   // nothing of the second batch is left in flight when the block exits
        return;
    }

    for (; tile < tiles; tile += stride) {
        const int col0 = tile * 16 * M_TILES;

        // This tile's fragments (lane: 40 values per m-tile, columns g and g + 8) from the stage,
        // then the next tile's copy goes out. The first tile's copy was waited for above (a
        // wait_group 0 here would also wait for the second batch of weights).
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
        float v[M_TILES][S_K1][8];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int j = 0; j < S_K1; ++j)
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int k = 16 * j + 2 * q + (e & 1) + ((e & 4) ? 8 : 0);
                    v[m][j][e] = buf[m * XS_FLOATS + k * XS_STRIDE + g + ((e & 2) ? 8 : 0)];
                }
        __syncwarp();
        if (tile + stride < tiles) stage_x(buf, x, n, (tile + stride) * 16 * M_TILES, lane, vec);
        // Column scales of x. S[m][c]: the column's activation exponent so far, so that layer l's
        // accumulators hold (true value) * 2^(S + ew_l) and its bias enters as b_l' * 2^S.
        bool bad = false;
        int S[M_TILES][2];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                float mx = 0.0f;
                unsigned mn = 0xffffffffu;
#pragma unroll
                for (int j = 0; j < S_K1; ++j)
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        if (((e & 2) != 0) == (c == 1)) track(v[m][j][e], mx, mn);
                const int s = column_scale(mx, mn, bad);
                const float p = pow2f(s);
#pragma unroll
                for (int j = 0; j < S_K1; ++j)
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        if (((e & 2) != 0) == (c == 1)) v[m][j][e] *= p;
                S[m][c] = s;
                bad |= s + eb1 > 120;
            }
        if (__any_sync(0xffffffffu, bad)) {
            exact_tile(x, tf32_packed, y, n, col0, lane);
            continue;
        }

        // Layer 1 (step 15's, on scaled values); the bias enters scaled like the column. The
        // operands are split once; the 8 n-tiles go in NT_GROUPS groups, each with its own
        // short-lived lo accumulators, so that fewer accumulators are live at a time.
        unsigned xh[M_TILES][S_K1][4], xl[M_TILES][S_K1][4];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int j = 0; j < S_K1; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) split2_shifted(v[m][j][2 * r], v[m][j][2 * r + 1], xh[m][j][r], xl[m][j][r]);
        float acc[M_TILES][S_NT][4];
        layer_groups<S_K1>(acc, xh, xl, f1, bias, S, q, lane);
        relu_rescale(acc, S, ew1, eb2, bad);
        if (__any_sync(0xffffffffu, bad)) {
            exact_tile(x, tf32_packed, y, n, col0, lane);
            continue;
        }

        unsigned hh[M_TILES][S_K2][4], hl[M_TILES][S_K2][4];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int j = 0; j < S_K2; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float *c = acc[m][2 * j + r / 2] + 2 * (r % 2);
                    split2_shifted(c[0], c[1], hh[m][j][r], hl[m][j][r]);   // already ReLU'd and scaled
                }
        wait_ready(ready2);   // f2 and f3 have landed (returns at once after the first tile)
        float acc2[M_TILES][S_NT][4];
        layer_groups<S_K2>(acc2, hh, hl, f2, bias + HIDDEN, S, q, lane);
        relu_rescale(acc2, S, ew2, eb3, bad);
        if (__any_sync(0xffffffffu, bad)) {
            exact_tile(x, tf32_packed, y, n, col0, lane);
            continue;
        }

        // Layer 3: one n-tile; even and odd k-steps go to separate accumulators (shorter chains).
        float out[M_TILES][2][4], lo_out[M_TILES][2][4];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) {
            const float p0 = pow2f(S[m][0]), p1 = pow2f(S[m][1]);
            const float b0 = bias[2 * HIDDEN + 2 * q], b1 = bias[2 * HIDDEN + 2 * q + 1];
            out[m][0][0] = b0 * p0;
            out[m][0][1] = b1 * p0;
            out[m][0][2] = b0 * p1;
            out[m][0][3] = b1 * p1;
#pragma unroll
            for (int i = 0; i < 4; ++i) out[m][1][i] = lo_out[m][0][i] = lo_out[m][1][i] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < S_K2; ++j) {
            const uint4 b = f3[j * 32 + lane];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                unsigned hi[4], lo[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float *c = acc2[m][2 * j + r / 2] + 2 * (r % 2);
                    split2_shifted(c[0], c[1], hi[r], lo[r]);
                }
                mma_3xf16_split(out[m][j & 1], lo_out[m][j & 1], hi, lo, b);
            }
        }
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                out[m][0][i] = (out[m][0][i] + out[m][1][i]) + FR_LO_UNSHIFT * (lo_out[m][0][i] + lo_out[m][1][i]);

        // Undo the column's scale: y = out * 2^-(S + ew3) (unscale above).
        if (q < OUT / 2) {
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                const int col = col0 + 16 * m + g;
                if (col < n) {
                    y[(size_t)(2 * q) * n + col] = unscale(out[m][0][0], -S[m][0] - ew3);
                    y[(size_t)(2 * q + 1) * n + col] = unscale(out[m][0][1], -S[m][0] - ew3);
                }
                if (col + 8 < n) {
                    y[(size_t)(2 * q) * n + col + 8] = unscale(out[m][0][2], -S[m][1] - ew3);
                    y[(size_t)(2 * q + 1) * n + col + 8] = unscale(out[m][0][3], -S[m][1] - ew3);
                }
            }
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    wait_ready(ready2);   // warps without a tile: nothing left in flight when the block exits
}
