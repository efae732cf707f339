// MLP step 16 - FP32 on CUDA cores near the FMA floor: fused and register-tiled.
//
// Steps 00-06 (the write-up's FP32 designs) give each thread one or two dot products, so most
// of their instructions are loads, shuffles and barriers, not FMAs. Here each thread owns a
// register tile of 32 units x 4 columns: 128 accumulators, updated by 128 FFMAs for every
// 4 weights (one LDS.128) and 4 activations it loads. That is the GEMM recipe, applied to all
// three layers without leaving the chip:
//
//   warp tile   : 64 columns (16 column groups of 4) x 64 units. Lane l takes column group
//                 l % 16 and units 32 * (l / 16) .. +31, so lanes l and l + 16 share columns.
//   layer 1     : for k = 0..70: x[k][4 columns] as one LDS.128 from the warp's ring of x rows
//                 (the two halves read the same address), 8 LDS.128 of W1^T[k][own 32 units]
//                 (a broadcast: 16 lanes read one address), 128 FFMAs.
//   x ring      : the warp streams its rows of x (72 per tile, row 71 zero, tile after tile) in
//                 pairs (lanes 0-15 copy one row, lanes 16-31 the next, 16 bytes a lane with
//                 cp.async) through RING / 2 slots of two 64-float rows in shared memory. While
//                 the lane multiplies pair P (held in registers), it reads pair P + 1 from its
//                 slot and refills pair P's slot with pair P + RING / 2, so ONE wait_group and
//                 ONE __syncwarp per pair order both "every lane's copies of pair P + 1 have
//                 landed" and "every lane has read pair P's slot". A copy has RING / 2 - 1 pairs
//                 of FFMAs to arrive (RING 8: 768 FFMAs a lane), and the next tile's first pairs
//                 arrive during this tile's layers 2 and 3. (Loading x straight into registers
//                 inside the k loop left each warp waiting a full DRAM latency every few rows:
//                 1.51 ms, see the chapter.)
//   fast path   : in a tile whose 64 columns all lie inside N, with x 16-byte aligned and
//                 N % 4 == 0 (every tile but a ragged last one, at the book's sizes), a refill is
//                 one 16-byte cp.async from a running pointer (+2N floats a pair) into a slot
//                 whose offset is a compile-time constant (the pair loop is unrolled by the slot
//                 count; 36 pairs divide evenly), row 71 zero-filled through the copy's source
//                 size. The general refill (4-byte copies, zero-filled past column N - 1, any
//                 alignment) serves other tiles and the next tile's first pairs. This is what the
//                 previous version spent its issue slots on: it rebuilt each pair's 64-bit source
//                 address from (tile, pair) with bounds checks and two __syncwarps every pair.
//   h1          : ReLU(acc) goes to the warp's private 64 x 64 tile in shared memory (16 KB),
//                 because layer 2 needs all 64 units of a column and a thread holds 32.
//   layer 2     : as layer 1 with h1 read back as LDS.128 (4 columns of one unit).
//   layer 3     : each lane multiplies its 32 units of h2 (still in registers) by W3 and one
//                 __shfl_xor_sync(.., 16) per value adds the other half's partial sums.
//
// W1^T and W2^T are stored with a row stride of 68 floats and the second half of a row shifted
// by 4 floats (units 32..63 at 36..67), so the two addresses a warp reads per LDS.128 fall in
// different banks; W1^T has a zero row 71 (x's row 71 is zero-filled) so that rows go in pairs.
// Weights and biases: 38,560 bytes; per warp: h1 tile 16,384 bytes, ring 256 * RING bytes.
// y is stored as float4 only when N % 4 == 0 and y is 16-byte aligned, else column by column.
//
// Launch: block = 32 * WARPS threads, grid chosen by the host (persistent, grid-stride over
// warp tiles of 64 columns), dynamic shared memory = 38,560 + (16,384 + 256 * RING) * WARPS
// bytes (112,288 for WARPS = 4, RING = 8: two blocks per SM).
#ifndef WARPS
#define WARPS 4
#endif
#ifndef RING
#define RING 8                                  // rows of x in flight per warp (4 or 8)
#endif
#if RING != 4 && RING != 8
#error "RING must be 4 or 8"
#endif
#define RP (RING / 2)                           // ring slots, one pair of rows each
#define PAIRS 36                                // rows 0..71 of x in pairs; row 71 is zero

#define IN 71
#define HIDDEN 64
#define OUT 4
#define RT_STRIDE 68                            // floats per row of W1^T, W2^T
#define RT_HALF 36                              // where units 32..63 start in a row
#define RT_W1 0
#define RT_W2 (RT_W1 + 72 * RT_STRIDE)          // 4896: W1^T has a zero row 71
#define RT_W3 (RT_W2 + HIDDEN * RT_STRIDE)      // 9248: W3^T[u][o], 64 x 4
#define RT_B1 (RT_W3 + HIDDEN * OUT)            // 9504
#define RT_B2 (RT_B1 + HIDDEN)
#define RT_B3 (RT_B2 + HIDDEN)
#define RT_WEIGHT_FLOATS (RT_B3 + 8)            // 9640 floats = 38,560 bytes
#define RT_TILE_COLUMNS 64
#define RT_H_FLOATS (HIDDEN * RT_TILE_COLUMNS)  // per warp
#define RT_WARP_FLOATS (RT_H_FLOATS + RING * RT_TILE_COLUMNS)
#define SLOT_BYTES (2 * RT_TILE_COLUMNS * 4)    // one slot: two rows of the tile

