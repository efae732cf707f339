
import sys
sys.path.insert(0, "/work/main/devcopy/s17b/scripts")
import numpy as np, cupy as cp
import bench_mlp_s17 as t
b = t.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
x = cp.asarray(rng.uniform(-1, 1, size=(71, 12800)).astype(np.float32))
y = cp.empty((4, 12800), cp.float32)
steps = [t.Shipped17(src="/work/main/devcopy/s17b/cand/main17.cu")] if "/work/main/devcopy/s17b/cand/main17.cu" else []
steps += [t.Shipped17(*v, src="/work/main/devcopy/s17b/kernels/mlp/17_final_full_range.cu", tag="17cpa") for v in t.CPA[:1]]
for s in steps:
    p = s.prepare(w, None)
    for _ in range(3):
        s.launch(x, y, p, 12800)
cp.cuda.Device().synchronize()
