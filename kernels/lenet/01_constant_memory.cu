// LeNet step 01 - the mask in constant memory.
//
// Same thread mapping as the baseline (one thread per output element, 2-D tiles of
// TILE_WIDTH x TILE_WIDTH outputs, grid = (tiles, M, B)), but the weights are read from
// __constant__ memory instead of global memory.
//
// Why it can help: within a warp every thread needs the same k[m][c][p][q] at the same
// moment (m is fixed per block, c/p/q advance in lock-step). The constant cache serves such a
// uniform read as one broadcast, and it takes the weight traffic off the L1/LSU path that the
// input reads also use. Why it may not help much: the baseline's weight loads were already
// uniform and L1-resident, so the saving is one load instruction per FMA at most.
//
// Limit: the mask must fit in CONST_CAPACITY floats (64 KiB = 16384 floats is the hardware's
// constant bank for user data). Larger masks are refused by the harness before launch.
//
// The harness copies k into k_const (a device-to-device copy of M*C*K*K floats, on the same
// stream) right before each launch, so the kernel always sees the mask it was given.
#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif
#ifndef CONST_CAPACITY
#define CONST_CAPACITY 16384
#endif

__constant__ float k_const[CONST_CAPACITY];

extern "C" __global__ void conv_forward_constant(float *y, const float *x,
                                                 int B, int M, int C, int H, int W, int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int tiles_w = (W_out + TILE_WIDTH - 1) / TILE_WIDTH;
    const int h = (blockIdx.x / tiles_w) * TILE_WIDTH + threadIdx.y;
    const int w = (blockIdx.x % tiles_w) * TILE_WIDTH + threadIdx.x;
    const int m = blockIdx.y;
    const int b = blockIdx.z;
    if (h >= H_out || w >= W_out) {
        return;
    }

    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float *x_plane = x + ((size_t)b * C + c) * H * W;
        const int k_base = (m * C + c) * K * K;   // uniform across the warp: a broadcast read
        for (int p = 0; p < K; ++p) {
            for (int q = 0; q < K; ++q) {
                acc += x_plane[(h + p) * W + (w + q)] * k_const[k_base + p * K + q];
            }
        }
    }
    y[(((size_t)b * M + m) * H_out + h) * W_out + w] = acc;
}
