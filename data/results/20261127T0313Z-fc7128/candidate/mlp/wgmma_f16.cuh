// Hopper's warpgroup tensor-core instruction (wgmma.mma_async, sm_90a) in the one form MLP step 19
// uses: D (64 x 64, FP32) += A (64 x 16, FP16, in registers) x B (16 x 64, FP16, in shared memory).
//
// A warpgroup is four consecutive warps (128 threads); all four issue the instruction together.
// Warp w of the group owns rows 16w .. 16w + 15 of A and D. Within a warp, lane (g, q) = (lane / 4,
// lane % 4) holds the same pieces as in mma.sync's m16n8k16:
//   A (4 registers, two halves each): a0 = (row g, k 2q, 2q+1), a1 = (row g+8, k 2q, 2q+1),
//                                     a2 = (row g, k 2q+8, 2q+9), a3 = (row g+8, k 2q+8, 2q+9);
//   D (32 floats): d[4c + 0, 1] = (row g, columns 8c + 2q, +1), d[4c + 2, 3] = (row g+8, same columns)
//   for each 8-column chunk c = 0..7.
// So the D of one layer, paired up, is the A of the next (chunks 2j and 2j+1 make k-step j).
//
// B is read by the tensor cores from shared memory through a 64-bit descriptor. Here B is "K-major"
// without swizzle: 8 x 8 core matrices (8 rows of N, 8 halves of K, 16 bytes a row, 128 bytes each);
// LBO = bytes between the two core matrices of a row group along K, SBO = bytes between groups of 8
// rows along N. The instruction runs asynchronously: it reads A's registers and writes D's after it
// is issued, so neither may be touched until wgmma_wait says the group is done (fence_reg ties each
// register to that point for the compiler).
#pragma once

// Descriptor of a K-major, unswizzled B at shared address `saddr` (16-byte aligned).
static __device__ __forceinline__ unsigned long long wgmma_desc(unsigned saddr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32);
}

// The descriptor (low word `lo`, high word `hi`) moved `bytes` further (a multiple of 16 that keeps the
// address field, (address >> 4) in 14 bits, from carrying): only the low word changes.
static __device__ __forceinline__ unsigned long long desc_at(unsigned lo, unsigned hi, unsigned bytes)
{
    unsigned long long d;
    asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo + (bytes >> 4)), "r"(hi));
    return d;
}

// Before the first wgmma that reads registers written by ordinary instructions.
static __device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// Close the group of wgmmas issued since the last commit.
static __device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Wait until at most N committed groups are still running.
template <int N>
static __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void fence_reg(float &r)
{
    asm volatile("" : "+f"(r)::"memory");
}

static __device__ __forceinline__ void fence_reg(unsigned &r)
{
    asm volatile("" : "+r"(r)::"memory");
}

// d = (accumulate ? d : 0) + A x B; `accumulate` is a compile-time 0 or 1 at every call here.
static __device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const unsigned (&a)[4], unsigned long long desc,
                                                       int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
