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
import math

from ..errors import LaunchLimitError, ParameterError, ShapeError
from ..limits import H100
from ..steps import Launch, LibraryCall
from .convstep import GRID_YZ_MAX, INT32_MAX, ConvShape, ConvStep, ceil_div, int32

STATIC_SMEM_MAX = H100.static_smem_per_block  # bytes of static __shared__ per block without an opt-in
MAX_THREADS = H100.max_threads_per_block
ELEMENTWISE_BLOCK = 256      # block size of the 1-D helper kernels (im2col, permute)


# ----------------------------------------------------------------------------- shared checks


def _int_param(params: dict, name: str, lo: int, hi: int, fix: str | None = None) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ParameterError(f"{name}={value!r} is outside {lo}..{hi}.", fix or f"pass {name} between {lo} and {hi}.")
    return value


def _choice_param(params: dict, name: str, options: tuple[str, ...]) -> str:
    value = params[name]
    if value not in options:
        raise ParameterError(f"{name}={value!r} is not one of {', '.join(map(repr, options))}.",
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
        raise LaunchLimitError(f"M={shape.M} needs {grid_y} row tiles of {row_tile}, but grid y stops at {GRID_YZ_MAX}.",
                         f"use at most {GRID_YZ_MAX * row_tile} maps per launch.")


def _check_smem(nbytes: int, what: str, fix: str) -> None:
    if nbytes > STATIC_SMEM_MAX:
        raise LaunchLimitError(f"{what} needs {nbytes} bytes of shared memory per block; static shared memory "
                         f"stops at {STATIC_SMEM_MAX} bytes (48 KiB).", fix)


def _stream_scope(stream):
    """CuPy operations run on the current stream: make ``stream`` current for them."""
    return stream if stream is not None else contextlib.nullcontext()


def _check_workspace_mib(params: dict) -> None:
    value = params["workspace_mib"]
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not value > 0:
        raise ParameterError(f"workspace_mib={value!r} must be a positive number of MiB (or None for the whole batch).",
                         "pass e.g. workspace_mib=512.")


class _Chunked(ConvStep):
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
            raise ParameterError(f"One image needs {per_image} bytes of workspace, more than workspace_mib="
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

    kernel_names = ("unroll_input", "matmul_tiled", "permute_output")
    defaults = {"tile": 16, "workspace_mib": 512}
    macros = {"tile": "TILE"}

    def per_image_floats(self, shape: ConvShape) -> int:
        hw = shape.H_out * shape.W_out
        return (shape.C * shape.K * shape.K + shape.M) * hw  # xu columns + GEMM output columns

    def workspace_arrays(self, shape: ConvShape, chunk: int) -> dict:
        hw = shape.H_out * shape.W_out
        return {"xu": shape.C * shape.K * shape.K * hw * chunk, "yg": shape.M * hw * chunk}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        tile = _int_param(params, "tile", 1, 32, "pass tile between 1 and 32 (a block of tile^2 <= 1024 threads).")
        _check_gemm_indices(shape, tile, tile)
        self._validate_workspace(shape, params)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        """Per chunk of images (its first image is the launch's ``key``): im2col, GEMM, permute."""
        tile = params["tile"]
        hw = shape.H_out * shape.W_out
        chunk = self.chunk_images(shape, params)
        out = []
        for b0 in range(0, shape.B, chunk):
            cols = min(chunk, shape.B - b0) * hw
            out += [Launch("unroll_input", (ceil_div(cols, ELEMENTWISE_BLOCK),), (ELEMENTWISE_BLOCK,), key=str(b0)),
                    Launch("matmul_tiled", (ceil_div(cols, tile), ceil_div(shape.M, tile)), (tile, tile), key=str(b0)),
                    Launch("permute_output", (ceil_div(shape.M * cols, ELEMENTWISE_BLOCK),), (ELEMENTWISE_BLOCK,),
                           key=str(b0))]
        return out

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        x, k, xu, yg = operands
        hw = shape.H_out * shape.W_out
        b0 = int(launch.key)
        nb = min(self.chunk_images(shape, params), shape.B - b0)
        if launch.kernel == "unroll_input":
            return (xu, x, *int32(b0, nb, shape.C, shape.H, shape.W, shape.K))
        if launch.kernel == "matmul_tiled":
            return (yg, k, xu, *int32(shape.M, shape.C * shape.K * shape.K, nb * hw))
        return (y, yg, *int32(b0, nb, shape.M, hw))

    def operands(self, operands, shape: ConvShape, params: dict, stream=None) -> tuple:
        """x and k, and this call's workspace: one chunk's unrolled input and GEMM output."""
        import cupy as cp

        chunk = self.chunk_images(shape, params)
        arrays = self.workspace_arrays(shape, chunk)
        with _stream_scope(stream):  # the pool hands out memory ordered on this stream
            xu = cp.empty(arrays["xu"], dtype=cp.float32)
            yg = cp.empty(arrays["yg"], dtype=cp.float32)
        return (*operands, xu, yg)


# ----------------------------------------------------------------------------- 07


class FusedUnrollMatmul(ConvStep):
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

    kernel_names = ("conv_fused_unroll",)
    defaults = {"tile": 16}
    macros = {"tile": "TILE"}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        tile = _int_param(params, "tile", 1, 32, "pass tile between 1 and 32 (a block of tile^2 <= 1024 threads).")
        _check_gemm_indices(shape, tile, tile)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        return square_tiles(self.kernel_names[0], shape, params["tile"])


def square_tiles(kernel: str, shape: ConvShape, tile: int) -> list[Launch]:
    """The implicit GEMMs of steps 07 and 09: a tile x tile block per (output pixels, maps) tile."""
    n = shape.B * shape.H_out * shape.W_out
    return [Launch(kernel, (ceil_div(n, tile), ceil_div(shape.M, tile)), (tile, tile))]


# ----------------------------------------------------------------------------- 08


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

    def launches(self, shape: ConvShape, params: dict) -> list:
        """Per chunk of images (its first image is the ``key``): our im2col, then cuBLAS's product."""
        hw = shape.H_out * shape.W_out
        chunk = self.chunk_images(shape, params)
        out = []
        for b0 in range(0, shape.B, chunk):
            nb = min(chunk, shape.B - b0)
            out += [Launch("im2col_batched", (ceil_div(nb * hw, ELEMENTWISE_BLOCK),), (ELEMENTWISE_BLOCK,), key=str(b0)),
                    LibraryCall("matmul", key=str(b0))]
        return out

    def operands(self, operands, shape: ConvShape, params: dict, stream=None) -> tuple:
        """x and k, and this call's workspace: one chunk's unrolled input, (chunk, CKK, HW)."""
        import cupy as cp

        with _stream_scope(stream):  # the pool hands out memory ordered on this stream
            xu = cp.empty((self.chunk_images(shape, params), shape.C * shape.K * shape.K, shape.H_out * shape.W_out),
                          dtype=cp.float32)
        return (*operands, xu)

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        x, _, xu = operands
        b0 = int(launch.key)
        nb = min(self.chunk_images(shape, params), shape.B - b0)
        return (xu, x, *int32(b0, nb, shape.C, shape.H, shape.W, shape.K))

    def library_call(self, call, y, operands, shape: ConvShape, params: dict, stream=None) -> None:
        """(M, CKK) @ (nb, CKK, HW) -> (nb, M, HW): y's own layout for these images, by cuBLAS."""
        import cupy as cp

        _, k, xu = operands
        hw = shape.H_out * shape.W_out
        b0 = int(call.key)
        nb = min(self.chunk_images(shape, params), shape.B - b0)
        with _stream_scope(stream):
            cp.matmul(k.reshape(shape.M, shape.C * shape.K * shape.K), xu[:nb],
                      out=y.reshape(shape.B, shape.M, hw)[b0:b0 + nb])


# ----------------------------------------------------------------------------- 09


class Fp16(ConvStep):
    """FP16 arithmetic: step 07's fused kernel with __half2 tiles and __hfma2.

    Changes: tiles are stored as __half2 pairs along the reduction (half the shared memory),
    and each __hfma2 does two multiply-adds. The half2 lanes are moved into a float
    accumulator every ``half_tiles`` K-tiles (0 = only at the end, the purest and least
    accurate form).

    Prediction: modest gain over step 07 (~1.2-1.5x): the kernel is limited by the gather's
    index arithmetic and global loads, which FP16 does not change; the FMA work halves. The
    error grows to ~1e-3 relative L2.
    """

    kernel_names = ("conv_fp16",)
    defaults = {"tile": 16, "half_tiles": 1}
    precision = "fp16"
    math = "fp16x2"
    # Operands are rounded to 11 significant bits (relative error <= 2^-11 ~ 4.9e-4 each,
    # RMS ~2.8e-4), and each half2 lane sums TILE/2 = 8 products per flush, each addition
    # rounded to 11 bits. For random-sign terms these errors add in quadrature, giving ~5e-4
    # to ~1e-3 relative L2 for CKK = 49 or 196 (C1, C3) and up to ~2e-3 for the longest random
    # shapes (CKK = 486). 5e-3 is that with a margin, and still far below what would hide a
    # wrong index (an error of order 1). Inputs must stay below 65504 in magnitude.
    tolerance = 5e-3
    macros = {"tile": "TILE", "half_tiles": "HALF_TILES"}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        tile = _int_param(params, "tile", 2, 32, "pass an even tile between 2 and 32.")
        if tile % 2:
            raise ParameterError(f"tile={tile} is odd; reduction indices are packed in __half2 pairs.",
                             "pass an even tile (e.g. 16).")
        _int_param(params, "half_tiles", 0, 1 << 20,
                   "pass half_tiles >= 0 (0 = keep the whole sum in half2).")
        _check_gemm_indices(shape, tile, tile)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        return square_tiles(self.kernel_names[0], shape, params["tile"])
