// MLP step 18 - step 14's FP16 network, with x brought into shared memory by the tensor memory
// accelerator (TMA) instead of 71 scalar loads per lane. Two kernels, one per size of problem:
//
// - tmaStagesHalfKernel (many columns): a block of STAGE_WARPS consumer warps and one producer
//   warp shares STAGES stages in shared memory. A stage holds STAGE_WARPS adjacent 32-column
//   tiles of x; one lane of the producer asks the TMA for all of them at once, so each row of x is
//   read in runs of STAGE_WARPS x 128 contiguous bytes. Barriers per stage: `full` (the producer's
//   arrival + the copies' bytes) and `empty` (one arrival per consumer warp once it has read its
//   tile: after layer 1, so the refill overlaps layers 2 and 3).
// - tmaRingHalfKernel (few columns): each warp keeps a ring of RING_SLOTS tiles of its own; its
//   lane 0 refills a slot with the warp's tile RING_SLOTS ahead as soon as layer 1 has read it.
//   A stage of 8 tiles is 256 columns: at 12,800 columns the stages kernel has 50 stages for 132
//   SMs, while the ring spreads 400 tiles over 100 blocks of 4 warps.
//
// Why: step 14 runs near DRAM's rate, but each lane loads its share of x with 71 scalar 4-byte
// loads at the top of a tile and waits for them (long scoreboard: step 14's top stall). Here a copy
// is one instruction that moves a whole tile (72 rows x 128 bytes), no lane computes an address for
// it, and the copies of the next tiles are in flight while the current one is computed.
//
// Measured in development (kernels/mlp/DESIGN.md, step 18; the chapter shows the recorded run):
// at 2,097,152 columns the stages kernel (8 consumer warps, 2 stages, 1 block per SM, 256-byte L2
// promotion) was the fastest, ahead of the per-warp ring, whose 128-byte runs per row use DRAM
// less well, and both ahead of step 14. At 12,800 columns the ring (4 warps x 2 slots, 2 blocks per
// SM) was the fastest and the stages kernel slower than step 14. Still the top stall: the
// consumers' wait for a stage; more stages or slots in flight measured slower, and a row stride off
// the power of two no faster.
//
// x is seen as a 2-D tensor of 71 rows and n columns (row stride 4 n bytes); a copy's box is 32
// columns x 72 rows, 128-byte swizzle: the TMA writes zeros for row 71 and for columns past n, so
// the ragged end needs no code of its own (only the stores are guarded). The TMA needs the row
// stride and x's start to be multiples of 16 bytes, and the 16-byte stores need the same of y: the
// host sends other shapes (n % 4 != 0, x or y not 16-byte aligned) to step 14's kernel. The tile
// layout in shared memory and the network's code on a tile are in tma_fp16.cuh.
//
// Shared memory: static, step 14's packed weights (20,000 bytes) and the barriers; dynamic,
// the tiles, 9,216 bytes each, plus 1,024 bytes so that they start 1,024-byte aligned:
//   stages: STAGES * STAGE_WARPS * 9,216 + 1,024 (2 x 8: 148,480 bytes)
//   ring:   RING_WARPS * RING_SLOTS * 9,216 + 1,024 (4 x 2: 74,752 bytes)
// Launch (both persistent, grid-stride): stages, block 32 * (STAGE_WARPS + 1) threads, grid
// min(stages of 256 columns, SMs x blocks per SM); ring, block 32 * RING_WARPS threads, grid
// min(blocks' worth of tiles, SMs x RING_MIN_BLOCKS). Arguments: (the tensor map of x in global
// memory, step 14's packed weights, y, n).
#include "tma_fp16.cuh"   // TMA + barriers, tile_layer1, tile_layers23_store (and mma_fragments.cuh)

#ifndef STAGE_WARPS
#define STAGE_WARPS 8            // consumer warps (the producer warp comes on top)
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef RING_WARPS
#define RING_WARPS 4
#endif
#ifndef RING_SLOTS
#define RING_SLOTS 2
#endif
#ifndef RING_MIN_BLOCKS
#define RING_MIN_BLOCKS 2        // __launch_bounds__ minimum blocks per SM of the ring kernel
#endif

#define STAGE_BYTES (STAGE_WARPS * TILE_BYTES)

