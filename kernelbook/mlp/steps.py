"""The MLP study's ordered steps: the single source of truth for its chapters and kernels."""

from __future__ import annotations

from ..steps import Step, StepList
from . import impls as i
from . import tensor as t

STEPS = StepList("mlp", [
    Step(0, "baseline", "00_baseline", "Baseline: matMulKernel + reluKernel", i.Baseline),
    Step(1, "fused-global", "01_fused_global", "Fused, intermediates in global memory", i.FusedGlobal),
    Step(2, "fused-shared", "02_fused_shared", "Fused, weights and intermediates in shared memory", i.FusedShared),
    Step(3, "whole-net-shared", "03_whole_net_shared", "Whole network in shared memory", i.WholeNetShared),
    Step(4, "shared-and-registers", "04_shared_and_registers", "Network in shared memory and registers",
         i.SharedAndRegisters),
    Step(5, "last-layer-coop", "05_last_layer_coop", "Last-layer cooperation (__shfl_xor_sync)", i.LastLayerCoop),
    Step(6, "whole-net-registers", "06_whole_net_registers", "Whole network in registers", i.WholeNetRegisters),
    Step(7, "half-precision", "07_half_precision", "Half precision", i.HalfPrecision),
    Step(8, "reduced-bank-conflicts", "08_reduced_bank_conflicts", "Reduced bank conflicts",
         i.ReducedBankConflicts),
    Step(9, "coalesced-weights", "09_coalesced_weights", "Coalesced weight reads", i.CoalescedWeights),
    Step(10, "inputs-load-hiding", "10_inputs_load_hiding", "Hiding the loading of new inputs",
         i.InputsLoadHiding),
    Step(11, "better-occupancy", "11_better_occupancy", "Better occupancy (a quarter row per thread)",
         i.BetterOccupancy),
    Step(12, "best", "12_best", "The best half-precision kernel per test case", i.Best),
    Step(13, "tensor-core-3xtf32", "13_tensor_core_3xtf32", "Fully fused on tensor cores, FP32-accurate (3xTF32)",
         t.TensorCore3xTF32),
    Step(14, "tensor-core-fp16", "14_tensor_core_fp16", "Fully fused on tensor cores in FP16", t.TensorCoreHalf),
    Step(15, "final", "15_final", "3xFP16: FP32-accurate inside half's range, a kernel per test case", t.Final,
         builds_on="tensor-core-3xtf32"),
    Step(16, "fp32-register-tiled", "16_fp32_register_tiled", "FP32 on CUDA cores, register-tiled and fused",
         i.RegisterTiled, builds_on="whole-net-registers"),
    Step(17, "final-full-range", "17_final_full_range", "Final: FP32-accurate over FP32's whole range (scaled 3xFP16)",
         t.FinalFullRange, builds_on="final"),
    Step(18, "tensor-core-fp16-tma", "18_tensor_core_fp16_tma",
         "FP16 fed by the TMA: stages for many columns, a per-warp ring for few", t.TensorCoreHalfTma,
         builds_on="tensor-core-fp16"),
    Step(19, "wgmma-full-range", "19_wgmma_full_range",
         "FP32-accurate over the whole range on Hopper's wgmma (scaled 3xFP16, TMA)", t.WgmmaFullRange,
         builds_on="final-full-range"),
])
