// LeNet step 15 - Hopper final: both layers on tensor cores at FP32-level accuracy, with an
// FP16 hi/lo split and mma.sync, a Toeplitz form of the weights and a persistent grid.
//
//   y[b][m][h][w] = sum over c, p, q of x[b][c][h + p][w + q] * k[m][c][p][q]
//
// Why step 14 stopped at 1.96 ms: its C3 kernel (3xTF32, m16n8k8, pixels as the B operand) had
// each input fragment feed only the 3 products of one 16-map tile, and read hi and lo TF32
// copies of it from shared memory: 512 bytes of shared loads per 3 mma, so it ran into the
// shared-memory pipe (L1 87 %) long before the tensor pipe; its C1 kernel ran 12.5 G FFMAs on
// CUDA cores, at ~80 % of the FP32 issue rate, so it could not reach C1's memory floor.
//
// What this kernel does instead (one kernel for both layers, shape fixed at compile time):
//
// 1. The matrix product is arranged so that the *weights* form the B operand, as a Toeplitz
//    matrix, and the input rows form A without any duplication (no im2col):
//      A (16 x 16)  rows = 16 "positions", k = two input rows of 8 columns each
//                   A[pos][8*s + i] = x[c_s][h_pos + p_s][2*wp_pos + i]   (s = 0, 1; i = 0..7)
//      B (16 x 8)   columns n = 4 maps x 2 horizontal offsets j (n = 2*map + j)
//                   B[8*s + i][n] = k[map][c_s][p_s][i - j]   (0 where i - j is outside 0..K-1)
//      D (16 x 8)   D[pos][2*map + j] = y[map][h_pos][2*wp_pos + j]
//    A "position" is a pair of neighbouring outputs (2*wp, 2*wp + 1) of one row h. The k
//    dimension runs over the flattened (c, p) input rows, two rows per mma (C*K rows -> C*K/2
//    k-steps: C3 28 rows = 14 steps exactly, C1 7 rows = 4 steps, the last half zero), and
//    over 8 input columns: with K = 7 taps the window of 8 columns covers both offsets j = 0
//    and j = 1, so 7 of every 8 products are useful (87.5 %, the same as step 14's 7-of-8).
//    Each A fragment (one LDS.32 per register: two neighbouring FP16 columns, always at an even
//    column, so the half2 word is aligned) feeds MGW map groups of 4 maps, and each B fragment
//    (one LDS.128 per lane, hi and lo together) feeds NT position tiles.
//
// 2. FP16 hi/lo split instead of 3xTF32: m16n8k16 does twice the multiply-adds of the TF32
//    m16n8k8 per instruction at the same issue rate, and one 32-bit register holds two values.
//    Every operand v becomes v*s = hi + lo with hi = fp16(v*s), lo = fp16(v*s - hi) (the
//    difference is exact in FP32), and y*s_x*s_w = xl*wh + xh*wl + xh*wh (small terms first,
//    FP32 accumulation). hi and lo keep 11 bits each, so the operands carry ~22 bits and the
//    dropped xl*wl term is ~2^-22 relative: FP32-level, like 3xTF32. FP16 has a narrow exponent
//    range, hence the power-of-two scales: s_x per image (its max |x| is mapped into
//    [2^14, 2^15)) and s_w per launch (max |k|), undone exactly on the FP32 output. Small
//    values lose their lo bits to FP16 subnormals only below 2^-38 of the image's largest
//    value, far under the tolerance.
//    (Inputs with Inf/NaN: no scaling is applied and the result is not IEEE-faithful.)
//
// 3. Persistent grid (grid = SMs x blocks per SM, each block loops over images): the weight
//    fragments (C3: 28 KB, built from k with scaling, splitting and the Toeplitz shift) are
//    built once per block, not once per image. Per image the block
//      a. has the image's FP32 values in registers (float4 loads, coalesced; with PREFETCH = 1
//         they were loaded while the previous image was being computed),
//      b. reduces max |x| over the block (one barrier) for the scale,
//      c. writes the hi and lo FP16 planes to shared memory, rows padded to RS columns,
//      d. computes: warp w takes position tiles w, w + WARPS, ... (NT at a time, 16 positions
//         each; a tile past the image is skipped by the whole warp) for MGW map groups,
//      e. stores: lane (g, t) holds map t of its group for positions g and g + 8, two
//         neighbouring outputs each. Where a row has an even number of positions and W_out % 4
//         == 0 (C1) one shuffle with the lane 4 apart makes that 4 neighbouring outputs, one
//         16-byte store; otherwise 8-byte stores (C3: W_out = 34).
//
// conv_generic: any shape (K > 7, too much shared memory, ...), FP32 on CUDA cores, one output
// per thread. Slow, exact, and only there so that no shape is refused; the Python side says
// when it takes it.
//
// Layouts (row-major, float32): x: B x C x H x W, k: M x C x K x K, y: B x M x H_out x W_out.
//
// Launch (done by kernelbook.lenet.hopper.HopperFinal):
//   conv_hopper:  block THREADS, grid min(B, SMs * blocks per SM), dynamic shared memory
//                 SMEM_BYTES = 4 * (2 * PLANE_WORDS + WF_WORDS) (see below; the launch raises the
//                 kernel's dynamic limit past 48 KiB)
//   conv_generic: block 256, grid ceil(B*M*H_out*W_out / 256) (at most 2^31 - 1 outputs)
//
// Compile-time parameters (-D...):
//   KS, CIN, HIN, WIN, MOUT  the shape (K <= 7)
//   THREADS                  threads per block (whole warps)
//   NT                       position tiles per warp at a time (accumulators NT * MGW * 4)
//   MGW                      map groups (of 4 maps) per warp at a time
//   PREFETCH                 1: load the next image into registers during this image's compute
//   STORE_CS                 1: streaming stores (st.global.cs: evict-first in L2)
//   MIN_BLOCKS               __launch_bounds__ minimum blocks per SM (register cap)
//   MMA_ORDERED              1: mma asm volatile (kept in source order)
//   INTERLEAVE               1: accumulate() (products interleaved over tiles and groups; C1's
//                            best with MMA_ORDERED 0); 0: per tile, its products adjacent (C3's best)
//   GENERIC_ONLY             1: only conv_generic (the shape macros are then ignored)

