// LeNet step 02 - a parameter sweep over the launch shape (constant-memory kernel).
//
// The kernel of step 01, generalised so that the harness can sweep three knobs at compile time:
//
//   TILE_W x TILE_H   threads per block in x (along w) and y (along h): the block shape
//   OUT_PER_THREAD    outputs each thread computes along w (thread coarsening); a thread's
//                     outputs are TILE_W apart, so a warp's stores stay contiguous
//   IMGS_PER_BLOCK    images per block (blockDim.z): more threads per block for the small
//                     C3 planes (34 x 34) without changing the per-image tile
//
// A block covers TILE_H rows x (TILE_W * OUT_PER_THREAD) columns of one output map for
// IMGS_PER_BLOCK images. grid = (tiles_h * tiles_w, M, ceil(B / IMGS_PER_BLOCK)).
//
// Why sweep: C1's output plane is 80 x 80 and C3's is 34 x 34. A block shape that divides one
// wastes threads on the other (17 x 17 fits C3 exactly; 16 x 16 needs three tiles across a
// 34-wide row, so 14 of their 48 columns are idle), and tiny blocks cap occupancy by the per-SM
// block limit. The best shape
// is found by measuring, per layer.
#ifndef TILE_W
#define TILE_W 16
#endif
#ifndef TILE_H
#define TILE_H 16
#endif
#ifndef OUT_PER_THREAD
#define OUT_PER_THREAD 1
#endif
#ifndef IMGS_PER_BLOCK
#define IMGS_PER_BLOCK 1
#endif
#ifndef CONST_CAPACITY
#define CONST_CAPACITY 16384
#endif

__constant__ float k_const[CONST_CAPACITY];

extern "C" __global__ void conv_forward_sweep(float *y, const float *x,
                                              int B, int M, int C, int H, int W, int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int span_w = TILE_W * OUT_PER_THREAD;
    const int tiles_w = (W_out + span_w - 1) / span_w;
    const int h = (blockIdx.x / tiles_w) * TILE_H + threadIdx.y;
    const int w0 = (blockIdx.x % tiles_w) * span_w + threadIdx.x;
    const int m = blockIdx.y;
    const int b = blockIdx.z * IMGS_PER_BLOCK + threadIdx.z;
    if (h >= H_out || b >= B) {
        return;
    }

    float acc[OUT_PER_THREAD];
#pragma unroll
    for (int j = 0; j < OUT_PER_THREAD; ++j) {
        acc[j] = 0.0f;
    }
    for (int c = 0; c < C; ++c) {
        const float *x_plane = x + ((size_t)b * C + c) * H * W;
        const int k_base = (m * C + c) * K * K;
        for (int p = 0; p < K; ++p) {
            const float *x_row = x_plane + (h + p) * W;
            for (int q = 0; q < K; ++q) {
                const float weight = k_const[k_base + p * K + q];  // one broadcast, reused below
#pragma unroll
                for (int j = 0; j < OUT_PER_THREAD; ++j) {
                    const int w = w0 + j * TILE_W;
                    // Columns past the edge read nothing; their result is never stored.
                    if (w < W_out) {
                        acc[j] += x_row[w + q] * weight;
                    }
                }
            }
        }
    }
    float *y_row = y + (((size_t)b * M + m) * H_out + h) * W_out;
#pragma unroll
    for (int j = 0; j < OUT_PER_THREAD; ++j) {
        const int w = w0 + j * TILE_W;
        if (w < W_out) {
            y_row[w] = acc[j];
        }
    }
}
