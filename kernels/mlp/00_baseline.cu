// MLP step 00 - baseline: one general matrix product and one element-wise ReLU per layer.
//
//   h1 = relu(W1 x + b1)     W1: 64 x 71,  x: 71 x N
//   h2 = relu(W2 h1 + b2)    W2: 64 x 64
//   y  = W3 h2 + b3          W3:  4 x 64,  y:  4 x N
//
// The network is evaluated the way a framework without fusion would do it: five launches
// (product, ReLU, product, ReLU, product), each intermediate matrix written to global memory
// by one launch and read back by the next. Every later step is measured against this one.
//
// Layouts: every matrix row-major float32; the columns of x are the signals.
//
// matMulKernel: C[M x N] = A[M x K] * B[K x N] + bias[M] (bias added per row).
//   block = (TILE, TILE), grid = (ceil(N / TILE), ceil(M / TILE)); one thread per element of C,
//   every operand read straight from global memory. Within a block, TILE threads along x share
//   one row of A and read TILE neighbouring columns of B, so each warp reads few distinct rows.
// reluKernel: a[i] = max(a[i], 0) in place, one thread per element.
#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void matMulKernel(const float *__restrict__ A, const float *__restrict__ B,
                                        const float *__restrict__ bias, float *__restrict__ C,
                                        int M, int K, int N)
{
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int row = blockIdx.y * TILE + threadIdx.y;
    if (row >= M || col >= N) {
        return;  // edge blocks hang over the matrix
    }
    float acc = bias[row];
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[(size_t)k * N + col];
    }
    C[(size_t)row * N + col] = acc;
}

extern "C" __global__ void reluKernel(float *a, long long count)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        a[i] = fmaxf(a[i], 0.0f);
    }
}
