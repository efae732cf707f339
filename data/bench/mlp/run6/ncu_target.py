
import sys
sys.path.insert(0, "/work/main/devcopy/m19/scripts")
import numpy as np, cupy as cp
import bench_mlp_final as f
from pathlib import Path
b = f.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
wd = tuple(cp.asarray(a) for a in w)
x = cp.asarray(rng.uniform(-1, 1, size=(71, b.N_LARGE)).astype(np.float32))
y = cp.empty((4, b.N_LARGE), cp.float32)
steps = [f.NewFullRange(*v) for v in [(8, 1, 1, 2), (8, 1, 2, 2), (16, 1, 1, 2)]]
prev = '/work/main/devcopy/m19/prev'
if prev:
    steps.append(f.PrevFullRange(Path(prev) / "17_prev.cu", "prev"))
steps.append(b.Final15())
for s in steps:
    p = s.prepare(w, wd)
    s.launch(x, y, p, b.N_LARGE)
cp.cuda.Device().synchronize()
