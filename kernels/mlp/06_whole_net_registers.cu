// MLP step 06 - the whole network in registers.
//
// A thread cannot hold a full row of W1 (71 floats) and of W2 (64) and stay at a useful
// occupancy, so two threads share each hidden unit: the even thread holds the first half of
// the unit's rows (36 weights of W1, 32 of W2), the odd thread the second half (35 + 32), and
// one __shfl_xor_sync(…, 1) adds the two halves. A block of 256 threads is therefore 128
// (unit, half) pairs, i.e. 2 columns per iteration. In the last layer each warp of a column
// computes one output: every lane holds 2 of its 64 weights and a 5-step butterfly sums them.
// Only the inputs and the two hidden vectors of the current columns live in shared memory.
//
// Launch: block = 256 threads (fixed by this layout), grid chosen by the host.
#define IN 71
#define HIDDEN 64
#define OUT 4
#define THREADS 256
#define COLUMNS 2              // columns per iteration: THREADS / (2 * HIDDEN)
#define HALF_IN 36             // weights of W1 per thread (the odd thread's last one is zero)
#define HALF_HIDDEN 32

extern "C" __global__ void __launch_bounds__(THREADS)
wholeNetInRegsKernel(const float *__restrict__ x,
                     const float *__restrict__ W1, const float *__restrict__ b1,
                     const float *__restrict__ W2, const float *__restrict__ b2,
                     const float *__restrict__ W3, const float *__restrict__ b3,
                     float *__restrict__ y, int n)
{
    __shared__ float xs[COLUMNS][2 * HALF_IN];  // 72: the padding element is zero
    __shared__ float h1s[COLUMNS][HIDDEN];
    __shared__ float h2s[COLUMNS][HIDDEN];

    const int t = threadIdx.x;
    const int c = t / (2 * HIDDEN);            // column slot of this thread
    const int unit = (t % (2 * HIDDEN)) / 2;   // hidden unit
    const int half = t % 2;                    // which half of the unit's rows
    const int o = (t % (2 * HIDDEN)) / 32;     // output computed by this warp
    const int lane = t % 32;

    float w1[HALF_IN], w2[HALF_HIDDEN], w3[2];
#pragma unroll
    for (int i = 0; i < HALF_IN; ++i) {
        const int k = half * HALF_IN + i;
        w1[i] = (k < IN) ? W1[unit * IN + k] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < HALF_HIDDEN; ++i) w2[i] = W2[unit * HIDDEN + half * HALF_HIDDEN + i];
    w3[0] = W3[o * HIDDEN + lane];
    w3[1] = W3[o * HIDDEN + lane + 32];
    const float bias1 = b1[unit], bias2 = b2[unit], bias3 = b3[o];

    const int groups = (n + COLUMNS - 1) / COLUMNS;
    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        const int col0 = g * COLUMNS;
        __syncthreads();
        if (t < COLUMNS * 2 * HALF_IN) {
            const int k = t / COLUMNS, cc = t % COLUMNS;
            xs[cc][k] = (k < IN && col0 + cc < n) ? x[(size_t)k * n + col0 + cc] : 0.0f;
        }
        __syncthreads();

        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < HALF_IN; ++i) acc += w1[i] * xs[c][half * HALF_IN + i];
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);  // add the partner's half
        if (half == 0) h1s[c][unit] = fmaxf(acc + bias1, 0.0f);
        __syncthreads();

        acc = 0.0f;
#pragma unroll
        for (int i = 0; i < HALF_HIDDEN; ++i) acc += w2[i] * h1s[c][half * HALF_HIDDEN + i];
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) h2s[c][unit] = fmaxf(acc + bias2, 0.0f);
        __syncthreads();

        acc = w3[0] * h2s[c][lane] + w3[1] * h2s[c][lane + 32];
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (lane == 0 && col0 + c < n) y[(size_t)o * n + col0 + c] = acc + bias3;
    }
}
