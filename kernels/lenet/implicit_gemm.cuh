// Implicit-GEMM index helpers for the GEMM steps that gather the unrolled matrix straight from x:
// steps 07, 09, 10 (dimensions only), 11 and 13 include it; 12 and 14's fallback get it through
// the step file they include (11 and 13).
//
// Those steps see the convolution as y (M x N) = k (M x CKK) * xu (CKK x N), with
//
//   r = c*K*K + p*K + q           a reduction index (CKK = C*K*K of them)
//   n = b*HW + h*W_out + w         a column, i.e. an output pixel (N = B*HW, HW = H_out*W_out)
//   xu[r][n] = x[b][c][h + p][w + q] = x[x_col(n) + x_row(r)]
//     x_col(n) = b*C*H*W + h*W + w    (depends on the column only)
//     x_row(r) = (c*H + p)*W + q      (depends on the reduction index only)
//
// and every one of them computed the same dimensions and split r into (c, p, q) and n into
// (b, h, w) with the same divisions. They are written once here; where and how often a step
// calls them (per element, once per thread, once per K-tile in a table) is what differs
// between the steps, and stays in each step's file.
#ifndef LENET_IMPLICIT_GEMM_CUH
#define LENET_IMPLICIT_GEMM_CUH

// The GEMM's dimensions, from the convolution's. A kernel takes them as
//   const auto [H_out, W_out, HW, KK, CKK, N] = gemm_dims(B, C, H, W, K);
struct GemmDims {
    int H_out;
    int W_out;
    int HW;   // output pixels per map
    int KK;   // K * K
    int CKK;  // reduction length: rows of xu, columns of k
    int N;    // columns of xu and of the output: B * HW
};

__device__ __forceinline__ GemmDims gemm_dims(int B, int C, int H, int W, int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int HW = H_out * W_out;
    const int KK = K * K;
    const int CKK = C * KK;
    const int N = B * HW;
    return {H_out, W_out, HW, KK, CKK, N};
}

// Column n split into (b, h, w): its image b, its pixel hw = h*W_out + w within the image (y's
// address of row m is (b*M + m)*HW + hw), and x_col(n).
struct GemmColumn {
    int b;
    int hw;
    int x_col;
};

__device__ __forceinline__ GemmColumn gemm_column(int n, int HW, int W_out, int C, int H, int W)
{
    const int b = n / HW;
    const int hw = n - b * HW;
    const int h = hw / W_out;
    const int w = hw - h * W_out;
    return {b, hw, b * C * H * W + h * W + w};
}

// x_row(r): the reduction index r split into (c, p, q), as an offset into x relative to x_col.
__device__ __forceinline__ int x_row_offset(int r, int KK, int K, int H, int W)
{
    const int c = r / KK;
    const int pq = r - c * KK;
    const int p = pq / K;
    const int q = pq - p * K;
    return (c * H + p) * W + q;
}

// The same for the row tables of steps 11-14, with -1 for an index past CKK (a zero row).
__device__ __forceinline__ int row_offset(int r, int CKK, int KK, int K, int H, int W)
{
    if (r >= CKK) {
        return -1;
    }
    return x_row_offset(r, KK, K, H, W);
}

#endif  // LENET_IMPLICIT_GEMM_CUH