static __device__ __forceinline__ void cp16(unsigned dst, const float *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> static __device__ __forceinline__ void wait_groups() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// The general refill: row 2 p + half of tile `tile`, columns 4 cg .. + 3, to the lane's place
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

// One row of a layer: the lane's 32 weights of row r (8 LDS.128 into wv; w points at the lane's
// half of row 0, rows RT_STRIDE floats apart) times its 4 activations a: 128 FFMAs. The caller
// alternates two buffers wv between the two rows of a pair (so that the compiler may load the
// second row's weights while the first row's FFMAs issue).
static __device__ __forceinline__ void layer_row(float (&acc)[32][4], float4 (&wv)[8], const float *w, int r, float4 a)
{
#pragma unroll
    for (int i = 0; i < 8; ++i) wv[i] = reinterpret_cast<const float4 *>(w + r * RT_STRIDE)[i];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float ws[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            acc[4 * i + u][0] = fmaf(ws[u], a.x, acc[4 * i + u][0]);
            acc[4 * i + u][1] = fmaf(ws[u], a.y, acc[4 * i + u][1]);
            acc[4 * i + u][2] = fmaf(ws[u], a.z, acc[4 * i + u][2]);
            acc[4 * i + u][3] = fmaf(ws[u], a.w, acc[4 * i + u][3]);
        }
    }
}

// packed: W1^T, W2^T (stride 68, halves at 0 and 36), W3^T, b1, b2, b3 (padded to 8), as laid
// out by the host (RT_WEIGHT_FLOATS floats).
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
    const int unit0 = 32 * half;                  // first unit of this lane
    const int woff = half * RT_HALF;              // where they start in a row of W^T
    float *hs = smem + RT_WEIGHT_FLOATS + warp * RT_WARP_FLOATS;
    const float *ring = hs + RT_H_FLOATS;
    // This lane's 16 bytes in slot 0 (slot s: + s * SLOT_BYTES), and its reads (row r: + 16 r).
    const unsigned ring_dst = (unsigned)__cvta_generic_to_shared(ring + half * RT_TILE_COLUMNS + 4 * cg);
    const float4 *ring_rd = reinterpret_cast<const float4 *>(ring) + cg;
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
        const float *fsrc = x + (size_t)(2 * RP + half) * n + col;    // pair RP, this lane's row
        float acc[32][4];
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            const float b = smem[RT_B1 + unit0 + u];
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = b;
        }

        // Layer 1. Pairs 0 .. RP - 1 of this tile are in flight (one commit group each).
        wait_groups<RP - 1>();
        __syncwarp();
        float4 a0 = ring_rd[0], a1 = ring_rd[16];
        float4 wa[8];
#pragma unroll 1
        for (int p = 0; p < PAIRS - RP; p += RP) {
#pragma unroll
            for (int q = 0; q < RP; ++q) {   // pair P = p + q, in slot q
                float4 wb[8];
                layer_row(acc, wa, w1, 2 * (p + q), a0);
                wait_groups<RP - 2>();       // this lane's copies of pair P + 1 have landed
                __syncwarp();                // ... every lane's; and every lane has read slot q
                const int sn = (q + 1) % RP;
                a0 = ring_rd[32 * sn];
                const float4 n1 = ring_rd[32 * sn + 16];
                if (fast) {                  // refill slot q with pair P + RP of this tile
                    const bool zero = q == RP - 1 && half && p == PAIRS - 2 * RP;   // row 71
                    cp16(ring_dst + q * SLOT_BYTES, zero ? x : fsrc, zero ? 0 : 16);
                    fsrc += two_n;
                } else {
                    fetch_any(ring_dst + q * SLOT_BYTES, x, n, tile, tiles, p + q + RP, half, cg, vecx);
                }
                commit();
                layer_row(acc, wb, w1, 2 * (p + q) + 1, a1);
                a1 = n1;
            }
        }
        // The last RP pairs: the refills are the next tile's first pairs.
#pragma unroll
        for (int q = 0; q < RP; ++q) {
            float4 wb[8];
            layer_row(acc, wa, w1, 2 * (PAIRS - RP + q), a0);
            float4 n1 = a1;
            if (q < RP - 1) {
                wait_groups<RP - 2>();
                __syncwarp();
                a0 = ring_rd[32 * (q + 1)];
                n1 = ring_rd[32 * (q + 1) + 16];
            } else {
                __syncwarp();                // every lane has read slot q
            }
            fetch_any(ring_dst + q * SLOT_BYTES, x, n, tile + stride, tiles, q, half, cg, vecx);
            commit();
            layer_row(acc, wb, w1, 2 * (PAIRS - RP + q) + 1, a1);
            a1 = n1;
        }

        // h1 = ReLU(acc) into the warp's tile: hs[unit][column within the tile].
        __syncwarp();   // the previous tile's layer-2 reads are done
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
#pragma unroll 1
            for (int k = 0; k < HIDDEN; k += 2) {
                float4 wb[8];
                layer_row(acc, wa, w2, k, h4[16 * k]);
                layer_row(acc, wb, w2, k + 1, h4[16 * (k + 1)]);
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

        // Half 0 stores outputs 0 and 1, half 1 outputs 2 and 3.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int o = 2 * half + i;   // selected without indexing out[] at run time
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
    wait_groups<0>();   // no copy outlives the block (the last refills fetch nothing)
}
