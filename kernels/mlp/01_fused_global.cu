// MLP step 01 - one fused kernel; the intermediate results still go through global memory.
//
// A block owns COLUMNS columns of x and has 64 threads per column: thread (c, r) computes
// hidden unit r of column c in layer 1, writes it to h1 in global memory, waits for the rest
// of the block, then does the same for layer 2. Only every 16th thread computes one of the
// four outputs, since the last layer is 16 times narrower than the hidden ones.
//
// One launch instead of five, yet the write-up measured it slower than the baseline: a warp
// here reads one column of x and 32 different rows of W1 (rows are 71 floats apart), where
// the baseline's 16x16 tile shares columns across the warp.
//
// Layouts as in 00_baseline.cu; h1 and h2 are scratch matrices 64 x N in global memory.
// Launch: block = 64 * COLUMNS threads, grid = ceil(N / COLUMNS).
#ifndef COLUMNS
#define COLUMNS 4
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4

extern "C" __global__ void fusedGlobalMemoryKernel(const float *__restrict__ x,
                                                   const float *__restrict__ W1, const float *__restrict__ b1,
                                                   const float *__restrict__ W2, const float *__restrict__ b2,
                                                   const float *__restrict__ W3, const float *__restrict__ b3,
                                                   float *h1, float *h2, float *__restrict__ y, int n)
{
    const int r = threadIdx.x % HIDDEN;
    const int col = blockIdx.x * COLUMNS + threadIdx.x / HIDDEN;
    const bool active = col < n;  // no early return: every thread must reach __syncthreads()

    if (active) {
        float acc = b1[r];
        for (int k = 0; k < IN; ++k) {
            acc += W1[r * IN + k] * x[(size_t)k * n + col];
        }
        h1[(size_t)r * n + col] = fmaxf(acc, 0.0f);
    }
    // The barrier also orders this block's global writes before the reads below.
    __syncthreads();
    if (active) {
        float acc = b2[r];
        for (int k = 0; k < HIDDEN; ++k) {
            acc += W2[r * HIDDEN + k] * h1[(size_t)k * n + col];
        }
        h2[(size_t)r * n + col] = fmaxf(acc, 0.0f);
    }
    __syncthreads();
    if (active && r % (HIDDEN / OUT) == 0) {
        const int o = r / (HIDDEN / OUT);
        float acc = b3[o];
        for (int k = 0; k < HIDDEN; ++k) {
            acc += W3[o * HIDDEN + k] * h2[(size_t)k * n + col];
        }
        y[(size_t)o * n + col] = acc;
    }
}
