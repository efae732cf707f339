"""Tensor-core and register-tiled implicit GEMM steps (10 to 13): WMMA TF32/FP16 fragments,
hoisted gather indices, a fragment shape per layer, and FP32 per-thread output tiles."""

from __future__ import annotations

from .. import limits
from ..errors import LaunchLimitError, ParameterError
from ..steps import Launch
from .convstep import ConvShape, ConvStep, ceil_div
from .gemm import MAX_THREADS, _check_gemm_indices, _check_smem, _choice_param, _int_param

# ----------------------------------------------------------------------------- 10 .. 12

FRAGMENTS = {"16x16": (16, 16), "8x32": (8, 32)}


def _wmma_tiles(params: dict) -> tuple[int, int, int]:
    """(BM, BN, threads) of the WMMA kernels for these parameters."""
    fm, fn = FRAGMENTS[params["shape"]]
    return fm, params["warps"] * params["frags_n"] * fn, 32 * params["warps"]


def gemm_tiles(kernel: str, shape: ConvShape, bm: int, bn: int, threads: int) -> list[Launch]:
    """One block per (bn output pixels) x (bm maps) tile of the implicit GEMM (steps 10-13)."""
    n = shape.B * shape.H_out * shape.W_out
    return [Launch(kernel, (ceil_div(n, bn), ceil_div(shape.M, bm)), (threads,))]


def _check_column_share(bn: int, threads: int, bk: int, fix: str) -> None:
    """The index-reuse loader gives each thread whole columns of the ``bn``-wide x tile, or shares
    each column evenly between threads: one of ``bn`` and ``threads`` divides the other, and a
    column's ``bk`` rows split evenly between the threads that share it."""
    if bn % threads and threads % bn:
        raise ParameterError(f"The x tile is {bn} columns wide for {threads} threads; one must divide the other.", fix)
    groups = threads // bn if threads >= bn else 1
    if bk % groups:
        raise ParameterError(f"bk={bk} must be a multiple of the {groups} threads that share a column.",
                             f"pass bk as a multiple of {groups}.")


def _validate_wmma_common(shape: ConvShape, params: dict, frag_k: int, elem_bytes: int,
                          table: bool) -> None:
    # WMMA needs tensor cores: FP16 fragments from Volta (7.0), TF32 fragments from Ampere (8.0).
    limits.require_compute_capability(8 if elem_bytes == 4 else 7, 0, "WMMA tensor-core fragments")
    _choice_param(params, "shape", tuple(FRAGMENTS))
    _int_param(params, "warps", 1, 32, "pass warps between 1 and 32 (at most 1024 threads).")
    _int_param(params, "frags_n", 1, 16, "pass frags_n between 1 and 16.")
    bk = _int_param(params, "bk", frag_k, 1024, f"pass bk as a multiple of {frag_k}.")
    if bk % frag_k:
        raise ParameterError(f"bk={bk} is not a multiple of the fragment's K ({frag_k}).",
                         f"pass bk as a multiple of {frag_k} (e.g. {frag_k}).")
    bm, bn, threads = _wmma_tiles(params)
    if table:  # the index-reuse loader gives each thread whole columns, or shares columns evenly
        _check_column_share(bn, threads, bk, "pass frags_n so that frags_n * fragment width is a multiple or "
                            "divisor of 32.")
    pad = 16 // elem_bytes
    smem = (bm * (bk + pad) + bk * (bn + pad)) * elem_bytes + bm * (bn + 4) * 4 + (2 * bk * 4 if table else 0)
    _check_smem(smem, f"A {bm} x {bn} x {bk} tensor-core tile", "use fewer warps, frags_n or a smaller bk.")
    _check_gemm_indices(shape, bn, bm)


