
import sys
sys.path.insert(0, "/work/main/devcopy/f18/scripts")
import numpy as np, cupy as cp
import bench_mlp_hopper as b, bench_mlp_f18 as f
rng = np.random.default_rng(3)
w = b.make_weights(rng)
wd = tuple(cp.asarray(a) for a in w)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
s14 = f.step14()
for s in (f.Tma(8, 2, 1, 3, s14), s14):
    p = s.prepare(w, wd)
    s.launch(x, y, p, b.N_LARGE)
cp.cuda.Device().synchronize()
