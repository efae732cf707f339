// MLP step 04 - layers 1 and 3 in shared memory, layer 2 in registers.
//
// In step 03 each thread always computes the same hidden unit r, so it can keep its row of W2
// (64 floats) in registers for the whole kernel instead of reading it from shared memory for
// every column. That frees 16 KB of shared memory per block (more blocks per SM) and removes
// one shared-memory load per multiply-add of layer 2.
//
// Launch: block = 64 * COLUMNS threads, grid chosen by the host.
#ifndef COLUMNS
#define COLUMNS 4
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS (HIDDEN * COLUMNS)

extern "C" __global__ void __launch_bounds__(THREADS)
netInSharedMemAndRegsKernel(const float *__restrict__ x,
                            const float *__restrict__ W1, const float *__restrict__ b1,
                            const float *__restrict__ W2, const float *__restrict__ b2,
                            const float *__restrict__ W3, const float *__restrict__ b3,
                            float *__restrict__ y, int n)
{
    __shared__ float w1s[HIDDEN * IN];
    __shared__ float w3s[OUT * HIDDEN];
    __shared__ float b1s[HIDDEN], b3s[OUT];
    __shared__ float xs[COLUMNS][IN];
    __shared__ float h1s[COLUMNS][HIDDEN];
    __shared__ float h2s[COLUMNS][HIDDEN];

    const int t = threadIdx.x;
    const int r = t % HIDDEN;
    const int c = t / HIDDEN;

    float w2[HIDDEN];  // fully unrolled loops below keep this array in registers
#pragma unroll
    for (int k = 0; k < HIDDEN; ++k) w2[k] = W2[r * HIDDEN + k];
    const float bias2 = b2[r];

    for (int i = t; i < HIDDEN * IN; i += THREADS) w1s[i] = W1[i];
    for (int i = t; i < OUT * HIDDEN; i += THREADS) w3s[i] = W3[i];
    if (t < HIDDEN) b1s[t] = b1[t];
    if (t < OUT) b3s[t] = b3[t];

    const int groups = (n + COLUMNS - 1) / COLUMNS;
    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        const int col0 = g * COLUMNS;
        __syncthreads();
        for (int i = t; i < COLUMNS * IN; i += THREADS) {
            const int k = i / COLUMNS, cc = i % COLUMNS;
            xs[cc][k] = (col0 + cc < n) ? x[(size_t)k * n + col0 + cc] : 0.0f;
        }
        __syncthreads();

        float acc = b1s[r];
        for (int k = 0; k < IN; ++k) acc += w1s[r * IN + k] * xs[c][k];
        h1s[c][r] = fmaxf(acc, 0.0f);
        __syncthreads();

        acc = bias2;
#pragma unroll
        for (int k = 0; k < HIDDEN; ++k) acc += w2[k] * h1s[c][k];
        h2s[c][r] = fmaxf(acc, 0.0f);
        __syncthreads();

        if (r % (HIDDEN / OUT) == 0 && col0 + c < n) {
            const int o = r / (HIDDEN / OUT);
            acc = b3s[o];
            for (int k = 0; k < HIDDEN; ++k) acc += w3s[o * HIDDEN + k] * h2s[c][k];
            y[(size_t)o * n + col0 + c] = acc;
        }
    }
}