#ifndef GENERIC_ONLY
#define GENERIC_ONLY 0
#endif
#ifndef KS
#define KS 7
#endif
#ifndef CIN
#define CIN 4
#endif
#ifndef HIN
#define HIN 40
#endif
#ifndef WIN
#define WIN 40
#endif
#ifndef MOUT
#define MOUT 16
#endif
#ifndef THREADS
#define THREADS 256
#endif
#ifndef NT
#define NT 5
#endif
#ifndef MGW
#define MGW 4
#endif
#ifndef PREFETCH
#define PREFETCH 0
#endif
#ifndef STORE_CS
#define STORE_CS 0
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef MMA_ORDERED
#define MMA_ORDERED 1
#endif
#ifndef INTERLEAVE
#define INTERLEAVE 1
#endif

// ------------------------------------------------------------------ small helpers

// FP32 <-> FP16 through PTX, so that no CUDA header is needed (NVRTC may lack cuda_fp16.h).
__device__ __forceinline__ unsigned short f32_to_f16(float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ float f16_to_f32(unsigned short h)
{
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h));
    return v;
}

// v = hi + lo with both in FP16; v - hi is exact in FP32 (hi is v rounded to 11 bits).
__device__ __forceinline__ void split_f16(float v, unsigned &hi, unsigned &lo)
{
    const unsigned short h = f32_to_f16(v);
    hi = h;
    lo = f32_to_f16(v - f16_to_f32(h));
}

