"""The VGG layer study's ordered steps: the single source of truth for its chapters."""

from __future__ import annotations

from ..steps import Step, StepList
from .final import Final, Winograd
from .hopper import Hopper3xTF32, HopperFP16, HopperSplit, HopperTF32
from .impls import (
                    TF32,
                    Baseline,
                    InputsShared,
                    RegisterTiled,
                    ThreeTF32,
                    TwoPhaseWeights,
                    WeightsOnTheFly,
                    WeightsRegisters,
                    WeightsShared,
)

STEPS = StepList("vgg", [
    Step(0, "baseline", "00_baseline", "Baseline: four pre-pool outputs per thread, all from global memory", Baseline),
    Step(1, "weights-shared", "01_weights_shared", "Weights in shared memory", WeightsShared),
    Step(2, "inputs-shared", "02_inputs_shared", "Inputs in shared memory", InputsShared),
    Step(3, "weights-registers", "03_weights_registers", "Weights in registers", WeightsRegisters),
    Step(4, "weights-on-the-fly", "04_weights_on_the_fly", "Weights loaded on the fly, ~10 KB of shared memory", WeightsOnTheFly),
    Step(5, "two-phase-weights", "05_two_phase_weights", "Weights for the input channels loaded in two phases", TwoPhaseWeights),
    Step(6, "register-tiled", "06_register_tiled", "Register tiling on CUDA cores (FP32)", RegisterTiled),
    Step(7, "tf32", "07_tf32_implicit_gemm", "Implicit GEMM on TF32 tensor cores, fused epilogue", TF32),
    Step(8, "3xtf32", "08_3xtf32", "FP32 accuracy on tensor cores: 3xTF32", ThreeTF32),
    Step(9, "winograd", "09_winograd", "Winograd F(2×2, 5×5) in FP32", Winograd),
    Step(10, "final", "10_final", "Final: the FP32-accurate kernel chosen for the GPU", Final),
    Step(11, "hopper-tf32", "11_hopper_tf32", "Hopper's own path: TMA + wgmma implicit GEMM in TF32", HopperTF32,
         builds_on="tf32"),
    Step(12, "hopper-fp16", "12_hopper_fp16", "Hopper's path with FP16 operands", HopperFP16),
    Step(13, "hopper-3xtf32", "13_hopper_3xtf32", "FP32-accurate on Hopper's path: 3xTF32 split in the pack",
         Hopper3xTF32, builds_on="hopper-tf32"),
    Step(14, "hopper-split", "14_hopper_split", "FP32-accurate with the cross terms on BF16", HopperSplit),
])
