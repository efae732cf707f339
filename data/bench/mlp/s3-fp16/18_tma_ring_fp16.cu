// MLP FP16 candidate A (session 3; NOT a step) - step 14's FP16 network fed by the tensor memory
// accelerator (TMA), one ring per warp. Measured 0.2269 ms at 2,097,152 columns against step 14's
// 0.2359 in the same call (data/bench/mlp/NOTES.md, "Session 3, FP16 step"; raw output in call1/).
//
// Step 14 runs near DRAM's rate, but every lane fetches its share of x with 71 scalar 4-byte
// loads at the top of each tile and then waits for them: the warp's long scoreboard stall is the
// top one, and only what the few resident warps have asked for is in flight. Here each warp keeps
// a ring of RING tiles of x in shared memory. Lane 0 asks the TMA for a whole 32-column tile (72
// rows x 32 floats: one instruction, 9,216 bytes) RING tiles ahead; a tile's slot is refilled as
// soon as the warp has read it (after layer 1), so the copy overlaps layers 2-3 and the next
// tiles. No lane computes an address for the copy and nothing passes through the registers.
//
// x is seen as a 2-D tensor of 71 rows (inputs) and n columns. The box is 72 rows: the TMA writes
// zeros for row 71 and for columns past n, so the ragged last tile needs no special code (only
// the stores are guarded). Its row stride (4 n bytes) and start must be multiples of 16 bytes:
// the host sends other shapes to step 14's kernel.
//
// Shared-memory layout of a slot: row k (128 bytes = 32 columns) at 128 k; the TMA's 128-byte
// swizzle stores the 16-byte chunk c of row k at chunk c ^ (k % 8). Which column a fragment row
// stands for is free (only the stores must agree), so lane (g, q) takes the four columns 4g .. 4g
// + 3 of the tile: m-tile m's rows g and g + 8 are columns 4g + 2m and 4g + 2m + 1. One 16-byte
// load of row k then holds k's value for all four, and the A fragments of both m-tiles for inputs
// k = 16j + 2q, +1, +8, +9 come from four loads. Lanes 0-7 (g = 0, 1; q = 0..3) read rows 2q (+1)
// whose chunks g ^ (2q) are eight different ones: no bank conflict.
//
// Layers 2 and 3 are step 14's (the accumulator layout is the next layer's A layout). Lane (g,
// q < 2) ends with outputs 2q, 2q + 1 of its four columns: two 16-byte stores.
//
// Launch: block = 32 * WARPS threads, a persistent grid; dynamic shared memory WARPS * RING *
// SLOT_BYTES + 1024 (for 1,024-byte alignment, which the swizzle needs).
#include "mma_fragments.cuh"   // mma_f16, pack_relu, pack2, bias_fragments
#include "tma_ring.cuh"        // barrier_*, tma_copy_2d, smem_addr

#ifndef WARPS
#define WARPS 8
#endif
#ifndef RING
#define RING 2
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define H_K1 5                   // 80 / 16
#define H_K2 4                   // 64 / 16
#define H_NT 8
#define H_F1 (H_K1 * H_NT * 32)
#define H_F2 (H_K2 * H_NT * 32)
#define H_F3 (H_K2 * 32)
#define H_BIAS_FLOATS 136
#define H_UINT2S (H_F1 + H_F2 + H_F3 + H_BIAS_FLOATS / 2)

#define COLS 32                              // columns per tile: one box, two m16 tiles
#define ROW_BYTES (COLS * 4)                 // 128: the swizzle's row
#define SLOT_BYTES (72 * ROW_BYTES)          // 9,216 = 9 x 1,024: 71 inputs + one zero row
#ifndef BOX_ROWS
#define BOX_ROWS 72                          // rows one copy moves (71: row 71 zeroed once here)
#endif
#define BOX_BYTES (BOX_ROWS * ROW_BYTES)

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
tmaRingHalfKernel(const void *__restrict__ xmap, const uint2 *__restrict__ packed, float *__restrict__ y, int n)
{
    __shared__ uint2 smem[H_UINT2S];
    __shared__ __align__(8) unsigned long long full[WARPS * RING];
    extern __shared__ unsigned char dyn[];

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + COLS - 1) / COLS;
    const int stride = gridDim.x * WARPS;
    const int first = blockIdx.x * WARPS + warp;
    const int count = first < tiles ? (tiles - 1 - first) / stride + 1 : 0;

    const unsigned base = (smem_addr(dyn) + 1023u) & ~1023u;
    const unsigned ring = base + warp * (RING * SLOT_BYTES);
    const unsigned char *ring_ptr = dyn + (ring - smem_addr(dyn));
    const unsigned bar0 = smem_addr(&full[warp * RING]);

    // Start this warp's first RING copies before the weights are staged.
    if (lane == 0) {
        tma_prefetch_map(xmap);
#pragma unroll
        for (int s = 0; s < RING; ++s) barrier_init(bar0 + 8 * s, 1);
        barrier_init_fence();
#pragma unroll
        for (int s = 0; s < RING; ++s)
            if (s < count) {
                barrier_expect_bytes(bar0 + 8 * s, BOX_BYTES);
                tma_copy_2d(ring + s * SLOT_BYTES, xmap, (first + s * stride) * COLS, 0, bar0 + 8 * s);
            }
    }
#if BOX_ROWS == 71
    for (int s = 0; s < RING; ++s)
        reinterpret_cast<float *>(const_cast<unsigned char *>(ring_ptr) + s * SLOT_BYTES + 71 * ROW_BYTES)[lane] = 0.0f;
