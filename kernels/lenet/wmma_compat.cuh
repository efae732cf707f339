// WMMA compatibility layer for the tensor-core implicit GEMMs: steps 10 and 11 include it (and
// step 12 through 11).
//
// Those steps write their fragment code against nvcuda::wmma (fragment, fill_fragment,
// load_matrix_sync, mma_sync, store_matrix_sync, __float_to_tf32) under the name `wmma`. This
// header gives them that name one of two ways:
//
//   - where <crt/mma.h> exists (nvcc, or NVRTC with the full toolkit's headers): the real
//     <mma.h>, namespace wmma = nvcuda::wmma;
//   - otherwise (CuPy's NVRTC may see only the pip-packaged CUDA headers, whose mma.h includes a
//     crt/mma.h they do not ship): namespace wmma = ptx_wmma, below, which issues the same
//     WMMA operations as the PTX instructions nvcuda::wmma compiles to (wmma.load / wmma.mma /
//     wmma.store), for the fragment shapes those steps use: m16n16k16 and m8n32k16 with FP16
//     operands, m16n16k8 with TF32 operands, float accumulators, row-major operands.
//
// It exists so that those steps do not each carry the same ~130 lines; the kernels read the same
// either way.
//
// Compile-time parameter (the harness may pass it as -D...):
//   WMMA_VIA_PTX=1 takes the PTX path even where <mma.h> works (to test it with nvcc).
#ifndef LENET_WMMA_COMPAT_CUH
#define LENET_WMMA_COMPAT_CUH

#include <cuda_fp16.h>

#ifndef WMMA_VIA_PTX
#define WMMA_VIA_PTX 0
#endif

#if __has_include(<crt/mma.h>) && !WMMA_VIA_PTX
#include <mma.h>
namespace wmma = nvcuda::wmma;
#else
namespace ptx_wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major };

// Per-thread registers of an operand fragment: 8 x f16x2 for FP16 shapes, 4 x b32 for TF32.
template <typename T> struct operand_regs { static constexpr int count = 8; };
template <> struct operand_regs<precision::tf32> { static constexpr int count = 4; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    unsigned r[operand_regs<T>::count];
};
template <int M, int N, int K>
struct fragment<accumulator, M, N, K, float, void> {
    float r[8];  // every accumulator shape used here holds 8 floats per thread
};

template <int M, int N, int K>
__device__ __forceinline__ void fill_fragment(fragment<accumulator, M, N, K, float> &f, float v)
{
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        f.r[i] = v;
    }
}

__device__ __forceinline__ float __float_to_tf32(float v)
{
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(v));
    return __uint_as_float(u);
}

#define PTX_WMMA_R8(f) "=r"((f).r[0]), "=r"((f).r[1]), "=r"((f).r[2]), "=r"((f).r[3]), \
                       "=r"((f).r[4]), "=r"((f).r[5]), "=r"((f).r[6]), "=r"((f).r[7])
#define PTX_WMMA_R4(f) "=r"((f).r[0]), "=r"((f).r[1]), "=r"((f).r[2]), "=r"((f).r[3])
#define PTX_WMMA_I8(f) "r"((f).r[0]), "r"((f).r[1]), "r"((f).r[2]), "r"((f).r[3]), \
                       "r"((f).r[4]), "r"((f).r[5]), "r"((f).r[6]), "r"((f).r[7])
#define PTX_WMMA_I4(f) "r"((f).r[0]), "r"((f).r[1]), "r"((f).r[2]), "r"((f).r[3])
#define PTX_WMMA_D8(f) "=f"((f).r[0]), "=f"((f).r[1]), "=f"((f).r[2]), "=f"((f).r[3]), \
                       "=f"((f).r[4]), "=f"((f).r[5]), "=f"((f).r[6]), "=f"((f).r[7])
#define PTX_WMMA_C8(f) "f"((f).r[0]), "f"((f).r[1]), "f"((f).r[2]), "f"((f).r[3]), \
                       "f"((f).r[4]), "f"((f).r[5]), "f"((f).r[6]), "f"((f).r[7])

