"""GEMM-based steps (unrolling + matmul, fusion, cuBLAS, FP16, tensor cores, ...).

Every step here sees the convolution as a matrix product. With r = (c, p, q) the reduction index
(CKK = C*K*K values) and n = (b, h, w) an output pixel (N = B*H_out*W_out values),

    y[b, m, h, w] = sum_r  k[m, r] * xu[r, n],      xu[r, n] = x[b, c, h + p, w + q]

where k, stored (M, C, K, K), already is the M x CKK matrix. Steps 06 and 08 build xu (im2col)
in a workspace; from step 07 on, the GEMM gathers its tiles of xu straight from x ("implicit
GEMM"). Each class is one registry entry and one ``kernels/lenet/NN_*.cu`` file, in book order.
"""

from __future__ import annotations

import contextlib

from ..errors import ShapeError
from .variants import GRID_YZ_MAX, INT32_MAX, ConvShape, ConvVariant, ceil_div, int32, register

STATIC_SMEM_MAX = 48 * 1024  # bytes of static __shared__ per block without an opt-in
MAX_THREADS = 1024
ELEMENTWISE_BLOCK = 256      # block size of the 1-D helper kernels (im2col, permute)


# ----------------------------------------------------------------------------- shared checks


def _int_param(params: dict, name: str, lo: int, hi: int, fix: str | None = None) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ShapeError(f"{name}={value!r} is outside {lo}..{hi}.", fix or f"pass {name} between {lo} and {hi}.")
    return value


def _choice_param(params: dict, name: str, options: tuple[str, ...]) -> str:
    value = params[name]
    if value not in options:
        raise ShapeError(f"{name}={value!r} is not one of {', '.join(map(repr, options))}.",
                         f"pass {name} as one of: {', '.join(options)}.")
    return value


def _check_gemm_indices(shape: ConvShape, col_tile: int, row_tile: int) -> None:
    """The implicit-GEMM kernels index k, columns and reduction rows with 32-bit ints.

    A block's first column n0 plus its tile width must still fit in int32, and so must the
    reduction index one K-tile past the end (the row tables look one tile ahead).
    """
    ckk = shape.C * shape.K * shape.K
    if shape.M * ckk > INT32_MAX:
        raise ShapeError(f"k would hold {shape.M * ckk} elements; the kernels index with 32-bit ints.",
                         "use fewer maps or a smaller mask.")
    n = shape.B * shape.H_out * shape.W_out
    margin = 2048
    if n > INT32_MAX - max(col_tile, margin) or ckk > INT32_MAX - max(row_tile, margin):
        raise ShapeError(f"N = B*H_out*W_out = {n} (or CKK = {ckk}) is too close to 2^31 for 32-bit tile indices.",
                         "split the batch into chunks of fewer images.")
    grid_y = ceil_div(shape.M, row_tile)
    if grid_y > GRID_YZ_MAX:
        raise ShapeError(f"M={shape.M} needs {grid_y} row tiles of {row_tile}, but grid y stops at {GRID_YZ_MAX}.",
                         f"use at most {GRID_YZ_MAX * row_tile} maps per launch.")


def _check_smem(nbytes: int, what: str, fix: str) -> None:
    if nbytes > STATIC_SMEM_MAX:
        raise ShapeError(f"{what} needs {nbytes} bytes of shared memory per block; static shared memory "
                         f"stops at {STATIC_SMEM_MAX} bytes (48 KiB).", fix)


def _stream_scope(stream):
    """CuPy operations run on the current stream: make ``stream`` current for them."""
    return stream if stream is not None else contextlib.nullcontext()


def _check_workspace_mib(params: dict) -> None:
    value = params["workspace_mib"]
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ShapeError(f"workspace_mib={value!r} must be a positive number of MiB (or None for the whole batch).",
                         "pass e.g. workspace_mib=512.")


