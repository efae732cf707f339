// mma.sync fragment helpers of the tensor-core MLP steps 13, 14 and 15: one m16n8k8 TF32 product
// and its 3xTF32 split (step 13), one m16n8k16 FP16 product and the float -> __half2 packing of
// accumulators into the next A fragment (step 14), and the 3xFP16 split (step 15). Each step's
// file explains the fragment layout it uses.
#pragma once

#include <cuda_fp16.h>

// ---------------------------------------------------------------- accumulators (steps 13-15)

// Accumulators of M column tiles x NTL n-tiles of m16n8 set to the layer's bias (which starts at
// bias[offset]): lane (g, q) holds units 8 nt + 2q and 8 nt + 2q + 1 of rows g and g + 8.
template <int M, int NTL>
static __device__ __forceinline__ void bias_fragments(float (&acc)[M][NTL][4], const float *bias, int offset, int q)
{
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int nt = 0; nt < NTL; ++nt) {
            acc[m][nt][0] = acc[m][nt][2] = bias[offset + 8 * nt + 2 * q];
            acc[m][nt][1] = acc[m][nt][3] = bias[offset + 8 * nt + 2 * q + 1];
        }
}

// The same for the last layer's single n-tile (outputs 2q, 2q + 1).
template <int M>
static __device__ __forceinline__ void bias_fragments(float (&out)[M][4], const float *bias, int offset, int q)
{
#pragma unroll
    for (int m = 0; m < M; ++m) {
        out[m][0] = out[m][2] = bias[offset + 2 * q];
        out[m][1] = out[m][3] = bias[offset + 2 * q + 1];
    }
}

// The last layer's accumulators into y (outputs x n, column-major by output): lane (g, q) writes
// outputs 2q, 2q + 1 of columns col0 + 16 m + g and + 8 that are inside n, but for the m-tiles set
// in ``skip`` (step 15: columns its FP32 path has written).
template <int M>
static __device__ __forceinline__ void store_output_fragments(float *__restrict__ y, const float (&out)[M][4], int col0,
                                                              int g, int q, int n, unsigned skip = 0)
{
#pragma unroll
    for (int m = 0; m < M; ++m) {
        if ((skip >> m) & 1u) continue;
        const int col = col0 + 16 * m + g;
        if (col < n) {
            y[(size_t)(2 * q) * n + col] = out[m][0];
            y[(size_t)(2 * q + 1) * n + col] = out[m][1];
        }
        if (col + 8 < n) {
            y[(size_t)(2 * q) * n + col + 8] = out[m][2];
            y[(size_t)(2 * q + 1) * n + col + 8] = out[m][3];
        }
    }
}

// ---------------------------------------------------------------- TF32, m16n8k8 (step 13)

static __device__ __forceinline__ unsigned tf32_bits(float v)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

static __device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Split four activations into their big and small TF32 parts.
static __device__ __forceinline__ void split4(const float (&v)[4], unsigned (&big)[4], unsigned (&small)[4])
{
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        big[i] = tf32_bits(v[i]);
        small[i] = tf32_bits(v[i] - __uint_as_float(big[i]));
    }
}

// acc += A * B in 3xTF32 for one m16n8k8 step, B given as {b0_big, b1_big, b0_small, b1_small}.
static __device__ __forceinline__ void mma_3xtf32(float (&acc)[4], const unsigned (&a_big)[4],
                                                  const unsigned (&a_small)[4], float4 b)
{
    mma_tf32(acc, a_small, __float_as_uint(b.x), __float_as_uint(b.y));
    mma_tf32(acc, a_big, __float_as_uint(b.z), __float_as_uint(b.w));
    mma_tf32(acc, a_big, __float_as_uint(b.x), __float_as_uint(b.y));
}

// ---------------------------------------------------------------- FP16, m16n8k16 (step 14)

static __device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], uint2 b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

static __device__ __forceinline__ unsigned pack_relu(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(fmaxf(lo, 0.0f), fmaxf(hi, 0.0f));
    return *reinterpret_cast<const unsigned *>(&h);
}

static __device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned *>(&h);
}

// ---------------------------------------------------------------- 3xFP16 (step 15)

static __device__ __forceinline__ void mma_f16x(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (lo, hi) floats -> a __half2 of their hi parts and one of their residuals.
static __device__ __forceinline__ void split2(float v0, float v1, unsigned &hi, unsigned &lo)
{
    const __half2 h = __floats2half2_rn(v0, v1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn(v0 - back.x, v1 - back.y);
    hi = *reinterpret_cast<const unsigned *>(&h);
    lo = *reinterpret_cast<const unsigned *>(&l);
}

static __device__ __forceinline__ void mma_3xf16(float (&acc)[4], const unsigned (&a_hi)[4],
                                                 const unsigned (&a_lo)[4], uint4 b)
{
    mma_f16x(acc, a_lo, b.x, b.y);
    mma_f16x(acc, a_hi, b.z, b.w);
    mma_f16x(acc, a_hi, b.x, b.y);
}
