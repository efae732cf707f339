"""The LeNet study's steps, in book order: the one list that chapters, kernels, notebooks and
recorded part names are derived from (see ``kernelbook.steps``)."""

from ..steps import Step, StepList
from .convstep import Baseline
from .direct import ConstantMemory, RestrictUnroll, Streams, Sweep, Tiled
from .final import Specialised
from .gemm import CublasMatmul, Fp16, FusedUnrollMatmul, UnrollMatmul
from .hopper import HopperFinal
from .tensor import IndexReuse, PerLayer, RegisterTiling, TensorCores
from .wgmma import WgmmaFinal

STEPS = StepList("lenet", [
    Step(0, "baseline", "00_baseline", "Baseline: direct convolution from global memory", Baseline),
    Step(1, "constant-memory", "01_constant_memory", "Weights in constant memory", ConstantMemory),
    Step(2, "sweep", "02_sweep", "Parameter sweep: block shape, coarsening, images per block", Sweep),
    Step(3, "tiled", "03_tiled", "Tiled shared-memory convolution", Tiled),
    Step(4, "restrict-unroll", "04_restrict_unroll", "__restrict__ and loop unrolling", RestrictUnroll),
    Step(5, "streams", "05_streams", "Streams: overlapping copies and kernels", Streams),
    Step(6, "unroll-matmul", "06_unroll_matmul", "Unroll + matmul: im2col, shared-memory tiled GEMM, permute",
         UnrollMatmul),
    Step(7, "fused-unroll-matmul", "07_fused_unroll_matmul",
         "Fused unroll + matmul: implicit GEMM reading x directly", FusedUnrollMatmul),
    Step(8, "cublas", "08_cublas", "Unroll + cuBLAS: im2col and a batched cupy.matmul", CublasMatmul),
    Step(9, "fp16", "09_fp16", "FP16: __half2 tiles and __hfma2 in the fused kernel", Fp16,
         builds_on="fused-unroll-matmul"),
    Step(10, "tensor-cores", "10_tensor_cores", "Tensor cores: WMMA implicit GEMM (TF32 or FP16)", TensorCores),
    Step(11, "index-reuse", "11_index_reuse", "Index reuse: FP16 tensor cores with hoisted gather arithmetic",
         IndexReuse),
    Step(12, "per-layer-kernels", "12_per_layer", "Per-layer kernels: the fragment shape chosen per layer", PerLayer),
    Step(13, "register-tiling", "13_register_tiling",
         "Register tiling: FP32 implicit GEMM with per-thread output tiles", RegisterTiling),
    Step(14, "specialised", "14_specialised",
         "Shape-specialised direct convolution: FP32 on CUDA cores (C1), 3xTF32 tensor cores (C3)", Specialised),
    Step(15, "hopper-final", "15_hopper_final",
         "Final: FP16 hi/lo split on tensor cores (C3), the FP32 direct kernel for C1", HopperFinal),
    Step(16, "wgmma-final", "16_wgmma_final",
         "wgmma final: warpgroup MMA and bulk copies for both layers (FP16 hi/lo split, sm_90a)", WgmmaFinal),
])
