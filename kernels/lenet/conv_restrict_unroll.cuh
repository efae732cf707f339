// The tiled direct convolution with __restrict__ pointers and a fully unrolled K x K window:
// the kernel of LeNet step 04 (04_restrict_unroll.cu explains it), run unchanged by step 05.
//
// Compile-time parameters (the harness passes them as -D...): TILE_WIDTH, IMGS_PER_BLOCK,
// KSIZE and CONST_CAPACITY (the size of the constant-memory weight bank).
#pragma once

#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif
#ifndef IMGS_PER_BLOCK
#define IMGS_PER_BLOCK 4
#endif
#ifndef KSIZE
#define KSIZE 7
#endif
#ifndef CONST_CAPACITY
#define CONST_CAPACITY 16384
#endif

#define SIDE (TILE_WIDTH + KSIZE - 1)

__constant__ float k_const[CONST_CAPACITY];

extern "C" __global__ void conv_forward_restrict_unroll(float *__restrict__ y, const float *__restrict__ x,
                                                        int B, int M, int C, int H, int W)
{
    __shared__ float patch[IMGS_PER_BLOCK][SIDE][SIDE];
    const int H_out = H - KSIZE + 1;
    const int W_out = W - KSIZE + 1;
    const int tiles_w = (W_out + TILE_WIDTH - 1) / TILE_WIDTH;
    const int h0 = (blockIdx.x / tiles_w) * TILE_WIDTH;
    const int w0 = (blockIdx.x % tiles_w) * TILE_WIDTH;
    const int m = blockIdx.y;
    const int b = blockIdx.z * IMGS_PER_BLOCK + threadIdx.z;
    const int ty = threadIdx.y;
    const int tx = threadIdx.x;
    const int lane = ty * TILE_WIDTH + tx;
    const bool live = b < B && h0 + ty < H_out && w0 + tx < W_out;

    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        if (b < B) {
            const float *__restrict__ x_plane = x + ((size_t)b * C + c) * H * W;
            for (int i = lane; i < SIDE * SIDE; i += TILE_WIDTH * TILE_WIDTH) {
                const int r = h0 + i / SIDE;
                const int s = w0 + i % SIDE;
                patch[threadIdx.z][i / SIDE][i % SIDE] = (r < H && s < W) ? x_plane[r * W + s] : 0.0f;
            }
        }
        __syncthreads();   // patch complete before any window is read

        if (live) {
            const float *k_c = k_const + (m * C + c) * KSIZE * KSIZE;
#pragma unroll
            for (int p = 0; p < KSIZE; ++p) {
#pragma unroll
                for (int q = 0; q < KSIZE; ++q) {
                    acc += patch[threadIdx.z][ty + p][tx + q] * k_c[p * KSIZE + q];
                }
            }
        }
        __syncthreads();   // all windows read before the next channel overwrites the patch
    }
    if (live) {
        y[(((size_t)b * M + m) * H_out + h0 + ty) * W_out + w0 + tx] = acc;
    }
}
