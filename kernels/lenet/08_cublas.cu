// LeNet step 08 - unroll + cuBLAS: our im2col, NVIDIA's matrix product.
//
// The GEMM of step 06 is handed to cuBLAS (through cupy.matmul); this file only holds the
// unrolling kernel. The unrolled layout is chosen so that cuBLAS can write y directly:
//
//   xu[b][r][hw] = x[b0 + b][c][h + p][w + q]        xu: nb x CKK x HW  (one matrix per image)
//     r = c*K*K + p*K + q,  hw = h*W_out + w
//
// Then, for every image of the chunk, k viewed as an M x CKK matrix times xu[b] (CKK x HW)
// is an M x HW matrix, which is exactly y[b0 + b] in (M, H_out, W_out) order. A batched
// (broadcast) matmul k @ xu writes the chunk's y with no permute kernel, unlike step 06,
// whose single wide GEMM put the maps outermost.
//
// The workspace xu holds nb * CKK * HW floats; the Python side picks nb so that it stays
// under the variant's workspace budget.
//
// Layouts (row-major, float32):
//   x: B x C x H x W     k: M x C x K x K     y: B x M x H_out x W_out
//
// Launch (done by kernelbook.lenet.gemm.CublasMatmul), per chunk of nb images:
//   im2col_batched: block 256, grid ceil(nb*HW / 256)     one thread per (image, output pixel)
//
// Element counts of x and xu fit in int32 (checked before launch), so indices are int.

// One thread owns one column (b, hw) of the chunk and walks its CKK rows with three nested
// counters, so the only divisions are the three that split the thread's own index.
// Consecutive threads own consecutive hw: the reads (consecutive w of an input row, except
// where an output row ends) and the writes xu[b][r][hw] (consecutive hw) both coalesce.
extern "C" __global__ void im2col_batched(float *xu, const float *x, int b0, int nb,
                                          int C, int H, int W, int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int HW = H_out * W_out;
    const int CKK = C * K * K;
    // Unsigned: a last block that hangs over nb*HW close to 2^31 must not wrap negative.
    const unsigned thread_col = blockIdx.x * blockDim.x + threadIdx.x;
    if (thread_col >= (unsigned)(nb * HW)) {
        return;
    }
    const int col = (int)thread_col;
    const int b = col / HW;
    const int hw = col - b * HW;
    const int h = hw / W_out;
    const int w = hw - h * W_out;

    const float *src = x + (size_t)(b0 + b) * C * H * W + h * W + w;
    float *dst = xu + b * CKK * HW + hw;
    for (int c = 0; c < C; ++c) {
        for (int p = 0; p < K; ++p) {
            for (int q = 0; q < K; ++q) {
                *dst = src[(c * H + p) * W + q];
                dst += HW;  // next row r of this image's matrix
            }
        }
    }
}
