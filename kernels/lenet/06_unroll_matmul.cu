// LeNet step 06 - unroll + matmul: the convolution as an explicit matrix product.
//
//   y[b][m][h][w] = sum over r of kmat[m][r] * xu[r][n]
//     r = (c, p, q) flattened as c*K*K + p*K + q       (the reduction index, CKK = C*K*K values)
//     n = (b, h, w) flattened as b_local*HW + h*W_out + w  (one column per output pixel)
//
// kmat is k itself: k is stored M x C x K x K, so row m of the M x CKK matrix is k[m][...]
// with no copy. xu ("x unrolled", im2col) is built in memory: each input pixel is copied
// once for every (p, q) that sees it, so xu holds about K*K times as many floats as x. That
// is why the Python side processes the batch in chunks of `nb` images whose workspace stays
// under a budget, and runs three kernels per chunk:
//
//   1. unroll_input    x (images b0 .. b0+nb-1)      -> xu    (CKK) x (nb*HW)
//   2. matmul_tiled    k (M x CKK) times xu           -> yg    M x (nb*HW)
//   3. permute_output  yg (row m holds all nb images) -> y[b0 .. b0+nb-1]  (B, M, H_out, W_out)
//
// The permute exists because the GEMM's output rows are maps and its columns run over
// images, while y wants images outermost. Step 07 fuses all three away.
//
// Layouts (row-major, float32):
//   x: B x C x H x W     k: M x C x K x K     y: B x M x H_out x W_out
//   H_out = H - K + 1, W_out = W - K + 1, HW = H_out * W_out
//
// Launch (done by kernelbook.lenet.gemm.UnrollMatmul), per chunk:
//   unroll_input:   block 256, grid ceil(nb*HW / 256)           one thread per column of xu
//   matmul_tiled:   block (TILE, TILE), grid (ceil(nb*HW / TILE), ceil(M / TILE))
//   permute_output: block 256, grid ceil(nb*M*HW / 256)         one thread per output element
//
// Every element count (xu, yg, x, y, k) has been checked to fit in int32 before launch, so the
// kernels index with int; only the image offset b0 * (C*H*W) is widened to size_t for safety.
//
// Compile-time parameter (the harness passes -DTILE=...):
#ifndef TILE
#define TILE 16
#endif

// Build the unrolled matrix xu for images b0 .. b0+nb-1.
//
// One thread owns one column n = (b, h, w) and walks down all CKK rows. The column's
// decomposition into (b, h, w) is done once; the row walk is three nested counters, so no
// division happens inside the loop. Neighbouring threads own neighbouring columns, which are
// neighbouring w in one output row: both the reads x[..][h+p][w+q] and the writes
// xu[r][n] are consecutive across a warp, i.e. coalesced.
extern "C" __global__ void unroll_input(float *xu, const float *x, int b0, int nb,
                                        int C, int H, int W, int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int HW = H_out * W_out;
    const int ncols = nb * HW;
    // Unsigned: a last block that hangs over an ncols close to 2^31 must not wrap negative.
    const unsigned thread_n = blockIdx.x * blockDim.x + threadIdx.x;
    if (thread_n >= (unsigned)ncols) {
        return;
    }
    const int n = (int)thread_n;
    const int b = n / HW;
    const int hw = n - b * HW;
    const int h = hw / W_out;
    const int w = hw - h * W_out;

    const float *src = x + (size_t)(b0 + b) * C * H * W + h * W + w;
    float *dst = xu + n;
    for (int c = 0; c < C; ++c) {
        for (int p = 0; p < K; ++p) {
            for (int q = 0; q < K; ++q) {
                *dst = src[(c * H + p) * W + q];
                dst += ncols;  // next row of xu: same column
            }
        }
    }
}

// out (rows x cols) = a (rows x inner) * bm (inner x cols), all row-major.
//
// The textbook shared-memory tiled GEMM: each block computes one TILE x TILE tile of out and
// walks the inner dimension in steps of TILE. Each thread loads one element of the a tile and
// one of the bm tile, so every global element is read once per block instead of TILE times.
// Out-of-range elements are loaded as zeros, which makes every size legal (no multiple-of-TILE
// requirement) without branches in the inner product.
extern "C" __global__ void matmul_tiled(float *out, const float *a, const float *bm,
                                        int rows, int inner, int cols)
{
    __shared__ float a_tile[TILE][TILE];
    __shared__ float b_tile[TILE][TILE];

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    // Unsigned, like the bounds they are compared with below: an edge tile may hang past 2^31.
    const unsigned row = blockIdx.y * TILE + ty;
    const unsigned col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int t0 = 0; t0 < inner; t0 += TILE) {
        // tx runs along a row of a and along a row of bm: both loads are coalesced.
        a_tile[ty][tx] = (row < (unsigned)rows && t0 + tx < inner) ? a[row * inner + t0 + tx] : 0.0f;
        b_tile[ty][tx] = (t0 + ty < inner && col < (unsigned)cols) ? bm[(t0 + ty) * cols + col] : 0.0f;
        __syncthreads();  // the whole tile must be in shared memory before anyone reads it

#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            // a_tile[ty][kk] is one address per row of threads (a broadcast); b_tile[kk][tx]
            // is consecutive across tx (one bank each): no bank conflicts.
            acc += a_tile[ty][kk] * b_tile[kk][tx];
        }
        __syncthreads();  // nobody may overwrite the tiles while others still read them
    }
    if (row < (unsigned)rows && col < (unsigned)cols) {
        out[row * cols + col] = acc;
    }
}

// y[b0 + b][m][hw] = yg[m][b * HW + hw] for the nb images of the chunk.
//
// One thread per output element, enumerated in y's order, so the writes are consecutive
// across a warp; the reads are consecutive too (hw is the fastest index on both sides) except
// where a warp crosses from one map or image to the next.
extern "C" __global__ void permute_output(float *y, const float *yg, int b0, int nb, int M, int HW)
{
    const int total = nb * M * HW;
    const unsigned thread_i = blockIdx.x * blockDim.x + threadIdx.x;
    if (thread_i >= (unsigned)total) {
        return;
    }
    const int i = (int)thread_i;
    const int b = i / (M * HW);
    const int rem = i - b * (M * HW);
    const int m = rem / HW;
    const int hw = rem - m * HW;
    y[(size_t)b0 * M * HW + i] = yg[m * (nb * HW) + b * HW + hw];
}
