// LeNet step 16 - wgmma final: both layers on Hopper's asynchronous warpgroup MMA
// (wgmma.mma_async, sm_90a), fed by bulk copies (cp.async.bulk + mbarrier) in a persistent grid,
// at FP32-level accuracy through a power-of-two-scaled FP16 hi/lo split.
//
//   y[b][m][h][w] = sum over c, p, q of x[b][c][h + p][w + q] * k[m][c][p][q]
//
// What limited step 15 (C3): mma.sync m16n8k16 issued by each warp, 204 registers for the
// reused B fragments, 8 warps per SM, the tensor pipe 52 % busy, ncu's top stall `wait` (the
// next mma of a warp waits for the previous one). Its C1 ran step 14's FP32 CUDA-core kernel at
// ~80 % of C1's byte floor, held back by its FP32 issue rate (12.5 G FFMA ~ 0.42 ms alone).
//
// This kernel (one source, both layers, shape fixed at compile time):
//
// 1. The product. A "position" is RPP output rows x 2 output columns (C3: RPP = 1, C1: RPP = 2;
//    the Python side takes RPP = 2 when 2 * M <= 16, else 1).
//    One warpgroup computes 64 positions (wgmma's M = 64) at a time:
//      A (64 x 16)  A[pos][8s + i] = x[c][RPP*hp + pp][2*wp + i]    (row r = 2*ks + s = (c, pp))
//      B (16 x N)   B[8s + i][n]   = k[m][c][pp - di][i - dj],  n = 2*(m*RPP + di) + dj
//      D (64 x N)   D[pos][n]      = y[m][RPP*hp + di][2*wp + dj]
//    The k dimension runs over (c, pp) input rows, two per k-step of 16, and 8 input columns:
//    with K <= 7 taps an 8-column window covers both column offsets dj = 0, 1 (Toeplitz weights,
//    no im2col). C3: 4 x 7 = 28 rows = 14 k-steps, N = 16 maps x 2 = 32. C1: 8 rows (the
//    position spans 2 output rows, so 7 + 1 input rows) = 4 k-steps, N = 4 maps x 2 x 2 = 16.
//    A comes from registers (the same fragment layout as mma.sync m16n8k16: each warp of the
//    warpgroup loads its 16 positions' words from the FP16 planes in shared memory, LDS.32
//    per register, no duplication in shared memory); B (the weights, built once per block)
//    sits in shared memory in wgmma's no-swizzle K-major layout of 8 x 16-byte core matrices.
//
// 2. FP32 accuracy over FP32's range. Every operand v is scaled by a power of two and split:
//    v*s = hi + lo, hi = fp16(v*s), lo = fp16(v*s - hi); y*s_x*s_w = xl*wh + xh*wl + xh*wh in
//    FP32 accumulators (~22 bits per operand; the dropped xl*wl term is ~2^-22 relative).
//    s_x is chosen per image (its max |x| mapped into [2^14, 2^15)), s_w per launch (max |k|),
//    both undone exactly on the FP32 output. Hence no FP16 overflow for any finite float32
//    input, and an element loses bits to FP16's subnormals only when it is below 2^-28 of its
//    image's (or the weights') largest magnitude, where its contribution is below 2^-28 of the
//    largest term of the sum. (Inf or NaN inputs: no scaling; the output is Inf/NaN there.)
//    Two wgmma per k-step: xh x [wh | wl] (N = 2N, two accumulator halves) and xl x wh (N);
//    the three partial sums are added in FP32 at the end.
//
// 3. Asynchrony. wgmma.mma_async issues the k-step chain of a tile without waiting on each
//    product (the accumulator chain is ordered by the hardware). A-from-registers keeps the A
//    registers of every product in flight alive, so the chain is cut into commit groups of
//    GROUP k-steps: after issuing group j a warpgroup waits for group j - 1 only (C3 'auto':
//    GROUP 3 fits 120 registers, two blocks per SM; one group per tile needs 201 registers
//    and measured slower, one block per SM). The next image's FP32 values come by
//    cp.async.bulk into an NSTAGE-deep ring of shared-memory stages, each completing on an
//    mbarrier, issued by one thread NSTAGE images ahead. Per image the block
//      a. waits on the stage's mbarrier,
//      b. reduces max |x| from the stage (one barrier; it also tells that every warp has
//         finished the previous image, so the planes may be overwritten),
//      c. writes the scaled hi and lo FP16 planes (rows padded to RSW words), one barrier,
//         after which thread 0 re-fills the stage with the image NSTAGE ahead,
//      d. each warpgroup takes tiles of 64 positions: 2 * NKS wgmma, one wait, epilogue:
//         lane (g, t) of warp q holds maps/rows 4c + t of positions 16q + g and 16q + g + 8,
//         two neighbouring outputs each (8-byte stores; with an even number of positions per
//         row and W_out % 4 == 0 (C1), one shuffle makes 4 neighbouring outputs, 16 bytes).
//    Persistent grid: SMs x resident blocks, each block loops over images b, b + grid, ...
//
// conv_generic: any shape, FP32 on CUDA cores, one output per thread (for shapes the wgmma
// plan refuses; the Python side says when it takes it).
//
// Layouts (row-major, float32): x: B x C x H x W, k: M x C x K x K, y: B x M x H_out x W_out.
//
// Launch:
//   conv_wgmma:   block THREADS (a multiple of 128: THREADS / 128 warpgroups), grid
//                 min(B, SMs * resident blocks), dynamic shared memory SMEM_BYTES (below)
//   conv_generic: block 256, grid ceil(B*M*H_out*W_out / 256)
//
// Compile-time parameters (-D...):
//   KS, CIN, HIN, WIN, MOUT  the shape (K <= 7; MOUT * RPP <= 32)
//   RPP                      output rows per position (1 .. 4)
//   THREADS                  threads per block (warpgroups of 128)
//   NSTAGE                   input stages in flight (1 .. 4)
//   STORE_CS                 1: streaming stores (st.global.cs)
//   MIN_BLOCKS               __launch_bounds__ minimum blocks per SM
//   GROUP                    k-steps per wgmma commit group: after each group the warps wait
//                            for the group before it (its A registers are then free). >= the
//                            k-step count: one group per tile (every A register of the tile
//                            live at once: ~200 registers for C3)
//   WS                       1: warp-specialised (warpgroup 0 fills the next image's planes, the
//                            others compute; two plane sets, mbarrier hand-offs)
//   PROD4                    1: xl x [wh | wl] into the same accumulators as xh x [wh | wl] (four
//                            products, one accumulator set: 16 fewer registers, 1/3 more MACs)
//   GENERIC_ONLY             1: only conv_generic
//
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a (wgmma needs the sm_90a target).

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
#ifndef RPP
#define RPP 1
#endif
#ifndef THREADS
#define THREADS 256
#endif
#ifndef NSTAGE
#define NSTAGE 2
#endif
#ifndef STORE_CS
#define STORE_CS 1
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2
#endif
#ifndef GROUP
#define GROUP 3
#endif
#ifndef WS
#define WS 0
#endif
#ifndef PROD4
#define PROD4 0
#endif

