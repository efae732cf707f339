// MLP step 12 - the best half-precision kernel per test case (a dispatch file).
//
// No new kernel: the write-up's last step picks, per test case, the variant that measured
// fastest. This file compiles the candidates (steps 09, 10, 11) into one module and the host chooses by N
// (kernelbook.mlp.impls.Best: parameters `small` and `large`, switching at `switch_columns`);
// which candidate the recorded runs found fastest per case is on this step's page.
// The three kernels live in headers that their steps include too; they define their shared
// constants with the same values, which C allows.
#include "coalesced_weights_kernel.cuh"    // step 09
#include "inputs_load_hiding_kernel.cuh"   // step 10
#include "better_occupancy_kernel.cuh"     // step 11
