// An empty kernel: what a launch costs when the kernel does nothing. The device ceilings time it
// the way the book times every step (a CUDA graph of back-to-back calls, per call) and replayed
// alone (one call per graph replay, the method of runs recorded before the graph-of-calls timer),
// so a reader sees the timer's own floor beside microsecond-sized kernels.
extern "C" __global__ void empty_kernel() {}
