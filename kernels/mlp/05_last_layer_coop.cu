// MLP step 05 - every thread takes part in the last layer.
//
// Until now only 4 of the 64 threads of a column computed the outputs while the other 60
// waited at the next barrier. Here the 16 threads r = 16o .. 16o+15 each multiply 4 of the 64
// terms of output o and a butterfly of __shfl_xor_sync (offsets 8, 4, 2, 1) adds the sixteen
// partial sums; the 16 lanes of a group are always in one warp, so no shared memory is needed.
//
// Otherwise identical to step 04. Launch: block = 64 * COLUMNS threads, grid chosen by the host.
#ifndef COLUMNS
#define COLUMNS 4
#endif

#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS (HIDDEN * COLUMNS)
#define PART (HIDDEN / 16)  // terms per thread in the last layer

extern "C" __global__ void __launch_bounds__(THREADS)
lastLayerCoopKernel(const float *__restrict__ x,
                    const float *__restrict__ W1, const float *__restrict__ b1,
                    const float *__restrict__ W2, const float *__restrict__ b2,
                    const float *__restrict__ W3, const float *__restrict__ b3,
                    float *__restrict__ y, int n)
{
    __shared__ float w1s[HIDDEN * IN];
    __shared__ float b1s[HIDDEN];
    __shared__ float xs[COLUMNS][IN];
    __shared__ float h1s[COLUMNS][HIDDEN];
    __shared__ float h2s[COLUMNS][HIDDEN];

    const int t = threadIdx.x;
    const int r = t % HIDDEN;
    const int c = t / HIDDEN;
    const int o = r / 16;      // the output this thread helps with
    const int part = r % 16;   // which 4 of its 64 terms

    float w2[HIDDEN];
#pragma unroll
    for (int k = 0; k < HIDDEN; ++k) w2[k] = W2[r * HIDDEN + k];
    const float bias2 = b2[r];
    float w3[PART];  // the last layer's weights fit in registers too: 4 per thread
#pragma unroll
    for (int k = 0; k < PART; ++k) w3[k] = W3[o * HIDDEN + part * PART + k];
    const float bias3 = b3[o];

    for (int i = t; i < HIDDEN * IN; i += THREADS) w1s[i] = W1[i];
    if (t < HIDDEN) b1s[t] = b1[t];

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

        acc = 0.0f;
#pragma unroll
        for (int k = 0; k < PART; ++k) acc += w3[k] * h2s[c][part * PART + k];
        // Butterfly over the 16 lanes of this output; all 32 lanes of the warp take part.
#pragma unroll
        for (int offset = 8; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (part == 0 && col0 + c < n) y[(size_t)o * n + col0 + c] = acc + bias3;
    }
}