// ------------------------------------------------------------------ small helpers

// FP32 <-> FP16 through PTX (no CUDA header needed, NVRTC may lack cuda_fp16.h).
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

// v = hi + lo, both FP16; v - hi is exact in FP32.
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

// The exponent e that maps m (a max |value|) into [2^14, 2^15) (FP16 holds up to 65504). 0 for
// zero, Inf or NaN; clamped so that 2^e and 2^-e stay normal floats.
__device__ __forceinline__ int scale_exponent(float m)
{
    if (!(m > 0.0f) || !(m <= 3.0e38f)) {
        return 0;
    }
    const int e = (int)((__float_as_uint(m) >> 23) & 255u) - 127;  // floor(log2 m); -127 if subnormal
    const int s = 14 - e;
    return s > 126 ? 126 : (s < -126 ? -126 : s);
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

// The block's max of v (v >= 0); red holds one float per warp. One __syncthreads inside: the
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

#if !GENERIC_ONLY
// ------------------------------------------------------------------ sm_90a: mbarrier, bulk copy, wgmma

__device__ __forceinline__ unsigned smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// One thread: expect `bytes` on the barrier, then start the bulk copy that completes them.
__device__ __forceinline__ void bulk_load(unsigned long long *bar, void *dst, const void *src, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity)
{
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
    }
}

// wgmma descriptor of a K-major operand without swizzle: core matrices of 8 rows x 16 bytes,
// LBO = byte distance between the two core matrices along K, SBO = between 8-row groups.
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned saddr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32);
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Ties an accumulator register to the surrounding asm statements, so that the compiler cannot
// move its reads or writes across wgmma.fence / wgmma.wait_group.
__device__ __forceinline__ void fence_reg(float &r)
{
    asm volatile("" : "+f"(r)::"memory");
}

