// MLP step 16 candidate (session 3): the shipped register tile, with a leaner x ring.
#ifndef WARPS
#define WARPS 4
#endif
#ifndef RING
#define RING 8                                  // rows of x in flight per warp (4 or 8)
#endif
#ifndef PF_W
#define PF_W 1                                  // 1: next row's weights loaded during this row's FFMAs
#endif
#if RING != 4 && RING != 8
#error "RING must be 4 or 8"
#endif
#define RP (RING / 2)                           // ring slots, one pair of rows each
#define PAIRS 36                                // rows 0..71 of x in pairs; row 71 is zero

#define IN 71
#define HIDDEN 64
#define OUT 4
#define RT_STRIDE 68
#define RT_HALF 36
#define RT_W1 0
#define RT_W2 (RT_W1 + 72 * RT_STRIDE)
#define RT_W3 (RT_W2 + HIDDEN * RT_STRIDE)
#define RT_B1 (RT_W3 + HIDDEN * OUT)
#define RT_B2 (RT_B1 + HIDDEN)
#define RT_B3 (RT_B2 + HIDDEN)
#define RT_WEIGHT_FLOATS (RT_B3 + 8)
#define RT_TILE_COLUMNS 64
#define RT_H_FLOATS (HIDDEN * RT_TILE_COLUMNS)
#define RT_WARP_FLOATS (RT_H_FLOATS + RING * RT_TILE_COLUMNS)
#define SLOT_BYTES (2 * RT_TILE_COLUMNS * 4)

static __device__ __forceinline__ void cp16(unsigned dst, const float *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> static __device__ __forceinline__ void wait_groups() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// Any tile, any alignment: row 2 p + half of tile `tile`, columns 4 cg .. + 3, to the lane's place
// `dst` in a slot; row 71 and columns past N - 1 zero-filled; nothing when tile >= tiles.
static __device__ __forceinline__ void fetch_any(unsigned dst, const float *__restrict__ x, int n, int tile, int tiles,
                                                 int p, int half, int cg, bool vec)
{
    if (tile < tiles) {
        const int k = 2 * p + half;
        const int col = tile * RT_TILE_COLUMNS + 4 * cg;
        const float *src = x + (size_t)min(k, IN - 1) * n + col;
        if (k < IN && vec && col + 3 < n) {
            cp16(dst, src, 16);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int ok = k < IN && col + i < n;
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst + 4 * i), "l"(ok ? src + i : x),
                             "r"(ok ? 4 : 0));
            }
        }
    }
}

static __device__ __forceinline__ void load_row(float4 (&w)[8], const float *p)
{
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = reinterpret_cast<const float4 *>(p)[i];
}

static __device__ __forceinline__ void fma_row(float (&acc)[32][4], const float4 (&w)[8], float4 a)
{
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float ws[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            acc[4 * i + u][0] = fmaf(ws[u], a.x, acc[4 * i + u][0]);
            acc[4 * i + u][1] = fmaf(ws[u], a.y, acc[4 * i + u][1]);
            acc[4 * i + u][2] = fmaf(ws[u], a.z, acc[4 * i + u][2]);
            acc[4 * i + u][3] = fmaf(ws[u], a.w, acc[4 * i + u][3]);
        }
    }
}

