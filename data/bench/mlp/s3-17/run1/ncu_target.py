
import sys
sys.path.insert(0, "/work/main/devcopy/s17/scripts")
import numpy as np, cupy as cp
import bench_mlp_s17 as t
b = t.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
x = cp.asarray(rng.uniform(-1, 1, size=(71, 12800)).astype(np.float32))
y = cp.empty((4, 12800), cp.float32)
steps = [t.Shipped17()] + [t.Small17(*v) for v in [(2, 6), (2, 4)]]
for s in steps:
    p = s.prepare(w, None)
    for _ in range(3):
        s.launch(x, y, p, 12800)
cp.cuda.Device().synchronize()
