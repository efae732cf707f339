// Device code of MLP step 18 (kernels/mlp/18_tensor_core_fp16_tma.cu), shared by its two kernels:
//
// 1. Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier): in
//    tma_barriers.cuh, which step 19 shares.
// 2. Step 14's FP16 network on one 32-column tile of x that the TMA has put in shared memory with
//    its 128-byte swizzle: layer 1 read from the tile (`tile_layer1`), then layers 2 and 3 in
//    registers and the two 16-byte stores of the outputs (`tile_layers23_store`).
//
// The tile: row k of x (32 floats = 128 bytes) at byte 128 k; the swizzle stores the 16-byte chunk
// c of row k at chunk c ^ (k % 8). Which column a fragment row stands for is free (only the stores
// must agree), so lane (g, q) takes the four columns 4g .. 4g + 3 of the tile: m-tile m's rows g
// and g + 8 are columns 4g + 2m and 4g + 2m + 1. One 16-byte load of row k then holds k's value for
// all four columns, and the A fragments of both m-tiles for inputs k = 16j + 2q, +1, +8, +9 come
// from four loads. Lanes 0-7 (g = 0, 1; q = 0..3) read rows 2q and 2q + 1 in chunks g ^ 2q and
// g ^ (2q + 1): eight different chunks, no bank conflict. Row 71 of the tile is zero (the copy's
// box is 72 rows of a 71-row tensor; the TMA fills what lies outside the tensor with zeros).
#pragma once

#include "mma_fragments.cuh"   // mma_f16, pack_relu, pack2, bias_fragments
#include "tma_barriers.cuh"    // smem_addr, barrier_*, tma_copy_2d, tma_prefetch_map

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
#define H_UINT2S (H_F1 + H_F2 + H_F3 + H_BIAS_FLOATS / 2)   // step 14's packed weights: 20,000 bytes

#define COLS 32                              // columns per tile: one box, two m16 tiles
#define ROW_BYTES (COLS * 4)                 // 128: the swizzle's row
#define BOX_ROWS 72                          // 71 inputs + one zero row
#define TILE_BYTES (BOX_ROWS * ROW_BYTES)    // 9,216 = 9 x 1,024 (the swizzle needs 1,024-byte alignment)

// ---------------------------------------------------------------- the network on one tile

// This lane's byte offsets in a tile of rows 2q and 2q + 1 (the swizzled chunk of columns
// 4g .. 4g + 3); rows 2q + 8 and 2q + 16 j keep the same chunk (k % 8 unchanged).
static __device__ __forceinline__ int tile_offset(int row, int g)
{
    return row * ROW_BYTES + ((g ^ row) << 4);
}

// Layer 1 of the tile's 32 columns (both m-tiles) from shared memory: acc = b1 + W1 x.
static __device__ __forceinline__ void tile_layer1(float (&acc)[2][H_NT][4], const unsigned char *tile,
                                                   const uint2 *f1, const float *bias, int lane, int g, int q)
{
    const int off_even = tile_offset(2 * q, g), off_odd = tile_offset(2 * q + 1, g);
    bias_fragments(acc, bias, 0, q);
#pragma unroll
    for (int j = 0; j < H_K1; ++j) {
        const float4 r0 = *reinterpret_cast<const float4 *>(tile + 16 * j * ROW_BYTES + off_even);
        const float4 r1 = *reinterpret_cast<const float4 *>(tile + 16 * j * ROW_BYTES + off_odd);
        float4 r8 = make_float4(0.f, 0.f, 0.f, 0.f), r9 = r8;   // k >= 72: zero
        if (j < H_K1 - 1) {
            r8 = *reinterpret_cast<const float4 *>(tile + (16 * j + 8) * ROW_BYTES + off_even);
            r9 = *reinterpret_cast<const float4 *>(tile + (16 * j + 8) * ROW_BYTES + off_odd);
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
}

// Layers 2 and 3 as in step 14 (the accumulator layout is the next layer's A layout), then the
// stores: lane (g, q < 2) holds outputs 2q, 2q + 1 of its four columns col .. col + 3 (col = the
// tile's first column + 4g) and writes them as two 16-byte stores. n % 4 == 0 and col % 4 == 0,
// so the four columns are all inside n or all outside.
static __device__ __forceinline__ void tile_layers23_store(const float (&acc)[2][H_NT][4], const uint2 *f2,
                                                           const uint2 *f3, const float *bias, int lane, int q,
                                                           float *__restrict__ y, int col, int n)
{
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

    // out[m][0..1]: outputs 2q, 2q + 1 of column col + 2m; out[m][2..3]: of column col + 2m + 1.
    if (q < OUT / 2 && col < n) {
        *reinterpret_cast<float4 *>(y + (size_t)(2 * q) * n + col) =
            make_float4(out[0][0], out[0][2], out[1][0], out[1][2]);
        *reinterpret_cast<float4 *>(y + (size_t)(2 * q + 1) * n + col) =
            make_float4(out[0][1], out[0][3], out[1][1], out[1][3]);
    }
}