// Rows r and r + 1 of a layer, in two halves so that other work can go between them: row_a
// multiplies row r (wn gets row r + 1's weights), row_b row r + 1. With PF_W, wc holds row r's
// weights on entry to row_a and row r + 2's on exit from row_b: each row's 8 LDS.128 are issued
// one row ahead of their FFMAs.
static __device__ __forceinline__ void row_a(float (&acc)[32][4], float4 (&wc)[8], float4 (&wn)[8], const float *w, int r,
                                             float4 a)
{
#if PF_W
    load_row(wn, w + (r + 1) * RT_STRIDE);
    fma_row(acc, wc, a);
#else
    load_row(wc, w + r * RT_STRIDE);
    fma_row(acc, wc, a);
#endif
}
static __device__ __forceinline__ void row_b(float (&acc)[32][4], float4 (&wc)[8], float4 (&wn)[8], const float *w, int r,
                                             float4 a)
{
#if PF_W
    load_row(wc, w + (r + 2) * RT_STRIDE);
    fma_row(acc, wn, a);
#else
    load_row(wn, w + (r + 1) * RT_STRIDE);
    fma_row(acc, wn, a);
#endif
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
fp32RegisterTiledKernel(const float *__restrict__ x, const float4 *__restrict__ packed,
                        float *__restrict__ y, int n)
{
    extern __shared__ float4 smem4[];
    float *smem = reinterpret_cast<float *>(smem4);
    for (int i = threadIdx.x; i < RT_WEIGHT_FLOATS / 4; i += WARPS * 32) smem4[i] = packed[i];
    __syncthreads();

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int half = lane / 16, cg = lane % 16;
    const int unit0 = 32 * half;
    const int woff = half * RT_HALF;
    float *hs = smem + RT_WEIGHT_FLOATS + warp * RT_WARP_FLOATS;
    const float *ring = hs + RT_H_FLOATS;
    const unsigned ring_dst = (unsigned)__cvta_generic_to_shared(ring + half * RT_TILE_COLUMNS + 4 * cg);
    const float4 *ring_rd = reinterpret_cast<const float4 *>(ring) + cg;   // + 16 * row of the ring
    const bool vecx = (n % 4) == 0 && (reinterpret_cast<size_t>(x) % 16) == 0;
    const bool vecy = (n % 4) == 0 && (reinterpret_cast<size_t>(y) % 16) == 0;
    const int tiles = (n + RT_TILE_COLUMNS - 1) / RT_TILE_COLUMNS;
    const int stride = gridDim.x * WARPS;
    const size_t two_n = 2 * (size_t)n;
    const float *w1 = smem + RT_W1 + woff, *w2 = smem + RT_W2 + woff;

    // Prologue: pairs 0 .. RP - 1 of the first tile, one commit group each.
#pragma unroll
    for (int q = 0; q < RP; ++q) {
        fetch_any(ring_dst + q * SLOT_BYTES, x, n, blockIdx.x * WARPS + warp, tiles, q, half, cg, vecx);
        commit();
    }

    for (int tile = blockIdx.x * WARPS + warp; tile < tiles; tile += stride) {
        const int col = tile * RT_TILE_COLUMNS + 4 * cg;
        const bool fast = vecx && tile * RT_TILE_COLUMNS + RT_TILE_COLUMNS <= n;
        const float *fsrc = x + (size_t)(2 * RP + half) * n + col;    // row of pair RP (this lane's half)
        float acc[32][4];
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            const float b = smem[RT_B1 + unit0 + u];
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = b;
        }

        // Layer 1. Pair P's rows are in registers (a0, a1) while pair P + 1 is read from the ring
        // and pair P + RP refills pair P's slot: one wait and one __syncwarp per pair.
        wait_groups<RP - 1>();
        __syncwarp();
        float4 a0 = ring_rd[0], a1 = ring_rd[16];
        float4 wc[8];
#if PF_W
        load_row(wc, w1);
#endif
#pragma unroll 1
        for (int p = 0; p < PAIRS - RP; p += RP) {
#pragma unroll
            for (int q = 0; q < RP; ++q) {
                // Row 2 (p + q) with pair p + q's first row, then the ring work, then the second row.
                float4 wn[8];
                row_a(acc, wc, wn, w1, 2 * (p + q), a0);
                wait_groups<RP - 2>();   // pair p + q + 1 has landed (this lane's copies)
                __syncwarp();            // ... and every lane's; every lane has read pair p + q's slot
                const int sn = (q + 1) % RP;
                a0 = ring_rd[32 * sn];
                const float4 n1 = ring_rd[32 * sn + 16];
                if (fast) {
                    const bool zero = q == RP - 1 && half && p == PAIRS - 2 * RP;   // row 71
                    cp16(ring_dst + q * SLOT_BYTES, zero ? x : fsrc, zero ? 0 : 16);
                    fsrc += two_n;
                } else {
                    fetch_any(ring_dst + q * SLOT_BYTES, x, n, tile, tiles, p + q + RP, half, cg, vecx);
                }
                commit();
                row_b(acc, wc, wn, w1, 2 * (p + q), a1);
                a1 = n1;
            }
        }
        // Last RP pairs: the refills are the next tile's first pairs.
#pragma unroll
        for (int q = 0; q < RP; ++q) {
            float4 wn[8];
            row_a(acc, wc, wn, w1, 2 * (PAIRS - RP + q), a0);
            float4 n1 = a1;
            if (q < RP - 1) {
                wait_groups<RP - 2>();
                __syncwarp();
                a0 = ring_rd[32 * (q + 1)];
                n1 = ring_rd[32 * (q + 1) + 16];
            } else {
                __syncwarp();
            }
            fetch_any(ring_dst + q * SLOT_BYTES, x, n, tile + stride, tiles, q, half, cg, vecx);
            commit();
            row_b(acc, wc, wn, w1, 2 * (PAIRS - RP + q), a1);
            a1 = n1;
        }

        // h1 = ReLU(acc) into the warp's tile: hs[unit][column within the tile].
        __syncwarp();
#pragma unroll
        for (int u = 0; u < 32; ++u)
            *reinterpret_cast<float4 *>(hs + (unit0 + u) * RT_TILE_COLUMNS + 4 * cg) =
                make_float4(fmaxf(acc[u][0], 0.0f), fmaxf(acc[u][1], 0.0f), fmaxf(acc[u][2], 0.0f),
                            fmaxf(acc[u][3], 0.0f));
        __syncwarp();

        // Layer 2.
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            const float b = smem[RT_B2 + unit0 + u];
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = b;
        }
        {
            const float4 *h4 = reinterpret_cast<const float4 *>(hs) + cg;
#if PF_W
            load_row(wc, w2);
#endif
#pragma unroll 1
            for (int k = 0; k < HIDDEN; k += 2) {
                float4 wn[8];
                row_a(acc, wc, wn, w2, k, h4[16 * k]);
                row_b(acc, wc, wn, w2, k, h4[16 * (k + 1)]);
            }
        }

        // Layer 3: partial sums over this lane's 32 units, then the other half's.
        float out[OUT][4] = {};
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            const float4 w = *reinterpret_cast<const float4 *>(smem + RT_W3 + (unit0 + u) * OUT);
            const float ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int o = 0; o < OUT; ++o)
#pragma unroll
                for (int c = 0; c < 4; ++c) out[o][c] = fmaf(ws[o], fmaxf(acc[u][c], 0.0f), out[o][c]);
        }
#pragma unroll
        for (int o = 0; o < OUT; ++o)
#pragma unroll
            for (int c = 0; c < 4; ++c) out[o][c] += __shfl_xor_sync(0xffffffffu, out[o][c], 16);

#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int o = 2 * half + i;
            const float b = smem[RT_B3 + o];
            float v4[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) v4[c] = (half ? out[2 + i][c] : out[i][c]) + b;
            const float4 v = make_float4(v4[0], v4[1], v4[2], v4[3]);
            float *yrow = y + (size_t)o * n;
            if (vecy && col + 3 < n) {
                *reinterpret_cast<float4 *>(yrow + col) = v;
            } else {
                if (col < n) yrow[col] = v.x;
                if (col + 1 < n) yrow[col + 1] = v.y;
                if (col + 2 < n) yrow[col + 2] = v.z;
                if (col + 3 < n) yrow[col + 3] = v.w;
            }
        }
    }
    wait_groups<0>();
}
