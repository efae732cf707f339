// LeNet step 00 - baseline: the Milestone-2 direct convolution.
//
//   y[b][m][h][w] = sum over c, p, q of x[b][c][h + p][w + q] * k[m][c][p][q]
//
// One thread owns one output element and reads every operand straight from global memory:
// no shared memory, no constant memory, no reuse beyond what the L1/L2 caches find by
// themselves. Every later step in kernels/lenet/ is measured against this one.
//
// Layouts (row-major, float32):
//   x: B x C x H x W        k: M x C x K x K        y: B x M x H_out x W_out
//   H_out = H - K + 1, W_out = W - K + 1 (stride 1, no padding)
//
// Launch (done by kernelbook.lenet.convstep.Baseline):
//   block = (TILE_WIDTH, TILE_WIDTH, 1)
//   grid  = (tiles_w * tiles_h, M, B)   one block per output tile, per map, per image
//
// Compile-time parameter (the harness passes -DTILE_WIDTH=...):
#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif

extern "C" __global__ void conv_forward_baseline(float *y, const float *x, const float *k,
                                                 int B, int M, int C, int H, int W, int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int tiles_w = (W_out + TILE_WIDTH - 1) / TILE_WIDTH;

    // blockIdx.x enumerates the 2-D output tiles of one map, row by row.
    const int h = (blockIdx.x / tiles_w) * TILE_WIDTH + threadIdx.y;
    const int w = (blockIdx.x % tiles_w) * TILE_WIDTH + threadIdx.x;
    const int m = blockIdx.y;
    const int b = blockIdx.z;

    // Edge tiles hang over the output; their extra threads have nothing to compute.
    if (h >= H_out || w >= W_out) {
        return;
    }

    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float *x_plane = x + ((size_t)b * C + c) * H * W;
        const float *k_plane = k + ((size_t)m * C + c) * K * K;
        for (int p = 0; p < K; ++p) {
            for (int q = 0; q < K; ++q) {
                acc += x_plane[(h + p) * W + (w + q)] * k_plane[p * K + q];
            }
        }
    }
    y[(((size_t)b * M + m) * H_out + h) * W_out + w] = acc;
}