// D (64 x N, FP32, N/2 registers per thread) += A (64 x 16 FP16, registers) x B (16 x N FP16,
// shared memory through desc).
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc);

template <>
__device__ __forceinline__ void wgmma_rs<8>(float (&d)[4], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {"
        "%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_rs<16>(float (&d)[8], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_rs<32>(float (&d)[16], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// ------------------------------------------------------------------ geometry

constexpr int HOUT = HIN - KS + 1;
constexpr int WOUT = WIN - KS + 1;
constexpr int WP = (WOUT + 1) / 2;              // positions per position row (2 output columns each)
constexpr int HP = (HOUT + RPP - 1) / RPP;      // position rows (RPP output rows each)
constexpr int NPOS = HP * WP;
constexpr int NTILES = (NPOS + 63) / 64;        // wgmma M = 64 positions
constexpr int PROWS = RPP + KS - 1;             // input rows of one channel a position reads
constexpr int ROWS = CIN * PROWS;               // (c, pp) rows of the reduction
constexpr int NKS = (ROWS + 1) / 2;             // k-steps of 16 (two rows x 8 columns)
constexpr int MQ_MIN = MOUT * RPP;              // (map, row offset) pairs
constexpr int MQ = MQ_MIN <= 4 ? 4 : (MQ_MIN <= 8 ? 8 : (MQ_MIN <= 16 ? 16 : 32));  // padded: N2 = 2 * MQ in {8 .. 64}
constexpr int N2 = 2 * MQ;                      // columns of one product (x 2 column offsets)
constexpr int N1 = 2 * N2;                      // xh x [wh | wl]
constexpr int HPL_MIN = RPP * HP + KS - 1;      // plane rows a position may read (zeros past HIN)
constexpr int HPL = HPL_MIN > HIN ? HPL_MIN : HIN;
constexpr int RS_MIN = (2 * WP + 6) > WIN ? (2 * WP + 6) : WIN;  // a position reads columns 2wp .. 2wp + 7
constexpr int RSW = (RS_MIN + 1) / 2;           // 32-bit words (two FP16 columns) per plane row
constexpr int PLANE_WORDS = CIN * HPL * RSW;
constexpr int NELEM = CIN * HIN * WIN;
constexpr bool BULK_OK = (NELEM % 4) == 0;      // the image is a whole number of 16-byte units
constexpr int STAGE_FLOATS = (NELEM + 31) / 32 * 32;
constexpr int WB_BYTES = NKS * N1 * 16 * 2;     // weights: per k-step a 16 x N1 FP16 tile
constexpr int NPLANES = WS ? 2 : 1;              // plane sets (hi + lo): 2 when a producer warpgroup fills ahead
constexpr int SMEM_BYTES = WB_BYTES + NSTAGE * STAGE_FLOATS * 4 + NPLANES * 2 * PLANE_WORDS * 4;  // the Python side computes the same
constexpr int WARPS = THREADS / 32;
constexpr int NWG = THREADS / 128;
constexpr bool STORE16 = (WP % 2 == 0) && (WOUT % 4 == 0);

static_assert(KS >= 1 && KS <= 7, "the 8-column window holds both column offsets only for K <= 7");
static_assert(HOUT >= 1 && WOUT >= 1, "the mask must fit in the input");
static_assert(RPP >= 1 && RPP <= 4, "1 .. 4 output rows per position");
static_assert(MQ_MIN <= 32, "MOUT * RPP <= 32 (N of the wide product <= 128)");
static_assert(THREADS % 128 == 0 && THREADS <= 1024, "whole warpgroups");
static_assert(NSTAGE >= 1 && NSTAGE <= 4, "1 .. 4 stages");
static_assert(!WS || THREADS >= 256, "warp-specialised: one producer and at least one consumer warpgroup");
static_assert(SMEM_BYTES <= 227 * 1024, "one block's dynamic shared memory (the Python side refuses such shapes first)");
#ifdef EXPECT_SMEM_BYTES
// The Python side's geometry (kernelbook.lenet.wgmma.WgmmaFinal.geometry) must agree: a test
// compiles with its value.
static_assert(SMEM_BYTES == EXPECT_SMEM_BYTES, "the Python side's shared-memory size differs from the kernel's");
#endif

// Word offset of reduction row r = (c, pp) in a plane; a padding row (r >= ROWS: zero weights)
// reads row 0, whose values are finite.
__host__ __device__ constexpr int row_offset(int r)
{
    return r < ROWS ? ((r / PROWS) * HPL + (r % PROWS)) * RSW : 0;
}

// Word offset of position pos (row hp, column pair wp) in a plane.
__device__ __forceinline__ int pos_offset(int pos)
{
    const int hp = pos / WP;
    return hp * RPP * RSW + (pos - hp * WP);
}

// ------------------------------------------------------------------ per-image pieces

// max |x| over the image in `buf`, this thread's share (thread i of n).
template <int NTHR>
__device__ __forceinline__ float image_absmax(const float *buf, int i)
{
    float mx = 0.0f;
    if (BULK_OK) {
        const float4 *b4 = reinterpret_cast<const float4 *>(buf);
        for (int v = i; v < NELEM / 4; v += NTHR) {
            const float4 f = b4[v];
            mx = fmaxf(mx, fmaxf(fmaxf(fabsf(f.x), fabsf(f.y)), fmaxf(fabsf(f.z), fabsf(f.w))));
        }
    } else {
        for (int e = i; e < NELEM; e += NTHR) {
            mx = fmaxf(mx, fabsf(buf[e]));
        }
    }
    return mx;
}

// The scaled hi / lo planes of the image in `buf` (thread i of NTHR).
template <int NTHR>
__device__ __forceinline__ void fill_planes(unsigned *xhi, unsigned *xlo, const float *buf, float sx, int i)
{
    if (BULK_OK && WIN % 2 == 0) {
        // Pairs (4v, 4v + 1), (4v + 2, 4v + 3) share a row and start at an even column.
        const float4 *b4 = reinterpret_cast<const float4 *>(buf);
        for (int v = i; v < NELEM / 4; v += NTHR) {
            const float4 f = b4[v];
            const float vals[4] = {f.x * sx, f.y * sx, f.z * sx, f.w * sx};
#pragma unroll
            for (int hp = 0; hp < 2; ++hp) {
                const int e = 4 * v + 2 * hp;
                const int crow = e / WIN;  // c * HIN + row
                const int col = e - crow * WIN;
                const int c = crow / HIN;
                const int prow = crow + c * (HPL - HIN);
                unsigned h0, l0, h1, l1;
                split_f16(vals[2 * hp], h0, l0);
                split_f16(vals[2 * hp + 1], h1, l1);
                const int wdx = prow * RSW + (col >> 1);
                xhi[wdx] = h0 | (h1 << 16);
                xlo[wdx] = l0 | (l1 << 16);
            }
        }
    } else {
        unsigned short *hh = reinterpret_cast<unsigned short *>(xhi);
        unsigned short *ll = reinterpret_cast<unsigned short *>(xlo);
        for (int e = i; e < NELEM; e += NTHR) {
            const int crow = e / WIN;
            const int col = e - crow * WIN;
            const int c = crow / HIN;
            const int prow = crow + c * (HPL - HIN);
            unsigned hv, lv;
            split_f16(buf[e] * sx, hv, lv);
            hh[prow * 2 * RSW + col] = (unsigned short)hv;
            ll[prow * 2 * RSW + col] = (unsigned short)lv;
        }
    }
}

// One warpgroup: tiles first, first + step, ... of 64 positions of one image, stored to yb.
// wq = warp within the warpgroup, g / t = lane coordinates.
__device__ __forceinline__ void compute_tiles(float *yb, const float *y, const unsigned *xhi, const unsigned *xlo,
                                              unsigned wb_addr, float unscale, int first, int step, int wq,
                                              int g, int t)
{
    for (int tile = first; tile < NTILES; tile += step) {
        const int p0r = tile * 64 + wq * 16 + g;
        const int p1r = p0r + 8;
        // a position past the image computes on position 0 and stores nothing
        const int base0 = pos_offset(p0r < NPOS ? p0r : 0) + t;
        const int base1 = pos_offset(p1r < NPOS ? p1r : 0) + t;

        float d1[N1 / 2];  // xh x [wh | wl] (+ xl x [wh | wl] with PROD4): chunks 0 .. N2/8 - 1 with wh, then wl
        float d2[PROD4 ? 1 : N2 / 2];  // xl x wh (PROD4 = 0)
#pragma unroll
        for (int i = 0; i < N1 / 2; ++i) {
            d1[i] = 0.0f;
            fence_reg(d1[i]);
        }
#pragma unroll
        for (int i = 0; i < (PROD4 ? 0 : N2 / 2); ++i) {
            d2[i] = 0.0f;
            fence_reg(d2[i]);
        }
#pragma unroll
        for (int ks = 0; ks < NKS; ++ks) {
            const int off0 = row_offset(2 * ks);  // compile-time once unrolled
            const int off1 = row_offset(2 * ks + 1);
            // A: rows g / g + 8, columns 2t, 2t + 1 of input row 2ks (registers 0, 1) and of
            // row 2ks + 1 (registers 2, 3).
            const unsigned ah[4] = {xhi[base0 + off0], xhi[base1 + off0], xhi[base0 + off1], xhi[base1 + off1]};
            const unsigned al[4] = {xlo[base0 + off0], xlo[base1 + off0], xlo[base0 + off1], xlo[base1 + off1]};
            const unsigned addr = wb_addr + ks * (N1 * 32);
            wgmma_fence();  // the A registers were just written by ordinary loads
            wgmma_rs<N1>(d1, ah, wgmma_desc(addr, 128, 256));
#if PROD4
            wgmma_rs<N1>(d1, al, wgmma_desc(addr, 128, 256));  // xl x [wh | wl]: one accumulator set
#else
            wgmma_rs<N2>(d2, al, wgmma_desc(addr, 128, 256));
#endif
            if (ks % GROUP == GROUP - 1 && ks != NKS - 1) {
                // Close this group of k-steps and wait for the previous one only: its A
                // registers may then be reused, while this group keeps the tensor pipe busy.
                wgmma_commit();
                wgmma_wait<1>();
            }
        }
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < N1 / 2; ++i) {
            fence_reg(d1[i]);
        }
#pragma unroll
        for (int i = 0; i < (PROD4 ? 0 : N2 / 2); ++i) {
            fence_reg(d2[i]);
        }

        // D chunk c (columns n = 8c .. 8c + 7): lane (g, t) holds n = 8c + 2t + {0, 1}, i.e.
        // (map, row offset) mq = 4c + t, column offsets 0 and 1; registers 4c, 4c + 1 for
        // position g, 4c + 2, 4c + 3 for position g + 8.
#pragma unroll
        for (int c = 0; c < N2 / 8; ++c) {
            const int mq = 4 * c + t;
            const int map = mq / RPP;
            const int di = mq - map * RPP;
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
#if PROD4
                v[e] = (d1[4 * (c + N2 / 8) + e] + d1[4 * c + e]) * unscale;
#else
                v[e] = ((d2[4 * c + e] + d1[4 * (c + N2 / 8) + e]) + d1[4 * c + e]) * unscale;
#endif
            }
            if (STORE16 && (reinterpret_cast<size_t>(y) & 15) == 0) {
                // Lane g even takes positions g, g + 1; lane g odd takes g + 7, g + 8: four
                // neighbouring outputs of one row (WP even: an even position and the next
                // share a row), 16-byte aligned (W_out % 4 == 0).
                const bool odd = g & 1;
                const float s0 = __shfl_xor_sync(0xffffffffu, odd ? v[0] : v[2], 4);
                const float s1 = __shfl_xor_sync(0xffffffffu, odd ? v[1] : v[3], 4);
                const int pos = tile * 64 + wq * 16 + (odd ? g + 7 : g);
                if (pos < NPOS && map < MOUT) {
                    const int hp = pos / WP;
                    const int row = hp * RPP + di;
                    if (row < HOUT) {
                        float *dst = yb + ((size_t)map * HOUT + row) * WOUT + 2 * (pos - hp * WP);
                        if (odd) {
                            store4(dst, s0, s1, v[2], v[3]);
                        } else {
                            store4(dst, v[0], v[1], s0, s1);
                        }
                    }
                }
            } else if (map < MOUT) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int pos = half ? p1r : p0r;
                    if (pos < NPOS) {
                        const int hp = pos / WP;
                        const int row = hp * RPP + di;
                        const int col = 2 * (pos - hp * WP);
                        if (row < HOUT) {
                            float *dst = yb + ((size_t)map * HOUT + row) * WOUT + col;
                            if (WOUT % 2 == 0 && (reinterpret_cast<size_t>(y) & 7) == 0) {
                                store2(dst, v[2 * half], v[2 * half + 1]);
                            } else {
                                dst[0] = v[2 * half];
                                if (col + 1 < WOUT) {
                                    dst[1] = v[2 * half + 1];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------ the kernel

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv_wgmma(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ k, int B)
{
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned short *wb = reinterpret_cast<unsigned short *>(smem);       // [ks][N1/8][2][8][8] FP16
    float *stages = reinterpret_cast<float *>(smem + WB_BYTES);         // [NSTAGE][STAGE_FLOATS]
    unsigned *planes = reinterpret_cast<unsigned *>(smem + WB_BYTES + NSTAGE * STAGE_FLOATS * 4);  // [NPLANES][hi, lo]
    __shared__ __align__(8) unsigned long long full[NSTAGE];     // stage s holds its image (bulk copy done)
#if WS
    __shared__ __align__(8) unsigned long long pfull[NPLANES];   // plane set ready (producer -> consumers)
    __shared__ __align__(8) unsigned long long pempty[NPLANES];  // plane set read (consumers -> producer)
    __shared__ int pexp[NPLANES];   // the image's scale exponent, with its planes
#endif
    __shared__ float red[WARPS];    // per-image max
    __shared__ float red_w[WARPS];  // the weights' max (separate: no barrier between the two uses)

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int wg = warp >> 2;   // warpgroup
    const int wq = warp & 3;    // warp within it: rows 16*wq .. 16*wq + 15 of the 64
    const bool bulk = BULK_OK && (reinterpret_cast<size_t>(x) & 15) == 0;

    if (tid == 0) {
        for (int s = 0; s < NSTAGE; ++s) {
            mbar_init(&full[s], 1);
        }
#if WS
        for (int s = 0; s < NPLANES; ++s) {
            mbar_init(&pfull[s], 128);                 // every producer thread arrives
            mbar_init(&pempty[s], THREADS - 128);      // every consumer thread arrives
        }
#endif
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // Zero the planes once: the pad rows and columns are read (times zero weights) and must be
    // finite; the per-image fill never writes them.
    for (int i = tid; i < 2 * NPLANES * PLANE_WORDS; i += THREADS) {
        planes[i] = 0u;
    }

    // ---- weights, once per block: scale, split, Toeplitz shifts, wgmma's B layout.
    float m = 0.0f;
    for (int i = tid; i < MOUT * CIN * KS * KS; i += THREADS) {
        m = fmaxf(m, fabsf(__ldg(k + i)));
    }
    const int ew = scale_exponent(block_max<WARPS>(m, red_w));
    const float sw = pow2(ew);
    // Element (k = 8*kh + i, n) of k-step ks at halfs ks*N1*16 + (n/8)*128 + kh*64 + (n%8)*8 + i:
    // core matrix (n/8, kh) is 8 columns n x 8 k-values i, 16 bytes per n.
    for (int idx = tid; idx < NKS * N1 * 16; idx += THREADS) {
        const int ks = idx / (N1 * 16);
        const int rem = idx - ks * (N1 * 16);
        const int n = (rem >> 7) * 8 + ((rem >> 3) & 7);
        const int kh = (rem >> 6) & 1;
        const int i = rem & 7;
        const bool lo_part = n >= N2;
        const int nn = lo_part ? n - N2 : n;
        const int dj = nn & 1;
        const int mq = nn >> 1;
        const int map = mq / RPP;
        const int di = mq - map * RPP;
        const int r = 2 * ks + kh;
        const int c = r / PROWS;
        const int p = r - c * PROWS - di;
        const int q = i - dj;
        const float w = (r < ROWS && map < MOUT && p >= 0 && p < KS && q >= 0 && q < KS)
                            ? __ldg(k + ((map * CIN + c) * KS + p) * KS + q) * sw
                            : 0.0f;
        unsigned wh, wl;
        split_f16(w, wh, wl);
        wb[idx] = (unsigned short)(lo_part ? wl : wh);
    }
    const float unscale_w = pow2(-ew);
    // The weights are written by ordinary stores and read by wgmma (the async proxy).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    if (bulk && tid == 0) {
        for (int s = 0; s < NSTAGE; ++s) {
            const int img = blockIdx.x + s * gridDim.x;
            if (img < B) {
                bulk_load(&full[s], stages + s * STAGE_FLOATS, x + (size_t)img * NELEM, NELEM * 4);
            }
        }
    }
    const unsigned wb_addr = smem_addr(wb);

#if WS
    // ---- warp-specialised: warpgroup 0 fills planes, warpgroups 1 .. NWG-1 compute.
    if (wg == 0) {
        int it = 0;
        for (int img = blockIdx.x; img < B; img += gridDim.x, ++it) {
            const int s = bulk ? it % NSTAGE : 0;
            float *buf = stages + s * STAGE_FLOATS;
            const int pb = it % NPLANES;
            unsigned *xhi = planes + pb * 2 * PLANE_WORDS;
            if (bulk) {
                mbar_wait(&full[s], (unsigned)(it / NSTAGE) & 1u);
            } else {
                const float *xb = x + (size_t)img * NELEM;
                for (int e = tid; e < NELEM; e += 128) {
                    buf[e] = __ldg(xb + e);
                }
                asm volatile("bar.sync 1, 128;" ::: "memory");
            }
            float mx = image_absmax<128>(buf, tid);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            }
            if (lane == 0) {
                red[warp] = mx;
            }
            asm volatile("bar.sync 1, 128;" ::: "memory");
            mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
            const int ex = scale_exponent(mx);
            if (it >= NPLANES) {  // the consumers have read this plane set's previous image
                mbar_wait(&pempty[pb], (unsigned)(it / NPLANES - 1) & 1u);
            }
            fill_planes<128>(xhi, xhi + PLANE_WORDS, buf, pow2(ex), tid);
            if (tid == 0) {
                pexp[pb] = ex;
            }
            asm volatile("bar.sync 1, 128;" ::: "memory");  // stage s read by all; red free again
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&pfull[pb])) : "memory");
            if (bulk && tid == 0) {
                const int next = img + NSTAGE * (int)gridDim.x;
                if (next < B) {
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    bulk_load(&full[s], buf, x + (size_t)next * NELEM, NELEM * 4);
                }
            }
        }
    } else {
        int it = 0;
        for (int img = blockIdx.x; img < B; img += gridDim.x, ++it) {
            const int pb = it % NPLANES;
            const unsigned *xhi = planes + pb * 2 * PLANE_WORDS;
            mbar_wait(&pfull[pb], (unsigned)(it / NPLANES) & 1u);
            const float unscale = pow2(-pexp[pb]) * unscale_w;
            compute_tiles(y + (size_t)img * (MOUT * HOUT * WOUT), y, xhi, xhi + PLANE_WORDS, wb_addr, unscale,
                          wg - 1, NWG - 1, wq, g, t);
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&pempty[pb])) : "memory");
        }
    }
#else
    // ---- every warp does every phase, image after image.
    unsigned *xhi = planes;
    unsigned *xlo = planes + PLANE_WORDS;
    int it = 0;
    for (int img = blockIdx.x; img < B; img += gridDim.x, ++it) {
        const int s = bulk ? it % NSTAGE : 0;
        float *buf = stages + s * STAGE_FLOATS;

        // ---- a. the image in shared memory.
        if (bulk) {
            mbar_wait(&full[s], (unsigned)(it / NSTAGE) & 1u);
        } else {
            // (stage 0 was last read before the previous image's second barrier)
            const float *xb = x + (size_t)img * NELEM;
            for (int e = tid; e < NELEM; e += THREADS) {
                buf[e] = __ldg(xb + e);
            }
            __syncthreads();
        }

        // ---- b. max |x|; the barrier inside also ends the previous image's compute.
        const int ex = scale_exponent(block_max<WARPS>(image_absmax<THREADS>(buf, tid), red));

        // ---- c. the hi / lo planes.
        fill_planes<THREADS>(xhi, xlo, buf, pow2(ex), tid);
        __syncthreads();  // planes complete; stage s is free

        if (bulk && tid == 0) {
            const int next = img + NSTAGE * (int)gridDim.x;
            if (next < B) {
                // the stage was read through the generic proxy; the copy writes it through the async one
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                bulk_load(&full[s], buf, x + (size_t)next * NELEM, NELEM * 4);
            }
        }

        // ---- d. tiles of 64 positions per warpgroup.
        const float unscale = pow2(-ex) * unscale_w;  // exact unless the product underflows
        compute_tiles(y + (size_t)img * (MOUT * HOUT * WOUT), y, xhi, xlo, wb_addr, unscale, wg, NWG, wq, g, t);
    }
#endif
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