#endif
    for (int i = threadIdx.x; i < H_UINT2S; i += WARPS * 32) smem[i] = packed[i];
    __syncthreads();
    const uint2 *f1 = smem;
    const uint2 *f2 = f1 + H_F1;
    const uint2 *f3 = f2 + H_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + H_F3);

    // This lane's byte offsets in a slot of rows 2q and 2q + 1 (swizzled chunk of columns 4g..4g+3);
    // rows 2q + 8 and 2q + 16 j keep the same chunk (k % 8 unchanged).
    const int off_even = (2 * q) * ROW_BYTES + ((g ^ (2 * q)) << 4);
    const int off_odd = (2 * q + 1) * ROW_BYTES + ((g ^ (2 * q + 1)) << 4);

    int s = 0;
    unsigned phase = 0;
    for (int i = 0; i < count; ++i) {
        const int col0 = (first + i * stride) * COLS;
        barrier_wait(bar0 + 8 * s, phase);
        const unsigned char *slot = ring_ptr + s * SLOT_BYTES;

        float acc[2][H_NT][4];
        bias_fragments(acc, bias, 0, q);
#pragma unroll
        for (int j = 0; j < H_K1; ++j) {
            const float4 r0 = *reinterpret_cast<const float4 *>(slot + 16 * j * ROW_BYTES + off_even);
            const float4 r1 = *reinterpret_cast<const float4 *>(slot + 16 * j * ROW_BYTES + off_odd);
            float4 r8 = make_float4(0.f, 0.f, 0.f, 0.f), r9 = r8;   // k >= 72: zero
            if (j < H_K1 - 1) {
                r8 = *reinterpret_cast<const float4 *>(slot + (16 * j + 8) * ROW_BYTES + off_even);
                r9 = *reinterpret_cast<const float4 *>(slot + (16 * j + 8) * ROW_BYTES + off_odd);
            }
            unsigned a[2][4];
            a[0][0] = pack2(r0.x, r1.x);
            a[0][1] = pack2(r0.y, r1.y);
            a[0][2] = pack2(r8.x, r9.x);
            a[0][3] = pack2(r8.y, r9.y);
            a[1][0] = pack2(r0.z, r1.z);
            a[1][1] = pack2(r0.w, r1.w);
            a[1][2] = pack2(r8.z, r9.z);
            a[1][3] = pack2(r8.w, r9.w);
#pragma unroll
            for (int nt = 0; nt < H_NT; ++nt) {
                const uint2 b = f1[(j * H_NT + nt) * 32 + lane];
                mma_f16(acc[0][nt], a[0], b);
                mma_f16(acc[1][nt], a[1], b);
            }
        }

        // Every lane has read the slot: refill it with the tile RING ahead.
        __syncwarp();
        if (lane == 0 && i + RING < count) {
            barrier_expect_bytes(bar0 + 8 * s, BOX_BYTES);
            tma_copy_2d(ring + s * SLOT_BYTES, xmap, (first + (i + RING) * stride) * COLS, 0, bar0 + 8 * s);
        }
        if (++s == RING) {
            s = 0;
            phase ^= 1;
        }

        float acc2[2][H_NT][4];
        bias_fragments(acc2, bias, HIDDEN, q);
#pragma unroll
        for (int j = 0; j < H_K2; ++j) {
            unsigned a[2][4];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                a[m][0] = pack_relu(acc[m][2 * j][0], acc[m][2 * j][1]);
                a[m][1] = pack_relu(acc[m][2 * j][2], acc[m][2 * j][3]);
                a[m][2] = pack_relu(acc[m][2 * j + 1][0], acc[m][2 * j + 1][1]);
                a[m][3] = pack_relu(acc[m][2 * j + 1][2], acc[m][2 * j + 1][3]);
            }
#pragma unroll
            for (int nt = 0; nt < H_NT; ++nt) {
                const uint2 b = f2[(j * H_NT + nt) * 32 + lane];
                mma_f16(acc2[0][nt], a[0], b);
                mma_f16(acc2[1][nt], a[1], b);
            }
        }

        float out[2][4];
        bias_fragments(out, bias, 2 * HIDDEN, q);
#pragma unroll
        for (int j = 0; j < H_K2; ++j) {
            const uint2 b = f3[j * 32 + lane];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                const unsigned a[4] = {pack_relu(acc2[m][2 * j][0], acc2[m][2 * j][1]),
                                       pack_relu(acc2[m][2 * j][2], acc2[m][2 * j][3]),
                                       pack_relu(acc2[m][2 * j + 1][0], acc2[m][2 * j + 1][1]),
                                       pack_relu(acc2[m][2 * j + 1][2], acc2[m][2 * j + 1][3])};
                mma_f16(out[m], a, b);
            }
        }

        // out[m][0..1]: outputs 2q, 2q + 1 of column 4g + 2m; out[m][2..3]: of column 4g + 2m + 1.
        // n % 4 == 0, so the four columns are all inside n or all outside.
        const int col = col0 + 4 * g;
        if (q < OUT / 2 && col < n) {
            *reinterpret_cast<float4 *>(y + (size_t)(2 * q) * n + col) =
                make_float4(out[0][0], out[0][2], out[1][0], out[1][2]);
            *reinterpret_cast<float4 *>(y + (size_t)(2 * q + 1) * n + col) =
                make_float4(out[0][1], out[0][3], out[1][1], out[1][3]);
        }
    }
}
