
import sys
sys.path.insert(0, "/work/main/scripts")
import numpy as np, cupy as cp
import bench_mlp_hopper as b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
wd = tuple(cp.asarray(a) for a in w)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
for s in (b.RegisterTiled(4, 2, 8), b.FullRange((4, 1, 3), (4, 1, 3)), b.FullRange((8, 1, 1), (8, 1, 1)), b.Final15(),
          b.TensorCore("14", "14_tensor_core_fp16.cu", "fusedTensorCoreHalfKernel", 8, 2, 1, b.f16_fragments, fp32=False)):
    p = s.prepare(w, wd)
    s.launch(x, y, p, b.N_LARGE)
cp.cuda.Device().synchronize()