// The asm statements read or write memory the compiler cannot see: "memory" keeps them on
// their side of the surrounding barriers.
#define PTX_WMMA_LOAD16(USE, LETTER, M, N, SHAPE)                                                      \
    __device__ __forceinline__ void load_matrix_sync(fragment<USE, M, N, 16, __half, row_major> &f,    \
                                                     const __half *p, unsigned ldm)                    \
    {                                                                                                  \
        asm volatile("wmma.load." LETTER ".sync.aligned.row." SHAPE ".f16 "                           \
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, [%8], %9;"                                     \
                     : PTX_WMMA_R8(f) : "l"(p), "r"(ldm) : "memory");                                  \
    }
PTX_WMMA_LOAD16(matrix_a, "a", 16, 16, "m16n16k16")
PTX_WMMA_LOAD16(matrix_b, "b", 16, 16, "m16n16k16")
PTX_WMMA_LOAD16(matrix_a, "a", 8, 32, "m8n32k16")
PTX_WMMA_LOAD16(matrix_b, "b", 8, 32, "m8n32k16")

#define PTX_WMMA_LOAD_TF32(USE, LETTER)                                                                \
    __device__ __forceinline__ void load_matrix_sync(fragment<USE, 16, 16, 8, precision::tf32, row_major> &f, \
                                                     const float *p, unsigned ldm)                     \
    {                                                                                                  \
        asm volatile("wmma.load." LETTER ".sync.aligned.row.m16n16k8.tf32 {%0, %1, %2, %3}, [%4], %5;" \
                     : PTX_WMMA_R4(f) : "l"(p), "r"(ldm) : "memory");                                  \
    }
PTX_WMMA_LOAD_TF32(matrix_a, "a")
PTX_WMMA_LOAD_TF32(matrix_b, "b")

#define PTX_WMMA_MMA16(M, N, SHAPE)                                                                     \
    __device__ __forceinline__ void mma_sync(fragment<accumulator, M, N, 16, float> &d,                 \
                                             const fragment<matrix_a, M, N, 16, __half, row_major> &a,  \
                                             const fragment<matrix_b, M, N, 16, __half, row_major> &b,  \
                                             const fragment<accumulator, M, N, 16, float> &c)           \
    {                                                                                                   \
        asm volatile("wmma.mma.sync.aligned.row.row." SHAPE ".f32.f32 "                                \
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11, %12, %13, %14, %15}, "       \
                     "{%16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, %27, %28, %29, %30, %31};" \
                     : PTX_WMMA_D8(d) : PTX_WMMA_I8(a), PTX_WMMA_I8(b), PTX_WMMA_C8(c));               \
    }
PTX_WMMA_MMA16(16, 16, "m16n16k16")
PTX_WMMA_MMA16(8, 32, "m8n32k16")

__device__ __forceinline__ void mma_sync(fragment<accumulator, 16, 16, 8, float> &d,
                                         const fragment<matrix_a, 16, 16, 8, precision::tf32, row_major> &a,
                                         const fragment<matrix_b, 16, 16, 8, precision::tf32, row_major> &b,
                                         const fragment<accumulator, 16, 16, 8, float> &c)
{
    asm volatile("wmma.mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, {%12, %13, %14, %15}, "
                 "{%16, %17, %18, %19, %20, %21, %22, %23};"
                 : PTX_WMMA_D8(d) : PTX_WMMA_I4(a), PTX_WMMA_I4(b), PTX_WMMA_C8(c));
}

#define PTX_WMMA_STORE(M, N, K, SHAPE)                                                                  \
    __device__ __forceinline__ void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &d, \
                                                      unsigned ldm, layout_t)                           \
    {                                                                                                   \
        asm volatile("wmma.store.d.sync.aligned.row." SHAPE ".f32 "                                    \
                     "[%0], {%1, %2, %3, %4, %5, %6, %7, %8}, %9;"                                      \
                     : : "l"(p), PTX_WMMA_C8(d), "r"(ldm) : "memory");                                  \
    }
PTX_WMMA_STORE(16, 16, 16, "m16n16k16")
PTX_WMMA_STORE(8, 32, 16, "m8n32k16")
PTX_WMMA_STORE(16, 16, 8, "m16n16k8")
}  // namespace ptx_wmma
namespace wmma = ptx_wmma;
#endif

#endif  // LENET_WMMA_COMPAT_CUH
