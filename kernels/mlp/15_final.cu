// MLP step 15 - final: the fastest FP32-accurate kernel per test case.
//
// Step 13 showed that 3xTF32 keeps FP32 accuracy on tensor cores, at three m16n8k8 products
// per product. This file adds the same idea on the FP16 datapath, which does twice the work per
// instruction: every operand is split as v = hi + lo with hi = half(v), lo = half(v - hi), and
//   acc += a_lo * b_hi + a_hi * b_lo + a_hi * b_hi       (mma.sync m16n8k16, FP32 accumulation)
// hi and lo together carry 22 significant bits (float has 24); the dropped a_lo * b_lo term is
// about 2^-22 of a product. lo is not rescaled: below 2^-14 it turns subnormal and keeps an
// absolute error under 2^-25, far below what the float64 check allows for these inputs (|x| <= 1,
// He-scaled weights). Values beyond 65504 would overflow half: the inputs, weights and hidden
// activations of this network stay orders of magnitude below.
//
// Register use and fragment layout are step 14's (k16 accumulators are the next A fragments);
// the weights are packed as uint4 {b0_hi, b1_hi, b0_lo, b1_lo} per lane, then the biases
// (39,456 bytes of static shared memory). Step 13's kernel is compiled into the same module;
// the host (kernelbook.mlp.tensor.Final) picks the kernel and its launch shape per test case.
// In an exploratory H100 run the 3xFP16 kernel won at both sizes (100x100: 0.36 ms against
// 0.57-0.61 ms for 3xTF32; 5x5: 8 us against 11 us), with relative L2 error 8e-7 vs float64.
#include "mma_fragments.cuh"     // mma_f16x, split2, mma_3xf16
#include "tc_3xtf32_kernel.cuh"   // step 13's kernel

#define S_K1 5
#define S_K2 4
#define S_NT 8
#define S_F1 (S_K1 * S_NT * 32)
#define S_F2 (S_K2 * S_NT * 32)
#define S_F3 (S_K2 * 32)
#define S_UINT4S (S_F1 + S_F2 + S_F3 + 136 / 4)

extern "C" __global__ void __launch_bounds__(WARPS * 32)
fusedTensorCore3xFP16Kernel(const float *__restrict__ x, const uint4 *__restrict__ packed,
                            float *__restrict__ y, int n)
{
    __shared__ uint4 smem[S_UINT4S];
    for (int i = threadIdx.x; i < S_UINT4S; i += WARPS * 32) smem[i] = packed[i];
    __syncthreads();
    const uint4 *f1 = smem;
    const uint4 *f2 = f1 + S_F1;
    const uint4 *f3 = f2 + S_F2;
    const float *bias = reinterpret_cast<const float *>(f3 + S_F3);

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;
    const int tiles = (n + 16 * M_TILES - 1) / (16 * M_TILES);

    for (int tile = blockIdx.x * WARPS + warp; tile < tiles; tile += gridDim.x * WARPS) {
        const int col0 = tile * 16 * M_TILES;

        float acc[M_TILES][S_NT][4];
        bias_fragments(acc, bias, 0, q);
#pragma unroll
        for (int j = 0; j < S_K1; ++j) {
            unsigned hi[M_TILES][4], lo[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                const int col = col0 + 16 * m + g;
                float v[8];  // k = 2q, 2q+1 of rows g, g+8, then k = 2q+8, 2q+9
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int k = 16 * j + 2 * q + (e & 1) + ((e & 4) ? 8 : 0);
                    const int c = col + ((e & 2) ? 8 : 0);
                    v[e] = (k < IN && c < n) ? x[(size_t)k * n + c] : 0.0f;
                }
#pragma unroll
                for (int r = 0; r < 4; ++r) split2(v[2 * r], v[2 * r + 1], hi[m][r], lo[m][r]);
            }
#pragma unroll
            for (int nt = 0; nt < S_NT; ++nt) {
                const uint4 b = f1[(j * S_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_3xf16(acc[m][nt], hi[m], lo[m], b);
            }
        }

        float acc2[M_TILES][S_NT][4];
        bias_fragments(acc2, bias, HIDDEN, q);
#pragma unroll
        for (int j = 0; j < S_K2; ++j) {
            unsigned hi[M_TILES][4], lo[M_TILES][4];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float *c = acc[m][2 * j + r / 2] + 2 * (r % 2);
                    split2(fmaxf(c[0], 0.0f), fmaxf(c[1], 0.0f), hi[m][r], lo[m][r]);
                }
#pragma unroll
            for (int nt = 0; nt < S_NT; ++nt) {
                const uint4 b = f2[(j * S_NT + nt) * 32 + lane];
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mma_3xf16(acc2[m][nt], hi[m], lo[m], b);
            }
        }

        float out[M_TILES][4];
        bias_fragments(out, bias, 2 * HIDDEN, q);
#pragma unroll
        for (int j = 0; j < S_K2; ++j) {
            const uint4 b = f3[j * 32 + lane];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                unsigned hi[4], lo[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float *c = acc2[m][2 * j + r / 2] + 2 * (r % 2);
                    split2(fmaxf(c[0], 0.0f), fmaxf(c[1], 0.0f), hi[r], lo[r]);
                }
                mma_3xf16(out[m], hi, lo, b);
            }
        }

        // Lane (g, q) holds outputs 2q, 2q + 1 of columns g and g + 8: only q < 2 are real.
        if (q < OUT / 2) {
            store_output_fragments(y, out, col0, g, q, n);
        }
    }
}
