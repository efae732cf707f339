// Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier), as MLP steps 18
// and 19 use them (sm_90): a 2-D tile copy and a plain bulk copy from global into shared memory,
// each signalling a barrier when its bytes have landed, and the barrier operations a warp needs to
// wait for them.
#pragma once

static __device__ __forceinline__ unsigned smem_addr(const void *p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A barrier expecting `count` arrivals per phase.
static __device__ __forceinline__ void barrier_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Make initialised barriers visible to the TMA unit (the async proxy) before any copy uses them.
static __device__ __forceinline__ void barrier_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Arrive once and announce that `bytes` more bytes will land before this phase completes.
static __device__ __forceinline__ void barrier_expect_bytes(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Arrive once (no bytes announced).
static __device__ __forceinline__ void barrier_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Spin until the phase of parity `parity` has completed.
static __device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity)
{
    unsigned done;
#ifdef SPIN_LIMIT   // development builds: a copy that never lands traps instead of hanging
    long long tries = 0;
#endif
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#ifdef SPIN_LIMIT
        if (++tries > SPIN_LIMIT) __trap();
#endif
    } while (!done);
}

// Copy the box of the tensor map `map` (a global address) whose first element is at coordinates
// (c0 fastest, c1) into shared memory at `dst`; the barrier `bar` counts its bytes. Elements
// outside the tensor are written as zeros (and still counted).
static __device__ __forceinline__ void tma_copy_2d(unsigned dst, const void *map, int c0, int c1, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// Fetch the descriptor into the descriptor cache ahead of the first copy.
static __device__ __forceinline__ void tma_prefetch_map(const void *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory at `src` into
// shared memory at `dst` in one bulk copy; the barrier `bar` counts its bytes.
static __device__ __forceinline__ void bulk_copy(unsigned dst, const void *src, unsigned bytes, unsigned bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(src)), "r"(bytes), "r"(bar) : "memory");
}