// 2^e as a float, e in -126 .. 127.
__device__ __forceinline__ float pow2(int e)
{
    return __uint_as_float((unsigned)(e + 127) << 23);
}

// The exponent e that maps m (a max |value|) into [2^14, 2^15): FP16 holds up to 65504, and a
// high top keeps small values away from FP16's subnormal range. 0 (no scaling) for zero, Inf
// or NaN; clamped so that 2^e and 2^-e stay normal floats.
__device__ __forceinline__ int scale_exponent(float m)
{
    if (!(m > 0.0f) || !(m <= 3.0e38f)) {
        return 0;
    }
    const int e = (int)((__float_as_uint(m) >> 23) & 255u) - 127;  // floor(log2 m); -127 if subnormal
    const int s = 14 - e;
    return s > 126 ? 126 : (s < -126 ? -126 : s);
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    // MMA_ORDERED = 1: volatile, so the products stay in source order (accumulate() orders them
    // so that consecutive ones go to different accumulators; fewer registers). 0: the compiler
    // may move them (it then hoists more loads: more registers). In the first version the three
    // products of one accumulator were adjacent and volatile: ncu's "wait" stall dominated.
#if MMA_ORDERED
    asm volatile(
#else
    asm(
#endif
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store2(float *p, float a, float b)
{
#if STORE_CS
    asm volatile("st.global.cs.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
#endif
}

__device__ __forceinline__ void store4(float *p, float a, float b, float c, float d)
{
#if STORE_CS
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
    *reinterpret_cast<float4 *>(p) = make_float4(a, b, c, d);
#endif
}

// The block's max of v (v >= 0); red holds one float per warp. Contains one __syncthreads: the
// caller must not write red again before every thread has passed the next barrier.
template <int NWARPS>
__device__ __forceinline__ float block_max(float v, float *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    if ((threadIdx.x & 31) == 0) {
        red[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    float m = red[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) {
        m = fmaxf(m, red[w]);
    }
    return m;
}

// ------------------------------------------------------------------ the tensor-core kernel

#if !GENERIC_ONLY
constexpr int HOUT = HIN - KS + 1;
constexpr int WOUT = WIN - KS + 1;
constexpr int WP = (WOUT + 1) / 2;             // positions (output pairs) per row
constexpr int NPOS = HOUT * WP;
constexpr int NTILES = (NPOS + 15) / 16;       // 16 positions per mma row tile
constexpr int ROWS = CIN * KS;                 // (c, p) input rows of the reduction
constexpr int NPAIRS = (ROWS + 1) / 2;         // k-steps: two rows each
constexpr int NGRP = (MOUT + 3) / 4;           // map groups of 4 (8 mma columns = 4 maps x 2 offsets)
// A position reads columns 2*wp .. 2*wp + 7; the last one 2*(WP - 1) + 7 may pass the image
// (K < 7 or W_out odd): those columns are zeros.
constexpr int RS_MIN = (2 * WP + 6) > WIN ? (2 * WP + 6) : WIN;
constexpr int RSW = (RS_MIN + 1) / 2;          // 32-bit words (two FP16 columns) per shared row
constexpr int PLANE_WORDS = CIN * HIN * RSW;   // one of the hi / lo planes
constexpr int WF_WORDS = NPAIRS * NGRP * 32 * 4;
constexpr int SMEM_BYTES = 4 * (2 * PLANE_WORDS + WF_WORDS);  // dynamic shared memory (the Python side computes the same)
static_assert(SMEM_BYTES > 0, "");
constexpr int NELEM = CIN * HIN * WIN;
constexpr bool VEC_LOAD = (NELEM % 4) == 0;    // whole image as float4 (if x is 16-byte aligned)
constexpr int NPRE = VEC_LOAD ? (NELEM / 4 + THREADS - 1) / THREADS : 1;
constexpr int WARPS = THREADS / 32;
constexpr bool STORE16 = (WP % 2 == 0) && (WOUT % 4 == 0);

static_assert(KS >= 1 && KS <= 7, "the 8-column window holds two offsets only for K <= 7");
static_assert(HOUT >= 1 && WOUT >= 1, "the mask must fit in the input");
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
static_assert(NT >= 1 && MGW >= 1, "at least one tile and one map group per warp");

// Word offset of reduction row r = (c, p) in a plane; a padding row (r >= ROWS, weights zero)
// reads row 0, whose values are finite.
__host__ __device__ constexpr int row_offset(int r)
{
    return r < ROWS ? ((r / KS) * HIN + (r % KS)) * RSW : 0;
}

// Global -> registers: the image's values (float4s when possible, one float otherwise: the
// scalar path loads in the fill loop itself).
__device__ __forceinline__ void load_image(float4 (&pre)[NPRE], const float *xb)
{
    const float4 *xb4 = reinterpret_cast<const float4 *>(xb);
#pragma unroll
    for (int i = 0; i < NPRE; ++i) {
        const int v = threadIdx.x + i * THREADS;
        pre[i] = v < NELEM / 4 ? __ldg(xb4 + v) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// One round of tiles: for each k-step (two input rows), the B fragments of MGW map groups (one
// 16-byte load each), the A fragments of the NT tiles (hi and lo, 8 loads each), then the
// products ordered xl*wh for all (tile, group), xh*wl for all, xh*wh for all, so that
// consecutive mma go to different accumulators. FULL: all NT tiles are inside the image (no
// per-tile branch); otherwise tiles u >= nt are skipped.
template <bool FULL>
__device__ __forceinline__ void accumulate(float (&acc)[NT][MGW][4], const unsigned *xhi, const unsigned *xlo,
                                           const uint4 *wf, const int (&base0)[NT], const int (&base1)[NT],
                                           int nt, int gc, int lane)
{
#pragma unroll
    for (int pr = 0; pr < NPAIRS; ++pr) {
        uint4 bw[MGW];
#pragma unroll
        for (int mg = 0; mg < MGW; ++mg) {
            const int grp = gc + mg < NGRP ? gc + mg : NGRP - 1;
            bw[mg] = wf[(pr * NGRP + grp) * 32 + lane];
        }
        const int off0 = row_offset(2 * pr);  // compile-time once unrolled
        const int off1 = row_offset(2 * pr + 1);
        // A: rows g / g + 8 (positions), columns 2t, 2t + 1 of input row 2*pr (registers 0, 1)
        // and of row 2*pr + 1 (registers 2, 3).
        unsigned ah[NT][4], al[NT][4];
#pragma unroll
        for (int u = 0; u < NT; ++u) {
            if (FULL || u < nt) {
                ah[u][0] = xhi[base0[u] + off0];
                ah[u][1] = xhi[base1[u] + off0];
                ah[u][2] = xhi[base0[u] + off1];
                ah[u][3] = xhi[base1[u] + off1];
                al[u][0] = xlo[base0[u] + off0];
                al[u][1] = xlo[base1[u] + off0];
                al[u][2] = xlo[base0[u] + off1];
                al[u][3] = xlo[base1[u] + off1];
            }
        }
#pragma unroll
        for (int prod = 0; prod < 3; ++prod) {
#pragma unroll
            for (int u = 0; u < NT; ++u) {
                if (FULL || u < nt) {
#pragma unroll
                    for (int mg = 0; mg < MGW; ++mg) {
                        if (NGRP % MGW == 0 || gc + mg < NGRP) {
                            if (prod == 0) {
                                mma_f16(acc[u][mg], al[u], bw[mg].x, bw[mg].y);  // xl * wh
                            } else if (prod == 1) {
                                mma_f16(acc[u][mg], ah[u], bw[mg].z, bw[mg].w);  // xh * wl
                            } else {
                                mma_f16(acc[u][mg], ah[u], bw[mg].x, bw[mg].y);  // xh * wh
                            }
                        }
                    }
                }
            }
        }
    }
}

// The weights, once per block: scaled by sw, split into hi and lo FP16 parts and laid out as the
// B fragments of the Toeplitz (shifted-mask) product, in the order the lanes read them
// (wf[pair][group][lane], one uint4 {hi0, hi1, lo0, lo1} each).
__device__ __forceinline__ void pack_weight_fragments(uint4 *wf, const float *__restrict__ k, float sw, int tid)
{
    // Lane (g, t) of the B fragment holds rows k = 2t, 2t + 1 (register 0) and 2t + 8, 2t + 9
    // (register 1) of column n = g, i.e. map 4*group + g/2, offset j = g % 2. Register r is
    // input row 2*pair + r; element h of it is column i = 2t + h, tap q = i - j.
    for (int i = tid; i < NPAIRS * NGRP * 32; i += THREADS) {
        const int pr = i / (NGRP * 32);
        const int grp = (i / 32) % NGRP;
        const int ln = i & 31;
        const int map = grp * 4 + ((ln >> 2) >> 1);
        const int j = (ln >> 2) & 1;
        unsigned hi[2], lo[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = 2 * pr + r;
            const int c = row / KS;
            const int p = row - c * KS;
            hi[r] = 0u;
            lo[r] = 0u;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int q = 2 * (ln & 3) + h - j;
                const float w = (row < ROWS && map < MOUT && q >= 0 && q < KS)
                                    ? __ldg(k + ((map * CIN + c) * KS + p) * KS + q) * sw
                                    : 0.0f;
                unsigned wh, wl;
                split_f16(w, wh, wl);
                hi[r] |= wh << (16 * h);
                lo[r] |= wl << (16 * h);
            }
        }
        wf[i] = make_uint4(hi[0], hi[1], lo[0], lo[1]);
    }
}

// c.: the image, scaled by sx, as FP16 hi / lo planes in shared memory (rows RSW words apart),
// from the registers (vec) or from global memory.
__device__ __forceinline__ void fill_planes(unsigned *xhi, unsigned *xlo, const float4 (&pre)[NPRE],
                                            const float *__restrict__ xb, float sx, bool vec, int tid)
{
    if (vec) {
#pragma unroll
        for (int i = 0; i < NPRE; ++i) {
            const int v = tid + i * THREADS;
            if (v < NELEM / 4) {
                const float vals[4] = {pre[i].x * sx, pre[i].y * sx, pre[i].z * sx, pre[i].w * sx};
                if (WIN % 2 == 0) {
                    // Element pairs (4v, 4v + 1), (4v + 2, 4v + 3) share a row and start at
                    // an even column: one word per plane each.
#pragma unroll
                    for (int hp = 0; hp < 2; ++hp) {
                        const int e = 4 * v + 2 * hp;
                        const int crow = e / WIN;  // c * HIN + row
                        const int col = e - crow * WIN;
                        unsigned h0, l0, h1, l1;
                        split_f16(vals[2 * hp], h0, l0);
                        split_f16(vals[2 * hp + 1], h1, l1);
                        const int wdx = crow * RSW + (col >> 1);
                        xhi[wdx] = h0 | (h1 << 16);
                        xlo[wdx] = l0 | (l1 << 16);
                    }
                } else {
                    unsigned short *hh = reinterpret_cast<unsigned short *>(xhi);
                    unsigned short *ll = reinterpret_cast<unsigned short *>(xlo);
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const int e = 4 * v + q;
                        const int crow = e / WIN;
                        const int col = e - crow * WIN;
                        unsigned hv, lv;
                        split_f16(vals[q], hv, lv);
                        hh[crow * 2 * RSW + col] = (unsigned short)hv;
                        ll[crow * 2 * RSW + col] = (unsigned short)lv;
                    }
                }
            }
        }
    } else {
        unsigned short *hh = reinterpret_cast<unsigned short *>(xhi);
        unsigned short *ll = reinterpret_cast<unsigned short *>(xlo);
        for (int e = tid; e < NELEM; e += THREADS) {
            const int crow = e / WIN;
            const int col = e - crow * WIN;
            unsigned hv, lv;
            split_f16(__ldg(xb + e) * sx, hv, lv);
            hh[crow * 2 * RSW + col] = (unsigned short)hv;
            ll[crow * 2 * RSW + col] = (unsigned short)lv;
        }
    }
}

#if !INTERLEAVE
// One round of tiles, tile by tile: its A fragments, then its 3 * MGW products (the three
// products of one accumulator adjacent). Measured faster for C3 (sweep 2: 0.765 vs 0.806 ms),
// with fewer registers (204 vs 232).
__device__ __forceinline__ void accumulate_by_tile(float (&acc)[NT][MGW][4], const unsigned *xhi, const unsigned *xlo,
                                                   const uint4 *wf, const int (&base0)[NT], const int (&base1)[NT],
                                                   int nt, int gc, int lane)
{
#pragma unroll
    for (int pr = 0; pr < NPAIRS; ++pr) {
        uint4 bw[MGW];
#pragma unroll
        for (int mg = 0; mg < MGW; ++mg) {
            const int grp = gc + mg < NGRP ? gc + mg : NGRP - 1;
            bw[mg] = wf[(pr * NGRP + grp) * 32 + lane];
        }
        const int off0 = row_offset(2 * pr);
        const int off1 = row_offset(2 * pr + 1);
#pragma unroll
        for (int u = 0; u < NT; ++u) {
            if (u < nt) {
                const unsigned ah[4] = {xhi[base0[u] + off0], xhi[base1[u] + off0],
                                        xhi[base0[u] + off1], xhi[base1[u] + off1]};
                const unsigned al[4] = {xlo[base0[u] + off0], xlo[base1[u] + off0],
                                        xlo[base0[u] + off1], xlo[base1[u] + off1]};
#pragma unroll
                for (int mg = 0; mg < MGW; ++mg) {
                    if (MGW == 1 || gc + mg < NGRP) {
                        mma_f16(acc[u][mg], al, bw[mg].x, bw[mg].y);  // xl * wh
                        mma_f16(acc[u][mg], ah, bw[mg].z, bw[mg].w);  // xh * wl
                        mma_f16(acc[u][mg], ah, bw[mg].x, bw[mg].y);  // xh * wh
                    }
                }
            }
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv_hopper(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ k, int B)
{
    extern __shared__ __align__(16) unsigned smem[];
    // Weight fragments first: their 16-byte loads need a 16-byte aligned start, which a plane
    // (any number of words) would not guarantee. WF_WORDS is a multiple of 128.
    uint4 *wf = reinterpret_cast<uint4 *>(smem);           // [pair][group][lane]
    unsigned *xhi = smem + WF_WORDS;                       // [c][row][RSW] half2 words
    unsigned *xlo = smem + WF_WORDS + PLANE_WORDS;
    __shared__ float red[WARPS];    // per-image max reduction
    __shared__ float red_w[WARPS];  // the weights' (a separate array: no barrier between the two)

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const bool vec = VEC_LOAD && (reinterpret_cast<size_t>(x) & 15) == 0;

    // Zero both planes once: pad columns are read (times zero weights) and must be finite; the
    // per-image fill never writes them.
    for (int i = tid; i < 2 * PLANE_WORDS; i += THREADS) {
        xhi[i] = 0u;  // xlo follows xhi
    }

    // ---- weights, once per block: scale, split, Toeplitz shift, fragment order.
    float m = 0.0f;
    for (int i = tid; i < MOUT * ROWS * KS; i += THREADS) {
        m = fmaxf(m, fabsf(__ldg(k + i)));
    }
    const int ew = scale_exponent(block_max<WARPS>(m, red_w));
    const float sw = pow2(ew);
    pack_weight_fragments(wf, k, sw, tid);
    const float unscale_w = pow2(-ew);
    // (the barrier inside the first image's block_max orders these writes before any read)

    int img = blockIdx.x;
    float4 pre[NPRE];
    if (PREFETCH && vec && img < B) {
        load_image(pre, x + (size_t)img * NELEM);
    }

    for (; img < B; img += gridDim.x) {
        const float *xb = x + (size_t)img * NELEM;

        // ---- a. + b. the image in registers, and its max |x|.
        if (vec) {
            if (!PREFETCH) {
                load_image(pre, xb);
            }
        }
        float mx = 0.0f;
        if (vec) {
#pragma unroll
            for (int i = 0; i < NPRE; ++i) {
                mx = fmaxf(mx, fmaxf(fmaxf(fabsf(pre[i].x), fabsf(pre[i].y)), fmaxf(fabsf(pre[i].z), fabsf(pre[i].w))));
            }
        } else {
            for (int e = tid; e < NELEM; e += THREADS) {
                mx = fmaxf(mx, fabsf(__ldg(xb + e)));
            }
        }
        // This barrier also tells every warp that the previous image's compute is over, so
        // the planes may be overwritten.
        const int ex = scale_exponent(block_max<WARPS>(mx, red));
        const float sx = pow2(ex);

        // ---- c. FP16 hi / lo planes.
        fill_planes(xhi, xlo, pre, xb, sx, vec, tid);
        __syncthreads();  // planes complete before any fragment load

        if (PREFETCH && vec && img + (int)gridDim.x < B) {
            load_image(pre, xb + (size_t)gridDim.x * NELEM);  // in flight during the compute
        }

        // ---- d. + e. compute and store.
        const float unscale = pow2(-ex) * unscale_w;  // exact unless the product underflows
        float *yb = y + (size_t)img * (MOUT * HOUT * WOUT);
        for (int tile0 = warp; tile0 < NTILES; tile0 += WARPS * NT) {
            // Tiles tile0 + u * WARPS, u < nt (warp-uniform).
            const int left = (NTILES - tile0 + WARPS - 1) / WARPS;
            const int nt = left < NT ? left : NT;
            int base0[NT], base1[NT];  // word offset of positions g and g + 8 (+ t)
#pragma unroll
            for (int u = 0; u < NT; ++u) {
                const int tile = tile0 + u * WARPS;
                int p0 = tile * 16 + g;
                int p1 = p0 + 8;
                p0 = p0 < NPOS ? p0 : 0;  // past the image: compute on position 0, store nothing
                p1 = p1 < NPOS ? p1 : 0;
                base0[u] = (p0 / WP) * RSW + (p0 % WP) + t;
                base1[u] = (p1 / WP) * RSW + (p1 % WP) + t;
            }
            for (int gc = 0; gc < NGRP; gc += MGW) {
                float acc[NT][MGW][4];
#pragma unroll
                for (int u = 0; u < NT; ++u) {
#pragma unroll
                    for (int mg = 0; mg < MGW; ++mg) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            acc[u][mg][e] = 0.0f;
                        }
                    }
                }
                // A full round (every one of the NT tiles inside the image) takes the branch-free
                // copy, so that the scheduler can interleave all NT * MGW * 3 products.
#if INTERLEAVE
                if (nt == NT) {
                    accumulate<true>(acc, xhi, xlo, wf, base0, base1, nt, gc, lane);
                } else {
                    accumulate<false>(acc, xhi, xlo, wf, base0, base1, nt, gc, lane);
                }
#else
                // Per tile (INTERLEAVE=0): accumulate_by_tile above.
                accumulate_by_tile(acc, xhi, xlo, wf, base0, base1, nt, gc, lane);
#endif

                // D: acc[..][0..1] = map 4*group + t, position g, offsets 0, 1;
                //    acc[..][2..3] = the same map, position g + 8.
#pragma unroll
                for (int u = 0; u < NT; ++u) {
                    if (u >= nt) {
                        continue;
                    }
                    const int pbase = (tile0 + u * WARPS) * 16;
#pragma unroll
                    for (int mg = 0; mg < MGW; ++mg) {
                        const int map = (gc + mg) * 4 + t;
                        const float *a = acc[u][mg];
                        if (STORE16 && (reinterpret_cast<size_t>(y) & 15) == 0) {
                            // Lane g (even) takes positions g, g + 1; lane g (odd) takes
                            // g + 7, g + 8: four neighbouring outputs of one row (WP even, so
                            // an even position and the next one share a row), 16-byte aligned
                            // (W_out % 4 == 0, even position -> column % 4 == 0).
                            const bool odd = g & 1;
                            const float s0 = __shfl_xor_sync(0xffffffffu, odd ? a[0] : a[2], 4);
                            const float s1 = __shfl_xor_sync(0xffffffffu, odd ? a[1] : a[3], 4);
                            const int pos = pbase + (odd ? g + 7 : g);
                            if (pos < NPOS && map < MOUT && (MGW == 1 || gc + mg < NGRP)) {
                                const int h = pos / WP;
                                const int col = 2 * (pos - h * WP);
                                float *dst = yb + ((size_t)map * HOUT + h) * WOUT + col;
                                if (odd) {
                                    store4(dst, s0 * unscale, s1 * unscale, a[2] * unscale, a[3] * unscale);
                                } else {
                                    store4(dst, a[0] * unscale, a[1] * unscale, s0 * unscale, s1 * unscale);
                                }
                            }
                        } else if (map < MOUT && (MGW == 1 || gc + mg < NGRP)) {
#pragma unroll
                            for (int half = 0; half < 2; ++half) {
                                const int pos = pbase + g + 8 * half;
                                if (pos < NPOS) {
                                    const int h = pos / WP;
                                    const int col = 2 * (pos - h * WP);
                                    float *dst = yb + ((size_t)map * HOUT + h) * WOUT + col;
                                    const float v0 = a[2 * half] * unscale;
                                    const float v1 = a[2 * half + 1] * unscale;
                                    if (WOUT % 2 == 0 && (reinterpret_cast<size_t>(y) & 7) == 0) {
                                        store2(dst, v0, v1);  // W_out even: col + 1 < W_out
                                    } else {
                                        dst[0] = v0;
                                        if (col + 1 < WOUT) {
                                            dst[1] = v1;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
#endif  // !GENERIC_ONLY

// ------------------------------------------------------------------ the generic fallback

// Any shape, FP32 on CUDA cores: one output per thread, grid-stride over B*M*H_out*W_out.
extern "C" __global__ void __launch_bounds__(256)
conv_generic(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ k,
             int B, int M, int C, int H, int W, int K)
{
    const int Ho = H - K + 1;
    const int Wo = W - K + 1;
    const long long total = (long long)B * M * Ho * Wo;
    for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        const int w = (int)(o % Wo);
        const int h = (int)((o / Wo) % Ho);
        const int m = (int)((o / ((long long)Wo * Ho)) % M);
        const long long b = o / ((long long)Wo * Ho * M);
        float acc = 0.0f;
        for (int c = 0; c < C; ++c) {
            const float *xp = x + ((b * C + c) * H + h) * W + w;
            const float *kp = k + ((size_t)m * C + c) * K * K;
            for (int p = 0; p < K; ++p) {
                for (int q = 0; q < K; ++q) {
                    acc = fmaf(__ldg(xp + p * W + q), __ldg(kp + p * K + q), acc);
                }
            }
        }
        y[o] = acc;
    }
}
