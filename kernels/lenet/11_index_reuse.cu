// LeNet step 11 - index reuse: the FP16 tensor-core implicit GEMM of step 10 with the
// loader's index arithmetic hoisted out of the per-element path.
//
//   y[b][m][h][w] = sum over r of k[m][r] * xu[r][n]      (r = c*K*K + p*K + q, n = (b, h, w))
//   xu[r][n] = x[x_col(n) + x_row(r)]
//     x_col(n) = b*C*H*W + h*W + w      (depends on the column only)
//     x_row(r) = (c*H + p)*W + q        (depends on the reduction index only)
//
// Step 10 decomposed both r and n for every element it gathered (four divisions each).
// Here the address is split into its column and row parts and each is computed once:
//
//   - columns: every thread loads the same few columns of the x tile in every K-tile (the
//     loader's mapping is fixed), so it computes x_col for them once, before the reduction
//     loop, and keeps them in registers (-1 marks a column past N);
//   - rows: a table x_row[BK] for the K-tile is computed by BK threads (one division chain
//     each) and read from shared memory by all (-1 marks an index past CKK). Every warp reads
//     one entry at a time, so the read is a broadcast. The table is double-buffered: while the
//     threads gather tile t with table t % 2, the first BK threads already fill table
//     (t + 1) % 2, so no extra barrier is needed.
//
// The gather of one element is then: one shared read (broadcast), one add, one compare, one
// global load. Everything else (fragments, padding with zeros, staged output) is step 10's
// FP16 path; the output write reuses the per-thread column decomposition too.
//
// Layouts (row-major; global arrays float32, shared tiles __half):
//   x: B x C x H x W     k: M x C x K x K (= M x CKK)     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.gemm.IndexReuse):
//   block = WARPS * 32 threads, warps side by side along N
//   grid  = (ceil(N / BN), ceil(M / FRAG_M)),  BN = WARPS * FRAGS_N * FRAG_N
// Loader mapping: thread t owns column (t % BN) + j*THREADS of the x tile (j < COLS) and rows
// t / BN + i*ROW_GROUPS (i < BK / ROW_GROUPS), where COLS = BN / THREADS when BN >= THREADS,
// else ROW_GROUPS = THREADS / BN threads share a column. One of the two divides the other.
//
// Element counts of x, k and y fit in int32 (checked before launch), so indices are int.
//
// Compile-time parameters (the harness passes them as -D...):
#include <cuda_fp16.h>

#ifndef FRAG_M
#define FRAG_M 16
#endif
#ifndef FRAG_N
#define FRAG_N 16
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef FRAGS_N
#define FRAGS_N 2
#endif
#ifndef BK
#define BK 16
#endif

#ifndef WMMA_VIA_PTX
#define WMMA_VIA_PTX 0
#endif

// nvcuda::wmma lives in <mma.h>. CuPy's NVRTC may see only the pip-packaged CUDA headers, whose
// mma.h includes a crt/mma.h they do not ship; then the same WMMA operations are issued below
// as the PTX instructions nvcuda::wmma compiles to (wmma.load / wmma.mma / wmma.store), behind
// the same names, so the kernel reads the same either way.
// Define WMMA_VIA_PTX=1 to take the PTX path even where <mma.h> works (to test it).
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

#define FRAG_K 16
#define THREADS (WARPS * 32)
#define BM FRAG_M
#define WARP_N (FRAGS_N * FRAG_N)
#define BN (WARPS * WARP_N)
#define COLS (BN >= THREADS ? BN / THREADS : 1)
#define ROW_GROUPS (THREADS >= BN ? THREADS / BN : 1)
#define ROWS_PER_THREAD (BK / ROW_GROUPS)

#if BK % FRAG_K != 0
#error "BK must be a multiple of 16"
#endif
#if (BN % THREADS != 0) && (THREADS % BN != 0)
#error "BN and the thread count must divide one another"
#endif
#if BK % ROW_GROUPS != 0
#error "BK must be a multiple of the number of threads sharing a column"
#endif

// 16 bytes of padding per row: spreads fragment loads over the banks and keeps the wmma
// alignment rules (16-byte row starts, 32-byte fragment starts).
#define LDA (BK + 8)
#define LDB (BN + 8)
#define LDC (BN + 4)

// The reduction index r as an offset into x (relative to a column's x_col), or -1 past CKK.
__device__ __forceinline__ int row_offset(int r, int CKK, int KK, int K, int H, int W)
{
    if (r >= CKK) {
        return -1;
    }
    const int c = r / KK;
    const int pq = r - c * KK;
    const int p = pq / K;
    const int q = pq - p * K;
    return (c * H + p) * W + q;
}

