// The device's read rate: every thread streams 16-byte loads through a grid-stride loop, READS
// independent loads in flight per iteration, and adds what it read (one store per thread at the
// end, so the loads cannot be dropped as dead code). Nothing is written while reading, so this is
// the rate a kernel that mostly reads (the MLP's x, 71 floats a column, against 4 written) can
// approach; the copy ceiling reads and writes the same number of bytes. The harness launches 8
// blocks of 256 threads per SM over a 1 GiB buffer (n4 = its size in float4).
#ifndef READS
#define READS 4
#endif

extern "C" __global__ void read_stream(const float4 *__restrict__ x, long long n4, float *__restrict__ out)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    for (; i + (READS - 1) * stride < n4; i += READS * stride) {
        float4 v[READS];
#pragma unroll
        for (int r = 0; r < READS; ++r) v[r] = __ldcs(x + i + r * stride);   // streaming: read once
#pragma unroll
        for (int r = 0; r < READS; ++r) s += (v[r].x + v[r].y) + (v[r].z + v[r].w);
    }
    for (; i < n4; i += stride) {
        const float4 v = __ldcs(x + i);
        s += (v.x + v.y) + (v.z + v.w);
    }
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}
