// MLP step 03 - the whole network in shared memory, and each block loops over many columns.
//
// Step 02 copied all weights into shared memory for only COLUMNS columns, so the weights were
// read from global memory N / COLUMNS times. Here a block loads them once and then walks over
// groups of COLUMNS columns (grid-stride loop), so each thread computes several columns and the
// number of blocks, hence of weight loads, is N / (COLUMNS * groups per block).
//
// The price is occupancy: about 40 KB of shared memory per block limits an SM to a few blocks.
//
// Launch: block = 64 * COLUMNS threads, grid chosen by the host (ceil(groups / iterations)).
#ifndef COLUMNS
#define COLUMNS 4
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS (HIDDEN * COLUMNS)

extern "C" __global__ void wholeNetInSharedMemKernel(const float *__restrict__ x,
                                                     const float *__restrict__ W1, const float *__restrict__ b1,
                                                     const float *__restrict__ W2, const float *__restrict__ b2,
                                                     const float *__restrict__ W3, const float *__restrict__ b3,
                                                     float *__restrict__ y, int n)
{
    __shared__ float w1s[HIDDEN * IN];
    __shared__ float w2s[HIDDEN * (HIDDEN + 1)];  // one float of padding per row: no bank conflicts
    __shared__ float w3s[OUT * HIDDEN];
    __shared__ float b1s[HIDDEN], b2s[HIDDEN], b3s[OUT];
    __shared__ float xs[COLUMNS][IN];
    __shared__ float h1s[COLUMNS][HIDDEN];
    __shared__ float h2s[COLUMNS][HIDDEN];

    const int t = threadIdx.x;
    for (int i = t; i < HIDDEN * IN; i += THREADS) w1s[i] = W1[i];
    for (int i = t; i < HIDDEN * HIDDEN; i += THREADS) w2s[(i / HIDDEN) * (HIDDEN + 1) + i % HIDDEN] = W2[i];
    for (int i = t; i < OUT * HIDDEN; i += THREADS) w3s[i] = W3[i];
    if (t < HIDDEN) { b1s[t] = b1[t]; b2s[t] = b2[t]; }
    if (t < OUT) b3s[t] = b3[t];

    const int r = t % HIDDEN;
    const int c = t / HIDDEN;
    const int groups = (n + COLUMNS - 1) / COLUMNS;

    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        const int col0 = g * COLUMNS;
        __syncthreads();  // the previous group is done with xs (and, first time, weights are in)
        for (int i = t; i < COLUMNS * IN; i += THREADS) {
            const int k = i / COLUMNS, cc = i % COLUMNS;
            xs[cc][k] = (col0 + cc < n) ? x[(size_t)k * n + col0 + cc] : 0.0f;
        }
        __syncthreads();

        float acc = b1s[r];
        for (int k = 0; k < IN; ++k) acc += w1s[r * IN + k] * xs[c][k];
        h1s[c][r] = fmaxf(acc, 0.0f);
        __syncthreads();

        acc = b2s[r];
        for (int k = 0; k < HIDDEN; ++k) acc += w2s[r * (HIDDEN + 1) + k] * h1s[c][k];
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