extern "C" __global__ void __launch_bounds__((STAGE_WARPS + 1) * 32)
tmaStagesHalfKernel(const void *__restrict__ xmap, const uint2 *__restrict__ packed, float *__restrict__ y, int n)
{
    __shared__ uint2 smem[H_UINT2S];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];   // full[s], then empty[s]
    extern __shared__ unsigned char dyn[];

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int groups = (n + STAGE_WARPS * COLS - 1) / (STAGE_WARPS * COLS);   // stages' worth of columns
    const int count = blockIdx.x < groups ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const unsigned base = (smem_addr(dyn) + 1023u) & ~1023u;
    const unsigned char *base_ptr = dyn + (base - smem_addr(dyn));
    const unsigned full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[STAGES]);

    if (threadIdx.x == 0) {
        tma_prefetch_map(xmap);
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(full0 + 8 * s, 1);
            barrier_init(empty0 + 8 * s, STAGE_WARPS);
        }
        barrier_init_fence();
    }
    for (int i = threadIdx.x; i < H_UINT2S; i += blockDim.x) smem[i] = packed[i];
    __syncthreads();

    if (warp == STAGE_WARPS) {
        // ---------------------------------------------------------------- producer (one lane)
        if (lane == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int t = 0; t < count; ++t) {
                if (t >= STAGES) barrier_wait(empty0 + 8 * s, phase ^ 1);
                // Tiles that start past n (in the last stage only) are not copied: their warps
                // compute on stale data and store nothing.
                const int col0 = (blockIdx.x + t * gridDim.x) * (STAGE_WARPS * COLS);
                const int boxes = min(STAGE_WARPS, (n - col0 + COLS - 1) / COLS);
                barrier_expect_bytes(full0 + 8 * s, boxes * TILE_BYTES);
                for (int w = 0; w < boxes; ++w)
                    tma_copy_2d(base + s * STAGE_BYTES + w * TILE_BYTES, xmap, col0 + w * COLS, 0, full0 + 8 * s);
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    // -------------------------------------------------------------------- consumers
    const int g = lane / 4, q = lane % 4;
    const uint2 *f1 = smem;
    const uint2 *f2 = f1 + H_F1;
    const uint2 *f3 = f2 + H_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + H_F3);

    int s = 0;
    unsigned phase = 0;
    for (int t = 0; t < count; ++t) {
        const int col0 = (blockIdx.x + t * gridDim.x) * (STAGE_WARPS * COLS) + warp * COLS;
        barrier_wait(full0 + 8 * s, phase);
        float acc[2][H_NT][4];
        tile_layer1(acc, base_ptr + s * STAGE_BYTES + warp * TILE_BYTES, f1, bias, lane, g, q);

        // Every lane has read its tile: release the stage (the producer refills it when all have).
        __syncwarp();
        if (lane == 0) barrier_arrive(empty0 + 8 * s);
        if (++s == STAGES) {
            s = 0;
            phase ^= 1;
        }
        tile_layers23_store(acc, f2, f3, bias, lane, q, y, col0 + 4 * g, n);
    }
}

#define SLOT_BYTES TILE_BYTES

extern "C" __global__ void __launch_bounds__(RING_WARPS * 32, RING_MIN_BLOCKS)
tmaRingHalfKernel(const void *__restrict__ xmap, const uint2 *__restrict__ packed, float *__restrict__ y, int n)
{
    __shared__ uint2 smem[H_UINT2S];
    __shared__ __align__(8) unsigned long long full[RING_WARPS * RING_SLOTS];
    extern __shared__ unsigned char dyn[];

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + COLS - 1) / COLS;
    const int stride = gridDim.x * RING_WARPS;
    const int first = blockIdx.x * RING_WARPS + warp;
    const int count = first < tiles ? (tiles - 1 - first) / stride + 1 : 0;

    const unsigned base = (smem_addr(dyn) + 1023u) & ~1023u;
    const unsigned ring = base + warp * (RING_SLOTS * SLOT_BYTES);
    const unsigned char *ring_ptr = dyn + (ring - smem_addr(dyn));
    const unsigned bar0 = smem_addr(&full[warp * RING_SLOTS]);

    // Start this warp's first copies before the weights are staged.
    if (lane == 0) {
        tma_prefetch_map(xmap);
#pragma unroll
        for (int s = 0; s < RING_SLOTS; ++s) barrier_init(bar0 + 8 * s, 1);
        barrier_init_fence();
#pragma unroll
        for (int s = 0; s < RING_SLOTS; ++s)
            if (s < count) {
                barrier_expect_bytes(bar0 + 8 * s, TILE_BYTES);
                tma_copy_2d(ring + s * SLOT_BYTES, xmap, (first + s * stride) * COLS, 0, bar0 + 8 * s);
            }
    }
    for (int i = threadIdx.x; i < H_UINT2S; i += RING_WARPS * 32) smem[i] = packed[i];
    __syncthreads();
    const uint2 *f1 = smem;
    const uint2 *f2 = f1 + H_F1;
    const uint2 *f3 = f2 + H_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + H_F3);

    int s = 0;
    unsigned phase = 0;
    for (int i = 0; i < count; ++i) {
        const int col0 = (first + i * stride) * COLS;
        barrier_wait(bar0 + 8 * s, phase);
        float acc[2][H_NT][4];
        tile_layer1(acc, ring_ptr + s * SLOT_BYTES, f1, bias, lane, g, q);

        // Every lane has read the slot: refill it with this warp's tile RING_SLOTS ahead.
        __syncwarp();
        if (lane == 0 && i + RING_SLOTS < count) {
            barrier_expect_bytes(bar0 + 8 * s, TILE_BYTES);
            tma_copy_2d(ring + s * SLOT_BYTES, xmap, (first + (i + RING_SLOTS) * stride) * COLS, 0, bar0 + 8 * s);
        }
        if (++s == RING_SLOTS) {
            s = 0;
            phase ^= 1;
        }
        tile_layers23_store(acc, f2, f3, bias, lane, q, y, col0 + 4 * g, n);
    }
}
