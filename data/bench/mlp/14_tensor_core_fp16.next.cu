// Candidate for MLP step 14 (NOT measured; issue 19's FP16 target, <= 0.21 ms at 2,097,152 columns).
//
// Step 14 measured 0.235 ms with DRAM at 78 % of its peak and long scoreboard its top stall (ncu,
// data/bench/mlp/run4): each warp loads its tile's x at the top of the tile and waits a DRAM
// latency there, with 8 warps an SM. This version stages each warp's NEXT tile of x in shared
// memory with cp.async while it computes the current one, as step 17's second version does
// (which took step 17's long-scoreboard share from 19 % to 4 % of its stalls). Prediction: DRAM
// 78 % -> ~88-90 %, 0.235 -> ~0.205-0.215 ms; 12,800 columns unchanged or slightly slower (one
// tile a warp: nothing to overlap).
//
// Same fragments, weights and launch as step 14, plus dynamic shared memory:
// WARPS * M_TILES * 6,400 bytes (80 rows x 20 floats of x per m-tile and warp).
#include "14_tensor_core_fp16.cu"

#define XS_STRIDE 20
#define XS_ROWS 80
#define XS_FLOATS (XS_ROWS * XS_STRIDE)

static __device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}

// step 17's stage_x: 16-byte copies at compile-time offsets for a full, aligned tile; else one
// 4-byte copy per element with columns past n zero-filled. One commit group.
static __device__ __forceinline__ void stage_x(float *buf, const float *__restrict__ x, int n, int col0, int lane,
                                               bool vec)
{
    if (vec && col0 + 16 * M_TILES <= n) {
        const float *src = x + (size_t)(lane >> 2) * n + col0 + 4 * (lane & 3);
        float *dst = buf + (lane >> 2) * XS_STRIDE + 4 * (lane & 3);
        const size_t step = (size_t)8 * n;
#pragma unroll
        for (int t = 0; t < 9; ++t) {
            if (t < 8 || (lane >> 2) < IN - 64) {
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) cp_async16(dst + m * XS_FLOATS + 8 * t * XS_STRIDE, src + 16 * m, 16);
            }
            src += step;
        }
    } else {
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) {
            float *b = buf + m * XS_FLOATS;
            const int c0 = col0 + 16 * m;
#pragma unroll 4
            for (int i = lane; i < IN * 16; i += 32) {
                const int row = i >> 4, c = c0 + (i & 15);
                cp_async4(b + row * XS_STRIDE + (i & 15), c < n ? x + (size_t)row * n + c : x, c < n ? 4 : 0);
            }
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
fusedTensorCoreHalfStagedKernel(const float *__restrict__ x, const uint2 *__restrict__ packed,
                                float *__restrict__ y, int n)
{
    __shared__ uint2 smem[H_UINT2S];
    extern __shared__ __align__(16) float xstage[];   // WARPS x M_TILES x XS_FLOATS
    for (int i = threadIdx.x; i < H_UINT2S; i += WARPS * 32) smem[i] = packed[i];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float *buf = xstage + warp * (M_TILES * XS_FLOATS);
    for (int i = lane; i < M_TILES * (XS_ROWS - IN) * XS_STRIDE; i += 32) {
        const int m = i / ((XS_ROWS - IN) * XS_STRIDE), r = i % ((XS_ROWS - IN) * XS_STRIDE);
        buf[m * XS_FLOATS + IN * XS_STRIDE + r] = 0.0f;
    }
    __syncthreads();
    const uint2 *f1 = smem;
    const uint2 *f2 = f1 + H_F1;
    const uint2 *f3 = f2 + H_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + H_F3);

    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + 16 * M_TILES - 1) / (16 * M_TILES);
    const int stride = gridDim.x * WARPS;
    const bool vec = (reinterpret_cast<size_t>(x) % 16 == 0) && (n % 4 == 0);

    int tile = blockIdx.x * WARPS + warp;
    if (tile < tiles) stage_x(buf, x, n, tile * 16 * M_TILES, lane, vec);
    for (; tile < tiles; tile += stride) {
        const int col0 = tile * 16 * M_TILES;
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
        unsigned a1[M_TILES][H_K1][4];
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int j = 0; j < H_K1; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    // register r: k = 16 j + 2q (+1) (+8 for r >= 2), column g (+8 for odd r)
                    const float *p = buf + m * XS_FLOATS + (16 * j + 2 * q + ((r & 2) ? 8 : 0)) * XS_STRIDE + g +
                                     ((r & 1) ? 8 : 0);
                    a1[m][j][r] = pack2(p[0], p[XS_STRIDE]);
                }
        __syncwarp();
        if (tile + stride < tiles) stage_x(buf, x, n, (tile + stride) * 16 * M_TILES, lane, vec);

        float acc[M_TILES][H_NT][4];
        bias_fragments(acc, bias, 0, q);
#pragma unroll
        for (int j = 0; j < H_K1; ++j)
#pragma unroll
            for (int nt = 0; nt < H_NT; ++nt) {
                const uint2 b = f1[(j * H_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_f16(acc[m][nt], a1[m][j], b);
            }

        float acc2[M_TILES][H_NT][4];
        bias_fragments(acc2, bias, HIDDEN, q);
#pragma unroll
        for (int j = 0; j < H_K2; ++j) {
            unsigned a[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                a[m][0] = pack_relu(acc[m][2 * j][0], acc[m][2 * j][1]);
                a[m][1] = pack_relu(acc[m][2 * j][2], acc[m][2 * j][3]);
                a[m][2] = pack_relu(acc[m][2 * j + 1][0], acc[m][2 * j + 1][1]);
                a[m][3] = pack_relu(acc[m][2 * j + 1][2], acc[m][2 * j + 1][3]);
            }
#pragma unroll
            for (int nt = 0; nt < H_NT; ++nt) {
                const uint2 b = f2[(j * H_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_f16(acc2[m][nt], a[m], b);
            }
        }

        float out[M_TILES][4];
        bias_fragments(out, bias, 2 * HIDDEN, q);
#pragma unroll
        for (int j = 0; j < H_K2; ++j) {
            const uint2 b = f3[j * 32 + lane];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                const unsigned a[4] = {pack_relu(acc2[m][2 * j][0], acc2[m][2 * j][1]),
                                       pack_relu(acc2[m][2 * j][2], acc2[m][2 * j][3]),
                                       pack_relu(acc2[m][2 * j + 1][0], acc2[m][2 * j + 1][1]),
                                       pack_relu(acc2[m][2 * j + 1][2], acc2[m][2 * j + 1][3])};
                mma_f16(out[m], a, b);
            }
        }
        if (q < OUT / 2) store_output_fragments(y, out, col0, g, q, n);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}