class TensorCores(ConvStep):
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

    kernel_names = ("conv_tensor_cores",)
    defaults = {"precision": "tf32", "shape": "16x16", "warps": 4, "frags_n": 2, "bk": 16}
    precision = "tf32/fp16"

    def math_for(self, params, problem) -> str:
        return params["precision"]
    # TF32 and FP16 both keep 10 explicit mantissa bits: each operand is rounded with relative
    # error <= 2^-11, products and sums are exact-ish in the float accumulator, so the relative
    # L2 error is ~3e-4 to 6e-4 whatever CKK is. 5e-3 leaves a wide margin and still catches
    # any indexing mistake.
    tolerance = 5e-3

    def defines(self, params: dict, shape: ConvShape) -> dict:
        fm, fn = FRAGMENTS[params["shape"]]
        return {"USE_TF32": int(params["precision"] == "tf32"), "FRAG_M": fm, "FRAG_N": fn,
                "WARPS": params["warps"], "FRAGS_N": params["frags_n"], "BK": params["bk"]}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        precision = _choice_param(params, "precision", ("tf32", "fp16"))
        frag = _choice_param(params, "shape", tuple(FRAGMENTS))
        if precision == "tf32" and frag != "16x16":
            raise ParameterError(f"shape={frag!r} has no TF32 fragment: WMMA's only TF32 shape is m16n16k8.",
                             "use shape='16x16' with precision='tf32', or precision='fp16' for the 8x32 fragment.")
        tf32 = precision == "tf32"
        _validate_wmma_common(shape, params, 8 if tf32 else 16, 4 if tf32 else 2, table=False)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        return gemm_tiles(self.kernel_names[0], shape, *_wmma_tiles(params))


class IndexReuse(ConvStep):
    """Index reuse: step 10's FP16 tensor-core kernel with the gather's index math hoisted.

    Changes: each thread's columns are decomposed into x offsets once, before the reduction;
    each K-tile's reduction rows are decomposed once per block into a double-buffered shared
    table. Gathering an element becomes a broadcast shared read, an add and the load.

    Prediction: the gather was the bottleneck of step 10, so this should be the largest
    single gain of the tensor-core steps: ~2x, towards ~1 ms for C3 and ~0.8-1 ms for C1 at
    B=10000, where L1/L2 traffic of the 49-fold overlapping reads starts to dominate.
    """

    kernel_names = ("conv_index_reuse",)
    defaults = {"shape": "16x16", "warps": 4, "frags_n": 2, "bk": 16}
    precision = "fp16"
    math = "fp16"
    tolerance = 5e-3  # FP16 operands, float accumulation: ~3e-4 to 6e-4 (see TensorCores)

    def defines(self, params: dict, shape: ConvShape) -> dict:
        fm, fn = FRAGMENTS[params["shape"]]
        return {"FRAG_M": fm, "FRAG_N": fn, "WARPS": params["warps"], "FRAGS_N": params["frags_n"],
                "BK": params["bk"]}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        _validate_wmma_common(shape, params, 16, 2, table=True)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        return gemm_tiles(self.kernel_names[0], shape, *_wmma_tiles(params))


class PerLayer(ConvStep):
    """Per-layer kernels: a dispatcher that picks the tensor-core configuration by shape.

    Changes: one file holds step 11's kernel instantiated for two fragment shapes; ``launch``
    chooses per call (policy ``"auto"``): M <= 8 -> m8n32k16 (C1: 8 rows for M = 4), else
    m16n16k16 (C3: M = 16 fills a fragment exactly). An 8-row fragment only pays off when
    half a 16-row fragment would be padding; for larger M the 16-row kernel reads each x tile
    half as many times (grid y is ceil(M / 16) instead of ceil(M / 8)).

    Prediction: C3 unchanged from step 11 (same kernel); C1 gains from halving the wasted
    tensor-core rows, but C1 is gather/memory bound, so only ~5-15%.
    """

    kernel_names = ("conv_wmma_m16n16k16", "conv_wmma_m8n32k16")
    defaults = {"policy": "auto", "warps": 4, "frags_n": 2, "bk": 16}
    precision = "fp16"
    math = "fp16"
    tolerance = 5e-3  # FP16 operands, float accumulation (see TensorCores)

    @staticmethod
    def choose(shape: ConvShape, params: dict) -> str:
        """The policy: the fragment shape ("8x32" or "16x16") used for ``shape``."""
        return "8x32" if shape.M <= 8 else "16x16"

    macros = {"warps": "WARPS", "frags_n": "FRAGS_N", "bk": "BK"}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        _choice_param(params, "policy", ("auto",))
        # Both kernels are compiled from one set of defines: both must be valid.
        for frag in FRAGMENTS:
            _validate_wmma_common(shape, {**params, "shape": frag}, 16, 2, table=True)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        frag = self.choose(shape, params)
        name = "conv_wmma_m8n32k16" if frag == "8x32" else "conv_wmma_m16n16k16"
        return gemm_tiles(name, shape, *_wmma_tiles({**params, "shape": frag}))

    def kernels_for(self, params: dict, problem: ConvShape):
        return None   # one module holds both fragment shapes: its compiler report shows both, as before

    def prepare(self, params: dict, problem: ConvShape) -> None:
        for name in self.kernel_names:   # one module: both, so a call with the other layer compiles nothing
            self.kernel(name, params, problem)


