// MLP step 12 - the best half-precision kernel per test case (a dispatch file).
//
// No new kernel: the write-up's last step picks, per test case, the variant that measured
// fastest. This file compiles the candidates (steps 09, 10, 11) into one module and the host chooses by N
// (kernelbook.mlp.impls.Best: parameters `small` and `large`, switching at `switch_columns`);
//   - measured on the H100 (exploratory): step 10 (inputsLoadHidingKernel) was fastest at both
//     sizes with 8 blocks per SM, unlike the write-up, where step 09 won the 100x100 case.
// The files define their shared constants with the same values, which C allows.
#include "09_coalesced_weights.cu"
#include "10_inputs_load_hiding.cu"
#include "11_better_occupancy.cu"