class _Chunked(ConvVariant):
    """Steps that materialise the unrolled matrix: the batch goes through in chunks of images.

    ``workspace_mib`` bounds the workspace (``None`` = the whole batch in one chunk, which is the
    footprint the chapter shows as "full batch"). ``workspace_bytes`` is pure arithmetic, so it
    also answers for batches that ``validate`` would refuse.
    """

    def per_image_floats(self, shape: ConvShape) -> int:
        raise NotImplementedError

    def chunk_images(self, shape: ConvShape, params: dict) -> int:
        per_image = 4 * self.per_image_floats(shape)
        if params["workspace_mib"] is None:
            return shape.B
        budget = int(params["workspace_mib"] * 2**20)
        return max(1, min(shape.B, budget // per_image))

    def workspace_bytes(self, shape: ConvShape, params: dict) -> int:
        """Bytes of workspace one launch allocates (one chunk's worth)."""
        return 4 * self.per_image_floats(shape) * self.chunk_images(shape, params)

    def _validate_workspace(self, shape: ConvShape, params: dict) -> None:
        _check_workspace_mib(params)
        per_image = 4 * self.per_image_floats(shape)
        if params["workspace_mib"] is not None and per_image > params["workspace_mib"] * 2**20:
            raise ShapeError(f"One image needs {per_image} bytes of workspace, more than workspace_mib="
                             f"{params['workspace_mib']} allows.",
                             f"raise workspace_mib to at least {ceil_div(per_image, 2**20)}.")
        chunk = self.chunk_images(shape, params)
        for name, count in self.workspace_arrays(shape, chunk).items():
            if count > INT32_MAX:
                raise ShapeError(f"The workspace {name} for {chunk} images would hold {count} elements; "
                                 f"the kernels index with 32-bit ints.",
                                 "lower workspace_mib (smaller chunks) instead of processing the whole batch at once.")

    def workspace_arrays(self, shape: ConvShape, chunk: int) -> dict:
        raise NotImplementedError


# ----------------------------------------------------------------------------- 06


@register
class UnrollMatmul(_Chunked):
    """Unroll + tiled matmul: im2col into a workspace, a shared-memory GEMM, a permute.

    Changes: the convolution becomes a matrix product of k (M x CKK) by the unrolled input xu
    (CKK x chunk*HW), computed by a textbook TILE x TILE shared-memory GEMM, then permuted from
    (M, chunk, HW) to y's (chunk, M, HW). The batch goes through in chunks so that the workspace
    (xu plus the GEMM's output) stays under ``workspace_mib``.

    Prediction: slower than the direct kernels. The workspace traffic dominates: xu is K*K = 49
    times the input, written and read once (C1: 1.25 MB per image, ~12.5 GB for B=10000 against
    0.3 GB of x), plus a full extra pass over y for the permute. At ~2.5 TB/s that is ~7 ms for
    C1 and ~5 ms for C3 at B=10000 before any arithmetic, and the M=4 GEMM of C1 wastes 12 of
    the 16 rows of each tile.
    """

    slug = "unroll-matmul"
    title = "Unroll + matmul: im2col, shared-memory tiled GEMM, permute"
    source = "lenet/06_unroll_matmul.cu"
    kernel_names = ("unroll_input", "matmul_tiled", "permute_output")
    defaults = {"tile": 16, "workspace_mib": 512}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"TILE": params["tile"]}

    def per_image_floats(self, shape: ConvShape) -> int:
        hw = shape.H_out * shape.W_out
        return (shape.C * shape.K * shape.K + shape.M) * hw  # xu columns + GEMM output columns

    def workspace_arrays(self, shape: ConvShape, chunk: int) -> dict:
        hw = shape.H_out * shape.W_out
        return {"xu": shape.C * shape.K * shape.K * hw * chunk, "yg": shape.M * hw * chunk}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        tile = _int_param(params, "tile", 1, 32, "pass tile between 1 and 32 (a block of tile^2 <= 1024 threads).")
        _check_gemm_indices(shape, tile, tile)
        self._validate_workspace(shape, params)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        import cupy as cp

        tile = params["tile"]
        hw = shape.H_out * shape.W_out
        ckk = shape.C * shape.K * shape.K
        chunk = self.chunk_images(shape, params)
        unroll = self.kernel("unroll_input", params, shape)
        matmul = self.kernel("matmul_tiled", params, shape)
        permute = self.kernel("permute_output", params, shape)
        with _stream_scope(stream):  # the pool hands out memory ordered on this stream
            xu = cp.empty(ckk * hw * chunk, dtype=cp.float32)
            yg = cp.empty(shape.M * hw * chunk, dtype=cp.float32)
        for b0 in range(0, shape.B, chunk):
            nb = min(chunk, shape.B - b0)
            cols = nb * hw
            unroll((ceil_div(cols, ELEMENTWISE_BLOCK),), (ELEMENTWISE_BLOCK,),
                   (xu, x, *int32(b0, nb, shape.C, shape.H, shape.W, shape.K)), stream=stream)
            matmul((ceil_div(cols, tile), ceil_div(shape.M, tile)), (tile, tile),
                   (yg, k, xu, *int32(shape.M, ckk, cols)), stream=stream)
            permute((ceil_div(shape.M * cols, ELEMENTWISE_BLOCK),), (ELEMENTWISE_BLOCK,),
                    (y, yg, *int32(b0, nb, shape.M, hw)), stream=stream)


# ----------------------------------------------------------------------------- 07


@register
class FusedUnrollMatmul(ConvVariant):
    """Fused unroll + matmul (implicit GEMM): the GEMM's loader gathers xu from x.

    Changes: no unrolled matrix, no permute, no chunking. The x-tile loader turns each
    unrolled index into (c, p, q) and its column into (b, h, w) and reads x directly; outputs
    go straight to y in (B, M, H_out, W_out) order. One kernel, the whole batch.

    Prediction: several times faster than step 06 (the ~12.5 GB of workspace traffic of C1 and
    the permute disappear); now the per-element index arithmetic (two divisions per loaded
    value) and the one-output-per-thread tiles (two shared loads per FMA) limit it. Roughly
    2-4 ms for C1 and 3-6 ms for C3 at B=10000 on an H100; C1's M=4 still wastes 3/4 of each
    16-row tile.
    """

    slug = "fused-unroll-matmul"
    title = "Fused unroll + matmul: implicit GEMM reading x directly"
    source = "lenet/07_fused_unroll_matmul.cu"
    kernel_names = ("conv_fused_unroll",)
    defaults = {"tile": 16}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"TILE": params["tile"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        tile = _int_param(params, "tile", 1, 32, "pass tile between 1 and 32 (a block of tile^2 <= 1024 threads).")
        _check_gemm_indices(shape, tile, tile)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        _launch_square_tiles(self.kernel(self.kernel_names[0], params, shape), y, x, k, shape, params["tile"], stream)


def _launch_square_tiles(kernel, y, x, k, shape: ConvShape, tile: int, stream=None) -> None:
    """The implicit GEMMs of steps 07 and 09: a tile x tile block per (output pixels, maps) tile."""
    n = shape.B * shape.H_out * shape.W_out
    kernel((ceil_div(n, tile), ceil_div(shape.M, tile)), (tile, tile),
           (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)), stream=stream)


# ----------------------------------------------------------------------------- 08


@register
class CublasMatmul(_Chunked):
    """Unroll + cuBLAS: our im2col, then a batched cupy.matmul (cuBLAS SGEMM) per chunk.

    Changes: the hand-written GEMM and the permute go; xu is laid out per image (chunk, CKK,
    HW) so that k (M x CKK) @ xu broadcasts over the chunk and writes y's (chunk, M, HW) slice
    directly. The workspace is xu only (C1: 49 * 6400 floats = 1.25 MB per image). cuBLAS runs
    in plain FP32 (CuPy does not enable TF32 unless CUPY_TF32 is set).

    Prediction: the GEMM itself becomes near-optimal, but with M = 4 or 16 rows it is a very
    thin product (memory-bound on xu), so the time is still the im2col write plus the GEMM's
    read of xu: ~2 x 12.5 GB for C1 -> roughly 8-10 ms, C3 ~6-8 ms at B=10000. Faster than
    step 06 (no permute, no tile waste), slower than the fused kernels.
    """

    slug = "cublas"
    title = "Unroll + cuBLAS: im2col and a batched cupy.matmul"
    source = "lenet/08_cublas.cu"
    kernel_names = ("im2col_batched",)
    defaults = {"workspace_mib": 512}

    def per_image_floats(self, shape: ConvShape) -> int:
        return shape.C * shape.K * shape.K * shape.H_out * shape.W_out

    def workspace_arrays(self, shape: ConvShape, chunk: int) -> dict:
        return {"xu": self.per_image_floats(shape) * chunk}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        ckk = shape.C * shape.K * shape.K
        if shape.M * ckk > INT32_MAX:
            raise ShapeError(f"k would hold {shape.M * ckk} elements; the kernels index with 32-bit ints.",
                             "use fewer maps or a smaller mask.")
        self._validate_workspace(shape, params)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        import cupy as cp

        hw = shape.H_out * shape.W_out
        ckk = shape.C * shape.K * shape.K
        chunk = self.chunk_images(shape, params)
        im2col = self.kernel(self.kernel_names[0], params, shape)
        with _stream_scope(stream):
            xu = cp.empty((chunk, ckk, hw), dtype=cp.float32)
            k2 = k.reshape(shape.M, ckk)
            y3 = y.reshape(shape.B, shape.M, hw)
            for b0 in range(0, shape.B, chunk):
                nb = min(chunk, shape.B - b0)
                im2col((ceil_div(nb * hw, ELEMENTWISE_BLOCK),), (ELEMENTWISE_BLOCK,),
                       (xu, x, *int32(b0, nb, shape.C, shape.H, shape.W, shape.K)), stream=stream)
                # (M, CKK) @ (nb, CKK, HW) -> (nb, M, HW): y's own layout for these images.
                cp.matmul(k2, xu[:nb], out=y3[b0:b0 + nb])


# ----------------------------------------------------------------------------- 09


@register
class Fp16(ConvVariant):
    """FP16 arithmetic: step 07's fused kernel with __half2 tiles and __hfma2.

    Changes: tiles are stored as __half2 pairs along the reduction (half the shared memory),
    and each __hfma2 does two multiply-adds. The half2 lanes are moved into a float
    accumulator every ``half_tiles`` K-tiles (0 = only at the end, the purest and least
    accurate form).

    Prediction: modest gain over step 07 (~1.2-1.5x): the kernel is limited by the gather's
    index arithmetic and global loads, which FP16 does not change; the FMA work halves. The
    error grows to ~1e-3 relative L2.
    """

    slug = "fp16"
    title = "FP16: __half2 tiles and __hfma2 in the fused kernel"
    source = "lenet/09_fp16.cu"
    kernel_names = ("conv_fp16",)
    defaults = {"tile": 16, "half_tiles": 1}
    precision = "fp16"
    # Operands are rounded to 11 significant bits (relative error <= 2^-11 ~ 4.9e-4 each,
    # RMS ~2.8e-4), and each half2 lane sums TILE/2 = 8 products per flush, each addition
    # rounded to 11 bits. For random-sign terms these errors add in quadrature, giving ~5e-4
    # to ~1e-3 relative L2 for CKK = 49 or 196 (C1, C3) and up to ~2e-3 for the longest random
    # shapes (CKK = 486). 5e-3 is that with a margin, and still far below what would hide a
    # wrong index (an error of order 1). Inputs must stay below 65504 in magnitude.
    tolerance = 5e-3

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"TILE": params["tile"], "HALF_TILES": params["half_tiles"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        tile = _int_param(params, "tile", 2, 32, "pass an even tile between 2 and 32.")
        if tile % 2:
            raise ShapeError(f"tile={tile} is odd; reduction indices are packed in __half2 pairs.",
                             "pass an even tile (e.g. 16).")
        _int_param(params, "half_tiles", 0, 1 << 20,
                   "pass half_tiles >= 0 (0 = keep the whole sum in half2).")
        _check_gemm_indices(shape, tile, tile)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        _launch_square_tiles(self.kernel(self.kernel_names[0], params, shape), y, x, k, shape, params["tile"], stream)


# ----------------------------------------------------------------------------- 10 .. 12

FRAGMENTS = {"16x16": (16, 16), "8x32": (8, 32)}


def _wmma_tiles(params: dict) -> tuple[int, int, int]:
    """(BM, BN, threads) of the WMMA kernels for these parameters."""
    fm, fn = FRAGMENTS[params["shape"]]
    return fm, params["warps"] * params["frags_n"] * fn, 32 * params["warps"]


def _launch_wmma(kernel, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
    """One block per (bn output pixels) x (bm maps) tile of the implicit GEMM."""
    bm, bn, threads = _wmma_tiles(params)
    n = shape.B * shape.H_out * shape.W_out
    kernel((ceil_div(n, bn), ceil_div(shape.M, bm)), (threads,),
           (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)), stream=stream)


def _validate_wmma_common(shape: ConvShape, params: dict, frag_k: int, elem_bytes: int,
                          table: bool) -> None:
    _choice_param(params, "shape", tuple(FRAGMENTS))
    _int_param(params, "warps", 1, 32, "pass warps between 1 and 32 (at most 1024 threads).")
    _int_param(params, "frags_n", 1, 16, "pass frags_n between 1 and 16.")
    bk = _int_param(params, "bk", frag_k, 1024, f"pass bk as a multiple of {frag_k}.")
    if bk % frag_k:
        raise ShapeError(f"bk={bk} is not a multiple of the fragment's K ({frag_k}).",
                         f"pass bk as a multiple of {frag_k} (e.g. {frag_k}).")
    bm, bn, threads = _wmma_tiles(params)
    if table:  # the index-reuse loader gives each thread whole columns, or shares columns evenly
        if bn % threads and threads % bn:
            raise ShapeError(f"The x tile is {bn} columns wide for {threads} threads; one must divide the other.",
                             "pass frags_n so that frags_n * fragment width is a multiple or divisor of 32.")
        groups = threads // bn if threads >= bn else 1
        if bk % groups:
            raise ShapeError(f"bk={bk} must be a multiple of the {groups} threads that share a column.",
                             f"pass bk as a multiple of {groups}.")
    pad = 16 // elem_bytes
    smem = (bm * (bk + pad) + bk * (bn + pad)) * elem_bytes + bm * (bn + 4) * 4 + (2 * bk * 4 if table else 0)
    _check_smem(smem, f"A {bm} x {bn} x {bk} tensor-core tile", "use fewer warps, frags_n or a smaller bk.")
    _check_gemm_indices(shape, bn, bm)


@register
class TensorCores(ConvVariant):
    """Tensor cores: the implicit GEMM on WMMA fragments (TF32 m16n16k8 or FP16 m16n16k16 / m8n32k16).

    Changes: the arithmetic moves to tensor cores. Each block stages a k tile and a gathered x
    tile in shared memory (TF32-rounded floats or halves), each warp accumulates
    ``frags_n`` float fragments; the output goes through shared memory to bounded, coalesced
    stores. ``shape="8x32"`` (FP16 only) spends 4 rather than 12 padding rows on C1's M = 4.

    Prediction: the multiply-adds become nearly free, so the kernel is bound by the gather,
    which here still decomposes every loaded element from scratch (four divisions): expect
    roughly the time of step 07 or a little better, ~1.5-3 ms per layer at B=10000, with
    FP16 a bit faster than TF32 (half the shared-memory traffic).
    """

    slug = "tensor-cores"
    title = "Tensor cores: WMMA implicit GEMM (TF32 or FP16)"
    source = "lenet/10_tensor_cores.cu"
    kernel_names = ("conv_tensor_cores",)
    defaults = {"precision": "tf32", "shape": "16x16", "warps": 4, "frags_n": 2, "bk": 16}
    precision = "tf32/fp16"
    # TF32 and FP16 both keep 10 explicit mantissa bits: each operand is rounded with relative
    # error <= 2^-11, products and sums are exact-ish in the float accumulator, so the relative
    # L2 error is ~3e-4 to 6e-4 whatever CKK is. 5e-3 leaves a wide margin and still catches
    # any indexing mistake.
    tolerance = 5e-3

    def defines(self, params: dict, shape: ConvShape) -> dict:
        fm, fn = FRAGMENTS[params["shape"]]
        return {"USE_TF32": int(params["precision"] == "tf32"), "FRAG_M": fm, "FRAG_N": fn,
                "WARPS": params["warps"], "FRAGS_N": params["frags_n"], "BK": params["bk"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        precision = _choice_param(params, "precision", ("tf32", "fp16"))
        frag = _choice_param(params, "shape", tuple(FRAGMENTS))
        if precision == "tf32" and frag != "16x16":
            raise ShapeError(f"shape={frag!r} has no TF32 fragment: WMMA's only TF32 shape is m16n16k8.",
                             "use shape='16x16' with precision='tf32', or precision='fp16' for the 8x32 fragment.")
        tf32 = precision == "tf32"
        _validate_wmma_common(shape, params, 8 if tf32 else 16, 4 if tf32 else 2, table=False)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        _launch_wmma(self.kernel(self.kernel_names[0], params, shape), y, x, k, shape, params, stream)


@register
class IndexReuse(ConvVariant):
    """Index reuse: step 10's FP16 tensor-core kernel with the gather's index math hoisted.

    Changes: each thread's columns are decomposed into x offsets once, before the reduction;
    each K-tile's reduction rows are decomposed once per block into a double-buffered shared
    table. Gathering an element becomes a broadcast shared read, an add and the load.

    Prediction: the gather was the bottleneck of step 10, so this should be the largest
    single gain of the tensor-core steps: ~2x, towards ~1 ms for C3 and ~0.8-1 ms for C1 at
    B=10000, where L1/L2 traffic of the 49-fold overlapping reads starts to dominate.
    """

    slug = "index-reuse"
    title = "Index reuse: FP16 tensor cores with hoisted gather arithmetic"
    source = "lenet/11_index_reuse.cu"
    kernel_names = ("conv_index_reuse",)
    defaults = {"shape": "16x16", "warps": 4, "frags_n": 2, "bk": 16}
    precision = "fp16"
    tolerance = 5e-3  # FP16 operands, float accumulation: ~3e-4 to 6e-4 (see TensorCores)

    def defines(self, params: dict, shape: ConvShape) -> dict:
        fm, fn = FRAGMENTS[params["shape"]]
        return {"FRAG_M": fm, "FRAG_N": fn, "WARPS": params["warps"], "FRAGS_N": params["frags_n"],
                "BK": params["bk"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        _validate_wmma_common(shape, params, 16, 2, table=True)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        _launch_wmma(self.kernel(self.kernel_names[0], params, shape), y, x, k, shape, params, stream)


@register
class PerLayer(ConvVariant):
    """Per-layer kernels: a dispatcher that picks the tensor-core configuration by shape.

    Changes: one file holds step 11's kernel instantiated for two fragment shapes; ``launch``
    chooses per call (policy ``"auto"``): M <= 8 -> m8n32k16 (C1: 8 rows for M = 4), else
    m16n16k16 (C3: M = 16 fills a fragment exactly). An 8-row fragment only pays off when
    half a 16-row fragment would be padding; for larger M the 16-row kernel reads each x tile
    half as many times (grid y is ceil(M / 16) instead of ceil(M / 8)).

    Prediction: C3 unchanged from step 11 (same kernel); C1 gains from halving the wasted
    tensor-core rows, but C1 is gather/memory bound, so only ~5-15%.
    """

    slug = "per-layer-kernels"
    title = "Per-layer kernels: the fragment shape chosen per layer"
    source = "lenet/12_per_layer.cu"
    kernel_names = ("conv_wmma_m16n16k16", "conv_wmma_m8n32k16")
    defaults = {"policy": "auto", "warps": 4, "frags_n": 2, "bk": 16}
    precision = "fp16"
    tolerance = 5e-3  # FP16 operands, float accumulation (see TensorCores)

    @staticmethod
    def choose(shape: ConvShape, params: dict) -> str:
        """The policy: the fragment shape ("8x32" or "16x16") used for ``shape``."""
        return "8x32" if shape.M <= 8 else "16x16"

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"WARPS": params["warps"], "FRAGS_N": params["frags_n"], "BK": params["bk"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        _choice_param(params, "policy", ("auto",))
        # Both kernels are compiled from one set of defines: both must be valid.
        for frag in FRAGMENTS:
            _validate_wmma_common(shape, {**params, "shape": frag}, 16, 2, table=True)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        frag = self.choose(shape, params)
        bm, bn, threads = _wmma_tiles({**params, "shape": frag})
        name = "conv_wmma_m8n32k16" if frag == "8x32" else "conv_wmma_m16n16k16"
        n = shape.B * shape.H_out * shape.W_out
        kernel = self.kernel(name, params, shape)
        kernel((ceil_div(n, bn), ceil_div(shape.M, bm)), (threads,),
               (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)), stream=stream)


# ----------------------------------------------------------------------------- 13


def _validate_register_tiles(params: dict) -> tuple[int, int, int, int, int, int]:
    """Check bm, bn, bk, tm, tn of a register-tiled FP32 kernel; return them with the thread count."""
    bm = _int_param(params, "bm", 1, 256)
    bn = _int_param(params, "bn", 1, 1024)
    bk = _int_param(params, "bk", 1, 256)
    tm = _int_param(params, "tm", 1, 16)
    tn = _int_param(params, "tn", 1, 16)
    if bm % tm or bn % tn:
        raise ShapeError(f"tm={tm} must divide bm={bm} and tn={tn} must divide bn={bn}.",
                         "pick tile sizes such as bm=16, tm=4, bn=128, tn=4.")
    if tm * tn > 64:
        raise ShapeError(f"A {tm} x {tn} register tile is {tm * tn} accumulators; more than 64 spill.",
                         "keep tm * tn <= 64.")
    threads = (bm // tm) * (bn // tn)
    if not 32 <= threads <= MAX_THREADS:
        raise ShapeError(f"(bm/tm) * (bn/tn) = {threads} threads per block; a block needs 32..{MAX_THREADS}.",
                         "change bm/tm or bn/tn.")
    if bn % threads and threads % bn:
        raise ShapeError(f"The x tile is {bn} columns wide for {threads} threads; one must divide the other.",
                         "pick bn and the thread count (bm/tm)*(bn/tn) as multiples of one another.")
    groups = threads // bn if threads >= bn else 1
    if bk % groups:
        raise ShapeError(f"bk={bk} must be a multiple of the {groups} threads that share a column.",
                         f"pass bk as a multiple of {groups}.")
    smem = 4 * (bk * (bm + 1) + bk * bn + 2 * bk)
    _check_smem(smem, f"A {bm} x {bn} x {bk} register-tiled block", "use smaller bm, bn or bk.")
    return bm, bn, bk, tm, tn, threads


@register
class RegisterTiling(ConvVariant):
    """Register tiling: FP32 implicit GEMM, BM x BN x BK shared tiles, TM x TN outputs per thread.

    Changes: back to exact FP32 on CUDA cores, but each thread keeps a TM x TN block of
    outputs in registers and does an outer product per reduction index, so each shared-memory
    read feeds TM (or TN) multiply-adds instead of one. The gather keeps step 11's index reuse.

    Prediction: C3 (M = 16 fills bm = 16) becomes FMA-bound: ~72 GFLOP at perhaps 50-60% of
    the ~60 TFLOP/s FP32 peak -> ~2-2.5 ms at B=10000. C1 at the default bm = 16 wastes 3/4 of
    its FMAs on padding rows (~1.5-2 ms); bm=4, tm=2, bn=256, tn=4 as C1's layer parameters
    should bring it towards ~0.8-1 ms.
    """

    slug = "register-tiling"
    title = "Register tiling: FP32 implicit GEMM with per-thread output tiles"
    source = "lenet/13_register_tiling.cu"
    kernel_names = ("conv_register_tiling",)
    defaults = {"bm": 16, "bn": 128, "bk": 8, "tm": 4, "tn": 4}
    tolerance = 1e-5

    def defines(self, params: dict, shape: ConvShape) -> dict:
        return {"BM": params["bm"], "BN": params["bn"], "BK": params["bk"], "TM": params["tm"], "TN": params["tn"]}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        bm, bn, *_ = _validate_register_tiles(params)
        _check_gemm_indices(shape, bn, bm)

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        bm, bn, threads = params["bm"], params["bn"], (params["bm"] // params["tm"]) * (params["bn"] // params["tn"])
        n = shape.B * shape.H_out * shape.W_out
        kernel = self.kernel(self.kernel_names[0], params, shape)
        kernel((ceil_div(n, bn), ceil_div(shape.M, bm)), (threads,),
               (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)), stream=stream)


# ----------------------------------------------------------------------------- 14

CONSTANT_MAX = 64 * 1024     # bytes of __constant__ memory a module may declare
CONSTANT_FAST = 4 * 1024     # weights up to this size stay in the per-SM constant cache
DIRECT_UNROLL_MAX = 8192     # FFMAs of a fully unrolled body (constant-memory weights)
DIRECT_STEP_MAX = 4096       # FFMAs of one unrolled (c, p) step (shared-memory weights)
TENSOR_MIN_MAPS = 12         # 'auto' takes the 3xTF32 tensor-core path when 16-row tiles are 3/4 used
TENSOR_SMEM_MAX = 112 * 1024 # dynamic shared memory per block of the 3xTF32 kernel (two blocks per SM)
FALLBACK_TILES = {"FB_BM": 16, "FB_BN": 128, "FB_BK": 8, "FB_TM": 4, "FB_TN": 4}


@register
class Final(ConvVariant):
    """Final: a direct convolution specialised at compile time for the layer's shape.

    Changes: back from GEMM to direct convolution, built for these layers. The shape
    (C, H, W, M, K) is compiled in (``defines`` depend on the shape); each block copies one
    image's input (all channels) into shared memory once and computes every output of that
    image (or band of rows) from there. ``plan`` picks the kernel:

    - ``math="fp32"`` (CUDA cores, exact FP32; 'auto' for M < 12, i.e. C1): each thread
      produces ``maps_per_thread`` maps x ``outputs_per_thread`` neighbouring outputs of a row
      from a register window (one 16-byte shared load per 4 inputs serves MG * TW * K
      multiply-adds), with 16- or 8-byte coalesced stores. Small weights (C1: 784 bytes) sit in
      constant memory with every loop unrolled; larger ones (C3's 12.5 KB thrash the constant
      cache) go to shared memory as 16-byte broadcast loads with rolled loops.
    - ``math="3xtf32"`` (tensor cores; 'auto' for M >= 12, i.e. C3): mma.sync m16n8k8 with
      16 maps x 8 pixels x 8 taps of one input row per product; every operand is split into
      TF32 hi + lo parts once, in shared memory, and accumulated as hi*lo + lo*hi + hi*hi in
      FP32, which keeps the error at FP32 level (~1e-6 relative L2, measured <= 1.7e-6) while
      running on tensor cores.
    - shapes outside both (weights or one band of input beyond shared/constant memory, very
      large masks) run the FP32 register-tiled implicit GEMM compiled from the same file;
      ``plan(shape, params)["reason"]`` says why.

    Prediction (B=10000, H100): C1 on CUDA cores is issue-bound near the memory floor
    (12.5 G FMAs ~ 0.45 ms at full FP32 rate, 1.32 GB ~ 0.44 ms): ~0.6-0.7 ms. C3 in exact FP32
    needs 36 G FMAs, >= 1.1-1.3 ms at the H100's FP32 rate (~1.8-2 ms reached); 3xTF32 moves it
    to the tensor cores, bounded by shared-memory bandwidth for the operand loads: ~1.5 ms.
    C1 + C3 ~2.2 ms: the 1.0 ms target is out of reach at FP32-level accuracy with these designs.
    """

    slug = "final"
    title = "Final: shape-specialised direct convolution (FP32, 3xTF32 tensor cores for C3)"
    source = "lenet/14_final.cu"
    kernel_names = ("conv_direct", "conv_direct_3xtf32", "conv_fallback")
    defaults = {"math": "auto", "maps_per_thread": "auto", "outputs_per_thread": "auto", "threads": "auto",
                "weights": "auto", "min_blocks": "auto", "unroll_p": False, "tiles_per_warp": 4}
    tolerance = 1e-5

    @staticmethod
    def _register_tile(shape: ConvShape, params: dict) -> tuple[int, int]:
        """(maps, outputs along w) per thread: 'auto' takes up to 16 maps and 4 outputs."""
        mg = params["maps_per_thread"]
        tw = params["outputs_per_thread"]
        return (min(shape.M, 16) if mg == "auto" else mg), (4 if tw == "auto" else tw)

    # -- the plan: which kernel, with which compile-time configuration

    def plan(self, shape: ConvShape, params: dict) -> dict:
        """The configuration ``launch`` uses: ``{"kernel": "conv_direct", ...}`` or the fallback.

        ``reason`` says why the fallback was taken (None for the specialised path).
        """
        math = params["math"]
        if math == "auto":
            math = "3xtf32" if shape.M >= TENSOR_MIN_MAPS else "fp32"
        if math == "3xtf32":
            plan = self._plan_3xtf32(shape, params)
            if plan is not None:
                return plan
        kk = shape.K * shape.K
        ckk = shape.C * kk
        mg, tw = self._register_tile(shape, params)
        groups = ceil_div(shape.M, mg)
        strips = ceil_div(shape.W_out, tw)
        window = tw + shape.K - 1
        loaded = ceil_div(window, 4) * 4 if tw % 4 == 0 else window
        rs = ceil_div(max((strips - 1) * tw + loaded, shape.W), 4) * 4
        const_bytes = 4 * groups * mg * ckk

        def fallback(reason: str) -> dict:
            return {"kernel": "conv_fallback", "reason": reason}

        weights = params["weights"]
        if weights == "auto":
            weights = "constant" if const_bytes <= CONSTANT_FAST and ckk * mg * tw <= DIRECT_UNROLL_MAX else "shared"
        if weights == "constant":
            if const_bytes > CONSTANT_MAX:
                return fallback(f"the weights ({const_bytes} bytes) exceed the {CONSTANT_MAX} bytes of constant memory")
            if ckk * mg * tw > 2 * DIRECT_UNROLL_MAX:
                return fallback(f"the fully unrolled body ({ckk * mg * tw} FMAs) exceeds {2 * DIRECT_UNROLL_MAX}")
            weight_smem = 0
        else:
            if shape.K * mg * tw > DIRECT_STEP_MAX:
                return fallback(f"one unrolled (c, p) step ({shape.K * mg * tw} FMAs) exceeds {DIRECT_STEP_MAX}")
            weight_smem = 4 * ckk * ceil_div(mg, 4) * 4
        max_rows = (STATIC_SMEM_MAX - weight_smem) // (4 * shape.C * rs)  # input rows of all channels that fit
        band = max_rows - shape.K + 1
        if band < 1:
            return fallback(f"{shape.K} input rows of {shape.C} channels ({4 * shape.C * shape.K * rs} bytes) and "
                            f"{weight_smem} bytes of weights exceed {STATIC_SMEM_MAX} bytes of shared memory")
        nbands = ceil_div(shape.H_out, min(band, shape.H_out))
        band = ceil_div(shape.H_out, nbands)  # balanced bands
        tasks = band * strips
        threads = params["threads"]
        if threads == "auto":
            # The block size whose last round of tasks wastes least (ties: more threads).
            threads = min(range(128, 385, 32), key=lambda t: (ceil_div(tasks, t) * t - tasks, -t))
        min_blocks = params["min_blocks"]
        if min_blocks == "auto":
            # Registers the thread needs (accumulators, window, addresses) -> blocks per SM to ask for.
            min_blocks = max(1, min(4, 65536 // (threads * (mg * tw + loaded + 16))))
        smem = 4 * shape.C * (band + shape.K - 1) * rs + weight_smem
        return {"kernel": "conv_direct", "reason": None, "math": "fp32", "maps_per_thread": mg, "outputs_per_thread": tw,
                "weights": weights, "groups": groups, "band": band, "bands": nbands, "threads": threads,
                "min_blocks": min_blocks, "row_stride": rs, "const_bytes": const_bytes, "smem_bytes": smem}

    def _plan_3xtf32(self, shape: ConvShape, params: dict) -> dict | None:
        """The tensor-core plan (16 maps x 8 pixels x 8 taps per mma), or None where it does not fit.

        Input and weights are kept twice (TF32 hi and lo parts) in dynamic shared memory, up to
        TENSOR_SMEM_MAX bytes per block; bands of output rows keep tall images under it.
        """
        kq8 = ceil_div(shape.K, 8)
        ksteps = shape.C * shape.K * kq8
        weight_smem = 2 * ksteps * 32 * 4 * 4
        rs = ceil_div(max(shape.W, shape.W_out - 1 + 8 * kq8), 4) * 4
        max_rows = (TENSOR_SMEM_MAX - weight_smem) // (2 * 4 * shape.C * rs)
        band = max_rows - shape.K + 1
        if band < 1:
            return None
        nbands = ceil_div(shape.H_out, min(band, shape.H_out))
        band = ceil_div(shape.H_out, nbands)
        nt = params["tiles_per_warp"]
        warp_tasks = ceil_div(ceil_div(band * shape.W_out, 8), nt)
        threads = params["threads"]
        if threads == "auto":
            # Whole rounds of warp tasks, least idle warps; ties: more threads.
            threads = min(range(128, 385, 32),
                          key=lambda t: (ceil_div(warp_tasks, t // 32) * (t // 32) - warp_tasks, -t))
        min_blocks = params["min_blocks"]
        if min_blocks == "auto":
            min_blocks = max(1, min(4, 65536 // (threads * (8 * nt + 40))))
        smem = 2 * 4 * shape.C * (band + shape.K - 1) * rs + weight_smem
        return {"kernel": "conv_direct_3xtf32", "reason": None, "math": "3xtf32", "groups": ceil_div(shape.M, 16),
                "band": band, "bands": nbands, "threads": threads, "min_blocks": min_blocks, "row_stride": rs,
                "tiles_per_warp": nt, "smem_bytes": smem}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        plan = self.plan(shape, params)
        if plan["kernel"] == "conv_fallback":
            return {"FALLBACK_ONLY": 1, **FALLBACK_TILES}
        if plan["kernel"] == "conv_direct_3xtf32":
            return {"MATH_3XTF32": 1, "KS": shape.K, "CIN": shape.C, "HIN": shape.H, "WIN": shape.W,
                    "MOUT": shape.M, "MG": 16, "TW": 4, "BAND": plan["band"], "THREADS": plan["threads"],
                    "MIN_BLOCKS": plan["min_blocks"], "WEIGHTS_SMEM": 1, "NT": plan["tiles_per_warp"],
                    **FALLBACK_TILES}
        return {"KS": shape.K, "CIN": shape.C, "HIN": shape.H, "WIN": shape.W, "MOUT": shape.M,
                "MG": plan["maps_per_thread"], "TW": plan["outputs_per_thread"], "BAND": plan["band"],
                "THREADS": plan["threads"], "MIN_BLOCKS": plan["min_blocks"],
                "WEIGHTS_SMEM": int(plan["weights"] == "shared"), "UNROLL_P": int(bool(params["unroll_p"])),
                **FALLBACK_TILES}

    def validate(self, shape: ConvShape, params: dict) -> None:
        super().validate(shape, params)
        for name, lo, hi in (("maps_per_thread", 1, 32), ("outputs_per_thread", 1, 16), ("threads", 32, 512),
                             ("min_blocks", 1, 8)):
            if params[name] != "auto":
                _int_param(params, name, lo, hi, f"pass {name}='auto' or an integer in {lo}..{hi}.")
        if params["threads"] != "auto" and params["threads"] % 32:
            raise ShapeError(f"threads={params['threads']} is not a multiple of 32 (whole warps).",
                             "pass threads='auto' or a multiple of 32.")
        _choice_param(params, "weights", ("auto", "constant", "shared"))
        _choice_param(params, "math", ("auto", "fp32", "3xtf32"))
        _int_param(params, "tiles_per_warp", 1, 8, "pass tiles_per_warp between 1 and 8.")
        if params["unroll_p"] not in (True, False):
            raise ShapeError(f"unroll_p={params['unroll_p']!r} must be True or False.", "pass unroll_p=False.")
        mg, tw = self._register_tile(shape, params)
        if mg * tw > 64:
            raise ShapeError(f"maps_per_thread * outputs_per_thread = {mg} * {tw} = {mg * tw} accumulators per "
                             f"thread; more than 64 spill registers.", "keep their product at most 64.")
        plan = self.plan(shape, params)
        if plan["kernel"] != "conv_fallback":
            if shape.B * plan["bands"] > INT32_MAX:
                raise ShapeError(f"B * bands = {shape.B * plan['bands']} blocks exceed grid x ({INT32_MAX}).",
                                 "split the batch into chunks of fewer images.")
            if plan["groups"] > GRID_YZ_MAX:
                raise ShapeError(f"{plan['groups']} map groups exceed grid y ({GRID_YZ_MAX}).",
                                 "raise maps_per_thread.")
        else:
            _check_gemm_indices(shape, FALLBACK_TILES["FB_BN"], FALLBACK_TILES["FB_BM"])

    def launch(self, y, x, k, shape: ConvShape, params: dict, stream=None) -> None:
        from .. import kernels

        plan = self.plan(shape, params)
        defines = self.defines(params, shape)
        args = int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K)
        if plan["kernel"] == "conv_fallback":
            tiles = FALLBACK_TILES
            threads = (tiles["FB_BM"] // tiles["FB_TM"]) * (tiles["FB_BN"] // tiles["FB_TN"])
            n = shape.B * shape.H_out * shape.W_out
            kernel = kernels.get_kernel(self.source, "conv_fallback", defines)
            kernel((ceil_div(n, tiles["FB_BN"]), ceil_div(shape.M, tiles["FB_BM"])), (threads,),
                   (y, x, k, *args), stream=stream)
            return
        module = kernels.get_module(self.source, defines)
        if plan["kernel"] == "conv_direct_3xtf32":
            kernel = module.get_function("conv_direct_3xtf32")
            if plan["smem_bytes"] > STATIC_SMEM_MAX:  # opt in to more than 48 KiB of dynamic shared memory
                kernel.max_dynamic_shared_size_bytes = plan["smem_bytes"]
            kernel.preferred_shared_memory_carveout = 100  # all of L1 as shared memory: room for 2 blocks
            kernel((shape.B * plan["bands"], plan["groups"]), (plan["threads"],), (y, x, k, *int32(shape.B)),
                   shared_mem=plan["smem_bytes"], stream=stream)
            return
        if plan["weights"] == "constant":
            # The weights go to this module's constant memory, ordered on the launch's stream.
            # (Two streams running this shape with different weights at once would share it.)
            weights = module.get_global("c_weights")
            nbytes = 4 * k.size
            weights.copy_from_device_async(k.data, nbytes, stream)
            if plan["const_bytes"] > nbytes:  # the last map group's padding maps must be zeros
                (weights + nbytes).memset_async(0, plan["const_bytes"] - nbytes, stream)
        kernel = module.get_function("conv_direct")
        kernel((shape.B * plan["bands"], plan["groups"]), (plan["threads"],), (y, x, k, *int32(shape.B)),
               stream=stream)