# ----------------------------------------------------------------------------- 13


def _validate_register_tiles(params: dict) -> tuple[int, int, int, int, int, int]:
    """Check bm, bn, bk, tm, tn of a register-tiled FP32 kernel; return them with the thread count."""
    bm = _int_param(params, "bm", 1, 256)
    bn = _int_param(params, "bn", 1, 1024)
    bk = _int_param(params, "bk", 1, 256)
    tm = _int_param(params, "tm", 1, 16)
    tn = _int_param(params, "tn", 1, 16)
    if bm % tm or bn % tn:
        raise ParameterError(f"tm={tm} must divide bm={bm} and tn={tn} must divide bn={bn}.",
                         "pick tile sizes such as bm=16, tm=4, bn=128, tn=4.")
    if tm * tn > 64:
        raise ParameterError(f"A {tm} x {tn} register tile is {tm * tn} accumulators; more than 64 spill.",
                         "keep tm * tn <= 64.")
    threads = (bm // tm) * (bn // tn)
    if not 32 <= threads <= MAX_THREADS:
        raise LaunchLimitError(f"(bm/tm) * (bn/tn) = {threads} threads per block; a block needs 32..{MAX_THREADS}.",
                         "change bm/tm or bn/tn.")
    _check_column_share(bn, threads, bk, "pick bn and the thread count (bm/tm)*(bn/tn) as multiples of one another.")
    smem = 4 * (bk * (bm + 1) + bk * bn + 2 * bk)
    _check_smem(smem, f"A {bm} x {bn} x {bk} register-tiled block", "use smaller bm, bn or bk.")
    return bm, bn, bk, tm, tn, threads


class RegisterTiling(ConvStep):
    """Register tiling: FP32 implicit GEMM, BM x BN x BK shared tiles, TM x TN outputs per thread.

    Changes: back to exact FP32 on CUDA cores, but each thread keeps a TM x TN block of
    outputs in registers and does an outer product per reduction index, so each shared-memory
    read feeds TM (or TN) multiply-adds instead of one. The gather keeps step 11's index reuse.

    Prediction: C3 (M = 16 fills bm = 16) becomes FMA-bound: ~72 GFLOP at perhaps 50-60% of
    the ~60 TFLOP/s FP32 peak -> ~2-2.5 ms at B=10000. C1 at the default bm = 16 wastes 3/4 of
    its FMAs on padding rows (~1.5-2 ms); bm=4, tm=2, bn=256, tn=4 as C1's layer parameters
    should bring it towards ~0.8-1 ms.
    """

    kernel_names = ("conv_register_tiling",)
    defaults = {"bm": 16, "bn": 128, "bk": 8, "tm": 4, "tn": 4}
    tolerance = 1e-5

    macros = {"bm": "BM", "bn": "BN", "bk": "BK", "tm": "TM", "tn": "TN"}

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        bm, bn, *_ = _validate_register_tiles(params)
        _check_gemm_indices(shape, bn, bm)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        bm, bn, threads = params["bm"], params["bn"], (params["bm"] // params["tm"]) * (params["bn"] // params["tn"])
        return gemm_tiles(self.kernel_names[0], shape, bm, bn, threads)
