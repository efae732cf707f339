
import sys
sys.path.insert(0, "/work/main/devcopy/s16/scripts")
import numpy as np, cupy as cp
import bench_mlp_hopper as b
import bench_mlp_s16 as s16
rng = np.random.default_rng(3)
w = b.make_weights(rng)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
for name in ['cand-r8-pf0', 'ship-r4']:
    v = [v for v in s16.VARIANTS if v[0] == name][0]
    k = s16.Kernel(*v)
    k.launch(x, y, k.prepare(w, None), b.N_LARGE)
cp.cuda.Device().synchronize()
