// LeNet step 05 - streams: overlap copies with computation.
//
// This step changes no device code. The kernel is step 04's (conv_restrict_unroll.cuh, shared
// by both steps), included here unchanged so that this file still names everything the step
// runs; what changes is the host side
// (kernelbook/lenet/streams.py):
//
//   * the batch is cut into chunks, and chunk i goes to stream i % n_streams as
//       host-to-device copy of its images -> this kernel on the chunk -> device-to-host copy
//     so that while one chunk computes, another copies in and a third copies out;
//   * the host buffers are pinned (page-locked) or pageable. Only pinned memory lets
//     cudaMemcpyAsync return at once and run on a copy engine; a pageable copy is staged
//     through a driver buffer and serialises with the host, which removes most of the overlap.
//
// Layer Time (copies + kernel) is what this step can move; Op Time cannot improve, since
// the same kernels do the same work (cut into smaller launches, if anything slower).
#include "conv_restrict_unroll.cuh"
