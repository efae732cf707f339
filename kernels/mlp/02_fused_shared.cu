// MLP step 02 - fused kernel with the weights and the intermediate results in shared memory.
//
// Same thread layout as step 01 (64 threads per column, COLUMNS columns per block), but the
// block first copies all weights and biases (about 36 KB) and its columns of x into shared
// memory. Global memory then sees x read once and y written once; the weights are read once
// per block instead of once per thread, i.e. COLUMNS times fewer reads than before.
//
// Launch: block = 64 * COLUMNS threads, grid = ceil(N / COLUMNS), static shared memory only.
#ifndef COLUMNS
#define COLUMNS 4
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS (HIDDEN * COLUMNS)

extern "C" __global__ void fusedSharedMemKernel(const float *__restrict__ x,
                                                const float *__restrict__ W1, const float *__restrict__ b1,
                                                const float *__restrict__ W2, const float *__restrict__ b2,
                                                const float *__restrict__ W3, const float *__restrict__ b3,
                                                float *__restrict__ y, int n)
{
    __shared__ float w1s[HIDDEN * IN];       // row stride 71 (odd): a warp's 32 rows hit 32 banks
    __shared__ float w2s[HIDDEN * HIDDEN];   // row stride 64: a warp's 32 rows share one bank (left as is)
    __shared__ float w3s[OUT * HIDDEN];
    __shared__ float b1s[HIDDEN], b2s[HIDDEN], b3s[OUT];
    __shared__ float xs[COLUMNS][IN];
    __shared__ float h1s[COLUMNS][HIDDEN];
    __shared__ float h2s[COLUMNS][HIDDEN];

    const int t = threadIdx.x;
    for (int i = t; i < HIDDEN * IN; i += THREADS) w1s[i] = W1[i];
    for (int i = t; i < HIDDEN * HIDDEN; i += THREADS) w2s[i] = W2[i];
    for (int i = t; i < OUT * HIDDEN; i += THREADS) w3s[i] = W3[i];
    if (t < HIDDEN) { b1s[t] = b1[t]; b2s[t] = b2[t]; }
    if (t < OUT) b3s[t] = b3[t];

    const int col0 = blockIdx.x * COLUMNS;
    // Consecutive threads take consecutive columns of one row of x: short coalesced runs.
    for (int i = t; i < COLUMNS * IN; i += THREADS) {
        const int k = i / COLUMNS, c = i % COLUMNS;
        xs[c][k] = (col0 + c < n) ? x[(size_t)k * n + col0 + c] : 0.0f;
    }
    __syncthreads();

    const int r = t % HIDDEN;
    const int c = t / HIDDEN;
    const int col = col0 + c;

    float acc = b1s[r];
    for (int k = 0; k < IN; ++k) acc += w1s[r * IN + k] * xs[c][k];
    h1s[c][r] = fmaxf(acc, 0.0f);
    __syncthreads();

    acc = b2s[r];
    for (int k = 0; k < HIDDEN; ++k) acc += w2s[r * HIDDEN + k] * h1s[c][k];
    h2s[c][r] = fmaxf(acc, 0.0f);
    __syncthreads();

    if (r % (HIDDEN / OUT) == 0 && col < n) {
        const int o = r / (HIDDEN / OUT);
        acc = b3s[o];
        for (int k = 0; k < HIDDEN; ++k) acc += w3s[o * HIDDEN + k] * h2s[c][k];
        y[(size_t)o * n + col] = acc;
    }
}
