// Shared by steps 06-10: the block tile of the tiled convolutions and its asynchronous loader.
//
// A block computes BM output channels × a TH×TW tile of pre-pool outputs of one image. The
// reduction over C·K² runs as a sequence of "stages": stage `it` holds 8 input channels
// (c0 = 8·(it / K)) for one kernel row kh = it % K:
//   weights  ws[kw][c][m]   K × 8 × MS floats, m contiguous (MS = BM + 8, see the bank note)
//   inputs   ps[c][row][col] 8 × TH × PWP floats: input rows oh0+row+kh−pad, columns ow0−pad ...
// Everything outside the image (the zero padding, partial tiles) or beyond C and M is filled
// with zeros by cp.async's src-size operand, so the compute loops have no bounds checks.
//
// Bank notes (32 banks of 4 bytes): a tensor-core fragment reads element (k = lane%4, n = lane/4)
// at k·pitch + n. With every k-pitch ≡ 8 (mod 32) the 32 lanes hit 32 different banks:
// MS = BM + 8 (BM a multiple of 32) and the channel pitch CS are chosen that way.
// PWP ≡ 8 (mod 16) keeps the 128-bit row reads of step 06 free of conflicts.
#pragma once

namespace vgg {

__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid)
{
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int BM_, int TH_, int TW_, int K_, int THREADS_>
struct ConvTile {
    // Template names end in '_': BM, TH, ... are the -D macro names of the including kernels.
    static_assert(BM_ % 32 == 0, "BM_ must be a multiple of 32");
    static_assert(TH_ % 2 == 0 && TW_ % 2 == 0, "the tile must hold whole 2x2 pooling windows");
    static_assert(K_ % 2 == 1, "K_ must be odd ('same' padding)");
    static constexpr int CC = 8;                                  // channels per stage
    static constexpr int MS = BM_ + 8;
    static constexpr int W_FLOATS = K_ * CC * MS;
    static constexpr int PW = TW_ + K_ - 1;                         // input columns a tile row needs
    static constexpr int PWP = ((PW + 7) / 16) * 16 + 8;          // padded row pitch
    static constexpr int CS = ((TH_ * PWP + 31) / 32) * 32 + 8;    // channel pitch, ≡ 8 (mod 32)
    static constexpr int P_FLOATS = CC * CS;
    static constexpr int STAGE_FLOATS = W_FLOATS + P_FLOATS;      // a multiple of 4: 16-B aligned stages

    // Issue (not wait for) the copies of stage `it` into `stage`.
    __device__ static void load(float* stage, const float* __restrict__ xn, const float* __restrict__ w, int it,
                                int m0, int oh0, int ow0, int C, int H, int W, int M, int tid)
    {
        const int c0 = (it / K_) * CC, kh = it % K_;
        float* ws = stage;
        float* ps = stage + W_FLOATS;
        // kw fastest: a thread group reads each (m, c)'s kernel row as K_ contiguous floats.
        for (int i = tid; i < BM_ * CC * K_; i += THREADS_) {
            const int kw = i % K_, c = (i / K_) % CC, m = i / (K_ * CC);
            const bool ok = (m0 + m < M) && (c0 + c < C);
            const float* src = ok ? w + ((size_t)(m0 + m) * C + (c0 + c)) * (K_ * K_) + kh * K_ + kw : w;
            cp_async4(ws + (kw * CC + c) * MS + m, src, ok);
        }
        // col fastest: coalesced reads along an input row.
        for (int i = tid; i < CC * TH_ * PW; i += THREADS_) {
            const int col = i % PW, row = (i / PW) % TH_, c = i / (PW * TH_);
            const int r = oh0 + row + kh - K_ / 2, q = ow0 + col - K_ / 2;
            const bool ok = (c0 + c < C) && r >= 0 && r < H && q >= 0 && q < W;
            const float* src = ok ? xn + ((size_t)(c0 + c) * H + r) * W + q : xn;
            cp_async4(ps + c * CS + row * PWP + col, src, ok);
        }
    }

    __host__ __device__ static constexpr int stages_for(int C) { return ((C + CC - 1) / CC) * K_; }
};

// Which image and which tile a block of the (tiles·B, ceil(M/BM)) grid computes.
template <int TH_, int TW_>
__device__ __forceinline__ void tile_origin(int H, int W, int& n, int& oh0, int& ow0)
{
    const int tiles_x = (W + TW_ - 1) / TW_, tiles_y = (H + TH_ - 1) / TH_;
    int t = blockIdx.x;
    n = t / (tiles_x * tiles_y);
    t -= n * tiles_x * tiles_y;
    oh0 = (t / tiles_x) * TH_;
    ow0 = (t % tiles_x) * TW_;
}

__device__ __forceinline__ float max4(float a, float b, float c, float d) { return fmaxf(fmaxf(a, b), fmaxf(c, d)); }

}  // namespace vgg