extern "C" __global__ void __launch_bounds__(THREADS)
conv_index_reuse(float *y, const float *x, const float *k,
                 int B, int M, int C, int H, int W, int K)
{
    __shared__ __align__(32) __half k_tile[BM * LDA];
    __shared__ __align__(32) __half x_tile[BK * LDB];
    __shared__ __align__(32) float out_tile[BM * LDC];
    __shared__ int x_row[2][BK];

    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int HW = H_out * W_out;
    const int KK = K * K;
    const int CKK = C * KK;
    const int N = B * HW;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;  // n0 + BN fits in int (N <= 2^31 - 1 - BN checked)

    // This thread's columns of the x tile, decomposed once for the whole reduction. The same
    // decomposition gives the output address y_col = b*M*HW + hw of the column.
    const int col0 = tid % BN;
    const int row0 = tid / BN;
    int x_col[COLS];
    int y_col[COLS];
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
        const int n = n0 + col0 + j * THREADS;
        x_col[j] = -1;
        y_col[j] = -1;
        if (n < N) {
            const int b = n / HW;
            const int hw = n - b * HW;
            const int h = hw / W_out;
            const int w = hw - h * W_out;
            x_col[j] = b * C * H * W + h * W + w;
            y_col[j] = b * M * HW + hw;
        }
    }
    if (tid < BK) {
        x_row[0][tid] = row_offset(tid, CKK, KK, K, H, W);
    }
    __syncthreads();  // table 0 is read by every thread in the first K-tile

    wmma::fragment<wmma::accumulator, FRAG_M, FRAG_N, FRAG_K, float> acc[FRAGS_N];
#pragma unroll
    for (int f = 0; f < FRAGS_N; ++f) {
        wmma::fill_fragment(acc[f], 0.0f);
    }

    int buf = 0;
    for (int r0 = 0; r0 < CKK; r0 += BK) {
        // Next K-tile's table into the other buffer. Its previous readers were the loads of
        // the tile before this one, which all finished before the last barrier.
        if (tid < BK) {
            x_row[buf ^ 1][tid] = row_offset(r0 + BK + tid, CKK, KK, K, H, W);
        }

        // k tile: BM x BK, consecutive threads along a row of k (coalesced); the i, j split
        // is by compile-time constants (shifts).
#pragma unroll
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int i = e / BK;
            const int j = e % BK;
            const int m = m0 + i;
            const int r = r0 + j;
            k_tile[i * LDA + j] = __float2half_rn((m < M && r < CKK) ? k[m * CKK + r] : 0.0f);
        }

        // x tile: the thread's rows times its columns; consecutive threads hold consecutive
        // columns (consecutive w): coalesced global reads, consecutive shared writes.
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; ++i) {
            const int row = row0 + i * ROW_GROUPS;
            const int off = x_row[buf][row];  // same entry for the whole warp: a broadcast
#pragma unroll
            for (int j = 0; j < COLS; ++j) {
                const float v = (off >= 0 && x_col[j] >= 0) ? x[x_col[j] + off] : 0.0f;
                x_tile[row * LDB + col0 + j * THREADS] = __float2half_rn(v);
            }
        }
        __syncthreads();  // tiles (and the next table) complete before the fragment loads

#pragma unroll
        for (int kk = 0; kk < BK; kk += FRAG_K) {
            wmma::fragment<wmma::matrix_a, FRAG_M, FRAG_N, FRAG_K, __half, wmma::row_major> a;
            wmma::load_matrix_sync(a, k_tile + kk, LDA);
#pragma unroll
            for (int f = 0; f < FRAGS_N; ++f) {
                wmma::fragment<wmma::matrix_b, FRAG_M, FRAG_N, FRAG_K, __half, wmma::row_major> bfrag;
                wmma::load_matrix_sync(bfrag, x_tile + kk * LDB + warp * WARP_N + f * FRAG_N, LDB);
                wmma::mma_sync(acc[f], a, bfrag, acc[f]);
            }
        }
        __syncthreads();  // the next K-tile overwrites the tiles
        buf ^= 1;
    }

#pragma unroll
    for (int f = 0; f < FRAGS_N; ++f) {
        wmma::store_matrix_sync(out_tile + warp * WARP_N + f * FRAG_N, acc[f], LDC, wmma::mem_row_major);
    }
    __syncthreads();  // all slices staged before threads read other warps' columns

    // Each thread writes its own columns, all rows it shares the column for: consecutive
    // threads write consecutive hw of one map (coalesced).
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
        if (y_col[j] < 0) {
            continue;
        }
        for (int i = row0; i < BM; i += ROW_GROUPS) {
            const int m = m0 + i;
            if (m < M) {
                y[y_col[j] + m * HW] = out_tile[i * LDC + col0 + j * THREADS];
            }
        }
    }
}
