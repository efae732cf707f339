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
//   x ring      : the warp streams its rows of x (71 per tile, tile after tile, two rows per
//                 step: lanes 0-15 copy one, lanes 16-31 the next) through a ring of RING rows
//                 of 64 floats in shared memory with cp.async (16 bytes a lane), RING rows
//                 ahead of the rows in use: each copy has ~RING x 128 FFMAs per lane
//                 of time to arrive, and the next tile's first rows arrive during this tile's
//                 layers 2 and 3. (Loading x straight into registers inside the k loop left
//                 each warp waiting a full DRAM latency every few rows: 1.51 ms, see chapter.)
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
//
// 16-byte copies need 16-byte aligned rows: when N % 4 != 0 (or in the last, partial column
// group) the ring is filled with 4-byte copies, zero-filled past column N - 1.
//
// Launch: block = 32 * WARPS threads, grid chosen by the host (persistent, grid-stride over
// warp tiles of 64 columns), dynamic shared memory = 38,560 + (16,384 + 256 * RING) * WARPS
// bytes (108,192 for WARPS = 4, RING = 4: two blocks per SM).
#ifndef WARPS
#define WARPS 4
#endif
#ifndef RING
#define RING 4                                  // rows of x in flight per warp (2, 4, 8)
#endif
#define RING_PAIRS (RING / 2)
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

// Rows 2 p (lanes 0..15) and 2 p + 1 (lanes 16..31) of tile `tile`, columns 4 (lane % 16) .. + 3,
// into ring slot pair `slot`; row 71 and columns past N - 1 are zero-filled. One commit group.
static __device__ __forceinline__ void fetch_pair(float *ring, const float *__restrict__ x, int n, int tile, int tiles,
                                                  int p, int slot, int lane, bool vec)
{
    if (tile < tiles) {
        const int k = 2 * p + lane / 16;
        const int col = tile * RT_TILE_COLUMNS + 4 * (lane % 16);
        const unsigned dst = (unsigned)__cvta_generic_to_shared(ring + (2 * slot + lane / 16) * RT_TILE_COLUMNS +
                                                                4 * (lane % 16));
        const float *src = x + (size_t)min(k, IN - 1) * n + col;
        if (k < IN && vec && col + 3 < n) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int ok = k < IN && col + i < n;
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst + 4 * i),
                             "l"(ok ? src + i : x), "r"(ok ? 4 : 0));
            }
        }
    }
    asm volatile("cp.async.commit_group;");
}

static __device__ __forceinline__ void fma_tile(float (&acc)[32][4], const float4 *w, float4 a)
{
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 wv = w[i];
        const float ws[4] = {wv.x, wv.y, wv.z, wv.w};
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
    float *ring = hs + RT_H_FLOATS;
    const bool vec = (n % 4) == 0;
    const int tiles = (n + RT_TILE_COLUMNS - 1) / RT_TILE_COLUMNS;
    const int stride = gridDim.x * WARPS;

    // The ring's producer: pair f_p of tile f_tile is the next to fetch; `pair` counts pairs used.
    int f_tile = blockIdx.x * WARPS + warp, f_p = 0, pair = 0;
    for (int i = 0; i < RING_PAIRS; ++i) {
        fetch_pair(ring, x, n, f_tile, tiles, f_p, i, lane, vec);
        if (++f_p == PAIRS) { f_p = 0; f_tile += stride; }
    }

    for (int tile = blockIdx.x * WARPS + warp; tile < tiles; tile += gridDim.x * WARPS) {
        const int col = tile * RT_TILE_COLUMNS + 4 * cg;
        float acc[32][4];

        // Layer 1.
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            const float b = smem[RT_B1 + unit0 + u];
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = b;
        }
        for (int p = 0; p < PAIRS; ++p, ++pair) {
            asm volatile("cp.async.wait_group %0;" ::"n"(RING_PAIRS - 1));
            __syncwarp();                     // every lane's copies of this pair have landed
            const int slot = pair & (RING_PAIRS - 1);
            const float4 a0 = *reinterpret_cast<const float4 *>(ring + (2 * slot) * RT_TILE_COLUMNS + 4 * cg);
            const float4 a1 = *reinterpret_cast<const float4 *>(ring + (2 * slot + 1) * RT_TILE_COLUMNS + 4 * cg);
            __syncwarp();                     // every lane has read the slot: refill it
            fetch_pair(ring, x, n, f_tile, tiles, f_p, slot, lane, vec);
            if (++f_p == PAIRS) { f_p = 0; f_tile += stride; }
            fma_tile(acc, reinterpret_cast<const float4 *>(smem + RT_W1 + (2 * p) * RT_STRIDE + woff), a0);
            fma_tile(acc, reinterpret_cast<const float4 *>(smem + RT_W1 + (2 * p + 1) * RT_STRIDE + woff), a1);
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
#pragma unroll 4
        for (int k = 0; k < HIDDEN; ++k) {
            const float4 a = *reinterpret_cast<const float4 *>(hs + k * RT_TILE_COLUMNS + 4 * cg);
            fma_tile(acc, reinterpret_cast<const float4 *>(smem + RT_W2 + k * RT_STRIDE + woff), a);
        }

        // Layer 3: partial sums over this lane's 32 units of ReLU(h2), then the other half's.
#pragma unroll
        for (int u = 0; u < 32; ++u)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[u][c] = fmaxf(acc[u][c], 0.0f);
        float out[OUT][4] = {};
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            const float4 w = *reinterpret_cast<const float4 *>(smem + RT_W3 + (unit0 + u) * OUT);
            const float ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int o = 0; o < OUT; ++o)
#pragma unroll
                for (int c = 0; c < 4; ++c) out[o][c] = fmaf(ws[o], acc[u][c], out[o][c]);
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
            if (vec && col + 3 < n) {
                *reinterpret_cast<float4 *>(yrow + col) = v;
            } else {
                if (col < n) yrow[col] = v.x;
                if (col + 1 < n) yrow[col + 1] = v.y;
                if (col + 2 < n) yrow[col + 2] = v.z;
                if (col + 3 < n) yrow[col + 3] = v.w;
            }
        }
    }
}
